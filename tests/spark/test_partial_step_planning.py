"""Which streaming aggregations the planner lets a batch run without their partial step
(``plan.planner.partial_step_skippable``, read by ``runtime.partial_aggregation``): the real
templates of statestream DataFrames over the ``rate`` source, analysed by Spark."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from pyspark.sql import functions as F

from statestream.operators.aggregate import PARTIAL_KEPT, PARTIAL_SKIPPABLE, PARTIAL_SKIPPABLE_FED_BY_SOURCE
from statestream.plan import logical as L
from statestream.plan.planner import aggregation_info, session_window_info


@pytest.fixture(scope="module")
def ss(spark: Any) -> Any:
    from statestream import StreamingSession

    return StreamingSession(spark)


@pytest.fixture(scope="module")
def rate(ss: Any) -> Callable[[], Any]:
    return lambda: ss.readStream.format("rate").load().withColumn("k", F.col("value") % 10)


def _skippable(df: Any) -> str:
    (node,) = df._plan.find(L.Aggregate)
    return aggregation_info(node).partial_skippable


FED: dict[str, Callable[[Any], Any]] = {
    "plain key": lambda df: df.groupBy("k").count(),
    "projected and filtered": lambda df: df.select("k", "value").filter("value > 3").groupBy("k").agg(F.sum("value")),
    "tumbling window with a watermark": lambda df: df.withWatermark("timestamp", "10 seconds")
    .groupBy(F.window("timestamp", "5 seconds"), "k")
    .count(),
    "repartitioned": lambda df: df.repartition(3).groupBy("k").count(),
    "a literal beside a key": lambda df: df.groupBy(F.lit(1), "k").count(),
    "observed": lambda df: df.observe("o", F.count(F.lit(1))).groupBy("k").count(),
}


def test_an_aggregation_over_a_temp_view_is_of_a_sources_rows(ss, rate):
    rate().createOrReplaceTempView("partial_step_rows")
    query = ss.sql("SELECT k, value FROM partial_step_rows WHERE value > 3").groupBy("k").count()
    assert _skippable(query) == PARTIAL_SKIPPABLE_FED_BY_SOURCE

NOT_FED: dict[str, Callable[[Any], Any]] = {
    "sliding window": lambda df: df.groupBy(F.window("timestamp", "10 seconds", "5 seconds")).count(),
    "explode in a select": lambda df: df.select("k", F.explode(F.array("value", "value")).alias("v")).groupBy("k", "v").count(),
    "deduplicated first": lambda df: df.dropDuplicates(["k"]).groupBy("k").count(),
}

KEPT: dict[str, Callable[[Any], Any]] = {
    "no keys": lambda df: df.agg(F.count("value")),
    "only a literal key": lambda df: df.groupBy(F.lit("all")).count(),
    "cube": lambda df: df.cube("k").count(),
    "rollup": lambda df: df.rollup("k", "value").count(),
}


@pytest.mark.parametrize("name", sorted(FED))
def test_an_aggregation_of_a_sources_rows_may_skip_by_the_last_batch(rate, name):
    assert _skippable(FED[name](rate())) == PARTIAL_SKIPPABLE_FED_BY_SOURCE


@pytest.mark.parametrize("name", sorted(NOT_FED))
def test_an_aggregation_of_other_rows_skips_only_when_asked_everywhere(rate, name):
    assert _skippable(NOT_FED[name](rate())) == PARTIAL_SKIPPABLE


def test_a_union_or_a_join_is_not_a_sources_rows(rate):
    assert _skippable(rate().union(rate()).groupBy("k").count()) == PARTIAL_SKIPPABLE
    static = rate().sparkSession.range(5).withColumnRenamed("id", "k")
    assert _skippable(rate().join(static, "k").groupBy("k").count()) == PARTIAL_SKIPPABLE


@pytest.mark.parametrize("name", sorted(KEPT))
def test_an_aggregation_without_keys_to_shuffle_by_keeps_its_partial_step(rate, name):
    assert _skippable(KEPT[name](rate())) == PARTIAL_KEPT


def test_a_session_window_keeps_its_partial_step(rate):
    df = rate().withWatermark("timestamp", "10 seconds").groupBy("k", F.session_window("timestamp", "5 seconds")).count()
    (node,) = df._plan.find(L.Aggregate)
    assert aggregation_info(node).partial_skippable == PARTIAL_SKIPPABLE_FED_BY_SOURCE
    assert session_window_info(node).agg.partial_skippable == PARTIAL_KEPT


def test_a_plan_spark_cannot_show_skips_only_when_asked_everywhere(rate, monkeypatch):
    from statestream.plan import planner

    def broken(*args: Any) -> Any:
        raise RuntimeError("py4j drift")

    monkeypatch.setattr(planner, "jvm_aggregate", broken)
    assert _skippable(rate().groupBy("k").count()) == PARTIAL_SKIPPABLE
