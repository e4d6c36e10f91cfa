"""The state readers' pure parts without Spark: option parsing against a checkpoint's commit log,
the value layouts that differ from statestream's stored columns, and the command line's
table rendering. (Spark's own readers are the oracle in tests/differential/test_state_readers.py.)"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from statestream.commands.cli import _rows, _table
from statestream.errors import StatestreamNumberFormatException, StatestreamSparkRuntimeException
from statestream.tools.state_reader import StateSourceOptions, _fill_nulls, _recipe, _session_recipe


@pytest.fixture
def checkpoint(tmp_path):
    for b in range(4):
        (tmp_path / "commits").mkdir(exist_ok=True)
        (tmp_path / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(tmp_path)


def test_defaults_read_the_last_committed_batch(checkpoint):
    opts = StateSourceOptions.parse({}, checkpoint)
    assert (opts.batch_id, opts.operator_id, opts.store_name, opts.join_side) == (3, 0, "default", "none")
    feed = StateSourceOptions.parse({"readChangeFeed": "TRUE", "changeStartBatchId": "1"}, checkpoint)
    assert (feed.change_start_batch_id, feed.change_end_batch_id, feed.batch_id) == (1, 3, 3)


@pytest.mark.parametrize(
    "options, condition",
    [
        ({"batchId": -1}, "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE"),
        ({"batchId": 4}, "STDS_COMMITTED_BATCH_UNAVAILABLE"),
        ({"joinSide": "LEFT"}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"),  # lower case only, as Spark
        ({"readChangeFeed": "true"}, "STDS_REQUIRED_OPTION_UNSPECIFIED"),
        ({"readChangeFeed": "true", "changeStartBatchId": 2, "changeEndBatchId": 1}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"),
        ({"snapshotPartitionId": 0}, "STDS_REQUIRED_OPTION_UNSPECIFIED"),
        ({"joinSide": "left", "storeName": "s"}, "STDS_CONFLICT_OPTIONS"),
    ],
)
def test_refusals_carry_sparks_condition(checkpoint, options, condition):
    with pytest.raises(StatestreamSparkRuntimeException) as err:
        StateSourceOptions.parse(options, checkpoint)
    assert err.value.getCondition() == condition and str(err.value).startswith(f"[{condition}]")


def test_a_number_that_is_not_one_fails_as_javas_parser():
    with pytest.raises(StatestreamNumberFormatException, match='For input string: "1.5"'):
        StateSourceOptions.parse({"batchId": "1.5"}, "/nowhere")


def test_the_options_text_is_sparks(checkpoint):
    text = StateSourceOptions.parse({"operatorId": 2}, checkpoint).spark_text()
    assert text == (
        f"StateSourceOptions(checkpointLocation=file://{checkpoint}, batchId=3, operatorId=2, storeName=default, "
        "joinSide=none, stateVarName=None, +flattenCollectionTypes=true)"
    )


def test_session_value_is_the_whole_row():
    session = StructType([StructField("start", TimestampType()), StructField("end", TimestampType())])
    value = StructType([
        StructField("k", LongType()), StructField("session_window", session, False, {"spark.sessionWindow": True}),
        StructField("count", LongType()), StructField("sum", LongType()),
    ])
    # stored: key (k, session start), value (session end, count, sum)
    assert _session_recipe(value, 2) == (("key", 0), ("session", (1, 0)), ("stored", 1), ("stored", 2))


def test_join_rows_unnest_the_side_struct():
    value = StructType([StructField("lts", TimestampType()), StructField("k", LongType()), StructField("matched", LongType())])
    assert _recipe("symmetricHashJoin", "left-keyWithIndexToValue", value, 2) == (("child", (0, 0)), ("child", (0, 1)), ("stored", 1))
    assert _recipe("symmetricHashJoin", "left-keyToNumValues", value, 1) is None
    assert _recipe("stateStoreSave", "default", value, 1) is None


def test_a_removed_rows_non_null_fields_get_a_zero():
    field = pa.field("v", pa.struct([pa.field("n", pa.int64(), False), pa.field("s", pa.string(), False)]), False)
    array = pa.array([None, {"n": 1, "s": "x"}], pa.struct([pa.field("n", pa.int64()), pa.field("s", pa.string())]))
    filled = _fill_nulls(array, field)
    assert filled.to_pylist() == [{"n": 0, "s": ""}, {"n": 1, "s": "x"}]


def test_the_command_lines_table_flattens_structs_and_keeps_repeated_names():
    value_type = pa.struct([pa.field("count", pa.int64()), pa.field("count", pa.int64())])
    table = pa.table({
        "key": pa.array([{"k": 1}, {"k": 2}], pa.struct([pa.field("k", pa.int64())])),
        "value": pa.StructArray.from_arrays([pa.array([3, 4]), pa.array([5, 6])], fields=list(value_type), mask=pa.array([False, True])),
        "partition_id": pa.array([0, 1], pa.int32()),
    })
    rows = _rows(table)
    assert rows == [
        {"key.k": 1, "value.count": 3, "value.count#1": 5, "partition_id": 0},
        {"key.k": 2, "value.count": None, "value.count#1": None, "partition_id": 1},
    ]
    text = _table(rows).splitlines()
    assert text[0].split() == ["key.k", "value.count", "value.count#1", "partition_id"] and text[3].split() == ["2", "null", "null", "1"]
