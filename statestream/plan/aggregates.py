"""Aggregate decomposition: each aggregate function as partial buffers, a merge rule and a final
expression.

Spark: ``AggregateFunction`` with its ``aggBufferAttributes``, ``mergeExpressions`` and
``evaluateExpression``; ``AggUtils.planStreamingAggregation`` uses them in the Partial,
PartialMerge and Final modes. State stores *buffers*, never final results, so ``avg`` is kept as
``(sum, count)`` and only turned into a mean after the state step.

Two halves:

* ``decompose_aggregate`` reads a PySpark aggregate ``Column`` (its unresolved node tree) and
  returns an ``AggregateCall``: which function, its argument columns, the buffers.
* ``merge_buffers`` is the pure merge rule on Arrow arrays (state buffer with batch buffer), used
  inside the state step. It has no pyspark dependency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "BufferField",
    "AggregateCall",
    "decompose_aggregate",
    "merge_buffers",
    "merge_buffer_segments",
    "SUPPORTED_FUNCTIONS",
    "UnsupportedAggregateError",
]

#: merge rules a buffer can have
MERGE_SUM0 = "sum0"  # counts: null counts as 0, result never null
MERGE_SUM = "sum"  # sums: null + x = x, null + null = null, overflow is an error (ANSI)
MERGE_MIN = "min"
MERGE_MAX = "max"

SUPPORTED_FUNCTIONS = ("count", "sum", "avg", "mean", "min", "max")


class UnsupportedAggregateError(ValueError):
    """An aggregate expression statestream cannot decompose yet."""


@dataclass(frozen=True)
class BufferField:
    """One aggregation-buffer column: its Spark-side name in the state schema (``count``,
    ``sum``...), the internal column name, and how two buffers merge."""

    spark_name: str
    column: str
    merge: str


@dataclass(frozen=True)
class AggregateCall:
    """An aggregate function applied in a streaming aggregation.

    ``function`` is the canonical name (``count``, ``sum``, ``avg``, ``min``, ``max``);
    ``args`` the argument columns (PySpark ``Column`` objects, unresolved, so they re-resolve on
    every batch DataFrame); ``output_name`` the name Spark gives the result column.
    """

    function: str
    args: tuple[Any, ...]
    is_distinct: bool
    output_name: str
    buffers: tuple[BufferField, ...]
    sql: str

    def partial_columns(self) -> list["Column"]:
        """The Spark aggregate columns that compute this call's buffers for one batch (Spark's
        Partial + PartialMerge: a batch aggregation yields one merged buffer row per key)."""
        from pyspark.sql import functions as F

        arg = self.args[0] if self.args else F.lit(1)
        f = self.function
        if f == "count":
            cols = [F.count(arg)]
        elif f == "sum":
            cols = [F.sum(arg)]
        elif f == "avg":
            cols = [F.sum(arg.cast("double")), F.count(arg)]
        elif f == "min":
            cols = [F.min(arg)]
        elif f == "max":
            cols = [F.max(arg)]
        else:  # pragma: no cover - guarded by decompose_aggregate
            raise UnsupportedAggregateError(f)
        return [c.alias(b.column) for c, b in zip(cols, self.buffers)]

    def row_columns(self) -> list["Column"]:
        """This call's buffers for one input row on its own: Spark's Partial update applied to
        the initial buffer and a single row (count: 1 or 0, sum/min/max: the value, avg: the
        value as a double and 1 or 0). Merging these per-row buffers gives what
        ``partial_columns`` computes for a group; the caller casts them to the buffer types."""
        from pyspark.sql import functions as F

        arg = self.args[0] if self.args else F.lit(1)
        counted = F.when(arg.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("long")
        f = self.function
        if f == "count":
            cols = [counted]
        elif f in ("sum", "min", "max"):
            cols = [arg]
        elif f == "avg":
            cols = [arg.cast("double"), counted]
        else:  # pragma: no cover - guarded by decompose_aggregate
            raise UnsupportedAggregateError(f)
        return cols

    def final_column(self) -> "Column":
        """The Final-mode expression over the merged buffers (Spark's evaluateExpression)."""
        from pyspark.sql import functions as F

        cols = [F.col(b.column) for b in self.buffers]
        if self.function == "avg":
            s, c = cols
            return F.when(c == 0, F.lit(None)).otherwise(s / c)
        return cols[0]


_ALIASES = {"mean": "avg", "count_if": None}


def _buffers(function: str, index: int) -> tuple[BufferField, ...]:
    p = f"__b{index}"
    if function == "count":
        return (BufferField("count", f"{p}_count", MERGE_SUM0),)
    if function == "sum":
        return (BufferField("sum", f"{p}_sum", MERGE_SUM),)
    if function == "avg":
        return (BufferField("sum", f"{p}_sum", MERGE_SUM), BufferField("count", f"{p}_count", MERGE_SUM0))
    if function == "min":
        return (BufferField("min", f"{p}_min", MERGE_MIN),)
    if function == "max":
        return (BufferField("max", f"{p}_max", MERGE_MAX),)
    raise UnsupportedAggregateError(function)


def _column_from_node(jvm: Any, node: Any) -> "Column":
    from pyspark.sql import Column

    return Column(jvm.org.apache.spark.sql.Column(node))


def column_node(col: "Column") -> Any:
    """The unresolved ``ColumnNode`` behind a classic PySpark column."""
    return col._jc.node()  # noqa: SLF001 - the only way to read a classic Column's expression


def decompose_aggregate(col: "Column", index: int, output_name: str) -> AggregateCall:
    """Decompose ``F.<fn>(args)[.alias(name)]`` into an ``AggregateCall``.

    ``output_name`` is the result column name, read from the batch-analysed template so it is
    exactly what Spark would call it. Raises ``UnsupportedAggregateError`` for expressions that
    are not a single aggregate function call (for example ``sum(x) + 1``).
    """
    from pyspark import SparkContext

    jvm = SparkContext._jvm  # noqa: SLF001 - the active session is thread-local; the JVM is not
    assert jvm is not None, "no SparkContext is running"
    node = column_node(col)
    while node.getClass().getSimpleName() == "Alias":
        node = node.child()
    kind = node.getClass().getSimpleName()
    if kind != "UnresolvedFunction":
        msg = f"statestream cannot decompose the aggregate expression {node.sql()}: expected a call of one of {', '.join(SUPPORTED_FUNCTIONS)}"
        raise UnsupportedAggregateError(msg)
    name = str(node.functionName()).lower()
    function = _ALIASES.get(name, name)
    if function not in ("count", "sum", "avg", "min", "max"):
        msg = f"statestream does not support the aggregate function {name}() in streaming aggregations yet (supported: {', '.join(SUPPORTED_FUNCTIONS)})"
        raise UnsupportedAggregateError(msg)
    arguments = node.arguments()
    args = []
    for i in range(arguments.size()):
        a = arguments.apply(i)
        if a.getClass().getSimpleName() == "UnresolvedStar":
            if function != "count":
                msg = f"{name}(*) is not a valid aggregate"
                raise UnsupportedAggregateError(msg)
            continue
        args.append(_column_from_node(jvm, a))
    if function != "count" and len(args) != 1:
        msg = f"{name}() takes exactly one argument in statestream"
        raise UnsupportedAggregateError(msg)
    if function == "count" and len(args) > 1:
        # count(a, b) counts rows where all arguments are non-null
        from pyspark.sql import functions as F

        cond = None
        for a in args:
            c = a.isNotNull()
            cond = c if cond is None else (cond & c)
        args = [F.when(cond, F.lit(1))]
    return AggregateCall(
        function=function,
        args=tuple(args),
        is_distinct=bool(node.isDistinct()),
        output_name=output_name,
        buffers=_buffers(function, index),
        sql=str(node.sql()),
    )


# --------------------------------------------------------------------------------------------
# pure merge rules on Arrow arrays
# --------------------------------------------------------------------------------------------


def merge_buffers(rule: str, state: pa.Array | pa.ChunkedArray, batch: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Merge a stored buffer column with this batch's buffer column, row by row (vectorised).

    ``state`` is null where a key has no stored buffer yet. Mirrors Spark's merge expressions:
    counts add with null as zero; sums ignore a null side and fail on overflow (ANSI mode, the
    Spark 4 default); min/max ignore nulls.
    """
    if rule == MERGE_SUM0:
        return pc.add_checked(pc.fill_null(state, 0), pc.fill_null(batch, 0))
    if rule == MERGE_SUM:
        both = pc.add_checked(state, batch)
        return pc.coalesce(both, state, batch)
    if rule in (MERGE_MIN, MERGE_MAX):
        return _min_max(rule, state, batch)
    raise ValueError(f"unknown merge rule {rule!r}")


def _min_max(rule: str, a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> pa.Array:
    typ = a.type
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
        return pc.min_element_wise(a, b, skip_nulls=True)
    return pc.max_element_wise(a, b, skip_nulls=True)


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
    if not (numeric or (temporal and rule in (MERGE_MIN, MERGE_MAX))):
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
            ufunc = np.fmin if rule == MERGE_MIN else np.maximum  # NaN: above every number
        else:
            info = np.iinfo(storage.type.to_pandas_dtype())
            fill = info.max if rule == MERGE_MIN else info.min
            ufunc = np.minimum if rule == MERGE_MIN else np.maximum
        filled = pc.fill_null(storage, pa.scalar(fill, type=storage.type)).to_numpy(zero_copy_only=False)
        out = ufunc.reduceat(filled, starts)
        mask = n_valid == 0
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
    aggregation keyed by the run number."""
    run = np.zeros(len(values), dtype=np.int64)
    run[starts[1:]] = 1
    run = np.cumsum(run)
    fn = {MERGE_SUM0: "sum", MERGE_SUM: "sum", MERGE_MIN: "min", MERGE_MAX: "max"}[rule]
    opts = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0 if rule == MERGE_SUM0 else 1)
    t = pa.table({"__run": run, "__v": values})
    out = t.group_by("__run", use_threads=False).aggregate([("__v", fn, opts)])
    out = out.sort_by("__run")
    col = out.column(f"__v_{fn}").combine_chunks()
    if rule == MERGE_SUM0:
        col = pc.fill_null(col, pa.scalar(0, type=col.type))
    return col.cast(values.type) if not col.type.equals(values.type) else col
