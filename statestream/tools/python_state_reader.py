"""A transformWithState variable, or its timers, in the layout of Spark's ``statestore`` reader.

Spark's reader shows one state variable at a time (``stateVarName``), or the registered timers
(``readRegisteredTimers``), with columns that depend on the variable's kind:

* a value: ``key``, ``value``;
* a list: ``key``, ``list_element`` (one row per element), or with
  ``flattenCollectionTypes=false`` ``key``, ``list_value`` (the elements in order);
* a map: ``key``, ``user_map_key``, ``user_map_value``, or not flattened ``key``, ``map_value``;
* timers: ``key``, ``expiration_timestamp_ms``;

then ``partition_id``; a change feed puts ``batch_id`` and ``change_type`` in front. ``key`` is
the grouping key; a variable with a TTL shows its value as ``struct<value, ttlExpirationMs>``.

statestream keeps each variable in a store of its own (see ``operators/stateful_processor_handle``):
the grouping columns, then ``__index`` (a list element's position), ``__userKey`` (a map entry's
key) or ``__expiryTimestampMs`` (a timer's time); the value in ``__value`` and a TTL in
``__ttlExpirationMs``. This module maps that layout to Spark's, inside the reader's tasks, with
Arrow kernels; the options, checks and errors stay in ``tools/state_reader``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.operators.stateful_processor_handle import EXPIRY_COLUMN, INDEX_COLUMN, TTL_COLUMN, USER_KEY_COLUMN, VALUE_COLUMN
from statestream.state.keys import group_ids
from statestream.state.provider import OP_COLUMN, StateStoreProvider, stored_schemas
from statestream.state.store import OP_REMOVE, StateStoreId

__all__ = ["PYTHON_STATE_OPERATORS", "PythonStateReadPlan", "python_state_schema", "python_state_partition_table", "variable_kind"]

#: the operator names of transformWithState (pandas and Row variants, and Spark's JVM one)
PYTHON_STATE_OPERATORS = frozenset({"transformWithStateExec", "transformWithStateInPandasExec", "transformWithStateInPySparkExec"})

TIMERS = "timers"


def variable_kind(schema_field: dict[str, Any]) -> str:
    """A variable's kind from its field in the operator's schema file (a list is recorded as an
    array of its element struct, a map as a map, a value as its struct)."""
    t = schema_field["type"]
    if isinstance(t, dict) and t.get("type") == "array":
        return "list"
    if isinstance(t, dict) and t.get("type") == "map":
        return "map"
    return "value"


def _plain(struct: Any) -> Any:
    """A struct's fields without their metadata (Spark's reader builds the key from the grouping
    columns' names, types and nullability only)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, f.nullable) for f in struct.fields])


def python_state_schema(
    kind: str, grouping: Any, value: Any, user_key: Any, ttl: bool, flatten: bool, change_feed: bool
) -> Any:
    """The reader's Spark schema for a variable of ``kind`` (``value``, ``list``, ``map`` or
    ``timers``); every top-level column nullable, as Spark adds them."""
    from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructField, StructType

    key = _plain(grouping)
    shown = StructType([StructField("value", value), StructField("ttlExpirationMs", LongType())]) if ttl else value
    out = StructType()
    if change_feed:
        out = out.add("batch_id", LongType()).add("change_type", StringType())
    out = out.add("key", key)
    if kind == TIMERS:
        out = out.add("expiration_timestamp_ms", LongType())
    elif kind == "value":
        out = out.add("value", shown)
    elif kind == "list":
        out = out.add("list_element", shown) if flatten or change_feed else out.add("list_value", ArrayType(shown, True))
    elif flatten or change_feed:
        out = out.add("user_map_key", user_key).add("user_map_value", shown)
    else:
        out = out.add("map_value", MapType(user_key, shown, True))
    return out.add("partition_id", IntegerType())


@dataclass(frozen=True)
class PythonStateReadPlan:
    """What each task of a transformWithState read needs (picklable)."""

    state_root: str
    operator_id: int
    store_name: str
    kind: str
    partitions: tuple[int, ...]
    #: the version whose files hold the batch's state (a dormant variable's frozen one)
    version: int
    #: the version the store began at (a variable added on a restart), None: inferred
    begins_at: int | None
    change_versions: tuple[int, int] | None
    num_grouping: int
    ttl: bool
    flatten: bool
    arrow_schema: pa.Schema
    #: the versions without files of their own: a variable a run did not declare, frozen at
    #: ``dormant[0]`` until the batch ``dormant[1]`` declared it again (its snapshot)
    dormant: tuple[int, int | None] | None = None
    #: ``snapshotStartBatchId`` + 1: the version whose snapshot the read must start from
    snapshot_start_version: int | None = None


def _like(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` with ``target``'s field names and types (structs matched by position)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_struct(target):
        mask = array.is_null() if array.null_count else None
        children = [_like(array.field(i), target.field(i).type) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if array.type != target:
        return array.cast(target)
    return array


def _shown_value(table: pa.Table, plan: PythonStateReadPlan, target: pa.DataType) -> pa.Array:
    """The value column as the reader shows it: ``__value``, wrapped with its TTL when the
    variable has one."""
    if not plan.ttl:
        return _like(table.column(VALUE_COLUMN), target)
    ttl = table.column(TTL_COLUMN).combine_chunks() if TTL_COLUMN in table.column_names else pa.nulls(table.num_rows, pa.int64())
    value = _like(table.column(VALUE_COLUMN), target.field(0).type)
    return pa.StructArray.from_arrays([value, ttl.cast(pa.int64())], fields=list(target))


def _grouped(table: pa.Table, num_grouping: int, order: str | None) -> tuple[pa.Table, np.ndarray, pa.Table]:
    """``table``'s rows ordered by key (then by ``order`` within a key), the offsets of each
    key's run of rows, and each key's first row. Keys are grouped with Spark's grouping equality
    (``state.keys.group_ids``: struct and array keys, nulls), not by value order."""
    n = table.num_rows
    if n == 0:
        return table, np.zeros(1, dtype=np.int32), table
    ids = group_ids([table.column(i) for i in range(num_grouping)], n)
    if order is not None:
        perm = np.lexsort((table.column(order).to_numpy(), ids))
    else:
        perm = np.argsort(ids, kind="stable")
    sorted_ids = ids[perm]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_ids)) + 1])
    offsets = np.concatenate([starts, [n]]).astype(np.int32)
    rows = table.take(pa.array(perm))
    return rows, offsets, rows.take(pa.array(starts))


def check_snapshot_to_start_from(provider: StateStoreProvider, version: int | None, where: str) -> None:
    """A read given ``snapshotStartBatchId`` starts from that batch's snapshot, which must exist
    (Spark's reader fails the same way when the batch was not snapshotted); ``version`` is the
    batch id + 1, None or 0: no such option."""
    if version is not None and version > 0 and not provider.has_snapshot(version):
        raise FileNotFoundError(
            f"[CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] no snapshot of version {version} of {where} "
            "(snapshotStartBatchId must name a batch whose state was snapshotted)"
        )


def python_state_partition_table(plan: PythonStateReadPlan, partition: int) -> pa.Table:
    """One state partition's rows of the variable in the reader's layout (runs in a task)."""
    sid = StateStoreId(plan.state_root, plan.operator_id, partition, plan.store_name)
    schemas = stored_schemas(sid)
    if schemas is None:
        return plan.arrow_schema.empty_table()
    provider = StateStoreProvider(sid, *schemas)
    if plan.change_versions is not None:
        return _change_feed(plan, provider, partition)
    check_snapshot_to_start_from(
        provider, plan.snapshot_start_version,
        f"state variable {plan.store_name!r} in state partition {partition} of operator {plan.operator_id}",
    )
    if plan.begins_at is not None and plan.version < plan.begins_at:
        return plan.arrow_schema.empty_table()
    table = provider.get_read_store(plan.version, begins_at=plan.begins_at).table()
    return _rows(plan, table, partition)


def _key(table: pa.Table, plan: PythonStateReadPlan) -> pa.Array:
    target = plan.arrow_schema.field("key").type
    columns = [table.column(i).combine_chunks() for i in range(plan.num_grouping)]
    if not columns:
        return pa.array([{}] * table.num_rows, pa.struct([]))
    return pa.StructArray.from_arrays([_like(c, target.field(i).type) for i, c in enumerate(columns)], fields=list(target))


def _rows(plan: PythonStateReadPlan, table: pa.Table, partition: int) -> pa.Table:
    schema = plan.arrow_schema
    names = schema.names
    if plan.kind == "list" and not plan.flatten:
        ordered, offsets, firsts = _grouped(table, plan.num_grouping, INDEX_COLUMN)
        element = schema.field("list_value").type.value_type
        values = pa.ListArray.from_arrays(pa.array(offsets), _shown_value(ordered, plan, element))
        columns = [_key(firsts, plan), values]
        n = len(firsts)
    elif plan.kind == "map" and not plan.flatten:
        ordered, offsets, firsts = _grouped(table, plan.num_grouping, None)
        map_type = schema.field("map_value").type
        keys = _like(ordered.column(USER_KEY_COLUMN), map_type.key_type)
        values = pa.MapArray.from_arrays(pa.array(offsets), keys, _shown_value(ordered, plan, map_type.item_type))
        columns = [_key(firsts, plan), values.cast(map_type)]
        n = len(firsts)
    else:
        n = table.num_rows
        if plan.kind == "list":
            table = table.sort_by([(INDEX_COLUMN, "ascending")])
        columns = [_key(table, plan)]
        if plan.kind == TIMERS:
            columns.append(table.column(EXPIRY_COLUMN).combine_chunks().cast(pa.int64()))
        elif plan.kind == "map":
            columns.append(_like(table.column(USER_KEY_COLUMN), schema.field("user_map_key").type))
            columns.append(_shown_value(table, plan, schema.field("user_map_value").type))
        else:
            columns.append(_shown_value(table, plan, schema.field(names[1]).type))
    columns.append(pa.array(np.full(n, partition, dtype=np.int32)))
    return pa.Table.from_arrays(columns, schema=schema)


def _change_feed(plan: PythonStateReadPlan, provider: StateStoreProvider, partition: int) -> pa.Table:
    """The changes of each version in the range, as Spark's change reader shows a variable's:
    a put as ``update``, a removal as ``delete`` with a null value. A list's changes per key
    and version: removals only are one ``delete``; new elements after removals (a ``put``) one
    ``update`` with the first element; new elements alone (appends) one ``append`` each."""
    assert plan.change_versions is not None
    first, last = plan.change_versions
    parts = []
    value_name = plan.arrow_schema.names[-2]
    target = plan.arrow_schema.field(value_name).type
    for version in range(first, last + 1):
        if not _has_changes(plan, provider, version):
            continue
        delta = provider.read_delta(version)
        if not delta.num_rows:
            continue
        puts = pc.not_equal(delta.column(OP_COLUMN), OP_REMOVE)  # a put removed again in the batch shows too
        if plan.kind == "list":
            delta, kinds = _list_changes(delta, plan)
        else:
            kinds = pc.if_else(puts, "update", "delete")
        removed = pc.equal(kinds, "delete")
        if plan.kind == TIMERS:  # a timer's time is part of its key: a deleted timer keeps it
            value = delta.column(EXPIRY_COLUMN).combine_chunks().cast(pa.int64())
        else:
            value = _shown_value(delta, plan, target)
            value = pc.if_else(removed, pa.nulls(delta.num_rows, value.type), value)
        columns = [pa.array(np.full(delta.num_rows, version - 1, dtype=np.int64)), kinds.cast(pa.string()), _key(delta, plan)]
        if plan.kind == "map":
            columns.append(_like(delta.column(USER_KEY_COLUMN), plan.arrow_schema.field("user_map_key").type))
        columns += [value, pa.array(np.full(delta.num_rows, partition, dtype=np.int32))]
        parts.append(pa.Table.from_arrays(columns, schema=plan.arrow_schema))
    return pa.concat_tables(parts) if parts else plan.arrow_schema.empty_table()


def _has_changes(plan: PythonStateReadPlan, provider: StateStoreProvider, version: int) -> bool:
    """Whether ``version`` of the variable has a change file: not before or at the version the
    variable began at (it begins empty there; its first file is the next version), not while it
    was dormant (up to the snapshot of the batch that declared it again), and, for checkpoints
    that do not record either, not where no delta exists."""
    if plan.begins_at is not None and version <= plan.begins_at:
        return False
    if plan.dormant is not None:
        frozen, again = plan.dormant
        if version > frozen and (again is None or version <= again):
            return False
    if plan.begins_at is None:
        return provider.has_delta(version)
    return True


def _list_changes(delta: pa.Table, plan: PythonStateReadPlan) -> tuple[pa.Table, pa.Array]:
    """A version's list changes, one row per change as described in ``_change_feed``: a key
    whose rows are all removals is one ``delete`` (its first row), a key with removals and puts
    one ``update`` (its first put), a key with puts only one ``append`` per put."""
    ordered, offsets, _ = _grouped(delta, plan.num_grouping, INDEX_COLUMN)
    n = ordered.num_rows
    if n == 0:
        return ordered, pa.array([], pa.string())
    puts = pc.not_equal(ordered.column(OP_COLUMN), OP_REMOVE).to_numpy(zero_copy_only=False).astype(bool)
    starts, sizes = offsets[:-1], np.diff(offsets)
    group = np.repeat(np.arange(len(starts)), sizes)
    put_count = np.add.reduceat(puts.astype(np.int64), starts)
    first_put = np.minimum.reduceat(np.where(puts, np.arange(n), n), starts)
    kind = np.where(put_count == 0, 0, np.where(put_count < sizes, 1, 2))  # delete, update, append
    selected = puts & (kind[group] == 2)
    selected[starts[kind == 0]] = True
    selected[first_put[kind == 1]] = True
    take = np.flatnonzero(selected)
    names = np.array(["delete", "update", "append"], dtype=object)
    return ordered.take(pa.array(take, pa.int64())), pa.array(names[kind[group[take]]], pa.string())
