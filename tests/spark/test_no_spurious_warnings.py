"""No spurious warnings: an ordinary query, run for a few batches and restarted on its
checkpoint, makes statestream log nothing at WARNING or above and raise no Python warning, on the
driver and in Spark's Python workers (where the state tasks run). Why: a warning that fires on
every healthy run teaches users to ignore warnings, and hides the ones that matter.

The workers' records are read through ``STATESTREAM_TEST_WORKER_LOG`` (``statestream/faults.py``),
given to them in ``SparkContext.environment``: their stderr goes to the console through the JVM.

One kind of Python warning is left out on the driver: ``ResourceWarning: unclosed <socket...>`` of
PySpark's own ``DataFrame.collect()``, which leaves its socket to the garbage collector by design
(PySpark's ``_load_from_socket``); the memory sink collects each batch with it. Python's default
filters ignore ``ResourceWarning``.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from statestream import StreamingSession

SCHEMA = "k STRING, x LONG"
BATCHES = [[("a", 1), ("b", 2)], [("a", 3), ("c", 4)], [("b", 5)], [("c", 6), ("d", 7)], [("a", 8)]]


def _write(input_dir: Path, i: int, rows: list[tuple]) -> None:
    table = pa.table({"k": [r[0] for r in rows], "x": pa.array([r[1] for r in rows], pa.int64())})
    staging = input_dir.parent / f".part-{i}.parquet"
    pq.write_table(table, staging)
    staging.rename(input_dir / f"part-{i}.parquet")


def _run(ss: StreamingSession, input_dir: Path, checkpoint: Path, batches: range) -> list[tuple]:
    df = ss.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    counts = df.groupBy("k").agg(F.sum("x").alias("s"), F.count("*").alias("n")).orderBy(F.desc("s"), "k")
    query = (
        counts.writeStream.outputMode("complete").format("memory").queryName("no_spurious_warnings")
        .option("checkpointLocation", str(checkpoint)).start()
    )
    try:
        query.processAllAvailable()
        for i in batches:
            _write(input_dir, i, BATCHES[i])
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    return [tuple(r) for r in ss.sparkSession.table("no_spurious_warnings").toLocalIterator()]


def test_complete_mode_order_by_and_restart_warn_about_nothing(spark, tmp_path, caplog):
    from statestream.faults import ENV_WORKER_LOG

    ss = StreamingSession(spark)
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    checkpoint = tmp_path / "checkpoint"
    worker_log = tmp_path / "worker-warnings.log"
    environment = spark.sparkContext.environment
    environment[ENV_WORKER_LOG] = str(worker_log)  # Python functions made from now on get it
    try:
        with caplog.at_level(logging.WARNING, logger="statestream"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=ResourceWarning, message=r"unclosed <socket\.socket .*raddr=\('127\.0\.0\.1'")
            # the same PySpark sockets when the workers talk over Unix domain sockets (statestream
            # turns them on in local mode): Spark names them <dir>/.<uuid>.sock
            warnings.filterwarnings("ignore", category=ResourceWarning, message=r"unclosed <socket\.socket .*family=1, .*raddr=\S*/\.[0-9a-f-]{36}\.sock>")
            first = _run(ss, input_dir, checkpoint, range(3))
            second = _run(ss, input_dir, checkpoint, range(3, 5))  # restart on the same checkpoint
    finally:
        del environment[ENV_WORKER_LOG]
    assert first == [("b", 7, 2), ("a", 4, 2), ("c", 4, 1)]
    assert second == [("a", 12, 3), ("c", 10, 2), ("b", 7, 2), ("d", 7, 1)]
    logged = [f"{r.name} {r.levelname}: {r.getMessage()}" for r in caplog.records if r.name.startswith("statestream") and r.levelno >= logging.WARNING]
    assert logged == []
    assert [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught] == []
    assert (worker_log.read_text().splitlines() if worker_log.exists() else []) == []
