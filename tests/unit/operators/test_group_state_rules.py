"""applyInPandasWithState without Spark: the timeout rules, the state write rule, PySpark's
GroupState as the step uses it, and the state step itself on Arrow batches (keys with data
first, then timed-out keys; state rows in Spark's format version 2; no commit on a user error)."""

from __future__ import annotations

import glob

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.errors import PySparkRuntimeError, PySparkTypeError, PySparkValueError
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import LongType, StringType, StructField, StructType

from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.flat_map_groups_with_state import (
    EVENT_TIME_TIMEOUT,
    NO_TIMEOUT,
    PROCESSING_TIME_TIMEOUT,
    FlatMapGroupsWithStateInfo,
    FlatMapGroupsWithStateStep,
    state_write_action,
    timed_out_mask,
    timeout_threshold,
)
from statestream.state import clear_provider_cache

# ------------------------------------------------------------------------------------------------
# Pure rules
# ------------------------------------------------------------------------------------------------


def test_timeout_threshold_per_mode():
    assert timeout_threshold(PROCESSING_TIME_TIMEOUT, 5000, 100) == 5000
    assert timeout_threshold(EVENT_TIME_TIMEOUT, 5000, 100) == 100
    assert timeout_threshold(NO_TIMEOUT, 5000, 100) is None


def test_timed_out_is_strictly_below_and_set():
    t = np.array([-1, 99, 100, 101, 0])
    assert timed_out_mask(t, 100).tolist() == [False, True, False, False, True]


@pytest.mark.parametrize(
    ("removed", "updated", "timeout", "action"),
    [
        (True, False, -1, "remove"),
        (True, False, 500, "put"),  # removed but a timeout is set: a row with a null state stays
        (False, True, -1, "put"),
        (False, False, 500, "put"),
        (False, False, -1, None),  # untouched: the stored row (and its old timeout) stays
    ],
)
def test_state_write_action(removed, updated, timeout, action):
    assert state_write_action(removed, updated, timeout) == action


# ------------------------------------------------------------------------------------------------
# PySpark's GroupState, constructed as the step constructs it
# ------------------------------------------------------------------------------------------------

STATE = StructType([StructField("n", LongType())])


def group_state(conf=PROCESSING_TIME_TIMEOUT, value=None, wm=-1, present=False, ts=1000):
    from pyspark.sql.types import Row

    return GroupState(
        optionalValue=Row(n=value) if value is not None else None,
        batchProcessingTimeMs=ts,
        eventTimeWatermarkMs=wm,
        timeoutConf=conf,
        hasTimedOut=False,
        watermarkPresent=present,
        defined=value is not None,
        updated=False,
        removed=False,
        timeoutTimestamp=-1,
        keyAsUnsafe=b"",
        valueSchema=STATE,
    )


def test_group_state_value_and_errors():
    s = group_state()
    assert not s.exists and s.getOption is None
    with pytest.raises(PySparkValueError, match="STATE_NOT_EXISTS"):
        s.get  # noqa: B018
    s.update((3,))
    assert s.get == (3,) and s.exists
    with pytest.raises(PySparkTypeError, match="CANNOT_BE_NONE"):
        s.update(None)
    s.remove()
    assert not s.exists


def test_group_state_timeouts():
    s = group_state(PROCESSING_TIME_TIMEOUT, ts=1000)
    s.setTimeoutDuration(500)
    assert s._timeout_timestamp == 1500
    with pytest.raises(PySparkValueError, match="VALUE_NOT_POSITIVE"):
        s.setTimeoutDuration(0)
    with pytest.raises(PySparkRuntimeError, match="CANNOT_WITHOUT"):
        s.setTimeoutTimestamp(5000)
    e = group_state(EVENT_TIME_TIMEOUT, wm=2000, present=True)
    with pytest.raises(PySparkValueError, match="INVALID_TIMEOUT_TIMESTAMP"):
        e.setTimeoutTimestamp(1999)
    e.setTimeoutTimestamp(2000)
    assert e.getCurrentWatermarkMs() == 2000
    with pytest.raises(PySparkRuntimeError, match="CANNOT_WITHOUT"):
        group_state(NO_TIMEOUT).getCurrentWatermarkMs()


# ------------------------------------------------------------------------------------------------
# The state step on Arrow batches
# ------------------------------------------------------------------------------------------------

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), (PARTITION_ID_COLUMN, pa.int32())])
OUT = StructType([StructField("k", StringType()), StructField("n", LongType()), StructField("timedOut", StringType())])
CALLS: list[tuple] = []


def counting(key, pdfs, state):
    CALLS.append((key[0], state.hasTimedOut))
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [state.getOption[0] if state.exists else -1], "timedOut": ["yes"]})
        return
    n = sum(len(p) for p in pdfs) + (state.get[0] if state.exists else 0)
    state.update((n,))
    state.setTimeoutDuration(1000)
    if key[0] == "boom":
        raise ValueError("user failure")
    yield pd.DataFrame({"k": [key[0]], "n": [n], "timedOut": ["no"]})


def batch(*items):
    ks, vs = zip(*items) if items else ((), ())
    return pa.RecordBatch.from_arrays(
        [pa.array(ks, pa.string()), pa.array(vs, pa.int64()), pa.array([0] * len(ks), pa.int32())], schema=SCHEMA
    )


def step(tmp_path, version, ts):
    info = FlatMapGroupsWithStateInfo(
        key_indices=(0,), key_names=("k",), func=counting, output_schema=OUT, state_schema=STATE,
        func_output_mode="update", timeout_conf=PROCESSING_TIME_TIMEOUT,
    )
    return FlatMapGroupsWithStateStep(
        state_root=str(tmp_path), run_id="r", operator_id=0, version=version, info=info, input_schema=SCHEMA,
        data_names=("k", "v"), w_late_ms=None, w_evict_ms=None, batch_timestamp_ms=ts, timezone="UTC",
    )


@pytest.fixture(autouse=True)
def _fresh():
    clear_provider_cache()
    CALLS.clear()
    yield
    clear_provider_cache()


def test_step_keys_with_data_then_timeouts(tmp_path):
    out, m = step(tmp_path, 0, 10_000).process(0, [batch(("a", 1), ("b", 2), ("a", 3))])
    assert sorted(out.to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "n": 2, "timedOut": "no"}, {"k": "b", "n": 1, "timedOut": "no"},
    ]
    assert (m["numUpdatedStateRows"], m["numRemovedStateRows"], m["numTotalStateRows"]) == (2, 0, 2)
    CALLS.clear()
    # batch 1 at 10_500: a gets data (timeout moves to 11_500); nothing is due yet
    out, m = step(tmp_path, 1, 10_500).process(0, [batch(("a", 5))])
    assert out.to_pylist() == [{"k": "a", "n": 3, "timedOut": "no"}]
    CALLS.clear()
    # batch 2 at 11_200: b (timeout 11_000) is due, a (11_500) is not; data for c comes first
    out, m = step(tmp_path, 2, 11_200).process(0, [batch(("c", 1))])
    assert CALLS == [("c", False), ("b", True)]
    assert out.to_pylist() == [{"k": "c", "n": 1, "timedOut": "no"}, {"k": "b", "n": -1, "timedOut": "yes"}]
    assert (m["numUpdatedStateRows"], m["numRemovedStateRows"], m["numTotalStateRows"]) == (1, 1, 2)


def test_state_rows_follow_spark_format_v2(tmp_path):
    from statestream.state.provider import get_provider
    from statestream.state.store import StateStoreConf, StateStoreId

    s = step(tmp_path, 0, 10_000)
    s.process(0, [batch(("a", 1))])
    value_schema = s._value_schema()
    assert value_schema.names == ["groupState", "timeoutTimestamp"]
    provider = get_provider(StateStoreId(str(tmp_path), 0, 0), pa.schema([("k", pa.string())]), value_schema, StateStoreConf(), "r")
    assert provider.get_read_store(1).table().to_pylist() == [{"k": "a", "groupState": {"n": 1}, "timeoutTimestamp": 11_000}]


def test_user_error_commits_nothing(tmp_path):
    with pytest.raises(ValueError, match="user failure"):
        step(tmp_path, 0, 10_000).process(0, [batch(("a", 1), ("boom", 2))])
    assert not glob.glob(str(tmp_path / "0" / "0" / "*.delta"))


def test_state_timestamps_round_trip_as_session_wall_clock():
    """A state's timestamps reach the function as naive wall-clock times of the session zone (as
    Spark's JVM sends them) and a naive time the function stores is read in that zone."""
    import datetime as dt

    from statestream.operators.python_state_values import from_session_wall_clock as _aware_timestamps
    from statestream.operators.python_state_values import session_zone as _zone
    from statestream.operators.python_state_values import to_session_wall_clock as _naive_timestamps

    t = pa.struct([("at", pa.timestamp("us", tz="UTC")), ("inner", pa.struct([("t", pa.timestamp("us", tz="UTC"))]))])
    zone = _zone("America/New_York")
    stored = {"at": dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), "inner": {"t": dt.datetime(2024, 7, 1, 12, tzinfo=dt.timezone.utc)}}
    naive = _naive_timestamps(stored, t, zone)
    assert naive == {"at": dt.datetime(2024, 1, 1, 7), "inner": {"t": dt.datetime(2024, 7, 1, 8)}}
    back = pa.array([_aware_timestamps(naive, t, zone)], type=t).to_pylist()[0]
    assert back == stored
    # a nested struct given as a tuple (a Row) keeps its values
    assert _aware_timestamps({"at": None, "inner": (dt.datetime(2024, 7, 1, 8),)}, t, zone)["inner"]["t"] == dt.datetime(2024, 7, 1, 8, tzinfo=zone)
