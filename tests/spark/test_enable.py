"""``statestream.enable(spark)``: one line, after which the session's own streaming entry points
are statestream's, and a query that mixes streams of both engines is refused at ``start()``.

Each test enables a ``newSession()`` of the shared session (its own SQL conf and views, the same
SparkContext), so that the other tests' ``spark`` stays Spark's.
"""

from __future__ import annotations

import time

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame as SparkDataFrame
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import statestream
import statestream.errors
from statestream import StreamingSession
from statestream.api.dataframe import DataFrame as StreamingDataFrame
from statestream.errors import MIXED_ENGINES_CONDITION
from statestream.api.query import StreamingQuery, StreamingQueryManager


@pytest.fixture
def session(spark):
    s = spark.newSession()
    yield s
    for q in list(getattr(s.streams, "active", [])):
        q.stop()
    statestream.disable(s)


def test_enable_serves_the_session_itself(session, tmp_path):
    assert not statestream.is_enabled(session)
    assert statestream.enable(session) is session
    assert statestream.enable(session) is session  # idempotent
    assert isinstance(session, SparkSession) and statestream.is_enabled(session)
    assert isinstance(session.streams, StreamingQueryManager)
    assert StreamingSession(session).streams is session.streams  # one query manager

    # the job's own code, unchanged: a stream, a query, its output through spark.sql, the state reader
    src = tmp_path / "in"
    src.mkdir()
    session.createDataFrame([(1,), (2,), (2,)], "k LONG").write.json(str(src / "a"))
    stream = session.readStream.schema("k LONG").json(str(src / "a"))
    assert isinstance(stream, StreamingDataFrame) and stream.isStreaming
    checkpoint = str(tmp_path / "cp")
    q = (stream.groupBy("k").count().writeStream.outputMode("complete").format("memory")
         .queryName("enabled_counts").option("checkpointLocation", checkpoint).start())
    assert isinstance(q, StreamingQuery)
    assert [a.id for a in session.streams.active] == [q.id]
    q.processAllAvailable()
    assert sorted(map(tuple, session.sql("SELECT k, `count` FROM enabled_counts").collect())) == [(1, 1), (2, 2)]
    q.stop()
    state = session.read.format("statestore").load(checkpoint)
    assert sorted((r.key.k, r.value["count"]) for r in state.collect()) == [(1, 1), (2, 2)]
    assert session.read.format("state-metadata").load(checkpoint).count() == 1

    # batch work is Spark's, untouched
    batch = session.read.json(str(src / "a"))
    assert isinstance(batch, SparkDataFrame) and not batch.isStreaming
    assert session.table("enabled_counts").count() == 2

    statestream.disable(session)
    assert not statestream.is_enabled(session)
    assert type(session) is SparkSession
    assert type(session.readStream).__module__ == "pyspark.sql.streaming.readwriter"


def test_streaming_views_seen_by_spark_sql(session):
    statestream.enable(session)
    stream = session.readStream.format("rate").load()
    stream.createOrReplaceTempView("enabled_rate")
    view = session.sql("SELECT value * 2 AS doubled FROM enabled_rate")
    assert isinstance(view, StreamingDataFrame) and view.columns == ["doubled"]
    assert isinstance(session.table("enabled_rate"), StreamingDataFrame)


def test_a_query_mixing_the_engines_is_refused_at_start(session):
    """A stream of Spark's engine (read before ``enable``) joined or united with statestream's:
    refused at ``start()``, naming Spark's input, before anything runs."""
    from_spark = session.readStream.format("rate").load().withColumnRenamed("value", "v2")
    statestream.enable(session)
    ours = session.readStream.format("rate").load()
    mixed = {
        "join": ours.join(from_spark, F.expr("value = v2")),
        "join from Spark's side": from_spark.join(ours, F.expr("value = v2")),
        "union": ours.union(from_spark),
    }
    for name, df in mixed.items():
        with pytest.raises(AnalysisException) as raised:
            df.writeStream.format("noop").start()
        assert raised.value.getCondition() == MIXED_ENGINES_CONDITION, name
        assert "rate [timestamp, value]" in str(raised.value) and "statestream.enable(spark)" in str(raised.value), name
    assert session.streams.active == []


def test_a_new_session_of_an_enabled_one_is_enabled(session):
    statestream.enable(session)
    other = session.newSession()
    assert statestream.is_enabled(other)
    assert other.streams is not session.streams
    assert isinstance(other.readStream.format("rate").load(), StreamingDataFrame)


def _grouping_sets(df):
    return df.groupingSets([["a"], ["b"]], "a", "b").agg(F.count("*").alias("n"))


def test_a_query_statestream_cannot_run_is_handed_to_spark(session, spark, tmp_path, caplog):
    """``groupingSets`` on a stream (statestream: not yet): on an enabled session the query is
    rebuilt on Spark's engine from its ``readStream``, with one warning naming the reason, and
    gives what Spark's engine gives; ``spark.streams`` lists it. With
    ``spark.statestream.handOverToSpark=false`` the refusal stands."""
    import logging

    src = tmp_path / "in"
    spark.createDataFrame([(i % 2, i % 3) for i in range(12)], "a INT, b INT").write.json(str(src))
    reference = _grouping_sets(spark.readStream.schema("a INT, b INT").json(str(src)).where("b < 2"))
    ref_query = reference.writeStream.outputMode("complete").format("memory").queryName("handover_reference").start()
    ref_query.processAllAvailable()
    ref_query.stop()
    expected = sorted(map(tuple, spark.sql("SELECT * FROM handover_reference").collect()), key=str)

    statestream.enable(session)
    stream = session.readStream.schema("a INT, b INT").json(str(src))
    with caplog.at_level(logging.WARNING, logger="statestream.api.handover"):
        handed = _grouping_sets(stream.where("b < 2"))  # the filter before the refused call is replayed too
    assert isinstance(handed, SparkDataFrame) and handed.isStreaming
    [warning] = [r.getMessage() for r in caplog.records if r.name == "statestream.api.handover"]
    assert "groupingSets" in warning and "Spark's own engine" in warning
    query = handed.writeStream.outputMode("complete").format("memory").queryName("handover_ours").start()
    try:
        assert [q.id for q in session.streams.active] == [query.id]
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(map(tuple, session.sql("SELECT * FROM handover_ours").collect()), key=str) == expected
    assert all(row[1] != 2 for row in expected) and any(row[1] == 1 for row in expected)  # b = 2 filtered out

    session.conf.set("spark.statestream.handOverToSpark", "false")
    with pytest.raises(statestream.errors.NotSupportedYetError, match="groupingSets"):
        _grouping_sets(stream)


def test_the_continuous_trigger_is_handed_to_spark(session, tmp_path):
    """The continuous trigger: the writer's settings so far are replayed on Spark's writer, whose
    query runs on Spark's engine. (Started here with an ``availableNow`` trigger set after it, on
    Spark's writer: a continuous query does not stop reliably with two cores.)"""
    from pyspark.sql.streaming.readwriter import DataStreamWriter as SparkWriter

    statestream.enable(session)
    src = tmp_path / "in"
    session.createDataFrame([(1,)], "k INT").write.json(str(src))
    writer = session.readStream.schema("k INT").json(str(src)).writeStream.format("memory").queryName("handover_continuous")
    continuous = writer.trigger(continuous="1 second")
    assert isinstance(continuous, SparkWriter)
    query = continuous.trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
        assert query.name == "handover_continuous" and type(query).__module__.startswith("pyspark.")
    finally:
        query.stop()
    assert [tuple(r) for r in session.sql("SELECT * FROM handover_continuous").collect()] == [(1,)]


def test_the_manager_waits_for_and_listens_to_handed_over_queries(session, tmp_path):
    """One ``spark.streams`` for both engines: a listener added before the hand-over hears the
    handed-over query's events, ``awaitAnyTermination`` returns when it terminates (after
    ``resetTerminated``, waits again), and ``removeListener`` takes the listener off Spark's bus."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Heard(StreamingQueryListener):
        def __init__(self):
            self.events = []

        def onQueryStarted(self, event):
            self.events.append(("started", str(event.id)))

        def onQueryProgress(self, event):
            pass

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            self.events.append(("terminated", str(event.id)))

    statestream.enable(session)
    heard = Heard()
    session.streams.addListener(heard)
    src = tmp_path / "in"
    session.createDataFrame([(1, 2)], "a INT, b INT").write.json(str(src))
    try:
        handed = _grouping_sets(session.readStream.schema("a INT, b INT").json(str(src)))
        assert isinstance(handed, SparkDataFrame)
        assert session.streams.awaitAnyTermination(0.1) is False
        query = handed.writeStream.outputMode("complete").format("noop").trigger(availableNow=True).start()
        assert session.streams.awaitAnyTermination(120) is True
        query.awaitTermination()
        session.streams.resetTerminated()
        assert session.streams.awaitAnyTermination(0.1) is False
        deadline = time.monotonic() + 60
        while len(heard.events) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # Spark's listener bus delivers after the fact
        assert heard.events == [("started", query.id), ("terminated", query.id)]
    finally:
        session.streams.removeListener(heard)
    assert session.streams._spark_listeners == []
