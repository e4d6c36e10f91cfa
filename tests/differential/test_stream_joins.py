"""Differential tests of stream-stream joins (Spark's ``StreamingSymmetricHashJoinExec``): Spark's
engine versus statestream on the same file micro-batches, every batch compared (rows sorted,
watermark, event-time statistics, the join's state row counts).

One input stream carries both sides, told apart by ``side`` ('L' or 'R'); each side is a filter of
it with its own watermark on its own time column. The input has duplicate keys on both sides, null
keys on both sides, matches inside one batch and across batches, matches with rows the other
side's state is about to evict and late rows on each side.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_stream, start_error

SCHEMA = "side STRING, k LONG, ts TIMESTAMP, v LONG"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def t(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def L(k: Any, s: int, v: int) -> tuple:  # noqa: N802 - a row of the left side
    return ("L", k, t(s), v)


def R(k: Any, s: int, v: int) -> tuple:  # noqa: N802 - a row of the right side
    return ("R", k, t(s), v)


#: watermark delay of both sides: 10 s; the time range: rts in [lts, lts + 5 s]
INPUT = [
    # duplicate keys on both sides matching inside the batch; null keys on both sides;
    # keys only one side has
    [L(1, 0, 10), L(1, 1, 11), R(1, 2, 100), R(1, 3, 101), L(None, 3, 12), R(None, 3, 102), L(2, 4, 13), R(3, 4, 103)],
    # matches across batches (right rows meeting stored left rows), one outside the range
    [R(2, 6, 104), R(1, 5, 105), R(1, 9, 106), L(3, 1, 14)],
    # the left side moves ahead: left watermark 20 s (every file has rows of both sides: a
    # Parquet row group of one side only is skipped by the other side's scan on Spark's engine,
    # which then counts fewer input rows)
    [L(4, 30, 15), L(6, 31, 16), R(10, 9, 113)],
    # the right side moves ahead: right watermark 32 s; global (min) 20 s
    [R(4, 33, 107), R(7, 42, 108), L(11, 25, 21)],
    # late rows on both sides (<= 20 s), rows matching stored rows
    [L(1, 5, 17), R(2, 8, 109), R(6, 34, 110), L(7, 40, 18), L(8, 50, 19)],
    # both sides far ahead: everything old leaves the state
    [L(9, 100, 20), R(9, 101, 111), R(8, 52, 112)],
]


def _sides(df: DataFrame, delay: str = "10 seconds") -> tuple[DataFrame, DataFrame]:
    left = df.filter("side = 'L'").select("k", F.col("ts").alias("lts"), F.col("v").alias("lv")).withWatermark("lts", delay)
    right = df.filter("side = 'R'").select(F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")).withWatermark("rts", delay)
    return left, right


def _range_join(how: str) -> Callable[[DataFrame], DataFrame]:
    def build(df: DataFrame) -> DataFrame:
        left, right = _sides(df)
        cond = (left.k == right.rk) & (right.rts >= left.lts) & (right.rts <= left.lts + F.expr("INTERVAL 5 SECONDS"))
        return left.join(right, cond, how)

    return build


def _compare(spark, ours, tmp_path, build, batches=INPUT, mode: str = "append", **kw) -> None:
    expected = run_stream(spark, build, batches, SCHEMA, mode, tmp_path, **kw)
    actual = run_stream(ours(), build, batches, SCHEMA, mode, tmp_path, **kw)
    assert_same_batches(expected, actual)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "left_semi"])
def test_time_range_join(spark, ours, tmp_path, how):
    """Each accepted join type with an event-time range condition and watermarks on both sides."""
    _compare(spark, ours, tmp_path, _range_join(how))
