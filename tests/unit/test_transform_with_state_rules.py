"""The transformWithState rules that need no Spark: TTL, timers, timer values, the listing
order of a key's timers and the output event-time check."""

from __future__ import annotations

import numpy as np

from statestream.operators.stateful_processor_handle import (
    EVENT_TIME,
    NO_TIME,
    PROCESSING_TIME,
    time_mode_shown,
    timer_expired,
    timer_list_order,
    timer_store_name,
    timer_threshold,
    timer_values,
    ttl_expiration_ms,
    ttl_expired,
)
from statestream.operators.transform_with_state import emitted_too_old


def test_ttl_expires_when_the_batch_time_reaches_it():
    exp = ttl_expiration_ms(1_000, 500)
    assert exp == 1_500
    assert ttl_expired(np.array([1_499, 1_500, 1_501]), 1_500).tolist() == [True, True, False]


def test_timers_fire_at_or_below_the_threshold():
    # Spark's engine fires a timer set at exactly the watermark (4999 and 5000 at watermark 5000)
    assert timer_expired([999, 1_000, 1_001], 1_000).tolist() == [True, True, False]


def test_timer_threshold_per_time_mode():
    assert timer_threshold(PROCESSING_TIME, 5_000, 2_000) == 5_000
    assert timer_threshold(EVENT_TIME, 5_000, 2_000) == 2_000
    assert timer_threshold(EVENT_TIME, 5_000, None) is None
    assert timer_threshold(NO_TIME, 5_000, 2_000) is None


def test_timer_values_are_minus_one_without_a_time_mode():
    assert timer_values(NO_TIME, 5_000, 2_000) == (-1, -1)
    assert timer_values(PROCESSING_TIME, 5_000, None) == (5_000, -1)
    assert timer_values(EVENT_TIME, 5_000, 0) == (5_000, 0)


def test_list_timers_follow_the_byte_order_of_little_endian_longs():
    # 20000 = 0x4E20 (first byte 0x20) sorts before 12000 = 0x2EE0 (first byte 0xE0), as Spark lists them
    assert timer_list_order([12_000, 20_000]) == [20_000, 12_000]
    assert timer_list_order([256, 1, 2]) == [256, 1, 2]
    assert timer_list_order([]) == []


def test_time_mode_names_as_spark_prints_them():
    assert [time_mode_shown(m) for m in ("None", "ProcessingTime", "eventtime")] == ["NoTime", "ProcessingTime", "EventTime"]
    assert timer_store_name(PROCESSING_TIME) == "$procTimers_keyToTimestamp"
    assert timer_store_name(EVENT_TIME) == "$eventTimers_keyToTimestamp"


def test_output_event_time_older_than_the_watermark_is_found():
    assert emitted_too_old(np.array([5_000, 3_000, 7_000]), 4_000) == 3_000
    assert emitted_too_old(np.array([5_000, 4_000]), 4_000) is None
    assert emitted_too_old(np.array([], dtype=np.int64), 4_000) is None
