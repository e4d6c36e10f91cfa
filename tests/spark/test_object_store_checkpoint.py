"""A checkpoint on an object store (issue 15, item 7): an S3-compatible server (moto's) on
loopback, started by the fixture, holds statestream's checkpoint, given as an ``s3://`` URI
whose query names the endpoint (as ``pyarrow.fs`` reads it; the credentials come from the
environment, as AWS's clients take them, set by ``tests/conftest.py``). Offsets, commits,
the file source's log and the state files all live there (the driver and the tasks write them
through ``pyarrow.fs``); every batch equals Spark's engine with a local checkpoint, and a
restart on the same URI goes on from it."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_stream


def _windowed_count(df):
    return (
        df.withColumn("t", F.timestamp_seconds("value")).withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "5 seconds")).agg(F.count("*").alias("n"), F.sum("value").alias("s"))
        .select(F.col("window.start").cast("long").alias("start"), "n", "s")
    )


def test_checkpoint_on_s3_equals_spark_and_restarts(spark, s3_endpoint, tmp_path):
    import pyarrow.fs as pafs

    from statestream import StreamingSession

    uri = f"s3://checkpoints/q1?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    first = [[(v,) for v in (1, 2, 3)], [(v,) for v in (6, 7, 12)], [(v,) for v in (14, 21)]]
    then = [[(v,) for v in (22, 30, 31)], [(v,) for v in (44,)]]
    runs: dict[str, list[Any]] = {"spark": [], "ours": []}
    for engine, tag in ((spark, "spark"), (StreamingSession(spark), "ours")):
        workdir = tmp_path / tag
        for files in (first, then):  # a start, then a restart on the same checkpoint
            runs[tag].append(run_stream(
                engine, _windowed_count, files, "value LONG", "append", tmp_path, workdir=workdir,
                checkpoint_location=uri if tag == "ours" else None,
            ))
    for expected, actual in zip(runs["spark"], runs["ours"]):
        assert_same_batches(expected, actual)
    assert any(b.rows for run in runs["spark"] for b in run.batches), "nothing was emitted: the test would prove nothing"

    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1")
    stored = {i.path for i in fs.get_file_info(pafs.FileSelector("checkpoints/q1", recursive=True)) if i.type == pafs.FileType.File}
    for expected in ("checkpoints/q1/metadata", "checkpoints/q1/offsets/0", "checkpoints/q1/commits/0", "checkpoints/q1/sources/0/0",
                     "checkpoints/q1/state/0/0/1.delta", "checkpoints/q1/state/0/_metadata/metadata"):
        assert expected in stored, f"{expected} is not on the object store: {sorted(stored)[:40]}"
    assert not (tmp_path / "ours" / "checkpoint").exists(), "a part of the checkpoint went to the local disk"
