"""Query lifecycle details a Spark user relies on: the temporary checkpoint of a query started
without ``checkpointLocation`` is removed when the query stops cleanly and kept after a failure
(Spark's ``deleteCheckpointOnStop``)."""

from __future__ import annotations

import os
import time

import pytest

from statestream import StreamingSession
from tests.spark_confs import session_confs


def _memory_query(spark, name: str, fail: bool = False):
    from pyspark.sql import functions as F

    ss = StreamingSession(spark)
    stream = ss.memoryStream("v INT")
    stream.add_data([(1,), (2,), (3,)])
    df = stream.toDF()
    if fail:
        df = df.select(F.raise_error(F.lit("boom")).alias("v"))
    return df.writeStream.format("memory").queryName(name).outputMode("append").start()


def test_temporary_checkpoint_removed_on_clean_stop(spark):
    q = _memory_query(spark, "lifecycle_clean")
    q.processAllAvailable()
    location = q._ex.checkpoint_location
    assert os.path.isdir(os.path.join(location, "commits"))
    q.stop()
    assert not os.path.exists(location)
    assert spark.table("lifecycle_clean").count() == 3


def test_temporary_checkpoint_kept_after_failure(spark):
    q = _memory_query(spark, "lifecycle_failed", fail=True)
    with pytest.raises(Exception, match="boom"):
        q.awaitTermination(120)
    location = q._ex.checkpoint_location
    assert os.path.isdir(location)
    q.stop()
    assert os.path.isdir(location)


# -- a second start of a name or id that is active: Spark's checks, before anything runs ------------


class _StartedRecorder:
    """Run ids of the ``onQueryStarted`` events a statestream session delivered."""

    def __init__(self) -> None:
        from tests.spark.test_listeners import QuietListener

        runs: list[str] = []

        class Listener(QuietListener):
            def onQueryStarted(self, event):
                runs.append(str(event.runId))

        self.runs = runs
        self.listener = Listener()


def _query_threads() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate() if t.name.startswith("statestream-") and t.name != "statestream-listener-bus"}


def _rate_query(engine, name: str | None, checkpoint: str):
    w = engine.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.format("memory" if name else "noop")
    if name:
        w = w.queryName(name)
    return w.option("checkpointLocation", checkpoint).start()


def _text(exc: BaseException) -> str:
    """The message Spark's JVM exception carries (py4j's ``Py4JJavaError`` wraps it) or ours."""
    java = getattr(exc, "java_exception", None)
    return str(java.getMessage()) if java is not None else str(exc).split("\n\nJVM stacktrace:")[0]


def test_duplicate_name_refused_before_anything_starts(spark, tmp_path):
    """A name active in the session: Spark's IllegalArgumentException, and on statestream no
    thread, no listener event, no batch, and the memory sink's view of the active query kept."""
    from pyspark.errors import IllegalArgumentException

    ss = StreamingSession(spark)
    recorder = _StartedRecorder()
    ss.streams.addListener(recorder.listener)
    texts = []
    for engine, tag in ((spark, "spark"), (ss, "ours")):
        name = f"dup_name_{tag}"
        first = _rate_query(engine, name, str(tmp_path / f"{tag}-a"))
        try:
            deadline = time.monotonic() + 60
            while spark.table(name).count() == 0 and time.monotonic() < deadline:  # the rate source's first row
                first.processAllAvailable()
            threads = _query_threads()
            with pytest.raises(IllegalArgumentException) as err:
                _rate_query(engine, name, str(tmp_path / f"{tag}-b")).stop()
            texts.append(_text(err.value).replace(name, "<name>"))
            assert [q.runId for q in engine.streams.active] == [first.runId]
            if engine is ss:
                assert _query_threads() == threads
                assert recorder.runs == [first.runId]
                assert spark.table(name).count() > 0  # the active query's view, not a new empty one
        finally:
            first.stop()
    assert texts[1] == texts[0] == "Cannot start query with name <name> as a query with that name is already active in this SparkSession"


def test_duplicate_id_refused_before_anything_starts(spark, tmp_path):
    """``spark.sql.streaming.stopActiveRunOnRestart=false``: a second run of an active query id
    (same checkpoint) is refused with Spark's text, before any thread, event or batch."""
    ss = StreamingSession(spark)
    recorder = _StartedRecorder()
    ss.streams.addListener(recorder.listener)
    texts = []
    with session_confs(spark, {"spark.sql.streaming.stopActiveRunOnRestart": "false"}):
        for engine, tag in ((spark, "spark"), (ss, "ours")):
            checkpoint = str(tmp_path / tag)
            first = _rate_query(engine, None, checkpoint)
            try:
                threads = _query_threads()
                with pytest.raises(Exception) as err:  # noqa: PT011 - Spark's is py4j's Py4JJavaError
                    _rate_query(engine, None, checkpoint).stop()
                texts.append(_text(err.value).replace(first.id, "<id>"))
                assert first.isActive and [q.runId for q in engine.streams.active] == [first.runId]
                if engine is ss:
                    assert _query_threads() == threads
                    assert recorder.runs == [first.runId]
            finally:
                first.stop()
    assert texts[0].startswith("Cannot start query with id <id> as another query with same id is already active.")
    assert texts[1] == texts[0]


def test_duplicate_id_error_type_like_spark(spark, tmp_path):
    """Declared in ``tests/known_gaps.py``: the type of the error above."""
    ss = StreamingSession(spark)
    types = []
    with session_confs(spark, {"spark.sql.streaming.stopActiveRunOnRestart": "false"}):
        for engine, tag in ((spark, "spark"), (ss, "ours")):
            first = _rate_query(engine, None, str(tmp_path / tag))
            try:
                with pytest.raises(Exception) as err:  # noqa: PT011
                    _rate_query(engine, None, str(tmp_path / tag)).stop()
                types.append(type(err.value).__name__)
            finally:
                first.stop()
    assert types[1] == types[0]


def test_second_run_of_an_active_id_stops_the_first_by_default(spark, tmp_path):
    """By default (``stopActiveRunOnRestart``) Spark stops the active run of the id, then
    starts the new one."""
    outcomes = []
    for engine, tag in ((spark, "spark"), (StreamingSession(spark), "ours")):
        checkpoint = str(tmp_path / tag)
        first = _rate_query(engine, None, checkpoint)
        second = _rate_query(engine, None, checkpoint)
        try:
            outcomes.append((first.isActive, first.exception(), second.isActive, second.id == first.id, [q.runId for q in engine.streams.active] == [second.runId]))
        finally:
            second.stop()
            first.stop()
    assert outcomes[0] == (False, None, True, True, True)
    assert outcomes[1] == outcomes[0]


def test_checkpoint_run_by_another_process_is_refused_at_start(spark, tmp_path):
    """A query of another process holds the checkpoint (the writer lock a running statestream
    query takes): ``start()`` here is refused naming that process, before any thread, event or
    file of this run; once that process is killed (SIGKILL: no clean release), the same start
    runs. Spark's engine would run a whole batch first and fail on the offset log."""
    import signal
    import subprocess
    import sys

    from statestream.errors import StatestreamIllegalStateException

    ss = StreamingSession(spark)
    checkpoint = str(tmp_path / "ck")
    first = _rate_query(ss, None, checkpoint)
    first.processAllAvailable()
    query_id = first.id
    first.stop()
    before = sorted(os.listdir(os.path.join(checkpoint, "offsets")))
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from statestream.checkpoint.files import CheckpointFileManager\n"
            "from statestream.checkpoint.writer_lock import CheckpointWriterLock\n"
            f"CheckpointWriterLock(CheckpointFileManager({checkpoint!r})).acquire({query_id!r}, 'other-run')\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n"
        )],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        recorder = _StartedRecorder()
        ss.streams.addListener(recorder.listener)
        threads = _query_threads()
        with pytest.raises(StatestreamIllegalStateException) as err:
            _rate_query(ss, None, checkpoint)
        assert str(err.value).startswith(f"Cannot start query with id {query_id} as another query with same id is already active.")
        assert f"run other-run of query {query_id} in process {holder.pid}" in str(err.value)
        assert _query_threads() == threads and recorder.runs == [] and ss.streams.active == []
        assert sorted(os.listdir(os.path.join(checkpoint, "offsets"))) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        holder.stdout.close()  # left to the garbage collector, it warns in a later test
    again = _rate_query(ss, None, checkpoint)
    try:
        again.processAllAvailable()
        assert again.id == query_id and again.lastProgress is not None
    finally:
        again.stop()


def test_checkpoint_that_is_a_file_is_refused_at_start_as_spark(spark, tmp_path):
    """A checkpoint location that is a file, or lies under one: ``start()`` fails on both
    engines, with the text of the Hadoop error Spark's fails with, naming the path."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    texts = {}
    for engine, tag in ((spark, "spark"), (StreamingSession(spark), "ours")):
        for where in (afile, afile / "sub"):
            with pytest.raises(Exception) as err:  # noqa: PT011 - Spark's is py4j's Py4JJavaError
                _rate_query(engine, None, str(where))
            texts[tag, where.name] = _text(err.value)
            assert engine.streams.active == []
    for tag in ("spark", "ours"):
        assert f"Destination exists and is not a directory: {afile}" in texts[tag, "afile"]
        assert "Parent path is not a directory:" in texts[tag, "sub"] and str(afile) in texts[tag, "sub"]


def test_a_log_entry_another_writer_wrote_stops_the_run(spark, tmp_path):
    """The offset log entry this run is about to write is already there (a second writer that
    got past every lock, on a store without one): the run stops with Spark's
    CONCURRENT_STREAM_LOG_UPDATE instead of running the batch over another's offsets."""
    import time

    from statestream import StreamingSession
    from statestream.errors import StatestreamStreamingQueryException

    ss = StreamingSession(spark)
    src = tmp_path / "in"
    src.mkdir()
    (src / "0.json").write_text('{"v": 1}\n')
    ck = tmp_path / "ck"
    q = ss.readStream.schema("v LONG").json(str(src)).writeStream.format("noop").option("checkpointLocation", str(ck)).trigger(processingTime="100 milliseconds").start()
    try:
        q.processAllAvailable()
        (ck / "offsets" / "1").write_text((ck / "offsets" / "0").read_text())  # the other writer's entry
        (src / "1.json").write_text('{"v": 2}\n')
        deadline = time.monotonic() + 60
        while q.isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        exc = q.exception()
        assert exc is not None and isinstance(exc, StatestreamStreamingQueryException)
        assert "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for 1." in str(exc)
        assert not (ck / "commits" / "1").exists()
    finally:
        q.stop()


def test_a_batch_with_state_tasks_notes_its_python_workers_warm(spark):
    """Every batch whose plan has state writers stamps the SparkContext (``worker_warmup``), so a
    query started soon after it runs no warm-up job beside the busy workers; a query without
    state leaves the stamp alone."""
    from statestream.runtime import worker_warmup

    ss = StreamingSession(spark)
    sc = spark.sparkContext
    setattr(sc, worker_warmup._WARMED_ATTR, None)
    stream = ss.memoryStream("v INT")
    q = stream.toDF().writeStream.format("memory").queryName("warm_stateless").outputMode("append").start()
    try:
        stream.add_data([(1,)])
        q.processAllAvailable()
    finally:
        q.stop()
    assert getattr(sc, worker_warmup._WARMED_ATTR) is None
    stream = ss.memoryStream("v INT")
    q = stream.toDF().groupBy("v").count().writeStream.format("memory").queryName("warm_stateful").outputMode("update").start()
    try:
        stream.add_data([(1,), (2,)])
        q.processAllAvailable()
        before = time.monotonic()
        stream.add_data([(3,)])
        q.processAllAvailable()
    finally:
        q.stop()
    assert getattr(sc, worker_warmup._WARMED_ATTR) >= before


def _state_memory_after_three_batches(ss, name: str) -> tuple[int, list]:
    stream = ss.memoryStream("v INT")
    q = stream.toDF().groupBy("v").count().writeStream.format("memory").queryName(name).outputMode("complete").start()
    try:
        for batch in ([(1,), (2,)], [(2,), (3,)], [(3,), (4,)]):
            stream.add_data(batch)
            q.processAllAvailable()
        memory = q.lastProgress["stateOperators"][0]["memoryUsedBytes"]
    finally:
        q.stop()
    return memory, sorted(tuple(r) for r in ss.sparkSession.table(name).collect())


def test_max_batches_to_retain_in_memory_sets_the_versions_a_provider_caches(spark):
    """``spark.sql.streaming.maxBatchesToRetainInMemory`` as in Spark: how many versions each
    provider keeps in memory (its memoryUsedBytes counts them), never what the query answers.
    Spark takes 0 or less as no cache; ours keeps the newest version whatever the value."""
    from statestream.state.local_disk import ON_LOCAL_DISK_CONF

    ss = StreamingSession(spark)
    key = "spark.sql.streaming.maxBatchesToRetainInMemory"
    # versions kept in the workers' heap, where memoryUsedBytes counts them (mapped ones it does not)
    with session_confs(spark, {ON_LOCAL_DISK_CONF: "false", key: "2"}):  # 2: Spark's default
        two, rows_two = _state_memory_after_three_batches(ss, "retain_two")
        spark.conf.set(key, "1")
        one, rows_one = _state_memory_after_three_batches(ss, "retain_one")
        spark.conf.set(key, "0")
        none, rows_none = _state_memory_after_three_batches(ss, "retain_none")
    assert rows_none == rows_one == rows_two == [(1, 1), (2, 2), (3, 2), (4, 1)]
    assert 0 < one < two and 0 < none < two, (one, none, two)


def test_a_batchs_materialised_output_is_released_after_its_sink(spark, tmp_path):
    """Each batch's output is materialised (``localCheckpoint``) so the sink can read it without
    running the state steps again; once the sink is done its blocks go, rather than sitting in
    the JVM's heap until a garbage collection lets Spark's ContextCleaner find them."""
    from pyspark.sql import functions as F

    storage = spark.sparkContext._jsc.sc()
    before = {i.id() for i in storage.getRDDStorageInfo()}
    ss = StreamingSession(spark)
    stream = ss.memoryStream("k INT, v INT")
    q = (
        stream.toDF()
        .groupBy("k")
        .agg(F.sum("v").alias("s"))
        .writeStream.format("memory")
        .queryName("released_output")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        for batch in range(3):
            stream.add_data([(k, batch) for k in range(50)])
            q.processAllAvailable()
        deadline = time.monotonic() + 30  # the removal is asynchronous
        while (left := {i.id() for i in storage.getRDDStorageInfo()} - before) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"cached RDDs left by the batches: {left}"
        assert spark.table("released_output").count() == 150
    finally:
        q.stop()


# -- stop(): Spark's cancellation of the batch in flight, and spark.sql.streaming.stopTimeout ------


def _wait_for(predicate, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_stop_cancels_the_batch_in_flight(spark, tmp_path):
    """As Spark's ``stop()``: the jobs of the batch in flight are cancelled rather than waited
    for; the query stops cleanly, the batch is not committed, and the next start runs it again.
    The batch's job holds its task until a file appears, which only the test's cleanup makes."""
    import threading

    started, release = tmp_path / "task-started", tmp_path / "release"

    def hold(rows):
        started.touch()
        deadline = time.monotonic() + 600
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield sum(1 for _ in rows)

    calls: list[int] = []

    def slow_sink(df, batch_id):
        calls.append(batch_id)
        if len(calls) == 1:
            df.rdd.mapPartitions(hold).collect()

    ss = StreamingSession(spark)
    stream = ss.memoryStream("v INT")
    stream.add_data([(1,), (2,)])
    checkpoint = tmp_path / "ck"
    q = stream.toDF().writeStream.foreachBatch(slow_sink).option("checkpointLocation", str(checkpoint)).start()
    try:
        _wait_for(started.exists, "the batch's task to start")
        stopper = threading.Thread(target=q.stop, daemon=True)
        stopper.start()
        stopper.join(120)
        assert not stopper.is_alive(), "stop() waited for the batch in flight instead of cancelling it"
        assert not q.isActive and q.exception() is None
        assert not (checkpoint / "commits" / "0").exists()
        again = stream.toDF().writeStream.foreachBatch(slow_sink).option("checkpointLocation", str(checkpoint)).start()
        again.processAllAvailable()
        again.stop()
        assert calls == [0, 0]
    finally:
        release.touch()
        q.stop()


def test_stop_timeout_raises_spark_s_timeout_when_the_thread_does_not_stop(spark, tmp_path):
    """``spark.sql.streaming.stopTimeout``: user code in ``foreachBatch`` that no job
    cancellation reaches keeps the thread past the timeout, and ``stop()`` raises Spark's
    TimeoutException text; the query ends once that code returns."""
    import threading

    entered, go_on = threading.Event(), threading.Event()

    def blocking_sink(df, batch_id):
        entered.set()
        go_on.wait(600)

    ss = StreamingSession(spark)
    stream = ss.memoryStream("v INT")
    stream.add_data([(1,)])
    with session_confs(spark, {"spark.sql.streaming.stopTimeout": "300ms"}):
        q = stream.toDF().writeStream.foreachBatch(blocking_sink).queryName("stop_timeout_q").start()
    try:
        assert entered.wait(120), "the sink was never called"
        with pytest.raises(TimeoutError) as info:
            q.stop()
        message = str(info.value)
        assert message == (
            f"Stream Execution thread for stream stop_timeout_q [id = {q.id}, runId = {q.runId}] failed to stop "
            "within 300 milliseconds (specified by spark.sql.streaming.stopTimeout). See the cause on what was "
            "being executed in the streaming query thread."
        )
        # as on Spark's engine: inactive from the stop on, listed as active until the thread ends
        assert not q.isActive
        assert q in ss.streams.active
    finally:
        go_on.set()
    assert q.awaitTermination(120) is True
    assert not q.isActive and q.exception() is None
    assert q not in ss.streams.active


# -- the session clone's Arrow exchange (runtime.arrow_exchange) ---------------------------------


def _batch_session_conf(spark, key: str) -> tuple[str | None, str | None]:
    """``key`` as a windowed count's batch sees it (the session of its ``foreachBatch`` frame),
    and as the user's session has it after the query."""
    import datetime

    from pyspark.sql import functions as F

    seen: list[str] = []
    ss = StreamingSession(spark)
    stream = ss.memoryStream("t TIMESTAMP, v INT")
    stream.add_data([(datetime.datetime(2026, 1, 1), 1)])
    counts = stream.toDF().groupBy(F.window("t", "5 seconds")).count()
    q = counts.writeStream.outputMode("update").foreachBatch(lambda df, _: seen.append(df.sparkSession.conf.get(key))).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    return (seen[0] if seen else None), spark.conf.get(key)


def test_the_batches_send_arrow_batches_without_a_byte_limit_unless_the_user_set_one(spark):
    from statestream.runtime.arrow_exchange import ARROW_MAX_BYTES_PER_BATCH

    default = spark.conf.get(ARROW_MAX_BYTES_PER_BATCH)
    in_batch, after = _batch_session_conf(spark, ARROW_MAX_BYTES_PER_BATCH)
    assert in_batch is not None and in_batch.rstrip("b") == "2147483647"
    assert after == default, "the user's session was changed"
    with session_confs(spark, {ARROW_MAX_BYTES_PER_BATCH: "1000000"}):
        in_batch, _ = _batch_session_conf(spark, ARROW_MAX_BYTES_PER_BATCH)
    assert in_batch is not None and in_batch.rstrip("b") == "1000000"


# -- the batch's materialised output (operators.local_checkpoint) ---------------------------------


def test_the_batch_output_is_a_local_checkpoint_dropped_after_the_sink(spark):
    """The rows a sink reads are the batch's local checkpoint (in memory and on disk,
    serialised), and their blocks leave the block manager once the sink returns."""
    import datetime

    from pyspark.sql import functions as F

    seen: list[tuple] = []
    ss = StreamingSession(spark)
    stream = ss.memoryStream("t TIMESTAMP, v INT")
    stream.add_data([(datetime.datetime(2026, 1, 1, 0, 0, s), s) for s in range(12)])
    counts = stream.toDF().groupBy(F.window("t", "5 seconds")).count()

    def sink(df, _batch_id):
        logical = df._jdf.queryExecution().logical()
        rdd = logical.rdd()
        level = rdd.getStorageLevel()
        persisted = spark.sparkContext._jsc.sc().getPersistentRDDs().contains(rdd.id())
        seen.append((logical.getClass().getSimpleName(), level.useMemory(), level.useDisk(), level.deserialized(), persisted, rdd.id(), df.count()))

    q = counts.writeStream.outputMode("update").foreachBatch(sink).start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert len(seen) == 1
    kind, memory, disk, deserialized, persisted, rdd_id, rows = seen[0]
    assert (kind, memory, disk, deserialized, persisted, rows) == ("LogicalRDD", True, True, False, True, 3)

    # unpersist is asynchronous: the RDD leaves the persisted ones soon after the sink returns
    def still_persisted() -> bool:
        return spark.sparkContext._jsc.sc().getPersistentRDDs().contains(rdd_id)

    deadline = time.monotonic() + 30
    while still_persisted() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not still_persisted()


def test_a_joins_materialised_intermediates_are_dropped_when_the_batch_is_done(spark):
    """A stream-stream join matched with a Spark join materialises its new rows and its pairs
    mid-batch; like the batch's output, they leave the block manager when the batch is done
    instead of waiting for the ContextCleaner."""
    import datetime

    from pyspark.sql import functions as F

    from statestream.plan.stream_joins import MATCH_IN_TASKS_CONF

    def persisted() -> set[int]:
        rdds = spark.sparkContext._jsc.sc().getPersistentRDDs()
        return {int(k) for k in spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters.asJava(rdds.keySet())}

    before = persisted()
    seen: list[int] = []
    ss = StreamingSession(spark)
    left, right = ss.memoryStream("k INT, lt TIMESTAMP"), ss.memoryStream("rk INT, rt TIMESTAMP")
    t0 = datetime.datetime(2026, 1, 1)
    left.add_data([(k, t0) for k in range(5)])
    right.add_data([(k, t0) for k in range(3, 8)])
    lw = left.toDF().withWatermark("lt", "10 seconds")
    rw = right.toDF().withWatermark("rt", "10 seconds")
    joined = lw.join(rw, (F.col("k") == F.col("rk")) & (F.col("rt") >= F.col("lt")) & (F.col("rt") <= F.col("lt") + F.expr("INTERVAL 5 SECONDS")))
    with session_confs(spark, {MATCH_IN_TASKS_CONF: "false"}):
        q = joined.writeStream.foreachBatch(lambda df, _b: seen.append(len(persisted() - before))).start()
        try:
            q.processAllAvailable()
        finally:
            q.stop()
    # while the sink ran: the output and the join's two intermediates
    assert seen and seen[0] >= 3, seen
    deadline = time.monotonic() + 30
    while persisted() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not persisted() - before
