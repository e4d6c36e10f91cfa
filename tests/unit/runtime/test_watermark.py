"""Event-time statistics, watermark policy and tracker, and the per-operator watermark rules."""

from __future__ import annotations

import pytest

from statestream.runtime.intervals import IllegalArgumentError
from statestream.runtime.watermark import (
    EventTimeStats,
    MultipleWatermarkPolicy,
    WatermarkTracker,
    is_older_than,
    late_event_and_eviction_watermarks,
    micros_to_millis,
    parse_policy,
)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


# -- EventTimeStats -------------------------------------------------------------------------------


def test_zero_value():
    z = EventTimeStats.zero()
    assert (z.max, z.min, z.avg, z.count) == (LONG_MIN, LONG_MAX, 0.0, 0)
    assert z.is_empty


def test_add_running_mean():
    s = EventTimeStats.zero()
    for t in (10_000, 12_000, 11_000):
        s.add(t)
    assert (s.max, s.min, s.count) == (12_000, 10_000, 3)
    assert s.avg == 11_000.0
    assert s.avg_ms() == 11_000


def test_null_event_time_added_as_zero_lowers_min_and_avg():
    # Spark 4.1 with values {null, 20 s, 30 s}: min 0, avg 16.666 s, max 30 s
    s = EventTimeStats.zero().add(0).add(20_000).add(30_000)
    assert (s.min, s.max, s.avg_ms()) == (0, 30_000, 16_666)


def test_merge_weighted_mean_and_empty_sides():
    a = EventTimeStats.zero().add(10).add(20)
    b = EventTimeStats.zero().add(40)
    a.merge(b)
    assert (a.max, a.min, a.count) == (40, 10, 3)
    assert a.avg == pytest.approx(70 / 3)
    c = EventTimeStats.zero().merge(EventTimeStats.zero().add(5))
    assert (c.max, c.min, c.avg, c.count) == (5, 5, 5.0, 1)
    d = EventTimeStats.zero().add(7).merge(EventTimeStats.zero())
    assert (d.max, d.min, d.avg, d.count) == (7, 7, 7.0, 1)


def test_merge_is_order_independent_for_max_min_count():
    parts = [EventTimeStats.zero().add(t) for t in (5, 1, 9, 3)]
    left = EventTimeStats.zero()
    for p in parts:
        left.merge(EventTimeStats(p.max, p.min, p.avg, p.count))
    right = EventTimeStats.zero()
    for p in reversed(parts):
        right.merge(EventTimeStats(p.max, p.min, p.avg, p.count))
    assert (left.max, left.min, left.count) == (right.max, right.min, right.count) == (9, 1, 4)
    assert left.avg == pytest.approx(right.avg) == pytest.approx(4.5)


def test_from_aggregates():
    s = EventTimeStats.from_aggregates(10_000, 12_000, 33_000, 3)
    assert (s.max, s.min, s.avg, s.count) == (12_000, 10_000, 11_000.0, 3)
    s = EventTimeStats.from_aggregates(1, 2, 1.5, 2, is_avg=True)
    assert s.avg == 1.5
    assert EventTimeStats.from_aggregates(None, None, None, 0).is_empty
    big = EventTimeStats.from_aggregates(2**62, 2**62, 3 * 2**62, 3)
    assert big.avg == float(2**62)


def test_micros_to_millis_floors():
    assert micros_to_millis(1999) == 1
    assert micros_to_millis(-1) == -1


# -- policy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "policy"), [("min", "MIN"), ("MAX", "MAX"), ("Min", "MIN"), (None, "MIN")])
def test_policy_parse(value, policy):
    assert parse_policy(value) is MultipleWatermarkPolicy[policy]


@pytest.mark.parametrize(("value", "shown"), [("random", "random"), ("", ""), ("MEDIAN", "median")])
def test_policy_invalid(value, shown):
    with pytest.raises(IllegalArgumentError) as err:
        MultipleWatermarkPolicy.parse(value)
    assert str(err.value) == (
        f"[INVALID_CONF_VALUE.REQUIREMENT] The value '{shown}' in the config "
        '"spark.sql.streaming.multipleWatermarkPolicy" is invalid. Invalid value for '
        "'spark.sql.streaming.multipleWatermarkPolicy'. Valid values are 'min' and 'max' SQLSTATE: 22022"
    )
    assert err.value.getCondition() == "INVALID_CONF_VALUE.REQUIREMENT"
    assert err.value.getSqlState() == "22022"


def test_policy_choose():
    assert MultipleWatermarkPolicy.MIN.choose([3, 1, 2]) == 1
    assert MultipleWatermarkPolicy.MAX.choose([3, 1, 2]) == 3
    with pytest.raises(ValueError, match="no watermark node"):
        MultipleWatermarkPolicy.MIN.choose([])


# -- tracker --------------------------------------------------------------------------------------


def _stats(*times: int) -> EventTimeStats:
    s = EventTimeStats.zero()
    for t in times:
        s.add(t)
    return s


def test_tracker_single_node_and_never_negative():
    tr = WatermarkTracker()
    assert tr.current_watermark == 0
    # first data at 5 s with a 10 s delay: candidate -5 s, G stays 0
    assert tr.update_watermark({"a": _stats(5_000)}, {"a": 10_000}) is False
    assert tr.current_watermark == 0
    assert tr.node_watermarks == {"a": -5_000}
    assert tr.update_watermark({"a": _stats(15_000, 12_000)}, {"a": 10_000}) is True
    assert tr.current_watermark == 5_000
    # older data cannot move it back
    assert tr.update_watermark({"a": _stats(1_000)}, {"a": 10_000}) is False
    assert tr.current_watermark == 5_000
    assert tr.node_watermarks == {"a": 5_000}
    # a batch without rows changes nothing
    assert tr.update_watermark({"a": EventTimeStats.zero()}, {"a": 10_000}) is False
    assert tr.update_watermark({}, {"a": 10_000}) is False
    assert tr.update_watermark({}, {}) is False


def test_tracker_min_policy_idle_input_holds_zero():
    tr = WatermarkTracker("min")
    delays = {"a": 10_000, "b": 15_000}
    assert tr.update_watermark({"a": _stats(100_000)}, delays) is False
    assert tr.current_watermark == 0
    assert tr.node_watermarks == {"a": 90_000, "b": 0}
    assert tr.update_watermark({"b": _stats(50_000)}, delays) is True
    assert tr.current_watermark == 35_000


def test_tracker_max_policy_follows_fastest():
    tr = WatermarkTracker(MultipleWatermarkPolicy.MAX)
    delays = {"a": 10_000, "b": 15_000}
    assert tr.update_watermark({"a": _stats(100_000)}, delays) is True
    assert tr.current_watermark == 90_000
    assert tr.update_watermark({"b": _stats(200_000)}, delays) is True
    assert tr.current_watermark == 185_000


def test_tracker_restart_keeps_only_global():
    tr = WatermarkTracker()
    tr.set_watermark(30_000)
    assert tr.current_watermark == 30_000
    assert tr.node_watermarks == {}
    # per-node values start empty: a lower candidate does not lower G
    assert tr.update_watermark({"a": _stats(20_000)}, {"a": 10_000}) is False
    assert tr.current_watermark == 30_000


def test_tracker_accepts_min_max_avg_count_tuples():
    tr = WatermarkTracker()
    assert tr.update_watermark_from({"a": (10_000, 40_000, 20_000.0, 3)}, {"a": 10_000}) is True
    assert tr.current_watermark == 30_000


def test_tracker_stats_for_unknown_node():
    with pytest.raises(KeyError):
        WatermarkTracker().update_watermark({"x": _stats(1)}, {"a": 0})


# -- per-operator watermarks ----------------------------------------------------------------------


def test_late_and_eviction_watermarks():
    assert late_event_and_eviction_watermarks(None, 0) == (0, 0)
    assert late_event_and_eviction_watermarks(0, 5_000) == (0, 5_000)
    assert late_event_and_eviction_watermarks(5_000, 15_000) == (5_000, 15_000)
    assert late_event_and_eviction_watermarks(5_000, 15_000, allow_multiple=False) == (15_000, 15_000)


def test_is_older_than_inclusive_and_units():
    assert is_older_than(15_000_000, 15_000)  # equality is old
    assert not is_older_than(15_000_001, 15_000)
    assert is_older_than(14_999_999, 15_000)
    assert not is_older_than(None, 15_000)
    assert not is_older_than(1, None)
    assert is_older_than(-5, 0)


def test_event_time_sum_parts_add_up_to_the_exact_sum():
    from statestream.operators.watermark import SUM_PARTS, event_time_sum

    # times before 1970, around 0, today's, and the extremes a timestamp can hold, in ms
    values = [-1, -1001, 0, 1, 1_764_000_000_123, -62_135_596_800_000, 9_223_372_036_854_775, -9_223_372_036_854_775]
    observed = {"count": len(values)}
    for name, shift, mask in SUM_PARTS:
        parts = [(v >> shift) & mask if mask is not None else v >> shift for v in values]
        # every part fits a long with room for 2^40 rows of it
        assert all(abs(p) < 2**23 for p in parts)
        observed[name] = sum(parts)
    assert event_time_sum(observed) == sum(values)
    assert event_time_sum({"sum_hi": 1}) is None


def test_a_source_read_straight_into_a_watermark_is_counted_by_it():
    from statestream.operators.basic import StatelessExec, StreamingRelationExec, UnionExec
    from statestream.operators.watermark import EventTimeWatermarkExec, sources_counted_by_watermark

    direct = EventTimeWatermarkExec(child=StreamingRelationExec(source_index=0), column="t", node_id="w0")
    projected = EventTimeWatermarkExec(child=StatelessExec(child=StreamingRelationExec(source_index=1)), column="t", node_id="w1")
    plan = UnionExec(inputs=(direct, projected))
    assert sources_counted_by_watermark(plan, {0: 1, 1: 1}) == {0: "w0"}
    # a source scanned twice (a self-union) is counted by its own observation: one node sees half
    assert sources_counted_by_watermark(plan, {0: 2, 1: 1}) == {}
