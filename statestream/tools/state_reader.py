"""Spark's state data sources over statestream checkpoints: ``statestore`` and ``state-metadata``.

``ss.read.format("statestore").load(checkpoint)`` gives, as Spark's reader does over Spark's
checkpoints, one row per state entry: ``key`` (a struct of the operator's state key), ``value``
(a struct of its state value) and ``partition_id``; with ``readChangeFeed`` the rows are the
changes of a range of batches, with ``batch_id`` and ``change_type`` in front.
``ss.read.format("state-metadata").load(checkpoint)`` gives one row per operator and store.

statestream stores a state partition as Arrow files with internal column names; the names and
types the reader shows come from the operator's schema file, which statestream writes in Spark's
format (``state.schema``), matched to the stored columns by position.

Reading is a Spark job: one task per state partition, each loading its partition's files with
the engine's own ``StateStoreProvider`` (what a restart would load), never a loop on the driver.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeqLog, is_repartition_batch, partitions_of_batch, state_partitions_of_batch
from statestream.errors import (
    StatestreamSparkRuntimeException,
    boolean_format_error,
    number_format_error,
    state_source_boolean_option_error,
    state_source_change_end_before_start_error,
    state_source_change_feed_across_repartition_error,
    state_source_change_feed_only_option_error,
    state_source_conflicting_options_error,
    state_source_join_side_error,
    state_source_key_not_decodable_error,
    state_source_no_committed_batch_error,
    state_source_no_partition_error,
    state_source_no_state_variables_error,
    state_source_offset_log_unavailable_error,
    state_source_option_empty_error,
    state_source_option_needs_transform_with_state_error,
    state_source_option_negative_error,
    state_source_required_option_error,
    state_source_requirement_failed_error,
    state_source_schema_unreadable_error,
    state_source_snapshot_partition_not_found_error,
    state_source_snapshot_start_after_batch_error,
    state_source_state_variable_not_defined_error,
    state_source_timers_without_time_mode_error,
)
from statestream.operators.dedup import binary_comparable_decoded_keys
from statestream.state.provider import OP_COLUMN, StateStoreProvider, stored_schemas
from statestream.state.schema import (
    operator_properties_by_run,
    operator_properties_of_batch,
    read_all_operator_metadata,
    read_dormant_stores,
    read_operator_metadata,
    read_operator_properties,
    read_state_schema,
    read_store_schema,
)
from statestream.state.layered import LayeredStateStore
from statestream.state.store import OP_REMOVE, StateStoreConf, StateStoreId
from statestream.tools.python_state_reader import (
    PYTHON_STATE_OPERATORS,
    PythonStateReadPlan,
    check_snapshot_to_start_from,
    python_state_partition_table,
    python_state_schema,
    variable_kind,
)
from statestream.tools.state_tables import store_begins_at, stored_version

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "STATE_METADATA_FORMAT",
    "STATE_STORE_FORMAT",
    "StateSourceOptions",
    "read_state_metadata",
    "read_state_store",
    "state_metadata_rows",
]

log = logging.getLogger(__name__)

STATE_STORE_FORMAT = "statestore"
STATE_METADATA_FORMAT = "state-metadata"

#: the state-metadata source's columns (Spark's names and types)
METADATA_SCHEMA = (
    "operatorId LONG, operatorName STRING, stateStoreName STRING, numPartitions INT, "
    "minBatchId LONG, maxBatchId LONG, operatorProperties STRING"
)


def _number(options: Mapping[str, Any], name: str) -> int | None:
    """A numeric option as Spark parses it (Java's ``parseLong``: no blanks, a sign allowed)."""
    raw = options.get(name.lower())
    if raw is None:
        return None
    text = str(raw)
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise number_format_error(text)
    return int(text)


def _boolean(options: Mapping[str, Any], name: str, default: bool, wrapped: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).lower()
    if text not in ("true", "false"):
        if wrapped:
            raise state_source_boolean_option_error(name)
        raise boolean_format_error(raw)
    return text == "true"


def resolved_location(path: str) -> str:
    """The checkpoint as Spark's messages show it: a local path fully qualified (``file:/...``)."""
    if "://" in path or path.startswith("file:"):
        return path
    import os

    return "file://" + os.path.abspath(path)


@dataclass(frozen=True)
class StateSourceOptions:
    """The statestore source's options (Spark's names, case-insensitive), checked in Spark's
    order, before any state file is read."""

    path: str
    batch_id: int
    operator_id: int = 0
    store_name: str = "default"
    join_side: str = "none"
    snapshot_start_batch_id: int | None = None
    snapshot_partition_id: int | None = None
    read_change_feed: bool = False
    change_start_batch_id: int | None = None
    change_end_batch_id: int | None = None
    state_var_name: str | None = None
    read_registered_timers: bool = False
    flatten_collection_types: bool = True

    @property
    def location(self) -> str:
        return resolved_location(self.path)

    def spark_text(self) -> str:
        """The options as Spark's messages print them (its ``toString``, stray ``+`` included)."""
        var = "None" if self.state_var_name is None else f"Some({self.state_var_name})"
        text = (
            f"StateSourceOptions(checkpointLocation={self.location}, batchId={self.batch_id}, operatorId={self.operator_id}, "
            f"storeName={self.store_name}, joinSide={self.join_side}, stateVarName={var}, "
            f"+flattenCollectionTypes={str(self.flatten_collection_types).lower()}"
        )
        for name, value in (
            ("snapshotStartBatchId", self.snapshot_start_batch_id), ("snapshotPartitionId", self.snapshot_partition_id),
            ("changeStartBatchId", self.change_start_batch_id), ("changeEndBatchId", self.change_end_batch_id),
        ):
            if value is not None:
                text += f", {name}={value}"
        return text + ")"

    @classmethod
    def parse(cls, options: Mapping[str, Any], path: str | None) -> "StateSourceOptions":
        opts = {str(k).lower(): v for k, v in options.items() if v is not None}
        path = path if path is not None else opts.get("path")
        if not path:
            raise state_source_required_option_error("path")
        operator_id = _number(opts, "operatorId")
        if operator_id is not None and operator_id < 0:
            raise state_source_option_negative_error("operatorId")
        store_name = str(opts.get("storename", "default")).strip()
        if not store_name:
            raise state_source_option_empty_error("storeName")
        timers = _boolean(opts, "readRegisteredTimers", False, wrapped=True)
        state_var = opts.get("statevarname")
        state_var = str(state_var).strip() if state_var is not None else None
        if timers and state_var is not None:
            raise state_source_conflicting_options_error("readRegisteredTimers", "stateVarName")
        flatten = _boolean(opts, "flattenCollectionTypes", True, wrapped=True)
        join_side = str(opts.get("joinside", "none"))
        if join_side not in ("left", "right", "none"):
            raise state_source_join_side_error()
        if join_side != "none" and store_name != "default":
            raise state_source_conflicting_options_error("joinSide", "storeName")
        location = resolved_location(str(path))
        change_feed = _boolean(opts, "readChangeFeed", False, wrapped=False)
        batch_id = _number(opts, "batchId")
        snapshot_start = _number(opts, "snapshotStartBatchId")
        snapshot_partition = _number(opts, "snapshotPartitionId")
        change_start = _number(opts, "changeStartBatchId")
        change_end = _number(opts, "changeEndBatchId")
        last = _last_committed(str(path))
        if change_feed:
            for name, value in (("joinSide", None if join_side == "none" else join_side), ("batchId", batch_id),
                                ("snapshotStartBatchId", snapshot_start), ("snapshotPartitionId", snapshot_partition)):
                if value is not None:
                    raise state_source_conflicting_options_error(name, "readChangeFeed")
            if change_start is None:
                raise state_source_required_option_error("changeStartBatchId")
            if change_end is None:
                if last is None:
                    raise state_source_no_committed_batch_error(location)
                change_end = last
            if change_start < 0:
                raise state_source_option_negative_error("changeStartBatchId")
            if change_end < change_start:
                raise state_source_change_end_before_start_error(change_end)
            batch_id = change_end
        else:
            for name, value in (("changeStartBatchId", change_start), ("changeEndBatchId", change_end)):
                if value is not None:
                    raise state_source_change_feed_only_option_error(name)
            if batch_id is None:
                if last is None:
                    raise state_source_no_committed_batch_error(location)
                batch_id = last
            if batch_id < 0:
                raise state_source_option_negative_error("batchId")
            if snapshot_start is not None and snapshot_start < 0:
                raise state_source_option_negative_error("snapshotStartBatchId")
            if snapshot_start is not None and snapshot_start > batch_id:
                raise state_source_snapshot_start_after_batch_error(batch_id)
            if snapshot_partition is not None and snapshot_partition < 0:
                raise state_source_option_negative_error("snapshotPartitionId")
            if snapshot_partition is not None and snapshot_start is None:
                raise state_source_required_option_error("snapshotStartBatchId")
            if snapshot_start is not None and snapshot_partition is None:
                raise state_source_required_option_error("snapshotPartitionId")
        first = snapshot_start if snapshot_start is not None else change_start if change_start is not None else batch_id
        commits = CheckpointFileManager(str(path)).child("commits")
        for batch in (first, change_end if change_end is not None else batch_id):
            if not commits.exists(str(batch)):
                raise state_source_no_committed_batch_error(location)
        return cls(
            path=str(path), batch_id=batch_id, operator_id=operator_id or 0, store_name=store_name, join_side=join_side,
            snapshot_start_batch_id=snapshot_start, snapshot_partition_id=snapshot_partition, read_change_feed=change_feed,
            change_start_batch_id=change_start, change_end_batch_id=change_end, state_var_name=state_var,
            read_registered_timers=timers, flatten_collection_types=flatten,
        )


def _last_committed(checkpoint: str) -> int | None:
    return CommitLog(CheckpointFileManager(checkpoint).child("commits")).get_latest_batch_id()


# -- state-metadata ------------------------------------------------------------------------------


def state_metadata_rows(checkpoint: str) -> list[tuple[Any, ...]]:
    """The state-metadata source's rows: per operator and store, its name, partition count and
    the range of committed batches (the commit log's first and last entry, -1 when empty)."""
    state_root = CheckpointFileManager(checkpoint).child("state").root
    batches = CommitLog(CheckpointFileManager(checkpoint).child("commits")).list_batch_ids()
    lo, hi = (batches[0], batches[-1]) if batches else (-1, -1)
    rows = []
    for op_id, md in sorted(read_all_operator_metadata(state_root).items()):
        if md.operator_name in PYTHON_STATE_OPERATORS:
            # Spark keeps a transformWithState's variables as column families of one store and
            # lists them in the operator's properties; statestream has a store per variable
            runs = operator_properties_by_run(read_operator_properties(state_root, op_id))
            partitions = md.state_store_info[0].num_partitions if md.state_store_info else 0
            rows.append((op_id, md.operator_name, "default", partitions, lo, hi, runs[max(runs)] if runs else None))
            continue
        for store in md.state_store_info:
            rows.append((op_id, md.operator_name, store.store_name, store.num_partitions, lo, hi, None))
    return rows


def read_state_metadata(spark: "SparkSession", checkpoint: str | None) -> "DataFrame":
    if not checkpoint:
        raise state_source_required_option_error("path")
    return spark.createDataFrame(state_metadata_rows(checkpoint), METADATA_SCHEMA)


# -- statestore ------------------------------------------------------------------------------------


#: a store whose files pass this many bytes is read through the layered store on the task's
#: local disk, a slice at a time (``state/layered.py``), rather than loaded whole into memory
LARGE_STORE_BYTES = 256 * 2**20
#: the most rows converted at once
READ_SLICE_ROWS = 1 << 20


@dataclass(frozen=True)
class _ReadPlan:
    """What each task of a read needs (picklable): the store, the version range, the names."""

    state_root: str
    operator_id: int
    store_name: str
    partitions: tuple[int, ...]
    #: plain read: the version to load; change feed: (first, last) versions whose deltas to list
    version: int
    change_versions: tuple[int, int] | None
    key_names: tuple[str, ...]
    value_names: tuple[str, ...]
    snapshot_start_version: int | None
    arrow_schema: pa.Schema
    #: how the value struct's fields come from the stored columns, where not one to one:
    #: ("key", i) the i-th key column, ("stored", j) the j-th value column, ("session", (i, j))
    #: a session struct of key column i (its start) and value column j (its end)
    value_recipe: tuple[tuple[str, Any], ...] | None = None
    #: the leading key columns the reader shows (a join side's keys without the index)
    key_take: int | None = None
    #: a deduplication's key columns' Spark types (``jsonValue``): its state holds floating
    #: point keys as their bits (``binary_comparable``), shown decoded
    decode_keys: tuple[Any, ...] | None = None
    #: a store whose files pass this many bytes is read in slices through the layered store
    #: (:func:`_live_tables`); taken from :data:`LARGE_STORE_BYTES` when the plan is made
    large_store_bytes: int = LARGE_STORE_BYTES


def _schema_unreadable(opts: StateSourceOptions) -> StatestreamSparkRuntimeException:
    return state_source_schema_unreadable_error(opts.spark_text())


def _partitions(opts: StateSourceOptions, files: CheckpointFileManager) -> tuple[int, ...]:
    """The state partitions to read, with Spark's errors when the batch's offsets, any partition
    or the one asked for are missing."""
    if not files.exists(f"offsets/{opts.batch_id}"):
        raise state_source_offset_log_unavailable_error(opts.batch_id, opts.location)
    if opts.read_change_feed:
        assert opts.change_start_batch_id is not None and opts.change_end_batch_id is not None
        offset_log = OffsetSeqLog(files.child("offsets"))
        for batch in range(opts.change_start_batch_id, opts.change_end_batch_id + 1):
            if is_repartition_batch(offset_log, batch):
                # the repartition wrote every partition's state anew as a snapshot: there is
                # no change to show for that batch, and keys moved between partitions
                raise state_source_change_feed_across_repartition_error(
                    "changeStartBatchId" if batch == opts.change_start_batch_id else "changeEndBatchId",
                    batch,
                    partitions_of_batch(offset_log.get(batch - 1)),
                    partitions_of_batch(offset_log.get(batch)),
                )
    # a repartition leaves the partitions above the new count with their old files: the
    # batch's own count (pinned in its offset entry) says which partitions hold its state
    partitions = tuple(state_partitions_of_batch(files, opts.operator_id, opts.batch_id))
    if not partitions:
        raise state_source_no_partition_error(opts.spark_text())
    if opts.snapshot_partition_id is not None:
        if opts.snapshot_partition_id not in partitions:
            # (a Hadoop Path's text here, where the other messages show the URI: file:/x, not file:///x)
            location = f"{opts.location}/state".replace("file:///", "file:/", 1)
            raise state_source_snapshot_partition_not_found_error(opts.snapshot_partition_id, opts.operator_id, location)
        partitions = (opts.snapshot_partition_id,)
    return partitions


def _plan_python_state(opts: StateSourceOptions, files: CheckpointFileManager, md: Any) -> tuple[PythonStateReadPlan, Any]:
    """A transformWithState's variable or timers: Spark's checks of ``stateVarName`` and
    ``readRegisteredTimers`` (in its order), then the variable's layout."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_json_value

    if opts.state_var_name is None and not opts.read_registered_timers:
        raise state_source_required_option_error("stateVarName")
    state_root = files.child("state").root
    props = read_operator_properties(state_root, opts.operator_id) or {}
    schema = read_state_schema(state_root, opts.operator_id)
    # the variables of the run that ran the batch read (Spark: its v2 operator metadata file)
    text = operator_properties_of_batch(props, opts.batch_id)
    if text is not None:
        recorded = json.loads(text)
        variables = {v["stateName"]: (v["stateVariableType"], bool(v["ttlEnabled"])) for v in recorded.get("stateVariables", [])}
        time_mode = recorded.get("timeMode")
    else:  # a checkpoint written before the record: its stores, none with a TTL
        variables = {s.store_name: ("", False) for s in md.state_store_info if s.store_name != "default"}
        time_mode = props.get("timeMode")
    if not variables:
        raise state_source_no_state_variables_error()
    if opts.read_registered_timers:
        if time_mode == "NoTime":
            raise state_source_timers_without_time_mode_error()
        name = "$procTimers_keyToTimestamp" if time_mode == "ProcessingTime" else "$eventTimers_keyToTimestamp"
    else:
        assert opts.state_var_name is not None
        name = opts.state_var_name
    if name not in variables:
        raise state_source_state_variable_not_defined_error(name)
    if schema is None or opts.join_side != "none":  # (a join side: Spark reads a join's schema, absent here)
        raise _schema_unreadable(opts)
    partitions = _partitions(opts, files)
    grouping = StructType.fromJson(schema.key_schema)
    kind, value, user_key = "timers", None, None
    if variables[name][0] != "TimerState" and not name.endswith("Timers_keyToTimestamp"):
        stored = {f["name"]: f for f in schema.value_schema.get("fields", [])}
        if name not in stored:
            raise _schema_unreadable(opts)
        kind = variable_kind(stored[name])
        t: Any = _parse_datatype_json_value(stored[name]["type"])  # an ArrayType or MapType by its kind
        value, user_key = (t.elementType, None) if kind == "list" else (t.valueType, t.keyType) if kind == "map" else (t, None)
    change_feed = opts.read_change_feed
    ttl = variables[name][1]
    spark_schema = python_state_schema(kind, grouping, value, user_key, ttl, opts.flatten_collection_types, change_feed)
    version = opts.batch_id + 1
    frozen, again = read_dormant_stores(state_root, opts.operator_id).get(name, (None, None))
    plan = PythonStateReadPlan(
        state_root=state_root,
        operator_id=opts.operator_id,
        store_name=name,
        kind=kind,
        partitions=partitions,
        version=stored_version(state_root, opts.operator_id, name, version),
        begins_at=store_begins_at(state_root, opts.operator_id, name),
        change_versions=(opts.change_start_batch_id + 1, opts.change_end_batch_id + 1) if change_feed else None,  # type: ignore[operator]
        num_grouping=len(grouping.fields),
        ttl=ttl,
        flatten=opts.flatten_collection_types,
        arrow_schema=to_arrow_schema(spark_schema),
        dormant=None if frozen is None else (frozen, again),
        snapshot_start_version=None if opts.snapshot_start_batch_id is None else opts.snapshot_start_batch_id + 1,
    )
    return plan, (spark_schema, {})


def _plan(opts: StateSourceOptions) -> tuple[_ReadPlan | PythonStateReadPlan, Any]:
    """What the read needs, and its schema; Spark's errors for what the checkpoint lacks."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import IntegerType, LongType, StringType, StructType

    files = CheckpointFileManager(opts.path)
    state_root = files.child("state").root
    join_stores = files.exists(f"state/{opts.operator_id}/0/left-keyToNumValues/_metadata/schema")
    md = read_operator_metadata(state_root, opts.operator_id)
    operator_name = md.operator_name if md is not None else None
    if opts.store_name != "default" and not join_stores:
        # Spark takes another store name of an operator that is not a join (with its stores in
        # directories of their own) for a state variable's name
        opts = dataclasses.replace(opts, state_var_name=opts.store_name, store_name="default")
    if operator_name in PYTHON_STATE_OPERATORS:
        assert md is not None
        return _plan_python_state(opts, files, md)
    if opts.state_var_name is not None or opts.read_registered_timers:
        if md is None or len([s for s in md.state_store_info if s.store_name == opts.store_name]) != 1:
            raise state_source_requirement_failed_error()
        option = "stateVarName" if opts.state_var_name is not None else "readRegisteredTimers"
        raise state_source_option_needs_transform_with_state_error(option, operator_name)
    # a join side is read from the side's rows store; its key from the counts store's schema
    store_name = f"{opts.join_side}-keyWithIndexToValue" if opts.join_side != "none" else opts.store_name
    stores = [s for s in md.state_store_info if s.store_name == store_name] if md is not None else []
    if not stores:
        schema = None
    elif opts.join_side != "none" or opts.store_name != "default":
        schema = read_store_schema(state_root, opts.operator_id, store_name)
    else:
        schema = read_state_schema(state_root, opts.operator_id)
    if schema is None:
        raise _schema_unreadable(opts)
    partitions = _partitions(opts, files)
    key_type = StructType.fromJson(schema.key_schema)
    value_type = StructType.fromJson(schema.value_schema)
    key_take: int | None = None
    if opts.join_side != "none":
        # one row per buffered input row: the join keys without the index, the row without
        # ``matched`` (Spark's reader of a join side)
        key_type = StructType(key_type.fields[:-1])
        key_take = len(key_type.fields)
        if value_type.fields and value_type.fields[-1].name == "matched":
            value_type = StructType(value_type.fields[:-1])
    # the tasks send the structs with positional field names (a value struct may repeat a name,
    # as an average's buffer beside a count's does, which Arrow's exchange with the JVM cannot
    # carry); a positional cast restores Spark's names
    final = {"key": key_type, "value": value_type}
    key_type, value_type = _positional(key_type), _positional(value_type)
    if opts.read_change_feed:
        assert opts.change_start_batch_id is not None and opts.change_end_batch_id is not None
        spark_schema = (
            StructType().add("batch_id", LongType()).add("change_type", StringType())
            .add("key", key_type).add("value", value_type).add("partition_id", IntegerType())
        )
        change_versions: tuple[int, int] | None = (opts.change_start_batch_id + 1, opts.change_end_batch_id + 1)
    else:
        spark_schema = StructType().add("key", key_type).add("value", value_type).add("partition_id", IntegerType())
        change_versions = None
    plan = _ReadPlan(
        state_root=state_root,
        operator_id=opts.operator_id,
        store_name=store_name,
        partitions=partitions,
        version=opts.batch_id + 1,
        change_versions=change_versions,
        key_names=tuple(f.name for f in key_type.fields),
        value_names=tuple(f.name for f in value_type.fields),
        snapshot_start_version=None if opts.snapshot_start_batch_id is None else opts.snapshot_start_batch_id + 1,
        arrow_schema=to_arrow_schema(spark_schema),
        value_recipe=_recipe(md.operator_name if md is not None else "", store_name, final["value"], len(key_type.fields)),
        key_take=key_take,
        decode_keys=tuple(f["type"] for f in schema.key_schema.get("fields", [])) if operator_name in DEDUP_OPERATORS else None,
        large_store_bytes=LARGE_STORE_BYTES,
    )
    return plan, (spark_schema, final)


SESSION_OPERATOR = "sessionWindowStateStoreSaveExec"
DEDUP_OPERATORS = frozenset({"dedupe", "dedupeWithinWatermark"})
JOIN_OPERATOR = "symmetricHashJoin"


def _recipe(operator_name: str, store_name: str, value_type: Any, num_keys: int) -> tuple[tuple[str, Any], ...] | None:
    """How the reader's value comes from the stored columns where not one to one."""
    if operator_name == SESSION_OPERATOR:
        return _session_recipe(value_type, num_keys)
    if operator_name == JOIN_OPERATOR and store_name.endswith("-keyWithIndexToValue"):
        # statestream keeps a side's row as one struct column, then ``matched``
        n = len(value_type.fields)
        has_matched = bool(value_type.fields) and value_type.fields[-1].name == "matched"
        row = n - 1 if has_matched else n
        return tuple([("child", (0, c)) for c in range(row)] + ([("stored", 1)] if has_matched else []))
    return None


def _session_recipe(value_type: Any, num_keys: int) -> tuple[tuple[str, Any], ...]:
    """A session window's value, as Spark stores it: the whole aggregated row (the grouping
    keys with the session struct among them, then the buffers). statestream keeps the keys and
    the session start in the key and the session end before the buffers in the value."""
    recipe: list[tuple[str, Any]] = []
    key_index = 0
    for f in value_type.fields[:num_keys]:
        if (f.metadata or {}).get("spark.sessionWindow"):
            recipe.append(("session", (num_keys - 1, 0)))
        else:
            recipe.append(("key", key_index))
            key_index += 1
    recipe += [("stored", j) for j in range(1, len(value_type.fields) - num_keys + 1)]
    return tuple(recipe)


def _key_arrays(plan: _ReadPlan, keys: list[pa.Array]) -> list[pa.Array]:
    """The stored key columns as the query had them (a deduplication's decoded)."""
    if plan.decode_keys is None:
        return keys

    decoded = binary_comparable_decoded_keys(keys, plan.decode_keys)
    if isinstance(decoded, int):
        raise state_source_key_not_decodable_error(plan.decode_keys[decoded], plan.operator_id)
    return decoded


def _value_arrays(plan: _ReadPlan, keys: list[pa.Array], values: list[pa.Array]) -> list[pa.Array]:
    """The value struct's fields, in the schema's order, from a table's stored columns."""
    if plan.value_recipe is None:
        return values
    value_type = plan.arrow_schema.field("value").type
    out = []
    for i, (kind, where) in enumerate(plan.value_recipe):
        if kind == "key":
            out.append(keys[where])
        elif kind == "stored":
            out.append(values[where])
        elif kind == "child":
            out.append(values[where[0]].field(where[1]))
        else:
            start, end = keys[where[0]], values[where[1]]
            out.append(pa.StructArray.from_arrays([start, end], fields=list(value_type.field(i).type)))
    return out


def _positional(struct: Any) -> Any:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f"_{i}", f.dataType, f.nullable) for i, f in enumerate(struct.fields)])


def _struct(columns: list[pa.ChunkedArray], names: tuple[str, ...], where: str, length: int) -> pa.Array:
    """The stored columns as one struct column of ``length`` rows (a global aggregation's key
    has no field: an empty struct per row)."""
    if len(columns) != len(names):
        raise ValueError(f"{where}: {len(columns)} stored columns for the {len(names)} fields {list(names)} of the schema file")
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    if not arrays:
        return pa.array([{}] * length, pa.struct([]))
    return pa.StructArray.from_arrays(arrays, names=list(names))


def _live_tables(provider: StateStoreProvider, version: int, large_store_bytes: int) -> Iterator[pa.Table]:
    """The live rows of ``version`` in tables of at most :data:`READ_SLICE_ROWS` rows. A large
    store is loaded as sorted runs mapped from local disk and merged a slice at a time, so a
    state partition larger than the task's memory is read in the memory of a slice."""
    layered = None
    if provider.stored_bytes() > large_store_bytes:
        conf = StateStoreConf(layered=True, on_local_disk=True)
        layered = StateStoreProvider(provider.store_id, provider.key_schema, provider.value_schema, conf, run_id=f"reader-{uuid.uuid4().hex}")
    if layered is None or not layered.layered:  # small, or a store the provider keeps as a table
        table = provider.get_read_store(version).table()
        for start in range(0, table.num_rows, READ_SLICE_ROWS):
            yield table.slice(start, READ_SLICE_ROWS)
        return
    try:
        yield from cast(LayeredStateStore, layered.get_read_store(version)).iter_live()
    finally:
        layered.close()


def _partition_table(plan: _ReadPlan, partition: int) -> pa.Table:
    """One state partition's rows in the reader's layout (runs in a task)."""
    parts = list(_partition_tables(plan, partition))
    return pa.concat_tables(parts) if parts else plan.arrow_schema.empty_table()


def _partition_tables(plan: _ReadPlan, partition: int) -> Iterator[pa.Table]:
    """:func:`_partition_table` in slices (see :func:`_live_tables`)."""
    sid = StateStoreId(plan.state_root, plan.operator_id, partition, plan.store_name)
    schemas = stored_schemas(sid)
    if schemas is None:
        return
    key_schema, value_schema = schemas
    provider = StateStoreProvider(sid, key_schema, value_schema)
    nk, nv = len(key_schema), len(value_schema)
    where = f"state partition {partition} of operator {plan.operator_id}"
    if plan.change_versions is None:
        check_snapshot_to_start_from(provider, plan.snapshot_start_version, where)
        for table in _live_tables(provider, plan.version, plan.large_store_bytes) if plan.snapshot_start_version is None else [provider.get_read_store(plan.version).table()]:
            n = table.num_rows
            keys = _key_arrays(plan, [c.combine_chunks() for c in table.columns[:nk]])
            values = _value_arrays(plan, keys, [c.combine_chunks() for c in table.columns[nk:nk + nv]])
            keys = keys[: plan.key_take] if plan.key_take is not None else keys
            columns = {
                "key": _struct(keys, plan.key_names, where, n),
                "value": _struct(values, plan.value_names, where, n),
                "partition_id": pa.array([partition] * n, pa.int32()),
            }
            yield pa.table(columns).cast(plan.arrow_schema)
        return
    parts = []
    first, last = plan.change_versions
    for version in range(first, last + 1):
        delta = provider.read_delta(version)
        n = delta.num_rows
        if not n:
            continue
        ops = delta.column(OP_COLUMN).to_numpy()
        deleted = pa.array(ops == OP_REMOVE)
        value_type = plan.arrow_schema.field("value").type
        keys = _key_arrays(plan, [c.combine_chunks() for c in delta.columns[:nk]])
        stored = _value_arrays(plan, keys, [c.combine_chunks() for c in delta.columns[nk:nk + nv]])
        children = [_fill_nulls(c, value_type.field(i)) for i, c in enumerate(stored)]
        value = pa.StructArray.from_arrays(children, fields=list(value_type), mask=deleted)
        parts.append(pa.table({
            "batch_id": pa.array([version - 1] * n, pa.int64()),
            "change_type": pa.array(["delete" if op == OP_REMOVE else "update" for op in ops], pa.string()),
            "key": _struct(keys, plan.key_names, where, n),
            "value": value,
            "partition_id": pa.array([partition] * n, pa.int32()),
        }).cast(plan.arrow_schema))
    yield from parts


def _any_partition_table(plan: "_ReadPlan | PythonStateReadPlan", partition: int) -> pa.Table:
    if isinstance(plan, PythonStateReadPlan):
        return python_state_partition_table(plan, partition)
    return _partition_table(plan, partition)


def _any_partition_tables(plan: "_ReadPlan | PythonStateReadPlan", partition: int) -> Iterator[pa.Table]:
    if isinstance(plan, PythonStateReadPlan):
        yield python_state_partition_table(plan, partition)
        return
    yield from _partition_tables(plan, partition)


def _fill_nulls(array: pa.Array, target: pa.Field) -> pa.Array:
    """A removal's value columns are null; under a null value struct they are never shown, but a
    field the schema declares non-null must still hold something: the type's zero."""
    if target.nullable or array.null_count == 0:
        return array
    t = array.type
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays(
            [_fill_nulls(array.field(i), target.type.field(i)) for i in range(t.num_fields)], fields=list(target.type)
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        zero = pa.scalar([], type=t)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        zero = pa.scalar("", type=t)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        zero = pa.scalar(b"", type=t)
    elif pa.types.is_boolean(t):
        zero = pa.scalar(False)
    else:
        zero = pa.scalar(0, type=pa.int64()).cast(t) if not pa.types.is_decimal(t) else pa.scalar(0, type=t)
    return pc.fill_null(array, zero)


def read_state_store(spark: "SparkSession", options: Mapping[str, Any], path: str | None = None) -> "DataFrame":
    """``ss.read.format("statestore")...load(path)``: the rows of one store as of a batch, or its
    change feed, read by a Spark job with a task per state partition."""
    opts = StateSourceOptions.parse(options, path)
    plan, (schema, final) = _plan(opts)
    partitions = list(plan.partitions)

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                for table in _any_partition_tables(plan, partitions[partition]):
                    yield from table.to_batches()

    ids = spark.range(0, len(partitions), 1, max(1, len(partitions)))
    from pyspark.sql import functions as F

    wire = ids.mapInArrow(read, schema)
    return wire.select(*[F.col(c).cast(final[c]).alias(c) if c in final else F.col(c) for c in schema.fieldNames()])


def read_state_table(options: Mapping[str, Any], path: str | None = None) -> pa.Table:
    """The statestore source's rows as one Arrow table, read in this process (no Spark job):
    what the command line shows. Same options, errors and layout as ``read_state_store``."""
    opts = StateSourceOptions.parse(options, path)
    plan, (schema, final) = _plan(opts)
    parts = [_any_partition_table(plan, p) for p in plan.partitions]
    table = pa.concat_tables(parts) if parts else plan.arrow_schema.empty_table()
    for name in final:
        column = table.column(name).combine_chunks()
        named = pa.StructArray.from_arrays(
            column.flatten(), names=[f.name for f in final[name].fields], mask=column.is_null() if column.null_count else None
        )
        table = table.set_column(table.schema.get_field_index(name), name, named)
    return table
