"""Aggregations that skip their partial step (``runtime.partial_aggregation``) against Spark's
own engine, which always runs it.

With ``spark.statestream.aggregation.skipPartial=true`` every batch shuffles its rows by the
keys' hash partitioning and aggregates after the exchange. Keys repeat inside each batch here,
so the two plans really aggregate differently; each test compares every batch's rows,
watermark and state rows. The last tests read the plans statestream ran from Spark's SQL
status store: the partial aggregation sits below the exchange, or above it, as asked.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from statestream.runtime import partial_aggregation
from statestream.runtime.partial_aggregation import SKIP_PARTIAL_CONF
from statestream.runtime.small_batches import SINGLE_STATE_TASK_MAX_ROWS_CONF
from tests.differential.harness import assert_equivalent, assert_same_batches, run_stream
from tests.spark_confs import session_confs

SCHEMA = "t TIMESTAMP, k STRING, v LONG, x DOUBLE"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


#: four batches; each key comes several times per batch and per window, a few rows late
BATCHES = [
    [(_at(s), f"k{s % 3}", s, s / 7) for s in range(0, 24)],
    [(_at(s), f"k{s % 4}", s * 2, -s / 3) for s in range(20, 44)] + [(_at(2), "k1", 100, 0.5)],
    [(_at(s), f"k{s % 2}", s, s * 1.25) for s in range(40, 52)] + [(_at(30), "k9", 7, None)],
    [(_at(s), f"k{s % 5}", None if s % 6 == 0 else s, s / 11) for s in range(60, 75)],
]


def windowed(df: DataFrame) -> DataFrame:
    return (
        df.withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "10 seconds"), "k")
        .agg(
            F.count("*").alias("n"),
            F.sum("v").alias("s"),
            F.avg("x").alias("a"),
            F.max("v").alias("hi"),
            F.min("x").alias("lo"),
        )
    )


def sliding(df: DataFrame) -> DataFrame:
    # Spark's Expand puts each row in two windows, before the exchange
    return (
        df.withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "20 seconds", "10 seconds"), "k")
        .agg(F.sum("v").alias("s"), F.collect_list("v").alias("vs"))
    )


def literal_and_computed_keys(df: DataFrame) -> DataFrame:
    # the literal key is not hashed by Spark's exchange; the computed one is
    return df.groupBy(F.lit(1).alias("one"), "k", (F.col("v") % 3).alias("m")).agg(
        F.first("x").alias("f"), F.percentile_approx("v", 0.5).alias("p"), F.count("v").alias("n")
    )


def key_filtered(df: DataFrame) -> DataFrame:
    # filters on the grouping keys: the window's ends up on the aggregated rows (a sliding
    # window's Expand stops it there), by the output names of the keys
    return (
        df.withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "10 seconds", "5 seconds").alias("w"), "k")
        .count()
        .filter(F.col("w.start") >= F.lit(_at(10)))
        .filter("k != 'k1'")
    )


def repartitioned(df: DataFrame) -> DataFrame:
    # several input partitions: a key's rows come from more than one map task
    return df.repartition(3).groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"), F.avg("x").alias("a"))


CASES: list[tuple[Callable[[DataFrame], DataFrame], str]] = [
    (windowed, "append"),
    (windowed, "update"),
    (sliding, "update"),
    (literal_and_computed_keys, "update"),
    (key_filtered, "update"),
    (key_filtered, "append"),
    (repartitioned, "complete"),
]


@pytest.mark.parametrize("build, mode", CASES, ids=lambda c: getattr(c, "__name__", c))
def test_skipping_the_partial_step_gives_sparks_batches(spark, ours, tmp_path, build, mode):
    since = _last_execution_id(spark)
    with session_confs(spark, {SKIP_PARTIAL_CONF: "true"}):
        assert_equivalent(spark, ours, build, BATCHES, SCHEMA, mode, tmp_path)
    # the rows were shuffled raw, by the state's partitioning only (one more exchange: the
    # user's own repartition); no exchange after the aggregation either
    plans = _state_plans(spark, since)
    assert len(plans) >= len(BATCHES)  # no-data batches run the state step too
    extra = 1 if build is repartitioned else 0
    assert not any(partial_before_exchange(p, exchanges=1 + extra) for p in plans)


# ------------------------------------------------------------------------------------------
# The plans statestream ran
# ------------------------------------------------------------------------------------------


def _state_plans(spark: Any, since: int, data_only: bool = False) -> list[str]:
    """The physical plans of statestream's batch jobs run after execution ``since`` (the ones
    with a state step, ``MapInArrow``, and an exchange), oldest first; ``data_only``: not the
    no-data batches' (their input is an empty ``ExistingRDD`` when the batch is built, the file
    source's reader over no files, ``InMemoryFileIndex []``, when it runs on a kept plan)."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plans = []
    for i in range(executions.size()):
        e = executions.apply(i)
        if e.executionId() < since:
            continue
        text = e.physicalPlanDescription().split("\n\n", 1)[0]
        no_data = "ExistingRDD" in text or "InMemoryFileIndex []" in e.physicalPlanDescription()
        if "MapInArrow" in text and "Exchange" in text and not (data_only and no_data):
            plans.append(text)
    return plans


def _last_execution_id(spark: Any) -> int:
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1) + 1


def partial_before_exchange(plan: str, exchanges: int = 1) -> bool:
    """Whether an aggregate runs below the exchange that feeds the state step in a plan's tree
    text; the plan must have ``exchanges`` exchanges below the state step (``MapInArrow``)."""
    lines = plan.splitlines()
    below_state = lines[next(i for i, line in enumerate(lines) if "MapInArrow" in line) :]
    at = [i for i, line in enumerate(below_state) if "Exchange" in line]
    assert len(at) == exchanges, plan
    return any("Aggregate" in line for line in below_state[at[0] + 1 :])


def _unique_keys(df: DataFrame) -> DataFrame:
    return df.groupBy("k", "v").agg(F.sum("x").alias("s"))


def _few_keys(df: DataFrame) -> DataFrame:
    return df.groupBy(F.length("k").alias("n")).agg(F.sum("x").alias("s"))


def _exploded(df: DataFrame) -> DataFrame:
    # the aggregation reads more rows than the source gave: not the source's rows
    return df.withColumn("v", F.explode(F.array("v", "v"))).groupBy("k", "v").agg(F.sum("x").alias("s"))


def _ours_plans(spark: Any, ours: Any, build: Callable[[DataFrame], DataFrame], tmp_path: Path, setting: str) -> list[str]:
    since = _last_execution_id(spark)
    # one task per state partition in every batch, however small: one exchange in each plan
    with session_confs(spark, {SKIP_PARTIAL_CONF: setting, SINGLE_STATE_TASK_MAX_ROWS_CONF: "0"}):
        run_stream(ours(), build, BATCHES, SCHEMA, "update", tmp_path)
    return _state_plans(spark, since)


def test_auto_skips_after_a_batch_with_a_key_per_row(spark, ours, tmp_path, monkeypatch):
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    plans = _ours_plans(spark, ours, _unique_keys, tmp_path, "auto")
    assert len(plans) == len(BATCHES)
    # the first batch of a run keeps the step; every batch after one with a key per row skips it
    assert [partial_before_exchange(p) for p in plans] == [True, False, False, False]


def test_auto_keeps_the_step_where_keys_repeat_or_rows_are_not_the_sources(spark, ours, tmp_path, monkeypatch):
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    repeating = _ours_plans(spark, ours, _few_keys, tmp_path / "repeating", "auto")
    assert len(repeating) == len(BATCHES) and all(partial_before_exchange(p) for p in repeating)
    exploded = _ours_plans(spark, ours, _exploded, tmp_path / "exploded", "auto")
    assert len(exploded) == len(BATCHES) and all(partial_before_exchange(p) for p in exploded)
    # asked for everywhere, it skips there too
    forced = _ours_plans(spark, ours, _exploded, tmp_path / "forced", "true")
    assert forced and not any(partial_before_exchange(p) for p in forced)


def test_off_never_skips(spark, ours, tmp_path, monkeypatch):
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    plans = _ours_plans(spark, ours, _unique_keys, tmp_path, "false")
    assert plans and all(partial_before_exchange(p) for p in plans)


def _unique_windowed(df: DataFrame) -> DataFrame:
    return df.withWatermark("t", "10 seconds").groupBy(F.window("t", "10 seconds"), "k", "v").agg(F.sum("x").alias("s"))


def test_auto_looks_past_the_no_data_batches(spark, ours, tmp_path, monkeypatch):
    """In append mode with a watermark, a no-data batch runs after each data batch (with no
    input rows): the next data batch still goes by the last one that read rows."""
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    since = _last_execution_id(spark)
    with session_confs(spark, {SKIP_PARTIAL_CONF: "auto", SINGLE_STATE_TASK_MAX_ROWS_CONF: "0"}):
        _, act = assert_equivalent(spark, ours, _unique_windowed, BATCHES, SCHEMA, "append", tmp_path)
    no_data = [b.batch_id for b in act.batches if not b.num_input_rows]
    assert len(no_data) >= len(BATCHES) - 1, act.describe()  # no-data batches ran in between
    plans = _state_plans(spark, since, data_only=True)
    assert [partial_before_exchange(p) for p in plans] == [True, False, False, False]


def _rows(keys: list[tuple[str, int]]) -> list[tuple]:
    return [(_at(i), k, v, v / 4) for i, (k, v) in enumerate(keys)]


UNIQUE = [(f"k{i % 3}", i) for i in range(24)]
#: one key for all the batch's rows
REPEATED = [("k0", 1)] * 24


def test_auto_follows_each_batch_and_reuses_both_plans(spark, ours, tmp_path, monkeypatch, reused):
    """Keys per row high, high, low, high, high: the batch after each decides, and each shape
    keeps its own plan template (batches 2, 3 and 4 run on one)."""
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    batches = [_rows(UNIQUE), _rows([(k, v + 100) for k, v in UNIQUE]), _rows(REPEATED), _rows(UNIQUE), _rows(UNIQUE)]
    since = _last_execution_id(spark)
    with session_confs(spark, {SKIP_PARTIAL_CONF: "auto", SINGLE_STATE_TASK_MAX_ROWS_CONF: "0"}):
        assert_equivalent(spark, ours, _unique_keys, batches, SCHEMA, "update", tmp_path)
    plans = _state_plans(spark, since)
    assert [partial_before_exchange(p) for p in plans] == [True, False, False, True, False]
    assert reused[0] == 3


def test_a_bad_setting_fails_start(spark, ours, tmp_path):
    with session_confs(spark, {SKIP_PARTIAL_CONF: "sometimes"}):
        engine = ours()
        df = engine.readStream.format("rate").load().groupBy("value").count()
        with pytest.raises(ValueError, match=r"spark\.statestream\.aggregation\.skipPartial must be auto, true or false, got 'sometimes'"):
            df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(tmp_path / "cp")).start()
        assert engine.streams.active == []


def test_session_windows_keep_their_partial_step_when_asked_to_skip(spark, ours, tmp_path):
    """Sessions merge in their partial step (``SessionWindowPartialAggregateExec``, not the
    batch ``groupBy`` a skip replaces): ``true`` leaves them with Spark's answers."""

    def sessions(df: DataFrame) -> DataFrame:
        return df.withWatermark("t", "10 seconds").groupBy("k", F.session_window("t", "4 seconds")).agg(F.sum("v").alias("s"))

    with session_confs(spark, {SKIP_PARTIAL_CONF: "true"}):
        assert_equivalent(spark, ours, sessions, BATCHES, SCHEMA, "append", tmp_path)


def _batches_of(sizes: list[int]) -> list[list[tuple]]:
    """Batches of these many rows, one second apart across the batches, over three keys."""
    batches, start = [], 0
    for n in sizes:
        batches.append([(_at(start + i), f"k{i % 3}", i, i / 2) for i in range(n)])
        start += n
    return batches


def test_one_task_batches_look_past_the_no_data_batches(spark, ours, tmp_path):
    """A small batch runs its state partitions in one task when the last batch that read rows
    was small (``runtime.small_batches``): the no-data batch that follows each data batch here
    (append mode, a watermark) read nothing, and says nothing of the next batch's size. Batches
    of 40, 40, 10 and 10 rows with the limit at 30: only the last runs in one task. (Going by
    the newest progress, a no-data batch's, the second and third did too.) Each batch skips
    its partial step, so the rows it read are the measure, not the fewer rows a partial step
    would shuffle (the next test)."""
    sizes = [40, 40, 10, 10]
    batches = _batches_of(sizes)
    since = _last_execution_id(spark)
    with session_confs(spark, {SKIP_PARTIAL_CONF: "true", SINGLE_STATE_TASK_MAX_ROWS_CONF: "30"}):
        _, act = assert_equivalent(spark, ours, windowed, batches, SCHEMA, "append", tmp_path)
    assert sum(1 for b in act.batches if not b.num_input_rows) >= len(sizes) - 1, act.describe()
    plans = _state_plans(spark, since, data_only=True)
    assert ["Coalesce" in p for p in plans] == [False, False, False, True], plans


def _by_key(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.avg("x").alias("a"))


def _values_by_key(df: DataFrame) -> DataFrame:
    # a buffer that keeps the key's values: a few shuffled rows carry every row's value
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sort_array(F.collect_list("v")).alias("vs"))


@pytest.mark.parametrize(
    ("build", "one_task"),
    [(_by_key, [False, True, True, True]), (_values_by_key, [False, False, False, False])],
    ids=["fixed-size buffers", "a list buffer"],
)
def test_one_task_batches_after_large_batches_over_few_keys(spark, ours, tmp_path, build, one_task):
    """A batch that read many rows over a few keys shuffles one row per key and map task after
    the partial step: the next batch runs its state partitions in one task, as after a small
    batch (``runtime.small_batches``, W1's shape). Batches of 200, 200, 60 and 200 rows over
    three keys, the limit at 30: the first of the run runs a task per partition, the others in
    one task, with Spark's answers. Not when a buffer keeps the values (``collect_list``): the
    rows read stay the measure there."""
    sizes = [200, 200, 60, 200]
    batches = _batches_of(sizes)
    since = _last_execution_id(spark)
    with session_confs(spark, {SKIP_PARTIAL_CONF: "false", SINGLE_STATE_TASK_MAX_ROWS_CONF: "30"}):
        _, act = assert_equivalent(spark, ours, build, batches, SCHEMA, "update", tmp_path)
    assert [b.num_input_rows for b in act.batches] == sizes, act.describe()
    plans = _state_plans(spark, since, data_only=True)
    assert ["Coalesce" in p for p in plans] == one_task, plans


def test_a_restart_between_skipping_and_keeping_gives_sparks_batches(spark, ours, tmp_path, monkeypatch):
    """State written by batches that skipped the partial step is read by batches that keep it,
    and back: two batches under ``true``, then a restart under ``auto``, whose first batch keeps
    the step (a run starts with no batch to go by) and whose next batch skips it again (a key
    per row). Both starts are compared with Spark's engine stopped and restarted the same way."""
    monkeypatch.setattr(partial_aggregation, "MIN_ROWS", 1)
    first = [_rows(UNIQUE), _rows([(k, v + 100) for k, v in UNIQUE])]
    second = [_rows([(k, v + 200) for k, v in UNIQUE]), _rows([(k, v + 300) for k, v in UNIQUE])]
    expected = [
        run_stream(spark, _unique_keys, batches, SCHEMA, "update", tmp_path, workdir=tmp_path / "spark")
        for batches in (first, second)
    ]
    since = _last_execution_id(spark)
    actual = []
    for setting, batches in (("true", first), ("auto", second)):
        with session_confs(spark, {SKIP_PARTIAL_CONF: setting, SINGLE_STATE_TASK_MAX_ROWS_CONF: "0"}):
            actual.append(run_stream(ours(), _unique_keys, batches, SCHEMA, "update", tmp_path, workdir=tmp_path / "ours"))
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
    assert actual[1].batches[0].batch_id == 2, actual[1].describe()
    plans = _state_plans(spark, since)
    assert [partial_before_exchange(p) for p in plans] == [False, False, True, False]
