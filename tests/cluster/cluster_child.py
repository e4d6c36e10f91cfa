"""The cluster test's driver process: statestream and Spark's engine on ``local-cluster``.

Run as ``python cluster_child.py <job.json>`` by ``test_cluster.py``. A SparkSession is one per
process, and a ``local-cluster[2,1,1024]`` session brings two executor JVMs (launched through
``bin/spark-class`` of pip's pyspark), each with its own Python workers, so the state tasks run in
processes other than this one. The job names the master, the queries (:data:`QUERIES`: the seed
query, a deduplication, session windows and a stream-stream join), the work directory and
whether statestream reaches the executors as a zip shipped with ``SparkContext.addPyFile`` (the
``--py-files`` route) rather than through the inherited ``PYTHONPATH``.

Each query runs twice on both engines over the same work directory: a first start over
:data:`FIRST_FILES`, then a restart on the same checkpoint over :data:`RESTART_FILES` (fewer
for the join, :data:`FILES`); every
batch of every start is compared with ``assert_same_batches``. The differential harness is used
as is (``maxFilesPerTrigger=1``, one ``processAllAvailable()`` per file). With 4 shuffle
partitions and one core per executor, a state partition's task lands on either executor from one
batch to the next; the parent checks from ``STATESTREAM_TEST_TASK_LOG`` that this happened.

The result file holds, per query, the batch ids compared per start (or the failure text), the
driver's pid and the state providers the driver process holds (there must be none: state is
read and written only inside executor tasks).
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import json
import os
import random
import signal
import sys
import time
import traceback
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCHEMA = "ts TIMESTAMP, value LONG"
NUM_PARTITIONS = 4


def _files(seed: int, first_index: int, count: int) -> list[list[tuple[dt.datetime, int]]]:
    """``count`` input files of 8 rows: event times moving 15 s per file with some 25 s late,
    values 0-5, so (value, ts) repeats (duplicates), several windows and session keys land in
    every state partition, and some rows fall behind the 20 s watermark."""
    rng = random.Random(seed)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(first_index, first_index + count):
        base = 15 * i + 30
        rows = [(epoch + dt.timedelta(seconds=base + rng.randint(-25, 10)), rng.randint(0, 5)) for _ in range(8)]
        out.append(rows)
    return out


FIRST_FILES = _files(11, 0, 5)
RESTART_FILES = _files(12, 5, 2)


def seed_query(df):
    """The README's seed query over this schema."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .groupBy(F.window("ts", "5 seconds").alias("group"))
        .agg(F.count("value").alias("value_count"))
    )


def dedup_query(df):
    """Streaming deduplication on (value, ts) with the event-time key bounding the state."""
    return df.withWatermark("ts", "20 seconds").dropDuplicates(["value", "ts"])


def session_query(df):
    """Session windows (10 s gap) per ``value % 4``."""
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "20 seconds")
        .groupBy(F.session_window("ts", "10 seconds"), (F.col("value") % 4).alias("k"))
        .agg(F.count("value").alias("n"), F.sum("value").alias("total"))
    )


def stream_join_query(df):
    """A stream-stream full outer join of the input with itself (two projections, each with its
    own 20 s watermark): equal ``value``, the right row's time within 10 s after the left
    row's, so both sides' states are bounded and both sides' unmatched rows come out padded."""
    from pyspark.sql import functions as F

    left = df.select(F.col("ts").alias("lts"), F.col("value").alias("k"), (F.col("value") * 10).alias("lv")).withWatermark("lts", "20 seconds")
    right = df.select(F.col("ts").alias("rts"), F.col("value").alias("rk"), (F.col("value") * 100).alias("rv")).withWatermark("rts", "20 seconds")
    cond = (left.k == right.rk) & (right.rts > left.lts) & (right.rts <= left.lts + F.expr("INTERVAL 10 SECONDS"))
    return left.join(right, cond, "full")


#: name -> (build, output mode)
QUERIES = {
    "seed": (seed_query, "append"),
    "dedup": (dedup_query, "append"),
    "session": (session_query, "append"),
    "stream_join": (stream_join_query, "append"),
}

#: name -> the session confs its run sets on both engines (Spark's ignores them): the session
#: windows keep their state versions in the Python workers' heap (the others on the executors'
#: local disks, the default)
CONFS = {"session": {"spark.statestream.stateStore.onLocalDisk": "false"}}

#: name -> (first start's files, restart's files) where not :data:`FIRST_FILES`,
#: :data:`RESTART_FILES`: the join runs three jobs a batch, so it gets fewer batches (its restart
#: file continues where the first start's end, so restart rows meet rows stored before it)
FILES = {"stream_join": (FIRST_FILES[:3], _files(12, 3, 1))}


def _zip_package(dest: Path) -> Path:
    """statestream's sources (this tree's) as a zip for ``addPyFile``: what ``--py-files`` ships."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted((ROOT / "statestream").rglob("*.py")):
            zf.write(path, path.relative_to(ROOT).as_posix())
    return dest


def executor_count(spark) -> int:
    """Executors registered with the driver (the block manager list holds the driver too)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def wait_for_executors(spark, wanted: int, timeout_s: float = 180.0) -> None:
    """Block until ``wanted`` executors registered: ``getOrCreate`` returns once the scheduler's
    minimum share registered or after 30 s, and on a busy machine the second executor JVM can take
    longer than that, which would leave every task to the first one."""
    deadline = time.monotonic() + timeout_s
    while executor_count(spark) < wanted:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {executor_count(spark)} of {wanted} executors registered after {timeout_s:.0f} s")
        time.sleep(0.5)


def make_session(job: dict):
    from statestream._jvm.java import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    # the test's class-data archive and C1-only JIT (tests/crash/class_archive.py) for the driver
    # and the executors alike: every JVM of this test is short-lived
    java_options = ("-Duser.timezone=UTC " + os.environ.get("STATESTREAM_TEST_CHILD_JAVA_OPTIONS", "")).strip()
    builder = (
        SparkSession.builder.master(job["master"])
        .appName("statestream-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(NUM_PARTITIONS))
        .config("spark.default.parallelism", str(NUM_PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "700m")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.sql.streaming.pollingDelay", "10ms")
    )
    # A real cluster does not pass the driver's environment to executors: say it explicitly.
    for var in ("STATESTREAM_TEST_TASK_LOG", "PYSPARK_PYTHON"):
        if os.environ.get(var):
            builder = builder.config(f"spark.executorEnv.{var}", os.environ[var])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    wait_for_executors(spark, job.get("executors", 2))
    if job.get("py_files"):
        spark.sparkContext.addPyFile(str(_zip_package(Path(job["workdir"]) / "statestream.zip")))
    return spark


def assert_event_time_close(expected, actual) -> None:
    """Per batch: eventTime min, max and watermark equal, avg within 1 ms."""
    for e, a in zip(expected.batches, actual.batches):
        et, at = e.event_time or {}, a.event_time or {}
        assert set(et) == set(at), (e.batch_id, et, at)
        for key in et:
            if key == "avg":
                ms = [dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1000 for t in (et[key], at[key])]
                assert abs(ms[0] - ms[1]) <= 1, (e.batch_id, et, at)
            else:
                assert et[key] == at[key], (e.batch_id, et, at)


def run_query(spark, ours, name: str, workdir: Path) -> dict:
    """Both engines, first start then restart, every batch compared; the batch ids per start."""
    build, mode = QUERIES[name]
    confs = CONFS.get(name, {})
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        starts = [_start(spark, ours, name, build, mode, files, workdir) for files in FILES.get(name, (FIRST_FILES, RESTART_FILES))]
    finally:
        for key in confs:
            spark.conf.unset(key)
    return {"ok": True, "starts": starts}


def _start(spark, ours, name: str, build, mode: str, files, workdir: Path) -> dict:
    """One start of both engines over ``files``, every batch compared."""
    from tests.differential.harness import assert_same_batches, run_stream

    kw = {"checkpoint_as_uri": True}
    expected = run_stream(spark, build, files, SCHEMA, mode, workdir, workdir=workdir / name / "spark", **kw)
    actual = run_stream(ours, build, files, SCHEMA, mode, workdir, workdir=workdir / name / "statestream", **kw)
    # eventTime.avg is compared to within 1 ms: Spark's running mean can land a hair below a
    # whole ms where statestream's exact mean does not (a known gap on any master, see
    # tests/known_gaps.py, test_event_time_avg_is_spark_running_mean); all else is exact.
    assert_same_batches(expected, actual, check_event_time=False)
    assert_event_time_close(expected, actual)
    return {
        "batches": [b.batch_id for b in actual.batches],
        "rows": sum(len(b.rows) for b in actual.batches),
        "stateRows": [s.get("numRowsTotal") for b in actual.batches for s in b.state],
        "seconds": {"spark": round(expected.wall_seconds, 1), "statestream": round(actual.wall_seconds, 1)},
    }


def main(job_path: str) -> int:
    # the parent asks for every thread's stack (SIGUSR1, into this process's log) when the driver
    # does not finish in time, so that a hang says where it is
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    job = json.loads(Path(job_path).read_text())
    workdir = Path(job["workdir"])
    t0 = time.time()
    spark = make_session(job)
    startup = time.time() - t0
    import statestream
    from statestream import StreamingSession
    from statestream.state.provider import loaded_providers

    ours = StreamingSession(spark)
    executors = executor_count(spark)
    result: dict = {
        "driverPid": os.getpid(),
        "driverModule": statestream.__file__,
        "executors": executors,
        "startupSeconds": round(startup, 1),
        "queries": {},
    }
    for name in job["queries"]:
        q0 = time.time()
        try:
            result["queries"][name] = run_query(spark, ours, name, workdir)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            result["queries"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        result["queries"][name]["seconds"] = round(time.time() - q0, 1)
    result["driverProviders"] = [repr(p) for p in loaded_providers()]
    result["executorsAtEnd"] = executor_count(spark)
    result["seconds"] = round(time.time() - t0, 1)
    Path(job["result"]).write_text(json.dumps(result, indent=1))
    spark.stop()
    return 0 if all(q["ok"] for q in result["queries"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
