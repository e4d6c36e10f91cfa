"""The transformWithState rules that need no Spark: TTL, timers, timer values, the listing
order of a key's timers and the output event-time check."""

from __future__ import annotations

import json

import numpy as np
import pytest

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
from statestream.operators.transform_with_state import check_restart, emitted_too_old, merged_variables


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


# -- restart checks (the texts are those Spark 4.1's engine gave for the same restarts) -----------

def _struct(**fields):
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields.items()]}


COUNT_TOTAL = _struct(count="long", total="long")
GROUPING = _struct(k="string")
MODES = {"timeMode": "NoTime", "outputMode": "Update"}


def _error(stored, new, stored_props=MODES, new_props=MODES) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the text is the point
        check_restart(GROUPING, stored, new, stored_props, new_props)
    return str(info.value)


def test_restart_refuses_a_variable_changing_kind():
    listed = {"type": "array", "elementType": COUNT_TOTAL, "containsNull": True}
    assert _error(_struct(state=COUNT_TOTAL), _struct(state=listed)) == (
        "[STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE] Cannot change state to ListState between query restarts. "
        "Please set state to ValueState, or restart with a new checkpoint directory. SQLSTATE: 42K06"
    )


def test_restart_refuses_a_changed_map_user_key_naming_both_key_schemas():
    def mapped(user_type):
        return {"type": "map", "keyType": _struct(u=user_type), "valueType": _struct(count="long"), "valueContainsNull": True}

    text = _error(_struct(m=mapped("long")), _struct(m=mapped("string")))
    assert text.startswith("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]")
    assert (
        "Existing key_schema=StructType(StructField(key,StructType(StructField(k,StringType,true)),true),"
        "StructField(userKey,StructType(StructField(u,LongType,true)),true)) and new key_schema="
        "StructType(StructField(key,StructType(StructField(k,StringType,true)),true),"
        "StructField(userKey,StructType(StructField(u,StringType,true)),true))."
    ) in text


@pytest.mark.parametrize(
    ("name", "old", "new"), [("timeMode", "NoTime", "ProcessingTime"), ("outputMode", "Update", "Append")]
)
def test_restart_refuses_a_changed_mode(name, old, new):
    assert _error(_struct(s=COUNT_TOTAL), _struct(s=COUNT_TOTAL), {**MODES, name: old}, {**MODES, name: new}) == (
        f"[STATE_STORE_INVALID_CONFIG_AFTER_RESTART] Cannot change {name} from {old} to {new} between restarts. "
        f"Please set {name} to {old}, or restart with a new checkpoint directory. SQLSTATE: 42K06"
    )


def test_restart_allows_new_and_dropped_variables_and_keeps_the_undeleted_ones_recorded():
    check_restart(GROUPING, _struct(a=COUNT_TOTAL, b=COUNT_TOTAL), _struct(a=COUNT_TOTAL, c="long"), MODES, MODES)
    check_restart(GROUPING, _struct(a=COUNT_TOTAL), _struct(a=COUNT_TOTAL), None, MODES)  # an older checkpoint
    merged = merged_variables(_struct(a=COUNT_TOTAL, b=COUNT_TOTAL, d=COUNT_TOTAL), _struct(a="long", c="long"), ("d",))
    assert [f["name"] for f in merged["fields"]] == ["a", "c", "b"]


def test_each_store_records_the_batch_that_first_declared_it():
    from statestream.operators.transform_with_state import FIRST_BATCH_PROPERTY, stores_first_batch

    timers = "$eventTimers_keyToTimestamp"
    # a new query: every store from its first batch
    assert stores_first_batch(None, None, ("a", timers), (), 0) == {"a": 0, timers: 0}
    # a restart adding b and deleting c: a and the timers keep their batch, b begins now
    props = {FIRST_BATCH_PROPERTY: '{"a": 0, "c": 0, "' + timers + '": 0}'}
    assert stores_first_batch(props, _struct(a="long", c="long"), ("a", "b", timers), ("c",), 7) == {"a": 0, "b": 7, timers: 0}
    # a checkpoint written before the record: its known stores stay unrecorded (inferred from
    # files), on this restart and on every later one
    first = stores_first_batch(MODES, _struct(a="long"), ("a", "b", timers), (), 7)
    assert first == {"b": 7}
    again = {**MODES, FIRST_BATCH_PROPERTY: json.dumps(first)}
    assert stores_first_batch(again, _struct(a="long", b="long"), ("a", "b", timers), (), 20) == {"b": 7}


def test_a_store_left_out_of_a_run_is_frozen_until_declared_again():
    from statestream.operators.transform_with_state import stores_dormant

    stored = _struct(a="long", b="long")
    # run 2 begins at batch 3 and declares only a: b's files stop at version 3
    assert stores_dormant({}, stored, ("a",), (), 3) == {"b": (3, None)}
    # run 3 (batch 5) still without b: frozen where it was
    assert stores_dormant({"b": (3, None)}, stored, ("a",), (), 5) == {"b": (3, None)}
    # run 4 (batch 8) declares b again: batch 8 loads version 3
    assert stores_dormant({"b": (3, None)}, stored, ("a", "b"), (), 8) == {"b": (3, 8)}
    # run 4 crashed before committing batch 8: run 5 re-runs it and declares b again
    assert stores_dormant({"b": (3, 8)}, stored, ("a", "b"), (), 8) == {"b": (3, 8)}
    # ... or leaves b out again: still frozen at 3
    assert stores_dormant({"b": (3, 8)}, stored, ("a",), (), 8) == {"b": (3, None)}
    # batch 8 committed: the record stays (versions 4..8 read as 3) while b is declared
    assert stores_dormant({"b": (3, 8)}, stored, ("a", "b"), (), 12) == {"b": (3, 8)}
    # and a later run without b freezes it anew, at its own first batch
    assert stores_dormant({"b": (3, 8)}, stored, ("a",), (), 12) == {"b": (12, None)}
    # deleteIfExists drops the record
    assert stores_dormant({"b": (3, None)}, stored, ("a",), ("b",), 5) == {}
    # the timers' store is never in the value schema, so never dormant
    assert stores_dormant({}, stored, ("a", "b", "$procTimers_keyToTimestamp"), (), 3) == {}
