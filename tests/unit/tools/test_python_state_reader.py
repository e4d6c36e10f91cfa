"""Rules of the transformWithState state reader (tools/python_state_reader), without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructField, StructType

from statestream.operators.transform_with_state import _java_string_hash, scala_hash_map_order, spark_operator_properties
from statestream.operators.stateful_processor_handle import EVENT_TIME, NO_TIME, StateVariableInfo
from statestream.state.provider import OP_COLUMN
from statestream.state.store import OP_PUT
from statestream.tools.python_state_reader import PythonStateReadPlan, _list_changes, _rows, python_state_schema, variable_kind

G = StructType([StructField("k", StringType(), True, {"spark.watermarkDelayMs": 1})])
V = StructType([StructField("v", LongType())])
U = StructType([StructField("u", IntegerType())])


def test_java_string_hash_is_javas():
    # values of java.lang.String.hashCode
    assert _java_string_hash("") == 0
    assert _java_string_hash("a") == 97
    assert _java_string_hash("hello") == 99162322
    assert _java_string_hash("polygenelubricants") == -2147483648


def test_hash_map_order_is_sparks():
    # the orders Spark's state-metadata showed for the processors of the differential tests
    assert scala_hash_map_order(["seen", "counts"]) == ["counts", "seen"]
    assert scala_hash_map_order(["$eventTimers_keyToTimestamp", "session"]) == ["session", "$eventTimers_keyToTimestamp"]
    # above 4 entries, toMap builds a CHAMP map: its own slots first, then sub-nodes
    five = ["a", "b", "c", "d", "$eventTimers_keyToTimestamp"]
    assert scala_hash_map_order(five) == ["a", "b", "$eventTimers_keyToTimestamp", "c", "d"]
    assert scala_hash_map_order(list(reversed(five))) == scala_hash_map_order(five)


def test_operator_properties_list_this_runs_variables_and_timers():
    variables = (StateVariableInfo("a", "value", V), StateVariableInfo("b", "list", V, ttl_ms=1000))
    text = spark_operator_properties(EVENT_TIME, "update", variables)
    assert text.startswith('{"timeMode":"EventTime","outputMode":"Update","stateVariables":[')
    assert '{"stateName":"b","stateVariableType":"ListState","ttlEnabled":true}' in text
    assert '{"stateName":"$eventTimers_keyToTimestamp","stateVariableType":"TimerState","ttlEnabled":false}' in text
    assert "Timers" not in spark_operator_properties(NO_TIME, "append", variables)


def test_kind_comes_from_the_schema_files_field():
    assert variable_kind({"name": "l", "type": ArrayType(V).jsonValue()}) == "list"
    assert variable_kind({"name": "m", "type": MapType(U, V).jsonValue()}) == "map"
    assert variable_kind({"name": "v", "type": V.jsonValue()}) == "value"


def test_schemas_per_kind_and_option():
    names = lambda s: [f.name for f in s.fields]  # noqa: E731
    assert names(python_state_schema("value", G, V, None, False, True, False)) == ["key", "value", "partition_id"]
    assert names(python_state_schema("list", G, V, None, False, False, False)) == ["key", "list_value", "partition_id"]
    assert names(python_state_schema("list", G, V, None, False, False, True))[:4] == ["batch_id", "change_type", "key", "list_element"]
    assert names(python_state_schema("map", G, V, U, False, True, False)) == ["key", "user_map_key", "user_map_value", "partition_id"]
    assert names(python_state_schema("timers", G, None, None, False, True, False)) == ["key", "expiration_timestamp_ms", "partition_id"]
    ttl = python_state_schema("value", G, V, None, True, True, False)
    assert [f.name for f in ttl["value"].dataType.fields] == ["value", "ttlExpirationMs"]
    assert python_state_schema("value", G, V, None, False, True, False)["key"].dataType.fields[0].metadata == {}


def _plan(kind: str, flatten: bool, change_feed: bool = False, user_key=None) -> PythonStateReadPlan:
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = python_state_schema(kind, G, V, user_key, False, flatten, change_feed)
    return PythonStateReadPlan("/x", 0, "l", kind, (0,), 1, 0, (1, 1) if change_feed else None, 1, False, flatten, to_arrow_schema(schema))


def _list_table(keys, indexes, values) -> pa.Table:
    return pa.table({"k": keys, "__index": pa.array(indexes, pa.int64()), "__value": pa.array([{"v": v} for v in values])})


def test_list_unflattened_keeps_index_order():
    table = _list_table(["a", "b", "a", "a"], [3, 1, 1, 2], [30, 10, 10, 20])
    out = _rows(_plan("list", flatten=False), table, 4).to_pylist()
    got = {r["key"]["k"]: [e["v"] for e in r["list_value"]] for r in out}
    assert got == {"a": [10, 20, 30], "b": [10]}
    assert {r["partition_id"] for r in out} == {4}


def test_map_unflattened_groups_entries_by_key():
    table = pa.table({"k": ["a", "a", "b"], "__userKey": pa.array([{"u": 1}, {"u": 2}, {"u": 1}]), "__value": pa.array([{"v": 5}, {"v": 6}, {"v": 7}])})
    out = _rows(_plan("map", flatten=False, user_key=U), table, 0).to_pylist()
    got = {r["key"]["k"]: sorted((k["u"], v["v"]) for k, v in r["map_value"]) for r in out}
    assert got == {"a": [(1, 5), (2, 6)], "b": [(1, 7)]}


def test_list_changes_per_key():
    puts, removes = OP_PUT, 1 - OP_PUT
    delta = _list_table(["a", "a", "b", "c", "c"], [1, 2, 1, 1, 2], [1, 2, 9, 3, 4]).append_column(
        OP_COLUMN, pa.array([removes, puts, removes, puts, puts], pa.int8())
    )
    delta = delta.set_column(2, "__value", pa.array([None, {"v": 2}, None, {"v": 3}, {"v": 4}], pa.struct([("v", pa.int64())])))
    rows, kinds = _list_changes(delta, _plan("list", flatten=True, change_feed=True))
    got = sorted(zip(rows.column("k").to_pylist(), kinds.to_pylist(), [None if v is None else v["v"] for v in rows.column("__value").to_pylist()]))
    assert got == [("a", "update", 2), ("b", "delete", None), ("c", "append", 3), ("c", "append", 4)]


def test_list_changes_of_an_empty_delta_and_of_interleaved_keys():
    puts, removes = OP_PUT, 1 - OP_PUT
    plan = _plan("list", flatten=True, change_feed=True)
    empty = _list_table([], [], []).append_column(OP_COLUMN, pa.array([], pa.int8()))
    rows, kinds = _list_changes(empty, plan)
    assert rows.num_rows == 0 and kinds.to_pylist() == []
    # rows of one key apart, a key's put before its removal: the first put by index is the update
    delta = _list_table(["b", "a", "b", "a", "b"], [2, 1, 1, 2, 3], [5, 1, 4, 2, 6]).append_column(
        OP_COLUMN, pa.array([puts, puts, removes, puts, puts], pa.int8())
    )
    rows, kinds = _list_changes(delta, plan)
    got = sorted(zip(rows.column("k").to_pylist(), kinds.to_pylist(), rows.column("__index").to_pylist()))
    assert got == [("a", "append", 1), ("a", "append", 2), ("b", "update", 2)]


def test_unflattened_list_groups_struct_keys():
    from statestream.tools.python_state_reader import _rows

    g = StructType([StructField("w", StructType([StructField("start", LongType()), StructField("end", LongType())]))])
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = python_state_schema("list", g, V, None, False, False, False)
    plan = PythonStateReadPlan("/x", 0, "l", "list", (0,), 1, 0, None, 1, False, False, to_arrow_schema(schema))
    w = pa.array([{"start": 0, "end": 5}, {"start": 5, "end": 10}, {"start": 0, "end": 5}])
    table = pa.table({"w": w, "__index": pa.array([2, 1, 1], pa.int64()), "__value": pa.array([{"v": 2}, {"v": 9}, {"v": 1}])})
    got = {r["key"]["w"]["start"]: [e["v"] for e in r["list_value"]] for r in _rows(plan, table, 0).to_pylist()}
    assert got == {0: [1, 2], 5: [9]}


def test_timer_deletes_keep_their_time():
    from pyspark.sql.pandas.types import to_arrow_schema

    from statestream.tools import python_state_reader as R

    schema = python_state_schema("timers", G, None, None, False, True, True)
    plan = PythonStateReadPlan("/x", 0, "t", "timers", (0,), 2, 0, (1, 1), 1, False, True, to_arrow_schema(schema))
    delta = pa.table({"k": ["a", "a"], "__expiryTimestampMs": pa.array([1000, 2000], pa.int64()), "__unused": pa.nulls(2, pa.bool_()), "__op": pa.array([1, 0], pa.int8())})

    class Provider:
        def read_delta(self, version):
            return delta

        def has_delta(self, version):
            return True

    out = R._change_feed(plan, Provider(), 0).to_pylist()
    assert [(r["change_type"], r["expiration_timestamp_ms"]) for r in out] == [("delete", 1000), ("update", 2000)]


def test_no_change_file_before_a_variable_began_or_while_dormant():
    from statestream.tools.python_state_reader import _has_changes

    def plan(begins_at, dormant=None):
        return PythonStateReadPlan("/x", 0, "v", "value", (0,), 9, begins_at, (1, 9), 1, False, True, pa.schema([]), dormant=dormant)

    assert [v for v in range(1, 6) if _has_changes(plan(2), None, v)] == [3, 4, 5]
    assert [v for v in range(1, 9) if _has_changes(plan(0, (3, 6)), None, v)] == [1, 2, 3, 7, 8]


def test_a_read_from_a_snapshot_needs_that_snapshot(tmp_path):
    """``snapshotStartBatchId``: the read starts from that batch's snapshot; a batch that was not
    snapshotted is refused, naming the version and where it was looked for."""
    from statestream.state import StateStoreConf
    from statestream.state.provider import StateStoreProvider
    from statestream.state.store import StateStoreId
    from statestream.tools.python_state_reader import check_snapshot_to_start_from

    ks, vs = pa.schema([("k", pa.string())]), pa.schema([("v", pa.int64())])
    provider = StateStoreProvider(StateStoreId(str(tmp_path), 0, 3), ks, vs, StateStoreConf(min_deltas_for_snapshot=1))
    for version in range(2):
        store = provider.get_store(version)
        store.put(pa.table({"k": [f"k{version}"], "v": [version]}))
        store.commit()
    provider.do_maintenance()  # two deltas after none: <2>.snapshot
    check_snapshot_to_start_from(provider, 2, "partition 3")
    check_snapshot_to_start_from(provider, None, "partition 3")
    check_snapshot_to_start_from(provider, 0, "partition 3")
    with pytest.raises(FileNotFoundError, match=r"CANNOT_LOAD_STATE_STORE.*version 1 of partition 3 \(snapshotStartBatchId"):
        check_snapshot_to_start_from(provider, 1, "partition 3")
