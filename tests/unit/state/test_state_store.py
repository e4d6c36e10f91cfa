"""Unit tests of the Arrow state store: semantics, files, cache, maintenance (no Spark)."""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from statestream.errors import StateStoreError
from statestream.state import (
    FOUND_COLUMN,
    OP_COLUMN,
    StateStoreConf,
    StateStoreId,
    clear_provider_cache,
    get_provider,
)
from statestream.state.keys import match_keys
from statestream.state.provider import stale_cached_versions
from statestream.state.store import rows_where, versions_in_memory_from_conf

UTC_TS = pa.timestamp("us", tz="UTC")
WINDOW = pa.struct([("start", UTC_TS), ("end", UTC_TS)])


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_provider_cache()
    yield
    clear_provider_cache()


def sid(tmp_path, op: int = 0, part: int = 0) -> StateStoreId:
    return StateStoreId(str(tmp_path / "state"), op, part)


KS1 = pa.schema([("k", pa.string())])
VS1 = pa.schema([("count", pa.int64(), False), ("sum", pa.float64())])


def rows1(keys, counts, sums=None) -> pa.Table:
    sums = sums if sums is not None else [float(c) for c in counts]
    return pa.table(
        {"k": pa.array(keys, pa.string()), "count": pa.array(counts, pa.int64()), "sum": pa.array(sums, pa.float64())}
    )


def keys1(keys) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.string())})


def as_dict(table: pa.Table, nk: int = 1) -> dict:
    """Content of a state table as {key tuple: value tuple} (NaN-safe via repr)."""
    out = {}
    cols = [c.to_pylist() for c in table.columns]
    for i in range(table.num_rows):
        k = tuple(repr(cols[j][i]) for j in range(nk))
        out[k] = tuple(cols[j][i] for j in range(nk, table.num_columns))
    return out


# -- key matching ---------------------------------------------------------------------------------


def test_match_keys_nulls_nan_negative_zero():
    left = pa.table({"d": pa.array([0.0, float("nan"), None, 1.5, -0.0], pa.float64())})
    nan2 = np.frombuffer(np.array([0x7FF8000000000001], dtype=np.uint64).tobytes(), dtype=np.float64)[0]
    right = pa.table({"d": pa.array([-0.0, nan2, None, 2.5], pa.float64())})
    li, ri = match_keys(left, right)
    pairs = sorted(zip(li.tolist(), ri.tolist()))
    assert pairs == [(0, 0), (1, 1), (2, 2), (4, 0)]


def test_match_keys_struct_null_vs_struct_of_nulls():
    t = pa.struct([("a", pa.int64())])
    left = pa.table({"s": pa.array([None, {"a": None}, {"a": 1}], t)})
    right = pa.table({"s": pa.array([{"a": None}, None, {"a": 1}], t)})
    pairs = sorted(zip(*(x.tolist() for x in match_keys(left, right))))
    assert pairs == [(0, 1), (1, 0), (2, 2)]


def test_match_keys_no_key_columns_matches_everything():
    left = pa.table({"x": [1, 2]}).select([])
    right = pa.table({"x": [1]}).select([])
    li, ri = match_keys(left, right)
    assert sorted(li.tolist()) == [0, 1] and ri.tolist() == [0, 0]


@pytest.mark.parametrize("seed", range(5))
def test_match_keys_small_tables_match_as_the_join_does(seed, monkeypatch):
    """Small tables are matched with a Python dict, larger ones with an Arrow join: both give the
    same pairs on keys with nulls, NaNs, negative zeros, structs, strings and duplicates."""
    import statestream.state.keys as keys_module

    rng = np.random.default_rng(seed)
    floats = [0.0, -0.0, float("nan"), None, 1.5]
    t = pa.struct([("a", pa.int64()), ("b", pa.string())])
    structs = [None, {"a": None, "b": None}, {"a": 1, "b": "x"}, {"a": 1, "b": None}]

    def side(n):
        return pa.table(
            {
                "f": pa.array([floats[i] for i in rng.integers(0, len(floats), n)], pa.float64()),
                "s": pa.array([structs[i] for i in rng.integers(0, len(structs), n)], t),
                "k": pa.array([None if i == 0 else f"k{i}" for i in rng.integers(0, 3, n)], pa.string()),
                "d": pa.array([None if i == 0 else int(i) for i in rng.integers(0, 3, n)], pa.int32()),
            }
        )

    left, right = side(40), side(30)
    small = sorted(zip(*(x.tolist() for x in match_keys(left, right))))
    monkeypatch.setattr(keys_module, "SMALL_MATCH_MAX_ROWS", 0)
    joined = sorted(zip(*(x.tolist() for x in match_keys(left, right))))
    assert small == joined and len(small) > 0


# -- basic operations -----------------------------------------------------------------------------


def test_put_lookup_remove_with_null_keys(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a", None, "b"], [1, 2, 3]))
    res = s.lookup(keys1([None, "c", "a", None]))
    assert res.column_names == ["count", "sum", FOUND_COLUMN]
    assert res.column("count").to_pylist() == [2, None, 1, 2]
    assert res.column(FOUND_COLUMN).to_pylist() == [True, False, True, True]
    # upsert the null key and a new one
    s.put(rows1([None, "c"], [20, 30]))
    assert s.num_keys() == 4
    assert as_dict(s.table())[(repr(None),)] == (20, 20.0)
    assert s.remove(keys1([None, "zz"])) == 1
    assert s.num_keys() == 3
    assert s.lookup(keys1([None])).column(FOUND_COLUMN).to_pylist() == [False]
    assert s.commit() == 1


def test_multi_column_keys_nan_and_negative_zero(tmp_path):
    ks = pa.schema([("g", pa.int32()), ("d", pa.float64()), ("w", WINDOW), ("day", pa.date32()), ("b", pa.bool_())])
    vs = pa.schema([("n", pa.int64())])
    ts = pa.array([0, 10_000_000], UTC_TS)
    win = pa.StructArray.from_arrays([ts, ts], fields=list(WINDOW))

    def mk(g, d, wi, day, b, n):
        return pa.Table.from_arrays(
            [
                pa.array(g, pa.int32()),
                pa.array(d, pa.float64()),
                win.take(pa.array(wi, pa.int64())),
                pa.array(day, pa.date32()),
                pa.array(b, pa.bool_()),
                pa.array(n, pa.int64()),
            ],
            schema=pa.schema(list(ks) + list(vs)),
        )

    p = get_provider(sid(tmp_path), ks, vs, run_id="r")
    s = p.get_store(0)
    s.put(mk([1, 1, 1, None], [0.0, float("nan"), 0.0, None], [0, 0, 1, None], [1, 1, 1, None], [True, True, True, None], [1, 2, 3, 4]))
    assert s.num_keys() == 4
    # -0.0 equals 0.0, any NaN equals NaN, null equals null: these replace, not add
    s.put(mk([1, 1, None], [-0.0, -float("nan"), None], [0, 0, None], [1, 1, None], [True, True, None], [10, 20, 40]))
    assert s.num_keys() == 4
    got = sorted(s.table().column("n").to_pylist())
    assert got == [3, 10, 20, 40]
    # a key differing only in one component is a different key
    look = s.lookup(mk([1, 1], [0.0, 0.0], [0, 0], [1, 1], [True, False], [0, 0]).select([0, 1, 2, 3, 4]))
    assert look.column("n").to_pylist() == [10, None]
    v = s.commit()
    clear_provider_cache()
    reloaded = get_provider(sid(tmp_path), ks, vs, run_id="r2").get_read_store(v)
    assert sorted(reloaded.table().column("n").to_pylist()) == [3, 10, 20, 40]


def test_evict_returns_rows_and_records_removal(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a", "b", "c", None], [1, 5, 10, 7]))
    evicted = s.evict(lambda t: pc.greater(t.column("count"), 4))
    assert sorted(evicted.column("count").to_pylist()) == [5, 7, 10]
    assert s.table().column("k").to_pylist() == ["a"]
    # a null predicate result is treated as false
    kept = s.evict(lambda t: pa.array([None], pa.bool_()))
    assert kept.num_rows == 0 and s.num_keys() == 1
    s.commit()
    clear_provider_cache()
    assert get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_read_store(1).table().column("k").to_pylist() == ["a"]


def test_put_casts_compatible_types_and_rejects_wrong_shape(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(pa.table({"x": ["a"], "y": pa.array([1], pa.int32()), "z": [1.0]}))
    assert s.table().schema.names == ["k", "count", "sum"]
    with pytest.raises(StateStoreError, match="must have 3 columns"):
        s.put(pa.table({"k": ["a"]}))


def test_lookup_then_put_with_same_key_arrays(tmp_path):
    """The aggregation flow: look up the batch keys, merge, put rows built on the same key arrays."""
    ks = pa.schema([("k", pa.int64())])
    vs = pa.schema([("v", pa.int64())])
    p = get_provider(sid(tmp_path), ks, vs, run_id="r")
    s = p.get_store(0)
    s.put(pa.table({"k": [1, 2, None], "v": [10, 20, 30]}))
    keys = pa.table({"k": pa.array([2, None, 5], pa.int64())})
    found = s.lookup(keys)
    merged = pc.add(pc.fill_null(found.column("v"), 0), 1)
    s.put(pa.Table.from_arrays([keys.column(0), merged], names=["k", "v"]))
    assert sorted(s.table().to_pylist(), key=repr) == sorted(
        [{"k": 1, "v": 10}, {"k": 2, "v": 21}, {"k": None, "v": 31}, {"k": 5, "v": 1}], key=repr
    )
    # the same keys again after the state changed: must not reuse the stale match
    s.put(pa.Table.from_arrays([keys.column(0), pa.array([7, 8, 9], pa.int64())], names=["k", "v"]))
    assert s.num_keys() == 4
    assert s.lookup(keys).column("v").to_pylist() == [7, 8, 9]


def test_remove_then_put_again_replays_as_put(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a", "b"], [1, 2]))
    s.commit()
    s = p.get_store(1)
    s.remove(keys1(["a"]))
    s.put(rows1(["a"], [5]))
    s.remove(keys1(["b"]))
    s.put(rows1(["b"], [6]))
    s.remove(keys1(["b"]))
    s.commit()
    clear_provider_cache()
    t = get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_read_store(2).table()
    assert t.to_pylist() == [{"k": "a", "count": 5, "sum": 5.0}]


def test_global_store_with_no_key_columns(tmp_path):
    ks = pa.schema([])
    vs = pa.schema([("count", pa.int64())])
    p = get_provider(sid(tmp_path), ks, vs, run_id="r")
    s = p.get_store(0)
    row = pa.Table.from_arrays([pa.array([5], pa.int64())], schema=vs)
    s.put(row)
    s.put(pa.Table.from_arrays([pa.array([7], pa.int64())], schema=vs))
    assert s.table().column("count").to_pylist() == [7]
    assert s.lookup(pa.table({"x": [1]}).select([])).column("count").to_pylist() == [7]
    s.commit()
    clear_provider_cache()
    assert get_provider(sid(tmp_path), ks, vs, run_id="r2").get_read_store(1).table().column("count").to_pylist() == [7]


# -- lifecycle ------------------------------------------------------------------------------------


def test_commit_then_no_updates_and_abort_idempotent(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a"], [1]))
    assert not s.has_committed
    assert s.commit() == 1
    assert s.has_committed
    with pytest.raises(StateStoreError):
        s.put(rows1(["b"], [1]))
    with pytest.raises(StateStoreError):
        s.commit()
    s.abort()  # no-op after commit
    assert s.has_committed

    s2 = p.get_store(1)
    s2.put(rows1(["b"], [2]))
    s2.abort()
    s2.abort()
    assert not s2.has_committed
    with pytest.raises(StateStoreError):
        s2.put(rows1(["c"], [1]))
    with pytest.raises(StateStoreError):
        s2.commit()
    assert not (tmp_path / "state" / "0" / "0" / "2.delta").exists()
    # the aborted changes never reached the cached version
    assert p.get_read_store(1).table().column("k").to_pylist() == ["a"]


def test_empty_commit_writes_delta_and_versions_follow_spark(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    for batch in range(4):
        s = p.get_store(batch)
        if batch == 1:
            s.put(rows1(["a"], [1]))
        assert s.commit() == batch + 1
    names = sorted(os.listdir(tmp_path / "state" / "0" / "0"))
    assert names == ["1.delta", "2.delta", "3.delta", "4.delta"]
    clear_provider_cache()
    assert get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_read_store(4).num_keys() == 1


def test_reload_in_fresh_cache_equals_memory(tmp_path):
    rng = np.random.default_rng(7)
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    version = 0
    for _ in range(6):
        s = p.get_store(version)
        keys = rng.choice(200, 60, replace=False)
        names = [None if k == 0 else f"k{k}" for k in keys]
        s.put(rows1(names, keys.tolist()))
        s.remove(keys1([f"k{k}" for k in rng.choice(200, 20, replace=False)]))
        s.evict(lambda t: pc.equal(pc.bit_wise_and(t.column("count"), 7), 0))
        version = s.commit()
    memory = as_dict(p.get_read_store(version).table())
    clear_provider_cache()
    fresh = get_provider(sid(tmp_path), KS1, VS1, run_id="r2")
    assert as_dict(fresh.get_read_store(version).table()) == memory
    assert fresh.cache_counts() == (0, 1)
    # intermediate versions also rebuild from the files
    assert fresh.get_read_store(3).num_keys() >= 0


def test_re_executed_batch_overwrites_next_version(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a"], [1]))
    s.commit()
    s = p.get_store(1)
    s.put(rows1(["b"], [2]))
    s.commit()  # writes 2.delta
    # batch 1 runs again (e.g. after a crash before the commit log entry) with other data
    s = p.get_store(1)
    assert p.cache_counts()[0] >= 1
    s.put(rows1(["c"], [3]))
    assert s.commit() == 2
    assert sorted(p.get_read_store(2).table().column("k").to_pylist()) == ["a", "c"]
    clear_provider_cache()
    fresh = get_provider(sid(tmp_path), KS1, VS1, run_id="r2")
    assert sorted(fresh.get_read_store(2).table().column("k").to_pylist()) == ["a", "c"]
    # and after a restart, re-executing batch 1 again from files also works
    s = fresh.get_store(1)
    s.put(rows1(["d"], [4]))
    s.commit()
    clear_provider_cache()
    again = get_provider(sid(tmp_path), KS1, VS1, run_id="r3")
    assert sorted(again.get_read_store(2).table().column("k").to_pylist()) == ["a", "d"]


def test_cached_version_rewritten_by_another_worker_is_not_served(tmp_path):
    from statestream.state.provider import StateStoreProvider

    a = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    for v, key in enumerate(["a", "b"]):
        s = a.get_store(v)
        s.put(rows1([key], [v]))
        s.commit()
    assert a.cached_versions() == [1, 2]
    # another Python worker of the same run retries batch 1 and rewrites 2.delta
    b = StateStoreProvider(sid(tmp_path), KS1, VS1, run_id="r")
    s = b.get_store(1)
    s.put(rows1(["c", "d"], [5, 6]))
    s.commit()
    assert sorted(a.get_store(2).table().column("k").to_pylist()) == ["a", "c", "d"]


def test_partition_moving_between_workers_reloads_the_versions_it_did_not_write(tmp_path):
    """The cluster case (tests/cluster): worker A serves versions 0 and 1 of a partition, worker B
    (another executor's Python process, here a second provider of the same run) serves 2 and 3,
    then A is asked for version 4. A must rebuild 4 from its cached 2 plus 3.delta and 4.delta,
    and the versions it cached itself stay valid."""
    from statestream.state.provider import StateStoreProvider

    a = StateStoreProvider(sid(tmp_path), KS1, VS1, run_id="r")
    b = StateStoreProvider(sid(tmp_path), KS1, VS1, run_id="r")
    plan = [(a, ["a"]), (a, ["b"]), (b, ["c"]), (b, ["a"]), (a, ["d"])]
    for v, (worker, keys) in enumerate(plan):
        s = worker.get_store(v)
        s.put(rows1(keys, [v + 1] * len(keys)))
        s.remove(keys1(["b"]) if v == 3 else keys1([]))
        s.commit()
    # A: version 1 from its cache (hit), version 4 rebuilt from its cached 2 + 3.delta + 4.delta (miss)
    assert a.cache_counts() == (1, 1)
    assert b.cache_counts() == (1, 1)  # B: version 2 rebuilt from the files (miss), 3 its own (hit)
    got = {r["k"]: r["count"] for r in a.get_read_store(5).table().to_pylist()}
    assert got == {"a": 4, "c": 3, "d": 5}
    fresh = StateStoreProvider(sid(tmp_path), KS1, VS1, run_id="r2")
    assert fresh.get_read_store(5).table().sort_by("k").equals(a.get_read_store(5).table().sort_by("k"))


def test_cache_keeps_two_versions_and_counts_hits(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    for v in range(4):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    assert p.cached_versions() == [3, 4]
    hits, misses = p.cache_counts()
    assert (hits, misses) == (3, 0)  # versions 1, 2, 3 came from the cache; 0 is the empty store
    p.get_read_store(2)  # older than the cache: rebuilt from files
    assert p.cache_counts()[1] == 1
    m = p.get_store(4).metrics()
    assert m.num_keys == 4
    assert set(m.custom_metrics) == {"stateOnCurrentVersionSizeBytes", "loadedMapCacheHitCount", "loadedMapCacheMissCount"}
    assert m.memory_used_bytes >= m.custom_metrics["stateOnCurrentVersionSizeBytes"] > 0


@pytest.mark.parametrize(
    ("cached", "committed", "dropped"),
    [
        ([], 5, []),
        ([4, 5], 5, []),  # committed v itself in this batch: v-1 kept for a re-executed batch
        ([3, 4], 5, [3]),  # served the last batch: v-1 is this batch's base, v-2 serves nobody
        ([2, 3], 5, [2]),  # not served last batch: the newest stays as a base for deltas
        ([3], 5, []),
        ([5, 6], 5, []),  # ahead of the sibling (versions not in step): nothing is dropped
    ],
)
def test_stale_cached_versions(cached, committed, dropped):
    assert stale_cached_versions(cached, committed) == dropped


def test_a_commit_trims_only_the_stale_versions_of_its_siblings(tmp_path):
    """Partitions of one store in one worker: p0 ran batches 1-3 here, p1 only batch 1 and 2; a
    commit of p0 keeps p1's newest version, and touches other operators and runs not at all."""
    p0 = get_provider(sid(tmp_path, part=0), KS1, VS1, run_id="r")
    p1 = get_provider(sid(tmp_path, part=1), KS1, VS1, run_id="r")
    other_op = get_provider(sid(tmp_path, op=1, part=1), KS1, VS1, run_id="r")
    other_run = get_provider(StateStoreId(str(tmp_path / "other"), 0, 1), KS1, VS1, run_id="r")
    for p in (p1, other_op, other_run):
        for v in range(2):
            s = p.get_store(v)
            s.put(rows1([f"k{v}"], [v]))
            s.commit()
        assert p.cached_versions() == [1, 2]
    for v in range(3):
        s = p0.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    assert p0.cached_versions() == [2, 3]
    assert p1.cached_versions() == [2]  # 1 can serve no load once a sibling committed 3
    assert other_op.cached_versions() == [1, 2]
    assert other_run.cached_versions() == [1, 2]
    # p1 still loads version 2 from its cache, and version 1 from the files
    hits, misses = p1.cache_counts()
    assert p1.get_read_store(2).num_keys() == 2
    assert p1.cache_counts() == (hits + 1, misses)
    assert p1.get_read_store(1).num_keys() == 1
    assert p1.cache_counts() == (hits + 1, misses + 1)


@pytest.mark.parametrize(("value", "expected"), [("2", 2), ("1", 1), ("0", 1), ("-1", 1), (" 5 ", 5)])
def test_versions_in_memory_from_conf(value, expected):
    assert versions_in_memory_from_conf(value) == expected


@pytest.mark.parametrize("value", ["two", "", "1.5"])
def test_versions_in_memory_from_conf_refuses_bad_values(value):
    with pytest.raises(StateStoreError, match="maxBatchesToRetainInMemory"):
        versions_in_memory_from_conf(value)


def test_same_provider_for_same_run_new_provider_for_new_run(tmp_path):
    a = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    assert get_provider(sid(tmp_path), KS1, VS1, run_id="r") is a
    b = get_provider(sid(tmp_path), KS1, VS1, run_id="r2")
    assert b is not a
    assert get_provider(sid(tmp_path, part=1), KS1, VS1, run_id="r2") is not b


def test_cached_older_version_replays_only_missing_deltas(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    for v in range(3):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    # another process writes versions 4 and 5 (simulated by a second provider for the same run)
    other = get_provider(sid(tmp_path), KS1, VS1, run_id="other")
    for v in range(3, 5):
        s = other.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    p2 = get_provider(sid(tmp_path), KS1, VS1, run_id="r")  # the old run's provider was dropped
    assert p2 is not p
    assert p2.get_read_store(5).num_keys() == 5


# -- files ----------------------------------------------------------------------------------------


def test_delta_file_format(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a", "b"], [1, 2]))
    s.remove(keys1(["b"]))
    s.commit()
    path = tmp_path / "state" / "0" / "0" / "1.delta"
    with pa.ipc.open_stream(pa.OSFile(str(path))) as reader:
        meta = reader.schema.metadata
        t = reader.read_all()
    assert meta[b"statestream.state.format"] == b"2"
    assert meta[b"statestream.state.kind"] == b"delta"
    assert path.read_bytes()[-20:-12] == b"SSTCRC32"  # the checksum trailer
    assert t.column_names == ["k", "count", "sum", OP_COLUMN]
    got = dict(zip(t.column("k").to_pylist(), t.column(OP_COLUMN).to_pylist()))
    assert got == {"a": 0, "b": 1}


def test_state_files_are_compressed(tmp_path):
    sizes = {}
    for codec in ("lz4", "none"):
        store = StateStoreId(str(tmp_path / codec), 0, 0)
        p = get_provider(store, KS1, VS1, StateStoreConf(compression=codec), run_id="r")
        s = p.get_store(0)
        s.put(rows1([f"key-{i}" for i in range(20_000)], [1] * 20_000))
        s.commit()
        sizes[codec] = (tmp_path / codec / "0" / "0" / "1.delta").stat().st_size
    assert sizes["lz4"] * 3 < sizes["none"]


def test_missing_delta_names_file_and_version(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    for v in range(3):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    os.remove(tmp_path / "state" / "0" / "0" / "2.delta")
    clear_provider_cache()
    fresh = get_provider(sid(tmp_path), KS1, VS1, run_id="r2")
    with pytest.raises(StateStoreError) as err:
        fresh.get_store(3)
    msg = str(err.value)
    assert "2.delta" in msg and "does not exist" in msg and "version 3" in msg
    with pytest.raises(StateStoreError, match=r"2\.delta .*needed to load version 4"):
        fresh.get_store(4)
    # a version beyond the newest file names the first delta that is not there
    other = get_provider(sid(tmp_path, part=1), KS1, VS1, run_id="r2")
    other.get_store(0).commit()
    with pytest.raises(StateStoreError, match=r"2\.delta .*needed to load version 3"):
        other.get_store(3)


def test_corrupt_file_error_names_file(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a"], [1]))
    s.commit()
    path = tmp_path / "state" / "0" / "0" / "1.delta"
    path.write_bytes(b"\x00garbage" * 10)
    clear_provider_cache()
    with pytest.raises(StateStoreError) as err:
        get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_store(1)
    assert str(path) in str(err.value)
    assert "corrupt or unreadable" in str(err.value)


def test_unknown_format_version_names_file_and_versions(tmp_path):
    t = rows1(["a"], [1]).append_column(OP_COLUMN, pa.array([0], pa.int8()))
    t = t.replace_schema_metadata({b"statestream.state.format": b"99"})
    d = tmp_path / "state" / "0" / "0"
    d.mkdir(parents=True)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    (d / "1.delta").write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(StateStoreError) as err:
        get_provider(sid(tmp_path), KS1, VS1, run_id="r").get_store(1)
    msg = str(err.value)
    assert "1.delta" in msg and "format version 99" in msg and "reads format versions 1 to 2" in msg


def test_file_with_wrong_schema_is_rejected(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    s = p.get_store(0)
    s.put(rows1(["a"], [1]))
    s.commit()
    clear_provider_cache()
    other_vs = pa.schema([("count", pa.string()), ("sum", pa.float64())])
    with pytest.raises(StateStoreError, match="does not match the expected state schema"):
        get_provider(sid(tmp_path), KS1, other_vs, run_id="r2").get_store(1)


# -- maintenance ----------------------------------------------------------------------------------


def test_snapshot_and_retention(tmp_path):
    conf = StateStoreConf(min_deltas_for_snapshot=2, min_batches_to_retain=3)
    p = get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r")
    d = tmp_path / "state" / "0" / "0"
    for v in range(10):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        if v % 3 == 0:
            s.remove(keys1([f"k{v - 1}"]))
        s.commit()
        p.do_maintenance()
    names = sorted(os.listdir(d), key=lambda n: (int(n.split(".")[0]), n))
    # snapshots were written when more than 2 deltas followed the last one: at 3, 6, 9
    assert "9.snapshot" in names and "6.snapshot" in names
    # version 10 - 3 = 7 is rebuilt from 6.snapshot + 7.delta: nothing below 6 remains
    assert min(int(n.split(".")[0]) for n in names) == 6
    assert names == ["6.delta", "6.snapshot", "7.delta", "8.delta", "9.delta", "9.snapshot", "10.delta"]
    expected = as_dict(p.get_read_store(10).table())
    clear_provider_cache()
    fresh = get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r2")
    assert as_dict(fresh.get_read_store(10).table()) == expected
    assert fresh.get_read_store(7).num_keys() > 0
    with pytest.raises(StateStoreError, match=r"1\.delta .*needed to load version 5"):
        fresh.get_read_store(5)


def test_snapshot_not_written_without_enough_deltas(tmp_path):
    conf = StateStoreConf(min_deltas_for_snapshot=10)
    p = get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r")
    for v in range(10):
        p.get_store(v).commit()
    p.do_maintenance()
    assert not any(n.endswith(".snapshot") for n in os.listdir(tmp_path / "state" / "0" / "0"))
    p.get_store(10).commit()
    p.do_maintenance()
    assert (tmp_path / "state" / "0" / "0" / "11.snapshot").exists()


def test_corrupt_snapshot_error_names_file(tmp_path):
    conf = StateStoreConf(min_deltas_for_snapshot=1)
    p = get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r")
    for v in range(3):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        s.commit()
    p.do_maintenance()
    snap = tmp_path / "state" / "0" / "0" / "3.snapshot"
    assert snap.exists()
    snap.write_bytes(snap.read_bytes()[:20])
    clear_provider_cache()
    with pytest.raises(StateStoreError, match="3.snapshot"):
        get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r2").get_read_store(3)


def test_non_default_store_name_uses_sub_directory(tmp_path):
    store = StateStoreId(str(tmp_path / "state"), 1, 2, "left-keyToNumValues")
    p = get_provider(store, KS1, VS1, run_id="r")
    p.get_store(0).commit()
    assert (tmp_path / "state" / "1" / "2" / "left-keyToNumValues" / "1.delta").exists()


def test_large_upsert_is_exact(tmp_path):
    n = 50_000
    ks = pa.schema([("k", pa.int64())])
    vs = pa.schema([("v", pa.int64())])
    p = get_provider(sid(tmp_path), ks, vs, run_id="r")
    s = p.get_store(0)
    s.put(pa.table({"k": np.arange(n), "v": np.zeros(n, dtype=np.int64)}))
    s.commit()
    s = p.get_store(1)
    upd = np.arange(n // 2, n + n // 2)
    s.put(pa.table({"k": upd, "v": upd}))
    s.commit()
    t = p.get_read_store(2).table().sort_by("k")
    assert t.num_rows == n + n // 2
    v = t.column("v").to_numpy()
    assert (v[: n // 2] == 0).all() and (v[n // 2 :] == np.arange(n // 2, n + n // 2)).all()
    assert not math.isnan(float(v.sum()))


def test_maintenance_runs_every_min_deltas_plus_one_versions(tmp_path):
    """The state step calls maybe_do_maintenance after each commit; only every third version
    (min_deltas_for_snapshot=2) lists the directory, and each such run writes a snapshot."""
    conf = StateStoreConf(min_deltas_for_snapshot=2, min_batches_to_retain=100)
    p = get_provider(sid(tmp_path), KS1, VS1, conf, run_id="r")
    ran = []
    for v in range(9):
        s = p.get_store(v)
        s.put(rows1([f"k{v}"], [v]))
        committed = s.commit()
        if p.maybe_do_maintenance(committed):
            ran.append(committed)
    assert ran == [3, 6, 9]
    snapshots = sorted(n for n in os.listdir(tmp_path / "state" / "0" / "0") if n.endswith(".snapshot"))
    assert snapshots == ["3.snapshot", "6.snapshot", "9.snapshot"]


# -- a store that begins after version 0 (a transformWithState variable added on restart) ---------


def test_a_store_beginning_at_a_later_version_needs_no_file_below_it(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="first")
    s = p.get_store(3, begins_at=3)  # declared from batch 3 on: empty, no file needed
    assert s.num_keys() == 0
    s.put(rows1(["a"], [1]))
    assert s.commit() == 4
    clear_provider_cache()  # a restart: nothing cached
    fresh = get_provider(sid(tmp_path), KS1, VS1, run_id="second")
    assert as_dict(fresh.get_store(4, begins_at=3).table()) == {("'a'",): (1, 1.0)}
    assert as_dict(fresh.get_store(4, begins_at=None).table()) == {("'a'",): (1, 1.0)}  # inferred from 4.delta
    with pytest.raises(StateStoreError, match=r"1\.delta .*does not exist, but it is needed to load version 4"):
        get_provider(sid(tmp_path), KS1, VS1, run_id="third").get_store(4)  # a store said to begin at 0


def test_a_lost_store_of_a_variable_that_began_earlier_is_an_error(tmp_path):
    with pytest.raises(StateStoreError, match=r"3\.delta .*does not exist, but it is needed to load version 3"):
        get_provider(sid(tmp_path), KS1, VS1).get_store(3, begins_at=2)
    assert get_provider(sid(tmp_path), KS1, VS1, run_id="x").get_store(3, begins_at=None).num_keys() == 0  # not known


def test_files_all_above_the_version_are_lost_state_not_an_empty_store(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="w")
    s = p.get_store(5, begins_at=5)
    s.put(rows1(["a"], [1]))
    s.commit()  # 6.delta
    with pytest.raises(StateStoreError, match=r"1\.delta .*does not exist"):
        get_provider(sid(tmp_path), KS1, VS1, run_id="r").get_store(3, begins_at=None)
    assert get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_store(5, begins_at=None).num_keys() == 0


def test_replacing_a_version_drops_the_files_of_an_uncommitted_batch_above_it(tmp_path):
    p = get_provider(sid(tmp_path), KS1, VS1, run_id="w")
    s = p.get_store(0)
    s.put(rows1(["a"], [1]))
    s.commit()  # 1.delta
    s = p.get_store(1)
    s.put(rows1(["b"], [2]))
    s.commit()  # 2.delta, as if batch 1 ran but was not committed
    p._write(p.get_store(2).table(), "snapshot", 2)
    p.replace_version(1, rows1(["z"], [9]))
    assert sorted(p.list_files()) == [1]
    fresh = get_provider(sid(tmp_path), KS1, VS1, run_id="r")
    assert as_dict(fresh.get_store(1).table()) == {("'z'",): (9, 9.0)}


def _committed_delta(tmp_path, values):
    p = get_provider(sid(tmp_path), KS1, VS1, StateStoreConf(compression="none"), run_id="r")
    s = p.get_store(0)
    s.put(rows1([f"k{i}" for i in range(len(values))], values))
    s.commit()
    clear_provider_cache()
    return tmp_path / "state" / "0" / "0" / "1.delta"


def test_a_flipped_byte_that_still_parses_is_refused_by_the_checksum(tmp_path):
    """A value changed inside the file (uncompressed, so it still parses as Arrow) would load
    as wrong state without the checksum: it is refused, naming the file."""
    path = _committed_delta(tmp_path, [1234567, 2])
    data = bytearray(path.read_bytes())
    at = bytes(data).find((1234567).to_bytes(8, "little"))
    assert at > 0, "the value is not in the file as is: the test would prove nothing"
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(StateStoreError, match=rf"State file {path} .* is corrupt: its data does not match its checksum"):
        get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_store(1)


@pytest.mark.parametrize("cut", [1, 20, 21])
def test_a_file_cut_short_is_refused(tmp_path, cut):
    """Cut inside the trailer, exactly at it (a whole Arrow stream left: it would parse), or
    into the data: each is refused as corrupt, naming the file."""
    path = _committed_delta(tmp_path, [1, 2])
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(StateStoreError, match=rf"State file {path} .* corrupt"):
        get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_store(1)


def test_version_1_files_without_a_checksum_are_still_read(tmp_path):
    """A checkpoint written before checksums (format 1, no trailer) loads as before."""
    path = _committed_delta(tmp_path, [1, 2])
    body = path.read_bytes()[:-20]
    table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    meta = dict(table.schema.metadata)
    meta[b"statestream.state.format"] = b"1"
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.with_metadata(meta)) as w:
        w.write_table(table)
    path.write_bytes(sink.getvalue().to_pybytes())
    store = get_provider(sid(tmp_path), KS1, VS1, run_id="r2").get_read_store(1)
    assert sorted(store.table().column("k").to_pylist()) == ["k0", "k1"]


def test_rows_where_is_the_filter_whether_it_slices_or_not():
    """``rows_where`` slices when the true rows are one run and filters otherwise: the same rows
    either way, over a chunked table with nulls in a string and a struct column."""
    n = 200
    names = pa.array([f"k{i}" if i % 7 else None for i in range(n)])
    window = pa.StructArray.from_arrays([pa.array(np.arange(n)), pa.array(np.arange(n) * 2)], ["start", "end"], mask=pa.array(np.arange(n) % 11 == 0))
    table = pa.Table.from_arrays([names, window, pa.array(np.arange(n) * 0.5)], names=["k", "w", "v"])
    table = pa.concat_tables([table.slice(0, 70), table.slice(70)])
    rng = np.random.default_rng(7)
    masks = [np.zeros(n, bool), np.ones(n, bool), rng.random(n) < 0.5]
    for lo, hi in [(0, 1), (150, 200), (60, 90), (199, 200)]:
        m = np.zeros(n, bool)
        m[lo:hi] = True
        masks.append(m)
    gap = np.zeros(n, bool)
    gap[10:20] = gap[30:40] = True  # two runs: a slice of the first would be wrong
    masks.append(gap)
    for mask in masks:
        assert rows_where(table, mask).equals(table.filter(pa.array(mask)))
