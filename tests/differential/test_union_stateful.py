"""A stateful operator below the *second* input of a union: Spark runs the union's inputs in one
stage, so the tasks of the second input have ids after the first input's, and a state step must
find its state partition from its rows, not from its task id. Each operator family is compared
with Spark's engine batch by batch."""

from __future__ import annotations

from typing import Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_stream

SCHEMA = "k LONG, value LONG"
INPUT = [
    [(1, 1), (2, 2), (1, 1), (3, 5)],
    [(1, 1), (4, 12), (2, 13), (5, 30)],
    [(6, 45), (1, 46), (7, 60)],
]


def _timed(df: DataFrame) -> DataFrame:
    return df.withColumn("t", F.timestamp_seconds("value")).withWatermark("t", "10 seconds")


BUILDS: dict[str, tuple[str, Callable[[DataFrame], DataFrame]]] = {
    "dedup": (
        "append",
        lambda df: df.select("k", "value").union(_timed(df).dropDuplicates(["k", "t"]).select("k", "value")),
    ),
    "window_aggregate": (
        "append",
        lambda df: df.select(F.col("k").alias("a"), F.col("value").alias("b")).union(
            _timed(df).groupBy(F.window("t", "10 seconds")).agg(F.count("*").alias("n"))
            .select(F.unix_seconds(F.col("window.start")).alias("a"), F.col("n").alias("b"))
        ),
    ),
    "dedup_within_watermark": (
        "append",
        lambda df: df.select("k", "value").union(_timed(df).dropDuplicatesWithinWatermark(["k"]).select("k", "value")),
    ),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_stateful_operator_below_a_unions_second_input(spark, ours, tmp_path, name):
    mode, build = BUILDS[name]
    expected = run_stream(spark, build, INPUT, SCHEMA, mode, tmp_path)
    actual = run_stream(ours(), build, INPUT, SCHEMA, mode, tmp_path)
    assert_same_batches(expected, actual)
