"""The layered store (state/layered.py) against the table store: the same operations, the same
answers, version after version, across compactions, reloads from the files and local disk."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest

from statestream.state import layered
from statestream.state.keys import hash_keys, keys_equal_rowwise
from statestream.state.layered import (
    LayeredStateStore,
    merge_runs,
    plan_compaction,
    resolve,
    run_from_changes,
    run_from_table,
)
from statestream.state.provider import StateStoreProvider, trailer_checksum, verify_checksum
from statestream.state.store import OP_COLUMN, StateStore, StateStoreConf, StateStoreId

KEYS = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.float64())])
VALUES = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])
#: key components drawn from: nulls, -0.0 / 0.0 and NaN must each be one key
A_VALUES = [None, 1, 2, 3, 4, 5, 6, 7]
B_VALUES = [None, 0.0, -0.0, float("nan"), 1.5, 2.5]


def _keys(rng: np.random.Generator, n: int) -> pa.Table:
    a = [A_VALUES[i] for i in rng.integers(0, len(A_VALUES), n)]
    b = [B_VALUES[i] for i in rng.integers(0, len(B_VALUES), n)]
    return pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, pa.float64())})


def _unique(keys: pa.Table) -> pa.Table:
    seen: set = set()
    keep = []
    for i, (a, b) in enumerate(zip(keys.column("a").to_pylist(), keys.column("b").to_pylist())):
        norm = (a, "nan" if b is not None and b != b else (None if b is None else b + 0.0))
        if norm not in seen:
            seen.add(norm)
            keep.append(i)
    return keys.take(pa.array(keep, pa.int64()))


def _rows(rng: np.random.Generator, n: int) -> pa.Table:
    keys = _unique(_keys(rng, n))
    m = keys.num_rows
    n_col = pa.array(rng.integers(0, 100, m), pa.int64())
    s_col = pa.array([f"v{int(x)}" for x in rng.integers(0, 1000, m)])
    return pa.table({"a": keys.column("a"), "b": keys.column("b"), "n": n_col, "s": s_col})


def _canon(table: pa.Table) -> list:
    def norm(v):
        if isinstance(v, float):
            return "nan" if v != v else v + 0.0
        return v

    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


def _providers(tmp_path, on_local_disk: bool) -> tuple[StateStoreProvider, StateStoreProvider]:
    plain = StateStoreProvider(StateStoreId(str(tmp_path / "plain"), 0, 0), KEYS, VALUES, StateStoreConf(min_deltas_for_snapshot=3))
    conf = StateStoreConf(min_deltas_for_snapshot=3, layered=True, on_local_disk=on_local_disk)
    lay = StateStoreProvider(StateStoreId(str(tmp_path / "layered"), 0, 0), KEYS, VALUES, conf, run_id="r")
    return plain, lay


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("on_local_disk", [False, True])
def test_layered_store_answers_as_the_table_store_does(tmp_path, monkeypatch, seed: int, on_local_disk: bool) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "local"))
    monkeypatch.setattr(layered, "FANOUT", 2 + seed % 3)
    rng = np.random.default_rng(seed)
    plain, lay = _providers(tmp_path, on_local_disk)
    version = 0
    for _batch in range(14):
        p = plain.get_store(version)
        q = lay.get_store(version)
        assert isinstance(q, LayeredStateStore)
        for _op in range(int(rng.integers(1, 5))):
            kind = rng.choice(["lookup", "put", "insert", "remove", "evict", "evict_row", "table"])
            if kind == "lookup":
                keys = _keys(rng, int(rng.integers(0, 12)))
                assert _lookup(p, keys) == _lookup(q, keys)
            elif kind == "put":
                rows = _rows(rng, int(rng.integers(0, 10)))
                p.put(rows)
                q.put(rows)
            elif kind == "insert":
                rows = _rows(rng, int(rng.integers(0, 10)))
                found = np.asarray(p.lookup(rows.select([0, 1])).column("__found"))
                absent = rows.filter(pa.array(~found))
                p.insert(absent)
                q.insert(absent)
            elif kind == "remove":
                keys = _keys(rng, int(rng.integers(0, 8)))
                assert p.remove(keys) == q.remove(keys)
            elif kind in ("evict", "evict_row"):
                limit = int(rng.integers(0, 100))
                pred = lambda t, limit=limit: pa.array(np.asarray(t.column("n").to_numpy(zero_copy_only=False)) < limit)  # noqa: E731
                assert _canon(p.evict(pred, row_wise=kind == "evict_row")) == _canon(q.evict(pred, row_wise=kind == "evict_row"))
            else:
                assert _canon(p.table()) == _canon(q.table())
            assert p.num_keys() == q.num_keys()
        assert _canon(p.pending_changes()) == _canon(q.pending_changes())
        if rng.random() < 0.15:
            p.abort()
            q.abort()
            continue
        assert p.commit() == q.commit() == version + 1
        version += 1
        if rng.random() < 0.4:
            plain.do_maintenance()
            lay.do_maintenance()
        if rng.random() < 0.2:
            # a restart: a new provider reloads from the checkpoint's files
            lay.close()
            conf = lay.conf
            lay = StateStoreProvider(lay.store_id, KEYS, VALUES, conf, run_id=f"r{version}")
        check = lay.get_read_store(version)
        assert _canon(check.table()) == _canon(plain.get_read_store(version).table())
        assert check.num_keys() == plain.get_read_store(version).num_keys()
    lay.close()


def _lookup(store, keys: pa.Table) -> list:
    return store.lookup(keys).to_pylist()


def test_a_checkpoint_written_by_one_store_is_read_by_the_other(tmp_path) -> None:
    sid = StateStoreId(str(tmp_path / "cp"), 0, 0)
    rng = np.random.default_rng(7)
    plain = StateStoreProvider(sid, KEYS, VALUES, StateStoreConf())
    for v in range(5):
        s = plain.get_store(v)
        s.put(_rows(rng, 8))
        s.remove(_keys(rng, 2))
        s.commit()
    lay = StateStoreProvider(sid, KEYS, VALUES, StateStoreConf(layered=True), run_id="x")
    assert _canon(lay.get_read_store(5).table()) == _canon(plain.get_read_store(5).table())
    s = lay.get_store(5)
    s.put(_rows(rng, 8))
    s.commit()
    again = StateStoreProvider(sid, KEYS, VALUES, StateStoreConf(), run_id="y")
    assert _canon(again.get_read_store(6).table()) == _canon(lay.get_read_store(6).table())


def test_hashes_follow_sparks_grouping_equality() -> None:
    keys = pa.table({"a": pa.array([1, 1, None, None, 1]), "b": pa.array([0.0, -0.0, float("nan"), float("nan"), None])})
    h = hash_keys(keys)
    assert h[0] == h[1] and h[2] == h[3]
    assert len({int(h[0]), int(h[2]), int(h[4])}) == 3
    assert keys_equal_rowwise(keys.slice(0, 2), keys.slice(1, 2)).tolist() == [True, False]
    # strings, structs and lists hash by value whatever the table they are in
    one = pa.table({"s": ["x", "", None], "t": pa.array([{"f": 1}, None, {"f": None}]), "l": pa.array([[1.0, -0.0], None, []])})
    two = pa.table({"s": [None, "x"], "t": pa.array([{"f": None}, {"f": 1}]), "l": pa.array([[], [1.0, 0.0]])})
    assert hash_keys(one)[0] == hash_keys(two)[1]
    assert hash_keys(one)[2] == hash_keys(two)[0]


def test_resolve_finds_the_newest_row_and_hash_collisions_are_told_apart(monkeypatch) -> None:
    older = run_from_table(pa.table({"k": [1, 2, 3], "v": [10, 20, 30]}), num_keys=1)
    changes = pa.table({"k": [2, 3], "v": pa.array([None, 33], pa.int64()), OP_COLUMN: pa.array([1, 0], pa.int8())})
    newer = run_from_changes(changes, num_keys=1)
    run_of, row_of = resolve((older, newer), pa.table({"k": [1, 2, 3, 4]}))
    assert run_of.tolist() == [0, 1, 1, -1]
    assert newer.rows.column("v").take(pa.array([row_of[2]])).to_pylist() == [33]
    # every key one hash: the keys themselves decide
    monkeypatch.setattr(layered, "hash_keys", lambda t: np.zeros(t.num_rows, dtype=np.uint64))
    run = run_from_table(pa.table({"k": [5, 6, 7], "v": [50, 60, 70]}), num_keys=1)
    run_of, row_of = resolve((run,), pa.table({"k": [7, 8, 5]}))
    assert run_of.tolist() == [0, -1, 0]
    assert run.rows.column("k").take(pa.array([row_of[0], row_of[2]])).to_pylist() == [7, 5]


def test_a_merge_keeps_the_newest_row_of_each_key_and_drops_tombstones_at_the_bottom() -> None:
    base = run_from_table(pa.table({"k": [1, 2, 3], "v": [10, 20, 30]}), num_keys=1)
    delta = run_from_changes(
        pa.table({"k": [1, 2, 4], "v": pa.array([11, None, 40], pa.int64()), OP_COLUMN: pa.array([0, 1, 0], pa.int8())}), num_keys=1
    )
    hashes, batches, _schema, live = merge_runs([base, delta], num_keys=1, drop_tombstones=True)
    merged = pa.Table.from_batches(list(batches()))
    assert sorted(zip(merged.column("k").to_pylist(), merged.column("v").to_pylist())) == [(1, 11), (3, 30), (4, 40)]
    assert live == 3 and (np.diff(hashes.astype(np.float64)) >= 0).all()
    _, batches, _, live = merge_runs([base, delta], num_keys=1, drop_tombstones=False)
    assert pa.Table.from_batches(list(batches())).num_rows == 4 and live == 3


def test_compaction_plan() -> None:
    assert plan_compaction([0], [10]) is None
    assert plan_compaction([5, 0], [100, 60]) == 0  # as large as half the bottom: everything
    assert plan_compaction([5, 0, 0, 0], [100, 1, 1, 1]) is None
    assert plan_compaction([5, 0, 0, 0, 0], [100, 1, 1, 1, 1]) == 1
    assert plan_compaction([5, 1, 0, 0, 0, 0], [100, 4, 1, 1, 1, 1]) == 2


def test_a_batch_touches_only_its_keys_files(tmp_path, monkeypatch) -> None:
    """On local disk, a commit writes the batch's run, not the version: the files written stay
    near the batch's size while the store grows."""
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "local"))
    conf = StateStoreConf(layered=True, on_local_disk=True, min_deltas_for_snapshot=1000)
    provider = StateStoreProvider(StateStoreId(str(tmp_path / "cp"), 0, 0), pa.schema([("k", pa.int64())]), pa.schema([("v", pa.int64())]), conf, "run")
    store = provider.get_store(0)
    store.put(pa.table({"k": np.arange(200_000), "v": np.zeros(200_000, dtype=np.int64)}))
    store.commit()
    written: list[int] = []
    real = layered.RunWriter.run

    def counting(self, rows, schema, hashes, level):
        written.append(len(hashes))
        return real(self, rows, schema, hashes, level)

    monkeypatch.setattr(layered.RunWriter, "run", counting)
    for v in range(1, 4):
        store = provider.get_store(v)
        keys = pa.table({"k": np.arange(v * 1000, v * 1000 + 500)})
        found = store.lookup(keys)
        assert all(found.column("__found").to_pylist())
        store.put(pa.table({"k": keys.column("k"), "v": np.full(500, v, dtype=np.int64)}))
        store.commit()
    assert written and max(written) <= 2_000, written
    assert provider.get_read_store(4).num_keys() == 200_000
    assert isinstance(provider.get_store(4), LayeredStateStore) and not isinstance(provider.get_store(4), StateStore)
    provider.close()


def test_a_lookup_then_a_put_of_the_same_key_arrays_resolves_and_hashes_once(tmp_path, monkeypatch) -> None:
    """The aggregation's flow: look the batch's keys up, put rows built from the same arrays."""
    rng = np.random.default_rng(3)
    plain, lay = _providers(tmp_path, on_local_disk=False)
    calls = []
    real = layered.hash_keys
    monkeypatch.setattr(layered, "hash_keys", lambda t: calls.append(t.num_rows) or real(t))
    for v in range(4):
        rows = _rows(rng, 10)
        keys = rows.select([0, 1])
        p, q = plain.get_store(v), lay.get_store(v)
        assert _lookup(p, keys) == _lookup(q, keys)
        calls.clear()
        for store in (p, q):
            store.put(pa.table({"a": keys.column(0), "b": keys.column(1), "n": rows.column("n"), "s": rows.column("s")}))
            store.commit()
        if v:  # (an empty store looks nothing up: its commit hashes the keys)
            assert calls == [], calls  # neither the put nor the commit hashed the keys again
        assert _canon(lay.get_read_store(v + 1).table()) == _canon(plain.get_read_store(v + 1).table())


def test_a_reader_streams_a_large_store_through_the_layered_store(tmp_path, monkeypatch) -> None:
    """The state reader's path for a store past its size bound: the same live rows, in slices,
    from runs on local disk that go when the read ends."""
    from statestream.tools.state_reader import _live_tables

    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "local"))
    monkeypatch.setattr(layered, "MERGE_SLICE_ROWS", 7)
    rng = np.random.default_rng(5)
    plain, _ = _providers(tmp_path, on_local_disk=False)
    for v in range(6):
        s = plain.get_store(v)
        s.put(_rows(rng, 12))
        s.remove(_keys(rng, 3))
        s.commit()
        plain.do_maintenance()
    whole = plain.get_read_store(6).table()
    small = list(_live_tables(plain, 6, large_store_bytes=10**12))
    sliced = list(_live_tables(plain, 6, large_store_bytes=-1))
    assert len(sliced) > 1 and max(t.num_rows for t in sliced) <= 7
    assert _canon(pa.concat_tables(small)) == _canon(whole) == _canon(pa.concat_tables(sliced))
    assert not list((tmp_path / "local").rglob("run-*.arrow"))


def test_a_layered_snapshot_is_written_a_slice_at_a_time(tmp_path, monkeypatch) -> None:
    """Maintenance writes a layered version's snapshot from the merge of its runs as it comes,
    one record batch per slice (never the merged table whole), and the file is the one the
    table store writes: the same rows, read back by it, its checksum trailer sound."""
    monkeypatch.setattr(layered, "MERGE_SLICE_ROWS", 5)
    rng = np.random.default_rng(11)
    plain, lay = _providers(tmp_path, on_local_disk=True)
    monkeypatch.setattr(LayeredStateStore, "table", lambda self: pytest.fail("the snapshot merged the runs whole"))
    for v in range(4):
        rows, gone = _rows(rng, 30), _keys(rng, 4)
        for p in (plain, lay):
            s = p.get_store(v)
            s.put(rows)
            s.remove(gone)
            s.commit()
        plain.do_maintenance()
        lay.do_maintenance()
    assert lay.has_snapshot(4) and plain.has_snapshot(4)
    data = lay._files.read_bytes(lay.file_name(4, "snapshot"))
    body, damage = verify_checksum(data)
    assert damage is None and body is not None and trailer_checksum(data) == zlib.crc32(body)
    with pa.ipc.open_stream(pa.py_buffer(body)) as reader:
        batches = list(reader)
    assert len(batches) > 1 and max(b.num_rows for b in batches) <= 5
    fresh = StateStoreProvider(lay.store_id, KEYS, VALUES, StateStoreConf())
    assert _canon(fresh.get_read_store(4).table()) == _canon(plain.get_read_store(4).table())


def test_a_store_without_key_columns_keeps_its_row_in_a_table(tmp_path) -> None:
    """A global aggregation's store has no key columns: asked for layered versions, it keeps
    its one row in a table, found again batch after batch (as runs it was lost: Arrow takes no
    rows from a table of no columns, and every batch counted one more key; random tester,
    seed 33)."""
    values = pa.schema([pa.field("n", pa.int64())])
    provider = StateStoreProvider(StateStoreId(str(tmp_path), 0, 0), pa.schema([]), values, StateStoreConf(layered=True), run_id="r")
    assert not provider.layered
    no_key = pa.table({"n": [0]}).select([])
    for v in range(3):
        store = provider.get_store(v)
        assert store.lookup(no_key).to_pylist() == [{"n": v - 1 if v else None, "__found": bool(v)}]
        store.put(pa.table({"n": [v]}))
        store.commit()
        assert store.metrics().num_keys == 1
