"""Differential tests of the streaming limit (reference §4, §1.1, §7.6): Spark's engine versus
statestream on the same file batches.

Which rows a limit keeps is unspecified in Spark. Where one file is one partition the choice is
the same in both engines (the first rows in file order), so those tests compare rows exactly
(pinned to Spark's ``StreamSuite`` outcomes where there is one). Where several partitions feed
the limit, :func:`assert_same_counts` compares everything but the choice of rows: per batch the
number of rows, the columns, ``numInputRows``, the watermark and event-time figures and the
state metrics, and checks that the rows kept are rows the input could give.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import (
    StreamRun,
    assert_batch_rows,
    assert_equivalent,
    assert_same_batches,
    run_stream,
    start_error,
)

SCHEMA = "value LONG"


def vals(*values: int) -> list[tuple[int]]:
    return [(v,) for v in values]


def v(*values: int) -> list[dict[str, int]]:
    return [{"value": x} for x in values]


def ev(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value"))


def w10(df: DataFrame) -> DataFrame:
    return ev(df).withWatermark("eventTime", "10 seconds")


def counts_t5(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("eventTime", "5 seconds")).count().select(
        F.col("window.start").cast("long").alias("start"), "count"
    )


E: list[dict[str, Any]] = []


def assert_same_counts(expected: StreamRun, actual: StreamRun, allowed: Iterable[dict[str, Any]] | None = None) -> None:
    """Both runs agree on everything but which rows a limit kept (see the module docstring).
    ``allowed``: the rows any batch may hold (a multiset over the whole run)."""
    problems = []
    if [b.batch_id for b in expected.batches] != [b.batch_id for b in actual.batches]:
        problems.append("batch ids differ")
    for e, a in zip(expected.batches, actual.batches):
        if len(e.rows) != len(a.rows):
            problems.append(f"batch {e.batch_id}: {len(e.rows)} rows vs {len(a.rows)}")
        if e.columns != a.columns:
            problems.append(f"batch {e.batch_id}: columns {e.columns} vs {a.columns}")
        if e.summary() != a.summary():
            problems.append(f"batch {e.batch_id}: progress {json.dumps(e.summary())} vs {json.dumps(a.summary())}")
    if allowed is not None:
        pool = Counter(json.dumps(r, sort_keys=True, default=str) for r in allowed)
        for run in (expected, actual):
            got = Counter(json.dumps(r, sort_keys=True, default=str) for b in run.batches for r in b.rows)
            if got - pool:
                problems.append(f"{run.engine} emitted rows the input cannot give: {sorted(got - pool)}")
    if problems:
        raise AssertionError("\n".join(problems) + "\n\n" + expected.describe() + "\n" + actual.describe())


def _operators(run: StreamRun) -> list[list[str]]:
    return [[s["operatorName"] for s in b.state] for b in run.batches]


# ------------------------------------------------------------------------------------------
# The limit alone (Spark's StreamSuite cases)
# ------------------------------------------------------------------------------------------


def test_limit_with_state(spark, ours, tmp_path):
    exp, act = assert_equivalent(
        spark, ours, lambda df: df.limit(4), [vals(1, 2), vals(3, 4, 5, 6), vals(7, 8, 9)], SCHEMA, "append", tmp_path,
        reference=[v(1, 2), v(3, 4), E],
    )
    assert [b.state[0]["numRowsUpdated"] for b in exp.batches] == [1, 1, 0]
    assert _operators(act) == [["globalLimit"]] * 3


def test_limit_with_filter(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, lambda df: df.where("value % 2 = 1").limit(4),
        [vals(1, 2, 3, 4, 5), vals(6, 7, 8, 9), vals(10, 11, 12)], SCHEMA, "append", tmp_path,
        reference=[v(1, 3, 5), v(7), E],
    )


def test_limit_with_projection(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, lambda df: df.select((F.col("value") * 10).alias("x"), "value").limit(3),
        [vals(1, 2), vals(3, 4, 5)], SCHEMA, "append", tmp_path,
        reference=[[{"x": 10, "value": 1}, {"x": 20, "value": 2}], [{"x": 30, "value": 3}]],
    )


@pytest.mark.parametrize("file_format", ["parquet", "json"])
def test_limit_stops_reading_early(spark, ours, tmp_path, file_format):
    """A local limit with nothing stateful below stops the scan: Spark reports the rows the scan
    read (whole 4096-row Parquet batches, single JSON rows), not the rows of the file."""
    exp, _ = assert_equivalent(
        spark, ours, lambda df: df.limit(3), [vals(*range(10)), vals(*range(100, 5100))], SCHEMA, "append", tmp_path,
        file_format=file_format,
        reference=[v(0, 1, 2), E],
    )
    expected_input = [10, 4096] if file_format == "parquet" else [3, 3]
    assert [b.num_input_rows for b in exp.batches] == expected_input


def test_limit_zero(spark, ours, tmp_path):
    """``limit(0)`` is an empty relation in Spark's optimized plan: no state, no input read."""
    exp, _ = assert_equivalent(spark, ours, lambda df: df.limit(0), [vals(1, 2), vals(3)], SCHEMA, "append", tmp_path, reference=[E, E])
    assert [b.num_input_rows for b in exp.batches] == [0, 0] and _operators(exp) == [[], []]


@pytest.mark.parametrize(
    "name",
    ["limit4_limit2", "limit4_limit100_limit3", "limit5_project_limit3", "limit2_project_limit4", "limit5_filter_limit3"],
)
def test_several_limits(spark, ours, tmp_path, name):
    """Limits that only projections separate merge into one state operator; a filter between two
    limits keeps two."""
    builds: dict[str, tuple[Callable[[DataFrame], DataFrame], list[list[dict[str, Any]]], int]] = {
        "limit4_limit2": (lambda df: df.limit(4).limit(2), [v(1), v(2), E], 1),
        "limit4_limit100_limit3": (lambda df: df.limit(4).limit(100).limit(3), [v(1), v(2, 3), E], 1),
        "limit5_project_limit3": (lambda df: df.limit(5).select("value").limit(3), [v(1), v(2, 3), E], 1),
        "limit2_project_limit4": (lambda df: df.limit(2).select("value").limit(4), [v(1), v(2), E], 1),
        "limit5_filter_limit3": (lambda df: df.limit(5).where("value > 1").limit(3), [E, v(2, 3, 4), E], 2),
    }
    build, reference, operators = builds[name]
    exp, act = assert_equivalent(
        spark, ours, build, [vals(1), vals(2, 3, 4), vals(5, 6, 7)], SCHEMA, "append", tmp_path, reference=reference
    )
    assert _operators(exp) == [["globalLimit"] * operators] * 3


def test_limit_over_several_input_partitions(spark, ours, tmp_path):
    """Two files per batch are two partitions: which rows win is unspecified, how many is not."""
    files = [vals(*range(i * 10, i * 10 + 6)) for i in range(6)]
    exp, act = (
        run_stream(engine, lambda df: df.limit(9), files, SCHEMA, "append", tmp_path, style="all_at_once", options={"maxFilesPerTrigger": "2"})
        for engine in (spark, ours())
    )
    assert [len(b.rows) for b in exp.batches] == [9, 0, 0]
    assert_same_counts(exp, act, allowed=[r for f in files for r in v(*[x for (x,) in f])])
    for run in (exp, act):
        assert len({r["value"] for b in run.batches for r in b.rows}) == 9


def test_limit_with_watermark(spark, ours, tmp_path):
    """Only the rows the local limit pulled reach the watermark's statistics."""
    exp, _ = assert_equivalent(
        spark, ours, lambda df: w10(df).limit(3).select("value"),
        [vals(10, 30, 20, 40), vals(50, 5), vals(60)], SCHEMA, "append", tmp_path,
        reference=[v(10, 30, 20), E, E],
    )
    assert exp.batches[0].event_time["max"] == "1970-01-01T00:00:30.000Z"


# ------------------------------------------------------------------------------------------
# Limits and aggregations
# ------------------------------------------------------------------------------------------


def test_limit_after_windowed_aggregation_append(spark, ours, tmp_path):
    """The limit's local part stays a StreamingLocalLimit: the aggregation below must finish."""
    build = lambda df: counts_t5(w10(df)).limit(2)  # noqa: E731
    files = [vals(1, 6, 11, 16, 21, 26), vals(60), vals(70, 71), vals(100)]
    exp, act = (run_stream(e, build, files, SCHEMA, "append", tmp_path) for e in (spark, ours()))
    windows = [{"start": s, "count": 1} for s in (0, 5, 10, 15, 20, 25, 60)] + [{"start": 70, "count": 2}]
    assert_same_counts(exp, act, allowed=windows)
    assert [len(b.rows) for b in exp.batches][:2] == [0, 2]  # the first eviction gives 3 windows
    assert sum(len(b.rows) for b in exp.batches) == 2
    assert _operators(exp)[0] == ["globalLimit", "stateStoreSave"]


def test_limit_before_windowed_aggregation_append(spark, ours, tmp_path):
    build = lambda df: counts_t5(w10(df).limit(4))  # noqa: E731
    assert_equivalent(
        spark, ours, build, [vals(1, 2, 6), vals(7, 30, 31), vals(50)], SCHEMA, "append", tmp_path,
        reference=[E, E, [{"start": 0, "count": 2}, {"start": 5, "count": 2}], E, E],
    )


def test_limit_before_aggregation_complete(spark, ours, tmp_path):
    """SPARK-30658: a limit before the aggregation stays stateful in complete mode."""
    exp, _ = assert_equivalent(
        spark, ours, lambda df: df.limit(5).groupBy("value").count(),
        [vals(1, 2, 3), vals(*range(1, 10))], SCHEMA, "complete", tmp_path,
        reference=[
            [{"value": 1, "count": 1}, {"value": 2, "count": 1}, {"value": 3, "count": 1}],
            [{"value": 1, "count": 2}, {"value": 2, "count": 2}, {"value": 3, "count": 1}],
        ],
    )
    assert _operators(exp)[0] == ["stateStoreSave", "globalLimit"]


def test_limits_before_and_after_aggregation_complete(spark, ours, tmp_path):
    """SPARK-30658: the limit after the sorted aggregation is a per-batch top-n, not state."""
    build = lambda df: df.limit(4).groupBy("value").count().orderBy("value").limit(3)  # noqa: E731
    c = lambda *vs: [{"value": x, "count": 1} for x in vs]  # noqa: E731
    exp, _ = assert_equivalent(
        spark, ours, build, [vals(*range(1, 10)), vals(*range(2, 7))], SCHEMA, "complete", tmp_path,
        ordered=True,
        reference=[c(1, 2, 3), c(1, 2, 3)],
    )
    assert _operators(exp) == [["stateStoreSave", "globalLimit"]] * 2


def test_limit_after_aggregation_complete_without_order(spark, ours, tmp_path):
    build = lambda df: df.groupBy("value").count().limit(2)  # noqa: E731
    files = [vals(1, 2, 3), vals(1, 4)]
    exp, act = (run_stream(e, build, files, SCHEMA, "complete", tmp_path) for e in (spark, ours()))
    allowed = [{"value": x, "count": 1} for x in (1, 2, 3)] + [{"value": x, "count": c} for x, c in ((1, 2), (2, 1), (3, 1), (4, 1))]
    assert_same_counts(exp, act, allowed=allowed)
    assert [len(b.rows) for b in exp.batches] == [2, 2] and _operators(exp) == [["stateStoreSave"]] * 2


def test_limit_after_deduplication(spark, ours, tmp_path):
    """SPARK-30657: the local limit over a deduplication stays a StreamingLocalLimit, so the
    deduplication still records every new key (3 and 4) once the limit is reached."""
    build = lambda df: df.dropDuplicates().limit(1)  # noqa: E731
    files = [vals(1, 2), vals(3, 4), vals(1, 5)]
    exp, act = (run_stream(e, build, files, SCHEMA, "append", tmp_path) for e in (spark, ours()))
    assert_same_counts(exp, act, allowed=v(1, 2))
    assert [len(b.rows) for b in exp.batches] == [1, 0, 0]
    assert _operators(exp)[0] == ["globalLimit", "dedupe"]
    assert [b.state[1]["numRowsTotal"] for b in exp.batches] == [2, 4, 5]


# ------------------------------------------------------------------------------------------
# Restart
# ------------------------------------------------------------------------------------------


def _delete(*relative: str) -> Callable[[Path], None]:
    def edit(checkpoint: Path) -> None:
        for rel in relative:
            p = checkpoint / rel
            for f in p.parent.iterdir():  # the file, its checksum side file and their .crc files
                if f.name.startswith((p.name, f".{p.name}")):
                    f.unlink()

    return edit


def _starts(engine: Any, build, tmp_path: Path, plan) -> list[StreamRun]:
    workdir = tmp_path / f"restart-{uuid.uuid4().hex[:8]}"
    runs = []
    for files, edit in plan:
        if edit is not None:
            edit(workdir / "checkpoint")
        runs.append(run_stream(engine, build, files, SCHEMA, "append", tmp_path, workdir=workdir))
    return runs


@pytest.mark.parametrize("crash_point", ["after_state_commit", "before_state_commit"])
def test_limit_count_survives_restarts(spark, ours, tmp_path, crash_point):
    """Stop and start again; between two starts, undo the last batch's commit (and, for a crash
    before the state commit, its state version too): the batch runs again with the count it
    started from, so the idempotent sink never holds more than ``n`` rows."""
    undo = ["commits/1"] if crash_point == "after_state_commit" else ["commits/1", "state/0/0/2.delta"]
    plan = [
        ([vals(1, 2, 3), vals(4)], None),  # b0: 1 2 3, b1: 4
        ([], _delete(*undo)),  # b1 again: 4 again
        ([vals(5, 6, 7)], None),  # b2: 5
        ([vals(8)], None),  # b3: nothing
    ]
    build = lambda df: df.limit(5)  # noqa: E731
    expected = _starts(spark, build, tmp_path, plan)
    for run, ref in zip(expected, [[v(1, 2, 3), v(4)], [v(4)], [v(5)], [E]]):
        assert_batch_rows(run, ref)
    actual = _starts(ours(), build, tmp_path, plan)
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
    sink: dict[int, list] = {}
    for run in actual:
        for b in run.batches:
            sink[b.batch_id] = b.rows
    assert sum(len(r) for r in sink.values()) == 5


# ------------------------------------------------------------------------------------------
# Metrics and checkpoint layout (explain: tests/spark/test_explain.py)
# ------------------------------------------------------------------------------------------


def test_limit_progress_and_state_files_match_spark(spark, ours, tmp_path):
    build = lambda df: df.limit(3)  # noqa: E731
    exp, act = assert_equivalent(spark, ours, build, [vals(1, 2), vals(3, 4)], SCHEMA, "append", tmp_path)
    for e, a in zip(exp.batches, act.batches):
        es, as_ = e.progress["stateOperators"][0], a.progress["stateOperators"][0]
        assert set(es) == set(as_)
        for k in ("numShufflePartitions", "numStateStoreInstances", "numRowsTotal", "numRowsUpdated"):
            assert es[k] == as_[k], k
    for name in ("state/0/_metadata/metadata", "state/0/0/_metadata/schema"):
        assert (Path(act.checkpoint) / name).read_bytes() == (Path(exp.checkpoint) / name).read_bytes(), name
    for run in (exp, act):
        assert sorted(p.name for p in (Path(run.checkpoint) / "state" / "0").iterdir() if not p.name.startswith(".")) == [
            "0",
            "_metadata",
        ]


# ------------------------------------------------------------------------------------------
# Where a limit may stand (analysis at start())
# ------------------------------------------------------------------------------------------


REJECTION_CASES: dict[str, tuple[str, Callable[[DataFrame], DataFrame], bool]] = {
    # name: (output mode, query, rejected by Spark?)
    "update": ("update", lambda df: df.limit(3), True),
    "update_zero": ("update", lambda df: df.limit(0), True),
    "update_after_agg": ("update", lambda df: df.groupBy("value").count().limit(3), True),
    "update_before_agg": ("update", lambda df: df.limit(3).groupBy("value").count(), True),
    "update_after_windowed_agg": ("update", lambda df: counts_t5(w10(df)).limit(3), True),
    "complete_without_agg": ("complete", lambda df: df.limit(3), True),
    "append_after_agg_without_watermark": ("append", lambda df: df.groupBy("value").count().limit(3), True),
    "append_sort_then_limit": ("append", lambda df: df.orderBy("value").limit(3), True),
    "negative": ("append", lambda df: df.limit(-1), True),
    # allowed
    "append": ("append", lambda df: df.limit(3), False),
    "append_zero": ("append", lambda df: df.limit(0), False),
    "append_after_windowed_agg": ("append", lambda df: counts_t5(w10(df)).limit(3), False),
    "append_before_windowed_agg": ("append", lambda df: counts_t5(w10(df).limit(3)), False),
    "complete_before_agg": ("complete", lambda df: df.limit(3).groupBy("value").count(), False),
    "complete_after_agg": ("complete", lambda df: df.groupBy("value").count().limit(3), False),
    "complete_after_sorted_agg": ("complete", lambda df: df.groupBy("value").count().orderBy("value").limit(3), False),
}


@pytest.mark.parametrize("name", list(REJECTION_CASES))
def test_limit_start_verdict_matches_spark(spark, ours, tmp_path, name):
    mode, build, rejected = REJECTION_CASES[name]
    expected = start_error(spark, build, SCHEMA, mode, tmp_path)
    assert (expected is not None) == rejected, f"Spark's verdict changed for {name}: {expected}"
    actual = start_error(ours(), build, SCHEMA, mode, tmp_path)
    assert actual == expected, f"{name} ({mode}):\n  spark: {expected}\n  ours:  {actual}"


@pytest.mark.parametrize("name", ["update", "update_after_agg", "negative"])
def test_limit_refusal_carries_spark_error_class(spark, ours, tmp_path, name):
    """Beyond the text: the error condition, its parameters and the SQLSTATE are Spark's."""
    from pyspark.errors import AnalysisException

    mode, build, _ = REJECTION_CASES[name]

    def refusal(engine: Any) -> tuple[Any, Any, Any]:
        (tmp_path / name).mkdir(exist_ok=True)
        with pytest.raises(AnalysisException) as info:
            df = build(engine.readStream.format("parquet").schema(SCHEMA).load(str(tmp_path / name)))
            df.writeStream.outputMode(mode).foreachBatch(lambda _df, _id: None).option(
                "checkpointLocation", str(tmp_path / name / f"ckpt-{uuid.uuid4().hex[:6]}")
            ).start().stop()
        e = info.value
        return e.getCondition(), dict(e.getMessageParameters() or {}), e.getSqlState()

    assert refusal(ours()) == refusal(spark)
