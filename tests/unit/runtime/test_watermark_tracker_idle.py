"""Idle inputs (opt-in): an input without rows for the idle timeout takes no part in the global
watermark, by the batches' clock; without the timeout it holds the watermark back (Spark)."""

from __future__ import annotations

from statestream.runtime.watermark import WatermarkTracker

DELAYS = {"a": 1_000, "b": 1_000}


def stats(max_ms: int) -> tuple[int, int, int, int]:
    return (max_ms, max_ms, max_ms, 1)


def test_without_idleness_a_quiet_input_holds_the_watermark():
    t = WatermarkTracker("min")
    t.update_watermark({"a": stats(10_000), "b": stats(5_000)}, DELAYS, now_ms=0)
    for now in range(1, 10):
        t.update_watermark({"a": stats(10_000 + now * 10_000)}, DELAYS, now_ms=now * 60_000)
    assert t.current_watermark == 4_000


def test_an_idle_input_stops_holding_it_back_and_comes_back():
    t = WatermarkTracker("min", idle_timeout_ms=120_000)
    t.update_watermark({"a": stats(10_000), "b": stats(5_000)}, DELAYS, now_ms=0)
    assert t.current_watermark == 4_000
    t.update_watermark({"a": stats(20_000)}, DELAYS, now_ms=60_000)
    assert t.current_watermark == 4_000 and not t.idle_nodes(60_000)  # b quiet for 60 s: still counts
    t.update_watermark({"a": stats(30_000)}, DELAYS, now_ms=120_000)
    assert t.idle_nodes(120_000) == {"b"} and t.current_watermark == 29_000
    # b has rows again: it takes part at once, and the watermark never goes back
    t.update_watermark({"a": stats(40_000), "b": stats(6_000)}, DELAYS, now_ms=130_000)
    assert t.current_watermark == 29_000 and not t.idle_nodes(130_000)
    t.update_watermark({"a": stats(50_000), "b": stats(45_000)}, DELAYS, now_ms=140_000)
    assert t.current_watermark == 44_000


def test_a_node_never_seen_counts_from_the_first_batch_and_all_idle_keeps_it():
    t = WatermarkTracker("min", idle_timeout_ms=30_000)
    t.update_watermark({"a": stats(10_000)}, DELAYS, now_ms=0)
    assert t.current_watermark == 0  # b never had a row: 0, and not idle yet
    t.update_watermark({"a": stats(11_000)}, DELAYS, now_ms=30_000)
    assert t.current_watermark == 10_000
    t.update_watermark({}, DELAYS, now_ms=100_000)  # both idle: nothing to choose from
    assert t.current_watermark == 10_000
