"""Aggregation-buffer merge rules on Arrow arrays: how a stored buffer and a batch's buffer, or a
run of buffers, become one. Pure (no Spark): the state steps run them inside Spark tasks.

Spark: each ``DeclarativeAggregate``'s ``mergeExpressions`` (``Count``, ``Sum``, ``Min``/``Max``,
``First``/``Last``, ``MaxMinBy``, ``BitAggregate``, ``CentralMomentAgg``, ``Covariance``,
``PearsonCorrelation``) and the ``merge`` of the collecting ``TypedImperativeAggregate`` s
(``CollectList``/``CollectSet``). A *merge group* is one rule over one function's buffer
columns, in the function's buffer order: most rules read one column, some read several
(``moments`` reads ``n, avg, m2[, m3[, m4]]``).

Two entry points:

* ``merge_group(rule, state, batch, found)``: the stored buffers (left) with this batch's
  (right), row by row, as Spark's PartialMerge after ``StateStoreRestoreExec`` (stored row first).
* ``merge_group_segments(rule, columns, starts)``: runs of consecutive rows folded left to right,
  as ``MergingSessionsExec`` folds the rows of one session.
"""

from __future__ import annotations

import math
from typing import Any, Sequence, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MERGE_SUM0",
    "MERGE_SUM",
    "MERGE_MIN",
    "MERGE_MAX",
    "GROUP_RULES",
    "merge_buffers",
    "merge_buffer_segments",
    "merge_group",
    "merge_group_segments",
]

MERGE_SUM0 = "sum0"  # counts: null counts as 0, result never null
MERGE_SUM = "sum"  # sums: null + x = x, null + null = null, overflow is an error (ANSI)
MERGE_MIN = "min"
MERGE_MAX = "max"

#: rules over one column whose two-way merge has a direct kernel
_SIMPLE = (MERGE_SUM0, MERGE_SUM, MERGE_MIN, MERGE_MAX)

Array: TypeAlias = pa.Array | pa.ChunkedArray


def _plain(a: Array) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    return a


def merge_buffers(rule: str, state: pa.Array | pa.ChunkedArray, batch: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Merge a stored buffer column with this batch's buffer column, row by row (vectorised).

    ``state`` is null where a key has no stored buffer yet. Mirrors Spark's merge expressions:
    counts add with null as zero; sums ignore a null side and fail on overflow (ANSI mode, the
    Spark 4 default); min/max ignore nulls.
    """
    if rule == MERGE_SUM0:
        return _add(pc.fill_null(state, 0), pc.fill_null(batch, 0))
    if rule == MERGE_SUM:
        both = _add(state, batch)
        return pc.coalesce(both, state, batch)
    if rule in (MERGE_MIN, MERGE_MAX):
        return _min_max(rule, state, batch)
    raise ValueError(f"unknown merge rule {rule!r}")


def _add(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``a + b`` in the buffer's own type, failing on overflow. Arrow widens a decimal sum by one
    digit (and refuses precision 39); Spark keeps the buffer's decimal type and fails when the
    sum does not fit it, so decimals add one digit wider and are cast back (which checks)."""
    typ = a.type
    if pa.types.is_decimal(typ):
        wide = pa.decimal256(typ.precision + 2, typ.scale)
        return pc.add_checked(a.cast(wide), b.cast(typ).cast(wide)).cast(typ)
    return pc.add_checked(a, b)


def is_nested(typ: pa.DataType) -> bool:
    """Whether Arrow has no ordering kernels for ``typ`` (lists and structs), so that values
    are ordered through :func:`spark_order_ranks`."""
    return pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_struct(typ)


def spark_order_key(v: Any) -> Any:
    """A Python sort key of one value (``to_pylist``'s) that orders as Spark's ascending order of
    its type: null first (also inside arrays and structs), NaN above every number, ``-0.0``
    equal to ``0.0``, arrays element by element (a prefix first), structs field by field,
    strings by code point (UTF-8's byte order), binary by unsigned bytes."""
    if v is None:
        return (0,)
    if isinstance(v, float):
        return (1, 1) if math.isnan(v) else (1, 0, v + 0.0)
    if isinstance(v, list):
        return (1, tuple(spark_order_key(x) for x in v))
    if isinstance(v, dict):
        return (1, tuple(spark_order_key(x) for x in v.values()))
    return (1, v)


def spark_order_ranks(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Dense ranks (int64, 0 the smallest) of ``values`` under Spark's ordering of their type;
    null stays null. For the types Arrow cannot order (:func:`is_nested`): min, max and the
    ``*_by`` functions compare the ranks instead."""
    items = values.to_pylist()
    keys = sorted({spark_order_key(v) for v in items if v is not None})
    rank = {k: i for i, k in enumerate(keys)}
    return pa.array([None if v is None else rank[spark_order_key(v)] for v in items], pa.int64())


def _min_max(rule: str, a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array:
    typ = a.type
    if is_nested(typ):
        ranks = spark_order_ranks(pa.chunked_array([a, b], type=typ) if isinstance(a, pa.Array) else pa.chunked_array(a.chunks + (b.chunks if isinstance(b, pa.ChunkedArray) else [b]), type=typ))
        ra, rb = ranks.slice(0, len(a)), ranks.slice(len(a))
        pick_b = pc.or_(pc.is_null(ra), pc.fill_null(pc.less(rb, ra) if rule == MERGE_MIN else pc.greater(rb, ra), False))
        return pc.if_else(pick_b, b, a)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ):
        less = pc.less(b, a) if rule == MERGE_MIN else pc.greater(b, a)
        pick_b = pc.or_(pc.is_null(a), pc.fill_null(less, False))
        return pc.if_else(pick_b, b, a)
    # Arrow has no element-wise min/max kernel for zoned timestamps or booleans: compare them
    # as their plain storage type and cast back.
    plain = None
    if pa.types.is_timestamp(typ) and typ.tz is not None:
        plain = pa.timestamp(typ.unit)
    elif pa.types.is_boolean(typ):
        plain = pa.int8()
    if plain is not None:
        return _min_max(rule, a.cast(plain), b.cast(plain)).cast(typ)
    if rule == MERGE_MIN:
        out = pc.min_element_wise(a, b, skip_nulls=True)
    else:
        out = pc.max_element_wise(a, b, skip_nulls=True)
    if pa.types.is_floating(typ):
        # Spark orders NaN above every number; Arrow's element-wise kernels skip it
        nan_a = pc.fill_null(pc.is_nan(a), False)
        nan_b = pc.fill_null(pc.is_nan(b), False)
        if rule == MERGE_MAX:
            nan = pc.or_(nan_a, nan_b)
        else:  # NaN only when neither side holds a number
            nan = pc.and_(pc.or_(nan_a, pc.is_null(a)), pc.or_(nan_b, pc.is_null(b)))
            nan = pc.and_(nan, pc.or_(nan_a, nan_b))
        out = pc.if_else(nan, pa.scalar(float("nan"), typ), out)
    return out


def merge_buffer_segments(rule: str, values: pa.Array | pa.ChunkedArray, starts: np.ndarray) -> pa.Array:
    """Merge runs of consecutive buffer values into one buffer per run (vectorised).

    ``starts`` holds the index of the first row of every run, ascending and beginning with 0;
    run ``i`` covers ``values[starts[i]:starts[i+1]]``. This is ``merge_buffers`` folded over
    each run, as Spark's ``MergingSessionsExec`` folds the buffers of the rows that make one
    session: counts add (null as zero), sums add ignoring nulls (null only if every value is
    null; overflow of a 64-bit integer sum is an error, as in ANSI mode), min and max ignore
    nulls (a NaN is larger than any number, as in Spark).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    typ = values.type
    n_runs = len(starts)
    if n_runs == 0:
        return pa.array([], type=typ)
    if len(values) == n_runs:
        return values if rule != MERGE_SUM0 else pc.fill_null(values, pa.scalar(0, type=typ))
    starts = np.asarray(starts, dtype=np.int64)
    numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ)
    temporal = pa.types.is_timestamp(typ) or pa.types.is_date(typ) or pa.types.is_duration(typ)
    # a day-time interval (duration) also sums, as its microseconds (Arrow has no hash_sum for it)
    summed_duration = pa.types.is_duration(typ) and rule in (MERGE_SUM0, MERGE_SUM)
    if not (numeric or summed_duration or (temporal and rule in (MERGE_MIN, MERGE_MAX))):
        return _merge_segments_arrow(rule, values, starts)
    storage = values.cast(pa.int64() if pa.types.is_timestamp(typ) or pa.types.is_duration(typ) or pa.types.is_date64(typ) else (pa.int32() if pa.types.is_date32(typ) else typ))
    valid = np.asarray(pc.is_valid(storage).to_numpy(zero_copy_only=False), dtype=np.int64)
    n_valid = np.add.reduceat(valid, starts)
    floating = pa.types.is_floating(typ)
    if rule in (MERGE_SUM0, MERGE_SUM):
        filled = pc.fill_null(storage, pa.scalar(0, type=storage.type)).to_numpy(zero_copy_only=False)
        out = np.add.reduceat(filled, starts)
        if not floating:
            approx = np.add.reduceat(filled.astype(np.float64), starts)
            info = np.iinfo(filled.dtype)
            if np.any(approx > float(info.max) * 0.99) or np.any(approx < float(info.min) * 0.99):
                _check_integer_segment_sums(filled, starts, info)
        mask = None if rule == MERGE_SUM0 else n_valid == 0
    elif rule in (MERGE_MIN, MERGE_MAX):
        if floating:
            fill = np.inf if rule == MERGE_MIN else -np.inf
            ufunc: np.ufunc = np.fmin if rule == MERGE_MIN else np.maximum  # NaN: above every number
        else:
            info = np.iinfo(storage.type.to_pandas_dtype())
            fill = info.max if rule == MERGE_MIN else info.min
            ufunc = np.minimum if rule == MERGE_MIN else np.maximum
        filled = pc.fill_null(storage, pa.scalar(fill, type=storage.type)).to_numpy(zero_copy_only=False)
        out = ufunc.reduceat(filled, starts)
        mask = n_valid == 0
        if floating and rule == MERGE_MIN:
            # a run whose values are all NaN has NaN as its minimum (fmin skipped them)
            numbers = np.asarray(pc.is_valid(storage).to_numpy(zero_copy_only=False), dtype=bool) & ~np.isnan(filled)
            all_nan = (np.add.reduceat(numbers.astype(np.int64), starts) == 0) & (n_valid > 0)
            out = np.where(all_nan, np.nan, out)
    else:
        raise ValueError(f"unknown merge rule {rule!r}")
    result = pa.array(out, type=storage.type, mask=mask if mask is not None and mask.any() else None)
    return result.cast(typ) if not result.type.equals(typ) else result


def _check_integer_segment_sums(filled: np.ndarray, starts: np.ndarray, info: Any) -> None:
    """Exact check of integer run sums that came close to the type's range: Spark (ANSI mode)
    fails on overflow where numpy would wrap around."""
    bounds = list(starts) + [len(filled)]
    for i in range(len(starts)):
        total = sum(int(x) for x in filled[bounds[i] : bounds[i + 1]])
        if total > info.max or total < info.min:
            raise pa.ArrowInvalid("overflow")


def _merge_segments_arrow(rule: str, values: pa.Array, starts: np.ndarray) -> pa.Array:
    """Run-wise merge for types numpy cannot reduce (strings, decimals, booleans): Arrow's hash
    aggregation keyed by the run number (arrays and structs: min or max of their ranks)."""
    run = np.zeros(len(values), dtype=np.int64)
    run[starts[1:]] = 1
    run = np.cumsum(run)
    if is_nested(values.type) and rule in (MERGE_MIN, MERGE_MAX):
        ranks = spark_order_ranks(values)
        extreme = _merge_segments_arrow(rule, ranks, starts).to_pylist()
        where: dict[int, int] = {}  # a rank's first row (equal ranks: equal under Spark's order)
        for i, r in enumerate(ranks.to_pylist()):
            if r is not None:
                where.setdefault(r, i)
        return values.take(pa.array([None if r is None else where[r] for r in extreme], pa.int64()))
    fn = {MERGE_SUM0: "sum", MERGE_SUM: "sum", MERGE_MIN: "min", MERGE_MAX: "max"}[rule]
    opts = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0 if rule == MERGE_SUM0 else 1)
    t = pa.table({"__run": run, "__v": values})
    out = t.group_by("__run", use_threads=False).aggregate([("__v", fn, opts)])
    out = out.sort_by("__run")
    col = out.column(f"__v_{fn}").combine_chunks()
    if rule == MERGE_SUM0:
        col = pc.fill_null(col, pa.scalar(0, type=col.type))
    return col.cast(values.type) if not col.type.equals(values.type) else col


# --------------------------------------------------------------------------------------------
# merge groups: rules over several buffer columns, or over buffers numpy cannot fold directly
# --------------------------------------------------------------------------------------------


def merge_group(rule: Any, state: Sequence[Array], batch: Sequence[Array], found: Array | None = None) -> list[pa.Array]:
    """Merge one function's stored buffer columns (``state``, null where a key has no stored
    buffer; ``found`` tells which keys have one) with this batch's (``batch``), row by row.

    Order matters for ``first``, ``last``, ``max_by``/``min_by`` ties and ``concat``: the stored
    buffer is the left side, as Spark's restore emits the stored row before the new one.
    ``rule`` may also be an object with a ``merge(state, batch, found)`` method (a Python
    aggregate function's rule, ``operators/python_aggregate.py``)."""
    if not isinstance(rule, str):
        return rule.merge(state, batch, found)
    if rule in _SIMPLE:
        return [merge_buffers(rule, state[0], batch[0])]
    batch = [_plain(b) for b in batch]
    n = len(batch[0])
    if n == 0:
        return list(batch)
    state = [_plain(s).cast(b.type) if not _plain(s).type.equals(b.type) else _plain(s) for s, b in zip(state, batch)]
    order = np.empty(2 * n, dtype=np.int64)
    order[0::2] = np.arange(n)
    order[1::2] = np.arange(n) + n
    take = pa.array(order)
    both = [pa.concat_arrays([s, b]).take(take) for s, b in zip(state, batch)]
    merged = merge_group_segments(rule, both, np.arange(0, 2 * n, 2, dtype=np.int64))
    if found is None:
        return merged
    has = pc.fill_null(_plain(found), False)
    return [pc.if_else(has, m, b) for m, b in zip(merged, batch)]


def merge_group_segments(rule: str, columns: Sequence[Array], starts: np.ndarray) -> list[pa.Array]:
    """Fold runs of consecutive buffer rows into one buffer per run, left to right. ``starts``
    holds the first row of every run, ascending and beginning with 0."""
    columns = [_plain(c) for c in columns]
    starts = np.asarray(starts, dtype=np.int64)
    if not isinstance(rule, str):  # a rule object (HyperLogLog++'s sketch words)
        return rule.merge_segments(columns, starts)
    if rule in _SIMPLE:
        return [merge_buffer_segments(rule, columns[0], starts)]
    try:
        fn = GROUP_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown merge rule {rule!r}") from None
    if len(starts) == 0:
        return [c.slice(0, 0) for c in columns]
    return fn(columns, starts)


def _ends(starts: np.ndarray, n: int) -> np.ndarray:
    return np.append(starts[1:], n)


def _f64(a: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(a.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), dtype=np.float64)


def _bools(a: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)


def _run_reference(n: np.ndarray, means: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row, the mean of the first non-empty buffer of its run (0 for an empty run): moments
    are shifted by it, so buffers with equal means give exactly zero deviations (a constant
    column keeps ``m2 == 0`` through any merge, as Spark's pairwise rule keeps it)."""
    rows = len(n)
    first = np.minimum.reduceat(np.where(n > 0, np.arange(rows), rows), starts)
    ref = np.where(first < rows, means[np.minimum(first, rows - 1)], 0.0)
    return np.repeat(ref, np.diff(np.append(starts, rows)))


def _shifted_mean(n: np.ndarray, means: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The run's common mean and each buffer's deviation from it, computed as offsets from the
    run's reference mean (``_run_reference``)."""
    lengths = np.diff(np.append(starts, len(n)))
    total = np.add.reduceat(n, starts)
    ref = _run_reference(n, means, starts)
    off = np.where(n > 0, means - ref, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(total > 0, np.add.reduceat(n * off, starts) / np.where(total > 0, total, 1.0), 0.0)
    mean = np.where(total > 0, ref[np.minimum(starts, len(n) - 1)] + shift, 0.0)
    d = np.where(n > 0, off - np.repeat(shift, lengths), 0.0)
    return mean, d


def _moments(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``CentralMomentAgg``'s buffers ``n, avg, m2[, m3[, m4]]``: the moments of each run about
    the run's common mean, from each buffer's moments about its own mean (``d`` is a buffer's
    mean minus the common mean; ``M_k' = sum(M_k + sum_j C(k,j) d^j M_{k-j})``, ``M_1 = 0``)."""
    n, avg, *ms = (_f64(c) for c in columns)
    total = np.add.reduceat(n, starts)
    mean, d = _shifted_mean(n, avg, starts)
    out = [total, mean]
    m2 = ms[0]
    out.append(np.add.reduceat(m2 + n * d * d, starts))
    if len(ms) >= 2:
        m3 = ms[1]
        out.append(np.add.reduceat(m3 + 3.0 * d * m2 + n * d**3, starts))
    if len(ms) >= 3:
        m4 = ms[2]
        out.append(np.add.reduceat(m4 + 4.0 * d * m3 + 6.0 * d * d * m2 + n * d**4, starts))
    return [pa.array(o, pa.float64()) for o in out]


def _covariance(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``Covariance``'s ``n, xAvg, yAvg, ck`` and ``PearsonCorrelation``'s extra ``xMk, yMk``:
    co-moments of each run about the run's common means."""
    n, xa, ya, ck, *mk = (_f64(c) for c in columns)
    total = np.add.reduceat(n, starts)
    mx, dx = _shifted_mean(n, xa, starts)
    my, dy = _shifted_mean(n, ya, starts)
    out = [total, mx, my, np.add.reduceat(ck + n * dx * dy, starts)]
    if mk:
        out.append(np.add.reduceat(mk[0] + n * dx * dx, starts))
        out.append(np.add.reduceat(mk[1] + n * dy * dy, starts))
    return [pa.array(o, pa.float64()) for o in out]


def _first_last(last: bool):
    def fold(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
        """``First``/``Last``'s ``(value, valueSet)``: the first (last) buffer of the run whose
        value is set; unset when none is."""
        value, value_set = columns
        n = len(value)
        is_set = _bools(value_set)
        pos = np.arange(n, dtype=np.int64)
        if last:
            pick = np.maximum.reduceat(np.where(is_set, pos, -1), starts)
            ok = pick >= starts
        else:
            pick = np.minimum.reduceat(np.where(is_set, pos, n), starts)
            ok = pick < _ends(starts, n)
        taken = value.take(pa.array(np.where(ok, pick, starts)))
        taken = pc.if_else(pa.array(ok), taken, pa.nulls(len(starts), value.type))
        return [taken, pa.array(ok)]

    return fold


def _max_min_by(is_max: bool):
    def fold(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
        """``MaxMinBy``'s ``(valueWithExtremumOrdering, extremumOrdering)``: the value of the
        buffer with the largest (smallest) ordering; buffers with a null ordering are ignored,
        and on a tie the later buffer wins (Spark keeps the left side only when it is strictly
        better)."""
        value, ordering = columns
        n = len(value)
        run = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(np.append(starts, n)))
        valid = np.flatnonzero(_bools(pc.is_valid(ordering)))
        out_value = pa.nulls(len(starts), value.type)
        out_ord = pa.nulls(len(starts), ordering.type)
        if len(valid) == 0:
            return [out_value, out_ord]
        ords = ordering.take(pa.array(valid))
        if is_nested(ords.type):
            ords = spark_order_ranks(ords)
        keys = {"run": run[valid], "nan": np.zeros(len(valid), dtype=bool), "ord": ords, "pos": valid}
        if pa.types.is_floating(ords.type):
            # Spark orders NaN above every number; Arrow's sort puts it last in either direction
            nan = _bools(pc.is_nan(ords))
            keys["nan"] = nan
            keys["ord"] = pc.if_else(pa.array(nan), pa.scalar(0.0, ords.type), ords)
        direction = "ascending" if is_max else "descending"
        idx = pc.sort_indices(
            pa.table(keys),
            sort_keys=[("run", "ascending"), ("nan", direction), ("ord", direction), ("pos", "ascending")],
        ).to_numpy()
        runs = run[valid][idx]
        last_of_run = np.flatnonzero(np.append(runs[1:] != runs[:-1], True))
        chosen = valid[idx[last_of_run]]
        target = runs[last_of_run]
        scatter = np.full(len(starts), -1, dtype=np.int64)
        scatter[target] = chosen
        ok = scatter >= 0
        safe = pa.array(np.where(ok, scatter, 0))
        mask = pa.array(ok)
        out_value = pc.if_else(mask, value.take(safe), out_value)
        out_ord = pc.if_else(mask, ordering.take(safe), out_ord)
        return [out_value, out_ord]

    return fold


def _bitwise(op: str):
    ufunc = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor}[op]

    def fold(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
        """``BitAggregate``: the bitwise fold of the non-null buffers; null when all are null."""
        (values,) = columns
        typ = values.type
        identity = -1 if op == "bit_and" else 0
        filled = np.asarray(pc.fill_null(values, pa.scalar(identity, typ)).to_numpy(zero_copy_only=False))
        out = ufunc.reduceat(filled, starts)
        n_valid = np.add.reduceat(_bools(pc.is_valid(values)).astype(np.int64), starts)
        return [pa.array(out, typ, mask=n_valid == 0)]

    return fold


def _list_concat(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``CollectList``: the lists of the run, concatenated in order (a null list is empty)."""
    (lists,) = columns
    flat = pc.list_flatten(lists)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.add.reduceat(lengths, starts))]).astype(np.int32)
    return [pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, type=lists.type)]


def _list_union(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``CollectSet``: the distinct elements of the run's lists, in order of first appearance."""
    (lists,) = columns
    (concat,) = _list_concat(columns, starts)
    flat = pc.list_flatten(concat)
    parent = pc.list_parent_indices(concat)
    if len(flat) == 0:
        return [concat]
    values = flat
    if pa.types.is_nested(flat.type):
        # Arrow cannot hash structs, lists or maps: equal values have equal Python reprs
        values = pa.array([repr(v) for v in flat.to_pylist()], pa.string())
    t = pa.table({"p": parent, "v": values, "i": np.arange(len(flat), dtype=np.int64)})
    firsts = t.group_by(["p", "v"], use_threads=False).aggregate([("i", "min")]).column("i_min")
    keep = np.sort(np.asarray(firsts.to_numpy(), dtype=np.int64))
    kept_parent = np.asarray(parent.to_numpy(), dtype=np.int64)[keep]
    counts = np.bincount(kept_parent, minlength=len(starts))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return [pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat.take(pa.array(keep)), type=lists.type)]


def _try_sum(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``Sum`` in TRY mode over an integral column, buffers ``(sum, isEmpty)``: a null sum in a
    non-empty buffer is an overflow and stays null; a new overflow gives null, not an error."""
    sums, empty = columns
    is_empty = _bools(empty)
    overflowed = (~is_empty) & ~_bools(pc.is_valid(sums))
    any_overflow = np.add.reduceat(overflowed.astype(np.int64), starts) > 0
    all_empty = np.logical_and.reduceat(is_empty, starts)
    filled = np.asarray(pc.fill_null(sums, 0).cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    bounds = np.append(starts, len(filled))
    approx = np.add.reduceat(filled.astype(np.float64), starts)
    out: list[int | None] = [int(v) for v in np.add.reduceat(filled, starts)]
    info = np.iinfo(np.int64)
    for i in np.flatnonzero((np.abs(approx) > float(info.max) * 0.99) | any_overflow):
        total = sum(int(x) for x in filled[bounds[i] : bounds[i + 1]])
        out[i] = None if any_overflow[i] or total > info.max or total < info.min else total
    return [pa.array(out, pa.int64()).cast(sums.type), pa.array(all_empty)]


def _decimal_sums(sums: pa.Array, starts: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Each run's sum of decimal buffers (a null sum counts as zero), one digit wider than the
    buffer type so an overflow can be told apart, and whether any buffer of the run is null."""
    typ = sums.type
    wide = pa.decimal256(min(76, typ.precision + 2), typ.scale)
    any_null = np.add.reduceat(_bools(pc.is_null(sums)).astype(np.int64), starts) > 0
    if len(starts) * 2 == len(sums) and np.array_equal(starts, np.arange(0, len(sums), 2)):
        # the state step's pairs (stored, new): one vectorised add
        left = sums.take(pa.array(starts)).cast(wide)
        right = sums.take(pa.array(starts + 1)).cast(wide)
        return pc.add_checked(pc.fill_null(left, 0), pc.fill_null(right, 0)), any_null
    total = _merge_segments_arrow(MERGE_SUM0, sums.cast(wide), starts)
    return total, any_null


def _fits(values: pa.Array, typ: pa.DataType) -> np.ndarray:
    """Which decimal values fit ``typ``'s precision."""
    limit = pa.scalar(10 ** (typ.precision - typ.scale), pa.decimal256(76, 0)).cast(values.type)
    return _bools(pc.fill_null(pc.less(pc.abs(values), limit), True))


def _decimal_sum(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``Sum`` of decimals, buffers ``(sum, isEmpty)``: sums add (a null sum counts as zero),
    ``isEmpty`` holds while every buffer is empty; a sum that leaves the buffer's precision is an
    error, as in ANSI mode."""
    sums, empty = columns
    total, _ = _decimal_sums(sums, starts)
    fits = _fits(total, sums.type)
    if not fits.all():
        raise ArithmeticError(
            f"[ARITHMETIC_OVERFLOW] a decimal sum does not fit {sums.type} (Spark: NUMERIC_VALUE_OUT_OF_RANGE)"
        )
    return [total.cast(sums.type), pa.array(np.logical_and.reduceat(_bools(empty), starts))]


def _try_decimal_sum(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``try_sum`` of decimals: as ``_decimal_sum``, but an overflow gives a null sum (in a
    non-empty buffer), which stays null."""
    sums, empty = columns
    is_empty = _bools(empty)
    overflowed = np.add.reduceat((~is_empty & _bools(pc.is_null(sums))).astype(np.int64), starts) > 0
    total, _ = _decimal_sums(sums, starts)
    bad = overflowed | ~_fits(total, sums.type)
    safe = pc.if_else(pa.array(bad), pa.scalar(0, total.type), total).cast(sums.type)
    return [pc.if_else(pa.array(bad), pa.scalar(None, sums.type), safe), pa.array(np.logical_and.reduceat(is_empty, starts))]


def _product(columns: list[pa.Array], starts: np.ndarray) -> list[pa.Array]:
    """``Product``: the product of the non-null buffers; null when all are null."""
    (values,) = columns
    filled = np.asarray(pc.fill_null(values.cast(pa.float64()), 1.0).to_numpy(zero_copy_only=False), dtype=np.float64)
    n_valid = np.add.reduceat(_bools(pc.is_valid(values)).astype(np.int64), starts)
    return [pa.array(np.multiply.reduceat(filled, starts), pa.float64(), mask=n_valid == 0)]


#: multi-column (or list) rules, by name
GROUP_RULES: dict[str, Any] = {
    "moments": _moments,
    "covariance": _covariance,
    "first": _first_last(last=False),
    "last": _first_last(last=True),
    "max_by": _max_min_by(is_max=True),
    "min_by": _max_min_by(is_max=False),
    "bit_and": _bitwise("bit_and"),
    "bit_or": _bitwise("bit_or"),
    "bit_xor": _bitwise("bit_xor"),
    "concat": _list_concat,
    "union": _list_union,
    "try_sum": _try_sum,
    "decimal_sum": _decimal_sum,
    "try_decimal_sum": _try_decimal_sum,
    "product": _product,
}
