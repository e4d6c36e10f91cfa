"""Differential restart tests (reference §7.5, scenarios S32 and S33).

The query is stopped, its checkpoint possibly edited, and started again on the same checkpoint
and input directory; every start's batches must match Spark's.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import StreamRun, assert_batch_rows, assert_same_batches, run_stream

SCHEMA = "value LONG"


def w10_cnt_t5(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("eventTime", F.timestamp_seconds("value"))
        .withWatermark("eventTime", "10 seconds")
        .groupBy(F.window("eventTime", "5 seconds"))
        .count()
        .select(F.col("window.start").cast("long").alias("start"), "count")
    )


def vals(*values: int) -> list[tuple[int]]:
    return [(v,) for v in values]


def _starts(
    engine: Any,
    mode: str,
    tmp_path: Path,
    plan: list[tuple[list[list[tuple[int]]], Callable[[Path], None] | None]],
) -> list[StreamRun]:
    """Start the query once per ``plan`` step on one work directory: (files, edit before start)."""
    workdir = tmp_path / f"restart-{uuid.uuid4().hex[:8]}"
    runs = []
    for files, edit in plan:
        if edit is not None:
            edit(workdir / "checkpoint")
        runs.append(run_stream(engine, w10_cnt_t5, files, SCHEMA, mode, tmp_path, workdir=workdir))
    return runs


def _delete_commit(n: int) -> Callable[[Path], None]:
    def edit(checkpoint: Path) -> None:
        (checkpoint / "commits" / str(n)).unlink()
        crc = checkpoint / "commits" / f".{n}.crc"
        if crc.exists():
            crc.unlink()

    return edit


@pytest.mark.parametrize("mode", ["append", "update"])
def test_s32_restart_reruns_uncommitted_batch(spark, ours, tmp_path, mode):
    plan = [
        ([vals(10, 11, 12), vals(25)], None),  # b0, b1 ND, b2, b3 ND
        ([], _delete_commit(3)),  # batch 3 runs again with its recorded watermark
        ([vals(40)], None),  # and the query carries on
    ]
    expected = _starts(spark, mode, tmp_path, plan)
    if mode == "append":
        assert_batch_rows(expected[1], [[{"start": 10, "count": 3}]])
    assert expected[1].batches[0].batch_id == 3 and expected[1].batches[0].num_input_rows == 0
    actual = _starts(ours(), mode, tmp_path, plan)
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)


def test_s33_pinned_shuffle_partitions(spark, ours, tmp_path):
    def repartition_conf(value: str) -> Callable[[Path], None]:
        return lambda _checkpoint: spark.conf.set("spark.sql.shuffle.partitions", value)

    plan = [([vals(10, 11)], None), ([vals(25)], repartition_conf("5"))]
    try:
        expected = _starts(spark, "update", tmp_path, plan)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        actual = _starts(ours(), "update", tmp_path, plan)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    shuffle = lambda run: [b.progress["stateOperators"][0]["numShufflePartitions"] for b in run.batches]  # noqa: E731
    assert set(shuffle(expected[1])) == {2}
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
        assert shuffle(a) == shuffle(e)
