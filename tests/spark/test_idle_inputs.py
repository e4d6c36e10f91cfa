"""Idle inputs (issue 16, item 6; opt-in): with ``spark.statestream.watermark.idleTimeout`` set,
an input that has had no rows for that long no longer holds the global watermark back, by the
batches' clock (replaced here: no sleeps). Without it the quiet input holds the watermark at its
last value, as on Spark. The watermark is recorded in the offset log as usual."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from tests.differential.harness import write_input_file

SCHEMA = StructType([StructField("v", LongType())])


def _run(spark, tmp_path: Path, idle: str | None) -> tuple[list[int], list[tuple]]:
    """A union of two inputs with a watermark each, counted in 10 s windows (append): input a
    gets a file every minute of batch time, input b one file at the start. Returns the offset
    log's watermarks and the windows emitted."""
    from statestream import StreamingSession
    from statestream.runtime.microbatch import IDLE_TIMEOUT_CONF, set_batch_clock

    ss = StreamingSession(spark)
    a, b, checkpoint = tmp_path / "a", tmp_path / "b", tmp_path / "ck"
    a.mkdir(parents=True)
    b.mkdir(parents=True)

    def stream(d: Path):
        return ss.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(d)).withColumn(
            "t", F.timestamp_seconds("v")).withWatermark("t", "5 seconds")

    now = [1_000_000]
    previous = set_batch_clock(lambda: now[0])
    emitted: list[tuple] = []
    if idle:
        spark.conf.set(IDLE_TIMEOUT_CONF, idle)
    try:
        query = (
            stream(a).unionByName(stream(b)).groupBy(F.window("t", "10 seconds")).count()
            .writeStream.outputMode("append")
            .foreachBatch(lambda df, _id: emitted.extend((r.window.start.second, r["count"]) for r in df.collect()))
            .option("checkpointLocation", str(checkpoint)).start()
        )
        write_input_file(b, 0, [(5,)], SCHEMA, "parquet", 1_700_000_000)
        for i in range(6):
            write_input_file(a, i, [(10 * (i + 1),)], SCHEMA, "parquet", 1_700_000_000 + i)
            query.processAllAvailable()
            now[0] += 60_000
        query.stop()
    finally:
        set_batch_clock(previous)
        if idle:
            spark.conf.unset(IDLE_TIMEOUT_CONF)
    marks = []
    for f in sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name)):
        marks.append(json.loads(f.read_text().splitlines()[1])["batchWatermarkMs"])
    return marks, sorted(emitted)


def test_an_idle_input_no_longer_holds_the_watermark(spark, tmp_path):
    held, nothing = _run(spark, tmp_path / "default", None)
    assert max(held) == 0 and nothing == [], "without idleness the quiet input holds the watermark at 0 (Spark's rule)"
    marks, windows = _run(spark, tmp_path / "idle", "120s")
    assert marks == sorted(marks) and max(marks) > 0, marks
    # once b was quiet for two minutes of batch time, the watermark follows a (its max - 5 s)
    assert max(marks) == 55_000, marks
    assert (0, 1) in windows and (10, 1) in windows and (40, 1) in windows, windows
