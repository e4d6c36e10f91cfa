"""StateStoreRestoreExec and StateStoreSaveExec: the stateful heart of a streaming aggregation.

Spark: ``StateStoreRestoreExec``, ``StateStoreSaveExec`` (``statefulOperators.scala``). In
statestream, restore, the second PartialMerge and save run fused, as one Arrow function per
state partition inside a Spark task (``AggregationStateStep``): Spark's ``mapInArrow`` hands it
the partition's merged batch buffers, one row per key. The function opens the store of
(operator, partition) at version N, restores and merges the stored buffers, applies the
output-mode rules, commits version N+1 and returns the rows to emit. State is never collected to
the driver; the driver only receives the metrics, through an accumulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.operators.state_step import StateStep, finish_writer_metrics, map_state_partitions
from statestream.operators.aggregate import IS_FINAL_STEP_COLUMN, REVISION_STATE_FIELD, AggregationInfo
from statestream.operators.base import (
    ExecutedByParent,
    PhysicalOperator,
    StatefulOperatorStateInfo,
    StateStoreWriter,
    WatermarkSupport,
)
from statestream.operators.aggregate_merge import merge_group
from statestream.state.keys import match_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = ["StateStoreRestoreExec", "StateStoreSaveExec", "AggregationStateStep", "RESTORE_HIT_METRIC"]

#: statestream's own metric (Spark has none): input keys that found saved state on restore
RESTORE_HIT_METRIC = "numRestoredStateRows"

STATE_FORMAT_VERSION = 2


@dataclass(frozen=True)
class StateStoreRestoreExec(ExecutedByParent, PhysicalOperator, StateStoreWriter):
    """Adds each key's stored buffer to the batch's buffer (executed inside the fused state step
    of the ``StateStoreSaveExec`` above it)."""

    child: PhysicalOperator | None = None
    info: AggregationInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None

    #: no step of its own: the save's step above it does its work
    reusable_in_batch_plans = True

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info
        return f"StateStoreRestore {_keys(self.info)}{si if si else 'state info [ <unknown> ]'} stateStoreCkptIds = None, {STATE_FORMAT_VERSION}"


@dataclass(frozen=True)
class StateStoreSaveExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    child: PhysicalOperator | None = None
    info: AggregationInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    output_mode: str | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    store_conf: Any = None

    operator_name = "stateStoreSave"
    reusable_in_batch_plans = True

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        """Spark: another (no-data) batch is worth running in append/update mode when the
        watermark moved past the one this batch evicted with."""
        return self.output_mode in ("append", "update") and self.watermark_passed_eviction(new_input_watermark_ms)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        fields = {f.name: f for f in df.schema.fields}
        fields.update({f.name: f for c in self.info.calls for f in c.state_fields()})
        finishers = tuple(c.step_finisher() for c in self.info.calls if hasattr(c, "step_finisher"))
        consumed = {col for f in finishers for col in f.columns}
        out_fields = [fields[c] for c in (*self.info.key_columns, *self.info.buffer_columns) if c not in consumed]
        out_fields += [StructField(f.output, LongType(), False) for f in finishers]
        if self.info.finality:
            out_fields += [StructField(REVISION_STATE_FIELD, LongType(), False), StructField(IS_FINAL_STEP_COLUMN, BooleanType(), False)]
        out_schema = StructType(out_fields)
        step = AggregationStateStep(
            **self.state_step_args(ctx),
            key_columns=self.info.key_columns,
            buffers=tuple(g for c in self.info.calls for g in c.merge_groups),
            input_schema=_arrow_schema(df.schema),
            output_mode=self.output_mode or ctx.output_mode,
            w_late_ms=self.event_time_watermark_for_late_events,
            w_evict_ms=self.event_time_watermark_for_eviction,
            event_time_key=self.info.event_time_key,
            event_time_is_struct=self.info.event_time_is_struct,
            finishers=finishers,
            finality=self.info.finality,
        )
        return map_state_partitions(
            df, step, out_schema, ctx, self.get_state_info().num_partitions if self.info.key_columns else 1
        )

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info
        mode = (self.output_mode or "<unknown>").capitalize()
        late = self.event_time_watermark_for_late_events
        evict = self.event_time_watermark_for_eviction
        wm = f", {late if late is not None else 'None'}, {evict if evict is not None else 'None'}"
        return f"StateStoreSave {_keys(self.info)}{si if si else 'state info [ <unknown> ]'} stateStoreCkptIds = None, {mode}{wm}, {STATE_FORMAT_VERSION}"


def _keys(info: AggregationInfo) -> str:
    """The state store node's keys as Spark prints them, ``[k#1L], ``; nothing for a global
    aggregation (Spark leaves an empty list out of a node's line)."""
    keys = info.key_sql()
    return f"[{keys}], " if keys else ""


def _arrow_schema(struct) -> pa.Schema:
    """The canonical Arrow schema of a Spark schema (timestamps in UTC microseconds)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timestamp_utc=True)


def event_time_micros(table: pa.Table, column: str | int, is_struct: bool) -> pa.ChunkedArray:
    """The event time of each row in µs: the raw timestamp, or a window's ``end``."""
    arr = table.column(column)
    if is_struct:
        arr = pc.struct_field(arr, "end")
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(pa.int64())
    elif pa.types.is_date(arr.type):
        arr = pc.multiply(arr.cast(pa.int32()).cast(pa.int64()), 86_400_000_000)
    return arr


def older_than_watermark(table: pa.Table, column: str | int, is_struct: bool, watermark_ms: int) -> pa.ChunkedArray:
    """Rows whose event time is ``<=`` the watermark (a null time is never older)."""
    return pc.fill_null(pc.less_equal(event_time_micros(table, column, is_struct), watermark_ms * 1000), False)


@dataclass(frozen=True)
class AggregationStateStep(StateStep):
    """The per-partition state step (restore, merge, save, commit), picklable so that Spark ships
    it to the Python workers. ``__call__`` is the ``mapInArrow`` function."""

    batch_fields: ClassVar[tuple[str, ...]] = ("version", "w_late_ms", "w_evict_ms")

    state_root: str
    run_id: str
    operator_id: int
    version: int
    key_columns: tuple[str, ...]
    #: (merge rule, buffer columns) per group; the rule is a name of ``aggregate_merge``'s rules or a
    #: ``PythonAggregateRule`` (a user's aggregate function)
    buffers: tuple[tuple[Any, tuple[str, ...]], ...]
    input_schema: pa.Schema
    output_mode: str
    w_late_ms: int | None
    w_evict_ms: int | None
    event_time_key: str | None
    event_time_is_struct: bool
    store_conf: Any = None
    #: calls finished here from their buffers (``finish(table)``), whose buffers are then not
    #: emitted (HyperLogLog++'s estimate: the sketch words stay in the state)
    finishers: tuple[Any, ...] = ()
    #: count each key's emissions in the state and emit ``revision`` and ``is_final`` (see
    #: ``operators.aggregate.FINALITY_CONF``): in update mode, a key the watermark evicts without
    #: an update in this batch is emitted once more, final
    finality: bool = False

    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        """Run the step for one partition; returns (rows to emit, metrics). Pure apart from the
        state store files, so it is unit-testable without Spark."""
        table = self.partition_input(
            batches, partition, "the aggregation's exchange did not partition by the grouping keys"
        )
        for rule, _ in self.buffers:
            if not isinstance(rule, str):  # a Python aggregate function: its batch buffers
                table = rule.update_table(table)
        key_schema = pa.schema([table.schema.field(k) for k in self.key_columns])
        value_schema = pa.schema([table.schema.field(c) for c in self._buffer_columns()])
        if self.finality:
            value_schema = value_schema.append(pa.field(REVISION_STATE_FIELD, pa.int64(), nullable=False))
        m = self.new_metrics(partition, **{RESTORE_HIT_METRIC: 0})
        with self.store_task(partition) as stores:
            store = stores.open(self.provider(partition, key_schema, value_schema))
            t0 = time.perf_counter()
            keys = table.select(list(self.key_columns))
            if table.num_rows:
                stored = store.lookup(keys)
                m[RESTORE_HIT_METRIC] = int(pc.sum(stored.column("__found")).as_py() or 0)
                found = stored.column("__found")
                merged_cols = [
                    col
                    for rule, cols in self.buffers
                    for col in merge_group(rule, [stored.column(c) for c in cols], [table.column(c) for c in cols], found)
                ]
                if self.finality:
                    # the emissions so far; an updated key is emitted now in update mode
                    emitted = pc.fill_null(stored.column(REVISION_STATE_FIELD), 0)
                    merged_cols.append(pc.add(emitted, 1) if self.output_mode == "update" else emitted)
                merged = pa.Table.from_arrays(
                    list(keys.columns) + list(merged_cols), schema=pa.schema(list(key_schema) + list(value_schema))
                )
            else:
                merged = pa.schema(list(key_schema) + list(value_schema)).empty_table()
            mode = self.output_mode
            evicted = None
            removal_ms = 0.0
            if mode == "complete":
                store.put(merged)
                m["numUpdatedStateRows"] = merged.num_rows
                output = store.table()
            elif mode in ("update", "append"):
                if self.event_time_key is not None and self.w_late_ms is not None and merged.num_rows:
                    late = older_than_watermark(merged, self.event_time_key, self.event_time_is_struct, self.w_late_ms)
                    n_late = int(pc.sum(late).as_py() or 0)
                    if n_late:
                        dropped = merged.filter(late)
                        if self.finality:  # the ledger keeps the rows' buffers, not the state's counter
                            dropped = dropped.drop_columns([REVISION_STATE_FIELD])
                        self.record_late_rows(partition, dropped, self.w_late_ms)
                        merged = merged.filter(pc.invert(late))
                    m["numRowsDroppedByWatermark"] = n_late
                store.put(merged)
                m["numUpdatedStateRows"] = merged.num_rows
                if self.event_time_key is not None and self.w_evict_ms is not None:
                    r0 = time.perf_counter()
                    col, is_struct, wm = self.event_time_key, self.event_time_is_struct, self.w_evict_ms
                    evicted = store.evict(lambda t: older_than_watermark(t, col, is_struct, wm), row_wise=True)
                    removal_ms = (time.perf_counter() - r0) * 1000
                    m["numRemovedStateRows"] = evicted.num_rows
                if self.finality:
                    output = self._with_finality(mode, merged, evicted)
                elif mode == "update":
                    output = merged
                else:
                    output = evicted if evicted is not None else merged.slice(0, 0)
            else:
                raise ValueError(f"unsupported output mode for StateStoreSaveExec: {mode}")
            updates_ms = (time.perf_counter() - t0) * 1000 - removal_ms
        finish_writer_metrics(m, stores, updates_ms, removal_ms, num_output_rows=output.num_rows)
        ends = [REVISION_STATE_FIELD, IS_FINAL_STEP_COLUMN] if self.finality else []
        output = output.select(list(self.key_columns) + self._buffer_columns() + ends)
        if self.finishers:
            finished = [f.finish(output) for f in self.finishers]
            consumed = {c for f in self.finishers for c in f.columns}
            output = output.drop_columns([c for c in self._buffer_columns() if c in consumed])
            for f, values in zip(self.finishers, finished):
                output = output.append_column(pa.field(f.output, pa.int64(), False), values)
            if ends:  # the finality columns stay last
                output = output.select([c for c in output.column_names if c not in ends] + ends)
        return output, m

    def _with_finality(self, mode: str, merged: pa.Table, evicted: pa.Table | None) -> pa.Table:
        """The rows to emit with their ``revision`` (the state's emission count, this emission
        included) and ``is_final`` (the eviction watermark passed the row's event time).

        Update mode emits the updated keys (final when the watermark evicts them in the same
        batch) and then, once more and final, the evicted keys this batch did not update, so
        that every key's last row says it is final. Append mode emits only evicted keys, each
        once: revision 1, final."""
        if evicted is None:
            evicted = merged.slice(0, 0)
        if mode == "update":
            # the eviction scanned the put rows too: an updated key it removed is final now, and
            # the evicted keys it did not match were not updated in this batch
            final = np.zeros(merged.num_rows, dtype=bool)
            if evicted.num_rows and merged.num_rows:
                keys = list(self.key_columns)
                hit, updated_hit = match_keys(evicted.select(keys), merged.select(keys))
                final[updated_hit] = True
                untouched = np.ones(evicted.num_rows, dtype=bool)
                untouched[hit] = False
                evicted = evicted.filter(pa.array(untouched))
            updated = merged.append_column(IS_FINAL_STEP_COLUMN, pa.array(final))
        else:
            updated = None
        if evicted.num_rows:
            revision = pc.add(evicted.column(REVISION_STATE_FIELD), 1)
            evicted = evicted.set_column(evicted.schema.get_field_index(REVISION_STATE_FIELD), REVISION_STATE_FIELD, revision)
        evicted = evicted.append_column(IS_FINAL_STEP_COLUMN, pa.array(np.ones(evicted.num_rows, dtype=bool)))
        if updated is None:
            return evicted
        return pa.concat_tables([updated, evicted.cast(updated.schema)]) if evicted.num_rows else updated

    def _buffer_columns(self) -> list[str]:
        return [c for _, cols in self.buffers for c in cols]
