"""The deduplication state step without Spark: key equality, first occurrences, late rows,
duplicates inside a batch and across batches, eviction, expiry, and state across restarts."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.dedup import (
    DROPPED_DUPLICATES_METRIC,
    DeduplicationStateStep,
    binary_comparable,
    binary_comparable_decoded_keys,
    first_occurrence_indices,
)
from statestream.state import clear_provider_cache

TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("k", pa.string()), ("t", TS), ("v", pa.int64()), (PARTITION_ID_COLUMN, pa.int32())])


def rows(*items: tuple) -> pa.RecordBatch:
    """(k, t in seconds or None, v) rows of partition 0."""
    ks, ts, vs = zip(*items) if items else ((), (), ())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ks, pa.string()),
            pa.array([None if t is None else t * 1_000_000 for t in ts], pa.int64()).cast(TS),
            pa.array(vs, pa.int64()),
            pa.array([0] * len(ks), pa.int32()),
        ],
        schema=SCHEMA,
    )


def step(tmp_path, version: int, *, keys=(0, 1), within=False, w_late=0, w_evict=0, et_key=1, run="r1", delay_ms=10_000):
    return DeduplicationStateStep(
        state_root=str(tmp_path),
        run_id=run,
        operator_id=0,
        version=version,
        key_indices=keys,
        key_names=tuple(["k", "t", "v"][i] for i in keys),
        within_watermark=within,
        input_schema=SCHEMA,
        w_late_ms=w_late,
        w_evict_ms=w_evict,
        event_time_index=1,
        event_time_key=et_key,
        delay_ms=delay_ms,
    )


def out_rows(table: pa.Table) -> list[tuple]:
    return [(r["k"], None if r["t"] is None else int(r["t"].timestamp()), r["v"]) for r in table.to_pylist()]


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_provider_cache()
    yield
    clear_provider_cache()


# -- pure helpers ---------------------------------------------------------------------------------


def test_first_occurrence_keeps_iteration_order_and_nulls_group():
    keys = pa.table({"k": ["b", "a", "b", None, "a", None, "c"]})
    assert first_occurrence_indices(keys).tolist() == [0, 1, 3, 6]


def test_first_occurrence_all_distinct_and_empty():
    assert first_occurrence_indices(pa.table({"k": [3, 1, 2]})).tolist() == [0, 1, 2]
    assert first_occurrence_indices(pa.table({"k": pa.array([], pa.int64())})).tolist() == []


def test_first_occurrence_multi_column_and_struct():
    w = pa.array([{"start": 0, "end": 5}, {"start": 5, "end": 10}, {"start": 0, "end": 5}, None, None])
    keys = pa.table({"w": w, "k": ["x", "x", "x", "x", "x"]})
    assert first_occurrence_indices(keys).tolist() == [0, 1, 3]


def test_binary_comparable_separates_negative_zero_and_unifies_nan():
    nan2 = np.frombuffer(np.array([0x7FF8000000000001], dtype=np.uint64).tobytes(), dtype=np.float64)[0]
    assert math.isnan(nan2)
    keys = pa.table({"d": pa.array([0.0, -0.0, float("nan"), nan2, None, 0.0])})
    firsts = first_occurrence_indices(binary_comparable(keys))
    assert firsts.tolist() == [0, 1, 2, 4]  # -0.0 is its own key; both NaNs are one key


def test_decoded_keys_give_back_the_query_values_or_name_the_column_without_decoding():
    stored = binary_comparable(pa.table({"d": pa.array([0.0, -0.0, 1.5]), "k": ["a", "b", "c"]}))
    decoded = binary_comparable_decoded_keys([c.combine_chunks() for c in stored.columns], ["double", "string"])
    assert decoded[0].to_pylist() == [0.0, -0.0, 1.5] and math.copysign(1, decoded[0][1].as_py()) == -1
    assert decoded[1].to_pylist() == ["a", "b", "c"]
    lists = binary_comparable(pa.table({"k": ["a"], "l": pa.array([[1, 2]])}))
    # a list's byte encoding has no decoding yet: the index of that column, for the caller's refusal
    assert binary_comparable_decoded_keys([c.combine_chunks() for c in lists.columns], ["string", {"type": "array", "elementType": "long", "containsNull": True}]) == 1


def test_binary_comparable_inside_struct_and_untouched_without_floats():
    s = pa.array([{"a": 0.0}, {"a": -0.0}, None, {"a": 0.0}])
    assert first_occurrence_indices(binary_comparable(pa.table({"s": s}))).tolist() == [0, 1, 2]
    t = pa.table({"k": ["a"]})
    assert binary_comparable(t) is t


# -- the step ------------------------------------------------------------------------------------


def test_duplicates_inside_and_across_batches(tmp_path):
    out, m = step(tmp_path, 0).process(0, [rows(("a", 10, 1), ("a", 10, 2), ("b", 11, 3)), rows(("a", 10, 4))])
    assert out_rows(out) == [("a", 10, 1), ("b", 11, 3)]
    assert (m["numOutputRows"], m["numUpdatedStateRows"], m["numTotalStateRows"]) == (2, 2, 2)
    assert m["customMetrics"][DROPPED_DUPLICATES_METRIC] == 2
    out, m = step(tmp_path, 1).process(0, [rows(("b", 11, 5), ("c", 12, 6))])
    assert out_rows(out) == [("c", 12, 6)]
    assert (m["numUpdatedStateRows"], m["numTotalStateRows"], m["customMetrics"][DROPPED_DUPLICATES_METRIC]) == (1, 3, 1)


def test_late_rows_dropped_even_when_event_time_is_not_a_key(tmp_path):
    s = step(tmp_path, 0, keys=(0,), et_key=None, w_late=20_000, w_evict=30_000)
    out, m = s.process(0, [rows(("a", 20, 1), ("b", 21, 2), ("c", None, 3))])
    assert out_rows(out) == [("b", 21, 2), ("c", None, 3)]  # 20 <= 20 is late; null is never late
    assert m["numRowsDroppedByWatermark"] == 1
    assert m["numRemovedStateRows"] == 0 and m["numTotalStateRows"] == 2  # no event-time key: kept forever


def test_eviction_by_event_time_key(tmp_path):
    step(tmp_path, 0).process(0, [rows(("a", 10, 1), ("b", 15, 2), ("c", 16, 3))])
    out, m = step(tmp_path, 1, w_late=0, w_evict=15_000).process(0, [])
    assert out.num_rows == 0
    assert (m["numRemovedStateRows"], m["numTotalStateRows"]) == (2, 1)
    # an evicted key that is not late any more (w_late still low) is accepted again
    out, _ = step(tmp_path, 2, w_late=0, w_evict=15_000).process(0, [rows(("a", 10, 9))])
    assert out_rows(out) == [("a", 10, 9)]


def test_within_watermark_expiry(tmp_path):
    # S22: a@1 expires at 11 s (delay 10 s)
    out, _ = step(tmp_path, 0, keys=(0,), within=True, et_key=None).process(0, [rows(("a", 1, 1))])
    assert out_rows(out) == [("a", 1, 1)]
    out, m = step(tmp_path, 1, keys=(0,), within=True, et_key=None, w_evict=10_000).process(0, [rows(("b", 20, 2))])
    assert out_rows(out) == [("b", 20, 2)] and m["numRemovedStateRows"] == 0  # 11 s > 10 s: a kept
    out, m = step(tmp_path, 2, keys=(0,), within=True, et_key=None, w_late=10_000, w_evict=10_000).process(
        0, [rows(("a", 12, 3))]
    )
    assert out.num_rows == 0 and m["customMetrics"][DROPPED_DUPLICATES_METRIC] == 1
    out, m = step(tmp_path, 3, keys=(0,), within=True, et_key=None, w_late=10_000, w_evict=30_000).process(0, [])
    assert m["numRemovedStateRows"] == 2 and m["numTotalStateRows"] == 0  # a (11 s) and b (30 s <= 30 s)
    out, _ = step(tmp_path, 4, keys=(0,), within=True, et_key=None, w_late=30_000, w_evict=30_000).process(
        0, [rows(("a", 35, 4))]
    )
    assert out_rows(out) == [("a", 35, 4)]


def test_within_watermark_keeps_the_first_expiry(tmp_path):
    step(tmp_path, 0, keys=(0,), within=True, et_key=None).process(0, [rows(("a", 5, 1), ("a", 30, 2))])
    _, m = step(tmp_path, 1, keys=(0,), within=True, et_key=None, w_evict=15_000).process(0, [])
    assert m["numRemovedStateRows"] == 1  # stored expiry is 5 s + 10 s of the accepted row


def test_state_survives_a_new_run(tmp_path):
    step(tmp_path, 0).process(0, [rows(("a", 10, 1))])
    clear_provider_cache()
    out, m = step(tmp_path, 1, run="r2").process(0, [rows(("a", 10, 2), ("b", 10, 3))])
    assert out_rows(out) == [("b", 10, 3)] and m["numTotalStateRows"] == 2


def test_rerun_of_a_batch_starts_from_its_version(tmp_path):
    step(tmp_path, 0).process(0, [rows(("a", 10, 1))])
    step(tmp_path, 1).process(0, [rows(("b", 10, 2))])
    out, m = step(tmp_path, 1, run="r2").process(0, [rows(("b", 10, 2))])
    assert out_rows(out) == [("b", 10, 2)] and m["numTotalStateRows"] == 2


def test_rows_of_another_partition_are_refused(tmp_path):
    batch = rows(("a", 10, 1))
    with pytest.raises(RuntimeError, match="did not partition by the deduplication keys"):
        step(tmp_path, 0).process(1, [batch])


def test_store_insert_appends_new_keys_and_survives_reload(tmp_path):
    from statestream.state import StateStoreConf, StateStoreId, get_provider

    ks = pa.schema([("k", pa.string())])
    vs = pa.schema([("x", pa.int64())])
    store = get_provider(StateStoreId(str(tmp_path), 0, 0), ks, vs, StateStoreConf(), "a").get_store(0)
    store.put(pa.table({"k": ["a"], "x": [1]}))
    store.insert(pa.table({"k": ["b", None], "x": [2, 3]}))
    store.insert(pa.table({"k": pa.array([], pa.string()), "x": pa.array([], pa.int64())}))
    assert store.commit() == 1
    clear_provider_cache()
    reloaded = get_provider(StateStoreId(str(tmp_path), 0, 0), ks, vs, StateStoreConf(), "b").get_store(1)
    found = reloaded.lookup(pa.table({"k": ["b", None, "c"]}))
    assert found.column("x").to_pylist() == [2, 3, None]
    assert reloaded.num_keys() == 3


def test_list_keys_are_matched_exactly():
    ints = pa.array([[1, 2], [1, 2], None, [], [None], [1, None], [1, None], None, [], [2, 1]], pa.list_(pa.int64()))
    assert first_occurrence_indices(binary_comparable(pa.table({"a": ints}))).tolist() == [0, 2, 3, 4, 5, 9]
    strs = pa.array([["x", "yy"], ["x", "yy"], ["xy", "y"], None, [], [None], [""], [None], ["x", "yy"]], pa.list_(pa.string()))
    assert first_occurrence_indices(binary_comparable(pa.table({"a": strs}))).tolist() == [0, 2, 3, 4, 5, 6]
    assert first_occurrence_indices(binary_comparable(pa.table({"a": strs.slice(2)}))).tolist() == [0, 1, 2, 3, 4, 6]
    floats = pa.array([[0.0], [-0.0], [float("nan")], [0.0]], pa.list_(pa.float64()))
    assert first_occurrence_indices(binary_comparable(pa.table({"a": floats}))).tolist() == [0, 1, 2]
    nested = pa.array([{"l": [1]}, {"l": [1]}, {"l": [2]}, None])
    assert first_occurrence_indices(binary_comparable(pa.table({"a": nested}))).tolist() == [0, 2, 3]


def test_binary_comparable_lists_of_nested_values():
    """A list of structs, of lists, of decimals: equal exactly when Spark's binary rows are
    (``-0.0`` apart from ``0.0``, a null element apart from a struct of nulls, a null list
    apart from an empty one, a slice read from its offset)."""
    import decimal

    structs = pa.array(
        [[None], [{"a": 1, "b": "x"}], [{"a": 1, "b": "x"}], [{"a": None, "b": None}], None, [], [{"a": 1, "b": "xy"}],
         [{"a": 1, "b": "x"}, {"a": 2, "b": None}], [None], [{"a": 0, "b": ""}], [{"a": None, "b": ""}]],
        pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())])),
    )
    assert first_occurrence_indices(binary_comparable(pa.table({"k": structs}))).tolist() == [0, 1, 3, 4, 5, 6, 7, 9, 10]
    assert first_occurrence_indices(binary_comparable(pa.table({"k": structs.slice(1)}))).tolist() == [0, 2, 3, 4, 5, 6, 7, 8, 9]
    nested = pa.array([[[0.0]], [[-0.0]], [[0.0]], [None], [[]], [], None, [[float("nan")]], [[float("nan")]]], pa.list_(pa.list_(pa.float64())))
    assert first_occurrence_indices(binary_comparable(pa.table({"k": nested}))).tolist() == [0, 1, 3, 4, 5, 6, 7]
    decimals = pa.array([[decimal.Decimal("1.50")], [decimal.Decimal("1.5")], [None], [decimal.Decimal("2")]], pa.list_(pa.decimal128(10, 2)))
    assert first_occurrence_indices(binary_comparable(pa.table({"k": decimals}))).tolist() == [0, 2, 3]
    deep = pa.array(
        [[{"a": [1], "d": 0.0}], [{"a": [1], "d": -0.0}], [{"a": [1], "d": 0.0}], [{"a": None, "d": None}], [{"a": [], "d": None}]],
        pa.list_(pa.struct([("a", pa.list_(pa.int64())), ("d", pa.float64())])),
    )
    assert first_occurrence_indices(binary_comparable(pa.table({"k": deep}))).tolist() == [0, 1, 3, 4]
