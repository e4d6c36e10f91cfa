"""Session-window streaming aggregation: the operators of Spark's
``AggUtils.planStreamingAggregationForSession``.

Spark's chain (bottom-up) is: Partial aggregate grouped by the keys and each row's *initial*
session ``[t, t + gap)``; optionally (``spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition``)
a sort and ``MergingSessionsExec`` inside each input partition; ``Exchange hashpartitioning(Ks, N)``
on the keys without the session; ``Sort(Ks, session)``; ``SessionWindowStateStoreRestoreExec``
(drops late rows, merge-sorts each key's stored sessions into the input); ``MergingSessionsExec``
(merges overlapping or touching sessions and their buffers); ``SessionWindowStateStoreSaveExec``
(replaces each touched key's sessions in the store, evicts or outputs per mode); Final aggregate.

How statestream runs it:

* Spark does the batch part as one job (``SessionWindowPartialAggregateExec``): per input row, its
  keys, its input partition id, its initial session (Spark's own ``session_window`` analyser rule
  computes ``[t, t + gap)`` and drops rows with a null time or a gap that is not positive) and
  its own aggregation buffers (count 1/0, the value for sum/min/max...), hash-partitioned on the
  keys into the N state partitions. No aggregation runs in Spark: the state step has to sort
  and merge the rows of each key anyway, and equal rows simply merge there.
* ``mapInArrow`` then runs ``SessionWindowStateStep`` per state partition inside a Spark task:
  the fused restore / merge / save of the three stateful nodes, on Arrow with numpy (one sort per
  partition, a segmented running maximum for the merge, ``reduceat`` for the buffers), never
  row by row. Spark's restore drops late rows of its input, which is the Partial aggregate's
  output (one row per keys, input partition and initial session); the step counts the distinct
  such groups among late rows, so ``numRowsDroppedByWatermark`` is Spark's figure. With the
  local-merge conf it first merges sessions per (keys, input partition), as Spark's local
  ``MergingSessionsExec`` does, and judges lateness on those.

State layout, as Spark's ``StreamingSessionWindowStateManagerImplV1``: one state row per session,
keyed by the grouping keys without the session plus ``sessionStartTime``; several sessions of a
key coexist. The schema file records Spark's key and value schemas; statestream's Arrow store
keeps the key columns, the session start, then the session end and the buffers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from statestream.errors import OP_SESSION_WINDOW, output_mode_error
from statestream.operators.state_step import StateStep, finish_writer_metrics, map_state_partitions
from statestream.operators.aggregate import PARTITION_ID_COLUMN, AggregationInfo, aggregate_string
from statestream.operators.base import (
    ExecutedByParent,
    PhysicalOperator,
    StatefulOperator,
    StatefulOperatorStateInfo,
    StateStoreWriter,
    WatermarkSupport,
)
from statestream.operators.stateful import RESTORE_HIT_METRIC, _arrow_schema, older_than_watermark
from statestream.operators.aggregate_merge import merge_group_segments
from statestream.operators.partition_routes import exchange_keys, state_partition_id
from statestream.state.keys import group_ids, match_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "SessionWindowInfo",
    "SessionWindowPartialAggregateExec",
    "MergingSessionsExec",
    "SessionWindowSortExec",
    "SessionWindowStateStoreRestoreExec",
    "SessionWindowStateStoreSaveExec",
    "SessionWindowStateStep",
    "SessionMerge",
    "merge_sessions",
    "MERGE_SESSIONS_IN_LOCAL_PARTITION_CONF",
    "SESSION_STATE_FORMAT_VERSION",
]

MERGE_SESSIONS_IN_LOCAL_PARTITION_CONF = "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"
#: ``spark.sql.streaming.sessionWindow.stateFormatVersion``: Spark knows only version 1.
SESSION_STATE_FORMAT_VERSION = 1

#: Internal columns of the rows the Spark job hands to the state step.
INPUT_PARTITION_COLUMN = "__statestream_input_pid"
SESSION_START_COLUMN = "__session_start"
SESSION_END_COLUMN = "__session_end"


@dataclass(frozen=True)
class SessionWindowInfo:
    """A session-window aggregation, shared by its operators.

    ``agg`` is the aggregation seen as a plain one (all grouping columns as keys, in the user's
    order, the session column among them as a struct), which is also the layout of the rows the
    save step emits, so the ordinary Final aggregate applies to them. ``session_index`` is the
    position of the session column among the grouping columns.
    """

    agg: AggregationInfo
    session_index: int
    merge_local: bool = False
    #: Spark types of the aggregation buffers (``agg.buffer_columns`` order)
    buffer_types: tuple[Any, ...] = ()
    #: every key is an input column (explain shows Spark's ``List(...)``, else ``Vector(...)``)
    keys_are_columns: bool = True
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)

    @property
    def session_column(self) -> str:
        return self.agg.key_columns[self.session_index]

    @property
    def session_name(self) -> str:
        return self.agg.grouping_names[self.session_index]

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Internal names of the keys without the session (the state's prefix key)."""
        return tuple(k for i, k in enumerate(self.agg.key_columns) if i != self.session_index)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k for i, k in enumerate(self.agg.grouping_names) if i != self.session_index)

    @property
    def key_grouping(self) -> tuple[Any, ...]:
        return tuple(g for i, g in enumerate(self.agg.grouping) if i != self.session_index)

    @property
    def session_grouping(self) -> Any:
        return self.agg.grouping[self.session_index]

    def shown_keys(self) -> str:
        """The state store nodes' keys and session as ``explain()`` shows them
        (``[value#1L], session_window#8: struct<start: timestamp, end: timestamp>``; the ids when
        Spark's text of the aggregation is known)."""
        spark = self.agg.spark_text
        if spark is not None and spark.session:
            session = spark.session["session"] + self.session_type_string()[len(self.session_name) :]
            return f"[{spark.session['keys']}], {session}"
        return f"[{', '.join(self.key_names)}], {self.session_type_string()}"

    def session_type_string(self) -> str:
        t = self.agg.output_schema[self.session_name].dataType
        inner = ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in t.fields)
        return f"{self.session_name}: struct<{inner}>"


# --------------------------------------------------------------------------------------------
# Spark side: the batch job up to the exchange
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionWindowPartialAggregateExec(PhysicalOperator):
    """Spark's Partial aggregate of a session aggregation (grouped by the keys and each row's
    initial session), and, in statestream, the whole Spark-side job before the state step: per
    input row its keys, its input partition, its initial session and its own buffers, hash
    partitioned on the keys into the N state partitions, plus the partition id column the
    state step checks. The grouping Spark's Partial aggregate does (rows with equal keys and
    initial session, per input partition) happens in the state step, which needs the rows one
    by one anyway (see the module docstring)."""

    child: PhysicalOperator | None = None
    info: SessionWindowInfo | None = None
    num_partitions: int | None = None

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import functions as F
        from pyspark.sql.types import DoubleType, FloatType

        assert self.child is not None and self.info is not None
        info = self.info
        agg = info.agg
        n = int(self.num_partitions or 1)
        df = self.child.execute(ctx)
        keys = list(info.key_columns)
        projected = []
        for k, name, g in zip(info.key_columns, info.key_names, info.key_grouping):
            col = g
            if isinstance(agg.output_schema[name].dataType, (FloatType, DoubleType)):
                # Spark's aggregate normalises -0.0 to 0.0 before the exchange hashes the key;
                # do it before the repartition, or the two zeros would land in two partitions.
                col = F.when(g == F.lit(0), F.lit(0).cast(agg.output_schema[name].dataType)).otherwise(g)
            projected.append(col.alias(k))
        pin = F.spark_partition_id().alias(INPUT_PARTITION_COLUMN)
        # Spark's session_window rule turns the grouping column into each row's initial
        # session [t, t + gap) and filters out null times and gaps that are not positive.
        rows = df.select("*", *projected, pin, info.session_grouping.alias("__sw"))
        row_buffers = [col for c in agg.calls for col in c.row_columns()]
        buffers = [col.cast(t).alias(b) for col, t, b in zip(row_buffers, info.buffer_types, agg.buffer_columns)]
        rows = rows.select(
            *keys,
            INPUT_PARTITION_COLUMN,
            F.col("__sw.start").alias(SESSION_START_COLUMN),
            F.col("__sw.end").alias(SESSION_END_COLUMN),
            *buffers,
        )
        hashed = exchange_keys(rows, [F.col(f"`{k}`") for k in keys], info.key_schema_json)
        return rows.repartition(n, *hashed).withColumn(PARTITION_ID_COLUMN, state_partition_id(hashed, n))

    def supports_codegen(self) -> bool:
        assert self.info is not None
        return self.info.agg.aggregate_codegen

    def simple_string(self) -> str:
        """Shown as the Partial step of the aggregate node Spark picks (``AggregationInfo``)."""
        assert self.info is not None
        if self.info.agg.spark_text is not None:
            return self.info.agg.spark_text.lines["Partial"]
        return aggregate_string(self.info.agg, "partial_")

    def verbose_string(self) -> str:
        assert self.info is not None
        spark = self.info.agg.spark_text
        return spark.verbose["Partial"] if spark is not None else self.simple_string()

    def formatted_details(self) -> str | None:
        assert self.info is not None
        spark = self.info.agg.spark_text
        return spark.details["Partial"] if spark is not None else None


@dataclass(frozen=True)
class MergingSessionsExec(ExecutedByParent, PhysicalOperator):
    """Spark's ``MergingSessionsExec`` in PartialMerge mode. ``step="local"``: the optional
    merge inside each input partition (done by the grouping of the partial job);
    ``step="state"``: the merge after the restore (done inside the fused state step)."""

    child: PhysicalOperator | None = None
    info: SessionWindowInfo | None = None
    step: str = "state"
    num_partitions: int | None = None

    def simple_string(self) -> str:
        assert self.info is not None
        agg = self.info.agg
        if agg.spark_text is not None and agg.spark_text.session:
            return agg.spark_text.session["merging" if self.step == "state" else "merging_local"]
        # Spark prints the node's fields: required distribution (only after the exchange),
        # isStreaming, shuffle partitions, grouping, session, functions, their results, the
        # buffer offset and the output (grouping columns, then the buffers).
        seq = "List" if self.info.keys_are_columns else "Vector"
        required = f"{seq}({', '.join(self.info.key_names)}), " if self.step == "state" else ""
        results = ", ".join(c.sql for c in agg.calls)
        output = ", ".join([*agg.grouping_names, *(b.spark_name for c in agg.calls for b in c.buffers)])
        return (
            f"MergingSessions {required}true, {self.num_partitions}, [{agg.key_sql()}], {self.info.session_type_string()}, "
            f"[{agg.functions_sql('merge_')}], [{results}], {len(agg.grouping_names)}, [{output}]"
        )

    def formatted_details(self) -> str | None:
        assert self.info is not None
        spark = self.info.agg.spark_text
        return spark.session.get("merging_details") if spark is not None and spark.session else None


@dataclass(frozen=True)
class SessionWindowSortExec(ExecutedByParent, PhysicalOperator):
    """The ``Sort(Ks, session)`` Spark puts under the restore (its required child ordering)
    and, with the local-merge conf, under the local ``MergingSessionsExec``; the state step and
    the partial job's grouping do the sorting themselves."""

    child: PhysicalOperator | None = None
    info: SessionWindowInfo | None = None

    def supports_codegen(self) -> bool:
        return True

    def simple_string(self) -> str:
        assert self.info is not None
        spark = self.info.agg.spark_text
        if spark is not None and spark.session.get("sort"):
            return spark.session["sort"]
        cols = [*self.info.key_names, self.info.session_name]
        return "Sort [" + ", ".join(f"{c} ASC NULLS FIRST" for c in cols) + "], false, 0"


# --------------------------------------------------------------------------------------------
# The stateful nodes
# --------------------------------------------------------------------------------------------


def _watermarks(late: int | None, evict: int | None) -> str:
    return f"{late if late is not None else 'None'}, {evict if evict is not None else 'None'}"


@dataclass(frozen=True)
class SessionWindowStateStoreRestoreExec(ExecutedByParent, PhysicalOperator, StatefulOperator, WatermarkSupport):
    """Drops late rows and merge-sorts each input key's stored sessions into the input (executed
    inside the fused state step of the ``SessionWindowStateStoreSaveExec`` above it). Spark
    counts the rows it drops here and reports them in the save operator's progress."""

    child: PhysicalOperator | None = None
    info: SessionWindowInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None

    #: no step of its own: the save's step above it does its work
    reusable_in_batch_plans = True

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info if self.state_info else "state info [ <unknown> ]"
        return (
            f"SessionWindowStateStoreRestore {self.info.shown_keys()}, {si} "
            f"stateStoreCkptIds = None, {_watermarks(self.event_time_watermark_for_late_events, self.event_time_watermark_for_eviction)}, "
            f"{SESSION_STATE_FORMAT_VERSION}"
        )


@dataclass(frozen=True)
class SessionWindowStateStoreSaveExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    """Replaces the sessions of every key of the batch in the store, then outputs per mode:
    Append evicts and emits the sessions whose end is at or before the eviction watermark,
    Complete emits every stored session. Update is refused (at analysis, and here)."""

    child: PhysicalOperator | None = None
    info: SessionWindowInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    output_mode: str | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    store_conf: Any = None

    operator_name = "sessionWindowStateStoreSaveExec"
    reusable_in_batch_plans = True

    @property
    def num_cols_prefix_key(self) -> int:
        """Spark records the number of key columns without the session in the operator
        metadata (the prefix of the state key that a prefix scan uses)."""
        assert self.info is not None
        return len(self.info.key_columns)

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        return self.output_mode in ("append", "update") and self.watermark_passed_eviction(new_input_watermark_ms)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql.types import StructField, StructType

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        info = self.info
        agg = info.agg
        input_schema = _arrow_schema(df.schema)
        session_type = agg.output_schema[info.session_name].dataType
        start_type = df.schema[SESSION_START_COLUMN].dataType
        end_type = df.schema[SESSION_END_COLUMN].dataType
        fields = []
        for i, k in enumerate(agg.key_columns):
            if i == info.session_index:
                st = StructType([StructField(session_type.fields[0].name, start_type), StructField(session_type.fields[1].name, end_type)])
                fields.append(StructField(k, st, False))
            else:
                fields.append(df.schema[k])
        fields += [df.schema[b] for b in agg.buffer_columns]
        out_schema = StructType(fields)
        mode = self.output_mode or ctx.output_mode
        if mode not in ("append", "complete"):
            # reached only with spark.sql.streaming.unsupportedOperationCheck=false: Spark's
            # planner then refuses the session window itself, at the first batch
            raise output_mode_error(mode, OP_SESSION_WINDOW)
        et_key, et_struct = agg.event_time_key, agg.event_time_is_struct
        step = SessionWindowStateStep(
            **self.state_step_args(ctx),
            key_columns=info.key_columns,
            output_columns=agg.key_columns,
            session_index=info.session_index,
            session_field_names=(session_type.fields[0].name, session_type.fields[1].name),
            buffers=tuple(g for c in agg.calls for g in c.merge_groups),
            input_schema=input_schema,
            output_schema=_arrow_schema(out_schema),
            output_mode=mode,
            w_late_ms=self.event_time_watermark_for_late_events,
            w_evict_ms=self.event_time_watermark_for_eviction,
            event_time_key=None if et_key is None else (SESSION_END_COLUMN if et_key == info.session_column else et_key),
            event_time_is_struct=bool(et_struct) and et_key != info.session_column,
            merge_local=info.merge_local,
        )
        return map_state_partitions(df, step, out_schema, ctx, self.get_state_info().num_partitions)

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info if self.state_info else "state info [ <unknown> ]"
        mode = (self.output_mode or "<unknown>").capitalize()
        wm = _watermarks(self.event_time_watermark_for_late_events, self.event_time_watermark_for_eviction)
        return (
            f"SessionWindowStateStoreSave {self.info.shown_keys()}, {si} "
            f"stateStoreCkptIds = None, {mode}, {wm}, {SESSION_STATE_FORMAT_VERSION}"
        )


# --------------------------------------------------------------------------------------------
# The merge rule (pure)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionMerge:
    """The result of :func:`merge_sessions` over n rows.

    ``order``: the rows sorted by (key, start, origin, end); ``first``: in sorted order, whether a
    row opens a session (the others are absorbed into the session before them); ``starts``:
    sorted positions of the rows that open a session; ``session_start`` / ``session_end``: the
    merged bounds of each session, in the same order as ``starts``.
    """

    order: np.ndarray
    first: np.ndarray
    starts: np.ndarray
    session_start: np.ndarray
    session_end: np.ndarray


def _bits(span: int) -> int:
    return max(int(span).bit_length(), 1)


def merge_sessions(keys: np.ndarray, start: np.ndarray, end: np.ndarray, origin: np.ndarray | None = None) -> SessionMerge:
    """Spark's session merge (``MergingSessionsIterator``) over rows of many keys at once.

    Rows of one key, sorted by start, form one session as long as the next row starts at or
    before the running maximum end of the session so far (``next.start <= current.end``:
    sessions that merely touch merge too); the session's end is that maximum. ``keys`` holds a
    group number per row (:func:`statestream.state.keys.group_ids`, dense from 0), ``start``
    and ``end`` integer times; ``origin`` orders rows with equal start (0 = stored session
    before 1 = input row).

    Vectorised: one sort, then a running maximum per key computed by a single
    ``maximum.accumulate`` over values offset so that each key's values lie above every earlier
    key's. When key number and time offsets fit in 63 bits together (times spanning less than
    about a day per million keys), the sort key and the running values are packed integers;
    otherwise a lexsort and ranks of the end times are used.
    """
    n = len(start)
    if n == 0:
        e = np.empty(0, dtype=np.int64)
        return SessionMerge(e, np.empty(0, dtype=bool), e, e, e)
    origin = np.zeros(n, dtype=np.int64) if origin is None else origin
    s_min, e_min = int(start.min()), int(end.min())
    key_bits = _bits(int(keys.max()))
    start_bits = _bits(int(start.max()) - s_min) + 1  # + the origin bit
    end_bits = _bits(int(end.max()) - e_min)
    packed = key_bits + max(start_bits, end_bits) <= 62
    if packed:
        order = np.argsort((keys << start_bits) | ((start - s_min) << 1) | origin, kind="stable")
    else:
        order = np.lexsort((end, origin, start, keys))
    k = keys[order]
    s = start[order]
    e = end[order]
    boundary = np.empty(n, dtype=bool)
    boundary[0] = True
    np.not_equal(k[1:], k[:-1], out=boundary[1:])
    dense = np.cumsum(boundary) - 1
    if packed:
        running = np.maximum.accumulate((dense << end_bits) | (e - e_min))
        run_end = (running & ((1 << end_bits) - 1)) + e_min
    else:
        values, rank = np.unique(e, return_inverse=True)
        width = np.int64(len(values))
        running = np.maximum.accumulate(dense * width + rank)
        run_end = values[running - dense * width]
    first = boundary.copy()
    first[1:] |= s[1:] > run_end[:-1]
    starts = np.flatnonzero(first)
    last = np.empty(len(starts), dtype=np.int64)
    last[:-1] = starts[1:] - 1
    last[-1] = n - 1
    return SessionMerge(order, first, starts, s[starts], run_end[last])


# --------------------------------------------------------------------------------------------
# The fused state step (runs inside Spark tasks)
# --------------------------------------------------------------------------------------------


def _micros(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Timestamps (any unit) as int64 microseconds."""
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(pa.int64())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _column(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


@dataclass(frozen=True)
class SessionWindowStateStep(StateStep):
    """Restore, merge and save of one state partition of a session-window aggregation,
    picklable so Spark ships it to the Python workers; ``__call__`` is the ``mapInArrow``
    function. See :meth:`process`."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    key_columns: tuple[str, ...]
    output_columns: tuple[str, ...]
    session_index: int
    session_field_names: tuple[str, str]
    buffers: tuple[tuple[str, tuple[str, ...]], ...]  # (merge rule, buffer columns) per group
    input_schema: pa.Schema
    output_schema: pa.Schema
    output_mode: str
    w_late_ms: int | None
    w_evict_ms: int | None
    event_time_key: str | None
    event_time_is_struct: bool
    merge_local: bool = False
    store_conf: Any = None

    batch_fields: ClassVar[tuple[str, ...]] = ("version", "w_late_ms", "w_evict_ms")

    # -- layouts ----------------------------------------------------------------------------
    def _buffer_columns(self) -> list[str]:
        return [c for _, cols in self.buffers for c in cols]

    def store_schemas(self) -> tuple[pa.Schema, pa.Schema]:
        """Arrow layout of the store: key = keys + session start, value = session end + buffers."""
        s = self.input_schema
        key = pa.schema([s.field(k) for k in self.key_columns] + [s.field(SESSION_START_COLUMN).with_nullable(False)])
        value = pa.schema([s.field(SESSION_END_COLUMN)] + [s.field(c) for c in self._buffer_columns()])
        return key, value

    def _to_output(self, rows: pa.Table) -> pa.Table:
        """Store-layout rows as the operator's output: the grouping columns in the user's order
        (the session as a ``struct<start, end>``), then the buffers."""
        nk = len(self.key_columns)
        start = _column(rows.column(nk))
        end = _column(rows.column(nk + 1))
        session = pa.StructArray.from_arrays([start, end], names=list(self.session_field_names))
        arrays = []
        ki = 0
        for i in range(len(self.output_columns)):
            if i == self.session_index:
                arrays.append(session)
            else:
                arrays.append(rows.column(ki))
                ki += 1
        arrays += [rows.column(nk + 2 + j) for j in range(len(self._buffer_columns()))]
        return pa.Table.from_arrays(arrays, schema=self.output_schema)

    # -- the step ---------------------------------------------------------------------------
    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        """Run the step for one partition; returns (rows to emit, metrics).

        1. (restore) drop input rows older than the late-events watermark, counting them;
        2. (restore) take the stored sessions of every key present in the input;
        3. (merge) sort input and stored rows by key and start, merge overlapping or touching
           sessions and fold their buffers;
        4. (save) per touched key, remove stored sessions that were absorbed and put every
           resulting session (Spark counts each put as an updated row, unchanged or not);
        5. (save) Append: evict and emit sessions ending at or before the eviction watermark;
           Complete: emit every stored session; then commit version N+1.
        """
        table = self.partition_input(
            batches,
            partition,
            "the session aggregation's exchange did not partition by the keys",
            drop_partition_column=False,
        )
        mode = self.output_mode
        if mode not in ("append", "complete"):
            msg = f"Invalid output mode: {mode.capitalize() if mode else mode} for session window aggregation"
            raise ValueError(msg)
        key_schema, value_schema = self.store_schemas()
        m = self.new_metrics(
            partition,
            **{RESTORE_HIT_METRIC: 0},
            # Spark's Complete branch never sets the operator metrics, so it reports 0 instances
            numStateStoreInstances=1 if mode == "append" else 0,
        )
        with self.store_task(partition) as stores:
            store = stores.open(self.provider(partition, key_schema, value_schema))
            t0 = time.perf_counter()
            table = self._drop_late(table, m, partition)
            if table.num_rows:
                self._merge_and_put(store, table, key_schema, m)
            removal_ms = 0.0
            if mode == "append":
                r0 = time.perf_counter()
                evicted = self._evict(store)
                removal_ms = (time.perf_counter() - r0) * 1000
                m["numRemovedStateRows"] += evicted.num_rows
                output = evicted
            else:
                output = store.table()
            updates_ms = (time.perf_counter() - t0) * 1000 - removal_ms
        finish_writer_metrics(m, stores, updates_ms, removal_ms, num_output_rows=output.num_rows)
        return self._to_output(output), m

    def _evict(self, store) -> pa.Table:
        if self.event_time_key is None or self.w_evict_ms is None:
            msg = "Watermark needs to be defined for session window query in append mode"
            raise AssertionError(msg)
        # the store's columns carry the input's names, so the event-time column (the session end
        # or an event-time key) is found by name
        wm, name, is_struct = self.w_evict_ms, self.event_time_key, self.event_time_is_struct
        return store.evict(lambda t: older_than_watermark(t, name, is_struct, wm), row_wise=True)

    def _drop_late(self, table: pa.Table, m: dict, partition: int = 0) -> pa.Table:
        """Spark's restore-side late filter. Its input rows are the Partial aggregate's: one
        per (keys, input partition, initial session), or, with the local-merge conf, one per
        session merged inside an input partition. A row is late when its event time (the
        session end, or an event-time key) is at or before the late-events watermark, and
        Spark counts those rows, so the count here is of distinct such groups."""
        n = table.num_rows
        if self.event_time_key is None or self.w_late_ms is None or n == 0:
            return table
        wm = self.w_late_ms
        row_late = np.asarray(
            older_than_watermark(table, self.event_time_key, self.event_time_is_struct, wm).to_numpy(zero_copy_only=False),
            dtype=bool,
        )
        group_cols = [table.column(k) for k in self.key_columns] + [table.column(INPUT_PARTITION_COLUMN)]
        if self.merge_local:
            local = merge_sessions(
                group_ids(group_cols, n), _micros(table.column(SESSION_START_COLUMN)), _micros(table.column(SESSION_END_COLUMN))
            )
            if self.event_time_key == SESSION_END_COLUMN:
                session_late = local.session_end <= wm * 1000
            else:  # an event-time key: equal for every row of a session
                session_late = row_late[local.order[local.starts]]
            n_late = int(session_late.sum())
            late = np.empty(n, dtype=bool)
            late[local.order] = session_late[np.cumsum(local.first) - 1]
        else:
            late = row_late
            n_late = 0
            if late.any():
                sub = table.filter(pa.array(late))
                cols = [sub.column(c) for c in [*self.key_columns, INPUT_PARTITION_COLUMN, SESSION_START_COLUMN, SESSION_END_COLUMN]]
                n_late = int(group_ids(cols, sub.num_rows).max()) + 1
        m["numRowsDroppedByWatermark"] = n_late
        if n_late:
            dropped = table.filter(pa.array(late))
            self.record_late_rows(partition, dropped.drop_columns([c for c in dropped.column_names if c == INPUT_PARTITION_COLUMN]), wm)
        return table.filter(pa.array(~late)) if n_late else table

    def _merge_and_put(self, store, table: pa.Table, key_schema: pa.Schema, m: dict) -> None:
        nk = len(self.key_columns)
        stored = store.table()
        restored = stored.slice(0, 0)
        if stored.num_rows:
            batch_keys = table.select(list(self.key_columns))
            # one row per distinct key: Arrow's group_by (the faster) where it has a kernel for
            # the key types, group_ids for nested keys (an array, or a struct holding one)
            if not nk:
                unique_keys = batch_keys.slice(0, 1)
            elif any(pa.types.is_nested(f.type) for f in batch_keys.schema):
                _, firsts = np.unique(group_ids(list(batch_keys.columns), batch_keys.num_rows), return_index=True)
                unique_keys = batch_keys.take(pa.array(firsts))
            else:
                unique_keys = batch_keys.group_by(list(self.key_columns), use_threads=False).aggregate([])
            li, _ = match_keys(stored.select(list(range(nk))), unique_keys.select(list(self.key_columns)))
            if len(li):
                restored = stored.take(pa.array(np.unique(li)))
        m[RESTORE_HIT_METRIC] = restored.num_rows
        # one table of restored sessions (origin 0) then input rows (origin 1), store layout
        names = [*self.key_columns, SESSION_START_COLUMN, SESSION_END_COLUMN, *self._buffer_columns()]
        incoming = table.select(names)
        restored = pa.Table.from_arrays(restored.columns, names=names).cast(incoming.schema)
        both = pa.concat_tables([restored, incoming])
        n_restored = restored.num_rows
        origin = np.zeros(both.num_rows, dtype=np.int64)
        origin[n_restored:] = 1
        gids = group_ids([both.column(k) for k in self.key_columns], both.num_rows)
        merged = merge_sessions(gids, _micros(both.column(nk)), _micros(both.column(nk + 1)), origin)
        # only what is needed is gathered: keys at the first row of each session, the buffers in
        # sorted order, and the keys of the stored sessions that were absorbed
        heads = pa.array(merged.order[merged.starts])
        sorted_order = pa.array(merged.order)
        start_type = both.schema.field(nk).type
        end_type = both.schema.field(nk + 1).type
        cols = [both.column(k).take(heads) for k in self.key_columns]
        cols.append(_timestamps(merged.session_start, start_type))
        cols.append(_timestamps(merged.session_end, end_type))
        for rule, group in self.buffers:
            cols += merge_group_segments(rule, [both.column(c).take(sorted_order) for c in group], merged.starts)
        sessions = pa.Table.from_arrays(cols, schema=pa.schema(list(key_schema) + list(both.schema)[nk + 1 :]))
        # a stored session absorbed into a session opened by another row loses its key
        gone = merged.order[(merged.order < n_restored) & ~merged.first]
        if len(gone):
            removed = both.select(list(range(nk + 1))).take(pa.array(gone))
            store.remove(removed)
            m["numRemovedStateRows"] += removed.num_rows
        store.put(sessions)
        m["numUpdatedStateRows"] += sessions.num_rows


def _timestamps(micros: np.ndarray, typ: pa.DataType) -> pa.Array:
    """int64 microseconds as an Arrow array of ``typ`` (a timestamp type)."""
    arr = pa.array(micros, pa.int64())
    return arr.cast(pa.timestamp("us", tz=getattr(typ, "tz", None))).cast(typ)
