"""Batch plans reused across batches (``runtime.batch_plan_reuse``) against Spark's own engine.

A streaming aggregation, session window or deduplication over a file source builds its first batch's DataFrame and runs the later
batches on that plan, with each batch's files swapped in, the state steps' version and
watermarks sent as a local property, and the observations read by name. Each test feeds both
engines the same files, one step at a time, and compares every batch's rows, columns and
``numInputRows``; it also checks that statestream did reuse plans (a count of the batches that
ran on one), and, with reuse turned off, that it did not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tests.differential.test_sources_more import T0, both, drive, write_file, assert_same
from tests.spark_confs import session_confs

SCHEMA = "t TIMESTAMP, k STRING, v LONG"

#: (event time in seconds, key, value) per file: time moves on, some rows come late (one past
#: the watermark once it moved), a null time and a null value
FILES = [
    [(100, "a", 1), (101, "b", 2), (103, "a", 3)],
    [(106, "a", 4), (112, "c", 5), (101, "b", 6)],
    [(125, "a", 7), (104, "a", 8), (126, "b", None)],
    [(140, "c", 9), (None, "a", 10), (131, "b", 11)],
    [(141, "c", 12), (142, "a", 13)],
    [(160, "b", 14), (120, "a", 15), (161, "b", 16)],
]


def _line(t: int | None, k: str, v: int | None) -> str:
    ts = None if t is None else f"2026-01-01T00:{t // 60:02d}:{t % 60:02d}Z"
    return json.dumps({"t": ts, "k": k, "v": v})


def _steps(src: Path) -> list[Any]:
    def write(i: int, rows: list[tuple]) -> Any:
        return lambda: write_file(src / f"part-{i:03d}.json", "\n".join(_line(*r) for r in rows) + "\n", T0 + i)

    return [write(i, rows) for i, rows in enumerate(FILES)]


def _rows(rs: Any, src: Path) -> Any:
    """The JSON files of ``src`` as a stream."""
    return rs.format("json").schema(SCHEMA).load(str(src))


def _watermarked(rs: Any, src: Path) -> Any:
    return _rows(rs, src).withWatermark("t", "10 seconds")


def _windowed(rs: Any, src: Path) -> Any:
    return (
        _watermarked(rs, src)
        .groupBy(F.window("t", "5 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.max("v").alias("top"))
    )


def _global_key(rs: Any, src: Path) -> Any:
    return _rows(rs, src).groupBy("k").agg(F.avg("v").alias("avg"), F.count("v").alias("n"))


def _dedup_with_time(rs: Any, src: Path) -> Any:
    # the event time is a key: state evicted as the watermark passes it
    return _watermarked(rs, src).dropDuplicates(["k", "t"])


def _dedup_within_watermark(rs: Any, src: Path) -> Any:
    return _watermarked(rs, src).dropDuplicatesWithinWatermark(["k"])


def _dedup_no_watermark(rs: Any, src: Path) -> Any:
    return _rows(rs, src).dropDuplicates(["k"])


def _sessions(rs: Any, src: Path) -> Any:
    return _watermarked(rs, src).groupBy(F.session_window("t", "5 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


QUERIES = {
    "session window append": (_sessions, "append"),
    "session window complete": (_sessions, "complete"),
    "window count update": (_windowed, "update"),
    "window count append": (_windowed, "append"),
    "keyed average complete": (_global_key, "complete"),
    "dedup by key and time": (_dedup_with_time, "append"),
    "dedup within watermark": (_dedup_within_watermark, "append"),
    "dedup without watermark": (_dedup_no_watermark, "append"),
}


def _watermarks_and_state_rows(run: Any) -> dict[int, tuple[Any, list[Any]]]:
    """Each batch's watermark, and per operator its state rows and the rows it dropped as late
    (what a step given another batch's version or watermarks gets wrong first, even where the
    rows it emits come out the same)."""
    return {
        b: (
            (p.get("eventTime") or {}).get("watermark"),
            [(op.get("numRowsTotal"), op.get("numRowsDroppedByWatermark")) for op in p.get("stateOperators") or []],
        )
        for b, p in sorted(run.progress.items())
    }


@pytest.mark.parametrize("max_rows", ["10000", "0"], ids=["one state task", "a task per partition"])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_reused_batch_plans_give_sparks_batches(spark, ours, tmp_path, reused, name, max_rows):
    from statestream.runtime.small_batches import SINGLE_STATE_TASK_MAX_ROWS_CONF

    build, mode = QUERIES[name]

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        return drive(engine, lambda rs: build(rs, src), work, _steps(src), mode=mode)

    with session_confs(spark, {SINGLE_STATE_TASK_MAX_ROWS_CONF: max_rows}):
        expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    assert _watermarks_and_state_rows(expected) == _watermarks_and_state_rows(actual)
    # the first batch (and, with one state task, the second: a new shape) builds its plan; the
    # batches after them with new files run on it
    assert reused[0] >= len(FILES) - 2, reused[0]


def test_plan_reuse_off_builds_every_batch(spark, ours, tmp_path, reused):
    from statestream.runtime.batch_plan_reuse import PLAN_REUSE_CONF

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        return drive(engine, lambda rs: _windowed(rs, src), work, _steps(src), mode="update")

    with session_confs(spark, {PLAN_REUSE_CONF: "false"}):
        expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    assert reused[0] == 0


def _self_union(rs: Any, src: Path) -> Any:
    df = _rows(rs, src)
    return df.union(df.withColumn("v", F.col("v") * 10)).groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"))


def test_a_source_read_twice_gives_sparks_batches(spark, ours, tmp_path, reused):
    """A self-union reads the source through two relation nodes, the second with new attribute
    ids: a plan kept with one of them swapped would read the first batch's files again."""

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        return drive(engine, lambda rs: _self_union(rs, src), work, _steps(src), mode="complete")

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    assert reused[0] == 0


def test_nondeterministic_expressions_are_seeded_again_each_batch(spark, ours, tmp_path, reused):
    """Spark's engine seeds uuid() again for every batch (a kept plan would repeat the first
    batch's ids): every id differs, on both engines."""

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        return drive(engine, lambda rs: _rows(rs, src).selectExpr("k", "uuid() AS id"), work, _steps(src))

    for run in both(spark, ours, tmp_path, scenario):
        ids = [r["id"] for rows in run.rows.values() for r in rows]
        assert len(ids) == sum(len(f) for f in FILES) and len(set(ids)) == len(ids), run.describe()
    assert reused[0] == 0


@pytest.mark.parametrize("name", ["window count append", "dedup by key and time", "session window append"])
def test_batches_without_new_files_run_on_the_reused_plan(spark, ours, tmp_path, reused, name):
    """A batch that only evicts (the watermark moved, no new file) swaps in the file source's
    relation over no files (``Source.empty_relation``) and runs on the plan kept from a batch
    with files, with Spark's rows, watermarks and state row counts."""
    build, mode = QUERIES[name]

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        return drive(engine, lambda rs: build(rs, src), work, _steps(src), mode=mode)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    assert _watermarks_and_state_rows(expected) == _watermarks_and_state_rows(actual)
    batches = sorted(actual.progress)
    no_data = [b for b in batches if actual.progress[b].get("numInputRows") == 0]
    assert no_data, "no batch ran without new files"
    # built: the first batch; the second, the first in one state task (a new shape) and
    # without new files (its plan cannot be kept: it read no file relation); the first with
    # files in one state task, which is kept. Every batch after them runs on it.
    assert batches[1] in no_data
    assert reused[0] >= len(batches) - 3, (reused[0], batches, no_data)
