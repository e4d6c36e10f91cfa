"""The query process of the crash tests: one streaming query, run to the end or killed on the way.

Run as ``python crash_child.py <job.json>`` by ``test_crash_recovery.py``, in a new session (so
that its pid is also the id of the process group holding it and its JVM). The job says which
engine runs the query (``statestream`` or ``spark``, the oracle), the output mode, and where
input, checkpoint and output live. The query is the seed query over parquet files, one file per
micro-batch, with ``trigger(availableNow=True)``:

    withWatermark("ts", "20 seconds").groupBy(window("ts", "5 seconds")).agg(count("value"))

(or, with ``"query": "dedup"`` in the job, ``withWatermark("ts", "20 seconds").dropDuplicates(["value", "ts"])``;
with ``"query": "limit"``, ``limit(7)``; with ``"query": "session"``, the same aggregation over
``session_window("ts", "10 seconds")`` and the parity of ``value``; with ``"query": "stream_join"``,
a stream-stream left outer join of two file sources, ``<input>/left`` and ``<input>/right``, see
:func:`stream_join_query`).

Sinks, both idempotent per batch id:

* ``append``: the file sink (``format("parquet")``) with its ``_spark_metadata`` log.
* ``update``: ``foreachBatch`` writing each batch to ``<output>/batch_id=<N>`` with mode
  ``overwrite`` (the usual way to make ``foreachBatch`` exactly-once), after appending
  ``<N> <rows>`` to ``<calls>``, so the test sees every call, re-deliveries included.
  ``fb_crash_batch`` makes the function itself SIGKILL the process group after writing batch N:
  a crash between the sink's write and ``commits/N`` that works on both engines.

With ``"kafka"`` in the job, statestream reads the same records from a Kafka topic instead
(:func:`read_kafka`; Spark's engine, which has no Kafka connector here, keeps reading the files).

statestream's own crash points come from ``STATESTREAM_TEST_CRASH_AT`` (``statestream.faults``);
this script sets ``STATESTREAM_TEST_CRASH_PGID`` to its own process group first, so the point
kills the driver and its JVM together. ``master`` (default ``local[2]``) lets a test run the
state tasks one after the other (``local[1]``), so a kill after partition 0's commit surely
comes before partition 1's; ``confs`` are set on the session before the query starts. On a
normal end it writes ``<result>``: the query id, the
run id and the ids of the batches this run executed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

SCHEMA = "ts TIMESTAMP, value LONG"
#: the two inputs of the ``stream_join`` query (``<input>/left``, ``<input>/right``)
LEFT_SCHEMA = "lts TIMESTAMP, k LONG, lv LONG"
RIGHT_SCHEMA = "rts TIMESTAMP, rk LONG, rv LONG"


def seed_query(df):
    """The seed query (README) over the test's input schema."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .groupBy(F.window("ts", "5 seconds"))
        .agg(F.count("value").alias("value_count"))
    )


def dedup_query(df):
    """Deduplication as the programming guide writes it (``test_crash_dedup.py``)."""
    return df.withWatermark("ts", "20 seconds").dropDuplicates(["value", "ts"])


def limit_query(df):
    """A streaming limit (``test_crash_limit.py``)."""
    return df.limit(7)


def session_query(df):
    """Session windows over the same input: 10 s gap, keyed by the parity of ``value``."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .groupBy(F.session_window("ts", "10 seconds"), (F.col("value") % 2).alias("k"))
        .agg(F.count("value").alias("value_count"))
    )


def object_hash_query(df):
    """A windowed aggregation whose buffers Spark keeps as objects (ObjectHashAggregate):
    collect_list and percentile_approx, next to stddev (``test_crash_aggregates.py``)."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .groupBy(F.window("ts", "5 seconds"))
        .agg(
            F.array_sort(F.collect_list("value")).alias("values"),
            F.percentile_approx("value", 0.5).alias("p50"),
            F.stddev("value").alias("sd"),
        )
    )


def _value_sessions(key, pdfs, state):
    """Sessions per key closing 10 s after their last event (event-time timeout)."""
    import pandas as pd

    if state.hasTimedOut:
        n, first, last = state.get
        state.remove()
        yield pd.DataFrame({"k": [int(key[0])], "n": [n], "first": [first], "last": [last]})
        return
    n, first, last = state.get if state.exists else (0, None, None)
    for pdf in pdfs:
        secs = pdf["ts"].astype("int64") // 10**9 if str(pdf["ts"].dtype).startswith("datetime64[ns") else pdf["ts"].map(lambda t: int(t.timestamp()))
        n += len(pdf)
        first = int(secs.min()) if first is None else min(first, int(secs.min()))
        last = int(secs.max()) if last is None else max(last, int(secs.max()))
    state.update((n, first, last))
    state.setTimeoutTimestamp(max(last * 1000 + 10_000, state.getCurrentWatermarkMs() + 1))
    return
    yield


def apply_in_pandas_query(df):
    """applyInPandasWithState sessions keyed by ``value``, emitted when they time
    out (``test_crash_apply_in_pandas_with_state.py``)."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .withColumn("k", F.col("value"))
        .groupBy("k")
        .applyInPandasWithState(
            _value_sessions, "k LONG, n LONG, first LONG, last LONG", "n LONG, first LONG, last LONG", "Append", "EventTimeTimeout"
        )
    )


def _session_processor():
    """A transformWithState processor with the sessions of ``_value_sessions``: a ValueState per
    key and an event-time timer 10 s after its last event, whose firing emits the session."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ValueSessions(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.session = handle.getValueState("session", "n LONG, first LONG, last LONG")

        def handleInputRows(self, key, rows, timerValues):
            n, first, last = self.session.get() if self.session.exists() else (0, None, None)
            for pdf in rows:
                secs = pdf["ts"].map(lambda t: int(t.timestamp()))
                n += len(pdf)
                first = int(secs.min()) if first is None else min(first, int(secs.min()))
                last = int(secs.max()) if last is None else max(last, int(secs.max()))
            self.session.update((n, first, last))
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(max(last * 1000 + 10_000, timerValues.getCurrentWatermarkInMs() + 1))
            return iter([])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            import pandas as pd

            n, first, last = self.session.get()
            self.session.clear()
            yield pd.DataFrame({"k": [int(key[0])], "n": [n], "first": [first], "last": [last]})

        def close(self):
            pass

    return ValueSessions()


def transform_with_state_query(df):
    """transformWithStateInPandas sessions keyed by ``value``, emitted when their timer fires
    (``test_crash_transform_with_state.py``)."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .withColumn("k", F.col("value"))
        .groupBy("k")
        .transformWithStateInPandas(_session_processor(), "k LONG, n LONG, first LONG, last LONG", "Append", "EventTime")
    )


def stream_join_query(left, right):
    """A stream-stream left outer join (``test_crash_stream_join.py``): both sides with a 10 s
    watermark delay, equal keys and the right row's time within 5 s after the left row's, so
    the right side's watermark bounds how long a left row waits for a match before it comes out
    padded with nulls."""
    from pyspark.sql import functions as F

    left = left.withWatermark("lts", "10 seconds")
    right = right.withWatermark("rts", "10 seconds")
    cond = (left.k == right.rk) & (right.rts >= left.lts) & (right.rts <= left.lts + F.expr("INTERVAL 5 SECONDS"))
    return left.join(right, cond, "left")


#: ``job["query"]`` -> the builder of a query over two inputs, ``<input>/left`` and ``<input>/right``
TWO_INPUT_QUERIES = {"stream_join": (stream_join_query, LEFT_SCHEMA, RIGHT_SCHEMA)}

#: ``job["query"]`` -> the query builder (default ``seed``)
QUERIES = {
    "seed": seed_query,
    "dedup": dedup_query,
    "limit": limit_query,
    "session": session_query,
    "object_hash": object_hash_query,
    "apply_in_pandas": apply_in_pandas_query,
    "transform_with_state": transform_with_state_query,
}


def make_foreach_batch(output: str, calls: str, crash_batch: int | None):
    """The update-mode sink function (see the module docstring)."""

    def write(df, batch_id: int) -> None:
        rows = df.count()
        with open(calls, "a", encoding="utf-8") as fh:
            fh.write(f"{batch_id} {rows}\n")
        df.write.mode("overwrite").parquet(os.path.join(output, f"batch_id={batch_id}"))
        if crash_batch is not None and batch_id == crash_batch:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    return write


def read_kafka(engine, kafka: dict):
    """The input as JSON records ``{"ts": <seconds>, "value": <long>}`` of a Kafka topic, in the
    input's schema (``job["kafka"]``: ``bootstrap``, ``topic``, ``maxOffsetsPerTrigger``)."""
    from pyspark.sql import functions as F

    df = (
        engine.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka["bootstrap"])
        .option("subscribe", kafka["topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(kafka["maxOffsetsPerTrigger"]))
        .load()
    )
    parsed = df.select(F.from_json(F.col("value").cast("string"), "ts LONG, value LONG").alias("j"))
    return parsed.select(F.timestamp_seconds("j.ts").alias("ts"), F.col("j.value").alias("value"))


def build_query(engine, job: dict):
    """The job's query over its file source(s) on ``engine``, one file per source and batch (or,
    for statestream with ``job["kafka"]``, over a Kafka topic holding the same records)."""

    def read(schema: str, path: str):
        return engine.readStream.format("parquet").schema(schema).option("maxFilesPerTrigger", 1).load(path)

    name = job.get("query", "seed")
    if job.get("kafka") and job["engine"] == "statestream":
        return QUERIES[name](read_kafka(engine, job["kafka"]))
    if name in TWO_INPUT_QUERIES:
        build, left_schema, right_schema = TWO_INPUT_QUERIES[name]
        return build(read(left_schema, os.path.join(job["input"], "left")), read(right_schema, os.path.join(job["input"], "right")))
    return QUERIES[name](read(SCHEMA, job["input"]))


def start_query(engine, job: dict):
    """Start the job's query on ``engine`` (a SparkSession or a StreamingSession)."""
    df = build_query(engine, job)
    writer = (
        df.writeStream.outputMode(job["mode"])
        .option("checkpointLocation", job["checkpoint"])
        .trigger(availableNow=True)
    )
    if job["mode"] == "append":
        writer = writer.format("parquet").option("path", job["output"])
    else:
        writer = writer.foreachBatch(make_foreach_batch(job["output"], job["calls"], job.get("fb_crash_batch")))
    return writer.start()


def executed_batch_ids(query) -> list[int]:
    """Batch ids this run executed (idle-trigger events left out), from the progress events."""
    out = []
    for p in query.recentProgress or []:
        p = p if isinstance(p, dict) else json.loads(p.json)
        if "addBatch" in (p.get("durationMs") or {}):
            out.append(int(p["batchId"]))
    return out


def run_many(engine, job: dict) -> int:
    """Run several queries at once in this process (``job["jobs"]``, each a job of its own with
    its query, input, checkpoint and sink), as the random-kill torture does: one kill then
    lands at a different moment of each query's batch. Once all have started, the file
    ``job["started"]`` appears; when one ends, its ``done`` file appears (so the test counts a
    kill only for the queries it interrupted)."""
    queries = [(sub, start_query(engine, sub)) for sub in job["jobs"]]
    with open(job["started"], "w", encoding="utf-8") as fh:
        fh.write(str(time.time()))
    deadline = time.time() + float(job.get("timeout", 300))
    pending = list(queries)
    while pending:
        if time.time() > deadline:
            raise SystemExit(f"queries still running after {job.get('timeout', 300)} s: {[s['query'] for s, _ in pending]}")
        for sub, query in list(pending):
            if query.awaitTermination(0.05):
                exc = query.exception()
                if exc is not None:
                    raise SystemExit(f"query {sub['query']} failed: {exc}")
                with open(sub["done"], "w", encoding="utf-8") as fh:
                    json.dump({"id": str(query.id), "batches": executed_batch_ids(query)}, fh)
                pending.remove((sub, query))
    with open(job["result"], "w", encoding="utf-8") as fh:
        json.dump({sub["query"]: str(query.id) for sub, query in queries}, fh)
    return 0


def main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as fh:
        job = json.load(fh)
    if os.getpgrp() == os.getpid():
        # Only as a group leader: the crash point must never kill the group of whoever started us.
        os.environ["STATESTREAM_TEST_CRASH_PGID"] = str(os.getpgrp())
    from statestream._jvm.java import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(job.get("master", "local[2]"))
        .appName("statestream-crash-child")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", ("-Duser.timezone=UTC " + os.environ.get("STATESTREAM_TEST_CHILD_JAVA_OPTIONS", "")).strip())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in (job.get("confs") or {}).items():
        spark.conf.set(key, value)
    if job["engine"] == "statestream":
        from statestream import StreamingSession

        engine = StreamingSession(spark)
    else:
        engine = spark
    if "jobs" in job:
        code = run_many(engine, job)
        spark.stop()
        return code
    t0 = time.time()
    query = start_query(engine, job)
    finished = query.awaitTermination(float(job.get("timeout", 300)))
    exc = query.exception()
    if not finished:
        query.stop()
        raise SystemExit(f"query still running after {job.get('timeout', 300)} s")
    if exc is not None:
        raise SystemExit(f"query failed: {exc}")
    result = {
        "id": str(query.id),
        "runId": str(query.runId),
        "batches": executed_batch_ids(query),
        "seconds": time.time() - t0,
    }
    with open(job["result"], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
