"""Adapted from PySpark's ``python/pyspark/sql/tests/streaming/test_streaming.py`` (Spark 4.1):
the query handle (names, ids, progress, status, waiting, failures), the reader's and writer's
options, the query manager, and streams from and to tables and temporary views.

Each test runs on Spark's engine and on statestream (``conftest.py``). The sample text file of
Spark's tests is the ``text_dir`` fixture (two lines: ``hello``, ``this``); the semicolon-separated
time/id file is written by :func:`_time_csv` with the same ten rows. Where Spark's test sleeps a
fixed time for a rate source to produce rows, these wait until a trigger has read some.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

import pytest
from pyspark.errors import PySparkValueError, StreamingQueryException
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from tests.spark_suite.support import visible_files, wait_for_rows

#: the rows of Spark's ``streaming/time`` sample (event time; id), one a line
TIME_ROWS = (
    ("2024-05-24 15:03:20", 1),
    ("2024-05-24 15:03:21", 2),
    ("2024-05-24 15:03:24", 3),
    ("2024-05-24 15:03:25", 3),
    ("2024-05-24 15:03:31", 4),
    ("2024-05-24 15:03:31", 1),
    ("2024-05-24 15:03:32", 3),
    ("2024-05-24 15:03:45", 2),
    ("2024-05-24 15:03:46", 5),
    ("2024-05-24 15:03:50", 6),
)


def _time_csv(tmp_path: Any) -> str:
    d = tmp_path / "time-input"
    d.mkdir()
    (d / "text-with-time-test.txt").write_text("\n".join(f"{t};{i}" for t, i in TIME_ROWS))
    return str(d)


@contextlib.contextmanager
def _conf(session: Any, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in ``session`` for the block, then restored."""
    before = session.conf.get(key, None)
    session.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, before)


def _chain_mentions(error: BaseException, text: str) -> bool:
    """Whether ``text`` is in the description of ``error`` or of one of its causes, walked the
    way PySpark's captured exceptions chain them (``_desc``, ``_cause``)."""
    current: Any = error
    while current is not None:
        if text in current._desc:
            return True
        current = current._cause
    return False


def test_query_handle_basics(session, text_dir):
    query = session.readStream.format("text").load(text_dir).writeStream.format("memory").queryName("handle_basics").start()
    try:
        assert query.name == "handle_basics"
        assert isinstance(query.id, str) and isinstance(query.runId, str)
        assert query.isActive
        assert query.exception() is None
        assert query.awaitTermination(1) is False
        query.processAllAvailable()
        last = query.lastProgress
        assert last["name"] == query.name
        assert last["id"] == query.id
        assert last in query.recentProgress
        query.explain()
    finally:
        query.stop()


def test_progress_fields_by_attribute_and_key(session, text_dir):
    query = session.readStream.format("text").load(text_dir).writeStream.format("noop").start()
    try:
        query.processAllAvailable()
        last = query.lastProgress
        assert last["name"] == query.name and last.name == query.name
        assert last["id"] == query.id  # a string by key
        assert str(last.id) == query.id  # a UUID by attribute
        assert last in query.recentProgress
        assert last.numInputRows > 0
        assert len(last.sources) > 0
        assert last.sources[0].numInputRows > 0 and last["sources"][0]["numInputRows"] > 0
        assert last.sink.numOutputRows > 0 and last["sink"]["numOutputRows"] > 0
        # a progress record stays writable by key, and the attribute follows
        last["name"] = "renamed"
        assert last.name == "renamed"
    finally:
        query.stop()


def test_query_name_unset_and_empty(session):
    unnamed = session.readStream.format("rate").load().writeStream.format("noop").start()
    try:
        assert unnamed.name is None
    finally:
        unnamed.stop()
    with pytest.raises(PySparkValueError) as raised:
        session.readStream.format("rate").load().writeStream.format("noop").queryName("").start()
    assert raised.value.getCondition() == "VALUE_NOT_NON_EMPTY_STR"


def test_trigger_arguments(session, text_dir):
    stream = session.readStream.format("text").load(text_dir)
    with pytest.raises(PySparkValueError) as none_given:
        stream.writeStream.trigger()
    with pytest.raises(PySparkValueError) as two_given:
        stream.writeStream.trigger(once=True, processingTime="5 seconds")
    with pytest.raises(PySparkValueError) as two_more:
        stream.writeStream.trigger(processingTime="5 seconds", continuous="1 second")
    for raised in (none_given, two_given, two_more):
        assert raised.value.getCondition() == "ONLY_ALLOW_SINGLE_TRIGGER"
    with pytest.raises(TypeError):  # keyword arguments only
        stream.writeStream.trigger("5 seconds")


def test_reader_path_and_schema_as_options(session, text_dir):
    stream = (
        session.readStream.format("text")
        .option("path", text_dir)
        .schema(StructType([StructField("data", StringType(), False)]))
        .load()
    )
    assert stream.isStreaming
    assert stream.schema.simpleString() == "struct<data:string>"


def test_reader_load_arguments_override_settings(session, text_dir, tmp_path):
    wrong = StructType([StructField("test", IntegerType(), False)])
    right = StructType([StructField("data", StringType(), False)])
    with _conf(session, "spark.sql.legacy.pathOptionBehavior.enabled", "true"):
        stream = (
            session.readStream.format("csv")
            .option("path", str(tmp_path / "not-there"))
            .schema(wrong)
            .load(path=text_dir, schema=right, format="text")
        )
        assert stream.isStreaming
        assert stream.schema.simpleString() == "struct<data:string>"


def test_writer_settings_partitioned_parquet(session, text_dir, tmp_path):
    stream = session.readStream.format("text").load(text_dir).withColumn("id", F.lit(1))
    assert stream.isStreaming
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    query = (
        stream.writeStream.option("checkpointLocation", chk)
        .queryName("partitioned_parquet")
        .format("parquet")
        .partitionBy("id")
        .outputMode("append")
        .option("path", out)
        .start()
    )
    try:
        assert query.name == "partitioned_parquet"
        assert query.isActive
        query.processAllAvailable()
        assert visible_files(out)
        assert os.listdir(chk)
    finally:
        query.stop()


def test_writer_start_arguments_override_settings(session, text_dir, tmp_path):
    stream = session.readStream.format("text").load(text_dir)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    unused_chk, unused_path = str(tmp_path / "unused-chk"), str(tmp_path / "unused-path")
    with _conf(session, "spark.sql.legacy.pathOptionBehavior.enabled", "true"):
        query = (
            stream.writeStream.option("checkpointLocation", unused_chk)
            .format("memory")
            .option("path", unused_path)
            .queryName("overridden_name")
            .outputMode("append")
            .start(path=out, format="parquet", queryName="start_name", checkpointLocation=chk)
        )
    try:
        assert query.name == "start_name"
        assert query.isActive
        query.processAllAvailable()
        assert visible_files(out)
        assert os.listdir(chk)
        assert not os.path.isdir(unused_chk)
        assert not os.path.isdir(unused_path)
    finally:
        query.stop()


def test_status_and_progress_after_slow_batch(session, text_dir, tmp_path):
    def slow_identity(value):
        time.sleep(0.3)
        return value

    slow = F.udf(slow_identity)
    query = (
        session.readStream.format("text").load(text_dir)
        .select(slow(F.col("value")).alias("value"))
        .writeStream.start(path=str(tmp_path / "out"), format="parquet", queryName="slow_batch", checkpointLocation=str(tmp_path / "chk"))
    )
    try:
        query.lastProgress  # noqa: B018 - may be None here; reading it must not fail
        query.processAllAvailable()
        last = query.lastProgress
        assert last["name"] == query.name and last["id"] == query.id
        assert last in query.recentProgress
        status = query.status
        assert {"message", "isDataAvailable", "isTriggerActive"} <= set(status)
    finally:
        query.stop()


def test_await_termination(session, text_dir, tmp_path):
    query = session.readStream.format("text").load(text_dir).writeStream.start(
        path=str(tmp_path / "out"), format="parquet", queryName="awaited", checkpointLocation=str(tmp_path / "chk")
    )
    try:
        assert query.isActive
        with pytest.raises(PySparkValueError) as raised:
            query.awaitTermination("hello")
        assert raised.value.getCondition() == "VALUE_NOT_POSITIVE"
        began = time.monotonic()
        assert query.awaitTermination(2.6) is False
        assert time.monotonic() - began >= 2
        query.processAllAvailable()
        query.stop()
        assert query.awaitTermination() is None  # returns at once: stopped
        assert not query.isActive
    finally:
        query.stop()


def test_failed_query_exception(session, text_dir):
    with _conf(session, "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "true"):
        stream = session.readStream.format("text").load(text_dir)
        fine = stream.writeStream.format("memory").queryName("fine_first").start()
        try:
            fine.processAllAvailable()
            assert fine.exception() is None
        finally:
            fine.stop()

        divide_by_zero = F.udf(lambda v: 1 / 0)
        failing = stream.select(divide_by_zero(F.col("value"))).writeStream.format("memory").queryName("failing").start()
        try:
            with pytest.raises(StreamingQueryException) as raised:
                failing.processAllAvailable()
            assert _chain_mentions(raised.value, "ZeroDivisionError")
        finally:
            error = failing.exception()
            failing.stop()
        assert isinstance(error, StreamingQueryException)
        assert _chain_mentions(error, "ZeroDivisionError")


def test_query_manager_is_kept(session):
    for _ in range(5):
        assert session.streams == session.streams


def test_query_manager_get(session):
    query = session.readStream.format("rate").load().writeStream.format("noop").start()
    assert query.isActive
    assert session.streams.get(query.id).id == query.id
    query.stop()
    assert session.streams.get(query.id) is None


def test_await_any_termination(session, text_dir, tmp_path):
    query = session.readStream.format("text").load(text_dir).writeStream.start(
        path=str(tmp_path / "out"), format="parquet", queryName="awaited_any", checkpointLocation=str(tmp_path / "chk")
    )
    try:
        assert query.isActive
        with pytest.raises(PySparkValueError) as raised:
            session.streams.awaitAnyTermination("hello")
        assert raised.value.getCondition() == "VALUE_NOT_POSITIVE"
        began = time.monotonic()
        assert session.streams.awaitAnyTermination(2.6) is False
        assert time.monotonic() - began >= 2
    finally:
        query.processAllAvailable()
        query.stop()


def test_stream_from_table(session, database):
    session.sql("CREATE TABLE source_rows (value string) USING parquet")
    session.sql("INSERT INTO source_rows VALUES ('aaa'), ('bbb'), ('ccc')")
    stream = session.readStream.table("source_rows")
    assert stream.isStreaming
    query = stream.writeStream.format("memory").queryName("from_table").start()
    query.processAllAvailable()
    query.stop()
    got = session.sql("SELECT * FROM from_table ORDER BY value").collect()
    assert set(got) == {Row(value="aaa"), Row(value="bbb"), Row(value="ccc")}


def test_stream_to_table(session, database, tmp_path):
    stream = session.readStream.format("rate").option("rowsPerSecond", 10).load()
    query = stream.writeStream.toTable("rate_rows", format="parquet", checkpointLocation=str(tmp_path / "chk"))
    assert query.isActive
    wait_for_rows(query)
    query.stop()
    assert len(session.sql("SELECT value FROM rate_rows").collect()) > 0


def test_stream_to_table_clustered(session, database, tmp_path):
    stream = session.readStream.format("rate").option("rowsPerSecond", 10).load()
    query = stream.writeStream.clusterBy("value").toTable("clustered_rows", format="parquet", checkpointLocation=str(tmp_path / "chk"))
    assert query.isActive
    wait_for_rows(query)
    query.stop()
    described = {tuple(r) for r in session.sql("DESCRIBE clustered_rows").collect()}
    assert described == {
        ("timestamp", "timestamp", None),
        ("value", "bigint", None),
        ("# Clustering Information", "", ""),
        ("# col_name", "data_type", "comment"),
    }
    assert len(session.sql("SELECT value FROM clustered_rows").collect()) > 0


def test_sql_over_streaming_temporary_view(session, database):
    session.sql("CREATE TABLE view_source (value string) USING parquet")
    session.sql("INSERT INTO view_source VALUES ('a'), ('b'), ('c')")
    stream = session.readStream.table("view_source")
    assert stream.isStreaming
    stream.createOrReplaceTempView("streaming_view")
    prefixed = session.sql("SELECT CONCAT('view_', value) AS vv FROM streaming_view")
    assert prefixed.isStreaming
    query = prefixed.writeStream.format("memory").queryName("through_view").start()
    query.processAllAvailable()
    query.stop()
    got = session.sql("SELECT * FROM through_view ORDER BY vv").collect()
    assert [r.vv for r in got] == ["view_a", "view_b", "view_c"]


def test_drop_duplicates_within_watermark(session, tmp_path):
    schema = StructType().add("time", TimestampType()).add("id", "integer")
    stream = session.readStream.option("sep", ";").schema(schema).csv(_time_csv(tmp_path))
    query = (
        stream.withWatermark("time", "2 seconds")
        .dropDuplicatesWithinWatermark(["id"])
        .writeStream.outputMode("update")
        .format("memory")
        .queryName("dedup_within_watermark")
        .start()
    )
    assert query.isActive
    query.processAllAvailable()
    query.stop()
    got = session.sql("SELECT * FROM dedup_within_watermark").collect()
    assert 6 <= len(got) <= 9
