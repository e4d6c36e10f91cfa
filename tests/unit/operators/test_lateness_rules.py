"""The lateness measure's rules (``operators.lateness``), without Spark."""

from __future__ import annotations

import math

import pytest

from statestream.operators.lateness import NUM_BUCKETS, LatenessHistogram, bucket_delay_ms, bucket_of, reference_max_ms
from statestream.runtime.watermark import WatermarkTracker


@pytest.mark.parametrize("lateness", [*range(0, 3000), 2**20 - 1, 2**20, 2**20 + 1, 10**9, 2**40 - 1])
def test_a_bucket_delay_keeps_its_rows_and_the_bucket_before_does_not(lateness):
    b = bucket_of(lateness)
    assert lateness < bucket_delay_ms(b)  # kept: lateness below the delay
    if b > 0:
        assert lateness >= bucket_delay_ms(b - 1)  # the delay one bucket down drops it


def test_buckets_are_four_to_a_doubling_and_bounded():
    assert [bucket_delay_ms(b) for b in range(0, 13, 4)] == [1, 2, 4, 8]
    assert bucket_of(2**60) == NUM_BUCKETS - 1
    assert bucket_of(1000) == math.floor(4 * math.log2(1000)) + 1
    with pytest.raises(ValueError, match="at least 0"):
        bucket_of(-1)


def test_the_least_delay_for_a_share_and_what_a_delay_keeps():
    h = LatenessHistogram(ahead=50, buckets={bucket_of(100): 30, bucket_of(5000): 19, bucket_of(60_000): 1})
    assert h.rows == 100
    assert h.delay_for(0.5) == 0  # the rows ahead are enough
    assert h.delay_for(0.8) == bucket_delay_ms(bucket_of(100))
    assert h.delay_for(0.99) == bucket_delay_ms(bucket_of(5000))
    assert h.delay_for(1.0) == bucket_delay_ms(bucket_of(60_000))
    assert h.kept_by(0) == 50 and h.kept_by(h.delay_for(0.99)) == 99
    with pytest.raises(ValueError, match="completeness"):
        h.delay_for(0)


def test_histograms_merge_and_round_trip():
    a = LatenessHistogram(ahead=3, buckets={1: 2})
    b = LatenessHistogram.from_json(LatenessHistogram(ahead=1, buckets={1: 1, 9: 4}).to_json())
    assert a.merge(b) == LatenessHistogram(ahead=4, buckets={1: 3, 9: 4})


def test_an_observation_gives_the_rows_outside_its_buckets_as_ahead():
    # Spark's histogram_numeric rows (Row-like tuples) or their JSON (a reused plan's)
    assert LatenessHistogram.from_observation(10, [(0.0, 2.0), (5.0, 3.0)]) == LatenessHistogram(5, {0: 2, 5: 3})
    assert LatenessHistogram.from_observation(4, [{"x": 7.0, "y": 1.0}]) == LatenessHistogram(3, {7: 1})
    assert LatenessHistogram.from_observation(4, None) == LatenessHistogram(4, {})


def test_the_reference_comes_from_the_snapshot_else_the_watermark():
    assert reference_max_ms({"w": 9000}, "w", 1000, 0) == 9000
    assert reference_max_ms({"other": 1}, "w", 1000, 7000) == 8000  # after a restart
    assert reference_max_ms({}, "w", 1000, 0) is None  # no row can be late yet


def test_the_tracker_keeps_each_inputs_largest_event_time():
    t = WatermarkTracker()
    t.update_watermark({"a": (0, 5000, 100.0, 3)}, {"a": 1000, "b": 0})
    t.update_watermark({"a": (0, 4000, 100.0, 3), "b": (0, 200, 200.0, 1)}, {"a": 1000, "b": 0})
    assert t.node_max_event_times == {"a": 5000, "b": 200}
