"""Adapted from PySpark's ``python/pyspark/sql/tests/streaming/test_streaming_foreach_batch.py``
(Spark 4.1): ``writeStream.foreachBatch`` — the batch as a DataFrame (views of it, its session),
a failure of the function, stopping a query while the function runs, and a function that calls
other functions and modules.

Each test runs on Spark's engine and on statestream (``conftest.py``). The sample text file of
Spark's tests is the ``text_dir`` fixture (two lines: ``hello``, ``this``); the tables are made in
the ``database`` fixture's database (under ``tmp_path``), named with it, since a batch's session
may not share the test session's current database.
"""

from __future__ import annotations

import threading
import time

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame

from tests.spark_suite.support import wait_until


def _one(value: int) -> int:
    """A module-level function the batch function calls."""
    return value


class _Helpers:
    @staticmethod
    def two() -> int:
        """A static method the batch function calls."""
        return 2


def _sorted_rows(df: DataFrame) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def test_batch_as_global_view(session, engine, text_dir):
    view = f"batch_rows_{engine}"

    def keep(batch_df, batch_id):
        batch_df.createOrReplaceGlobalTempView(view)

    query = session.readStream.format("text").load(text_dir).writeStream.foreachBatch(keep).start()
    try:
        query.processAllAvailable()
        assert len(session.sql(f"SELECT * FROM global_temp.{view}").collect()) == 2
    finally:
        query.stop()
        session.catalog.dropGlobalTempView(view)


def test_batch_temp_view_in_the_batch_session(session, engine, text_dir):
    view = f"batch_copy_{engine}"

    def keep(batch_df, batch_id):
        # the batch's own session (a clone of the query's on Spark) sees a view made of it
        batch_df.createOrReplaceTempView("updates")
        assert len(batch_df.sparkSession.sql("SELECT * FROM updates").collect()) == 2
        batch_df.createOrReplaceGlobalTempView(view)

    query = session.readStream.format("text").load(text_dir).writeStream.foreachBatch(keep).start()
    try:
        query.processAllAvailable()  # a failed assertion in keep would fail the query here
        rows = session.sql(f"SELECT * FROM global_temp.{view}").collect()
        assert sorted(r.value for r in rows) == ["hello", "this"]
    finally:
        query.stop()
        session.catalog.dropGlobalTempView(view)


def test_function_error_fails_the_query(session, text_dir):
    def fail(batch_df, batch_id):
        raise RuntimeError("this should fail the query")

    query = session.readStream.format("text").load(text_dir).writeStream.foreachBatch(fail).start()
    try:
        with pytest.raises(StreamingQueryException) as raised:
            query.processAllAvailable()
        assert "this should fail" in str(raised.value)
    finally:
        query.stop()


def test_stop_while_the_function_runs(session):
    entered = threading.Event()

    def slow(batch_df, batch_id):
        entered.set()
        batch_df.sparkSession._jvm.java.lang.Thread.sleep(4000)

    query = session.readStream.format("rate").load().writeStream.foreachBatch(slow).start()
    wait_until(entered.is_set, what="the function to be called")
    time.sleep(0.5)
    query.stop()
    assert query.exception() is None


def test_batch_session_writes_a_table(session, database, text_dir):
    table = f"{database}.union_of_batch"

    def write(batch_df, batch_id):
        if batch_id > 0:
            return
        extra = batch_df.sparkSession.createDataFrame([("structured",), ("streaming",)])
        extra.union(batch_df).write.mode("append").saveAsTable(table)

    query = session.readStream.format("text").load(text_dir).writeStream.foreachBatch(write).start()
    query.processAllAvailable()
    query.stop()
    expected = session.read.format("text").load(text_dir).union(session.createDataFrame([("structured",), ("streaming",)]))
    assert _sorted_rows(session.read.table(table)) == _sorted_rows(expected)


def test_batch_function_reads_a_path(session, database, text_dir):
    table = f"{database}.batch_and_path"

    def write(batch_df, batch_id):
        if batch_id > 0:
            return
        again = batch_df.sparkSession.read.format("text").load(text_dir)
        again.union(batch_df).write.mode("append").saveAsTable(table)

    query = session.readStream.format("text").load(text_dir).writeStream.foreachBatch(write).start()
    query.processAllAvailable()
    query.stop()
    lines = session.read.format("text").load(text_dir)
    assert _sorted_rows(session.read.table(table)) == _sorted_rows(lines.union(lines))


def test_batch_function_calls_other_functions(session, database):
    table = f"{database}.called_functions"

    def three() -> int:
        return 3

    def write(batch_df, batch_id):
        if batch_id > 0:
            return
        values = [(_one(1),), (_Helpers.two(),), (three(),)]
        batch_df.sparkSession.createDataFrame(values).write.mode("append").saveAsTable(table)

    query = session.readStream.format("rate").load().writeStream.foreachBatch(write).start()
    query.processAllAvailable()
    query.stop()
    assert _sorted_rows(session.read.table(table)) == [(1,), (2,), (3,)]


def test_batch_function_uses_a_module_imported_by_the_test(session, database, text_dir):
    table = f"{database}.after_import"

    def write(batch_df, batch_id):
        if batch_id > 0:
            return
        time.sleep(1)  # a module the test imported, not the function
        batch_df.sparkSession.read.format("text").load(text_dir).write.mode("append").saveAsTable(table)

    query = session.readStream.format("rate").load().writeStream.foreachBatch(write).start()
    query.processAllAvailable()
    query.stop()
    assert _sorted_rows(session.read.table(table)) == _sorted_rows(session.read.format("text").load(text_dir))
