"""Adapted from PySpark's ``python/pyspark/sql/tests/streaming/test_streaming_listener.py``
(Spark 4.1): ``StreamingQueryListener`` events of running queries (started, progress,
terminated, with and without ``onQueryIdle``), observed metrics in progress, adding and removing
listeners, the event and progress classes built from JSON, and the shape of the JVM classes
PySpark mirrors.

Each test runs on Spark's engine and on statestream (``conftest.py``). Listener events arrive
asynchronously on both engines; where Spark's test drains the JVM's listener bus or sleeps, these
wait until the event they check has arrived. Counting a manager's listeners has no public API:
each engine's own registry is read (Spark's test reads the JVM's).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    SinkProgress,
    SourceProgress,
    StateOperatorProgress,
    StreamingQueryProgress,
)

from tests.spark_suite.support import wait_until

ISO_8601 = "%Y-%m-%dT%H:%M:%S.%fZ"

#: the phases a progress record may time
DURATION_KEYS = {"triggerExecution", "queryPlanning", "getBatch", "commitOffsets", "latestOffset", "addBatch", "walCommit"}


def _is_json_three_ways(record: Any) -> None:
    """``json``, ``prettyJson`` and ``str()`` of a progress record all parse as JSON."""
    for text in (record.json, record.prettyJson, str(record)):
        json.loads(text)


def _check_started(event: Any) -> None:
    assert isinstance(event, QueryStartedEvent)
    assert isinstance(event.id, uuid.UUID) and isinstance(event.runId, uuid.UUID)
    assert event.name is None or event.name.startswith("test")
    datetime.strptime(event.timestamp, ISO_8601)


def _check_terminated(event: Any, exception_text: str | None = None, error_class: str | None = None) -> None:
    assert isinstance(event, QueryTerminatedEvent)
    assert isinstance(event.id, uuid.UUID) and isinstance(event.runId, uuid.UUID)
    if exception_text is None:
        assert event.exception is None
    else:
        assert exception_text in event.exception
    if error_class is None:
        assert event.errorClassOnException is None
    else:
        assert error_class in event.errorClassOnException


def _check_state_operator(op: Any) -> None:
    assert isinstance(op, StateOperatorProgress)
    _is_json_three_ways(op)
    assert isinstance(op.operatorName, str)
    for field in (
        "numRowsTotal", "numRowsUpdated", "allUpdatesTimeMs", "numRowsRemoved", "allRemovalsTimeMs", "commitTimeMs",
        "memoryUsedBytes", "numRowsDroppedByWatermark", "numShufflePartitions", "numStateStoreInstances",
    ):
        assert isinstance(getattr(op, field), int), field
    assert isinstance(op.customMetrics, dict)


def _check_source(source: Any) -> None:
    assert isinstance(source, SourceProgress)
    _is_json_three_ways(source)
    assert isinstance(source.description, str)
    for field in ("startOffset", "endOffset", "latestOffset"):
        assert isinstance(getattr(source, field), (str, type(None))), field
    assert isinstance(source.numInputRows, int)
    assert isinstance(source.inputRowsPerSecond, float)
    assert isinstance(source.processedRowsPerSecond, float)
    assert isinstance(source.metrics, dict)


def _check_sink(sink: Any) -> None:
    assert isinstance(sink, SinkProgress)
    _is_json_three_ways(sink)
    assert isinstance(sink.description, str)
    assert isinstance(sink.numOutputRows, int)
    assert isinstance(sink.metrics, dict)


def _check_progress(progress: Any, stateful: bool) -> None:
    assert isinstance(progress, StreamingQueryProgress)
    assert isinstance(progress.id, uuid.UUID) and isinstance(progress.runId, uuid.UUID)
    assert progress.name.startswith("test")
    _is_json_three_ways(progress)
    datetime.strptime(progress.timestamp, ISO_8601)
    assert isinstance(progress.batchId, int)
    assert isinstance(progress.batchDuration, int)
    assert isinstance(progress.durationMs, dict)
    assert set(progress.durationMs) <= DURATION_KEYS
    assert all(isinstance(v, int) for v in progress.durationMs.values())
    assert all(isinstance(v, str) for v in progress.eventTime.values())
    assert isinstance(progress.stateOperators, list)
    if stateful:
        assert len(progress.stateOperators) >= 1
        for op in progress.stateOperators:
            _check_state_operator(op)
    assert isinstance(progress.sources, list) and len(progress.sources) >= 1
    for source in progress.sources:
        _check_source(source)
    _check_sink(progress.sink)
    assert isinstance(progress.observedMetrics, dict)


def _listener_count(session: Any, engine: str) -> int:
    """How many listeners the session's query manager holds, read from the engine's registry."""
    if engine == "spark":
        return len(session.streams._jsqm.listListeners())
    return len(session.streams._listeners.listeners)


def test_observed_metrics_reach_the_listener(session):
    class ObservedCounts(StreamingQueryListener):
        def __init__(self):
            self.rows = -1
            self.error_rows = -1

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            observed = event.progress.observedMetrics.get("my_event")
            self.rows, self.error_rows = observed["rc"], observed["erc"]

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = ObservedCounts()
    session.streams.addListener(listener)
    query = None
    try:
        stream = session.readStream.format("rate").load().withColumn("error", F.col("value"))
        observed = stream.observe("my_event", F.count(F.lit(1)).alias("rc"), F.count(F.col("error")).alias("erc"))
        query = observed.writeStream.format("noop").start()
        wait_until(lambda: query.lastProgress is not None and query.lastProgress.batchId > 0, what="a second batch")
        wait_until(lambda: listener.rows > 0 and listener.error_rows > 0, what="observed counts above 0")
        assert listener.rows > 0 and listener.error_rows > 0
    finally:
        if query is not None:
            query.stop()
        session.streams.removeListener(listener)


def test_progress_of_a_stateful_observed_query(session):
    stream = session.readStream.format("rate").option("rowsPerSecond", 10).load()
    counted = stream.observe("my_event", F.count(F.lit(1)).alias("rc")).groupBy().count()
    query = counted.writeStream.format("noop").queryName("test").outputMode("update").trigger(processingTime="1 second").start()
    try:
        wait_until(lambda: query.lastProgress is not None and query.lastProgress.batchId > 0, what="a second batch")
        query.stop()
        _check_progress(query.lastProgress, stateful=True)
        for progress in query.recentProgress:
            _check_progress(progress, stateful=True)
    finally:
        query.stop()


def test_number_of_public_methods_of_the_mirrored_classes(session):
    # PySpark mirrors these JVM classes field by field; the counts are Spark 4.1.4's (the
    # started event has 16: 4.1 added its job tags)
    expected = {
        "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent": 16,
        "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent": 12,
        "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent": 15,
        "org.apache.spark.sql.streaming.StreamingQueryProgress": 38,
        "org.apache.spark.sql.streaming.StateOperatorProgress": 27,
        "org.apache.spark.sql.streaming.SourceProgress": 21,
        "org.apache.spark.sql.streaming.SinkProgress": 19,
    }
    utils = session.sparkContext._jvm.org.apache.spark.util.Utils
    counted = {name: len(utils.classForName(name, True, False).getMethods()) for name in expected}
    assert counted == expected


class _RecordingV1(StreamingQueryListener):
    """The listener interface before ``onQueryIdle`` (Spark < 3.5): the last event of each kind."""

    def __init__(self):
        self.started = self.progress = self.terminated = None

    def onQueryStarted(self, event):
        self.started = event

    def onQueryProgress(self, event):
        self.progress = event

    def onQueryTerminated(self, event):
        self.terminated = event


class _RecordingV2(_RecordingV1):
    """The same, with ``onQueryIdle`` (Spark 3.5 on)."""

    def onQueryIdle(self, event):
        pass


def _events_of_two_queries(session: Any, listener: _RecordingV1) -> None:
    session.streams.addListener(listener)
    try:
        stream = session.readStream.format("rate").option("rowsPerSecond", 10).load()
        query = stream.groupBy().count().writeStream.format("noop").queryName("test").outputMode("complete").start()
        assert query.isActive
        wait_until(lambda: listener.progress is not None and listener.progress.progress.batchId > 0, what="a second batch's event")
        query.stop()
        wait_until(lambda: listener.terminated is not None, what="the terminated event")
        _check_started(listener.started)
        assert isinstance(listener.progress, QueryProgressEvent)
        _check_progress(listener.progress.progress, stateful=True)
        _check_terminated(listener.terminated)

        # a query that fails: its terminated event carries the Python error
        listener.terminated = None
        divide_by_zero = F.udf(lambda v: 1 / 0)
        failing = stream.select(divide_by_zero(F.col("value"))).writeStream.format("noop").start()
        wait_until(lambda: listener.terminated is not None, what="the failed query's terminated event")
        failing.stop()
        _check_terminated(listener.terminated, "ZeroDivisionError")
    finally:
        session.streams.removeListener(listener)


def test_listener_events_without_on_query_idle(session):
    _events_of_two_queries(session, _RecordingV1())


def test_listener_events_with_on_query_idle(session):
    _events_of_two_queries(session, _RecordingV2())


class _SilentV1(StreamingQueryListener):
    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


class _SilentV2(_SilentV1):
    def onQueryIdle(self, event):
        pass


def test_remove_listener(session, engine):
    for listener in (_SilentV1(), _SilentV2()):
        before = _listener_count(session, engine)
        session.streams.addListener(listener)
        assert _listener_count(session, engine) == before + 1
        session.streams.removeListener(listener)
        assert _listener_count(session, engine) == before


def test_started_event_from_json(session):
    event = QueryStartedEvent.fromJson(
        {"id": "78923ec2-8f4d-4266-876e-1f50cf3c283b", "runId": "55a95d45-e932-4e08-9caa-0a8ecd9391e8", "name": None, "timestamp": "2023-06-09T18:13:29.741Z"}
    )
    _check_started(event)
    assert event.id == uuid.UUID("78923ec2-8f4d-4266-876e-1f50cf3c283b")
    assert event.runId == uuid.UUID("55a95d45-e932-4e08-9caa-0a8ecd9391e8")
    assert event.name is None
    assert event.timestamp == "2023-06-09T18:13:29.741Z"


def test_terminated_event_from_json(session):
    event = QueryTerminatedEvent.fromJson(
        {
            "id": "78923ec2-8f4d-4266-876e-1f50cf3c283b",
            "runId": "55a95d45-e932-4e08-9caa-0a8ecd9391e8",
            "exception": "org.apache.spark.SparkException: Job aborted due to stage failure",
            "errorClassOnException": None,
        }
    )
    _check_terminated(event, "SparkException")
    assert event.id == uuid.UUID("78923ec2-8f4d-4266-876e-1f50cf3c283b")
    assert event.runId == uuid.UUID("55a95d45-e932-4e08-9caa-0a8ecd9391e8")
    assert "SparkException" in event.exception
    assert event.errorClassOnException is None


#: a progress record as Spark's JVM renders it (the numbers are arbitrary; offsets are numbers)
PROGRESS_RECORD = {
    "id": "00000000-0000-0001-0000-000000000001",
    "runId": "00000000-0000-0001-0000-000000000002",
    "name": "test",
    "timestamp": "2016-12-05T20:54:20.827Z",
    "batchId": 2,
    "numInputRows": 678,
    "inputRowsPerSecond": 10.0,
    "processedRowsPerSecond": 5.4,
    "batchDuration": 5,
    "durationMs": {"getBatch": 0},
    "eventTime": {key: "2016-12-05T20:54:20.827Z" for key in ("min", "avg", "watermark", "max")},
    "stateOperators": [
        {
            "operatorName": "op1",
            "numRowsTotal": 0,
            "numRowsUpdated": 1,
            "allUpdatesTimeMs": 1,
            "numRowsRemoved": 2,
            "allRemovalsTimeMs": 34,
            "commitTimeMs": 23,
            "memoryUsedBytes": 3,
            "numRowsDroppedByWatermark": 0,
            "numShufflePartitions": 2,
            "numStateStoreInstances": 2,
            "customMetrics": {"loadedMapCacheHitCount": 1, "loadedMapCacheMissCount": 0, "stateOnCurrentVersionSizeBytes": 2},
        }
    ],
    "sources": [
        {
            "description": "source",
            "startOffset": 123,
            "endOffset": 456,
            "latestOffset": 789,
            "numInputRows": 678,
            "inputRowsPerSecond": 10.0,
            "processedRowsPerSecond": 5.4,
            "metrics": {},
        }
    ],
    "sink": {"description": "sink", "numOutputRows": -1, "metrics": {}},
    "observedMetrics": {"event1": {"c1": 1, "c2": 3.0}, "event2": {"rc": 1, "min_q": "hello", "max_q": "world"}},
}


def test_progress_from_json(session):
    progress = StreamingQueryProgress.fromJson(json.loads(json.dumps(PROGRESS_RECORD)))
    _check_progress(progress, stateful=True)
    assert progress.id == uuid.UUID("00000000-0000-0001-0000-000000000001")
    assert progress.runId == uuid.UUID("00000000-0000-0001-0000-000000000002")
    assert (progress.name, progress.timestamp, progress.batchId) == ("test", "2016-12-05T20:54:20.827Z", 2)
    assert (progress.numInputRows, progress.inputRowsPerSecond, progress.batchDuration) == (678, 10.0, 5)
    assert progress.durationMs == {"getBatch": 0}
    assert progress.eventTime == {key: "2016-12-05T20:54:20.827Z" for key in ("min", "avg", "watermark", "max")}
    assert progress.observedMetrics == {
        "event1": Row("c1", "c2")(1, 3.0),
        "event2": Row("rc", "min_q", "max_q")(1, "hello", "world"),
    }

    [op] = progress.stateOperators
    assert isinstance(op, StateOperatorProgress)
    assert (op.operatorName, op.numRowsTotal, op.numRowsUpdated, op.allUpdatesTimeMs) == ("op1", 0, 1, 1)
    assert (op.numRowsRemoved, op.allRemovalsTimeMs, op.commitTimeMs, op.memoryUsedBytes) == (2, 34, 23, 3)
    assert (op.numRowsDroppedByWatermark, op.numShufflePartitions, op.numStateStoreInstances) == (0, 2, 2)
    assert op.customMetrics == {"loadedMapCacheHitCount": 1, "loadedMapCacheMissCount": 0, "stateOnCurrentVersionSizeBytes": 2}

    [source] = progress.sources
    assert isinstance(source, SourceProgress)
    assert source.description == "source"
    assert (source.startOffset, source.endOffset, source.latestOffset) == ("123", "456", "789")  # offsets as text
    assert (source.numInputRows, source.inputRowsPerSecond, source.processedRowsPerSecond) == (678, 10.0, 5.4)
    assert source.metrics == {}

    sink = progress.sink
    assert isinstance(sink, SinkProgress)
    assert (sink.description, sink.numOutputRows, sink.metrics) == ("sink", -1, {})


def test_listener_spark_attribute_is_settable(session):
    class WithSession(StreamingQueryListener):
        def __init__(self, spark):
            self.spark = spark

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    assert WithSession(session).spark is session
