"""``groupBy(keys).applyInPandasWithState(...)``: Spark's ``FlatMapGroupsInPandasWithStateExec``
(a ``FlatMapGroupsWithStateExec`` whose function is a Python one; progress name
``applyInPandasWithState``).

How a batch runs here: the exchange is Spark's own ``repartition(N, *keys)`` (the same
``pmod(murmur3(keys), N)`` placement as Spark's stateful exchange), then ``mapInArrow`` hands each
task the rows of one state partition and :class:`FlatMapGroupsWithStateStep` does, in the task:

1. with an event-time timeout only, rows at or below the late-event watermark are dropped
   (``numRowsDroppedByWatermark``), as Spark filters them only in that timeout mode;
2. the rows are grouped by key (one Arrow ``group_by``), the partition is converted to pandas once
   with PySpark's own Arrow-to-pandas conversion and sliced per key; the stored state of all
   those keys comes from one ``lookup``;
3. the user function runs per key with PySpark's own ``GroupState`` and PySpark's own wrapper
   (which checks what the function returns, with PySpark's errors); the state decisions are
   Spark's: removed without a timeout -> the key is removed; otherwise the row is written when the
   state was updated, removed, or a timeout is set;
4. after every key with data, the keys whose stored timeout is set and below the threshold
   (the batch timestamp for processing-time timeouts, the eviction watermark for event-time
   ones) are called with ``hasTimedOut`` true and an empty DataFrame;
5. all writes go to the store as one ``put`` and one ``remove``, then version N+1 is committed.
   If the user function raises, nothing is committed and the task fails with the user's traceback.

State rows follow Spark's state format version 2 of this operator: the key columns, then the value
``groupState`` (the user's state struct, nullable) and, when a timeout is configured,
``timeoutTimestamp`` (long, -1 when none is set).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.errors.base import add_note
from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.base import PhysicalOperator, StatefulOperatorStateInfo, StateStoreWriter, WatermarkSupport
from statestream.operators.python_state_values import (
    from_session_wall_clock,
    group_rows_by_key,
    has_timestamp,
    pandas_frames_to_arrow,
    to_pandas,
    session_zone,
    to_session_wall_clock,
)
from statestream.operators.state_step import StateStep, finish_writer_metrics
from statestream.operators.stateful import older_than_watermark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "NO_TIMESTAMP",
    "NO_TIMEOUT",
    "PROCESSING_TIME_TIMEOUT",
    "EVENT_TIME_TIMEOUT",
    "GROUP_STATE_FIELD",
    "TIMEOUT_TIMESTAMP_FIELD",
    "FlatMapGroupsWithStateInfo",
    "FlatMapGroupsWithStateExec",
    "FlatMapGroupsWithStateStep",
    "timeout_threshold",
    "timed_out_mask",
    "state_write_action",
]

NO_TIMESTAMP = -1
NO_TIMEOUT = "NoTimeout"
PROCESSING_TIME_TIMEOUT = "ProcessingTimeTimeout"
EVENT_TIME_TIMEOUT = "EventTimeTimeout"
#: value fields of Spark's state format version 2 for this operator
GROUP_STATE_FIELD = "groupState"
TIMEOUT_TIMESTAMP_FIELD = "timeoutTimestamp"


# ----------------------------------------------------------------------------------------------
# Pure rules (no Spark)
# ----------------------------------------------------------------------------------------------


def timeout_threshold(timeout_conf: str, batch_timestamp_ms: int | None, eviction_watermark_ms: int | None) -> int | None:
    """The time a stored timeout must be below to fire in this batch, or ``None`` (no timeouts)."""
    if timeout_conf == PROCESSING_TIME_TIMEOUT:
        return batch_timestamp_ms
    if timeout_conf == EVENT_TIME_TIMEOUT:
        return eviction_watermark_ms
    return None


def timed_out_mask(timeouts: np.ndarray, threshold: int) -> np.ndarray:
    """Which stored rows time out: a timeout is set (not -1) and strictly below the threshold."""
    t = np.asarray(timeouts, dtype=np.int64)
    return (t != NO_TIMESTAMP) & (t < threshold)


def state_write_action(removed: bool, updated: bool, timeout_ms: int) -> str | None:
    """What happens to a key's stored row after a call (Spark's rule): ``"remove"`` when the state
    was removed and no timeout is set, ``"put"`` when it was updated, removed (with a timeout) or
    a timeout is set (each call starts with none), else ``None`` (the stored row stays as is)."""
    if removed and timeout_ms == NO_TIMESTAMP:
        return "remove"
    if updated or removed or timeout_ms != NO_TIMESTAMP:
        return "put"
    return None


# ----------------------------------------------------------------------------------------------
# Planning record and physical operator
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatMapGroupsWithStateInfo:
    """What the exchange and the operator of one ``applyInPandasWithState`` share."""

    key_indices: tuple[int, ...]
    key_names: tuple[str, ...]
    func: Any = field(repr=False)
    output_schema: Any = field(repr=False)  # StructType of the function's output
    state_schema: Any = field(repr=False)  # StructType of the user's state
    func_output_mode: str = "update"
    timeout_conf: str = NO_TIMEOUT
    event_time_index: int | None = None
    event_time_is_struct: bool = False
    watermark_present: bool = False
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class FlatMapGroupsWithStateExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    """``applyInPandasWithState`` on a stream (Spark: ``FlatMapGroupsInPandasWithStateExec``)."""

    child: PhysicalOperator | None = None
    info: FlatMapGroupsWithStateInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    batch_timestamp_ms: int | None = None
    store_conf: Any = None

    operator_name = "applyInPandasWithState"

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        """Spark: always with a processing-time timeout; with an event-time timeout once the
        watermark moved past the one this batch evicted with; never otherwise."""
        assert self.info is not None
        if self.info.timeout_conf == PROCESSING_TIME_TIMEOUT:
            return True
        if self.info.timeout_conf == EVENT_TIME_TIMEOUT:
            return self.watermark_passed_eviction(new_input_watermark_ms)
        return False

    def runs_batches_on_processing_time(self) -> bool:
        """Whether the operator asks for a batch on every trigger (a processing-time timeout)."""
        return self.info is not None and self.info.timeout_conf == PROCESSING_TIME_TIMEOUT

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql.pandas.types import to_arrow_schema

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        step = FlatMapGroupsWithStateStep(
            **self.state_step_args(ctx),
            info=self.info,
            input_schema=to_arrow_schema(df.schema, timestamp_utc=True),
            data_names=tuple(n for n in df.columns if n != PARTITION_ID_COLUMN),
            w_late_ms=self.event_time_watermark_for_late_events,
            w_evict_ms=self.event_time_watermark_for_eviction,
            batch_timestamp_ms=self.batch_timestamp_ms,
            timezone=ctx.spark.conf.get("spark.sql.session.timeZone"),
        )
        return df.mapInArrow(step, self.info.output_schema)

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info
        return (
            f"FlatMapGroupsInPandasWithState [{', '.join(self.info.key_names)}], "
            f"{self.info.func_output_mode.capitalize()}, {self.info.timeout_conf}, "
            f"{si if si else 'state info [ <unknown> ]'}"
        )


# ----------------------------------------------------------------------------------------------
# The per-partition state step
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatMapGroupsWithStateStep(StateStep):
    """The state step of one partition, picklable for Spark's Python workers; ``__call__`` is the
    ``mapInArrow`` function, ``process`` the part that runs without a task."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    info: FlatMapGroupsWithStateInfo
    input_schema: pa.Schema
    data_names: tuple[str, ...]
    w_late_ms: int | None
    w_evict_ms: int | None
    batch_timestamp_ms: int | None
    timezone: str | None = None
    store_conf: Any = None

    # -- schemas ---------------------------------------------------------------------------------

    def _timeout_enabled(self) -> bool:
        return self.info.timeout_conf != NO_TIMEOUT

    def _state_arrow_type(self) -> pa.DataType:
        from pyspark.sql.pandas.types import to_arrow_type

        return to_arrow_type(self.info.state_schema, timestamp_utc=True)

    def _value_schema(self) -> pa.Schema:
        fields = [pa.field(GROUP_STATE_FIELD, self._state_arrow_type(), nullable=True)]
        if self._timeout_enabled():
            fields.append(pa.field(TIMEOUT_TIMESTAMP_FIELD, pa.int64(), nullable=False))
        return pa.schema(fields)

    # -- the step --------------------------------------------------------------------------------

    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        import pandas as pd
        from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer
        from pyspark.sql.pandas.types import to_arrow_type
        from pyspark.sql.streaming.state import GroupState
        from pyspark.sql.types import Row

        info = self.info
        table = self.partition_input(batches, partition, "the exchange did not partition by the grouping keys")
        m = self.new_metrics(partition)
        if (
            info.timeout_conf == EVENT_TIME_TIMEOUT
            and self.w_late_ms is not None
            and info.event_time_index is not None
            and table.num_rows
        ):
            late = older_than_watermark(table, info.event_time_index, info.event_time_is_struct, self.w_late_ms)
            n_late = int(pc.sum(late).as_py() or 0)
            if n_late:
                self.record_late_rows(partition, table.filter(late), self.w_late_ms)
                table = table.filter(pc.invert(late))
            m["numRowsDroppedByWatermark"] = n_late

        key_names = list(info.key_names)
        keys = pa.Table.from_arrays([table.column(i) for i in info.key_indices], names=key_names)
        key_schema = keys.schema
        value_schema = self._value_schema()
        ser = ArrowStreamPandasUDFSerializer(self.timezone, False, True, arrow_cast=True)
        out_type = to_arrow_type(info.output_schema, timestamp_utc=True)
        n_out_cols = len(info.output_schema.fields)
        timeout_on = self._timeout_enabled()
        watermark = self.w_evict_ms if self.w_evict_ms is not None else NO_TIMESTAMP
        batch_ts = self.batch_timestamp_ms if self.batch_timestamp_ms is not None else NO_TIMESTAMP
        state_names = list(info.state_schema.names)

        frames: list[Any] = []  # the function's non-empty DataFrames, converted once at the end
        puts: list[tuple[Any, int]] = []
        put_rows: list[int] = []  # row of each put in the phase's key table
        remove_rows: list[int] = []
        counts = {"put": 0, "remove": 0}

        def key_tuples(t: pa.Table) -> list[tuple]:
            """Each key row as the tuple PySpark passes (the first value of each key Series)."""
            kp = to_pandas(t, self.timezone)
            columns = [kp[c].values for c in kp.columns]
            return list(zip(*columns)) if columns else [()] * t.num_rows

        def call(key: tuple, values, stored, timed_out: bool, row: int) -> None:
            state = GroupState(
                optionalValue=Row(**stored) if stored is not None else None,  # type: ignore[arg-type]  # None with defined=False: no state (PySpark reads the value only when defined)
                batchProcessingTimeMs=batch_ts,
                eventTimeWatermarkMs=watermark,
                timeoutConf=info.timeout_conf,
                hasTimedOut=timed_out,
                watermarkPresent=info.watermark_present,
                defined=stored is not None,
                updated=False,
                removed=False,
                timeoutTimestamp=NO_TIMESTAMP,
                keyAsUnsafe=b"",
                valueSchema=info.state_schema,
            )
            try:
                result_iter = info.func(key, values, state)
                for pdf in _checked_results(result_iter, n_out_cols):
                    if len(pdf):
                        frames.append(pdf)
            except Exception as exc:
                # beyond Spark: say which key the function failed on (shown under the traceback)
                add_note(exc, f"applyInPandasWithState: the function failed for key {key!r}{' (timed out)' if timed_out else ''}")
                raise
            timeout = int(state._timeout_timestamp) if timeout_on else NO_TIMESTAMP  # noqa: SLF001
            action = state_write_action(state._removed, state._updated, timeout)  # noqa: SLF001
            if action == "remove":
                remove_rows.append(row)
            elif action == "put":
                value = dict(zip(state_names, tuple(state._value))) if state.exists else None  # noqa: SLF001
                puts.append((value, timeout))
                put_rows.append(row)
            if action is not None:
                counts[action] += 1

        state_type = value_schema.field(GROUP_STATE_FIELD).type
        zone = session_zone(self.timezone)

        def stored_values(column: Any) -> list:
            """Stored states as dicts, timestamps as naive wall-clock datetimes of the session time
            zone (what Spark's JVM hands PySpark), not Arrow's UTC-aware ones."""
            values = column.to_pylist()
            if not has_timestamp(state_type):
                return values
            return [None if v is None else to_session_wall_clock(v, state_type, zone) for v in values]

        with self.store_task(partition) as stores:
            store = stores.open(self.provider(partition, key_schema, value_schema))
            t0 = time.perf_counter()
            order, offsets = group_rows_by_key(keys)
            sorted_table = table.take(pa.array(order, type=pa.int64())) if table.num_rows else table
            data = sorted_table.select(list(self.data_names))
            pdf_all = to_pandas(data, self.timezone)
            starts = offsets[:-1]
            group_keys = keys.take(pa.array(order[starts] if len(starts) else np.empty(0, np.int64), type=pa.int64()))
            if group_keys.num_rows:
                stored = store.lookup(group_keys)
                stored_state = stored_values(stored.column(GROUP_STATE_FIELD))
                found = stored.column("__found").to_pylist()
                tuples = key_tuples(group_keys)
                for g in range(group_keys.num_rows):
                    lo, hi = int(offsets[g]), int(offsets[g + 1])
                    chunk = pdf_all.iloc[lo:hi]
                    chunk.index = pd.RangeIndex(hi - lo)
                    call(tuples[g], iter([chunk]), stored_state[g] if found[g] else None, False, g)
            self._apply(store, group_keys, puts, put_rows, remove_rows, value_schema)
            updates_ms = (time.perf_counter() - t0) * 1000

            r0 = time.perf_counter()
            threshold = timeout_threshold(info.timeout_conf, self.batch_timestamp_ms, self.w_evict_ms)
            if threshold is not None:
                current = store.table()
                if current.num_rows:
                    mask = timed_out_mask(current.column(TIMEOUT_TIMESTAMP_FIELD).to_numpy(), threshold)
                    due = current.filter(pa.array(mask))
                    if due.num_rows:
                        puts, put_rows, remove_rows = [], [], []
                        due_keys = due.select(key_names)
                        due_states = stored_values(due.column(GROUP_STATE_FIELD))
                        tuples = key_tuples(due_keys)
                        empty = to_pandas(data.schema.empty_table(), self.timezone)
                        for i in range(due.num_rows):
                            call(tuples[i], iter([empty.copy()]), due_states[i], True, i)
                        self._apply(store, due_keys, puts, put_rows, remove_rows, value_schema)
            removal_ms = (time.perf_counter() - r0) * 1000
            m["numUpdatedStateRows"] = counts["put"]
            m["numRemovedStateRows"] = counts["remove"]
            out = pandas_frames_to_arrow(ser, frames, out_type, padded=True)
        finish_writer_metrics(m, stores, updates_ms, removal_ms, num_output_rows=out.num_rows)
        return out, m

    def _apply(self, store, key_table: pa.Table, puts, put_rows, remove_rows, value_schema: pa.Schema) -> None:
        """Write one phase's decisions: one ``put`` of the changed rows, one ``remove``."""
        if put_rows:
            keys = key_table.take(pa.array(put_rows, type=pa.int64()))
            cols = list(keys.columns)
            state_type = value_schema.field(GROUP_STATE_FIELD).type
            values = [p[0] for p in puts]
            if has_timestamp(state_type):
                zone = session_zone(self.timezone)
                values = [from_session_wall_clock(v, state_type, zone) for v in values]
            cols.append(pa.array(values, type=state_type))
            if self._timeout_enabled():
                cols.append(pa.array([p[1] for p in puts], type=pa.int64()))
            store.put(pa.Table.from_arrays(cols, schema=pa.schema(list(keys.schema) + list(value_schema))))
        if remove_rows:
            store.remove(key_table.take(pa.array(remove_rows, type=pa.int64())))


def _checked_results(result_iter: Any, n_columns: int):
    """The function's result checked as PySpark's worker checks it (same error classes)."""
    import pandas as pd
    from pyspark.errors import PySparkRuntimeError, PySparkTypeError

    if isinstance(result_iter, pd.DataFrame):
        raise PySparkTypeError(
            errorClass="UDF_RETURN_TYPE",
            messageParameters={"expected": "iterable of pandas.DataFrame", "actual": type(result_iter).__name__},
        )
    try:
        it = iter(result_iter)
    except TypeError:
        raise PySparkTypeError(
            errorClass="UDF_RETURN_TYPE", messageParameters={"expected": "iterable", "actual": type(result_iter).__name__}
        ) from None
    for result in it:
        if not isinstance(result, pd.DataFrame):
            raise PySparkTypeError(
                errorClass="UDF_RETURN_TYPE",
                messageParameters={"expected": "iterator of pandas.DataFrame", "actual": f"iterator of {type(result).__name__}"},
            )
        if not (len(result.columns) == n_columns or (len(result.columns) == 0 and result.empty)):
            raise PySparkRuntimeError(
                errorClass="RESULT_COLUMN_SCHEMA_MISMATCH",
                messageParameters={"expected": str(n_columns), "actual": str(len(result.columns))},
            )
        yield result
