"""The join of two streams: StreamingSymmetricHashJoinExec.

Spark: ``StreamingSymmetricHashJoinExec`` with ``SymmetricHashJoinStateManager`` (state format 2).
Per state partition and side, two stores: ``<side>-keyToNumValues`` (join key -> number of rows)
and ``<side>-keyWithIndexToValue`` ((join key, index) -> row, ``matched``). Per batch, Spark joins
each new left row with the right state as it was before the batch, then each new right row with
the left state *including* this batch's new left rows, so a pair of new rows comes out once; a
row that matched anything gets ``matched`` set; rows leave the state when the side's state
watermark passes them, and outer joins emit the unmatched ones padded with nulls at that moment.

How a batch runs here (``docs/design.md``, "How a stream-stream join runs"), two ways.

*Matching in the tasks* (``StreamJoinInfo.match_in_tasks``: the condition's non-equality part
has an exact Arrow form, ``operators/arrow_predicate.py``, or there is none): one Spark job, as
on Spark's engine. Both sides' new rows (with their keys, late flag and pre-join filter computed
by Spark) go through Spark's exchange to the task of their state partition; ``JoinStateStep``
matches them with each other and with the other side's stored rows (keys with an Arrow join,
then the predicate on the candidate pairs), emits the pairs, and updates the state as below.

*Matching with a Spark join* (any other condition), in four steps:

1. *new rows*: both sides' rows (renamed to ``__s<side>_<i>``) with their join key values, a
   late flag (event time ``<=`` the operator's late-event watermark) and the condition's one-side
   part (Spark's pre-join filter), hash-partitioned on the keys into the N state partitions by
   Spark's exchange; each task numbers its rows; the result is materialised once
   (``localCheckpoint``), so row numbers are stable for the rest of the batch;
2. *state scan*: per side, a ``mapInArrow`` over N one-row partitions reads partition p's
   ``keyWithIndexToValue`` store of that side at the batch's version (read only);
3. *matching*: one Spark join of (left new + left stored) with (right new + right stored) on the
   keys (null-safe, as Spark's state matches binary key rows) and the rest of the condition,
   without stored-with-stored pairs: exactly the pairs Spark's operator emits, with Spark's
   condition semantics; materialised once, as the markers and the output both read them;
4. *state step*: the new rows, one marker per side of every emitted pair and one row per state
   partition go to the task of their partition; ``JoinStateStep`` appends the new rows, sets ``matched``, evicts with the state watermarks,
   emits the null-padded (outer) and semi rows, and commits the four stores.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream._jvm.calls import jvm_view
from statestream.faults import record_state_task
from statestream.operators.arrow_predicate import evaluate_predicate, predicate_columns
from statestream.operators.base import (
    ExecutedByParent,
    PhysicalOperator,
    StatefulOperatorStateInfo,
    StateStoreWriter,
    WatermarkSupport,
)
from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.local_checkpoint import local_checkpoint
from statestream.operators.partition_routes import partition_routes, state_partition_id
from statestream.operators.python_worker import forget_zip_importers
from statestream.operators.state_step import StateStep, finish_writer_metrics
from statestream.operators.stateful import event_time_micros
from statestream.state.keys import group_ids, match_keys
from statestream.state.provider import get_provider
from statestream.state.store import StateStoreConf, StateStoreId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "StreamJoinExchangeExec",
    "StreamingSymmetricHashJoinExec",
    "JoinStateStep",
    "JoinStateScan",
    "JOIN_OPERATOR_NAME",
]

JOIN_OPERATOR_NAME = "symmetricHashJoin"
STORE_NAMES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")

SIDE = "__side"
KIND = "__kind"  # 0: a new row, 1: a marker (the row took part in an emitted pair)
PID = PARTITION_ID_COLUMN
RID = "__rid"  # a new row's id (unique within the batch)
IDX = "__idx"  # a stored row's index under its key
LATE = "__late"
PRE = "__pre"
PNEW = "__pnew"  # marker: the other row of the pair is new (not stored)
MATCHED = "__matched"
LROW, RROW = "__l", "__r"
INDEX_FIELD = "index"
VALUE_FIELD = "value"
MATCHED_FIELD = "matched"


def key_column(j: int) -> str:
    return f"__k{j}"


def _side_col(side: int, i: int) -> str:
    return f"__s{side}_{i}"


@dataclass(frozen=True)
class StreamJoinExchangeExec(ExecutedByParent, PhysicalOperator):
    """``Exchange hashpartitioning(keys, N)`` below one side of the join; the join performs it
    (on both sides' rows at once, so both land in the same partitions)."""

    child: PhysicalOperator | None = None
    keys_text: str = ""
    num_partitions: int = 0

    def simple_string(self) -> str:
        return f"Exchange hashpartitioning({self.keys_text}, {self.num_partitions}), REQUIRED_BY_STATEFUL_OPERATOR"


def _state_text(pred: tuple[str, int] | None, info: Any, side: int) -> str:
    """One side of Spark's ``state cleanup [ ... ]``: ``= null``, or the predicate that removes
    the side's stored rows (``key predicate`` on a join key, ``value predicate`` on the side's
    event-time column, the watermark in microseconds)."""
    if pred is None:
        return "= null"
    kind, w = pred
    if kind == "key":
        j = info.key_watermark_ordinal
        dt = info.key_types[j].simpleString() if j is not None and j < len(info.key_types) else "timestamp"
        nullable = str(info.key_nullable[j]).lower() if j is not None and j < len(info.key_nullable) else "true"
        return f"key predicate: (input[{j}, {dt}, {nullable}] <= {_micros(w)})"
    et = info.left_event_time if side == 0 else info.right_event_time
    schema = info.left_schema if side == 0 else info.right_schema
    name = schema.fields[et].name if et is not None else "?"
    delay = (schema.fields[et].metadata or {}).get("spark.watermarkDelayMs") if et is not None else None
    if delay is not None:
        name = f"{name}-T{int(delay)}ms"
    return f"value predicate: ({name} <= {_micros(w)})"


def _micros(ms: int) -> int:
    """``ms * 1000`` as Spark computes it on a long (wrapping around on overflow)."""
    return (ms * 1000 + 2**63) % 2**64 - 2**63


@dataclass(frozen=True)
class StreamingSymmetricHashJoinExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    """A join of two streams (Spark: ``StreamingSymmetricHashJoinExec``); see the module docstring."""

    left: PhysicalOperator | None = None
    right: PhysicalOperator | None = None
    info: Any = None  # plan.stream_joins.StreamJoinInfo
    state_info: StatefulOperatorStateInfo | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    #: per side: ("key" | "value", state watermark ms) or None; filled in per batch
    state_watermarks: tuple[Any, Any] = (None, None)
    store_conf: Any = None

    operator_name = JOIN_OPERATOR_NAME
    partition_from_task_id = False
    state_store_names = STORE_NAMES

    # ---------------------------------------------------------------- watermarks
    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        used = self.state_watermarks[0] is not None or self.state_watermarks[1] is not None
        return used and self.watermark_passed_eviction(new_input_watermark_ms)

    def state_schemas(self) -> tuple[dict, dict]:
        return self.info.key_schema_json, self.info.value_schema_json

    def store_schemas(self) -> dict[str, tuple[dict, dict]]:
        """Each of the four stores' key and value schemas as Spark records them (join state
        format 2): the join keys (``field0``...) to a count, and the join keys plus ``index`` to a
        side's input row plus ``matched``. Written beside the stores, where Spark's state reader
        (and statestream's) finds the names and types of what it reads."""
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        key = self.info.key_schema_json
        out = {}
        for side, row in (("left", self.info.left_schema), ("right", self.info.right_schema)):
            out[f"{side}-keyToNumValues"] = (key, StructType([StructField("value", LongType())]).jsonValue())
            with_index = {"type": "struct", "fields": list(key["fields"]) + [StructField("index", LongType()).jsonValue()]}
            value = StructType(list(row.fields) + [StructField("matched", BooleanType())]).jsonValue()
            out[f"{side}-keyWithIndexToValue"] = (with_index, value)
        return out

    # ---------------------------------------------------------------- explain
    def simple_string(self) -> str:
        info = self.info
        si = self.state_info
        late = self.event_time_watermark_for_late_events
        evict = self.event_time_watermark_for_eviction
        cond = (
            f"condition = [ leftOnly = {_null(info.left_only_text)}, rightOnly = {_null(info.right_only_text)}, "
            f"both = {_null(info.both_text)}, full = {_null(info.full_text)} ]"
        )
        cleanup = (
            f"state cleanup [ left {_state_text(self.state_watermarks[0], info, 0)}, "
            f"right {_state_text(self.state_watermarks[1], info, 1)} ]"
        )
        return (
            f"StreamingSymmetricHashJoin [{info.left_keys_text}], [{info.right_keys_text}], {info.join_type}, {cond}, "
            f"{si if si else 'state info [ <unknown> ]'} stateStoreCkptIds = None, "
            f"{late if late is not None else 'None'}, {evict if evict is not None else 'None'}, {cleanup}, 2"
        )

    # ---------------------------------------------------------------- execution
    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import Column
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

        assert self.left is not None and self.right is not None
        info = self.info
        si = self.get_state_info()
        n = int(si.num_partitions)
        spark = ctx.spark
        jvm = jvm_view(spark)

        def col(jexpr: Any) -> Column:
            node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(jexpr)
            return Column(jvm.org.apache.spark.sql.Column(node))

        sides = []
        for side, child, keys, only, et, et_struct in (
            (0, self.left, info.left_keys, info.left_only, info.left_event_time, info.left_event_time_is_struct),
            (1, self.right, info.right_keys, info.right_only, info.right_event_time, info.right_event_time_is_struct),
        ):
            df = child.execute(ctx)
            df = df.toDF(*[_side_col(side, i) for i in range(len(df.columns))])
            kept = info.left_kept if side == 0 else info.right_kept
            if kept and len(kept) < len(df.columns):  # the columns Spark's column pruning keeps
                df = df.select(*[F.col(_side_col(side, p)).alias(_side_col(side, q)) for q, p in enumerate(kept)])
            names = list(df.columns)
            late = F.lit(False)
            if et is not None and self.event_time_watermark_for_late_events is not None:
                t = F.col(names[et])
                if et_struct:
                    t = t.getField("end")
                bound = F.timestamp_micros(F.lit(int(self.event_time_watermark_for_late_events) * 1000))
                late = F.coalesce(t <= bound, F.lit(False))
            pre = F.coalesce(col(only), F.lit(False)) if only is not None else F.lit(True)
            sides.append((df, names, [col(k) for k in keys], late, pre))
        left_struct = StructType([StructField(_side_col(0, i), f.dataType, True) for i, f in enumerate(info.left_schema.fields)])
        right_struct = StructType([StructField(_side_col(1, i), f.dataType, True) for i, f in enumerate(info.right_schema.fields)])
        nkeys = len(info.left_keys)
        kcols = [key_column(j) for j in range(nkeys)]

        def tagged(side: int) -> "DataFrame":
            df, names, keys, late, pre = sides[side]
            row = F.struct(*[F.col(c) for c in names])
            other = right_struct if side == 0 else left_struct
            return df.select(
                F.lit(side).cast("int").alias(SIDE),
                *[k.alias(kcols[j]) for j, k in enumerate(keys)],
                (row if side == 0 else F.lit(None).cast(other)).alias(LROW),
                (row if side == 1 else F.lit(None).cast(other)).alias(RROW),
                late.alias(LATE),
                pre.alias(PRE),
            )

        new = tagged(0).unionByName(tagged(1))
        new = new.withColumn(PID, state_partition_id([F.col(c) for c in kcols], n) if nkeys else F.lit(0))
        key_fields = [f for f in new.schema.fields if f.name in kcols]
        step_args = self.state_step_args(ctx)
        arrow_keys = to_arrow_schema(StructType(key_fields), timestamp_utc=True)
        arrow_rows = (
            to_arrow_schema(left_struct, timestamp_utc=True),
            to_arrow_schema(right_struct, timestamp_utc=True),
        )
        out_struct = StructType(left_struct.fields + right_struct.fields)
        # one row per state partition, so that every task of the step sees its partition in its
        # data (a task's own id is not the partition when the join sits below a union's second
        # input), then all rows go to the task of their state partition
        beats = spark.range(0, n, 1, n).select(
            F.lit(2).cast("int").alias(KIND), F.lit(0).cast("int").alias(SIDE),
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in key_fields],
            F.lit(None).cast(left_struct).alias(LROW), F.lit(None).cast(right_struct).alias(RROW),
            F.lit(None).cast("boolean").alias(LATE), F.lit(None).cast("boolean").alias(PRE),
            F.col("id").cast("int").alias(PID), F.lit(None).cast("long").alias(RID), F.lit(None).cast("long").alias(IDX),
            F.lit(None).cast("boolean").alias(PNEW),
        )
        routes = F.array(*[F.lit(r) for r in partition_routes(n)])

        def state_step(step_in: "DataFrame", **more: Any) -> "DataFrame":
            step_in = step_in.repartition(n, F.element_at(routes, F.col(PID) + 1))
            step = JoinStateStep(
                **step_args,
                join_type=info.join_type,
                input_schema=to_arrow_schema(step_in.schema, timestamp_utc=True),
                key_schema=arrow_keys,
                row_schemas=arrow_rows,
                output_schema=to_arrow_schema(out_struct, timestamp_utc=True),
                state_watermarks=tuple(self.state_watermarks),
                key_watermark_ordinal=info.key_watermark_ordinal,
                key_watermark_is_struct=info.key_watermark_is_struct,
                event_times=(
                    (info.left_event_time, info.left_event_time_is_struct),
                    (info.right_event_time, info.right_event_time_is_struct),
                ),
                outer_early_emit=info.outer_early_emit,
                side_names=(tuple(info.left_schema.names), tuple(info.right_schema.names)),
                late_watermark_ms=self.event_time_watermark_for_late_events,
                **more,
            )
            return step_in.mapInArrow(step, out_struct)

        if info.match_in_tasks:
            # one Spark job: the new rows go to the task of their state partition, which
            # matches them with the stored rows and updates the state (as Spark's operator does)
            rows_in = new.select(
                F.lit(0).cast("int").alias(KIND), F.col(SIDE), *[F.col(c) for c in kcols], F.col(LROW), F.col(RROW),
                F.col(LATE), F.col(PRE), F.col(PID), F.lit(None).cast("long").alias(RID), F.lit(None).cast("long").alias(IDX),
                F.lit(None).cast("boolean").alias(PNEW),
            )
            emitted = state_step(rows_in.unionByName(beats), match_in_tasks=True, condition=info.arrow_condition)
            return self._shaped(emitted, col)

        # materialised once: the row numbers below are then the same wherever the rest of the
        # batch reads them (an id over the checkpointed partitions is deterministic)
        new = local_checkpoint(new).withColumn(RID, F.monotonically_increasing_id())

        # the stored rows of both sides, partition by partition (read only)
        scan_schema = StructType(
            [StructField(SIDE, IntegerType(), False), *key_fields, StructField(LROW, left_struct, True), StructField(RROW, right_struct, True),
             StructField(PID, IntegerType(), False), StructField(IDX, LongType(), False), StructField(MATCHED, BooleanType(), True)]
        )
        scan = JoinStateScan(
            state_root=step_args["state_root"], run_id=step_args["run_id"], operator_id=step_args["operator_id"],
            version=step_args["version"], key_schema=arrow_keys, row_schemas=arrow_rows,
            output_schema=to_arrow_schema(scan_schema, timestamp_utc=True), store_conf=step_args["store_conf"],
        )
        # one scan per side, so that each side of the join below reads only its own stores
        stored = {
            side: spark.range(0, n, 1, n).mapInArrow(dataclasses.replace(scan, sides=(side,)), scan_schema) for side in (0, 1)
        }

        def side_all(side: int) -> "DataFrame":
            p = "l" if side == 0 else "r"
            row = LROW if side == 0 else RROW
            cols = [_side_col(side, i) for i in range(len(info.left_names if side == 0 else info.right_names))]
            fresh = new.filter((F.col(SIDE) == side) & ~F.col(LATE) & F.col(PRE)).select(
                *[F.col(c).alias(f"__{p}k{j}") for j, c in enumerate(kcols)],
                F.col(PID).alias(f"__{p}pid"), F.col(row),
                F.lit(True).alias(f"__{p}new"), F.col(RID).alias(f"__{p}rid"), F.lit(None).cast("long").alias(f"__{p}idx"),
            )
            old = stored[side].select(
                *[F.col(c).alias(f"__{p}k{j}") for j, c in enumerate(kcols)],
                F.col(PID).alias(f"__{p}pid"), F.col(row),
                F.lit(False).alias(f"__{p}new"), F.lit(None).cast("long").alias(f"__{p}rid"), F.col(IDX).alias(f"__{p}idx"),
            )
            both = fresh.unionByName(old)
            return both.select(*[c for c in both.columns if c != row], *[F.col(row).getField(c).alias(c) for c in cols])

        la, ra = side_all(0), side_all(1)
        cond = (F.col("__lpid") == F.col("__rpid")) & ~(~F.col("__lnew") & ~F.col("__rnew"))
        for j in range(nkeys):
            cond = cond & F.col(f"__lk{j}").eqNullSafe(F.col(f"__rk{j}"))
        if info.condition is not None:
            cond = cond & col(info.condition)
        # materialised once: the markers of both sides and the output read the same pairs
        pairs = local_checkpoint(la.join(ra, cond, "inner"))
        lcols = [_side_col(0, i) for i in range(len(info.left_names))]
        rcols = [_side_col(1, i) for i in range(len(info.right_names))]
        out_cols = lcols + rcols

        def markers(side: int) -> "DataFrame":
            p, o = ("l", "r") if side == 0 else ("r", "l")
            return pairs.select(
                F.lit(1).cast("int").alias(KIND), F.lit(side).cast("int").alias(SIDE),
                *[F.col(f"__{p}k{j}").alias(c) for j, c in enumerate(kcols)],
                F.lit(None).cast(left_struct).alias(LROW), F.lit(None).cast(right_struct).alias(RROW),
                F.lit(None).cast("boolean").alias(LATE), F.lit(None).cast("boolean").alias(PRE),
                F.col(f"__{p}pid").alias(PID), F.col(f"__{p}rid").alias(RID), F.col(f"__{p}idx").alias(IDX),
                F.col(f"__{o}new").alias(PNEW),
            )

        rows_in = new.select(
            F.lit(0).cast("int").alias(KIND), F.col(SIDE), *[F.col(c) for c in kcols], F.col(LROW), F.col(RROW),
            F.col(LATE), F.col(PRE), F.col(PID), F.col(RID), F.lit(None).cast("long").alias(IDX), F.lit(None).cast("boolean").alias(PNEW),
        )
        emitted = state_step(rows_in.unionByName(markers(0)).unionByName(markers(1)).unionByName(beats))
        parts = [emitted]
        if info.join_type != "LeftSemi":
            parts.append(pairs.select(*out_cols))
        null_right = [F.lit(None).cast(f.dataType).alias(f.name) for f in right_struct.fields]
        null_left = [F.lit(None).cast(f.dataType).alias(f.name) for f in left_struct.fields]
        if info.join_type in ("LeftOuter", "FullOuter"):
            failed = new.filter((F.col(SIDE) == 0) & ~F.col(LATE) & ~F.col(PRE))
            parts.append(failed.select(*[F.col(LROW).getField(c).alias(c) for c in lcols], *null_right))
        if info.join_type in ("RightOuter", "FullOuter"):
            failed = new.filter((F.col(SIDE) == 1) & ~F.col(LATE) & ~F.col(PRE))
            parts.append(failed.select(*null_left, *[F.col(RROW).getField(c).alias(c) for c in rcols]))
        result = parts[0]
        for p in parts[1:]:
            result = result.unionByName(p)
        return self._shaped(result, col)

    def _shaped(self, result: "DataFrame", col: Any) -> "DataFrame":
        """The join's rows (both sides' columns) as the join's output (the user's projection)."""
        info = self.info
        out = result.select(*[col(e) for e in info.output])
        out = out.toDF(*info.output_schema.names)
        for f in info.output_schema.fields:
            if f.metadata:
                out = out.withMetadata(f.name, dict(f.metadata))
        return out


def _null(text: str) -> str:
    return "null" if text == "None" else text.removeprefix("Some(").removesuffix(")") if text.startswith("Some(") else text


# ----------------------------------------------------------------------------------------------
# State access inside the tasks
# ----------------------------------------------------------------------------------------------


def _store_schemas(key_schema: pa.Schema, row_schema: pa.Schema) -> dict[str, tuple[pa.Schema, pa.Schema]]:
    k2n = (key_schema, pa.schema([pa.field(VALUE_FIELD, pa.int64(), False)]))
    kwi = (
        pa.schema(list(key_schema) + [pa.field(INDEX_FIELD, pa.int64(), False)]),
        pa.schema([pa.field(VALUE_FIELD, pa.struct(list(row_schema)), True), pa.field(MATCHED_FIELD, pa.bool_(), True)]),
    )
    return {"keyToNumValues": k2n, "keyWithIndexToValue": kwi}


def _providers(root: str, run_id: str, op: int, partition: int, key_schema: pa.Schema, row_schemas, conf) -> dict[str, Any]:
    out = {}
    for side, name in ((0, "left"), (1, "right")):
        for kind, (ks, vs) in _store_schemas(key_schema, row_schemas[side]).items():
            sid = StateStoreId(root, op, partition, f"{name}-{kind}")
            out[f"{name}-{kind}"] = get_provider(sid, ks, vs, conf or StateStoreConf(), run_id)
    return out


@dataclass(frozen=True)
class JoinStateScan:
    """``mapInArrow`` over N one-row partitions: partition p's stored rows of both sides at the
    batch's version (read only), as rows of the scan schema."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    key_schema: pa.Schema
    row_schemas: tuple[pa.Schema, pa.Schema]
    output_schema: pa.Schema
    store_conf: Any = None
    sides: tuple[int, ...] = (0, 1)

    def __call__(self, batches):
        # the seed's one row holds the partition (the task's own id is not it when Spark runs this
        # scan inside a union's task)
        ids = [i for b in batches for i in b.column(0).to_pylist()]
        try:
            for p in ids:
                yield from self._scan(int(p))
        finally:
            forget_zip_importers()

    def _scan(self, p: int):
        providers = _providers(self.state_root, self.run_id, self.operator_id, p, self.key_schema, self.row_schemas, self.store_conf)
        nk = len(self.key_schema)
        for side, name in ((0, "left"), (1, "right")):
            if side not in self.sides:
                continue
            provider = providers[f"{name}-keyWithIndexToValue"]
            t = provider.get_read_store(self.version).table()
            hits, misses = provider.cache_counts()
            record_state_task(self.state_root, self.operator_id, p, self.version, self.run_id, hits, misses, store=provider.store_id.store_name, read=True)
            if t.num_rows == 0:
                continue
            m = t.num_rows
            other = self.row_schemas[1 - side]
            rows = t.column(nk + 1)
            cols = [pa.array(np.full(m, side, dtype=np.int32))]
            cols += [t.column(j) for j in range(nk)]
            null_other = pa.nulls(m, pa.struct(list(other)))
            cols += [rows, null_other] if side == 0 else [null_other, rows]
            cols += [pa.array(np.full(m, p, dtype=np.int32)), t.column(nk), t.column(nk + 2)]
            table = pa.Table.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols], schema=self.output_schema)
            yield from table.to_batches()


@dataclass(frozen=True)
class JoinStateStep(StateStep):
    """The per-partition state step of the join; ``process`` is Spark-free (unit-testable)."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    join_type: str
    input_schema: pa.Schema
    key_schema: pa.Schema
    row_schemas: tuple[pa.Schema, pa.Schema]
    output_schema: pa.Schema
    state_watermarks: tuple[Any, Any] = (None, None)
    key_watermark_ordinal: int | None = None
    key_watermark_is_struct: bool = False
    event_times: tuple[Any, Any] = ((None, False), (None, False))
    store_conf: Any = None
    #: match the rows here (``_match_in_task``) with this Arrow predicate (``arrow_predicate``)
    #: for the non-equality condition (None: keys only); otherwise the input holds markers
    match_in_tasks: bool = False
    condition: Any = None
    #: ``spark.statestream.streamJoin.outerEarlyEmit``: outer rows without a partner on arrival
    #: are emitted padded with nulls at once (later matches still come out) instead of when the
    #: watermark evicts them
    outer_early_emit: bool = False
    #: the user's column names of each side's rows (the ledger shows rows under them)
    side_names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    #: the watermark that dropped late rows in this batch
    late_watermark_ms: int | None = None

    def __call__(self, batches):
        """``mapInArrow``: the task's state partition is the one its rows name (each task gets
        one row of its own partition at least, see ``execute``)."""
        batches = [b for b in batches if b.num_rows]
        if not batches:  # pragma: no cover - every task receives its partition's row
            return
        yield from self.run_partition(int(batches[0].column(PID)[0].as_py()), batches)

    def _record_late_join_rows(self, partition: int, rows: pa.Table) -> None:
        """The late-row ledger's rows of a join: ``_side`` (left/right) and each side's row
        under its own column names (null for the other side's rows)."""
        sides = []
        for j, column in ((0, LROW), (1, RROW)):
            struct = rows.column(column).combine_chunks()
            names = self.side_names[j] if len(self.side_names[j]) == struct.type.num_fields else [f.name for f in struct.type]
            sides.append(pa.StructArray.from_arrays(struct.flatten(), names=list(names), mask=struct.is_null()))
        side = pa.array(["left" if s == 0 else "right" for s in rows.column(SIDE).to_pylist()], pa.string())
        watermark = self.late_watermark_ms if self.late_watermark_ms is not None else 0
        self.record_late_rows(partition, pa.table({"_side": side, "left": sides[0], "right": sides[1]}), watermark)

    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        table = self.partition_input(batches, partition, "the exchange did not route the rows by state partition", drop_partition_column=False)
        nk = len(self.key_schema)
        kcols = [key_column(j) for j in range(nk)]
        providers = _providers(self.state_root, self.run_id, self.operator_id, partition, self.key_schema, self.row_schemas, self.store_conf)
        m = self.new_metrics(partition, numStateStoreInstances=4)
        t0 = time.perf_counter()
        with self.store_task(partition) as task_stores:
            stores = {name: task_stores.open(p) for name, p in providers.items()}
            kind = table.column(KIND).to_numpy(zero_copy_only=False)
            side_arr = table.column(SIDE).to_numpy(zero_copy_only=False)
            late = np.asarray(pc.fill_null(table.column(LATE), False).to_numpy(zero_copy_only=False), dtype=bool)
            pre = np.asarray(pc.fill_null(table.column(PRE), False).to_numpy(zero_copy_only=False), dtype=bool)
            rid = pc.fill_null(table.column(RID), -1).to_numpy(zero_copy_only=False)
            pnew = np.asarray(pc.fill_null(table.column(PNEW), False).to_numpy(zero_copy_only=False), dtype=bool)
            idx_null = np.asarray(pc.is_null(table.column(IDX)).to_numpy(zero_copy_only=False), dtype=bool)
            is_new = kind == 0
            m["numRowsDroppedByWatermark"] = int(np.sum(is_new & late))
            if self.late_rows and m["numRowsDroppedByWatermark"]:
                self._record_late_join_rows(partition, table.filter(pa.array(is_new & late)))
            outputs: list[pa.Table] = []
            updated = 0
            removed_counted = 0
            cleanup_sides = {"Inner": (0, 1), "LeftSemi": (0, 1), "LeftOuter": (1,), "RightOuter": (0,), "FullOuter": ()}[self.join_type]
            outer_sides = {"LeftOuter": (0,), "RightOuter": (1,), "FullOuter": (0, 1)}.get(self.join_type, ())
            matches = None
            if self.match_in_tasks:
                matches = self._match_in_task(table, stores, nk, is_new & ~late & pre, side_arr)
                outputs.extend(matches.outputs)
                for side in outer_sides:
                    failed = np.flatnonzero(is_new & (side_arr == side) & ~late & ~pre)
                    if len(failed):
                        outputs.append(self._padded(table.column(LROW if side == 0 else RROW).take(pa.array(failed)), side))
            for side, name in ((0, "left"), (1, "right")):
                k2n, kwi = stores[f"{name}-keyToNumValues"], stores[f"{name}-keyWithIndexToValue"]
                current = kwi.table()
                c_keys = current.select(list(range(nk)))
                c_index = current.column(nk).to_numpy(zero_copy_only=False).astype(np.int64)
                c_matched = np.asarray(pc.fill_null(current.column(nk + 2), False).to_numpy(zero_copy_only=False), dtype=bool)
                # this batch's rows of this side, in task order
                rows_i = np.flatnonzero(is_new & (side_arr == side) & ~late & pre)
                if matches is not None:
                    hit_stored, new_hit, partner_stored = matches.hit_stored[side], matches.new_hit[side], matches.partner_stored
                else:
                    # markers of stored rows: which stored rows took part in an emitted pair
                    sm = np.flatnonzero((kind == 1) & (side_arr == side) & ~idx_null)
                    hit_stored = np.zeros(current.num_rows, dtype=bool)
                    if len(sm) and current.num_rows:
                        mk = table.take(pa.array(sm)).select(kcols + [IDX])
                        li, _ = _match(c_keys.append_column(INDEX_FIELD, pa.array(c_index)), mk)
                        hit_stored[li] = True
                    nm = (kind == 1) & (side_arr == side) & idx_null
                    hit_rids = rid[nm]
                    new_rids = rid[rows_i]
                    new_hit = np.isin(new_rids, hit_rids)
                    partner_stored = np.isin(new_rids, rid[nm & ~pnew])
                row_col = LROW if side == 0 else RROW
                new_rows = table.take(pa.array(rows_i, type=pa.int64())) if len(rows_i) else table.slice(0, 0)
                new_values = new_rows.column(row_col)
                new_keys = new_rows.select(kcols)
                semi_out_new = None
                add = np.ones(len(rows_i), dtype=bool)
                if self.join_type == "LeftSemi" and side == 0:
                    add = ~partner_stored
                    semi_out_new = new_values.filter(pa.array(new_hit)) if len(rows_i) else None
                pred = self.state_watermarks[side]
                if side == 1 and pred is not None and len(rows_i):
                    evicting = self._evict_mask(new_keys, new_values, pred, side)
                    keep_unmatched = self.join_type in ("RightOuter", "FullOuter")
                    add = add & (~evicting | (keep_unmatched & ~new_hit))
                # semi: stored left rows matched for the first time are emitted once
                semi_out_old = None
                if self.join_type == "LeftSemi" and side == 0 and current.num_rows:
                    first = hit_stored & ~c_matched
                    if first.any():
                        semi_out_old = current.column(nk + 1).filter(pa.array(first))
                for part in (semi_out_new, semi_out_old):
                    if part is not None and len(part):
                        outputs.append(self._padded(part, side))
                if self.outer_early_emit and side in outer_sides and len(rows_i) and not new_hit.all():
                    # opt-in: an outer row without a partner on arrival comes out padded now
                    # and is stored as matched, so that its eviction emits nothing more (and a
                    # restart with the option switched off cannot emit it twice)
                    outputs.append(self._padded(new_values.filter(pa.array(~new_hit)), side, outer=True))
                    new_hit = np.ones(len(rows_i), dtype=bool)
                # the side's rows after the batch: stored (matched updated) + appended
                ai = np.flatnonzero(add)
                updated += len(ai)
                all_keys = pa.concat_tables([c_keys, new_keys.take(pa.array(ai, type=pa.int64())).cast(c_keys.schema)]) if len(ai) else c_keys
                add_values = new_values.take(pa.array(ai, type=pa.int64())) if len(ai) else None
                stored_values = current.column(nk + 1)
                all_values = pa.chunked_array(
                    [*stored_values.chunks, *([add_values.cast(stored_values.type)] if add_values is not None else [])], type=stored_values.type
                )
                all_matched = np.concatenate([c_matched | hit_stored, new_hit[ai]])
                orig = np.concatenate([np.arange(current.num_rows), np.full(len(ai), -1)])
                # eviction with the side's state watermark
                gone = np.zeros(len(orig), dtype=bool)
                if pred is not None and len(orig):
                    gone = self._evict_mask(all_keys, all_values, pred, side)
                if side in outer_sides and gone.any():
                    unmatched = gone & ~all_matched
                    if unmatched.any():
                        outputs.append(self._padded(all_values.filter(pa.array(unmatched)), side, outer=True))
                if side in cleanup_sides:
                    removed_counted += int(gone.sum())
                # indexes: 0..n-1 per key, in the order above
                keep = ~gone
                groups = _group_ids(all_keys) if len(orig) else np.zeros(0, dtype=np.int64)
                new_index = np.full(len(orig), -1, dtype=np.int64)
                kept = np.flatnonzero(keep)
                if len(kept):
                    g = groups[kept]
                    order = np.argsort(g, kind="stable")
                    sg = g[order]
                    starts = np.r_[0, np.flatnonzero(np.diff(sg)) + 1]
                    run_start = np.repeat(starts, np.diff(np.r_[starts, len(sg)]))
                    pos = np.arange(len(sg)) - run_start
                    new_index[kept[order]] = pos
                old_index = np.concatenate([c_index, np.full(len(ai), -1)])
                old_matched = np.concatenate([c_matched, np.zeros(len(ai), dtype=bool)])
                changed = keep & ((orig < 0) | (new_index != old_index) | (all_matched != old_matched))
                drop_old = np.zeros(current.num_rows, dtype=bool)
                stale = (gone | changed) & (orig >= 0)
                drop_old[orig[stale]] = True
                if drop_old.any():
                    kwi.evict(lambda t, mask=drop_old: pa.array(mask))
                if changed.any():
                    ci = pa.array(np.flatnonzero(changed), type=pa.int64())
                    kwi.insert(
                        pa.Table.from_arrays(
                            [*all_keys.take(ci).columns, pa.array(new_index[changed]), all_values.take(ci), pa.array(all_matched[changed])],
                            schema=providers[f"{name}-keyWithIndexToValue"].schema,
                        )
                    )
                # keyToNumValues: the number of rows per key
                self._write_counts(k2n, providers[f"{name}-keyToNumValues"].schema, all_keys, groups, keep, nk)
            updates_ms = (time.perf_counter() - t0) * 1000
            m["numUpdatedStateRows"] = updated
            m["numRemovedStateRows"] = removed_counted
        out = pa.concat_tables(outputs) if outputs else self.output_schema.empty_table()
        # Spark counts each stored row once (keyWithIndexToValue), not its key's count too
        total = sum(s.metrics().num_keys for name, s in stores.items() if name.endswith("keyWithIndexToValue"))
        finish_writer_metrics(m, task_stores, updates_ms, 0, num_output_rows=out.num_rows, num_total_state_rows=total)
        return out, m

    def _match_in_task(self, table: pa.Table, stores: dict, nk: int, joining: np.ndarray, side_arr: np.ndarray) -> "_TaskMatches":
        """The pairs Spark's operator emits in this partition: each new left row with the right
        rows stored before the batch and the new right rows, each new right row with the left
        rows stored before the batch; keys equal (null-safe, as state keys are), then the rest
        of the condition. ``joining``: the new rows that take part (not late, pre-join filter
        passed)."""
        kcols = [key_column(j) for j in range(nk)]
        new_keys, new_vals, old_keys, old_vals, n_new, n_old = [], [], [], [], [], []
        for side, name in ((0, "left"), (1, "right")):
            rows = table.take(pa.array(np.flatnonzero(joining & (side_arr == side)), type=pa.int64()))
            current = stores[f"{name}-keyWithIndexToValue"].table()
            new_keys.append(rows.select(kcols))
            old_keys.append(current.select(list(range(nk))))
            new_vals.append(rows.column(LROW if side == 0 else RROW))
            old_vals.append(current.column(nk + 1))
            n_new.append(rows.num_rows)
            n_old.append(current.num_rows)
        # pairs over "all" rows of a side: its new rows first, then its stored rows
        parts = [
            _match(new_keys[0], new_keys[1]),
            _match(new_keys[0], old_keys[1]),
            _match(old_keys[0], new_keys[1]),
        ]
        li = np.concatenate([parts[0][0], parts[1][0], parts[2][0] + n_new[0]]).astype(np.int64, copy=False)
        ri = np.concatenate([parts[0][1], parts[1][1] + n_new[1], parts[2][1]]).astype(np.int64, copy=False)
        fields: dict[tuple[int, int], pa.Array] = {}

        def side_field(side: int, i: int) -> pa.Array:
            if (side, i) not in fields:
                chunks = [*_chunks(new_vals[side]), *_chunks(old_vals[side])]
                pieces = [pc.struct_field(c, [i]) for c in chunks]
                t = self.row_schemas[side].field(i).type
                fields[(side, i)] = pa.concat_arrays([p.cast(t) for p in pieces]) if pieces else pa.array([], t)
            return fields[(side, i)]

        def gathered(name: str) -> pa.Array:
            side, i = (0 if name.startswith("__s0_") else 1), int(name.rsplit("_", 1)[1])
            return side_field(side, i).take(pa.array(li if side == 0 else ri))

        if self.condition is not None and len(li):
            needed = sorted(predicate_columns(self.condition))
            ok = evaluate_predicate(self.condition, pa.table({c: gathered(c) for c in needed}))
            li, ri = li[ok], ri[ok]
        hits = []
        for side, idx in ((0, li), (1, ri)):
            h = np.zeros(n_new[side] + n_old[side], dtype=bool)
            h[idx] = True
            hits.append(h)
        partner_stored = np.zeros(n_new[0], dtype=bool)
        partner_stored[li[(li < n_new[0]) & (ri >= n_new[1])]] = True
        outputs = []
        if self.join_type != "LeftSemi" and len(li):
            lcols = [side_field(0, i).take(pa.array(li)) for i in range(len(self.row_schemas[0]))]
            rcols = [side_field(1, i).take(pa.array(ri)) for i in range(len(self.row_schemas[1]))]
            outputs.append(pa.Table.from_arrays(lcols + rcols, schema=self.output_schema))
        return _TaskMatches(
            new_hit=(hits[0][: n_new[0]], hits[1][: n_new[1]]),
            hit_stored=(hits[0][n_new[0]:], hits[1][n_new[1]:]),
            partner_stored=partner_stored,
            outputs=outputs,
        )

    def _padded(self, values: Any, side: int, outer: bool = False) -> pa.Table:
        """Rows of one side as output rows, the other side's columns null."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        n = len(values)
        mine = [values.field(i) for i in range(values.type.num_fields)]
        other_schema = self.row_schemas[1 - side]
        other = [pa.nulls(n, f.type) for f in other_schema]
        cols = mine + other if side == 0 else other + mine
        return pa.Table.from_arrays(cols, schema=self.output_schema)

    def _evict_mask(self, keys: pa.Table, values: Any, pred: tuple[str, int], side: int) -> np.ndarray:
        """Rows at or below the side's state watermark (a null time is never below)."""
        kind, w = pred
        if kind == "key":
            j = self.key_watermark_ordinal
            t = pa.table({"t": keys.column(j)})
            micros = event_time_micros(t, "t", self.key_watermark_is_struct)
        else:
            et, is_struct = self.event_times[side]
            if et is None:
                return np.zeros(keys.num_rows, dtype=bool)
            vals = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            t = pa.table({"t": vals.field(et)})
            micros = event_time_micros(t, "t", is_struct)
        mask = pc.fill_null(pc.less_equal(micros, pa.scalar(_micros(w), pa.int64())), False)
        return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)

    def _write_counts(self, store, schema: pa.Schema, keys: pa.Table, groups: np.ndarray, keep: np.ndarray, nk: int) -> None:
        current = store.table()
        if keys.num_rows == 0 and current.num_rows == 0:
            return
        counts = np.bincount(groups[keep], minlength=int(groups.max()) + 1 if len(groups) else 0) if len(groups) else np.zeros(0, np.int64)
        # one representative row per group
        first = np.full(len(counts), -1, dtype=np.int64)
        if len(groups):
            order = np.arange(len(groups))[::-1]
            first[groups[order]] = order
        reps = keys.take(pa.array(first[first >= 0], type=pa.int64())) if len(first) else keys.slice(0, 0)
        rep_counts = counts[first >= 0] if len(first) else np.zeros(0, np.int64)
        old = np.zeros(reps.num_rows, dtype=np.int64)
        stored_pos = np.full(reps.num_rows, -1, dtype=np.int64)
        if current.num_rows and reps.num_rows:
            li, ri = _match(current.select(list(range(nk))), reps)
            old[ri] = current.column(nk).to_numpy(zero_copy_only=False)[li]
            stored_pos[ri] = li
        differs = rep_counts != old
        drop = np.zeros(current.num_rows, dtype=bool)
        drop[stored_pos[differs & (stored_pos >= 0)]] = True
        if drop.any():
            store.evict(lambda t, mask=drop: pa.array(mask))
        put = differs & (rep_counts > 0)
        if put.any():
            pi = pa.array(np.flatnonzero(put), type=pa.int64())
            store.insert(pa.Table.from_arrays([*reps.take(pi).columns, pa.array(rep_counts[put], type=pa.int64())], schema=schema))


@dataclass
class _TaskMatches:
    """What ``_match_in_task`` found, per side (0 left, 1 right)."""

    new_hit: tuple[np.ndarray, np.ndarray]  # per new row (task order): it is in a pair
    hit_stored: tuple[np.ndarray, np.ndarray]  # per stored row: it is in a pair
    partner_stored: np.ndarray  # per new left row: paired with a stored right row
    outputs: list[pa.Table]  # the pairs as output rows (none for a left semi join)


def _chunks(values: Any) -> list[pa.Array]:
    return list(values.chunks) if isinstance(values, pa.ChunkedArray) else [values]


def _match(a: pa.Table, b: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    return match_keys(a, b)


def _group_ids(keys: pa.Table) -> np.ndarray:
    if keys.num_columns == 0:
        return np.zeros(keys.num_rows, dtype=np.int64)
    return group_ids(list(keys.columns), keys.num_rows)

