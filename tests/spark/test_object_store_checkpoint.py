"""A checkpoint on an object store (issue 15, item 7): an S3-compatible server (moto's) on
loopback, started by the fixture, holds statestream's checkpoint, given as an ``s3://`` URI
whose query names the endpoint (as ``pyarrow.fs`` reads it; the credentials come from the
environment, as AWS's clients take them, set by ``tests/conftest.py``). Offsets, commits,
the file source's log and the state files all live there (the driver and the tasks write them
through ``pyarrow.fs``); every batch equals Spark's engine with a local checkpoint, and a
restart on the same URI goes on from it."""

from __future__ import annotations

from typing import Any

import pytest
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


def _rate_to_noop(ss, checkpoint: str):
    return ss.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.format("noop").option("checkpointLocation", checkpoint).start()


def test_one_writer_per_checkpoint_on_s3(spark, s3_endpoint, tmp_path):
    """Without file locks or rename, the writer lease on S3's conditional PUT: a writer in
    another process holds the checkpoint, and ``start()`` here is refused naming it, before this
    run writes anything; once that process is killed (no release), the start takes the lease
    over at once (its holder was a process of this host that is gone; a holder on another host
    is watched for a whole timeout, tests/unit/checkpoint/test_object_store_lease.py) and goes on from the
    checkpoint. And a
    run that lost its lease (stalled while another took over) stops before its next log write."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pyarrow.fs as pafs

    from statestream import StreamingSession
    from statestream.checkpoint.files import CheckpointFileManager
    from statestream.errors import (
        StatestreamIllegalStateException,
        StatestreamStreamingQueryException,
    )

    uri = f"s3://checkpoints/one-writer?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1")

    def logged(kind: str) -> list[str]:
        sel = pafs.FileSelector(f"checkpoints/one-writer/{kind}", allow_not_found=True)
        # by number: "10" sorts before "9" as text
        return sorted((i.base_name for i in fs.get_file_info(sel) if i.base_name.isdigit()), key=int)

    spark.conf.set("spark.statestream.checkpoint.writerLeaseTimeout", "2s")
    ss = StreamingSession(spark)
    try:
        first = _rate_to_noop(ss, uri)
        first.processAllAvailable()
        query_id = first.id
        first.stop()
        before = logged("offsets")
        holder = subprocess.Popen(
            [sys.executable, "-c", (
                "import time\n"
                "from statestream.checkpoint.files import CheckpointFileManager\n"
                "from statestream.checkpoint.writer_lock import CheckpointWriterLock\n"
                f"CheckpointWriterLock(CheckpointFileManager({uri!r}), lease_ms=2000).acquire({query_id!r}, 'other-run')\n"
                "print('held', flush=True)\n"
                "time.sleep(600)\n"
            )],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(StatestreamIllegalStateException) as err:
                _rate_to_noop(ss, uri)
            assert str(err.value).startswith(f"Cannot start query with id {query_id} as another query with same id is already active.")
            assert f"run other-run of query {query_id} in process {holder.pid}" in str(err.value)
            assert ss.streams.active == [] and logged("offsets") == before
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
        t0 = time.monotonic()
        again = _rate_to_noop(ss, uri)
        waited = time.monotonic() - t0
        try:
            assert waited < 20, f"the start took {waited:.1f} s"
            # the rate source has a new row each second: a restart less than a second after the
            # first run's batch finds nothing new yet, so wait (boundedly) for its next second
            again.processAllAvailable()
            deadline = time.monotonic() + 20
            while int(logged("offsets")[-1]) <= int(before[-1]) and time.monotonic() < deadline:
                time.sleep(0.2)
                again.processAllAvailable()
            assert again.id == query_id and int(logged("offsets")[-1]) > int(before[-1])
            # another writer takes the lease over (as one does that judged this run dead)
            lease_dir = CheckpointFileManager(uri).child(".statestream-writer-lease")
            top = max(int(n) for n in lease_dir.list())
            assert lease_dir.conditional.create(lease_dir.path(str(top + 1)), b'{"runId": "usurper", "beat": 0}')
            deadline = time.monotonic() + 60
            while again.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not again.isActive, "the run that lost its lease kept running"
            exc = again.exception()
            assert isinstance(exc, StatestreamStreamingQueryException) and "usurper" in str(exc), exc
            offsets, commits = logged("offsets"), logged("commits")
            assert offsets == commits or offsets[:-1] == commits, (offsets, commits)
        finally:
            again.stop()
    finally:
        spark.conf.unset("spark.statestream.checkpoint.writerLeaseTimeout")

