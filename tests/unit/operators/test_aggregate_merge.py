"""Pure tests of the buffer merge rules (``plan/aggregates.merge_buffers``) on Arrow arrays."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate_merge import MERGE_MAX, MERGE_MIN, merge_buffer_segments, merge_buffers, spark_order_ranks

UTC = dt.timezone.utc


def test_min_max_of_zoned_timestamps_keep_their_type():
    t = pa.timestamp("us", tz="UTC")
    state = pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC), None, dt.datetime(2024, 1, 3, tzinfo=UTC)], t)
    batch = pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC), dt.datetime(2024, 1, 5, tzinfo=UTC), None], t)
    lo = merge_buffers("min", state, batch)
    hi = merge_buffers("max", pa.chunked_array([state]), batch)
    assert lo.type == t and hi.type == t
    assert [v.day if v else None for v in lo.to_pylist()] == [1, 5, 3]
    assert [v.day if v else None for v in hi.to_pylist()] == [2, 5, 3]


def test_min_max_of_booleans():
    state = pa.array([True, None, False, None])
    batch = pa.array([False, True, None, None])
    assert merge_buffers("min", state, batch).to_pylist() == [False, True, False, None]
    assert merge_buffers("max", state, batch).to_pylist() == [True, True, False, None]


def test_decimal_averages_round_half_up_once():
    """Spark's decimal average: the quotient to 38 digits, rounded half up (away from zero) to
    the result scale once; a zero count is null; an overflow is null, or an error under ANSI."""
    from decimal import Decimal as D

    from statestream.plan.aggregate_functions import decimal_averages

    got = decimal_averages([D("1"), D("-1"), D("2"), D("5"), None], [8, 8, 3, 0, 4], 10, 2, ansi=False)
    assert got == [D("0.13"), D("-0.13"), D("0.67"), None, None]
    (third,) = decimal_averages([D("2")], [3], 38, 37, ansi=False)
    assert third == D("0.6666666666666666666666666666666666667")
    # Spark divides to 39 fraction digits first: 0.125 - 1e-40 becomes 0.125..., then 0.13
    (near,) = decimal_averages([D("1") - D("8e-40")], [8], 10, 2, ansi=False)
    assert near == D("0.13")
    assert decimal_averages([D("-7")], [2], 10, 0, ansi=False) == [D("-4")]
    assert decimal_averages([D("999")], [1], 4, 2, ansi=False) == [None]
    with pytest.raises(ArithmeticError, match="NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION.*Decimal.4, 2."):
        decimal_averages([D("999")], [1], 4, 2, ansi=True)


# ---- nested values (arrays, structs): ordered as Spark orders them, through ranks ---------------


def test_min_max_of_arrays_order_as_spark():
    t = pa.list_(pa.int32())
    stored = pa.array([[1, 2], None, [1], [None, 5]], t)
    batch = pa.array([[1, 2, 0], [3], None, [1]], t)
    # a longer array with the same prefix is larger; a null element is smaller than any number
    assert merge_buffers(MERGE_MAX, stored, batch).to_pylist() == [[1, 2, 0], [3], [1], [1]]
    assert merge_buffers(MERGE_MIN, stored, batch).to_pylist() == [[1, 2], [3], [1], [None, 5]]


def test_segments_of_arrays_and_struct_ranks():
    t = pa.list_(pa.float64())
    values = pa.array([[1.0], [float("nan")], None, [2.0], [-0.0, 1.0]], t)
    assert merge_buffer_segments(MERGE_MAX, values, np.array([0, 2])).to_pylist()[1] == [2.0]
    assert math.isnan(merge_buffer_segments(MERGE_MAX, values, np.array([0, 2])).to_pylist()[0][0])  # NaN above numbers
    assert merge_buffer_segments(MERGE_MIN, values, np.array([0, 2])).to_pylist() == [[1.0], [-0.0, 1.0]]
    s = pa.array([{"a": 1, "b": "x"}, {"a": None, "b": "y"}, {"a": 1, "b": "w"}, None], pa.struct([("a", pa.int32()), ("b", pa.string())]))
    assert spark_order_ranks(s).to_pylist() == [2, 0, 1, None]


@pytest.mark.parametrize("rule", ["sum", "sum0"])
def test_segments_of_day_time_intervals_sum(rule):
    """A session's buffers of a day-time interval sum (``avg``'s sum): Arrow has no grouped sum
    of durations (a random query's finding), so they sum as microseconds."""
    t = pa.duration("us")
    values = pa.array([dt.timedelta(seconds=1), None, dt.timedelta(seconds=2), None, None, dt.timedelta(microseconds=5)], t)
    out = merge_buffer_segments(rule, values, np.array([0, 3, 5]))
    assert out.type == t
    assert out.to_pylist() == [dt.timedelta(seconds=3), dt.timedelta(0) if rule == "sum0" else None, dt.timedelta(microseconds=5)]
