"""Unit tests of the state cache kept on local disk (``on_local_disk``): the versions a provider
caches are memory-mapped files, not heap, and the answers are those of the in-memory cache
(no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from statestream.errors import StateStoreError
from statestream.state import StateStoreConf, StateStoreId, clear_provider_cache, get_provider
from statestream.state import local_disk
from statestream.state.provider import trailer_checksum
from statestream.state.store import on_local_disk_from_conf

KS = pa.schema([("k", pa.int64())])
VS = pa.schema([("count", pa.int64(), False)])


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'local'},{tmp_path / 'other'}")
    monkeypatch.setattr(local_disk, "_ROOT", None)
    monkeypatch.setattr(local_disk, "_CLAIMED", {})
    clear_provider_cache()
    yield
    clear_provider_cache()
    for lock, _ in local_disk._CLAIMED.values():
        if lock is not None:
            os.close(lock)


def rows(keys, counts) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "count": pa.array(counts, pa.int64())})


def provider(tmp_path, part: int = 0, *, on_disk: bool = True, run_id: str = "run-1", versions: int = 2):
    conf = StateStoreConf(on_local_disk=on_disk, max_versions_in_memory=versions)
    return get_provider(StateStoreId(str(tmp_path / "state"), 0, part), KS, VS, conf, run_id)


def mapped_files(tmp_path) -> list[str]:
    """``<version>.arrow`` for each mapped file (its name also holds its delta file's stamp)."""
    return sorted(f"{p.name.split('.')[0]}.arrow" for p in (tmp_path / "local").rglob("*.arrow"))


def add(p, version: int, keys, counts) -> int:
    store = p.get_store(version)
    store.put(rows(keys, counts))
    return store.commit()


def test_a_committed_version_is_served_from_a_mapped_file_under_sparks_first_local_dir(tmp_path):
    p = provider(tmp_path)
    before = pa.total_allocated_bytes()
    n = 200_000
    v = add(p, 0, np.arange(n), np.ones(n, dtype=np.int64))
    assert v == 1
    # the cached version lives in a file of this process's directory under the first local dir
    root = local_disk.local_state_root()
    assert root.parent == tmp_path / "local"
    delta_path = tmp_path / "state" / "0" / "0" / "1.delta"
    delta = delta_path.stat()
    crc = trailer_checksum(delta_path.read_bytes())
    name = f"1.{delta.st_size}.{delta.st_mtime_ns}.{crc:08x}.arrow"
    assert [f.relative_to(root).parts[1:] for f in root.rglob("*.arrow")] == [("0", "0", name)]
    assert not (tmp_path / "other").exists()
    table = p.get_store(1).table()
    # the table is not on Arrow's heap: the 200,000 rows (3.2 MB) it holds are not allocated
    assert pa.total_allocated_bytes() - before < 1_000_000
    assert table.num_rows == n and table.column("count").to_pylist()[:3] == [1, 1, 1]
    # memoryUsedBytes counts what is in memory: a mapped version is not
    assert p.memory_used_bytes() == 0
    assert p.get_store(1).metrics().custom_metrics["stateOnCurrentVersionSizeBytes"] == table.nbytes


def test_answers_are_those_of_the_in_memory_cache(tmp_path):
    """The same puts, removals and evictions on both kinds of cache give the same versions."""
    results = {}
    for on_disk in (False, True):
        p = provider(tmp_path / str(on_disk), on_disk=on_disk)
        add(p, 0, [1, 2, 3], [1, 1, 1])
        store = p.get_store(1)
        store.put(rows([2, 4], [5, 7]))
        store.remove(pa.table({"k": pa.array([1], pa.int64())}))
        store.evict(lambda t: np.asarray(t.column("count").to_numpy()) > 6)
        store.commit()
        clear_provider_cache()  # the next load replays the files
        reloaded = provider(tmp_path / str(on_disk), on_disk=on_disk).get_store(2).table()
        results[on_disk] = sorted(zip(*(c.to_pylist() for c in reloaded.columns)))
    assert results[True] == results[False] == [(2, 5), (3, 1)]


def test_files_go_with_their_versions(tmp_path):
    p = provider(tmp_path, versions=2)
    v = 0
    for i in range(4):
        v = add(p, v, [i], [i])
    # two versions cached, two files; the older ones were deleted with their cache entries
    assert p.cached_versions() == [3, 4]
    assert mapped_files(tmp_path) == ["3.arrow", "4.arrow"]
    # a re-executed batch replaces its version (and the version above it) with its own file
    store = p.get_store(3)
    store.put(rows([9], [9]))
    assert store.commit() == 4
    assert mapped_files(tmp_path) == ["3.arrow", "4.arrow"]
    assert sorted(p.get_store(4).table().column("k").to_pylist()) == [0, 1, 2, 9]
    clear_provider_cache()
    assert mapped_files(tmp_path) == []


def test_a_table_stays_readable_after_its_file_is_deleted(tmp_path):
    p = provider(tmp_path, versions=1)
    add(p, 0, [1, 2], [1, 2])
    held = p.get_store(1).table()
    add(p, 1, [3], [3])  # version 1 leaves the cache: its file is deleted
    assert mapped_files(tmp_path) == ["2.arrow"]
    assert held.column("k").to_pylist() == [1, 2]


def test_a_new_run_never_maps_the_files_of_the_run_before(tmp_path):
    first = provider(tmp_path, run_id="a")
    add(first, 0, [1], [1])
    second = provider(tmp_path, run_id="b")  # the restarted query's provider replaces the first
    assert second.get_store(1).table().column("k").to_pylist() == [1]
    dirs = {f.parent.parent.parent.name for f in (tmp_path / "local").rglob("*.arrow")}
    assert len(dirs) == 1  # only run b's directory holds a file now


def test_without_spark_local_dirs_the_temporary_directory_is_used(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    monkeypatch.setattr(local_disk.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    root = local_disk.local_state_root()
    assert root.parent == tmp_path / "tmp" and root.name.startswith(f"statestream-state-{os.getpid()}-")


def test_a_worker_that_ended_without_its_exit_hooks_leaves_files_the_next_one_deletes(tmp_path):
    """PySpark ends its workers with ``os._exit`` (and Spark stops idle ones): their versions
    would stay on disk until the executor stops. A worker that creates its directory deletes
    those whose owner has ended, and only those."""
    import fcntl
    import subprocess
    import sys

    base = tmp_path / "local"
    ended = subprocess.run(
        [sys.executable, "-c", (
            "import os; from statestream.state import local_disk as d; r = d.local_state_root(); "
            "(r / 'x.arrow').write_bytes(b'1'); print(r); os._exit(0)"
        )],
        env={**os.environ, "SPARK_LOCAL_DIRS": str(base), "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        capture_output=True, text=True, check=True,
    )
    dead = Path(ended.stdout.strip())
    assert (dead / "x.arrow").is_file()  # its exit hook did not run
    # a live process's directory: its lock is held
    live = base / "statestream-state-1-live"
    (live / "run").mkdir(parents=True)
    held = os.open(base / "statestream-state-1-live.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    # a directory without a lock file (being created, or of an older version): left alone
    (base / "statestream-state-2").mkdir()
    try:
        root = local_disk.local_state_root()
    finally:
        os.close(held)
    assert not dead.exists() and not Path(f"{dead}.lock").exists()
    assert (live / "run").is_dir() and (base / "statestream-state-2").is_dir()
    assert root.is_dir() and Path(f"{root}.lock").is_file()
    # the live one's lock is free now: the next sweep takes it, but never this process's own
    assert local_disk.sweep_dead_roots(base) == [live]
    assert root.is_dir()


def test_a_file_system_that_refuses_flock_gets_a_directory_without_a_lock(tmp_path, monkeypatch):
    import errno
    import fcntl

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    root = local_disk.local_state_root()
    assert root.is_dir() and not Path(f"{root}.lock").exists()
    assert [p.name for p in (tmp_path / "local").iterdir()] == [root.name]  # no lock file left behind


def test_a_forked_child_neither_removes_nor_sweeps_its_parents_directory(tmp_path):
    root = local_disk.local_state_root()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own directory, then what its exit hooks would do
        try:
            child_root = local_disk.local_state_root()
            local_disk._release_all()
            os.write(write, str(child_root).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child_root = Path(os.read(read, 4096).decode())
    os.close(read)
    assert child_root != root and child_root.parent == root.parent
    # the child's exit hooks removed its own directory and lock, not its parent's
    assert root.is_dir() and Path(f"{root}.lock").is_file()
    assert not child_root.exists() and not Path(f"{child_root}.lock").exists()
    assert local_disk.sweep_dead_roots(tmp_path / "local") == []
    assert root.is_dir()


def test_an_empty_version_is_not_written(tmp_path):
    p = provider(tmp_path)
    store = p.get_store(0)
    assert store.commit() == 1
    assert mapped_files(tmp_path) == []
    assert p.get_store(1).num_keys() == 0


@pytest.mark.parametrize(("text", "expected"), [("true", True), (" False ", False), ("TRUE", True)])
def test_the_conf_is_a_boolean(text, expected):
    assert on_local_disk_from_conf(text) is expected


def test_a_bad_conf_value_says_what_is_expected():
    with pytest.raises(StateStoreError, match=r"onLocalDisk must be true or false, got 'yes'"):
        on_local_disk_from_conf("yes")


def test_a_full_local_disk_keeps_the_version_in_memory_and_says_so(tmp_path, monkeypatch, caplog):
    from statestream.state import provider as provider_module

    def full(table, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(provider_module, "write_mapped", full)
    p = provider(tmp_path)
    with caplog.at_level("WARNING", logger="statestream.state.provider"):
        assert add(p, 0, [1, 2], [1, 2]) == 1
    assert "version 1 stays in memory" in caplog.text and "No space left on device" in caplog.text
    assert p.get_store(1).table().column("k").to_pylist() == [1, 2]
    assert p.memory_used_bytes() > 0  # held in memory, and counted


def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_disk.os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        local_disk.write_mapped(rows([1], [1]), tmp_path / "v" / "1.arrow")
    assert list((tmp_path / "v").iterdir()) == []


# -- the Python workers of one executor share their files --------------------------------------


def as_another_worker(monkeypatch, pid: int) -> None:
    """From here on this process writes its files as the worker with ``pid`` would, and caches
    providers of its own (the other worker's cache is left behind, as in that process)."""
    import statestream.state.provider as provider_module

    monkeypatch.setattr(local_disk, "_ROOT", None)
    monkeypatch.setattr(local_disk.os, "getpid", lambda: pid)
    monkeypatch.setattr(provider_module, "_PROVIDERS", {})


def test_a_worker_maps_the_version_another_worker_committed_instead_of_replaying_it(tmp_path, monkeypatch):
    first = provider(tmp_path)
    add(first, 0, [1, 2], [1, 1])
    add(first, 1, [2, 3], [5, 7])  # version 2, in the first worker's directory
    first_dir = local_disk.local_state_root()
    as_another_worker(monkeypatch, 999_999_001)
    second = provider(tmp_path)
    replayed = []
    original = second._read
    monkeypatch.setattr(second, "_read", lambda *a, **k: replayed.append(a) or original(*a, **k))
    table = second.get_store(2).table()
    assert replayed == []  # no delta or snapshot file was read
    assert sorted(zip(table.column("k").to_pylist(), table.column("count").to_pylist())) == [(1, 1), (2, 5), (3, 7)]
    assert second.mapped_versions() == [2] and second.memory_used_bytes() == 0
    # its own commit goes on from there, in its own directory
    assert add(second, 2, [4], [1]) == 3
    own = local_disk.local_state_root()
    assert own.name.startswith("statestream-state-999999001-")
    assert [f.name.split(".")[0] for f in own.rglob("*.arrow")] == ["3"]
    # dropping the borrowed version leaves the first worker's file alone
    second.close()
    assert sorted(f.name.split(".")[0] for f in first_dir.rglob("*.arrow")) == ["1", "2"]


def test_a_file_of_a_version_whose_delta_was_rewritten_is_not_mapped(tmp_path, monkeypatch):
    """A re-executed batch rewrote the version's delta with other rows after the first worker
    mapped it, in a file of the same size and (a coarse clock) the same modification time: the
    next worker replays the checkpoint's files, and gets the new history."""
    first = provider(tmp_path)
    add(first, 0, [1], [1])
    delta = tmp_path / "state" / "0" / "0" / "1.delta"
    before = delta.stat()
    as_another_worker(monkeypatch, 999_999_002)
    rewriter = provider(tmp_path, on_disk=False)  # leaves no mapped file of its own
    add(rewriter, 0, [8], [8])
    os.utime(delta, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (delta.stat().st_size, delta.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    as_another_worker(monkeypatch, 999_999_003)
    third = provider(tmp_path)
    replayed = []
    original = third._read
    monkeypatch.setattr(third, "_read", lambda *a, **k: replayed.append(a) or original(*a, **k))
    assert third.get_store(1).table().column("k").to_pylist() == [8]
    assert replayed  # the first worker's file (rows [1]) was not taken


def test_a_file_that_cannot_be_mapped_falls_back_to_the_checkpoint(tmp_path, monkeypatch):
    first = provider(tmp_path)
    add(first, 0, [1, 2], [1, 2])
    for f in (tmp_path / "local").rglob("*.arrow"):
        f.write_bytes(b"not an arrow file")
    as_another_worker(monkeypatch, 999_999_004)
    second = provider(tmp_path)
    assert sorted(second.get_store(1).table().column("k").to_pylist()) == [1, 2]
    assert second.memory_used_bytes() == 0  # replayed, then mapped from a file of its own


def test_the_in_memory_cache_never_looks_for_other_workers_files(tmp_path, monkeypatch):
    first = provider(tmp_path)
    add(first, 0, [1], [1])
    as_another_worker(monkeypatch, 999_999_005)
    second = provider(tmp_path, on_disk=False)
    import statestream.state.provider as provider_module

    monkeypatch.setattr(provider_module, "find_mapped", lambda *a: pytest.fail("looked for a mapped file"))
    assert second.get_store(1).table().column("k").to_pylist() == [1]
    assert second.mapped_versions() == [] and second.memory_used_bytes() > 0


def test_a_file_of_another_schema_is_not_mapped(tmp_path, monkeypatch):
    """A worker whose store has another value schema never takes the file: it reads the
    checkpoint's delta, and its schema check names the difference."""
    first = provider(tmp_path)
    add(first, 0, [1], [1])
    as_another_worker(monkeypatch, 999_999_006)
    other = get_provider(
        StateStoreId(str(tmp_path / "state"), 0, 0), KS, pa.schema([("count", pa.int32(), False)]),
        StateStoreConf(on_local_disk=True), "run-1",
    )
    with pytest.raises(StateStoreError, match="does not match the expected state schema"):
        other.get_store(1)


def test_a_provider_replaced_in_its_process_deletes_its_files(tmp_path):
    first = provider(tmp_path)
    add(first, 0, [1], [1])
    assert mapped_files(tmp_path) == ["1.arrow"]
    provider(tmp_path, versions=3)  # another conf: the provider is replaced
    assert mapped_files(tmp_path) == []


# -- a put's kept rows are written from the last version's slices, never copied whole -----------


def _spy_materialise(monkeypatch) -> list[int]:
    from statestream.state import store as store_module

    calls: list[int] = []
    real = store_module.KeptAndPut.materialise

    def spy(self):
        calls.append(self.num_rows)
        return real(self)

    monkeypatch.setattr(store_module.KeptAndPut, "materialise", spy)
    return calls


@pytest.mark.parametrize("on_disk", [True, False])
def test_an_update_of_some_keys_is_not_copied_before_its_commit(tmp_path, monkeypatch, on_disk):
    """The aggregation's flow (lookup, put of a fifth of the keys, an eviction that finds
    nothing, commit): on local disk the kept rows go to the new version's file slice by slice
    and the view never holds them as one table; in memory they are made one table once, at the
    commit. The versions are the same either way, and the mapped file has few chunks."""
    from statestream.state.store import KeptAndPut

    monkeypatch.setattr(KeptAndPut, "MIN_SLICE_ROWS", 1_000)
    calls = _spy_materialise(monkeypatch)
    n = 50_000
    p = provider(tmp_path, on_disk=on_disk)
    add(p, 0, np.arange(n), np.ones(n, dtype=np.int64))
    store = p.get_store(1)
    upd = np.arange(0, n, 5)
    found = store.lookup(pa.table({"k": pa.array(upd, pa.int64())}))
    assert found.column("__found").to_pylist() == [True] * len(upd)
    store.put(rows(upd, np.full(len(upd), 7)))
    assert store.num_keys() == n and calls == []
    assert store.evict(lambda t: pa.compute.greater(t.column("count"), 100), row_wise=True).num_rows == 0
    delta = store.pending_changes()
    assert delta.num_rows == len(upd) and calls == []
    assert store.commit() == 2
    assert calls == ([] if on_disk else [n])
    table = p.get_read_store(2).table()
    got = dict(zip(table.column("k").to_pylist(), table.column("count").to_pylist()))
    assert got == {k: (7 if k % 5 == 0 else 1) for k in range(n)}
    if on_disk:
        assert table.column(0).num_chunks <= 7
        assert mapped_files(tmp_path) == ["1.arrow", "2.arrow"]
    # the next batches read and update the committed version as usual, and the versions stay
    # in a few chunks (put rows arrive in many: one per Arrow batch of the exchange)
    version = 2
    for i in range(12):
        store = p.get_store(version)
        store.put(pa.concat_tables([rows([3, n + 1 + i], [9, 9])] * 1 + [rows([j], [i]) for j in range(10, 20)]))
        version = store.commit()
        assert p.get_read_store(version).table().column(0).num_chunks <= 8
    last = dict(zip(*(c.to_pylist() for c in p.get_read_store(version).table().columns)))
    assert last[3] == 9 and last[n + 1] == 9 and last[5] == 7 and last[15] == 11 and len(last) == n + 12


def test_an_eviction_after_a_put_sees_the_put_rows_not_the_replaced_ones(tmp_path):
    """Evaluated on the put's parts: a replaced row that matches is not evicted (its key's
    new row does not match), a kept row and a put row that match are."""
    p = provider(tmp_path)
    add(p, 0, [1, 2, 3, 4], [100, 100, 1, 1])
    store = p.get_store(1)
    store.put(rows([1, 4, 9], [1, 100, 100]))  # 1 no longer matches, 4 now does, 9 is new
    evicted = store.evict(lambda t: pa.compute.greater_equal(t.column("count"), 100), row_wise=True)
    assert sorted(evicted.column("k").to_pylist()) == [2, 4, 9]
    assert sorted(store.table().column("k").to_pylist()) == [1, 3]
    store.commit()
    assert sorted(p.get_read_store(2).table().column("k").to_pylist()) == [1, 3]


def test_a_put_after_an_insert_keeps_both_in_the_delta(tmp_path):
    """The delta of a view that inserted, then put over part of the base: the inserted rows
    that stayed are among the puts, beside the put's own rows."""
    p = provider(tmp_path)
    add(p, 0, [1, 2, 3], [1, 1, 1])
    store = p.get_store(1)
    store.insert(rows([10, 11], [5, 5]))
    store.put(rows([2, 10], [8, 8]))  # replaces a base row and an inserted one
    delta = store.pending_changes()
    puts = sorted(zip(delta.column("k").to_pylist(), delta.column("count").to_pylist()))
    assert puts == [(2, 8), (10, 8), (11, 5)]
    store.commit()
    clear_provider_cache()
    reread = provider(tmp_path, run_id="run-2").get_read_store(2).table()
    assert sorted(zip(*(c.to_pylist() for c in reread.columns))) == [(1, 1), (2, 8), (3, 1), (10, 8), (11, 5)]


def test_an_eviction_that_is_not_row_wise_sees_the_whole_table_after_a_put(tmp_path):
    """Without ``row_wise`` the predicate gets the whole current table, as before: a mask
    built from it (the stream-stream join's way) has one value per row of that table."""
    p = provider(tmp_path)
    add(p, 0, [1, 2, 3], [1, 1, 1])
    store = p.get_store(1)
    store.put(rows([2], [5]))
    seen: list[int] = []

    def by_position(t: pa.Table) -> pa.Array:
        seen.append(t.num_rows)
        return pa.array([k == 3 for k in t.column("k").to_pylist()])

    assert store.evict(by_position).column("k").to_pylist() == [3]
    assert seen == [3]
    store.commit()
    assert sorted(p.get_read_store(2).table().column("k").to_pylist()) == [1, 2]


def test_rows_that_fail_while_written_leave_no_file(tmp_path):
    """A ``KeptAndPut`` whose rows fail as they are built (memory, Arrow): the error goes up
    and no temporary file stays in the local directory."""

    class Failing:
        schema = pa.schema([("k", pa.int64())])

        def iter_batches(self):
            yield pa.record_batch([pa.array([1], pa.int64())], schema=self.schema)
            raise MemoryError("no room")

    target = tmp_path / "local" / "dir" / "2.arrow"
    with pytest.raises(MemoryError):
        local_disk.write_mapped(Failing(), target)
    assert list(target.parent.iterdir()) == []
