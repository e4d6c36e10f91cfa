"""HyperLogLog++ sketch arithmetic on numpy (operators/hyperloglog.py), without Spark: each
vectorised rule against a plain per-value Python version of the same definition."""

from __future__ import annotations

import bisect
import math

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate_merge import merge_group, merge_group_segments
from statestream.operators.hyperloglog import (
    BiasTables,
    HyperLogLogRule,
    estimate,
    leading_zeros,
    merge_word_segments,
    merge_words,
    num_words,
    precision_of,
    words_from_hashes,
)

RNG = np.random.default_rng(7)


def _hashes(n: int) -> np.ndarray:
    return RNG.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=n, dtype=np.int64)


def _plain_words(hashes, p: int) -> list[int]:
    """One key's words, value by value, straight from the definition."""
    m = 1 << p
    registers = [0] * m
    for h in hashes:
        u = int(h) & ((1 << 64) - 1)
        idx = u >> (64 - p)
        w = ((u << p) & ((1 << 64) - 1)) | (1 << (p - 1))
        value = 64 - w.bit_length() + 1
        registers[idx] = max(registers[idx], value)
    words = [0] * num_words(p)
    for idx, r in enumerate(registers):
        words[idx // 10] |= r << (6 * (idx % 10))
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def test_precision_from_the_relative_error():
    assert precision_of(0.05) == 9
    assert precision_of(0.01) == 14
    assert precision_of(0.3) == 4
    assert num_words(9) == 52 and num_words(4) == 2
    with pytest.raises(ValueError, match="at least 4"):
        precision_of(0.4)
    with pytest.raises(ValueError, match="positive"):
        precision_of(0.0)


def test_leading_zeros_is_exact():
    values = np.array([1, 2, 3, 1 << 52, (1 << 53) - 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1], dtype=np.uint64)
    values = np.concatenate([values, _hashes(1000).view(np.uint64) | np.uint64(1)])
    assert leading_zeros(values).tolist() == [64 - int(v).bit_length() for v in values]


@pytest.mark.parametrize("p", [4, 9, 14])
def test_words_from_hashes_follow_the_definition(p):
    lengths = [0, 1, 5, 300, 2]
    hashes = [_hashes(n) for n in lengths]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    words = words_from_hashes(offsets, np.concatenate(hashes), p)
    assert words.shape == (num_words(p), len(lengths))
    for key, h in enumerate(hashes):
        assert words[:, key].tolist() == _plain_words(h, p)


@pytest.mark.parametrize("split", [1, 2, 7])
def test_merging_sketches_is_the_sketch_of_the_union(split):
    """Any split of a key's values, sketched apart and merged (two-way or as a run), gives the
    sketch of all of them."""
    p = 6
    h = _hashes(200)
    parts = np.array_split(h, split)
    sketches = [words_from_hashes(np.array([0, len(x)]), x, p)[:, 0] for x in parts]
    whole = words_from_hashes(np.array([0, len(h)]), h, p)[:, 0]
    merged = sketches[0]
    for s in sketches[1:]:
        merged = merge_words(merged, s)
    assert merged.tolist() == whole.tolist()
    for k in range(num_words(p)):
        column = np.array([s[k] for s in sketches], dtype=np.int64)
        assert merge_word_segments(column, np.array([0]))[0] == whole[k]


def test_rule_merges_stored_words_and_keeps_new_keys():
    p = 4
    rule = HyperLogLogRule(p, "__h", ("w0", "w1"))
    a, b = _hashes(20), _hashes(20)
    table = pa.table({"k": ["x", "y"], "__h": pa.array([list(b), list(a)], pa.list_(pa.int64()))})
    table = rule.update_table(table)
    assert table.column_names == ["k", "w0", "w1"]
    stored = words_from_hashes(np.array([0, 20, 20]), a, p)  # x has a's sketch, y nothing stored
    state = [pa.array([stored[0, 0], None], pa.int64()), pa.array([stored[1, 0], None], pa.int64())]
    merged = merge_group(rule, state, [table.column("w0"), table.column("w1")], pa.array([True, False]))
    both = words_from_hashes(np.array([0, 40]), np.concatenate([a, b]), p)[:, 0]
    only_a = words_from_hashes(np.array([0, 20]), a, p)[:, 0]
    assert [m[0].as_py() for m in merged] == both.tolist()
    assert [m[1].as_py() for m in merged] == only_a.tolist()
    runs = merge_group_segments(rule, [pa.array([stored[0, 0], table.column("w0")[0].as_py()])], np.array([0]))
    assert runs[0].to_pylist() == [both[0]]


def _plain_estimate(words: list[int], tables: BiasTables) -> int:
    """The estimator straight from its definition (bias by sorted-table bisection, which equals
    Java's binary search on a sorted table)."""
    p = tables.p
    m = 1 << p
    registers = [((words[i // 10] & ((1 << 64) - 1)) >> (6 * (i % 10))) & 63 for i in range(m)]
    z = sum(2.0 ** -r for r in registers)
    zeros = sum(1 for r in registers if r == 0)
    alpha = {4: 0.673, 5: 0.697, 6: 0.709}.get(p)
    e = (alpha * m * m if alpha else (0.7213 / (1.0 + 1.079 / m)) * m * m) / z

    def corrected() -> float:
        if p > 18 or e >= 5.0 * m:
            return e
        est, bias = tables.raw_estimates, tables.biases
        nearest = bisect.bisect_left(est, e)
        low = max(nearest - 5, 0)
        high = min(low + 6, len(est))
        while high < len(est) and (e - est[high]) ** 2 < (e - est[low]) ** 2:
            low, high = low + 1, high + 1
        return e - sum(bias[low:high]) / (high - low)

    if zeros > 0:
        h = m * math.log(m / zeros)
        if (p <= 18 and h <= tables.threshold) or e <= 2.5 * m:
            return math.floor(h + 0.5)
    return math.floor(corrected() + 0.5)


@pytest.mark.parametrize("n", [0, 3, 40, 90, 200, 2000])
def test_estimate_follows_the_definition(n):
    p = 5
    m = 1 << p
    # a made-up, sorted table around the raw estimates these sizes give
    raw = tuple(float(x) for x in np.linspace(0.5 * m, 6 * m, 40))
    bias = tuple(float(x) for x in np.linspace(10.0, 0.0, 40))
    tables = BiasTables(p, raw, bias, threshold=20.0)
    words = words_from_hashes(np.array([0, n]), _hashes(n), p)
    got = estimate([w for w in words], tables)
    assert got.tolist() == [_plain_estimate(words[:, 0].tolist(), tables)]


def test_estimate_above_the_bias_tables_is_plain_hyperloglog():
    p = 19
    words = words_from_hashes(np.array([0, 5000]), _hashes(5000), p)
    got = estimate([w for w in words], BiasTables(p))
    assert got.tolist() == [_plain_estimate(words[:, 0].tolist(), BiasTables(p))]
    assert abs(got[0] - 5000) < 5000 * 0.05


def test_estimate_with_a_huge_register_sums_in_sparks_order():
    """A register above 53 - p makes the inverse sum order-sensitive: such a key is summed
    register by register, as Spark sums it; the others keep the fast path."""
    p = 9
    words = words_from_hashes(np.array([0, 50, 100]), _hashes(100), p)
    words[3, 0] |= 60 << 12  # register 32 of key 0 holds 60
    tables = BiasTables(p, tuple(float(x) for x in np.linspace(100, 3000, 50)), tuple(0.0 for _ in range(50)), 400.0)
    got = estimate([w for w in words], tables)
    assert got.tolist() == [_plain_estimate(words[:, k].tolist(), tables) for k in range(2)]


def test_finisher_emits_the_estimate_of_the_words():
    from statestream.operators.hyperloglog import HyperLogLogFinisher

    p = 4
    words = words_from_hashes(np.array([0, 3, 30]), _hashes(30), p)
    tables = BiasTables(p, (11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0), (1.0,) * 7, 10.0)
    table = pa.table({"k": ["a", "b"], "w0": words[0], "w1": words[1]})
    out = HyperLogLogFinisher(("w0", "w1"), "e", tables).finish(table)
    assert out.to_pylist() == estimate([words[0], words[1]], tables).tolist()
