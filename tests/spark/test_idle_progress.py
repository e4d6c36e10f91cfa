"""Idle-trigger progress, compared with Spark's engine.

While a query waits for data, Spark records a progress for an idle trigger at most every
``spark.sql.streaming.noDataProgressEventInterval`` and keeps it in ``recentProgress`` next to the
batches' progress; the very first one comes at once when no progress was recorded yet. It repeats
the last batch's snapshot figures (state rows, watermark) with the batch-bound ones at 0.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from statestream import StreamingSession
from tests.spark_confs import session_confs

INTERVAL_MS = 300
SCHEMA = "ts TIMESTAMP, k STRING"

#: Per-run figures that differ between any two runs (ids, clocks, timings, memory).
_VOLATILE = {"id", "runId", "name", "timestamp", "batchDuration"}
_VOLATILE_STATE = {"allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "memoryUsedBytes", "customMetrics"}


@pytest.fixture
def short_interval(spark):
    with session_confs(spark, {"spark.sql.streaming.noDataProgressEventInterval": f"{INTERVAL_MS}ms"}):
        yield


def _as_dict(p: Any) -> dict:
    """Spark's progress as its JSON (PySpark's object is a dict subclass whose nested values
    are objects too); ours is a plain dict already."""
    return p if type(p) is dict else json.loads(p.json)


def _idle(progress: list[dict]) -> list[dict]:
    return [p for p in progress if "addBatch" not in p["durationMs"] and "walCommit" not in p["durationMs"]]


def _comparable(p: dict, input_dir: Path) -> dict:
    out = {k: v for k, v in p.items() if k not in _VOLATILE}
    out.setdefault("eventTime", {})  # Spark's JSON leaves an empty map out; PySpark's dict has it
    out["durationMs"] = sorted(p["durationMs"])
    out["stateOperators"] = [{k: v for k, v in op.items() if k not in _VOLATILE_STATE} for op in p["stateOperators"]]
    for s in out["sources"]:
        s["description"] = s["description"].replace(input_dir.as_uri().replace("file:///", "file:/"), "<in>")
    return out


def _run(engine: Any, input_dir: Path, checkpoint: Path, name: str, wait_s: float) -> list[dict]:
    df = engine.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    counts = df.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "5 seconds"), "k").count()
    q = (
        counts.writeStream.format("memory")
        .queryName(name)
        .outputMode("update")
        .trigger(processingTime="100 milliseconds")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        q.processAllAvailable()
        time.sleep(wait_s)
        return [_as_dict(p) for p in q.recentProgress]
    finally:
        q.stop()


def _write(input_dir: Path) -> None:
    t0 = dt.datetime(2024, 1, 1)
    table = pa.table({"ts": [t0 + dt.timedelta(seconds=s) for s in (0, 1, 2)], "k": ["a", "b", "a"]})
    pq.write_table(table, input_dir / "f0.parquet")


def test_idle_progress_after_batches_matches_spark(spark, tmp_path, short_interval):
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    _write(input_dir)
    runs = {}
    for label, engine in (("spark", spark), ("ours", StreamingSession(spark))):
        runs[label] = _run(engine, input_dir, tmp_path / f"ckpt-{label}", f"idle_{label}", wait_s=2.0)
    for label, progress in runs.items():
        idle = _idle(progress)
        assert len(idle) >= 2, f"{label}: no repeated idle progress in recentProgress: {progress}"
        executed = [p for p in progress if p not in idle]
        assert [p["batchId"] for p in executed] == [0, 1], label  # a data batch, then a no-data batch
        assert {p["batchId"] for p in idle} == {2}, label
        # never two idle progresses closer than the interval
        stamps = [dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in idle]
        gaps = [(b - a).total_seconds() * 1000 for a, b in zip(stamps, stamps[1:])]
        assert min(gaps) >= INTERVAL_MS - 5, f"{label}: idle progress every {gaps} ms"
    theirs = _comparable(_idle(runs["spark"])[-1], input_dir)
    ours = _comparable(_idle(runs["ours"])[-1], input_dir)
    assert ours == theirs


def test_first_idle_progress_before_any_batch_matches_spark(spark, tmp_path, short_interval):
    """With no data at all, the first idle trigger is recorded at once: batch 0, no state
    operators, no event time, the sink's rows unknown (-1), no offsets yet."""
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    runs = {}
    for label, engine in (("spark", spark), ("ours", StreamingSession(spark))):
        runs[label] = _run(engine, input_dir, tmp_path / f"ckpt-{label}", f"idle0_{label}", wait_s=0.8)
    for label, progress in runs.items():
        assert progress and not [p for p in progress if p not in _idle(progress)], label
        assert progress[0]["batchId"] == 0, label
    assert _comparable(runs["ours"][0], input_dir) == _comparable(runs["spark"][0], input_dir)
