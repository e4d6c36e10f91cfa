"""Session windows without Spark: the merge rule, key grouping, run-wise buffer merges, and the
fused state step of ``SessionWindowStateStoreSaveExec`` over a real (file-backed) state store."""

from __future__ import annotations

import datetime as dt
import uuid

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.session_window import (
    INPUT_PARTITION_COLUMN,
    SESSION_END_COLUMN,
    SESSION_START_COLUMN,
    SessionWindowStateStep,
    merge_sessions,
)
from statestream.operators.aggregate_merge import merge_buffer_segments
from statestream.state.keys import group_ids
from statestream.state.provider import clear_provider_cache

# ------------------------------------------------------------------------------------------
# merge rule
# ------------------------------------------------------------------------------------------


def _sessions(keys, starts, ends, origin=None):
    m = merge_sessions(np.array(keys), np.array(starts), np.array(ends), None if origin is None else np.array(origin))
    k = np.array(keys)[m.order][m.starts]
    return sorted(zip(k.tolist(), m.session_start.tolist(), m.session_end.tolist()))


def test_touching_sessions_merge_and_a_gap_splits():
    # gap 10: events at 10 and 20 touch -> one session; 10 and 21 -> two
    assert _sessions([0, 0], [10, 20], [20, 30]) == [(0, 10, 30)]
    assert _sessions([0, 0], [10, 21], [20, 31]) == [(0, 10, 20), (0, 21, 31)]


def test_nested_and_chained_sessions_follow_the_running_maximum():
    # a long session swallows shorter ones that start inside it, even after a short one ended
    assert _sessions([0, 0, 0, 0], [1, 3, 15, 34], [35, 8, 20, 39]) == [(0, 1, 39)]
    # a chain bridged only through the running end, input given out of order
    assert _sessions([0, 0, 0], [12, 2, 30], [32, 22, 50]) == [(0, 2, 50)]


def test_keys_never_merge_with_each_other():
    got = _sessions([1, 0, 1, 0, 2], [5, 5, 9, 50, 1], [10, 10, 14, 55, 100])
    assert got == [(0, 5, 10), (0, 50, 55), (1, 5, 14), (2, 1, 100)]


def test_first_marks_absorbed_rows_and_ties_put_stored_rows_first():
    m = merge_sessions(np.array([0, 0, 0]), np.array([5, 5, 7]), np.array([10, 10, 12]), np.array([1, 0, 1]))
    assert m.order.tolist() == [1, 0, 2]  # the stored row (origin 0) opens the session
    assert m.first.tolist() == [True, False, False]


def test_large_times_do_not_overflow():
    big = 9_000_000_000_000_000
    assert _sessions([0, 1, 1], [big, -big, 0], [big + 5, -big + 5, 5]) == [(0, big, big + 5), (1, -big, -big + 5), (1, 0, 5)]


def test_empty_input():
    m = merge_sessions(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert len(m.starts) == 0 and len(m.order) == 0


# ------------------------------------------------------------------------------------------
# key grouping and run-wise buffer merges
# ------------------------------------------------------------------------------------------


def test_group_ids_follow_spark_grouping_equality():
    a = pa.array(["x", None, "x", "y", None])
    b = pa.array([1.0, -0.0, 1.0, float("nan"), 0.0])
    ids = group_ids([a, b], 5)
    assert ids[0] == ids[2] and ids[1] == ids[4] and len(set(ids.tolist())) == 3
    d = group_ids([pa.array([0.0, -0.0, float("nan"), float("nan")])], 4)
    assert d[0] == d[1] and d[2] == d[3] and d[0] != d[2]
    s = pa.array([{"a": 1}, None, {"a": None}, {"a": 1}], type=pa.struct([("a", pa.int64())]))
    g = group_ids([s], 4)
    assert g[0] == g[3] and len({g[0], g[1], g[2]}) == 3
    assert group_ids([], 3).tolist() == [0, 0, 0]


RUNS = np.array([0, 2, 3])


@pytest.mark.parametrize(
    ("rule", "values", "expected"),
    [
        ("sum0", pa.array([1, 2, None, 4, 5]), [3, 0, 9]),
        ("sum", pa.array([1, None, None, 4, 5]), [1, None, 9]),
        ("sum", pa.array([1.5, None, None, 4.0, 5.0]), [1.5, None, 9.0]),
        ("min", pa.array([1.5, float("nan"), None, 4.0, 5.0]), [1.5, None, 4.0]),
        ("min", pa.array(["b", "a", None, "z", "y"]), ["a", None, "y"]),
        ("max", pa.array([1, 2, None, -4, 5], pa.int32()), [2, None, 5]),
        ("max", pa.array([True, False, None, False, False]), [True, None, False]),
    ],
)
def test_merge_buffer_segments(rule, values, expected):
    out = merge_buffer_segments(rule, values, RUNS)
    assert out.type == values.type
    assert out.to_pylist() == expected


def test_merge_buffer_segments_nan_is_the_largest_value():
    out = merge_buffer_segments("max", pa.array([1.5, float("nan"), 3.0]), np.array([0, 2]))
    assert np.isnan(out[0].as_py()) and out[1].as_py() == 3.0


def test_merge_buffer_segments_timestamps_and_decimals():
    ts = pa.array([dt.datetime(2024, 1, 1), None, dt.datetime(2023, 1, 1)], pa.timestamp("us", tz="UTC"))
    assert merge_buffer_segments("min", ts, np.array([0])).to_pylist()[0].year == 2023
    dec = pa.array([1, 2, None], pa.decimal128(20, 2))
    assert [str(v) for v in merge_buffer_segments("sum", dec, np.array([0, 2])).to_pylist()] == ["3.00", "None"]


def test_merge_buffer_segments_integer_overflow_is_an_error():
    with pytest.raises(pa.ArrowInvalid):
        merge_buffer_segments("sum", pa.array([2**62, 2**62]), np.array([0]))


# ------------------------------------------------------------------------------------------
# the fused state step
# ------------------------------------------------------------------------------------------

TS = pa.timestamp("us", tz="UTC")
INPUT_SCHEMA = pa.schema(
    [
        ("__k1", pa.string()),
        (INPUT_PARTITION_COLUMN, pa.int32()),
        (SESSION_START_COLUMN, TS),
        (SESSION_END_COLUMN, TS),
        ("__b0_count", pa.int64()),
        ("__b1_sum", pa.int64()),
        (PARTITION_ID_COLUMN, pa.int32()),
    ]
)
SESSION = pa.struct([("start", TS), ("end", TS)])
OUTPUT_SCHEMA = pa.schema([("__k0", SESSION), ("__k1", pa.string()), ("__b0_count", pa.int64()), ("__b1_sum", pa.int64())])


def _rows(*events: tuple[str | None, int], gap: int = 5) -> pa.RecordBatch:
    """Partial-aggregate rows of single events (key, t): initial session [t, t + gap)."""
    n = len(events)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in events], pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array([t * 1_000_000 for _, t in events], pa.int64()).cast(TS),
            pa.array([(t + gap) * 1_000_000 for _, t in events], pa.int64()).cast(TS),
            pa.array([1] * n, pa.int64()),
            pa.array([t for _, t in events], pa.int64()),
            pa.array([0] * n, pa.int32()),
        ],
        schema=INPUT_SCHEMA,
    )


class Query:
    """Runs the step batch after batch on partition 0 of one checkpoint."""

    def __init__(self, root: str, mode: str, merge_local: bool = False) -> None:
        self.root = root
        self.mode = mode
        self.merge_local = merge_local
        self.version = 0
        self.run_id = str(uuid.uuid4())

    def step(self, w_late: int, w_evict: int) -> SessionWindowStateStep:
        return SessionWindowStateStep(
            state_root=self.root, run_id=self.run_id, operator_id=0, version=self.version,
            key_columns=("__k1",), output_columns=("__k0", "__k1"), session_index=0,
            session_field_names=("start", "end"), buffers=(("sum0", ("__b0_count",)), ("sum", ("__b1_sum",))),
            input_schema=INPUT_SCHEMA, output_schema=OUTPUT_SCHEMA, output_mode=self.mode,
            w_late_ms=w_late * 1000, w_evict_ms=w_evict * 1000, event_time_key=SESSION_END_COLUMN,
            event_time_is_struct=False, merge_local=self.merge_local,
        )

    def run(self, *events, w_late: int = 0, w_evict: int = 0) -> tuple[list[tuple], dict]:
        batches = [_rows(*events)] if events else []
        out, m = self.step(w_late, w_evict).process(0, iter(batches))
        self.version += 1
        rows = sorted(
            ((r["__k1"] or "~null"), int(r["__k0"]["start"].timestamp()), int(r["__k0"]["end"].timestamp()), r["__b0_count"], r["__b1_sum"])
            for r in out.to_pylist()
        )
        return rows, m

    def restart(self) -> None:
        self.run_id = str(uuid.uuid4())  # a new run reloads the store from its files
        clear_provider_cache()


def _counts(m: dict) -> tuple[int, int, int, int]:
    return m["numUpdatedStateRows"], m["numRemovedStateRows"], m["numTotalStateRows"], m["numRowsDroppedByWatermark"]


def test_append_merges_bridges_evicts_and_drops_late_rows(tmp_path):
    q = Query(str(tmp_path), "append")
    rows, m = q.run(("a", 1), ("a", 10), ("b", 3))
    assert rows == [] and _counts(m) == (3, 0, 3, 0)
    rows, m = q.run(("a", 5), ("b", 30))  # a@5 bridges [1,6) and [10,15)
    assert rows == [] and _counts(m) == (3, 1, 3, 0)
    q.restart()
    rows, m = q.run(w_late=0, w_evict=20)  # no-data batch: the watermark closes two sessions
    assert rows == [("a", 1, 15, 3, 16), ("b", 3, 8, 1, 3)]
    assert _counts(m) == (0, 2, 1, 0) and m["numOutputRows"] == 2 and m["numStateStoreInstances"] == 1
    rows, m = q.run(("a", 2), ("c", 40), ("b", 14), w_late=20, w_evict=20)  # a@2 and b@14 are late
    assert rows == [] and _counts(m) == (1, 0, 2, 2)


def test_complete_outputs_every_session_and_reports_no_instances(tmp_path):
    q = Query(str(tmp_path), "complete")
    q.run(("a", 1), ("a", 10), ("b", 3))
    rows, m = q.run(("a", 5), ("b", 30), ("c", 1))
    assert rows == [("a", 1, 15, 3, 16), ("b", 3, 8, 1, 3), ("b", 30, 35, 1, 30), ("c", 1, 6, 1, 1)]
    assert _counts(m) == (4, 1, 4, 0) and m["numStateStoreInstances"] == 0


def test_null_keys_are_one_key(tmp_path):
    q = Query(str(tmp_path), "complete")
    q.run((None, 1), ("a", 2))
    rows, _ = q.run((None, 4))
    assert rows == [("a", 2, 7, 1, 2), ("~null", 1, 9, 2, 5)]


def test_rows_of_another_partition_are_refused(tmp_path):
    q = Query(str(tmp_path), "append")
    with pytest.raises(RuntimeError, match="did not partition by the keys"):
        q.step(0, 0).process(3, iter([_rows(("a", 1))]))


def test_update_mode_is_refused_at_run_time(tmp_path):
    q = Query(str(tmp_path), "update")
    with pytest.raises(ValueError, match="Invalid output mode"):
        q.run(("a", 1))


def test_late_rows_count_once_per_key_and_initial_session(tmp_path):
    """Spark drops the Partial aggregate's rows: equal (key, initial session) rows of one input
    partition are one row there, so they count once."""
    q = Query(str(tmp_path), "append")
    _, m = q.run(("a", 2), ("a", 2), ("a", 3), ("b", 2), ("a", 30), w_late=20, w_evict=0)
    assert m["numRowsDroppedByWatermark"] == 3 and m["numTotalStateRows"] == 1


@pytest.mark.parametrize(("merge_local", "dropped", "stored"), [(False, 2, [(18, 23)]), (True, 0, [(10, 23)])])
def test_local_merge_judges_lateness_on_merged_sessions(tmp_path, merge_local, dropped, stored):
    """With the local-merge conf a late row merged with an on-time row of its input partition
    survives (a@10 and a@14 reach 19 <= 20 alone, but touch a@18, whose session ends at 23)."""
    q = Query(str(tmp_path), "complete", merge_local=merge_local)
    rows, m = q.run(("a", 10), ("a", 14), ("a", 18), w_late=20, w_evict=0)
    assert m["numRowsDroppedByWatermark"] == dropped
    assert [(r[1], r[2]) for r in rows] == stored
