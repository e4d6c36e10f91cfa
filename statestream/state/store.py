"""State store identity, configuration, metrics, and the read / read-write store views.

Spark: ``StateStoreId``, ``StateStoreConf``, ``StateStoreMetrics``, ``ReadStateStore`` and
``StateStore`` (``sql/execution/streaming/state/StateStore.scala``).

A store view holds one version of one partition's state as an Arrow table: the key columns
first, then the value columns. Every operation works on whole Arrow tables (joins, filters,
``take``), never row by row, because a partition may hold a million keys and a batch may touch
a large share of them. Which rows hold "the same key" is decided by :func:`keys.match_keys`,
which follows Spark's grouping equality (null == null, ``-0.0 == 0.0``, NaN == NaN).

Views are created by a provider (:mod:`statestream.state.provider`), which owns the files and
the in-memory cache of committed versions; a view only knows how to hand its result back to the
provider on ``commit()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.errors.state import (
    eviction_predicate_length_error,
    max_batches_in_memory_error,
    on_local_disk_conf_error,
    state_column_count_error,
    state_column_type_error,
    state_compression_codec_error,
    state_data_type_error,
    store_not_updating_error,
    store_setting_below_one_error,
)
from statestream.state.keys import match_keys
from statestream.state.local_disk import ON_LOCAL_DISK_CONF

__all__ = [
    "StateStoreId",
    "StateStoreConf",
    "StateStoreMetrics",
    "ReadStateStore",
    "StateStore",
    "FOUND_COLUMN",
    "OP_PUT",
    "OP_REMOVE",
    "OP_PUT_REMOVED",
    "OP_COLUMN",
    "CUSTOM_METRIC_NAMES",
    "StoreOwner",
    "KeptAndPut",
]

log = logging.getLogger(__name__)

#: Name of the boolean column ``lookup`` appends to the value columns.
FOUND_COLUMN = "__found"

#: Name of the operation column of a delta file.
OP_COLUMN = "__op"

#: Values of the op column in a delta file (and in a store's pending changes).
OP_PUT = 0
OP_REMOVE = 1
#: a row put in this version and removed later in it (a window updated and evicted in one
#: batch): kept in the delta so that the change feed shows the put before the removal, as
#: Spark's delta files (every put and remove, in order) make it; rebuilding a version ignores it
OP_PUT_REMOVED = 2

#: Custom metrics reported by every store, under the HDFS-backed provider's names.
CUSTOM_METRIC_NAMES = ("stateOnCurrentVersionSizeBytes", "loadedMapCacheHitCount", "loadedMapCacheMissCount")

#: A put / remove argument: a table, or a record batch (converted without copying).
TableLike = Union[pa.Table, pa.RecordBatch]

# Compact a state table once its chunk count passes this bound: each put appends a chunk, and
# joins / takes over thousands of tiny chunks get slow, while compacting every time costs a copy.
_MAX_CHUNKS = 8


@dataclass(frozen=True)
class StateStoreId:
    """Identity of one store: ``<checkpoint_root>/<operator_id>/<partition_id>[/<store_name>]``.

    ``checkpoint_root`` is the query's ``<checkpoint>/state`` directory (a local path or a
    ``pyarrow.fs`` URI). Hashable, so it can key the process-wide provider cache.
    """

    checkpoint_root: str
    operator_id: int
    partition_id: int
    store_name: str = "default"

    @property
    def relative_dir(self) -> str:
        """The store's directory relative to ``checkpoint_root`` (Spark adds the store name as a
        sub-directory only for non-default stores)."""
        base = f"{self.operator_id}/{self.partition_id}"
        return base if self.store_name == "default" else f"{base}/{self.store_name}"

    def __str__(self) -> str:
        return (
            f"StateStoreId[ checkpointRootLocation={self.checkpoint_root}, operatorId={self.operator_id}, "
            f"partitionId={self.partition_id}, storeName={self.store_name} ]"
        )


@dataclass(frozen=True)
class StateStoreConf:
    """Store settings (Spark's ``spark.sql.streaming.stateStore.*`` / ``minBatchesToRetain``).

    Parameters
    ----------
    min_deltas_for_snapshot
        ``do_maintenance`` writes a snapshot once more than this many deltas follow the last one.
    min_batches_to_retain
        Files needed to rebuild the last this-many versions are kept; older ones are deleted.
    compression
        IPC body compression of state files: ``"lz4"`` (LZ4 frame), ``"zstd"`` or ``"none"``.
    max_versions_in_memory
        How many committed versions a provider keeps cached (Spark's
        ``maxBatchesToRetainInMemory``, 2): the newest one makes the next batch a cache hit, the
        previous one makes a re-executed batch a cache hit too.
    on_local_disk
        Keep the cached versions memory-mapped on the executor's local disk instead of in the
        Python worker's memory (:mod:`statestream.state.local_disk`): for a state larger than
        memory. The checkpoint's files are the same either way. A query turns it on unless its
        session sets ``spark.statestream.stateStore.onLocalDisk`` to false
        (:data:`~statestream.state.local_disk.ON_LOCAL_DISK_DEFAULT`); a conf built without
        it, as the tools that read a checkpoint on the driver build theirs, keeps versions in
        memory.
    layered
        Hold each version as sorted runs (:mod:`statestream.state.layered`), so that a batch
        costs what it touches rather than what the store holds: for a state far larger than a
        batch. A query turns it on when it asks for Spark's RocksDB provider
        (``spark.sql.streaming.stateStore.providerClass``). Same files in the checkpoint.
    """

    min_deltas_for_snapshot: int = 10
    min_batches_to_retain: int = 100
    compression: str = "lz4"
    max_versions_in_memory: int = 2
    on_local_disk: bool = False
    layered: bool = False

    def __post_init__(self) -> None:
        if self.min_deltas_for_snapshot < 1:
            raise store_setting_below_one_error("min_deltas_for_snapshot", self.min_deltas_for_snapshot)
        if self.min_batches_to_retain < 1:
            raise store_setting_below_one_error("min_batches_to_retain", self.min_batches_to_retain)
        if self.max_versions_in_memory < 1:
            raise store_setting_below_one_error("max_versions_in_memory", self.max_versions_in_memory)
        if self.compression.lower() not in ("lz4", "zstd", "none", "uncompressed"):
            raise state_compression_codec_error(self.compression)

    @property
    def ipc_compression(self) -> str | None:
        """The value for ``pyarrow.ipc.IpcWriteOptions(compression=...)``."""
        c = self.compression.lower()
        return None if c in ("none", "uncompressed") else c


def versions_in_memory_from_conf(value: str | None) -> int:
    """``max_versions_in_memory`` from ``spark.sql.streaming.maxBatchesToRetainInMemory``.

    Spark takes 0 or less as "cache nothing". Ours keeps at least the newest version, which
    maintenance writes its snapshot from, so any value below 1 means 1: the fewest versions this
    provider can hold."""
    try:
        n = int(str(value).strip())
    except ValueError:
        raise max_batches_in_memory_error(value) from None
    return max(n, 1)


def on_local_disk_from_conf(value: str | None) -> bool:
    """``on_local_disk`` from :data:`~statestream.state.local_disk.ON_LOCAL_DISK_CONF` (true / false)."""
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise on_local_disk_conf_error(ON_LOCAL_DISK_CONF, value)
    return text == "true"


@dataclass
class StateStoreMetrics:
    """What a store reports after an update (Spark: ``StateStoreMetrics``).

    ``memory_used_bytes`` covers every table the provider holds in memory (all cached versions
    plus the view's working table), like Spark's HDFS provider; ``custom_metrics`` carries
    :data:`CUSTOM_METRIC_NAMES`.
    """

    num_keys: int
    memory_used_bytes: int
    custom_metrics: dict[str, int] = field(default_factory=dict)


def _array_fingerprint(arr: pa.Array) -> tuple:
    return (arr.offset, len(arr), tuple(b.address if b is not None else 0 for b in arr.buffers()))


def table_fingerprint(table: pa.Table) -> tuple:
    """Identity of a table's data: the addresses of its buffers (not a content hash)."""
    return (table.num_rows,) + tuple(
        tuple(_array_fingerprint(chunk) for chunk in col.chunks) for col in table.columns
    )


def rows_where(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """``table.filter(mask)``, as a zero-copy slice when the true rows are one contiguous run.

    They nearly always are for the rows a store view put: ``put`` appends them after the rows it
    keeps, so the pending delta is the table's tail, and a slice saves copying it (14 ms for
    160,000 rows of a string and a struct key) before the delta file is written."""
    count = int(np.count_nonzero(mask))
    if count == 0:
        return table.slice(0, 0)
    first = int(np.argmax(mask))
    if mask[first : first + count].all():
        return table.slice(first, count)
    return table.filter(pa.array(mask))


class KeptAndPut:
    """A store's rows after a ``put`` that replaced some keys, not yet copied into one table:
    the rows of ``base`` where ``keep`` is true, then ``rows``.

    Why: ``base`` is the version the view opened, often mapped from a file
    (``conf.on_local_disk``), and a batch that updates a fifth of a partition's keys would copy
    the other four fifths (``Table.filter``) only for ``commit()`` to write them to the next
    version's file and drop the copy. Kept this way, the view writes the new version from slices
    of ``base`` (:meth:`to_batches`, one bounded slice copied at a time), and only an operation
    that needs the whole table at once (a lookup, a removal, an eviction that finds rows)
    materialises it (:meth:`materialise`), which is what ``put`` used to do."""

    __slots__ = ("base", "keep", "rows", "num_rows")

    #: the most base slices the written version has (each becomes a chunk of the table mapped
    #: from the file: below the view's compaction bound, ``_MAX_CHUNKS``)
    MAX_BASE_SLICES = 6
    #: the smallest slice: fewer, larger writes for a small partition
    MIN_SLICE_ROWS = 65_536

    def __init__(self, base: pa.Table, keep: np.ndarray, rows: pa.Table) -> None:
        self.base = base
        self.keep = keep
        self.rows = rows
        self.num_rows = int(np.count_nonzero(keep)) + rows.num_rows

    @property
    def schema(self) -> pa.Schema:
        return self.rows.schema

    def materialise(self) -> pa.Table:
        """The rows as one table, as a put used to build it (compacted past ``_MAX_CHUNKS``)."""
        table = pa.concat_tables([self.base.filter(pa.array(self.keep)), self.rows])
        if table.num_columns and table.column(0).num_chunks > _MAX_CHUNKS:
            table = table.combine_chunks()
        return table

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches: the base's kept rows in batches of about a sixth of the
        base each (slices filtered one at a time: a writer holds up to about four slices'
        copies at once, the gathered pieces and their combined batch), then ``rows`` in one
        batch: at most ``MAX_BASE_SLICES + 2`` batches, which stay below the compaction bound
        as the chunks of the table mapped from the file."""
        size = max(self.MIN_SLICE_ROWS, -(-self.base.num_rows // self.MAX_BASE_SLICES))
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        start = 0
        for batch in self.base.to_batches(max_chunksize=size):
            k = self.keep[start : start + batch.num_rows]
            start += batch.num_rows
            if not k.any():
                continue
            pending.append(batch if k.all() else batch.filter(pa.array(k)))
            pending_rows += pending[-1].num_rows
            if pending_rows >= size:
                yield from _gathered(pending)
                pending, pending_rows = [], 0
        if pending:
            yield from _gathered(pending)
        if self.rows.num_rows:
            yield from _gathered(self.rows.to_batches())


def _gathered(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """``batches`` (one schema) gathered into as few record batches as Arrow allows: one,
    unless a string column would pass its 2 GiB offsets (Arrow then keeps several chunks) or
    a nested column cannot be combined (then they stay as they are)."""
    batches = [b for b in batches if b.num_rows]
    if len(batches) <= 1:
        return batches
    try:
        return pa.Table.from_batches(batches).combine_chunks().to_batches()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return batches


def _as_table(data: TableLike) -> pa.Table:
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data
    raise state_data_type_error(data)


def delta_rows(rows: pa.Table, op: int, schema: pa.Schema) -> pa.Table:
    """Key + value rows as delta rows (``schema``: the provider's ``delta_schema``) of one op
    (:data:`OP_PUT` or :data:`OP_PUT_REMOVED`)."""
    cols = list(rows.columns) + [pa.array(np.full(rows.num_rows, op, dtype=np.int8))]
    return pa.Table.from_arrays(cols, schema=schema)


def delta_removals(keys: pa.Table, value_schema: pa.Schema, schema: pa.Schema) -> pa.Table:
    """Removed keys as delta rows: null values, op :data:`OP_REMOVE`."""
    n = keys.num_rows
    cols = list(keys.columns) + [pa.nulls(n, type=f.type) for f in value_schema]
    cols.append(pa.array(np.full(n, OP_REMOVE, dtype=np.int8)))
    return pa.Table.from_arrays(cols, schema=schema)


def eviction_mask(
    store_id: "StateStoreId", table: pa.Table, predicate: Callable[[pa.Table], "pa.Array | pa.ChunkedArray | np.ndarray"]
) -> np.ndarray:
    """``predicate(table)`` as one numpy boolean per row, a null counting as false; a
    predicate answering for another number of rows is an error naming the store."""
    mask = predicate(table)
    if len(mask) != table.num_rows:
        raise eviction_predicate_length_error(store_id, len(mask), table.num_rows)
    if isinstance(mask, np.ndarray):
        mask = pa.array(mask)
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


class StoreOwner(Protocol):
    """What a view needs of the provider that opened it (``StateStoreProvider`` in
    :mod:`statestream.state.provider` is the one implementation). A protocol, so that this module
    does not import the provider module, which imports it."""

    store_id: "StateStoreId"
    key_schema: pa.Schema
    value_schema: pa.Schema
    #: key columns then value columns
    schema: pa.Schema
    #: key columns, nullable value columns, then the op column
    delta_schema: pa.Schema

    def cache_counts(self) -> tuple[int, int]: ...

    def memory_used_bytes(self, extra: pa.Table | None = None) -> int: ...

    def _commit(self, base_version: int, table: "pa.Table | KeptAndPut", delta: pa.Table) -> tuple[int, pa.Table]: ...


class ReadStateStore:
    """A read-only view of one committed version of a store.

    Lifecycle: obtained from ``provider.get_read_store(version)``; ``abort()`` releases it (it is
    idempotent and does nothing else, since a read view never writes). The view's table is an
    immutable Arrow table shared with the provider's cache, so opening a view costs no copy.
    """

    def __init__(self, provider: StoreOwner, version: int, table: pa.Table) -> None:
        self._provider = provider
        self._version = version
        self._table = table
        self._nk = len(provider.key_schema)
        self._nv = len(provider.value_schema)
        self._released = False
        # Bumped by every change of ``_table``; part of the key of the match cache.
        self._generation = 0
        # (generation, fingerprint of the key columns, state row indices, key row indices, keys)
        self._last_match: tuple[int, tuple, np.ndarray, np.ndarray, pa.Table] | None = None

    # -- identity ---------------------------------------------------------------------------
    @property
    def id(self) -> "StateStoreId":
        return self._provider.store_id

    @property
    def version(self) -> int:
        """The version this view was opened at."""
        return self._version

    @property
    def key_schema(self) -> pa.Schema:
        return self._provider.key_schema

    @property
    def value_schema(self) -> pa.Schema:
        return self._provider.value_schema

    # -- reads ------------------------------------------------------------------------------
    def _key_table(self, table: pa.Table) -> pa.Table:
        return table.select(list(range(self._nk)))

    def _conform(self, data: TableLike, schema: pa.Schema, what: str) -> pa.Table:
        """``data`` with exactly ``schema``'s column types and names, matched by position.

        Names are not trusted (Spark matches state rows by position too); types are cast when
        they differ, and a failed cast names the store and the column.
        """
        table = _as_table(data)
        if table.num_columns != len(schema):
            raise state_column_count_error(what, self.id, schema.names, table.column_names)
        if len(schema) == 0:
            return table.select([])  # keeps the row count (the global aggregation's empty key)
        cols = []
        for i, f in enumerate(schema):
            col = table.column(i)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise state_column_type_error(what, self.id, i, table.column_names[i], col.type, f.type, exc) from exc
            cols.append(col)
        return pa.Table.from_arrays(cols, schema=schema)

    def _match(self, keys: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """``match_keys(state keys, keys)``, reusing the previous answer for the same key arrays.

        The aggregation flow looks up a batch's keys and then puts rows built from the very same
        key arrays; recognising them (same Arrow buffers, same state generation) saves the
        second join. Buffers are immutable and the cached entry keeps them alive, so equal buffer
        addresses mean equal data.
        """
        fp = table_fingerprint(keys)
        last = self._last_match
        if last is not None and last[0] == self._generation and last[1] == fp:
            return last[2], last[3]
        li, ri = match_keys(self._key_table(self._table), keys)
        self._last_match = (self._generation, fp, li, ri, keys)
        return li, ri

    def lookup(self, keys: TableLike) -> pa.Table:
        """The stored value of each key row, in the order of ``keys``.

        Returns the value columns (nulls where the key is absent) plus a boolean
        ``"__found"`` column. Keys are matched with Spark's grouping equality.
        """
        kt = self._conform(keys, self.key_schema, "lookup keys")
        n = kt.num_rows
        li, ri = self._match(kt)
        pos = np.full(n, -1, dtype=np.int64)
        pos[ri] = li
        absent = pos < 0
        indices = pa.array(pos, mask=absent)
        arrays = [self._table.column(self._nk + j).take(indices) for j in range(self._nv)]
        fields = [f.with_nullable(True) for f in self.value_schema]
        arrays.append(pa.array(~absent))
        fields.append(pa.field(FOUND_COLUMN, pa.bool_(), nullable=False))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def table(self) -> pa.Table:
        """The full content of this version (key columns, then value columns)."""
        return self._table

    def num_keys(self) -> int:
        return self._table.num_rows

    def metrics(self) -> StateStoreMetrics:
        """Number of keys, memory of every table the provider holds, and the custom metrics."""
        hits, misses = self._provider.cache_counts()
        return StateStoreMetrics(
            num_keys=self._table.num_rows,
            memory_used_bytes=self._provider.memory_used_bytes(extra=self._table),
            custom_metrics={
                "stateOnCurrentVersionSizeBytes": int(self._table.nbytes),
                "loadedMapCacheHitCount": hits,
                "loadedMapCacheMissCount": misses,
            },
        )

    def abort(self) -> None:
        """Release the view. Idempotent."""
        self._released = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id}, version={self._version}, keys={self.num_keys()})"


class StateStore(ReadStateStore):
    """A read-write view of a store, opened at ``version`` and committing ``version + 1``.

    Spark's version semantics: batch N opens version N (the state committed by batch N-1;
    version 0 is empty) and its ``commit()`` writes ``<N+1>.delta``. Re-running batch N after a
    failure opens version N again and overwrites ``<N+1>.delta``.

    Lifecycle:

    * ``put`` / ``remove`` / ``evict`` change the view's working table and remember which rows
      were put and which keys were removed (the pending delta); nothing touches the files before
      ``commit()``.
    * ``commit()`` writes the delta file atomically (always, even with no change), hands the new
      table to the provider's cache and returns the new version. No update is allowed afterwards,
      and a second ``commit()`` is an error.
    * ``abort()`` discards the pending changes. It is idempotent and a no-op after ``commit()``,
      so a task-completion hook may call it unconditionally.
    """

    def __init__(self, provider: StoreOwner, version: int, table: pa.Table) -> None:
        # the rows after a put, before they are needed as one table (see ``KeptAndPut``)
        self._kept_and_put: KeptAndPut | None = None
        super().__init__(provider, version, table)
        self._state = "updating"  # -> "committed" | "aborted"
        # Which rows of ``_table`` were put in this view (aligned with ``_table``), and the keys
        # removed from it: together they are the pending delta, kept without any extra join.
        self._dirty = np.zeros(table.num_rows, dtype=bool)
        self._removed: list[pa.Table] = []
        # rows put in this view and removed again (``OP_PUT_REMOVED``), whole
        self._put_removed: list[pa.Table] = []
        self._new_version: int | None = None

    @property
    def _table(self) -> pa.Table:
        """The view's rows as one table; a pending ``KeptAndPut`` is copied into one here."""
        if self._kept_and_put is not None:
            self._whole = self._kept_and_put.materialise()
            self._kept_and_put = None
        return self._whole

    @_table.setter
    def _table(self, table: pa.Table) -> None:
        self._kept_and_put = None
        self._whole = table

    def _rows(self) -> "pa.Table | KeptAndPut":
        """The view's rows as they are held: one table, or a pending ``KeptAndPut``."""
        return self._kept_and_put if self._kept_and_put is not None else self._whole

    def num_keys(self) -> int:
        return self._rows().num_rows

    @property
    def has_committed(self) -> bool:
        return self._state == "committed"

    def _check_updating(self, what: str) -> None:
        if self._state != "updating":
            raise store_not_updating_error(what, self.id, self._version, self._state)

    def _replace(self, table: pa.Table, dirty: np.ndarray) -> None:
        if table.num_columns and table.column(0).num_chunks > _MAX_CHUNKS:
            table = table.combine_chunks()
        self._table = table
        self._dirty = dirty
        self._generation += 1

    def put(self, rows: TableLike) -> None:
        """Insert or replace key + value rows (key columns first, then value columns, by position).

        The keys must be unique within ``rows`` (they are when they come out of an aggregation);
        this is not checked, because checking costs a group-by per batch.
        """
        self._check_updating("update")
        rows_t = self._conform(rows, self._provider.schema, "put rows")
        if rows_t.num_rows == 0:
            return
        if self._table.num_rows:
            li, _ = self._match(self._key_table(rows_t))
        else:
            li = np.empty(0, dtype=np.int64)
        if len(li):
            # the kept rows are not copied here: commit() writes them from the base's slices
            base = self._table
            keep = np.ones(base.num_rows, dtype=bool)
            keep[li] = False
            dirty = np.concatenate([self._dirty[keep], np.ones(rows_t.num_rows, dtype=bool)])
            self._kept_and_put = KeptAndPut(base, keep, rows_t)
            self._whole = None
            self._dirty = dirty
            self._generation += 1
            return
        self._replace(
            pa.concat_tables([self._table, rows_t]),
            np.concatenate([self._dirty, np.ones(rows_t.num_rows, dtype=bool)]),
        )

    def insert(self, rows: TableLike) -> None:
        """Append key + value rows whose keys the caller knows are absent from the store and
        unique within ``rows``: a ``put`` without the key match.

        For an operator that has just looked the keys up (deduplication inserts exactly the keys
        ``lookup`` did not find), the match ``put`` would make is a second join for nothing.
        Breaking the precondition leaves duplicate keys in the store; it is not checked.
        """
        self._check_updating("update")
        rows_t = self._conform(rows, self._provider.schema, "insert rows")
        if rows_t.num_rows == 0:
            return
        self._replace(
            pa.concat_tables([self._table, rows_t]),
            np.concatenate([self._dirty, np.ones(rows_t.num_rows, dtype=bool)]),
        )

    def remove(self, keys: TableLike) -> int:
        """Remove the given keys (absent keys are ignored); returns how many keys were removed."""
        self._check_updating("update")
        kt = self._conform(keys, self.key_schema, "remove keys")
        if kt.num_rows == 0 or self._table.num_rows == 0:
            return 0
        li, _ = self._match(kt)
        if not len(li):
            return 0
        li = np.unique(li)
        keep = np.ones(self._table.num_rows, dtype=bool)
        keep[li] = False
        self._keep_put_removed(~keep)
        self._removed.append(self._key_table(self._table).take(pa.array(li)))
        self._replace(self._table.filter(pa.array(keep)), self._dirty[keep])
        return len(li)

    def evict(
        self, predicate: Callable[[pa.Table], "pa.Array | pa.ChunkedArray | np.ndarray"], row_wise: bool = False
    ) -> pa.Table:
        """Remove every row for which ``predicate(table)`` is true and return those rows.

        ``predicate`` receives the whole current table (key + value columns) and returns one
        boolean per row; a null counts as false. Spark's eviction scans all keys, including those
        written earlier in the same batch, which is what evaluating on the current table does.
        ``row_wise``: the predicate decides each row from that row alone (a watermark test), so
        after a put it may first be asked of the put's parts (``KeptAndPut``), and when it
        finds nothing there the put's rows stay uncopied.
        """
        self._check_updating("update")
        pending = self._kept_and_put
        if row_wise and pending is not None and not self._any_evicted(pending, predicate):
            # nothing to evict: the put's rows stay as they are held, uncopied
            return pending.rows.schema.empty_table()
        if self._table.num_rows == 0:
            return self._table
        mask = eviction_mask(self.id, self._table, predicate)
        if not mask.any():
            return self._table.schema.empty_table()
        evicted = self._table.filter(pa.array(mask))
        keep = ~mask
        self._keep_put_removed(mask)
        self._removed.append(self._key_table(evicted))
        self._replace(self._table.filter(pa.array(keep)), self._dirty[keep])
        return evicted

    def _keep_put_removed(self, removed: np.ndarray) -> None:
        """Keep the rows of ``removed`` (a mask over the current rows) that this view put."""
        transient = removed & self._dirty
        if transient.any():
            self._put_removed.append(rows_where(self._table, transient))

    def _any_evicted(self, pending: KeptAndPut, predicate: Callable[[pa.Table], "pa.Array | pa.ChunkedArray | np.ndarray"]) -> bool:
        """Whether ``predicate`` is true for a row of ``pending``, evaluated on its parts: the
        base's rows (only the kept ones count) and the put rows."""
        for part, keep in ((pending.base, pending.keep), (pending.rows, None)):
            if part.num_rows == 0:
                continue
            hits = eviction_mask(self.id, part, predicate)
            if (hits & keep).any() if keep is not None else hits.any():
                return True
        return False

    def pending_changes(self) -> pa.Table:
        """The change since ``version``: exactly what ``commit()`` writes to the delta file.

        The rows put in this view and removed again come first (op 2, their values), then the
        removed keys (op 1, null values), then the rows put in this view that are still present
        (op 0, unique keys). A key can appear among the removals more than once, and both as a
        removal and a put (removed, then put again); replaying removes every key of the delta
        before appending the op-0 rows, so the final put wins, as it should.
        """
        schema = self._provider.delta_schema
        parts: list[pa.Table] = []
        parts += [delta_rows(rows, OP_PUT_REMOVED, schema) for rows in self._put_removed]
        parts += [delta_removals(keys, self.value_schema, schema) for keys in self._removed]
        if self._dirty.any():
            pending = self._kept_and_put
            if pending is None:
                puts = rows_where(self._table, self._dirty)
            else:
                # the put rows are all dirty; of the base's kept rows, those an earlier put of
                # this view wrote
                kept_dirty = self._dirty[: self._dirty.size - pending.rows.num_rows]
                puts = pending.rows
                if kept_dirty.any():
                    in_base = np.zeros(pending.base.num_rows, dtype=bool)
                    in_base[np.flatnonzero(pending.keep)[kept_dirty]] = True
                    puts = pa.concat_tables([rows_where(pending.base, in_base), pending.rows])
            parts.append(delta_rows(puts, OP_PUT, schema))
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(parts)

    def commit(self) -> int:
        """Write ``<version+1>.delta`` atomically and return ``version + 1``."""
        self._check_updating("commit")
        new_version, committed = self._provider._commit(self._version, self._rows(), self.pending_changes())  # noqa: SLF001 - a store commits through its provider
        # the version as the provider keeps it (mapped from local disk, or the same rows)
        self._table = committed
        self._state = "committed"
        self._new_version = new_version
        self._removed = []
        self._put_removed = []
        self._last_match = None
        return new_version

    def abort(self) -> None:
        """Discard pending changes. Idempotent; does nothing after a successful commit."""
        if self._state == "updating":
            self._state = "aborted"
            self._removed = []
            self._put_removed = []
            self._last_match = None
            log.debug("aborted %s at version %d", self.id, self._version)
        self._released = True
