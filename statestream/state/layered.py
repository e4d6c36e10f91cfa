"""State versions held as sorted runs, so that a batch costs what it touches, not what is stored.

Why: the table store (:class:`~statestream.state.store.StateStore`) holds a version as one
table. Finding a batch's keys joins them with every stored key, and a commit writes the next
version whole, so a batch that updates 1% of a 200-million-key state still reads and writes the
other 99%. Spark's answer is its RocksDB provider, an LSM tree on the executor's local disk. This
is ours, in Arrow and numpy, for a query that asks for RocksDB
(``spark.sql.streaming.stateStore.providerClass``, :data:`LAYERED_PROVIDER_CLASSES`).

A version is a stack of :class:`SortedRun` s, oldest first. A run holds key rows sorted by a
64-bit hash of the key (:func:`~statestream.state.keys.hash_keys`), each key at most once, each
row a put (the key's value) or a tombstone (the key was removed). The newest run that holds a
key decides it. So:

* a **lookup** is a binary search of the batch's hashes in each run, newest first, and a
  row-by-row comparison of the keys whose hashes match (:func:`resolve`): its cost follows the
  batch, times the number of runs, times the logarithm of a run's size;
* a **commit** adds one run holding the view's changes (the rows it put, tombstones for the
  stored keys it removed): the delta file the checkpoint gets anyway, sorted;
* **compaction** keeps the stack short (:func:`plan_compaction`): once :data:`FANOUT` runs of
  one level pile up they merge into one run of the next level, and a run that grows to half the
  size of the oldest one merges with everything into a new bottom run, dropping tombstones (no
  older run is left for them to hide). Each row is rewritten about ``log(FANOUT)`` of the state's
  growth times, as in a size-tiered LSM tree; the merges are of sorted runs
  (:func:`merge_runs`: a stable sort that finds the runs already in order, then the newest row
  of each key).

With ``conf.on_local_disk`` every run is an uncompressed Arrow IPC file under Spark's local
directories, read memory-mapped, and its hashes a raw ``uint64`` file beside it, mapped with
numpy: a run costs page cache, not heap, and a batch touches the pages of the keys it looks up.

The checkpoint's files are the table store's (the same deltas and snapshots), so a checkpoint
moves between the two stores freely, and the state readers and tools read it unchanged.

What still costs the whole state: operations that need every live row (``table()``, an eviction
that finds rows, a snapshot), which merge the stack. A watermark's eviction first asks the
predicate of each run's raw rows and merges only when a row qualifies.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np
import pyarrow as pa

from statestream.errors.state import store_not_updating_error
from statestream.state.keys import drop_rows, first_row_of_each_key, group_ids, hash_keys, keys_equal_rowwise, match_keys
from statestream.state.local_disk import remove_mapped, write_mapped
from statestream.state.store import (
    FOUND_COLUMN,
    OP_COLUMN,
    OP_PUT,
    OP_PUT_REMOVED,
    OP_REMOVE,
    StateStoreMetrics,
    ReadStateStore,
    StoreOwner,
    TableLike,
    delta_removals,
    delta_rows,
    eviction_mask,
    table_fingerprint,
)

__all__ = [
    "LAYERED_PROVIDER_CLASSES",
    "SortedRun",
    "LayeredVersion",
    "LayeredStateStore",
    "resolve",
    "merge_runs",
    "plan_compaction",
    "run_from_changes",
    "run_from_table",
    "sorted_table_rows",
    "taken_in_slices",
]

log = logging.getLogger(__name__)

#: ``spark.sql.streaming.stateStore.providerClass`` values that select the layered store: Spark's
#: RocksDB provider, which users pick for a state larger than memory
LAYERED_PROVIDER_CLASSES = frozenset(
    {
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "org.apache.spark.sql.execution.streaming.state.rocksdb.RocksDBStateStoreProvider",
    }
)

#: runs of one level that merge into one run of the next
FANOUT = 4
#: a run at least this share of the bottom run's size merges with everything into a new bottom
BOTTOM_RATIO = 0.5
#: rows a merge gathers at a time when it writes a run (bounds its memory)
MERGE_SLICE_ROWS = 1 << 20


@dataclass(frozen=True, eq=False)
class SortedRun:
    """Key rows sorted by key hash: key columns, value columns (nullable), then the op column
    (:data:`~statestream.state.store.OP_PUT`, or :data:`~statestream.state.store.OP_REMOVE`
    for a tombstone, whose values are null); ``hashes`` align with the rows. Each key occurs at
    most once. ``level``: how many merges made it (0: one version's changes). ``files``: the
    local files it is mapped from, if any.

    >>> import pyarrow as pa
    >>> run = run_from_table(pa.table({"k": [3, 1, 2], "v": [30, 10, 20]}), num_keys=1)
    >>> run.num_rows, sorted(run.rows.column("k").to_pylist())
    (3, [1, 2, 3])
    """

    rows: pa.Table
    hashes: np.ndarray
    level: int = 0
    files: tuple[Path, ...] = ()

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def ops(self) -> np.ndarray:
        """The op of each row (put or tombstone) as numpy int8."""
        return self.rows.column(OP_COLUMN).to_numpy()


@dataclass(frozen=True, eq=False)
class LayeredVersion:
    """One version of a store: its runs, oldest first, and how many live keys they hold."""

    runs: tuple[SortedRun, ...]
    num_keys: int

    @property
    def num_rows(self) -> int:
        """Rows in all runs (shadowed rows and tombstones included)."""
        return sum(r.num_rows for r in self.runs)

    @property
    def nbytes(self) -> int:
        return sum(r.rows.nbytes + r.hashes.nbytes for r in self.runs)

    def in_memory_bytes(self) -> int:
        """Bytes of the runs that are not mapped from local files."""
        return sum(r.rows.nbytes + r.hashes.nbytes for r in self.runs if not r.files)


def _run_rows(rows: pa.Table) -> pa.Table:
    """``rows`` under a run's schema: every column nullable but the op column (so that runs
    from a snapshot, a delta and a view concatenate)."""
    fields = [f.with_nullable(f.name != OP_COLUMN) for f in rows.schema]
    schema = pa.schema(fields)
    return rows if rows.schema.equals(schema) else pa.Table.from_arrays(rows.columns, schema=schema)


def _sorted_run(rows: pa.Table, hashes: np.ndarray, level: int) -> SortedRun:
    rows = _run_rows(rows)
    order = np.argsort(hashes, kind="stable")
    if rows.num_rows and not (order[1:] > order[:-1]).all():
        rows = rows.take(pa.array(order))
        hashes = hashes[order]
    return SortedRun(rows, np.ascontiguousarray(hashes), level)


def run_from_table(table: pa.Table, num_keys: int) -> SortedRun:
    """A bottom run of a whole version (key and value columns, unique keys: a snapshot), in
    memory."""
    rows, hashes, order = sorted_table_rows(table, num_keys)
    return SortedRun(rows.take(pa.array(order)), hashes[order], level=0)


def run_from_changes(changes: pa.Table, num_keys: int) -> SortedRun:
    """The run of a delta (key and value columns then the op column, as a delta file holds
    them): its put rows, and a tombstone for each other key it removes (a put wins over a
    removal of the same key, as replaying the delta does); op-2 rows (put, then removed in the
    same version) are left out."""
    ops = changes.column(OP_COLUMN).to_numpy()
    puts = changes.filter(pa.array(ops == OP_PUT))
    removes = changes.filter(pa.array(ops == OP_REMOVE))
    keys = list(range(num_keys))
    if removes.num_rows:
        removes = removes.take(pa.array(first_row_of_each_key(removes.select(keys))))
        if puts.num_rows:
            li, _ = match_keys(removes.select(keys), puts.select(keys))
            if len(li):
                removes, _ = drop_rows(removes, li)
    rows = pa.concat_tables([puts, removes]) if removes.num_rows else puts
    return _sorted_run(rows, hash_keys(rows.select(keys)), level=0)


def taken_in_slices(table: pa.Table, order: np.ndarray) -> Callable[[], Iterator[pa.RecordBatch]]:
    """A function yielding ``table.take(order)`` in record batches of at most
    :data:`MERGE_SLICE_ROWS` rows: a sorted copy written out without ever being whole in
    memory."""

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, len(order), MERGE_SLICE_ROWS):
            part = table.take(pa.array(order[start : start + MERGE_SLICE_ROWS]))
            yield from part.combine_chunks().to_batches()

    return batches


def sorted_table_rows(table: pa.Table, num_keys: int) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """A whole version (key and value columns, unique keys: a snapshot) as a run's rows, their
    hashes and the order that sorts them (not applied: see :func:`taken_in_slices`)."""
    cols = list(table.columns) + [pa.array(np.full(table.num_rows, OP_PUT, dtype=np.int8))]
    fields = list(table.schema) + [pa.field(OP_COLUMN, pa.int8(), False)]
    rows = _run_rows(pa.Table.from_arrays(cols, schema=pa.schema(fields)))
    hashes = hash_keys(table.select(list(range(num_keys))))
    return rows, hashes, np.argsort(hashes, kind="stable")


def _candidates(run: SortedRun, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``hashes``, row of ``run``) for every row of ``run`` whose hash equals one of
    ``hashes`` (ascending)."""
    lo = np.searchsorted(run.hashes, hashes, side="left")
    hi = np.searchsorted(run.hashes, hashes, side="right")
    count = hi - lo
    hit = np.flatnonzero(count)
    if not len(hit):
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    count = count[hit]
    qi = np.repeat(hit, count)
    # positions lo, lo+1, ... for each hit (almost always one each)
    starts = np.repeat(lo[hit], count)
    offsets = np.arange(len(qi), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return qi.astype(np.int64, copy=False), (starts + offsets).astype(np.int64, copy=False)


def resolve(runs: tuple[SortedRun, ...], keys: pa.Table, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where each key row of ``keys`` lives in a stack of runs: ``(run index, row)`` of the
    newest run holding it, both -1 for a key no run holds. The row may be a tombstone (then
    the key is absent from the version: see :func:`found_in`).

    Runs are searched newest first, each only for the keys no newer run held."""
    n = keys.num_rows
    run_of = np.full(n, -1, dtype=np.int64)
    row_of = np.full(n, -1, dtype=np.int64)
    if n == 0 or not runs:
        return run_of, row_of
    if hashes is None:
        hashes = hash_keys(keys)
    order = np.argsort(hashes, kind="stable")
    pending = order  # query rows, ascending by hash
    nk = keys.num_columns
    for r in range(len(runs) - 1, -1, -1):
        run = runs[r]
        if not len(pending):
            break
        if not run.num_rows:
            continue
        qi, pos = _candidates(run, hashes[pending])
        if not len(qi):
            continue
        rows = pending[qi]
        stored = run.rows.select(list(range(nk))).take(pa.array(pos))
        same = keys_equal_rowwise(stored, keys.take(pa.array(rows)))
        rows, pos = rows[same], pos[same]
        if not len(rows):
            continue
        run_of[rows] = r
        row_of[rows] = pos
        pending = pending[run_of[pending] < 0]
    return run_of, row_of


def found_in(runs: tuple[SortedRun, ...], run_of: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Whether each key :func:`resolve` placed is live (its newest row is a put)."""
    found = np.zeros(len(run_of), dtype=bool)
    for r in np.unique(run_of[run_of >= 0]):
        at = np.flatnonzero(run_of == r)
        found[at] = runs[int(r)].ops()[row_of[at]] == OP_PUT
    return found


def _gather(runs: tuple[SortedRun, ...], run_of: np.ndarray, row_of: np.ndarray, columns: list[int]) -> tuple[pa.Table, np.ndarray]:
    """The ``columns`` of the rows :func:`resolve` placed, as one table, and each key's row in
    it (-1 where the key is in no run)."""
    parts: list[pa.Table] = []
    index = np.full(len(run_of), -1, dtype=np.int64)
    offset = 0
    for r in np.unique(run_of[run_of >= 0]):
        at = np.flatnonzero(run_of == r)
        parts.append(runs[int(r)].rows.select(columns).take(pa.array(row_of[at])))
        index[at] = offset + np.arange(len(at), dtype=np.int64)
        offset += len(at)
    if not parts:
        return runs[0].rows.select(columns).slice(0, 0), index
    return pa.concat_tables(parts), index


def plan_compaction(levels: list[int], sizes: list[int]) -> int | None:
    """Where a stack of runs (oldest first; their levels and row counts) should merge: the
    index of the oldest run of the merge, which takes every run from there on, or None.

    * A run as large as :data:`BOTTOM_RATIO` of the bottom run (index 0), or the bottom being
      empty while others are not: merge everything (a new bottom, tombstones dropped).
    * Otherwise, the newest :data:`FANOUT` runs above the bottom all of one level: merge them.

    >>> plan_compaction([0, 0, 0, 0], [5, 5, 5, 5])
    0
    >>> plan_compaction([0, 0, 0, 0, 0], [50, 5, 5, 5, 5])
    1
    >>> plan_compaction([2, 0, 0, 0, 0], [1000, 5, 5, 5, 5])
    1
    >>> plan_compaction([2, 1, 0], [1000, 20, 5]) is None
    True
    """
    n = len(levels)
    if n < 2:
        return None
    bottom = sizes[0]
    if any(s >= BOTTOM_RATIO * bottom for s in sizes[1:]) and any(sizes[1:]):
        return 0
    if n - 1 >= FANOUT and len(set(levels[-FANOUT:])) == 1:
        return n - FANOUT
    return None


def merge_runs(runs: list[SortedRun], num_keys: int, drop_tombstones: bool) -> tuple[np.ndarray, Callable[[], Iterator[pa.RecordBatch]], pa.Schema, int]:
    """Merge runs (oldest first) into one: the newest row of each key, sorted by hash, without
    tombstones when ``drop_tombstones`` (the merge reaches the bottom, so nothing older is left
    for them to hide).

    Returns the merged hashes, a function yielding the merged rows in record batches of at most
    :data:`MERGE_SLICE_ROWS` (so that a large merge is written out without being whole in
    memory), their schema and the number of live keys (put rows) among them."""
    newest_first = list(reversed(runs))
    hashes = np.concatenate([r.hashes for r in newest_first]) if newest_first else np.empty(0, dtype=np.uint64)
    # runs are each sorted, so a stable sort finds them in order; for equal hashes the newest
    # run's row comes first
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    table = pa.concat_tables([r.rows for r in newest_first])
    keep = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        same = sorted_hashes[1:] == sorted_hashes[:-1]
        shared = np.zeros(len(order), dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        at = np.flatnonzero(shared)
        if len(at):
            keys = table.select(list(range(num_keys))).take(pa.array(order[at]))
            ids = group_ids(keys.columns, keys.num_rows)
            _, first = np.unique(ids, return_index=True)
            keep[at] = False
            keep[at[first]] = True
    ops = np.concatenate([r.ops() for r in newest_first]) if newest_first else np.empty(0, dtype=np.int8)
    if drop_tombstones:
        keep &= ops[order] == OP_PUT
    live = int(np.count_nonzero(keep & (ops[order] == OP_PUT)))
    return sorted_hashes[keep], taken_in_slices(table, order[keep]), table.schema, live


@dataclass
class RunWriter:
    """Where runs go: in memory, or (``directory`` set) as mapped files under it."""

    directory: Path | None = None
    written: list[Path] = field(default_factory=list)

    def run(self, rows: "pa.Table | Callable[[], Iterator[pa.RecordBatch]]", schema: pa.Schema, hashes: np.ndarray, level: int) -> SortedRun:
        """A run of ``rows`` (a table, or a function yielding its record batches)."""
        if self.directory is None:
            table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches(list(rows()), schema=schema)
            return SortedRun(table, hashes, level)
        name = f"run-{secrets.token_hex(8)}"
        data = self.directory / f"{name}.arrow"
        hash_file = self.directory / f"{name}.hash"
        source: object = rows if isinstance(rows, pa.Table) else _Batches(schema, rows)
        try:
            mapped = write_mapped(source, data)
            hashes.astype(np.uint64, copy=False).tofile(hash_file)
            mapped_hashes = np.memmap(hash_file, dtype=np.uint64, mode="r") if len(hashes) else np.empty(0, dtype=np.uint64)
        except OSError:
            remove_mapped(data)
            remove_mapped(hash_file)
            raise
        self.written += [data, hash_file]
        return SortedRun(mapped, mapped_hashes, level, (data, hash_file))


@dataclass(frozen=True)
class _Batches:
    schema: pa.Schema
    produce: Callable[[], Iterator[pa.RecordBatch]]

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        return self.produce()


def compact(runs: list[SortedRun], writer: RunWriter, num_keys: int) -> list[SortedRun]:
    """``runs`` after every merge :func:`plan_compaction` asks for."""
    while True:
        start = plan_compaction([r.level for r in runs], [r.num_rows for r in runs])
        if start is None:
            return runs
        merged = runs[start:]
        hashes, batches, schema, _live = merge_runs(merged, num_keys, drop_tombstones=start == 0)
        level = max(r.level for r in merged) + 1
        run = writer.run(batches, schema, hashes, level)
        log.debug("merged %d runs (%d rows) into one of %d rows at level %d", len(merged), sum(r.num_rows for r in merged), run.num_rows, level)
        runs = runs[:start] + [run]


def drop_run_files(runs: list[SortedRun]) -> None:
    """Delete the local files of ``runs`` (a table still mapped from one stays readable)."""
    for run in runs:
        for path in run.files:
            remove_mapped(path)


class LayeredOwner(StoreOwner, Protocol):
    """What a layered view needs of its provider: a table store's owner that also commits a
    :class:`LayeredVersion` (``provider.StateStoreProvider``)."""

    def _commit_layered(
        self, base_version: int, version: "LayeredVersion", change: "SortedRun | None", num_keys: int, delta: pa.Table
    ) -> tuple[int, "LayeredVersion"]: ...


class LayeredStateStore(ReadStateStore):
    """A read-write view of a :class:`LayeredVersion`: the same operations as
    :class:`~statestream.state.store.StateStore`, with this batch's changes held apart from the
    runs until the commit adds them as one more run.

    The changes: ``top``, the rows put in this view (current values, unique keys), with for
    each whether its key is live in the runs; ``gone``, the live keys of the runs this view
    removed; and, for the delta file, every removal and every row put and removed again, as the
    table store records them.

    >>> import tempfile, pyarrow as pa
    >>> from statestream.state.provider import get_provider
    >>> from statestream.state.store import StateStoreConf, StateStoreId
    >>> schema = pa.schema([("k", pa.int64())]), pa.schema([("n", pa.int64())])
    >>> provider = get_provider(StateStoreId(tempfile.mkdtemp(), 0, 0), *schema, StateStoreConf(layered=True), "run")
    >>> store = provider.get_store(0)
    >>> store.put(pa.table({"k": [1, 2], "n": [10, 20]}))
    >>> store.commit()
    1
    >>> store = provider.get_store(1)
    >>> store.lookup(pa.table({"k": [2, 3]})).column("n").to_pylist()
    [20, None]
    >>> store.abort()
    """

    def __init__(self, provider: LayeredOwner, version: int, layered: LayeredVersion, read_only: bool = False) -> None:
        self._owner = provider
        self._layered = layered
        self._read_only = read_only
        schema = provider.schema
        super().__init__(provider, version, schema.empty_table())
        self._state = "updating" if not read_only else "read"
        self._top = schema.empty_table()
        self._top_in_runs = np.zeros(0, dtype=bool)
        self._gone = provider.key_schema.empty_table()
        self._removed: list[pa.Table] = []
        self._put_removed: list[pa.Table] = []
        self._live: pa.Table | None = None
        # the last keys resolved in the runs (:meth:`_resolve_live`): their fingerprint, whether
        # each is live, the keys themselves (kept alive, so that equal buffer addresses mean the
        # same data), their hashes, and where :func:`resolve` placed them
        self._resolved: tuple[tuple, np.ndarray, pa.Table, np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- reads --------------------------------------------------------------------------------
    @property
    def layered_version(self) -> LayeredVersion:
        return self._layered

    def _changed(self) -> None:
        self._generation += 1
        self._live = None

    def _in_runs(self, keys: pa.Table) -> np.ndarray:
        """Whether each key row is live in the runs (not counting this view's changes)."""
        cached = self._resolved
        if cached is not None and cached[0] == table_fingerprint(keys):
            return cached[1]
        return self._resolve_live(keys)

    def _resolve_live(self, keys: pa.Table) -> np.ndarray:
        """:func:`resolve` and :func:`found_in` for ``keys``, remembered with their hashes: a
        put of rows built from the very same key arrays asks again, and the commit's run needs
        the hashes (the runs do not change within a view, so the answer holds until then)."""
        hashes = hash_keys(keys)
        runs = self._layered.runs
        run_of, row_of = resolve(runs, keys, hashes)
        found = found_in(runs, run_of, row_of)
        self._resolved = (table_fingerprint(keys), found, keys, hashes, run_of, row_of)
        return found

    def lookup(self, keys: TableLike) -> pa.Table:
        """The stored value of each key row (nulls where absent) and a ``"__found"`` column."""
        kt = self._conform(keys, self.key_schema, "lookup keys")
        n = kt.num_rows
        nk, nv = self._nk, self._nv
        values = list(range(nk, nk + nv))
        parts: list[pa.Table] = []
        index = np.full(n, -1, dtype=np.int64)
        rest = np.arange(n, dtype=np.int64)
        if self._top.num_rows and n:
            ti, ri = match_keys(self._key_table(self._top), kt)
            parts.append(self._top.select(values))
            index[ri] = ti
            rest = np.flatnonzero(index < 0)
        if self._gone.num_rows and len(rest):
            _, ri = match_keys(self._gone, kt.take(pa.array(rest)))
            rest = np.delete(rest, ri)
        if len(rest) and self._layered.runs:
            sub = kt.take(pa.array(rest)) if len(rest) < n else kt
            runs = self._layered.runs
            found = self._resolve_live(sub)
            run_of, row_of = self._resolved[4].copy(), self._resolved[5]  # type: ignore[index]
            run_of[~found] = -1
            taken, at = _gather(runs, run_of, row_of, values)
            offset = sum(p.num_rows for p in parts)
            hit = at >= 0
            index[rest[hit]] = offset + at[hit]
            parts.append(taken)
        absent = index < 0
        fields = [f.with_nullable(True) for f in self.value_schema]
        if parts:
            source = pa.Table.from_arrays(pa.concat_tables([p.cast(pa.schema(fields)) for p in parts]).columns, schema=pa.schema(fields))
            arrays = [source.column(j).take(pa.array(index, mask=absent)) for j in range(nv)]
        else:
            arrays = [pa.nulls(n, type=f.type) for f in fields]
        arrays.append(pa.array(~absent))
        fields.append(pa.field(FOUND_COLUMN, pa.bool_(), nullable=False))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _change_run(self) -> SortedRun | None:
        """This view's changes as the newest run: its put rows and tombstones for ``gone``."""
        parts = []
        schema = self._provider.delta_schema
        if self._top.num_rows:
            parts.append(delta_rows(self._top, OP_PUT, schema))
        if self._gone.num_rows:
            parts.append(delta_removals(self._gone, self.value_schema, schema))
        if not parts:
            return None
        rows = pa.concat_tables(parts)
        keys = rows.select(list(range(self._nk)))
        cached = self._resolved
        if len(parts) == 1 and self._top.num_rows and cached is not None and cached[0] == table_fingerprint(self._key_table(self._top)):
            hashes = cached[3]  # the lookup's keys are the put's: hashed once
        else:
            hashes = hash_keys(keys)
        return _sorted_run(rows, hashes, level=0)

    def table(self) -> pa.Table:
        """Every live row (key columns, then value columns): a merge of all runs."""
        if self._live is None:
            chunks = list(self.iter_live())
            schema = self._provider.schema
            self._live = pa.Table.from_arrays(pa.concat_tables(chunks).columns, schema=schema) if chunks else schema.empty_table()
        return self._live

    def iter_live(self) -> Iterator[pa.Table]:
        """Every live row, as :meth:`table` holds them, in tables of at most
        :data:`MERGE_SLICE_ROWS` rows: a reader of a store far larger than memory never holds
        it whole (the runs are mapped from local disk; only a slice is copied at a time)."""
        if self._live is not None:
            for batch in self._live.to_batches(max_chunksize=MERGE_SLICE_ROWS):
                yield pa.Table.from_batches([batch], schema=self._live.schema)
            return
        runs = list(self._layered.runs)
        change = self._change_run()
        if change is not None:
            runs.append(change)
        if not runs:
            return
        kv = list(range(self._nk + self._nv))
        for batch in merge_runs(runs, self._nk, drop_tombstones=True)[1]():
            if batch.num_rows:
                yield pa.Table.from_arrays(pa.Table.from_batches([batch]).select(kv).columns, schema=self._provider.schema)

    def num_keys(self) -> int:
        return self._layered.num_keys + int(np.count_nonzero(~self._top_in_runs)) - self._gone.num_rows

    def metrics(self) -> StateStoreMetrics:
        hits, misses = self._provider.cache_counts()
        return StateStoreMetrics(
            num_keys=self.num_keys(),
            memory_used_bytes=self._provider.memory_used_bytes(extra=self._top),
            custom_metrics={
                "stateOnCurrentVersionSizeBytes": int(self._layered.nbytes + self._top.nbytes),
                "loadedMapCacheHitCount": hits,
                "loadedMapCacheMissCount": misses,
            },
        )

    # -- writes -------------------------------------------------------------------------------
    @property
    def has_committed(self) -> bool:
        return self._state == "committed"

    def _check_updating(self, what: str) -> None:
        if self._state != "updating":
            raise store_not_updating_error(what, self.id, self._version, self._state)

    def _append_top(self, rows: pa.Table, in_runs: np.ndarray) -> None:
        self._top = pa.concat_tables([self._top, rows]).combine_chunks() if self._top.num_rows else rows
        self._top_in_runs = np.concatenate([self._top_in_runs, in_runs])

    def _ungone(self, keys: pa.Table) -> np.ndarray:
        """Take ``keys`` out of ``gone``; returns which of them were there (live in the runs)."""
        back = np.zeros(keys.num_rows, dtype=bool)
        if self._gone.num_rows and keys.num_rows:
            gi, ki = match_keys(self._gone, keys)
            if len(gi):
                back[ki] = True
                self._gone, _ = drop_rows(self._gone, gi)
        return back

    def put(self, rows: TableLike) -> None:
        """Insert or replace key + value rows (unique keys within ``rows``)."""
        self._check_updating("update")
        rows_t = self._conform(rows, self._provider.schema, "put rows")
        n = rows_t.num_rows
        if n == 0:
            return
        keys = self._key_table(rows_t)
        in_runs = np.zeros(n, dtype=bool)
        replaced = np.zeros(n, dtype=bool)
        if self._top.num_rows:
            ti, ri = match_keys(self._key_table(self._top), keys)
            if len(ti):
                replaced[ri] = True
                in_runs[ri] = self._top_in_runs[ti]
                self._top, keep = drop_rows(self._top, ti)
                self._top_in_runs = self._top_in_runs[keep]
        fresh = np.flatnonzero(~replaced)
        if len(fresh):
            sub = keys if len(fresh) == n else keys.take(pa.array(fresh))
            back = self._ungone(sub)
            in_runs[fresh[back]] = True
            ask = fresh[~back]
            if len(ask) and self._layered.runs:
                probe = keys if len(ask) == n else keys.take(pa.array(ask))
                in_runs[ask] = self._in_runs(probe)
        self._append_top(rows_t, in_runs)
        self._changed()

    def insert(self, rows: TableLike) -> None:
        """Append rows whose keys the caller knows are absent (see ``StateStore.insert``)."""
        self._check_updating("update")
        rows_t = self._conform(rows, self._provider.schema, "insert rows")
        if rows_t.num_rows == 0:
            return
        back = self._ungone(self._key_table(rows_t))
        self._append_top(rows_t, back)
        self._changed()

    def remove(self, keys: TableLike) -> int:
        """Remove the given keys (absent keys are ignored); returns how many were removed."""
        self._check_updating("update")
        kt = self._conform(keys, self.key_schema, "remove keys")
        if kt.num_rows == 0:
            return 0
        first = first_row_of_each_key(kt)
        if len(first) < kt.num_rows:
            kt = kt.take(pa.array(first))
        removed = 0
        rest = np.arange(kt.num_rows, dtype=np.int64)
        if self._top.num_rows:
            ti, ri = match_keys(self._key_table(self._top), kt)
            if len(ti):
                taken = self._top.take(pa.array(ti))
                self._put_removed.append(taken)
                self._removed.append(self._key_table(taken))
                was_in_runs = self._top_in_runs[ti]
                if was_in_runs.any():
                    self._gone = pa.concat_tables([self._gone, self._key_table(taken).filter(pa.array(was_in_runs))])
                self._top, keep = drop_rows(self._top, ti)
                self._top_in_runs = self._top_in_runs[keep]
                removed += len(ti)
                rest = np.delete(rest, ri)
        if len(rest) and self._gone.num_rows:
            _, ri = match_keys(self._gone, kt.take(pa.array(rest)))
            rest = np.delete(rest, ri)
        if len(rest) and self._layered.runs:
            sub = kt.take(pa.array(rest))
            runs = self._layered.runs
            run_of, row_of = resolve(runs, sub)
            live = found_in(runs, run_of, row_of)
            if live.any():
                gone = sub.filter(pa.array(live))
                self._gone = pa.concat_tables([self._gone, gone]) if self._gone.num_rows else gone
                self._removed.append(gone)
                removed += gone.num_rows
        if removed:
            self._changed()
        return removed

    def evict(self, predicate: Callable[[pa.Table], "pa.Array | pa.ChunkedArray | np.ndarray"], row_wise: bool = False) -> pa.Table:
        """Remove every live row for which ``predicate`` is true and return those rows.

        ``row_wise``: the predicate decides each row alone, so it is first asked of each run's
        raw rows and of this view's puts; when none qualifies, nothing is merged."""
        self._check_updating("update")
        if row_wise and not self._any_qualifies(predicate):
            return self._provider.schema.empty_table()
        live = self.table()
        if live.num_rows == 0:
            return live
        mask = eviction_mask(self.id, live, predicate)
        if not mask.any():
            return live.schema.empty_table()
        evicted = live.filter(pa.array(mask))
        self.remove(self._key_table(evicted))
        return evicted

    def _any_qualifies(self, predicate: Callable[[pa.Table], "pa.Array | pa.ChunkedArray | np.ndarray"]) -> bool:
        kv = list(range(self._nk + self._nv))
        schema = self._provider.schema
        for run in self._layered.runs:
            if not run.num_rows:
                continue
            puts = run.rows.filter(pa.array(run.ops() == OP_PUT)).select(kv)
            if puts.num_rows and eviction_mask(self.id, pa.Table.from_arrays(puts.columns, schema=schema), predicate).any():
                return True
        return bool(self._top.num_rows) and bool(eviction_mask(self.id, self._top, predicate).any())

    def pending_changes(self) -> pa.Table:
        """What ``commit()`` writes to the delta file, in the table store's layout: rows put and
        removed again (op 2), removed keys (op 1), rows put (op 0)."""
        schema = self._provider.delta_schema
        parts = [delta_rows(rows, OP_PUT_REMOVED, schema) for rows in self._put_removed]
        parts += [delta_removals(keys, self.value_schema, schema) for keys in self._removed]
        if self._top.num_rows:
            parts.append(delta_rows(self._top, OP_PUT, schema))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def commit(self) -> int:
        """Write ``<version+1>.delta`` and add this view's changes as a run; returns the version."""
        self._check_updating("commit")
        new_version, committed = self._owner._commit_layered(  # noqa: SLF001 - a store commits through its provider
            self._version, self._layered, self._change_run(), self.num_keys(), self.pending_changes()
        )
        self._layered = committed
        self._top = self._provider.schema.empty_table()
        self._top_in_runs = np.zeros(0, dtype=bool)
        self._gone = self.key_schema.empty_table()
        self._removed = []
        self._put_removed = []
        self._state = "committed"
        self._changed()
        return new_version

    def abort(self) -> None:
        """Discard pending changes. Idempotent; does nothing after a successful commit."""
        if self._state == "updating":
            self._state = "aborted"
            self._top = self._provider.schema.empty_table()
            self._top_in_runs = np.zeros(0, dtype=bool)
            self._gone = self.key_schema.empty_table()
            self._removed = []
            self._put_removed = []
            self._changed()
        self._released = True

