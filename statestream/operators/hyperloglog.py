"""HyperLogLog++ on Arrow and numpy: the register words of ``approx_count_distinct``, as Spark
keeps them in its aggregation buffer and its state store.

Why statestream keeps Spark's layout: the state value of ``approx_count_distinct(x, rsd)`` in
Spark is the sketch itself, ``MS[0]``, ``MS[1]``, ... ``MS[W-1]`` (longs), ``2^p`` six-bit
registers packed ten to a word, low bits first (``p`` from ``rsd``, ``W = 2^p // 10 + 1``). A
state reader shows those words, the state stays bounded whatever the key's input, and the
result is a pure function of the words, so keeping the same words gives the same estimate.

Facts of Spark's HyperLogLog++ that this module follows:

* a value's 64-bit hash is Spark's ``xxhash64`` with seed 42 (computed by Spark on the batch
  side, floats normalised first: ``-0.0`` as ``0.0``); register ``idx`` is the hash's top ``p``
  bits, and its candidate value is one more than the number of leading zeros of the remaining
  bits (the hash shifted left by ``p``, with bit ``p - 1`` set so that it is never zero);
* a register keeps the largest candidate; two sketches merge register by register with ``max``;
* the estimate is the HyperLogLog++ one: linear counting while some registers are zero and it is
  below the precision's threshold, else the harmonic-mean estimate corrected by the empirical
  bias (the mean of the six nearest points of the precision's table, found with a binary
  search), rounded half up. The threshold and bias tables are read from the running Spark
  (``plan/hyperloglog.py``), never copied.

Everything here is pure (no Spark) and vectorised over keys: the state steps run it inside
Spark tasks, and the final estimate runs as a scalar Arrow UDF.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "REGISTER_SIZE",
    "REGISTERS_PER_WORD",
    "precision_of",
    "num_words",
    "leading_zeros",
    "register_updates",
    "words_from_hashes",
    "merge_words",
    "merge_word_segments",
    "merge_sketch_segments",
    "BiasTables",
    "estimate",
    "HyperLogLogRule",
    "HyperLogLogFinisher",
]

REGISTER_SIZE = 6
REGISTERS_PER_WORD = 10
_MASK = np.uint64((1 << REGISTER_SIZE) - 1)
#: neighbours averaged for the bias correction
_NEIGHBOURS = 6
#: precisions with an empirical bias table (HyperLogLog++ is plain HyperLogLog from 19 on)
MAX_BIAS_PRECISION = 18


def precision_of(rsd: float) -> int:
    """The number of index bits ``p`` for a requested relative standard deviation: the smallest
    whole ``p`` with ``1.106 / sqrt(2^p) <= rsd``, as Spark rounds it (up). Spark needs ``p >= 4``
    (an error of at most 39%)."""
    if not rsd > 0:
        raise ValueError(f"approx_count_distinct: the relative standard deviation must be positive, got {rsd}")
    p = math.ceil(2.0 * math.log(1.106 / rsd) / math.log(2.0))
    if p < 4:
        raise ValueError(
            f"approx_count_distinct: a relative standard deviation of {rsd} needs fewer than 4 index bits; "
            "HyperLogLog++ needs at least 4 (use rsd <= 0.39)"
        )
    return p


def num_words(p: int) -> int:
    """How many longs hold ``2^p`` registers, ten whole registers a word (Spark's buffer size)."""
    return (1 << p) // REGISTERS_PER_WORD + 1


def leading_zeros(x: np.ndarray) -> np.ndarray:
    """The number of leading zero bits of each non-zero 64-bit word (exact, by halving)."""
    x = np.asarray(x, dtype=np.uint64).copy()
    n = np.zeros(len(x), dtype=np.int64)
    for width in (32, 16, 8, 4, 2, 1):
        top_empty = (x >> np.uint64(64 - width)) == 0
        n += np.where(top_empty, width, 0)
        x = np.where(top_empty, x << np.uint64(width), x)
    return n


def register_updates(hashes: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(register index, candidate value) of each 64-bit hash."""
    u = np.asarray(hashes, dtype=np.int64).view(np.uint64)
    idx = (u >> np.uint64(64 - p)).astype(np.int64)
    w = (u << np.uint64(p)) | np.uint64(1 << (p - 1))
    return idx, leading_zeros(w) + 1


def words_from_hashes(offsets: np.ndarray, hashes: np.ndarray, p: int) -> np.ndarray:
    """The sketch words of each key, shape ``(num_words(p), keys)``: key ``i``'s hashes are
    ``hashes[offsets[i]:offsets[i + 1]]``. Each register keeps its largest candidate."""
    offsets = np.asarray(offsets, dtype=np.int64)
    keys = len(offsets) - 1
    words = np.zeros((num_words(p), keys), dtype=np.int64)
    if len(hashes) == 0 or keys <= 0:
        return words
    key = np.repeat(np.arange(keys, dtype=np.int64), np.diff(offsets))
    idx, value = register_updates(hashes, p)
    # one entry per (key, register), keeping the largest value: sort by (key, register, value)
    packed = np.sort((key << (p + REGISTER_SIZE)) | (idx << REGISTER_SIZE) | value)
    register = packed >> REGISTER_SIZE
    last = np.append(register[1:] != register[:-1], True)
    packed = packed[last]
    key = packed >> (p + REGISTER_SIZE)
    idx = (packed >> REGISTER_SIZE) & ((1 << p) - 1)
    value = packed & int(_MASK)
    word = idx // REGISTERS_PER_WORD
    contribution = value << (REGISTER_SIZE * (idx - word * REGISTERS_PER_WORD))
    # the registers of one (key, word) are adjacent and disjoint in bits: their sum is the word
    slot = word * keys + key
    starts = np.flatnonzero(np.append(True, slot[1:] != slot[:-1]))
    words.reshape(-1)[slot[starts]] = np.add.reduceat(contribution, starts)
    return words


def _registers_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Register-wise maximum of two arrays of words."""
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    out = np.zeros(len(a), dtype=np.uint64)
    for i in range(REGISTERS_PER_WORD):
        shift = np.uint64(REGISTER_SIZE * i)
        out |= np.maximum((ua >> shift) & _MASK, (ub >> shift) & _MASK) << shift
    return out.view(np.int64)


def merge_words(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two sketches' word ``k`` merged key by key (register-wise maximum). A zero word on either
    side (all its registers empty, the common case for small keys) merges by a plain ``or``."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = a | b
    both = (a != 0) & (b != 0)
    if both.any():
        out[both] = _registers_max(a[both], b[both])
    return out


def merge_word_segments(words: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Runs of consecutive words folded into one per run, register-wise maximum (``starts``:
    each run's first row, ascending from 0)."""
    words = np.asarray(words, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) == 0 or len(words) == 0:
        return words[:0]
    u = words.view(np.uint64)
    out = np.zeros(len(starts), dtype=np.uint64)
    for i in range(REGISTERS_PER_WORD):
        shift = np.uint64(REGISTER_SIZE * i)
        registers = ((u >> shift) & _MASK).astype(np.int64)
        out |= np.maximum.reduceat(registers, starts).astype(np.uint64) << shift
    return out.view(np.int64)


def merge_sketch_segments(columns: Sequence[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``merge_word_segments`` over every word column of a sketch (a null word is empty)."""
    out = []
    for c in columns:
        words = np.asarray(pc.fill_null(_plain(c).cast(pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        out.append(pa.array(merge_word_segments(words, starts), pa.int64()))
    return out


@dataclass(frozen=True)
class BiasTables:
    """HyperLogLog++'s empirical tables for one precision ``p``: the raw estimates (as Spark
    orders them) with their biases, and the linear-counting threshold; empty above 18."""

    p: int
    raw_estimates: tuple[float, ...] = ()
    biases: tuple[float, ...] = ()
    threshold: float = 0.0


def _java_binary_search(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Java's ``Arrays.binarySearch`` on doubles, for each key: the index of a match, else
    ``-(insertion point) - 1``. The bias table is not strictly sorted everywhere, so the path
    of the search (not only the key's rank) decides the result; it is followed exactly."""
    low = np.zeros(len(keys), dtype=np.int64)
    high = np.full(len(keys), len(table) - 1, dtype=np.int64)
    found = np.full(len(keys), -1, dtype=np.int64)
    active = low <= high
    while active.any():
        mid = (low + high) >> 1
        mid_value = table[np.where(active, mid, 0)]
        less = active & (mid_value < keys)
        greater = active & (mid_value > keys)
        equal = active & ~less & ~greater
        key_bits = keys.view(np.int64)
        mid_bits = mid_value.view(np.int64)
        # equal by value: Java compares the bit patterns (0.0 against -0.0)
        low = np.where(less | (equal & (mid_bits < key_bits)), mid + 1, low)
        high = np.where(greater | (equal & (mid_bits > key_bits)), mid - 1, high)
        hit = equal & (mid_bits == key_bits)
        found = np.where(hit, mid, found)
        active = (low <= high) & (found < 0)
    return np.where(found >= 0, found, -(low + 1))


def _bias(e: np.ndarray, tables: BiasTables) -> np.ndarray:
    """The bias of each raw estimate: the mean bias of the table's ``_NEIGHBOURS`` estimates
    nearest to it (the window slides right while its next point is nearer than its first)."""
    estimates = np.asarray(tables.raw_estimates, dtype=np.float64)
    biases = np.asarray(tables.biases, dtype=np.float64)
    n = len(estimates)
    ix = _java_binary_search(estimates, e)
    nearest = np.where(ix < 0, -(ix + 1), ix)
    low = np.maximum(nearest - _NEIGHBOURS + 1, 0)
    high = np.minimum(low + _NEIGHBOURS, n)
    while True:
        inside = high < n
        safe_high = np.where(inside, high, 0)
        move = inside & ((e - estimates[safe_high]) ** 2 < (e - estimates[low]) ** 2)
        if not move.any():
            break
        low = low + move
        high = high + move
    total = np.zeros(len(e), dtype=np.float64)
    for j in range(_NEIGHBOURS):
        at = low + j
        total = total + np.where(at < high, biases[np.minimum(at, n - 1)], 0.0)
    return total / (high - low)


def _alpha_m2(p: int) -> float:
    m = 1 << p
    if p == 4:
        return 0.673 * m * m
    if p == 5:
        return 0.697 * m * m
    if p == 6:
        return 0.709 * m * m
    return (0.7213 / (1.0 + 1.079 / m)) * m * m


def _ordered_inverse_sum(words: Sequence[np.ndarray], key: int, m: int) -> float:
    """Spark's sum of ``2^-register`` for one key, register by register in order (only needed
    when a register is so large that the sum's order could change its rounding)."""
    total = 0.0
    for k, word in enumerate(words):
        u = int(word[key]) & ((1 << 64) - 1)
        for i in range(min(REGISTERS_PER_WORD, m - k * REGISTERS_PER_WORD)):
            total += 1.0 / (1 << ((u >> (REGISTER_SIZE * i)) & 63))
    return total


def estimate(words: Sequence[np.ndarray], tables: BiasTables) -> np.ndarray:
    """The cardinality estimate (long) of each key's sketch; ``words[k]`` is word ``k`` of every
    key.

    Spark adds ``2^-register`` over the registers in order. Every term is a power of two no
    smaller than ``2^-max_register`` and the sum is at most ``2^p``, so while ``p +
    max_register <= 53`` each partial sum is exact and the order cannot matter: the sum is
    computed from the non-zero registers only (a key's sketch is mostly zero words), and a key
    past that bound (a register above ``53 - p``, a chance of about ``2^-(53 - p)`` per value)
    is summed in Spark's order."""
    p = tables.p
    m = 1 << p
    keys = len(words[0]) if len(words) else 0
    zeros = np.full(keys, float(m))  # registers at 0 (each adds 2^0 = 1 to the inverse sum)
    fractions = np.zeros(keys, dtype=np.float64)  # the non-zero registers' 2^-register
    largest = np.zeros(keys, dtype=np.int64)
    for k, word in enumerate(words):
        in_word = min(REGISTERS_PER_WORD, m - k * REGISTERS_PER_WORD)
        if in_word <= 0:
            break
        word = np.asarray(word, dtype=np.int64)
        at = np.flatnonzero(word)
        if len(at) == 0:
            continue
        u = word[at].view(np.uint64)
        for i in range(in_word):
            register = ((u >> np.uint64(REGISTER_SIZE * i)) & _MASK).astype(np.int64)
            set_ = register != 0
            zeros[at] -= set_
            fractions[at] += np.where(set_, np.ldexp(1.0, -register), 0.0)
            largest[at] = np.maximum(largest[at], register)
    z_inverse = zeros + fractions
    for key in np.flatnonzero(largest > 53 - p):
        z_inverse[key] = _ordered_inverse_sum(words, int(key), m)
    e = _alpha_m2(p) / z_inverse if keys else z_inverse
    corrected = e.copy()
    if p <= MAX_BIAS_PRECISION:
        small = e < 5.0 * m
        if small.any():
            corrected[small] = e[small] - _bias(e[small], tables)
    with np.errstate(divide="ignore"):
        linear = m * np.log(m / np.where(zeros > 0, zeros, 1.0))
    use_linear = (zeros > 0) & (((p <= MAX_BIAS_PRECISION) & (linear <= tables.threshold)) | (e <= 2.5 * m))
    result = np.where(use_linear, linear, corrected)
    # Java's Math.round: half up
    return np.floor(result + 0.5).astype(np.int64)


@dataclass(frozen=True)
class HyperLogLogFinisher:
    """The estimate of one ``approx_count_distinct`` call computed inside the aggregation's
    state step, from the words it already holds: the step emits this one column instead of the
    sketch's words, so the words never travel back to Spark."""

    columns: tuple[str, ...]
    output: str
    tables: BiasTables

    def finish(self, table: pa.Table) -> pa.Array:
        words = [
            np.asarray(pc.fill_null(_plain(table.column(c)).cast(pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
            for c in self.columns
        ]
        if table.num_rows == 0:
            return pa.array([], pa.int64())
        return pa.array(estimate(words, self.tables), pa.int64())


@dataclass(frozen=True)
class HyperLogLogRule:
    """The merge rule of one ``approx_count_distinct`` call in the aggregation state step.

    The batch side hands each key's value hashes (``input_column``, a list of longs); the step
    turns them into sketch words (``columns``) before merging them with the stored words."""

    p: int
    input_column: str
    columns: tuple[str, ...]

    def update_table(self, table: pa.Table) -> pa.Table:
        """``table`` with the hash lists replaced by each key's sketch words."""
        lists = table.column(self.input_column)
        lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
        if lists.null_count:
            lists = pc.fill_null(lists, pa.scalar([], type=lists.type))
        offsets = np.asarray(lists.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        offsets = offsets - offsets[0] if len(offsets) else np.zeros(1, dtype=np.int64)
        hashes = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
        words = words_from_hashes(offsets, hashes, self.p)
        table = table.drop_columns([self.input_column])
        for column, word in zip(self.columns, words):
            table = table.append_column(pa.field(column, pa.int64()), pa.array(word, pa.int64()))
        return table

    def merge(self, state: Sequence[Any], batch: Sequence[Any], found: Any = None) -> list[pa.Array]:
        """The batch's words merged register-wise with the stored ones (a key without stored
        words keeps the batch's)."""
        out = []
        for s, b in zip(state, batch):
            stored = np.asarray(pc.fill_null(_plain(s).cast(pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
            new = np.asarray(pc.fill_null(_plain(b).cast(pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
            out.append(pa.array(merge_words(stored, new), pa.int64()))
        return out

    def merge_segments(self, columns: Sequence[Any], starts: np.ndarray) -> list[pa.Array]:
        """Runs of per-row sketches folded into one per run (a session's rows)."""
        return merge_sketch_segments(columns, starts)


def _plain(a: Any) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    return a
