"""Which stream-stream join conditions the state step evaluates itself (``arrow_condition``): those
whose every node has an exact Arrow form; the others (floating point, calendar intervals with
days, a zone whose offset changes, functions) are matched with a Spark join."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F

from statestream.plan.stream_joins import arrow_condition


def _condition(spark: Any, cond: str) -> tuple[Any, dict[int, str]]:
    a = spark.createDataFrame([], "k LONG, lts TIMESTAMP, lv INT, ls STRING, ld DOUBLE, lb BOOLEAN")
    b = spark.createDataFrame([], "rk LONG, rts TIMESTAMP, rv INT, rs STRING, rd DOUBLE")
    plan = a.join(b, F.expr(cond))._jdf.queryExecution().optimizedPlan()
    while plan.getClass().getSimpleName() != "Join":
        plan = plan.children().apply(0)
    names = {}
    for side, child in enumerate((plan.left(), plan.right())):
        out = child.output()
        for i in range(out.size()):
            names[int(out.apply(i).exprId().id())] = f"__s{side}_{i}"
    return plan.condition().get(), names


@pytest.mark.parametrize(
    "cond",
    [
        "rts >= lts AND rts <= lts + INTERVAL 1 MINUTE",
        "rts BETWEEN lts - INTERVAL '5' SECOND AND lts",
        "lv + 1 > rv OR rv IS NULL",
        "NOT (ls = rs) AND lb",
        "ls < rs AND k <=> rk",
        "CAST(lv AS BIGINT) - rk >= 0",
    ],
)
def test_translated(spark, cond):
    tree = arrow_condition(*_condition(spark, cond), fixed_offset_zone=True)
    assert tree is not None, cond


@pytest.mark.parametrize(
    "cond",
    [
        "ld > rd",  # NaN orders above everything in Spark
        "rts <= lts + make_interval(0, 0, 0, 1)",  # a calendar interval with days
        "upper(ls) = rs",
        "lv / 2 > rv",
    ],
)
def test_left_to_spark(spark, cond):
    assert arrow_condition(*_condition(spark, cond), fixed_offset_zone=True) is None, cond


def test_a_day_time_interval_needs_a_fixed_offset_zone(spark):
    cond, names = _condition(spark, "rts <= lts + INTERVAL 1 MINUTE")
    assert arrow_condition(cond, names, fixed_offset_zone=True) is not None
    assert arrow_condition(cond, names, fixed_offset_zone=False) is None
