"""Rules of the transformWithState handle and operator that need no Spark, found by PySpark's
own transformWithState tests (``tests/spark_suite/test_transform_with_state.py``): how state
values are read from the user's arguments, maps read back as dicts, a variable dropped by
``deleteIfExists``, the pieces the pandas API hands a key's rows in, and the Avro encoding's
nullability rule."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructField, StructType

from statestream.operators.stateful_processor_handle import StateVariableInfo, _Codec, _normalise
from statestream.operators.transform_with_state import byte_conf_value, not_nullable_variable, pandas_piece_rows
from statestream.testing import TwsTester

NO_LIMIT = 2**31 - 1
VALUE = StructType([StructField("value", LongType())])


# ----------------------------------------------------------------------------------------------
# Values as PySpark's state client reads them
# ----------------------------------------------------------------------------------------------


def test_any_sequence_is_read_field_by_field():
    assert _normalise(("a", 1)) == ("a", 1)
    assert _normalise(["a", 1]) == ("a", 1)
    assert _normalise(Row(name="a", n=1)) == ("a", 1)
    assert _normalise("0") == ("0",)  # a bare one-character string is a one-field value
    assert _normalise((np.int64(3), np.float64(1.5))) == (3, 1.5)
    assert type(_normalise((np.int64(3),))[0]) is int


def test_items_beyond_the_schema_are_dropped_as_pyspark_zips_them_with_the_fields():
    assert _normalise(("a", "b", "c"), 1) == ("a",)
    assert _normalise("key1", 1) == ("k",)
    assert _normalise(("a",), 2) == ("a",)  # a short value is left for the schema to refuse


def test_a_value_that_is_no_sequence_is_refused():
    with pytest.raises(TypeError, match="must be a tuple"):
        _normalise(5)


def test_maps_read_back_as_dicts_at_any_depth():
    schema = StructType(
        [
            StructField("id", IntegerType()),
            StructField("attributes", MapType(StringType(), ArrayType(IntegerType()))),
            StructField("confs", MapType(StringType(), MapType(StringType(), IntegerType()))),
            StructField("pairs", ArrayType(StructType([StructField("k", StringType()), StructField("v", StringType())]))),
        ]
    )
    codec = _Codec(schema, None)
    value = (0, {"key1": [1], "key2": [np.int64(10)]}, {"e1": {"e2": 5}}, [{"k": "env", "v": "prod"}, {"k": "region", "v": "us"}])
    (back,) = codec.from_arrow(codec.to_arrow([value], "test"))
    assert back == (0, {"key1": [1], "key2": [10]}, {"e1": {"e2": 5}}, [Row(k="env", v="prod"), Row(k="region", v="us")])
    assert isinstance(back[1], dict) and isinstance(back[2]["e1"], dict)


# ----------------------------------------------------------------------------------------------
# deleteIfExists
# ----------------------------------------------------------------------------------------------


class DeletesItsVariables(StatefulProcessor):
    """Declares a value, a list and a map state, deletes all three in ``init``, then reports what
    each call on them does."""

    def init(self, handle):
        self.value = handle.getValueState("v", VALUE)
        self.items = handle.getListState("l", VALUE)
        self.entries = handle.getMapState("m", StructType([StructField("k", StringType())]), VALUE)
        for name in ("v", "l", "m"):
            handle.deleteIfExists(name)

    def handleInputRows(self, key, rows, timerValues):
        calls = {
            "v.exists": self.value.exists,
            "v.get": self.value.get,
            "v.update": lambda: self.value.update((1,)),
            "v.clear": self.value.clear,
            "l.exists": self.items.exists,
            "l.get": lambda: list(self.items.get()),
            "l.put": lambda: self.items.put([(1,)]),
            "l.appendValue": lambda: self.items.appendValue((1,)),
            "l.appendList": lambda: self.items.appendList([(1,)]),
            "l.clear": self.items.clear,
            "m.exists": self.entries.exists,
            "m.getValue": lambda: self.entries.getValue(("a",)),
            "m.containsKey": lambda: self.entries.containsKey(("a",)),
            "m.updateValue": lambda: self.entries.updateValue(("a",), (1,)),
            "m.iterator": lambda: list(self.entries.iterator()),
            "m.keys": lambda: list(self.entries.keys()),
            "m.values": lambda: list(self.entries.values()),
            "m.removeKey": lambda: self.entries.removeKey(("a",)),
            "m.clear": self.entries.clear,
        }
        for name, call in calls.items():
            try:
                outcome = f"ok: {call()!r}"
            except PySparkRuntimeError as exc:
                outcome = str(exc)
            yield Row(call=name, outcome=outcome)

    def close(self):
        pass


def test_a_deleted_variable_answers_as_sparks_state_server():
    # measured on Spark 4.1.4's engine: the state server forgets the variable; PySpark's client
    # puts its own prefix before the answer, and ends an iterator on any error
    out = {r.call: r.outcome for r in TwsTester(DeletesItsVariables()).test("k", [Row(x=1)])}
    assert out == {
        "v.exists": "Error checking value state exists: Value state v is not initialized.",
        "v.get": "Error getting value state: Value state v is not initialized.",
        "v.update": "Error updating value state: Value state v is not initialized.",
        "v.clear": "Error clearing value state: Value state v is not initialized.",
        "l.exists": "Error checking value state exists: List state l is not initialized.",
        "l.get": "ok: []",
        "l.put": "Error updating value state: List state l is not initialized.",
        "l.appendValue": "Error updating value state: List state l is not initialized.",
        "l.appendList": "Error updating value state: List state l is not initialized.",
        "l.clear": "Error clearing value state: List state l is not initialized.",
        "m.exists": "Error checking map state exists: Map state m is not initialized.",
        "m.getValue": "Error getting value: Map state m is not initialized.",
        "m.containsKey": "Error checking if map state contains key: Map state m is not initialized.",
        "m.updateValue": "Error updating map state value: Map state m is not initialized.",
        "m.iterator": "ok: []",
        "m.keys": "ok: []",
        "m.values": "ok: []",
        "m.removeKey": "Error removing key from map state: Map state m is not initialized.",
        "m.clear": "Error clearing map state: Map state m is not initialized.",
    }


# ----------------------------------------------------------------------------------------------
# The pandas API's pieces
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_records, max_bytes, avg, rows",
    [
        (10_000, NO_LIMIT, 0.0, 10_000),
        (1, NO_LIMIT, 0.0, 1),
        (2, NO_LIMIT, 50.0, 2),  # without a byte limit the size is not looked at
        (0, NO_LIMIT, 0.0, 1),  # PySpark 4.1: a limit of 0 or less is met by every row
        (-1, NO_LIMIT, 0.0, 1),
        (10_000, 2, 20.0, 1),
        (10_000, 100_000, 16.0, 6_250),
        (10_000, 100_000, 15.0, 6_667),  # the piece ends at the row that reaches the limit
        (3, 100_000, 16.0, 3),
    ],
)
def test_rows_per_pandas_piece(max_records, max_bytes, avg, rows):
    assert pandas_piece_rows(max_records, max_bytes, avg) == rows


def test_byte_confs_read_as_spark_reads_them():
    assert byte_conf_value("2", 7) == 2
    assert byte_conf_value("64m", 7) == 64 * 1024 * 1024
    assert byte_conf_value("1g", 7) == 1024**3
    assert byte_conf_value(" 100000 ", 7) == 100_000
    assert byte_conf_value(None, 7) == 7
    with pytest.raises(ValueError, match="Size must be specified"):
        byte_conf_value("lots", 7)


# ----------------------------------------------------------------------------------------------
# The Avro encoding's nullability rule
# ----------------------------------------------------------------------------------------------


def test_the_first_variable_with_a_field_that_is_not_nullable_is_found():
    nullable = StructType([StructField("id", IntegerType(), True)])
    strict = StructType([StructField("id", IntegerType(), False), StructField("name", StringType(), False)])
    assert not_nullable_variable((StateVariableInfo("a", "value", nullable),)) is None
    found = not_nullable_variable((StateVariableInfo("a", "value", nullable), StateVariableInfo("state", "value", strict)))
    assert found == ("state", strict)
    # a map's user key counts too
    keyed = StateVariableInfo("m", "map", nullable, StructType([StructField("k", StringType(), False)]))
    assert not_nullable_variable((keyed,))[0] == "m"
