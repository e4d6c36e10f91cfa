"""Pure tests of the buffer merge rules (``plan/aggregates.merge_buffers``) on Arrow arrays."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from statestream.operators.aggregate_merge import merge_buffers

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
