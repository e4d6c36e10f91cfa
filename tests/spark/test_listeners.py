"""Query management on statestream against Spark's engine: StreamingQueryListener events,
``lastProgress``/``recentProgress`` as PySpark's progress objects, and Ctrl-C while waiting.

The same MemoryStream-free query (a file source, one file) runs on both engines; listener events
arrive on Spark's listener bus thread asynchronously, so the test waits for the terminated event.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

SCHEMA = "k STRING, x LONG"


class Recorder(StreamingQueryListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def onQueryStarted(self, event):
        self.events.append(("started", event))

    def onQueryProgress(self, event):
        self.events.append(("progress", event))

    def onQueryIdle(self, event):
        self.events.append(("idle", event))

    def onQueryTerminated(self, event):
        self.events.append(("terminated", event))

    def wait_terminated(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(kind == "terminated" for kind, _ in self.events) and time.monotonic() < deadline:
            time.sleep(0.05)


def _input(spark, tmp_path) -> str:
    path = str(tmp_path / "in")
    spark.createDataFrame([("a", 1), ("b", 2), ("a", 3)], SCHEMA).write.parquet(path)
    return path


def _run(engine, manager, path: str, name: str, fail: bool = False) -> tuple[Recorder, Any]:
    recorder = Recorder()
    manager.addListener(recorder)
    try:
        df = engine.readStream.schema(SCHEMA).parquet(path).groupBy("k").agg(F.sum("x").alias("s"))
        df = df.observe("metrics", F.count(F.lit(1)).alias("rows"))

        def sink(batch, batch_id):
            batch.collect()  # Spark 4.1 checks that the batch's state stores committed
            if fail:
                raise ValueError("boom")

        query = df.writeStream.outputMode("update").queryName(name).foreachBatch(sink).start()
        try:
            query.processAllAvailable()
        except Exception:  # noqa: BLE001 - the failing case
            pass
        query.stop()
        recorder.wait_terminated()
    finally:
        manager.removeListener(recorder)
    return recorder, query


@pytest.fixture(scope="module")
def both(spark, tmp_path_factory):
    from statestream import StreamingSession

    path = _input(spark, tmp_path_factory.mktemp("listeners"))
    ss = StreamingSession(spark)
    theirs = _run(spark, spark.streams, path, "listener_spark")
    ours = _run(ss, ss.streams, path, "listener_ours")
    return theirs, ours


def _kinds(recorder: Recorder) -> list[str]:
    # idle events depend on timing (noDataProgressEventInterval): compare the rest
    return [kind for kind, _ in recorder.events if kind != "idle"]


def test_listener_hears_the_same_events(both):
    (theirs, tq), (ours, oq) = both
    assert _kinds(ours) == _kinds(theirs) == ["started", "progress", "terminated"]
    started = dict(ours.events)["started"]
    assert (str(started.id), str(started.runId), started.name) == (oq.id, oq.runId, "listener_ours")
    progress = dict(ours.events)["progress"].progress
    assert (progress.batchId, progress.numInputRows) == (0, 3)
    assert progress.observedMetrics["metrics"].asDict() == {"rows": 2}  # two keys after the aggregation
    theirs_progress = dict(theirs.events)["progress"].progress
    assert progress.observedMetrics["metrics"].asDict() == theirs_progress.observedMetrics["metrics"].asDict()
    terminated = dict(ours.events)["terminated"]
    assert (terminated.exception, terminated.errorClassOnException) == (None, None)


def test_progress_objects_are_pysparks(both):
    (_, tq), (_, oq) = both
    for q in (tq, oq):
        last = q.lastProgress
        assert type(last).__name__ == "StreamingQueryProgress"
        assert last.batchId == last["batchId"] == 0
        assert '"batchId"' in last.json and "\n" in last.prettyJson
        assert set(last.durationMs) >= {"addBatch", "triggerExecution"}
        assert all(type(p).__name__ == "StreamingQueryProgress" for p in q.recentProgress)
    assert type(oq.lastProgress.sources[0]).__name__ == type(tq.lastProgress.sources[0]).__name__


def test_a_failed_query_is_reported_terminated_with_its_error(spark, tmp_path):
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    recorder, query = _run(ss, ss.streams, _input(spark, tmp_path), "listener_failing", fail=True)
    terminated = dict(recorder.events)["terminated"]
    assert terminated.exception and "boom" in terminated.exception
    assert query.exception() is not None


def test_ctrl_c_while_waiting_stops_the_query_cleanly(spark, tmp_path, caplog):
    """KeyboardInterrupt in awaitTermination: the query stops (no failure, nothing logged as an
    error) and the interrupt reaches the caller."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    df = ss.readStream.format("rate").option("rowsPerSecond", 5).load().groupBy((F.col("value") % 2).alias("k")).count()
    query = df.writeStream.outputMode("update").format("memory").queryName("ctrl_c").start()
    timer = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT))  # what Ctrl-C sends
    timer.start()
    with caplog.at_level(logging.INFO, logger="statestream"), pytest.raises(KeyboardInterrupt):
        query.awaitTermination()
    assert not query.isActive
    assert query.exception() is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("statestream")]
    assert any("stopped" in r.getMessage() for r in caplog.records)


def test_add_listener_takes_a_streaming_query_listener(spark):
    from statestream import StreamingSession

    with pytest.raises(TypeError, match="StreamingQueryListener"):
        StreamingSession(spark).streams.addListener(object())


def test_ctrl_c_while_awaiting_any_termination_stops_the_queries_cleanly(spark, caplog):
    """KeyboardInterrupt in ``streams.awaitAnyTermination()``: every active query of the session
    stops (no failure, nothing logged as an error) and the interrupt reaches the caller, as with
    ``query.awaitTermination()``."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    queries = []
    try:
        for i in range(2):
            df = ss.readStream.format("rate").option("rowsPerSecond", 5).load().groupBy((F.col("value") % 2).alias("k")).count()
            queries.append(df.writeStream.outputMode("update").format("memory").queryName(f"any_ctrl_c_{i}").start())
        timer = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT))  # what Ctrl-C sends
        timer.start()
        with caplog.at_level(logging.INFO, logger="statestream"), pytest.raises(KeyboardInterrupt):
            ss.streams.awaitAnyTermination()
        assert [q.isActive for q in queries] == [False, False]
        assert [q.exception() for q in queries] == [None, None]
        assert ss.streams.active == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("statestream")]
    finally:
        for q in queries:
            q.stop()


class QuietListener(StreamingQueryListener):
    """A listener that ignores every event (PySpark asks for all four methods); the tests'
    listeners below override the one they need."""

    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        pass

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


class StopsItsQuery(QuietListener):
    """Stops the query from ``onQueryProgress`` and waits for its end there: on Spark's engine
    events come on the listener bus thread, so this does not block the query."""

    def __init__(self, streams: Any) -> None:
        self.streams = streams
        self.threads: list[str] = []
        self.returned = threading.Event()

    def onQueryProgress(self, event):
        self.threads.append(threading.current_thread().name)
        query = self.streams.get(str(event.progress.id))
        if query is not None:
            query.stop()
            query.awaitTermination()
            self.returned.set()


@pytest.mark.parametrize("engine", ["spark", "ours"])
def test_a_listener_may_stop_and_await_the_query(spark, tmp_path, engine):
    from statestream import StreamingSession

    session = spark if engine == "spark" else StreamingSession(spark)
    listener = StopsItsQuery(session.streams)
    session.streams.addListener(listener)
    try:
        df = session.readStream.schema(SCHEMA).parquet(_input(spark, tmp_path))
        query = df.writeStream.format("noop").queryName(f"stops_itself_{engine}").start()
        ended = query.awaitTermination(60)
        if not ended:  # a query blocked in its listener cannot be stopped from here either
            threading.Thread(target=query.stop, daemon=True).start()
        assert ended and listener.returned.wait(30)
        assert query.exception() is None
    finally:
        session.streams.removeListener(listener)
    if engine == "ours":
        assert listener.threads and all(name == "statestream-listener-bus" for name in listener.threads)


class SeesItsQueryStart(QuietListener):
    """What ``onQueryStarted`` finds of its query through the session's manager."""

    def __init__(self, streams: Any) -> None:
        self.streams = streams
        self.seen: list[tuple[bool, bool]] = []

    def onQueryStarted(self, event):
        query = self.streams.get(str(event.id))
        self.seen.append((query is not None, bool(query is not None and query.isActive)))


@pytest.mark.parametrize("engine", ["spark", "ours"])
def test_a_query_is_active_when_its_listeners_hear_it_started(spark, tmp_path, engine):
    """Spark's query is active from its initialisation: ``onQueryStarted``, which runs before
    ``start()`` returns, finds it in ``streams`` and active."""
    from statestream import StreamingSession

    session = spark if engine == "spark" else StreamingSession(spark)
    listener = SeesItsQueryStart(session.streams)
    session.streams.addListener(listener)
    try:
        df = session.readStream.schema(SCHEMA).parquet(_input(spark, tmp_path))
        query = df.writeStream.format("noop").queryName(f"sees_its_start_{engine}").start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    finally:
        session.streams.removeListener(listener)
    assert listener.seen == [(True, True)]


class StopsItsQueryAtStart(QuietListener):
    def __init__(self, streams: Any) -> None:
        self.streams = streams

    def onQueryStarted(self, event):
        self.streams.get(str(event.id)).stop()


def test_a_query_stopped_by_its_onquerystarted_listener_is_inactive_and_ends(spark, tmp_path):
    """statestream only: on Spark's engine the event comes from the query's own thread, and a
    stop there waits for that thread."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    listener = StopsItsQueryAtStart(ss.streams)
    ss.streams.addListener(listener)
    try:
        df = ss.readStream.schema(SCHEMA).parquet(_input(spark, tmp_path))
        query = df.writeStream.format("noop").queryName("stopped_at_start").start()
        assert not query.isActive
        assert query.awaitTermination(60) is True
        assert query.exception() is None and query not in ss.streams.active
    finally:
        ss.streams.removeListener(listener)


def test_events_after_process_all_available_once_the_bus_drained(spark, tmp_path):
    """Events after onQueryStarted are delivered on the bus thread, in order; a test waits for
    the bus to drain (as Spark's tests do) instead of sleeping."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    recorder = Recorder()
    ss.streams.addListener(recorder)
    try:
        query = ss.readStream.schema(SCHEMA).parquet(_input(spark, tmp_path)).writeStream.format("noop").start()
        try:
            query.processAllAvailable()
            assert ss.streams._wait_for_listener_bus(30)
            assert _kinds(recorder)[:2] == ["started", "progress"]
            assert [e for kind, e in recorder.events if kind == "progress"][0].progress.batchId == 0
        finally:
            query.stop()
        assert ss.streams._wait_for_listener_bus(30)
        assert _kinds(recorder)[-1] == "terminated"
    finally:
        ss.streams.removeListener(recorder)
