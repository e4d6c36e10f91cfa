"""The aggregation's state step with finality on, without Spark: each key's emissions counted in
the state, ``is_final`` when the eviction watermark passes the key's event time, and in update mode
one more (final) row for a key evicted without an update."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statestream.operators.aggregate import IS_FINAL_STEP_COLUMN, PARTITION_ID_COLUMN, REVISION_STATE_FIELD
from statestream.operators.stateful import AggregationStateStep
from statestream.state import clear_provider_cache

TS = pa.timestamp("us", tz="UTC")
#: keys: a name and an event time (seconds); one buffer: a count
SCHEMA = pa.schema([("__k0", pa.string()), ("__k1", TS), ("__b0", pa.int64()), (PARTITION_ID_COLUMN, pa.int32())])


def rows(*items: tuple[str, int, int]) -> list[pa.RecordBatch]:
    """(key, event time in seconds, count) buffer rows of partition 0."""
    ks, ts, ns = zip(*items) if items else ((), (), ())
    return [
        pa.RecordBatch.from_arrays(
            [
                pa.array(ks, pa.string()),
                pa.array([t * 1_000_000 for t in ts], pa.int64()).cast(TS),
                pa.array(ns, pa.int64()),
                pa.array([0] * len(ks), pa.int32()),
            ],
            schema=SCHEMA,
        )
    ]


def step(
    tmp_path, version: int, mode: str, w_ms: int | None = None, finality: bool = True, w_late_ms: int | None = None
) -> AggregationStateStep:
    """The step of batch ``version``: late rows filtered with ``w_late_ms`` (default: ``w_ms``),
    state evicted with ``w_ms``."""
    return AggregationStateStep(
        state_root=str(tmp_path),
        run_id="r1",
        operator_id=0,
        version=version,
        key_columns=("__k0", "__k1"),
        buffers=(("sum", ("__b0",)),),
        input_schema=SCHEMA,
        output_mode=mode,
        w_late_ms=w_ms if w_late_ms is None else w_late_ms,
        w_evict_ms=w_ms,
        event_time_key="__k1",
        event_time_is_struct=False,
        finality=finality,
    )


def emitted(table: pa.Table) -> list[tuple]:
    """(key, count, revision, is_final) per output row, sorted."""
    return sorted(
        (r["__k0"], r["__b0"], r[REVISION_STATE_FIELD], r[IS_FINAL_STEP_COLUMN]) for r in table.to_pylist()
    )


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_provider_cache()
    yield
    clear_provider_cache()


def test_update_mode_counts_emissions_and_ends_each_key_with_a_final_row(tmp_path):
    out, _ = step(tmp_path, 0, "update").process(0, rows(("a", 10, 1), ("b", 20, 2)))
    assert emitted(out) == [("a", 1, 1, False), ("b", 2, 1, False)]
    out, _ = step(tmp_path, 1, "update", w_ms=5_000).process(0, rows(("a", 10, 3)))
    assert emitted(out) == [("a", 4, 2, False)]
    # the watermark passes a (10 s): evicted without an update, so emitted once more, final
    out, m = step(tmp_path, 2, "update", w_ms=10_000).process(0, rows(("b", 20, 1)))
    assert emitted(out) == [("a", 4, 3, True), ("b", 3, 2, False)]
    assert m["numRemovedStateRows"] == 1 and m["numOutputRows"] == 2
    # updated and evicted in the same batch: one row, final
    out, _ = step(tmp_path, 3, "update", w_ms=20_000, w_late_ms=10_000).process(0, rows(("b", 20, 5), ("c", 30, 1)))
    assert emitted(out) == [("b", 8, 3, True), ("c", 1, 1, False)]


def test_append_mode_rows_are_first_and_final(tmp_path):
    out, _ = step(tmp_path, 0, "append").process(0, rows(("a", 10, 1), ("b", 20, 2)))
    assert emitted(out) == []
    out, _ = step(tmp_path, 1, "append", w_ms=5_000).process(0, rows(("a", 10, 3)))
    assert emitted(out) == []
    out, _ = step(tmp_path, 2, "append", w_ms=20_000).process(0, rows())
    assert emitted(out) == [("a", 4, 1, True), ("b", 2, 1, True)]


def test_the_counter_is_kept_in_the_state_and_only_with_finality(tmp_path):
    s = step(tmp_path, 0, "update")
    s.process(0, rows(("a", 10, 1)))
    s1 = step(tmp_path, 1, "update")
    out, _ = s1.process(0, rows(("a", 10, 1)))
    assert emitted(out) == [("a", 2, 2, False)]
    # without finality the step's output is the keys and buffers only
    plain, _ = step(tmp_path / "plain", 0, "update", finality=False).process(0, rows(("a", 10, 1)))
    assert plain.column_names == ["__k0", "__k1", "__b0"]
    assert out.column_names == ["__k0", "__k1", "__b0", REVISION_STATE_FIELD, IS_FINAL_STEP_COLUMN]


def test_late_rows_are_dropped_before_they_count(tmp_path):
    step(tmp_path, 0, "update").process(0, rows(("a", 30, 1)))
    out, m = step(tmp_path, 1, "update", w_ms=20_000).process(0, rows(("late", 10, 1), ("a", 30, 1)))
    assert emitted(out) == [("a", 2, 2, False)]
    assert m["numRowsDroppedByWatermark"] == 1
