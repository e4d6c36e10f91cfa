"""``groupBy(keys).transformWithStateInPandas(...)`` and ``transformWithState(...)``: Spark's
``TransformWithStateInPySparkExec`` (progress name ``transformWithStateInPandasExec`` for the
pandas variant).

How a batch runs here: the exchange is Spark's own ``repartition(N, *keys)``, then ``mapInArrow``
hands each task the rows of one state partition and :class:`TransformWithStateStep` does, in the
task, what Spark's Python worker and its JVM state server do together:

1. in event-time mode, rows at or below the late-event watermark are dropped
   (``numRowsDroppedByWatermark``);
2. a fresh copy of the processor gets ``init(handle)``: the handle
   (``operators/stateful_processor_handle.py``) opens one store per declared variable;
3. the rows are grouped by key (one Arrow ``group_by``); in the query's first batch the initial
   state's rows come through the same exchange and each of their keys gets
   ``handleInitialState`` first; each key with rows gets ``handleInputRows`` with its rows as one
   pandas DataFrame (``transformWithStateInPandas``) or as ``Row`` objects
   (``transformWithState``), and its output is consumed at once, so that the state calls it makes
   run under its key;
4. then every timer at or below the batch's processing time (processing-time mode) or the
   eviction watermark (event-time mode) fires, in time order: ``handleExpiredTimer`` (called with
   keyword arguments, as Spark calls it), then the timer is deleted;
5. ``close()``, the TTL cleanup (processing-time mode), and every store commits version N+1.
   If the processor raises, nothing is committed and the task fails with the user's traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import (
    IncompatibleRestartError,
    key_schema_not_compatible_error,
    operator_config_changed_error,
    schema_must_be_nullable_error,
    state_variable_type_changed_error,
    value_schema_not_compatible_error,
)
from statestream.errors.base import add_note
from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.aggregate_merge import is_nested, spark_order_ranks
from statestream.operators.base import PhysicalOperator, StatefulOperatorStateInfo, StateStoreWriter, WatermarkSupport
from statestream.operators.partition_routes import state_partition_id
from statestream.operators.python_state_values import (
    group_rows_by_key,
    pandas_frames_to_arrow,
    pandas_key_tuples,
    session_zone,
    to_pandas,
)
from statestream.operators.state_step import StateStep, StateStoreTask, finish_writer_metrics
from statestream.operators.stateful import older_than_watermark
from statestream.operators.stateful_processor_handle import (
    CLOSED,
    DATA_PROCESSED,
    EVENT_TIME,
    INITIALIZED,
    NO_TIME,
    PROCESSING_TIME,
    TIMER_PROCESSED,
    StatefulProcessorHandleImpl,
    StateVariableInfo,
    TaskState,
    timer_store_name,
    timer_threshold,
    timer_values,
)
from statestream.state import schema as S
from statestream.state.keys import match_keys
from statestream.state.provider import get_provider
from statestream.state.schema import FIRST_BATCH_PROPERTY, OPERATOR_PROPERTIES_PROPERTY, render_data_type, schemas_compatible
from statestream.state.store import StateStoreConf, StateStoreId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "TransformWithStateInfo",
    "TransformWithStateExec",
    "TransformWithStateStep",
    "SIDE_COLUMN",
    "emitted_too_old",
    "check_restart",
    "fire_expired_timers",
    "check_pandas_results",
    "pandas_piece_rows",
    "not_nullable_variable",
    "byte_conf_value",
    "MAX_RECORDS_PER_BATCH",
    "MAX_BYTES_PER_BATCH",
]

log = logging.getLogger(__name__)

#: Spark's state encoding conf (pinned in the offset log); with ``avro`` the variables' schemas
#: must be nullable
STATE_ENCODING_FORMAT = "spark.sql.streaming.stateStore.encodingFormat"

#: the confs PySpark's worker cuts a key's rows into pandas DataFrames by (Spark 4.1)
MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
#: PySpark's worker: no byte limit (``Int.MaxValue``), then the rows' size is not even measured
_NO_BYTE_LIMIT = 2**31 - 1
_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}

#: which input a row of the first batch's exchange comes from: 0 data, 1 initial state
SIDE_COLUMN = "__side"
DATA_COLUMN = "__data"
INITIAL_COLUMN = "__initial"


def pandas_piece_rows(max_records: int, max_bytes: int, avg_row_bytes: float) -> int:
    """How many of a key's rows each pandas DataFrame handed to ``handleInputRows`` holds (the
    last one of a key holds the rest). PySpark 4.1's worker adds a key's rows one by one and
    ends a DataFrame once it holds ``max_records`` rows (a limit of 0 or less: after every row)
    or its rows times their average Arrow size reach ``max_bytes``; without a byte limit
    (``Int.MaxValue``) the size is not measured."""
    n = max(1, int(max_records))
    if int(max_bytes) != _NO_BYTE_LIMIT and avg_row_bytes > 0:
        n = min(n, max(1, math.ceil(int(max_bytes) / avg_row_bytes)))
    return n


def not_nullable_variable(variables: tuple[StateVariableInfo, ...]) -> tuple[str, Any] | None:
    """The first variable with a field that is not nullable, as (name, the schema holding it:
    the value's, else a map's user key's), or None. Spark refuses such a variable under the Avro
    state encoding (``TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE``)."""
    for v in variables:
        for schema in (v.value_schema, v.user_key_schema):
            if schema is not None and any(not f.nullable for f in schema.fields):
                return v.name, schema
    return None


def byte_conf_value(text: str | None, default: int) -> int:
    """A byte-size conf as Spark reads it (``2``, ``64m``, ``1g``: a bare number is bytes)."""
    if text is None or not str(text).strip():
        return default
    found = re.fullmatch(r"\s*(-?\d+)\s*([a-zA-Z]*)\s*", str(text))
    if found is None or found.group(2).lower() not in _BYTE_UNITS:
        msg = f"Size must be specified as bytes (b), kibibytes (k), mebibytes (m), gibibytes (g), tebibytes (t), or pebibytes(p). E.g. 50b, 100k, or 250m. (got {text!r})"
        raise ValueError(msg)
    return int(found.group(1)) * _BYTE_UNITS[found.group(2).lower()]


def _arrow_bytes(table: pa.Table) -> int:
    """The size of ``table``'s Arrow buffers (what PySpark's worker measures its input by)."""
    return sum(buf.size for col in table.columns for chunk in col.chunks for buf in chunk.buffers() if buf is not None)


def emitted_too_old(event_times_ms: np.ndarray, watermark_ms: int) -> int | None:
    """The first output event time older than the late-event watermark, if any (Spark refuses
    such a row after a transformWithState that names its event-time column)."""
    t = np.asarray(event_times_ms, dtype=np.int64)
    bad = t < int(watermark_ms)
    return int(t[np.argmax(bad)]) if bad.any() else None


_KIND_NAMES = {"value": "ValueState", "list": "ListState", "map": "MapState"}


def _variables_of(value_schema_json: Mapping[str, Any]) -> dict[str, tuple[str, Any, Any]]:
    """The schema file's value struct (one field per variable: a list as an array, a map as a
    map) as name -> (kind, value schema, map user key schema)."""
    out: dict[str, tuple[str, Any, Any]] = {}
    for f in value_schema_json.get("fields", []):
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "array":
            out[f["name"]] = ("list", t["elementType"], None)
        elif isinstance(t, dict) and t.get("type") == "map":
            out[f["name"]] = ("map", t["valueType"], t["keyType"])
        else:
            out[f["name"]] = ("value", t, None)
    return out


def check_restart(
    grouping_key_schema: Mapping[str, Any],
    stored_value_schema: Mapping[str, Any],
    new_value_schema: Mapping[str, Any],
    stored_properties: Mapping[str, str] | None,
    new_properties: Mapping[str, str],
) -> None:
    """Spark's restart checks of a transformWithState, variable by variable: the time and output
    modes must not change; a variable declared in both runs must keep its kind (value, list, map) and a
    value schema that can read its stored rows. New and dropped variables are allowed."""
    for name in ("timeMode", "outputMode"):
        old, new = (stored_properties or {}).get(name), new_properties.get(name)
        if old is not None and new is not None and old != new:
            raise operator_config_changed_error(name, old, new)
    stored = _variables_of(stored_value_schema)
    for name, (kind, value, user_key) in _variables_of(new_value_schema).items():
        if name not in stored:
            continue
        old_kind, old_value, old_user_key = stored[name]
        if old_kind != kind:
            raise state_variable_type_changed_error(name, _KIND_NAMES[old_kind], _KIND_NAMES[kind])
        if user_key is not None and not schemas_compatible(old_user_key, user_key):

            def map_key(user: Any) -> dict:  # Spark shows a map entry's key as (key, userKey)
                fields = [("key", grouping_key_schema), ("userKey", user)]
                return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}

            raise key_schema_not_compatible_error(render_data_type(map_key(old_user_key)), render_data_type(map_key(user_key)))
        if not schemas_compatible(old_value, value):
            raise value_schema_not_compatible_error(render_data_type(old_value), render_data_type(value))


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _signed(h: int) -> int:
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def scala_hash_map_order(names: list[str]) -> list[str]:
    """The order in which Spark lists a transformWithState's variables in its operator
    properties: it keeps them in a Scala 2.13 ``mutable.HashMap`` and lists the values of its
    ``toMap``. The mutable map iterates by bucket (the spread hash ``h ^ (h >>> 16)`` masked by
    the table size, 16 doubled while the map is 3/4 full), then by spread hash within a bucket;
    ``toMap`` keeps that order up to 4 entries (``Map1``..``Map4``) and above builds an
    immutable CHAMP ``HashMap`` (see :func:`_champ_order`). Matching it keeps the state-metadata
    reader's ``operatorProperties`` text equal to Spark's."""
    size = 16
    while len(names) >= int(size * 0.75):
        size *= 2

    def spread(name: str) -> int:
        h = _java_string_hash(name) & 0xFFFFFFFF
        return _signed(h ^ (h >> 16))

    ordered = sorted(names, key=lambda n: ((spread(n) & 0xFFFFFFFF) & (size - 1), spread(n)))
    return ordered if len(ordered) <= 4 else _champ_order(ordered)


def _champ_improve(h: int) -> int:
    """Scala's ``Hashing.improve`` (32-bit arithmetic, unsigned shifts)."""
    h &= 0xFFFFFFFF
    h = (h + (~(h << 9) & 0xFFFFFFFF)) & 0xFFFFFFFF
    h ^= h >> 14
    h = (h + (h << 4)) & 0xFFFFFFFF
    h ^= h >> 10
    return h


def _champ_order(names: list[str], shift: int = 0) -> list[str]:
    """The iteration order of an immutable CHAMP ``HashMap`` of ``names`` (given in insertion
    order): per node, 5 bits of the improved hash from the lowest pick a slot; a slot's single
    entry is the node's own, several make a sub-node; a node yields its own entries by slot,
    then its sub-nodes by slot, depth first. Equal hashes keep insertion order."""
    if len(names) <= 1 or shift >= 32:
        return list(names)
    slots: dict[int, list[str]] = {}
    for n in names:
        slots.setdefault((_champ_improve(_java_string_hash(n)) >> shift) & 0x1F, []).append(n)
    own = [group[0] for slot, group in sorted(slots.items()) if len(group) == 1]
    nested = [n for slot, group in sorted(slots.items()) if len(group) > 1 for n in _champ_order(group, shift + 5)]
    return own + nested


_VARIABLE_TYPES = {"value": "ValueState", "list": "ListState", "map": "MapState"}


def spark_operator_properties(time_mode: str, output_mode: str, variables: tuple[StateVariableInfo, ...]) -> str:
    """The ``operatorProperties`` JSON text Spark records for a transformWithState (what its
    state-metadata reader shows): the modes, then this run's variables with their kind and
    whether they have a TTL, plus the timers of a time mode, in Spark's order."""
    entries = {v.name: (_VARIABLE_TYPES[v.kind], v.ttl_ms is not None) for v in variables}
    if time_mode != NO_TIME:
        entries[timer_store_name(time_mode)] = ("TimerState", False)
    listed = [
        {"stateName": n, "stateVariableType": entries[n][0], "ttlEnabled": entries[n][1]}
        for n in scala_hash_map_order(list(entries))
    ]
    body = {"timeMode": _time_mode_name(time_mode), "outputMode": output_mode.capitalize(), "stateVariables": listed}
    return json.dumps(body, separators=(",", ":"))


def merged_variables(stored_value_schema: Mapping[str, Any], new_value_schema: Mapping[str, Any], deleted: tuple[str, ...]) -> dict:
    """The schema file's value struct after a restart: the new run's variables, and the stored
    ones it neither declares nor deletes (their state stays on disk and a later run may declare
    them again)."""
    new_names = {f["name"] for f in new_value_schema.get("fields", [])}
    kept = [f for f in stored_value_schema.get("fields", []) if f["name"] not in new_names and f["name"] not in deleted]
    return {**new_value_schema, "fields": list(new_value_schema.get("fields", [])) + kept}


def stores_first_batch(
    stored_properties: Mapping[str, str] | None,
    stored_value_schema: Mapping[str, Any] | None,
    stores: tuple[str, ...],
    deleted: tuple[str, ...],
    batch_id: int,
) -> dict[str, int]:
    """The batch each of this run's stores was first declared in: as recorded for a store the
    last run knew (and that this run did not delete), ``batch_id`` for a store new in this run.
    A store of an older checkpoint that recorded no batches stays unrecorded for good."""
    recorded = json.loads((stored_properties or {}).get(FIRST_BATCH_PROPERTY, "{}"))
    known: set[str] = set()
    if stored_value_schema is not None:  # a restart: the stores the checkpoint already has
        known = {f["name"] for f in stored_value_schema.get("fields", [])} | {n for n in stores if n.startswith("$")}
    out = {n: int(b) for n, b in recorded.items() if n not in deleted}
    for name in stores:
        # a store the checkpoint knew before it recorded first batches stays unrecorded, in this
        # run and every later one (its beginning is inferred from its files)
        if name not in out and name not in known:
            out[name] = batch_id
    return out


def stores_dormant(
    recorded: Mapping[str, tuple[int, int | None]],
    stored_value_schema: Mapping[str, Any] | None,
    stores: tuple[str, ...],
    deleted: tuple[str, ...],
    batch_id: int,
) -> dict[str, tuple[int, int | None]]:
    """The stores of older runs that this run, beginning at ``batch_id``, does not declare, and
    those it declares again: name -> (the version the store's files stop at, the batch that
    declares it again or None).

    A variable left out of a run keeps its state (Spark keeps it in the same RocksDB instance,
    and a later run that declares it again continues from it), but its files stop at the version
    of the last batch that declared it, ``batch_id`` of the first run without it. The batch that
    declares it again loads that version and writes it as its own snapshot. The record stays
    after that batch is committed, so that the versions in between still read as the frozen
    one (and a batch re-run after a rollback declares it again the same way), until a later run
    leaves the store out again."""
    out: dict[str, tuple[int, int | None]] = {}
    for name, (frozen, again) in recorded.items():
        if name in deleted:
            continue
        if again is not None and again < batch_id:  # declared again by a committed batch
            out[name] = (frozen, again) if name in stores else (batch_id, None)
        else:
            out[name] = (frozen, batch_id if name in stores else None)
    for field_ in (stored_value_schema or {}).get("fields", []):
        name = field_["name"]
        if name not in stores and name not in deleted and name not in out:
            out[name] = (batch_id, None)
    return out


@dataclass(frozen=True)
class TransformWithStateInfo:
    """What the exchange and the operator of one ``transformWithState`` share."""

    key_indices: tuple[int, ...]
    key_names: tuple[str, ...]
    processor: Any = field(repr=False)
    output_schema: Any = field(repr=False)  # StructType of the processor's output
    output_mode: str = "update"
    time_mode: str = NO_TIME
    use_pandas: bool = True
    variables: tuple[StateVariableInfo, ...] = ()
    event_time_index: int | None = None  # the input's event-time column (late rows)
    event_time_is_struct: bool = False
    output_event_time_index: int | None = None  # eventTimeColumnName's position in the output
    initial_state: Any = field(default=None, repr=False)  # the initial state's batch DataFrame
    initial_key_names: tuple[str, ...] = ()
    #: variables ``init`` deletes with ``deleteIfExists`` and does not declare (an older run's)
    deleted_variables: tuple[str, ...] = ()
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class TransformWithStateExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    """``transformWithState(InPandas)`` on a stream (Spark: ``TransformWithStateInPySparkExec``)."""

    child: PhysicalOperator | None = None
    info: TransformWithStateInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    batch_timestamp_ms: int | None = None
    store_conf: Any = None

    @property
    def operator_name(self) -> str:  # type: ignore[override]
        """Spark's progress name: the pandas variant keeps its Spark 4.0 name."""
        return "transformWithStateInPandasExec" if self.info is None or self.info.use_pandas else "transformWithStateInPySparkExec"
    #: a restarted processor may declare new variables or drop old ones; a changed schema fails
    #: where its store is read, naming the file
    check_value_schema = False

    @property
    def state_store_names(self) -> tuple[str, ...]:
        assert self.info is not None
        names = tuple(v.name for v in self.info.variables)
        if self.info.time_mode != NO_TIME:
            names += (timer_store_name(self.info.time_mode),)
        return names or ("default",)

    def _restart_properties(self) -> dict[str, str]:
        assert self.info is not None
        return {"timeMode": _time_mode_name(self.info.time_mode), "outputMode": self.info.output_mode.capitalize()}

    def check_state_schema_compatible(self, state_root: str, operator_id: int) -> None:
        """Raise Spark's error if this processor cannot continue the stored state (the key
        schema as for every operator, then :func:`check_restart`); writes nothing (the
        compatibility check calls it too)."""
        stored = S.read_state_schema(state_root, operator_id)
        if stored is None:
            return
        key_json, value_json = self.state_schemas()
        S.check_state_schema(stored, key_json, stored.value_schema, check_value=False)
        check_restart(key_json, stored.value_schema, value_json, S.read_operator_properties(state_root, operator_id), self._restart_properties())

    def validate_and_write_state_schema(self, state_root: str, operator_id: int, schema_check_enabled: bool, batch_id: int) -> None:
        """The first batch of a run: the key schema as for every operator, then
        :func:`check_restart` against what the last run recorded, then the files are rewritten
        with this run's variables, its modes and the batch each store was first declared in
        (so that a task tells a store added in this run from a lost one)."""
        assert self.info is not None
        key_json, value_json = self.state_schemas()
        props = self._restart_properties()
        stored = S.read_state_schema(state_root, operator_id)
        stored_props = S.read_operator_properties(state_root, operator_id) if stored is not None else None
        if stored is not None:
            try:
                self.check_state_schema_compatible(state_root, operator_id)
            except IncompatibleRestartError as exc:
                if schema_check_enabled:
                    raise
                log.warning("state schema check disabled; ignoring: %s", exc)
            value_json = merged_variables(stored.value_schema, value_json, self.info.deleted_variables)
        stored_value = None if stored is None else stored.value_schema
        deleted = self.info.deleted_variables
        since = stores_first_batch(stored_props, stored_value, self.state_store_names, deleted, batch_id)
        recorded_dormant = S.read_dormant_stores(state_root, operator_id) if stored is not None else {}
        dormant = stores_dormant(recorded_dormant, stored_value, self.state_store_names, deleted, batch_id)
        S.write_state_schema(state_root, operator_id, key_json, value_json)
        S.write_operator_properties(
            state_root,
            operator_id,
            {
                **props,
                FIRST_BATCH_PROPERTY: json.dumps(since, sort_keys=True),
                S.DORMANT_PROPERTY: json.dumps({n: list(v) for n, v in dormant.items()}, sort_keys=True),
                OPERATOR_PROPERTIES_PROPERTY: S.with_run_properties(
                    stored_props, batch_id, spark_operator_properties(self.info.time_mode, self.info.output_mode, self.info.variables)
                ),
            },
        )

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        """Spark: always in processing-time mode; otherwise once the watermark moved past the
        one this batch evicted with."""
        assert self.info is not None
        if self.info.time_mode == PROCESSING_TIME:
            return True
        return self.watermark_passed_eviction(new_input_watermark_ms)

    def produces_output_watermark(self) -> bool:
        """Spark: in processing-time mode the output rows have no event time, so nothing above
        gets a watermark from this operator; otherwise its input watermark passes on."""
        return self.info is None or self.info.time_mode != PROCESSING_TIME

    def runs_batches_on_processing_time(self) -> bool:
        """Whether the operator asks for a batch on every trigger (processing-time mode)."""
        return self.info is not None and self.info.time_mode == PROCESSING_TIME

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql.pandas.types import to_arrow_schema

        assert self.child is not None and self.info is not None
        info = self.info
        if (ctx.spark.conf.get(STATE_ENCODING_FORMAT, None) or "").lower() == "avro":
            refused = not_nullable_variable(info.variables)
            if refused is not None:
                raise schema_must_be_nullable_error(refused[0], render_data_type(refused[1].jsonValue()))
        if info.deleted_variables:
            _delete_dropped_variables(self.get_state_info(), info.deleted_variables)
        with_initial = info.initial_state is not None and self.get_state_info().store_version == 0
        if with_initial:
            df, data_names = self._with_initial_state(ctx)
        else:
            df = self.child.execute(ctx)
            data_names = [n for n in df.columns if n != PARTITION_ID_COLUMN]
        step = TransformWithStateStep(
            **self.state_step_args(ctx),
            info=dataclasses.replace(info, initial_state=None),  # the DataFrame stays on the driver
            input_schema=to_arrow_schema(df.schema, timestamp_utc=True),
            data_names=tuple(data_names),
            with_initial_state=with_initial,
            w_late_ms=self.event_time_watermark_for_late_events,
            w_evict_ms=self.event_time_watermark_for_eviction,
            batch_timestamp_ms=self.batch_timestamp_ms,
            timezone=ctx.spark.conf.get("spark.sql.session.timeZone"),
            lineage=_recorded_lineage(self.get_state_info()),
            max_records_per_batch=int(ctx.spark.conf.get(MAX_RECORDS_PER_BATCH, None) or "10000"),
            max_bytes_per_batch=byte_conf_value(ctx.spark.conf.get(MAX_BYTES_PER_BATCH, None), _NO_BYTE_LIMIT),
        )
        return df.mapInArrow(step, info.output_schema)

    def _with_initial_state(self, ctx: "BatchContext") -> tuple["DataFrame", list[str]]:
        """The first batch's exchange: the data rows and the initial state's rows in one
        DataFrame (a struct of each side's columns, null on the other side), partitioned by the
        keys as the later batches' exchange partitions the data alone; and the data's columns."""
        from pyspark.sql import functions as F

        assert self.child is not None and self.child.child is not None and self.info is not None  # type: ignore[attr-defined]  # the planner's exchange: a unary node
        info = self.info
        n = int(self.get_state_info().num_partitions or 1)
        data = self.child.child.execute(ctx)  # type: ignore[attr-defined]  # (as above)
        init = info.initial_state

        def quoted(name: str) -> Any:
            return F.col("`" + name.replace("`", "``") + "`")

        key_types = [data.schema[i].dataType for i in info.key_indices]
        data_struct = F.struct(*[quoted(c) for c in data.columns])
        init_struct = F.struct(*[quoted(c) for c in init.columns])
        data_type = data.select(data_struct.alias("s")).schema[0].dataType
        init_type = init.select(init_struct.alias("s")).schema[0].dataType
        keys = [f"__k{i}" for i in range(len(key_types))]
        left = data.select(
            F.lit(0).alias(SIDE_COLUMN),
            data_struct.alias(DATA_COLUMN),
            F.lit(None).cast(init_type).alias(INITIAL_COLUMN),
            *[quoted(data.columns[i]).alias(k) for i, k in zip(info.key_indices, keys)],
        )
        right = init.select(
            F.lit(1).alias(SIDE_COLUMN),
            F.lit(None).cast(data_type).alias(DATA_COLUMN),
            init_struct.alias(INITIAL_COLUMN),
            *[quoted(name).cast(t).alias(k) for name, t, k in zip(info.initial_key_names, key_types, keys)],
        )
        both = left.unionByName(right)
        cols = [F.col(k) for k in keys]
        out = both.withColumn(PARTITION_ID_COLUMN, state_partition_id(cols, n)).repartition(n, *cols)
        return out, list(data.columns)

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info
        return (
            f"TransformWithStateInPySpark [{', '.join(self.info.key_names)}], "
            f"{self.info.output_mode.capitalize()}, {_time_mode_name(self.info.time_mode)}, "
            f"{si if si else 'state info [ <unknown> ]'}"
        )


_DELETED: set[tuple[str, int, str]] = set()
#: (state root, operator id, run id) -> the stores' first batches and the dormant stores, read
#: once per query run after the run's first batch recorded them (a new run reads them again)
_FIRST_BATCH: dict[tuple[str, int, str], "StoreLineage"] = {}
_DELETED_LOCK = threading.Lock()


def _delete_dropped_variables(si: StatefulOperatorStateInfo, names: tuple[str, ...]) -> None:
    """``deleteIfExists`` of a variable the processor no longer declares (an older run's): its
    stores go, on the driver, once per query run, before any task of the run opens a store (the
    workers' cached stores belong to the older run's id, so none of them is reused)."""
    key = (si.checkpoint_location, si.operator_id, si.query_run_id)
    with _DELETED_LOCK:
        if key in _DELETED:
            return
        _DELETED.add(key)
    op = CheckpointFileManager(si.checkpoint_location).child(str(si.operator_id))
    for partition in op.list() if op.exists() else []:
        for name in names:
            files = op.child(f"{partition}/{name}")
            if not files.exists():
                continue
            for f in files.list():
                files.delete(f)
            log.info("deleteIfExists: removed state variable %r of operator %d, partition %s", name, si.operator_id, partition)


@dataclass(frozen=True)
class StoreLineage:
    """Where each store's versions begin, as the run's first batch recorded it."""

    #: store name -> the batch that first declared it (None: a checkpoint without the record)
    first_batch: dict[str, int] | None = None
    #: store name -> (the version its content is frozen at, the batch that declares it again)
    dormant: dict[str, tuple[int, int | None]] = field(default_factory=dict)


def _recorded_lineage(si: StatefulOperatorStateInfo) -> StoreLineage:
    """The stores' lineage that the run's first batch recorded in the operator properties, read
    once per run."""
    key = (si.checkpoint_location, si.operator_id, si.query_run_id)
    with _DELETED_LOCK:
        if key in _FIRST_BATCH:
            return _FIRST_BATCH[key]
    found = StoreLineage(
        S.read_stores_first_batch(si.checkpoint_location, si.operator_id),
        S.read_dormant_stores(si.checkpoint_location, si.operator_id),
    )
    with _DELETED_LOCK:
        _FIRST_BATCH[key] = found
    return found


def _time_mode_name(mode: str) -> str:
    return {NO_TIME: "NoTime", PROCESSING_TIME: "ProcessingTime", EVENT_TIME: "EventTime"}[mode]


@dataclass(frozen=True)
class TransformWithStateStep(StateStep):
    """The state step of one partition, picklable for Spark's Python workers; ``__call__`` is the
    ``mapInArrow`` function, ``process`` the part that runs without a task."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    info: TransformWithStateInfo
    input_schema: pa.Schema
    data_names: tuple[str, ...]
    with_initial_state: bool
    w_late_ms: int | None
    w_evict_ms: int | None
    batch_timestamp_ms: int | None
    timezone: str | None = None
    store_conf: Any = None
    lineage: StoreLineage = field(default_factory=StoreLineage)
    #: how PySpark's worker cuts a key's rows into pandas DataFrames (:func:`pandas_piece_rows`)
    max_records_per_batch: int = 10000
    max_bytes_per_batch: int = _NO_BYTE_LIMIT

    # -- stores ---------------------------------------------------------------------------------

    def _opener(self, partition: int, stores: StateStoreTask):
        def open_store(name: str, key_schema: pa.Schema, value_schema: pa.Schema) -> tuple[Any, Any]:
            sid = StateStoreId(self.state_root, self.operator_id, partition, name)
            provider = get_provider(sid, key_schema, value_schema, self.store_conf or StateStoreConf(), self.run_id)
            # a variable declared from batch b on begins empty at version b, and any file it
            # needs after that is lost state (the provider's error names it)
            first = self.lineage.first_batch
            recorded = None if first is None else first.get(name)
            frozen, again = self.lineage.dormant.get(name, (None, None))
            if again is not None and again == self.version and frozen is not None and frozen < again:
                # declared again after a run without it: its content as that run left it
                # becomes this version's snapshot, and the store goes on from there
                content = provider.get_read_store(frozen, begins_at=recorded).table()
                provider.replace_version(self.version, content)
                log.info("state variable %r of operator %d, partition %d declared again: version %d from version %d",
                         name, self.operator_id, partition, self.version, frozen)
            store = stores.open(provider, begins_at=recorded)
            if recorded is None and self.version > 0 and store.num_keys() == 0 and not provider.list_files():
                # an older checkpoint that did not record when the variable was declared: said
                # aloud, since a lost store directory would look the same
                log.warning("state variable %r of operator %d, partition %d has no stored version: starting empty at version %d",
                            name, self.operator_id, partition, self.version)
            return provider, store

        return open_store

    # -- input ----------------------------------------------------------------------------------

    def _split(self, table: pa.Table) -> tuple[pa.Table, pa.Table | None, pa.Table | None]:
        """(data rows, initial state rows, the initial rows' keys) of the task's input; the keys
        are the ``__k*`` columns Spark cast to the data's key types and hashed to place them."""
        if not self.with_initial_state:
            return table, None, None
        side = table.column(SIDE_COLUMN)
        init_rows = table.filter(pc.equal(side, 1))
        data = table.filter(pc.equal(side, 0)).column(DATA_COLUMN)
        init_keys = pa.Table.from_arrays(
            [init_rows.column(f"__k{i}") for i in range(len(self.info.key_names))], names=list(self.info.key_names)
        )
        return _struct_table(data), _struct_table(init_rows.column(INITIAL_COLUMN)), init_keys

    # -- the step -------------------------------------------------------------------------------

    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        from pyspark import cloudpickle
        from pyspark.sql.streaming.stateful_processor import TimerValues

        info = self.info
        table = self.partition_input(batches, partition, "the exchange did not partition by the grouping keys")
        data, init, init_keys = self._split(table)
        m = self.new_metrics(partition)
        # Spark drops late rows in event-time mode only (with no time mode they reach the processor)
        if info.time_mode == EVENT_TIME and self.w_late_ms is not None and info.event_time_index is not None and data.num_rows:
            late = older_than_watermark(data, info.event_time_index, info.event_time_is_struct, self.w_late_ms)
            n_late = int(pc.sum(late).as_py() or 0)
            if n_late:
                self.record_late_rows(partition, data.filter(late), self.w_late_ms)
                data = data.filter(pc.invert(late))
            m["numRowsDroppedByWatermark"] = n_late

        key_names = list(info.key_names)
        data_keys = pa.Table.from_arrays([data.column(i) for i in info.key_indices], names=key_names)
        key_schema = data_keys.schema
        zone = session_zone(self.timezone)
        mode = info.time_mode
        out_rows = Output(info, self.timezone)
        tv = TimerValues(*timer_values(mode, self.batch_timestamp_ms, self.w_evict_ms))
        with self.store_task(partition) as stores:
            # the task state opens the timers' store: inside the lifecycle
            task = TaskState(
                self._opener(partition, stores),
                key_schema,
                mode,
                self.batch_timestamp_ms,
                self.w_evict_ms,
                self.version,
                zone,
                known=info.variables,
            )
            t0 = time.perf_counter()
            processor = cloudpickle.loads(cloudpickle.dumps(info.processor))  # a fresh copy per task, as in Spark
            processor.init(StatefulProcessorHandleImpl(task))
            task.handle_state = INITIALIZED
            self._process_data(task, processor, data, data_keys, init, init_keys, tv, out_rows)
            task.handle_state = DATA_PROCESSED
            updates_ms = (time.perf_counter() - t0) * 1000
            r0 = time.perf_counter()
            fire_expired_timers(task, processor, timer_threshold(mode, self.batch_timestamp_ms, self.w_evict_ms), tv, out_rows)
            task.handle_state = TIMER_PROCESSED
            processor.close()
            task.handle_state = CLOSED
            if mode == PROCESSING_TIME:
                task.remove_expired()
            removal_ms = (time.perf_counter() - r0) * 1000
            out = out_rows.table()
            self._check_output_event_time(out)
        m["numUpdatedStateRows"] = task.updated
        m["numRemovedStateRows"] = task.removed
        finish_writer_metrics(
            m, stores, updates_ms, removal_ms, num_output_rows=out.num_rows, custom=task.metrics,
            num_total_state_rows=task.num_rows_total(),
        )
        return out, m

    def _process_data(
        self,
        task: TaskState,
        processor: Any,
        data: pa.Table,
        data_keys: pa.Table,
        init: pa.Table | None,
        init_keys: pa.Table | None,
        tv: Any,
        out: "Output",
    ) -> None:
        """Phase 1: the initial state's keys (first batch) and the keys with rows."""
        info = self.info
        n_data = data.num_rows
        keys = data_keys
        if init is not None and init_keys is not None and init.num_rows:
            keys = pa.concat_tables([keys, pa.Table.from_arrays(init_keys.columns, schema=keys.schema)])
        if keys.num_rows == 0:
            return
        order, offsets = group_rows_by_key(keys)
        # Spark sorts the partition by the grouping keys: keys are processed in that order
        firsts = keys.take(pa.array(order[offsets[:-1]], type=pa.int64()))
        by_key = _sorted_order(firsts)
        sizes = np.diff(offsets)
        rank = np.empty(len(by_key), dtype=np.int64)
        rank[by_key] = np.arange(len(by_key), dtype=np.int64)
        order = order[np.argsort(np.repeat(rank, sizes), kind="stable")]
        offsets = np.concatenate([[0], np.cumsum(sizes[by_key])]).astype(np.int64)
        starts = offsets[:-1]
        unique = keys.take(pa.array(order[starts], type=pa.int64()))
        # PySpark's worker groups a key's rows by == on the key tuples: a key it finds unequal to
        # itself (self_unequal_keys) gets one handleInputRows call per row, at the key's place,
        # each seeing the state the previous call left. With an initial state, Spark's first
        # batch groups the rows on the JVM instead: one call per key
        alone = self_unequal_keys(unique, info.use_pandas) if init is None else np.zeros(unique.num_rows, dtype=bool)
        split = bool(alone.any())
        phase_row = np.arange(unique.num_rows, dtype=np.int64)
        if info.use_pandas:
            # the key pandas gives (NaN for a null number), stored as the worker sets it: a null
            # and a NaN float key are then one state key, one phase row
            tuples = pandas_key_tuples(unique, self.timezone)
            state_keys = pandas_state_keys(unique)
            if state_keys is not unique:
                key_order, key_offsets = group_rows_by_key(state_keys)
                firsts = np.sort(key_order[key_offsets[:-1]])
                phase_row = _row_index(state_keys, state_keys.take(pa.array(firsts, type=pa.int64())))
                task.begin_phase(state_keys.take(pa.array(firsts, type=pa.int64())), [tuples[i] for i in firsts])
            else:
                task.begin_phase(unique, tuples)
        else:
            tuples = _key_tuples(unique)
            task.begin_phase(unique, tuples)
        # the data rows in group order, converted once; each key's slice of them
        is_data = order < n_data
        data_order = order[is_data]
        counts = np.add.reduceat(is_data.astype(np.int64), starts) if len(starts) else np.empty(0, np.int64)
        data_bounds = np.concatenate([[0], np.cumsum(counts)])
        rows = Input(self, data.select(list(self.data_names)).take(pa.array(data_order, type=pa.int64())))
        piece = self._piece_rows(rows.table) if info.use_pandas else 0
        init_rows = None
        if init is not None and init.num_rows:
            init_order = order[~is_data] - n_data
            init_counts = np.add.reduceat((~is_data).astype(np.int64), starts)
            init_bounds = np.concatenate([[0], np.cumsum(init_counts)])
            init_rows = Input(self, init.take(pa.array(init_order, type=pa.int64())))
        for g, key in enumerate(tuples):
            task.set_key(int(phase_row[g]))
            if init_rows is not None:
                lo, hi = int(init_bounds[g]), int(init_bounds[g + 1])
                if hi > lo:
                    if info.use_pandas:
                        processor.handleInitialState(key, init_rows.frame(lo, hi), tv)
                    else:
                        for r in init_rows.rows(lo, hi):
                            processor.handleInitialState(key, r, tv)
            lo, hi = int(data_bounds[g]), int(data_bounds[g + 1])
            if split and alone[g]:
                for r in range(lo, hi):
                    self._handle_rows(processor, key, rows, r, r + 1, piece, tv, out)
            elif hi > lo:
                self._handle_rows(processor, key, rows, lo, hi, piece, tv, out)
        task.end_phase()

    def _handle_rows(self, processor: Any, key: tuple, rows: "Input", lo: int, hi: int, piece: int, tv: Any, out: "Output") -> None:
        """``handleInputRows`` of ``key`` over the phase's rows ``lo:hi``."""
        values = rows.frames(lo, hi, piece) if self.info.use_pandas else iter(rows.rows(lo, hi))
        try:
            out.add(processor.handleInputRows(key, values, tv))
        except Exception as exc:
            add_note(exc, f"transformWithState: the processor failed for key {key!r}")  # beyond Spark
            raise

    def _piece_rows(self, table: pa.Table) -> int:
        """The rows of one pandas DataFrame of a key (:func:`pandas_piece_rows`), the average
        row size taken over the task's data rows."""
        avg = 0.0
        if self.max_bytes_per_batch != _NO_BYTE_LIMIT and table.num_rows:
            avg = _arrow_bytes(table) / table.num_rows
        return pandas_piece_rows(self.max_records_per_batch, self.max_bytes_per_batch, avg)

    def _check_output_event_time(self, out: pa.Table) -> None:
        """Spark's check of ``eventTimeColumnName``: no output row older than the watermark."""
        idx = self.info.output_event_time_index
        if idx is None or self.w_late_ms is None or out.num_rows == 0:
            return
        col = out.column(idx)
        micros = pc.cast(col, pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        too_old = emitted_too_old(micros // 1000, self.w_late_ms)
        if too_old is not None:
            raise RuntimeError(
                f"[EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED] Previous node emitted a row with eventTime={too_old} "
                f"which is older than current_watermark_value={self.w_late_ms}. This can lead to correctness issues in "
                "the stateful operators downstream in the execution pipeline. Please correct the operator logic to "
                "emit rows after current global watermark value. SQLSTATE: 42815"
            )


def fire_expired_timers(task: TaskState, processor: Any, threshold: int | None, timer_values: Any, out: Any) -> None:
    """The timer phase of a batch: every timer at or below ``threshold``, in time order, gets
    ``handleExpiredTimer`` under its key (with keyword arguments, as Spark calls it) and is then
    deleted; ``out.add`` consumes what each call yields."""
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

    if task.timers is None or threshold is None:
        return
    keys, times = task.timers.expired(threshold)
    if not times:
        return
    order, offsets = group_rows_by_key(keys)
    unique = keys.take(pa.array(np.sort(order[offsets[:-1]]), type=pa.int64()))
    tuples = _key_tuples(unique)
    task.begin_phase(unique, tuples)
    row_of = _row_index(keys, unique)
    for i, ts in enumerate(times):
        row = int(row_of[i])
        task.set_key(row)
        try:
            out.add(processor.handleExpiredTimer(key=tuples[row], timerValues=timer_values, expiredTimerInfo=ExpiredTimerInfo(ts)))
        except Exception as exc:
            add_note(exc, f"transformWithState: handleExpiredTimer failed for key {tuples[row]!r}, timer {ts}")  # beyond Spark
            raise
        task.timers.delete(row, ts)
        task.metrics["numDeletedTimers"] += 1
        task.metrics["numExpiredTimers"] += 1
    task.end_phase()


def check_pandas_results(result: Any) -> Iterator[Any]:
    """A pandas processor's output, each item checked as PySpark's worker checks it."""
    import pandas as pd

    for pdf in result:
        if not isinstance(pdf, pd.DataFrame):
            from pyspark.errors import PySparkTypeError

            raise PySparkTypeError(
                errorClass="UDF_RETURN_TYPE",
                messageParameters={"expected": "iterator of pandas.DataFrame", "actual": f"iterator of {type(pdf).__name__}"},
            )
        yield pdf


def _struct_table(column: Any) -> pa.Table:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(arr, pa.ChunkedArray):  # no chunks at all
        arr = pa.array([], type=arr.type)
    return pa.Table.from_batches([pa.RecordBatch.from_struct_array(arr)]) if len(arr) else pa.schema(list(arr.type)).empty_table()


def self_unequal_keys(keys: pa.Table, pandas: bool) -> np.ndarray:
    """For each key row, whether PySpark's worker finds the key unequal to itself: a NaN in a
    float column; with pandas also a null where pandas holds NaN or NaT (integral, floating,
    timestamp and day-time interval columns). Its rows are never grouped: each is a call.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"k": pa.array([1, None], pa.int32()), "f": pa.array([float("nan"), 1.0])})
    >>> self_unequal_keys(t, pandas=True).tolist(), self_unequal_keys(t, pandas=False).tolist()
    ([True, True], [True, False])
    """
    out = np.zeros(keys.num_rows, dtype=bool)
    for column in keys.columns:
        t = column.type
        floating = pa.types.is_floating(t)
        if floating:
            out |= pc.fill_null(pc.is_nan(column), False).to_numpy(zero_copy_only=False)
        nan_like = floating or pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t)
        if pandas and nan_like:
            out |= pc.is_null(column).to_numpy(zero_copy_only=False)
    return out


def _sorted_order(keys: pa.Table) -> np.ndarray:
    """Row order of ``keys`` sorted ascending, nulls first (Spark's ``ASC NULLS FIRST``); arrays
    and structs, which Arrow cannot sort, through their ranks under Spark's order."""
    if any(is_nested(t) for t in keys.schema.types):
        keys = pa.table({n: spark_order_ranks(c) if is_nested(c.type) else c for n, c in zip(keys.column_names, keys.columns)})
    try:  # pyarrow 25+: the null placement goes with each sort key
        order = pc.sort_indices(keys, sort_keys=[(n, "ascending", "at_start") for n in keys.column_names])
    except (TypeError, ValueError, pa.ArrowInvalid):
        order = pc.sort_indices(keys, sort_keys=[(n, "ascending") for n in keys.column_names], null_placement="at_start")
    return order.to_numpy()


def _key_tuples(keys: pa.Table) -> list[tuple]:
    """Each key row as the tuple PySpark passes to ``handleInputRows`` of ``transformWithState``
    and to ``handleExpiredTimer``: Python scalars, as ``as_py`` gives them."""
    columns = [c.to_pylist() for c in keys.columns]
    return list(zip(*columns)) if columns else [()] * keys.num_rows


def pandas_state_keys(keys: pa.Table) -> pa.Table:
    """The state keys of ``transformWithStateInPandas``: the key PySpark's worker sets is the
    pandas one, so a null float key is stored as NaN (a null integer stays null: the JVM makes
    null of a NaN for an integral field). ``keys`` itself when no float key is null.

    Examples
    --------
    >>> import pyarrow as pa
    >>> pandas_state_keys(pa.table({"k": pa.array([None, 1.5])})).column("k").to_pylist()
    [nan, 1.5]
    """
    if not any(pa.types.is_floating(c.type) and c.null_count for c in keys.columns):
        return keys
    columns = [
        pc.fill_null(c, pa.scalar(float("nan"), c.type)) if pa.types.is_floating(c.type) and c.null_count else c
        for c in keys.columns
    ]
    return pa.Table.from_arrays(columns, schema=keys.schema)


def _row_index(rows: pa.Table, unique: pa.Table) -> np.ndarray:
    """For each row of ``rows``, the row of ``unique`` holding the same key."""
    li, ri = match_keys(rows, unique)
    out = np.empty(rows.num_rows, dtype=np.int64)
    out[li] = ri
    return out


class Input:
    """One phase's rows in key order, handed out per key as pandas slices or ``Row`` objects."""

    def __init__(self, step: TransformWithStateStep, table: pa.Table) -> None:
        self.step = step
        self.table = table
        self._pdf: Any = None
        self._rows: list | None = None

    def frame(self, lo: int, hi: int) -> Any:
        import pandas as pd

        if self._pdf is None:
            self._pdf = to_pandas(self.table, self.step.timezone)
        chunk = self._pdf.iloc[lo:hi]
        chunk.index = pd.RangeIndex(hi - lo)
        return chunk

    def frames(self, lo: int, hi: int, piece: int) -> Iterator[Any]:
        """Rows ``lo:hi`` (one key's) as DataFrames of ``piece`` rows each, the last one with
        the rest (each indexed from 0), made as the caller iterates."""
        for start in range(lo, hi, max(1, piece)):
            yield self.frame(start, min(hi, start + max(1, piece)))

    def rows(self, lo: int, hi: int) -> list:
        if self._rows is None:
            from pyspark.sql.types import Row

            make = Row(*self.table.column_names)
            tz = self.step.timezone
            # PySpark's row conversion hands out timestamps in the session's time zone
            columns = [(c.cast(_in_zone(c.type, tz)) if tz else c).to_pylist() for c in self.table.columns]
            self._rows = [make(*vals) for vals in zip(*columns)] if columns else []
        return self._rows[lo:hi]


def _in_zone(t: pa.DataType, tz: str) -> pa.DataType:
    """``t`` with every zoned timestamp in it (nested ones too) shown in ``tz``."""
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, tz=tz) if t.tz is not None else t
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_in_zone(f.type, tz)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_field.with_type(_in_zone(t.value_type, tz))
        return pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner)
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_in_zone(t.key_type, tz)), t.item_field.with_type(_in_zone(t.item_type, tz)))
    return t


class Output:
    """What the processor yields, kept per call and converted once at the end."""

    def __init__(self, info: TransformWithStateInfo, timezone: str | None) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self.info = info
        self.timezone = timezone
        self.type = to_arrow_type(info.output_schema, timestamp_utc=True)
        self.frames: list = []
        self.rows: list = []

    def add(self, result: Any) -> None:
        """Consume one call's result now (its state calls run under the current key)."""
        if result is None:
            return
        if self.info.use_pandas:
            self.frames.extend(pdf for pdf in check_pandas_results(result) if len(pdf))
        else:
            self.rows.extend(result)

    def table(self) -> pa.Table:
        if self.info.use_pandas:
            from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer

            ser = ArrowStreamPandasUDFSerializer(self.timezone, False, True, arrow_cast=True)
            return pandas_frames_to_arrow(ser, self.frames, self.type)
        schema = pa.schema(list(self.type))
        if not self.rows:
            return schema.empty_table()
        dicts = [r.asDict(True) if hasattr(r, "asDict") else dict(r) for r in self.rows]
        return pa.Table.from_batches([pa.RecordBatch.from_pylist(dicts, schema=schema)])
