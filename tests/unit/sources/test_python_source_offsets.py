"""A Python data source's new-data check: offsets compared as the JSON text Spark compares."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import IntegerType, StructField, StructType

from statestream.sources.python_datasource import PythonMicroBatchStream


class Counting(DataSource):
    @classmethod
    def name(cls) -> str:
        return "counting"

    def schema(self) -> StructType:
        return StructType([StructField("n", IntegerType())])


def _source() -> PythonMicroBatchStream:
    return PythonMicroBatchStream(None, Counting, {}, None)


def test_offsets_are_compared_as_json_text():
    source = _source()
    assert not source.has_new_data({"a": 1}, {"a": 1})
    assert source.has_new_data({"a": 1}, {"a": 2})
    assert source.has_new_data({"a": 1}, {"a": 1.0})  # equal as Python values, not as Spark's JSON text
    assert source.has_new_data({"a": 1, "b": 2}, {"b": 2, "a": 1})  # the reader's key order is its JSON's


def test_the_first_batch_and_an_unknown_end():
    source = _source()
    assert source.has_new_data(None, {"a": 0})  # no committed offset yet: Spark runs batch 0
    assert not source.has_new_data({"a": 0}, None)
