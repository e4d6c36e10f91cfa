"""The file-backed state store provider and the process-wide provider cache.

Spark: ``HDFSBackedStateStoreProvider`` plus the provider cache of the ``StateStore`` companion
object. This module runs inside Spark's Python worker processes, which Spark reuses across
tasks; the module-level cache is what lets batch N+1 of a partition start from the table batch N
committed instead of re-reading files.
"""

from __future__ import annotations

import logging
import struct
import threading
import zlib
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.state import (
    StateStoreError,
    state_file_corrupt_error,
    state_file_format_version_error,
    state_file_missing_error,
    state_file_not_statestream_error,
    state_file_read_error,
    state_file_schema_mismatch_error,
    state_file_truncated_error,
    state_file_unreadable_error,
    state_file_without_key_count_error,
    state_version_negative_error,
    state_version_zero_replace_error,
)
from statestream.state.keys import check_key_types_supported, drop_rows, match_keys
from statestream.state.layered import (
    LayeredStateStore,
    LayeredVersion,
    RunWriter,
    SortedRun,
    compact,
    drop_run_files,
    found_in,
    resolve,
    run_from_changes,
    sorted_table_rows,
    taken_in_slices,
)
from statestream.state.local_disk import find_mapped, mapped_file_name, read_mapped, remove_mapped, store_dir, write_mapped
from statestream.state.store import (
    OP_COLUMN,
    OP_PUT,
    KeptAndPut,
    ReadStateStore,
    StateStore,
    StateStoreConf,
    StateStoreId,
)

__all__ = [
    "StateStoreProvider",
    "get_provider",
    "clear_provider_cache",
    "loaded_providers",
    "maintain_loaded_providers",
    "STATE_FILE_FORMAT_VERSION",
    "OP_COLUMN",
    "stored_schemas",
    "parse_state_file_name",
]

log = logging.getLogger(__name__)

#: Version of the delta / snapshot file layout described in :class:`StateStoreProvider`: 2 adds
#: the checksum trailer; version 1 files (no trailer) are still read.
STATE_FILE_FORMAT_VERSION = 2
#: the format versions this statestream reads
_READABLE_FORMATS = (b"1", str(STATE_FILE_FORMAT_VERSION).encode())
#: the trailer of a version 2 state file: this magic, the CRC-32 of the Arrow stream before it
#: (big-endian uint32) and that stream's length in bytes (big-endian uint64)
CHECKSUM_MAGIC = b"SSTCRC32"
_TRAILER = struct.Struct(">8sIQ")


class _ChecksummedStream:
    """A writable file that passes what it is given on to ``out`` and keeps its CRC-32 and
    length, for the checksum trailer of a state file written a piece at a time."""

    def __init__(self, out: pa.NativeFile) -> None:
        self._out = out
        self.crc = 0
        self.length = 0
        self.closed = False

    def write(self, data: bytes | pa.Buffer) -> int:
        view = memoryview(data)
        self.crc = zlib.crc32(view, self.crc)
        self.length += len(view)
        self._out.write(view)
        return len(view)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def trailer(self) -> bytes:
        """The trailer of what was written (see :data:`CHECKSUM_MAGIC`)."""
        return _TRAILER.pack(CHECKSUM_MAGIC, self.crc, self.length)


def verify_checksum(data: bytes) -> tuple[memoryview | None, str | None]:
    """The Arrow stream of a state file whose trailer checks out, or (None, what is wrong);
    ``(None, None)`` when the file has no trailer at all (a version 1 file, or one cut short:
    its format version tells which)."""
    trailer = _trailer(data)
    if trailer is None:
        return None, None
    crc, length = trailer
    body = memoryview(data)[: len(data) - _TRAILER.size]
    if length != len(body):
        return None, f"its checksum trailer gives {length} bytes of data, the file holds {len(body)}"
    if zlib.crc32(body) != crc:
        return None, "its data does not match its checksum (the file was changed or damaged after it was written)"
    return body, None


def _trailer(data: bytes) -> tuple[int, int] | None:
    """(CRC-32, length of the data before it) from a state file's checksum trailer, given the
    file or at least its last bytes; None when they end in no trailer (a version 1 file)."""
    if len(data) < _TRAILER.size or data[-_TRAILER.size:][:8] != CHECKSUM_MAGIC:
        return None
    _magic, crc, length = _TRAILER.unpack(data[-_TRAILER.size:])
    return int(crc), int(length)


def trailer_checksum(tail: bytes) -> int | None:
    """The CRC-32 a state file's checksum trailer holds, from the file's last bytes (at least
    the trailer's size), or None when they are not a trailer (a version 1 file)."""
    trailer = _trailer(tail)
    return None if trailer is None else trailer[0]


_META_FORMAT = b"statestream.state.format"
_META_KIND = b"statestream.state.kind"
_META_VERSION = b"statestream.state.version"
_META_NUM_KEYS = b"statestream.state.numKeyColumns"
_DELTA = "delta"
_SNAPSHOT = "snapshot"


def parse_state_file_name(name: str) -> tuple[int, str] | None:
    """``"12.delta"`` -> ``(12, "delta")``, ``"12.snapshot"`` -> ``(12, "snapshot")``; anything
    else (crc files, strays, directories) -> None. The one rule for what a state file is (the
    checkpoint tools use it too)."""
    stem, dot, kind = name.partition(".")
    if not dot or kind not in (_DELTA, _SNAPSHOT) or not stem.isdigit():
        return None
    return int(stem), kind


class StateStoreProvider:
    """Owns the files and the cached versions of one store (one operator partition).

    Files, in ``<checkpoint_root>/<operator_id>/<partition_id>/``:

    ``<v>.delta``
        The change from version ``v-1`` to ``v``. An Arrow IPC *stream* whose columns are the key
        columns, the value columns (all nullable), and an ``int8`` column ``__op`` (0 = put the
        row, 1 = remove the key; value columns are null for removals). Put rows have unique keys
        and hold the key's final value; a removed key may repeat, and may also appear as a put
        (removed, then put again). Written on every commit, even with no change (then a
        schema-only stream).
    ``<v>.snapshot``
        The full content of version ``v``: the key columns and the value columns.

    Both are compressed with the IPC body codec of ``StateStoreConf.compression`` (LZ4 frame by
    default) and end with a checksum trailer (:data:`CHECKSUM_MAGIC`): a file changed or cut
    after it was written is refused as corrupt, naming it, whether or not it would still parse
    (Spark 4.1 keeps such checksums in ``.crc`` side files). They carry schema metadata: ``statestream.state.format`` (the layout version,
    :data:`STATE_FILE_FORMAT_VERSION`), ``statestream.state.kind`` (``delta``/``snapshot``),
    ``statestream.state.version`` and ``statestream.state.numKeyColumns``. A reader refuses an
    unknown format version, naming the file and both versions, and checks column types against the
    expected key and value schema (Spark's state format validation). Columns are matched by
    position, so a key and a value column may share a name (the legacy aggregation state layout
    repeats the key columns in the value).

    Loading version ``v``: a cached version is used as is; otherwise the provider starts from the
    nearest cached version below ``v`` or the newest snapshot ``k <= v`` (whichever is newer;
    empty at version 0) and replays the missing deltas in order. Replaying a delta removes every
    key it mentions from the table, then appends its put rows (so a put wins over a removal of
    the same key, and the order of rows inside a delta does not matter).

    All I/O goes through :class:`CheckpointFileManager`, so files are written atomically and the
    store works on local paths and on any ``pyarrow.fs`` URI.
    """

    def __init__(
        self,
        store_id: StateStoreId,
        key_schema: pa.Schema,
        value_schema: pa.Schema,
        conf: StateStoreConf | None = None,
        run_id: str = "",
    ) -> None:
        self.store_id = store_id
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.conf = conf or StateStoreConf()
        self.run_id = run_id
        check_key_types_supported(key_schema, str(store_id))
        self.schema = pa.schema(list(key_schema) + list(value_schema))
        self.delta_schema = pa.schema(
            list(key_schema) + [f.with_nullable(True) for f in value_schema] + [pa.field(OP_COLUMN, pa.int8(), False)]
        )
        self._nk = len(key_schema)
        self._nv = len(value_schema)
        self._files = CheckpointFileManager(store_id.checkpoint_root).child(store_id.relative_dir)
        # version -> (table, stamp of <version>.delta when the table was cached; see _stamp)
        self._loaded: dict[int, tuple[pa.Table, tuple[int, int] | None]] = {}
        # with conf.on_local_disk: version -> the local file its cached table is mapped from
        self._mapped: dict[int, Path] = {}
        # with conf.on_local_disk: cached versions mapped from another worker's file (not ours
        # to delete)
        self._borrowed: set[int] = set()
        self._hits = 0
        self._misses = 0
        self._lock = threading.RLock()
        # with conf.layered: the runs this provider wrote (their files go when no cached
        # version holds them any more)
        self._runs: list[SortedRun] = []
        #: whether versions are layered (``conf.layered``); a store without key columns (a
        #: global aggregation's single row) is a table: Arrow takes no rows from a table of no
        #: columns, which a run's lookups would need, and one row gains nothing from runs
        self.layered = self.conf.layered and self._nk > 0

    # -- views --------------------------------------------------------------------------------
    def get_store(self, version: int, *, begins_at: int | None = 0) -> StateStore:
        """A read-write view of ``version``; its ``commit()`` produces ``version + 1``.

        ``begins_at``: the version at which the store began, empty. Every store but a
        transformWithState variable begins at 0; a variable that a restarted processor declares
        from batch b on begins at version b, so its files start at ``b+1.delta`` and no file
        below is needed (a missing one above is lost state, and an error). None: not known (an
        older checkpoint), inferred from the files: empty at any version with none, else just
        below the oldest delta when no snapshot covers it."""
        if self.layered:
            return LayeredStateStore(self, version, self._load(version, begins_at))  # type: ignore[return-value]
        return StateStore(self, version, self._load(version, begins_at))

    def _inferred_beginning(self, version: int) -> int:
        files = self.list_files()
        if not files:
            return version
        if any(_SNAPSHOT in kinds for v, kinds in files.items() if v <= version):
            return 0
        start = min(files) - 1
        # files that all start above the next version are not a store that began at `version`:
        # loading from 0 names the missing file
        return start if start <= version else 0

    def get_read_store(self, version: int, *, begins_at: int | None = 0) -> ReadStateStore:
        """A read-only view of ``version`` (``begins_at`` as for :meth:`get_store`)."""
        if self.layered:
            return LayeredStateStore(self, version, self._load(version, begins_at), read_only=True)
        return ReadStateStore(self, version, self._load(version, begins_at))

    def read_delta(self, version: int) -> pa.Table:
        """The changes ``version`` made: its delta file as written (the key and value columns,
        then ``__op``; a removal's values are null). The state readers' change feed."""
        return self._read(version, _DELTA, version)

    def has_delta(self, version: int) -> bool:
        """Whether ``version`` has a delta file (the changes it made)."""
        return _DELTA in self.list_files().get(version, set())

    def has_snapshot(self, version: int) -> bool:
        """Whether ``version`` has a snapshot file (where a reader may start instead of 0)."""
        return _SNAPSHOT in self.list_files().get(version, set())

    # -- metrics ------------------------------------------------------------------------------
    def cache_counts(self) -> tuple[int, int]:
        """(cache hits, cache misses) since this provider was created."""
        return self._hits, self._misses

    def memory_used_bytes(self, extra: pa.Table | None = None) -> int:
        """Arrow bytes of all cached versions held in memory (not those mapped from local
        disk), plus ``extra`` if it is not one of the cached tables."""
        with self._lock:
            tables = [(t, v in self._mapped or v in self._borrowed) for v, (t, _) in self._loaded.items()]
        total = sum(
            (t.in_memory_bytes() if isinstance(t, LayeredVersion) else t.nbytes) for t, mapped in tables if not mapped
        )
        if extra is not None and not any(extra is t for t, _ in tables):
            total += extra.nbytes
        return int(total)

    def cached_versions(self) -> list[int]:
        with self._lock:
            return sorted(self._loaded)

    def mapped_versions(self) -> list[int]:
        """The cached versions served from a local file (``conf.on_local_disk``), this process's
        or another worker's."""
        with self._lock:
            return sorted({*self._mapped, *self._borrowed})

    # -- files --------------------------------------------------------------------------------
    def file_name(self, version: int, kind: str) -> str:
        return f"{version}.{kind}"

    def _display(self, name: str) -> str:
        return self._files.display(name)

    def list_files(self) -> dict[int, set[str]]:
        """Versions present on disk and which kinds of file each has."""
        found: dict[int, set[str]] = {}
        for name in self._files.list():
            parsed = parse_state_file_name(name)
            if parsed is not None:
                found.setdefault(parsed[0], set()).add(parsed[1])
        return found

    def stored_bytes(self) -> int:
        """Bytes of the store's state files: the most a load reads."""
        return sum(self._files.size(self.file_name(v, kind)) for v, kinds in self.list_files().items() for kind in kinds)

    def _write(self, table: "pa.Table | Iterable[pa.Table]", kind: str, version: int) -> int:
        """Write one state file: an Arrow stream of ``table`` (or of the tables an iterable
        yields, of the store's schema, each written as it comes, so that a snapshot of a store
        larger than memory is never whole in memory), then its checksum trailer. Returns the
        trailer's CRC-32."""
        name = self.file_name(version, kind)
        meta = {
            _META_FORMAT: str(STATE_FILE_FORMAT_VERSION).encode(),
            _META_KIND: kind.encode(),
            _META_VERSION: str(version).encode(),
            _META_NUM_KEYS: str(self._nk).encode(),
        }
        tables, schema = ([table], table.schema) if isinstance(table, pa.Table) else (table, self.schema)
        options = pa.ipc.IpcWriteOptions(compression=self.conf.ipc_compression)
        rows = 0

        def fill(out: pa.NativeFile) -> int:
            nonlocal rows
            body = _ChecksummedStream(out)
            with pa.ipc.new_stream(body, schema.with_metadata(meta), options=options) as writer:
                for t in tables:
                    writer.write_table(t.replace_schema_metadata(meta))
                    rows += t.num_rows
            out.write(body.trailer())
            return body.crc

        checksum = self._files.write_atomic_from(name, fill)
        log.debug("wrote %s (%d rows)", self._display(name), rows)
        return checksum

    def _delta_checksum(self, version: int) -> int | None:
        """The CRC-32 in the trailer of ``<version>.delta`` as the file is now (its last bytes
        only), or None (no such file, no trailer, or unreadable: then no mapped file of another
        worker is looked for)."""
        try:
            with self._files.open_input(self.file_name(version, _DELTA)) as f:
                size = f.size()
                if size < _TRAILER.size:
                    return None
                return trailer_checksum(f.read_at(_TRAILER.size, size - _TRAILER.size))
        except (OSError, pa.ArrowException):
            return None

    def _read(self, version: int, kind: str, needed_for: int) -> pa.Table:
        """Read and validate one state file; returns it with the expected schema."""
        name = self.file_name(version, kind)
        shown = self._display(name)
        try:
            data = self._files.read_bytes(name)
        except FileNotFoundError as exc:
            raise state_file_missing_error(shown, self.store_id, needed_for) from exc
        except OSError as exc:
            raise state_file_read_error(shown, self.store_id, needed_for, exc) from exc
        body, damage = verify_checksum(data)
        if damage is not None:
            raise state_file_corrupt_error(shown, self.store_id, damage)
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(data if body is None else body))
            meta = reader.schema.metadata or {}
            found = meta.get(_META_FORMAT)
            if found is None:
                raise state_file_not_statestream_error(shown, self.store_id)
            if body is None and found == str(STATE_FILE_FORMAT_VERSION).encode():
                raise state_file_truncated_error(shown, self.store_id)
            if found not in _READABLE_FORMATS:
                raise state_file_format_version_error(shown, self.store_id, found, STATE_FILE_FORMAT_VERSION)
            table = reader.read_all()
        except StateStoreError:
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise state_file_unreadable_error(shown, self.store_id, exc) from exc
        expected = self.delta_schema if kind == _DELTA else self.schema
        if table.num_columns != len(expected) or any(
            not table.schema.field(i).type.equals(f.type) for i, f in enumerate(expected)
        ):
            raise state_file_schema_mismatch_error(shown, self.store_id, table.schema.remove_metadata(), expected)
        return pa.Table.from_arrays(table.columns, schema=expected)

    # -- loading ------------------------------------------------------------------------------
    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def _apply_delta(self, table: pa.Table, delta: pa.Table) -> pa.Table:
        if delta.num_rows == 0:
            return table
        keys = list(range(self._nk))
        if table.num_rows:
            li, _ = match_keys(table.select(keys), delta.select(keys))
            if len(li):
                table, _ = drop_rows(table, li)
        puts = delta.filter(pc.equal(delta.column(OP_COLUMN), OP_PUT))
        if puts.num_rows:
            puts = pa.Table.from_arrays(puts.columns[: self._nk + self._nv], schema=self.schema)
            table = pa.concat_tables([table, puts])
        return table

    def _stamp(self, version: int) -> tuple[int, int] | None:
        """(size, mtime_ns) of ``<version>.delta``, or None if it does not exist.

        Why: tasks of one partition land in different Python worker processes, and a task retry
        may rewrite ``<v>.delta`` from another process. A cached version whose delta file has
        changed since it was cached is stale and must not be served.
        """
        if version == 0:
            return None
        info = self._files.fs.get_file_info(self._files.path(self.file_name(version, _DELTA)))
        if info.type == pafs.FileType.NotFound:
            return None
        return int(info.size or 0), int(info.mtime_ns or 0)

    def _cache(
        self, version: int, table: "pa.Table | KeptAndPut", stamp: tuple[int, int] | None, checksum: int | None = None
    ) -> pa.Table:
        """Cache ``table`` as ``version`` and return the cached table (with
        ``conf.on_local_disk``, the same rows mapped from local disk; serve that one, so the
        rows are not held twice). ``checksum``: the CRC-32 of the delta file ``table`` was
        built with or committed as; with ``stamp``, it names the mapped file so that other
        workers find it (see ``state/local_disk.py``)."""
        self._drop(version)
        if self.conf.on_local_disk and table.num_rows:
            name = mapped_file_name(version, stamp, checksum)
            path: "Path | str" = name
            try:
                path = store_dir(self.store_id.checkpoint_root, self.run_id, self.store_id.relative_dir) / name
                table = write_mapped(table, path)
                self._mapped[version] = path
            except OSError as exc:
                # a cache never fails a batch: a full or missing local disk keeps the version
                # in memory, as without the conf
                log.warning("%s: version %d stays in memory, it could not be kept on local disk at %s: %s", self.store_id, version, path, exc)
        if isinstance(table, KeptAndPut):
            table = table.materialise()
        self._keep(version, table, stamp)
        return table

    def _keep(self, version: int, table: pa.Table, stamp: tuple[int, int] | None) -> None:
        self._loaded[version] = (table, stamp)
        for v in sorted(self._loaded)[: -self.conf.max_versions_in_memory]:
            self._drop(v)

    def _borrow(self, version: int, stamp: tuple[int, int], checksum: int) -> pa.Table | None:
        """``version`` mapped from the file another Python worker of this executor wrote when it
        committed or loaded it (``conf.on_local_disk``; see ``state/local_disk.py``), or None.
        ``stamp`` and ``checksum`` describe ``<version>.delta`` as it is now: only a file named
        by both is the version the checkpoint holds.

        Why: without it, a worker given a partition whose last version another worker committed
        replays that version's delta onto an older version of its own (a file read, a key match
        and a copy of the whole partition), then writes the result to a file of its own: the
        same rows twice in the page cache."""
        name = mapped_file_name(version, stamp, checksum)
        for path in find_mapped(self.store_id.checkpoint_root, self.run_id, self.store_id.relative_dir, name):
            try:
                table = read_mapped(path)
            except (OSError, pa.ArrowException):
                # deleted or damaged meanwhile: another copy, or the checkpoint's files
                log.debug("%s: could not map %s", self.store_id, path, exc_info=True)
                continue
            if not table.schema.equals(self.schema):
                log.debug("%s: %s has another schema", self.store_id, path)
                continue
            break
        else:
            return None
        self._drop(version)
        self._borrowed.add(version)
        self._keep(version, table, stamp)
        log.info("loaded %s version %d from the local file of another worker (%s)", self.store_id, version, path)
        return table

    def _drop(self, version: int) -> None:
        """Forget a cached version (and delete its local file, if it was mapped from one this
        process wrote)."""
        entry = self._loaded.pop(version, None)
        self._borrowed.discard(version)
        path = self._mapped.pop(version, None)
        if path is not None:
            remove_mapped(path)
        if entry is not None and isinstance(entry[0], LayeredVersion):
            self._drop_unused_runs()

    def _cached(self, version: int) -> pa.Table | None:
        """The cached table of ``version`` if its delta file is unchanged; drops stale entries."""
        entry = self._loaded.get(version)
        if entry is None:
            return None
        table, stamp = entry
        if self._stamp(version) != stamp:
            # Expected, not a fault: a task that runs again rewrites its version (a retried or
            # speculative task, or the sampling job of a sort above the aggregation, which runs
            # the state step once more), so info, not a warning on every such batch
            log.info(
                "%s: %s was rewritten since version %d was cached (its task ran again); reloading",
                self.store_id,
                self._display(self.file_name(version, _DELTA)),
                version,
            )
            for v in [v for v in self._loaded if v >= version]:
                self._drop(v)
            return None
        return table

    def _load(self, version: int, begins_at: int | None = 0) -> "pa.Table | LayeredVersion":
        """The rows of ``version`` (a table; with ``conf.layered`` a :class:`LayeredVersion`):
        cached, else built from the nearest cached version below or the newest snapshot (the
        newer of the two), and the deltas above it."""
        if version < 0:
            raise state_version_negative_error(version, self.store_id)
        if begins_at is None:
            begins_at = self._inferred_beginning(version)
        with self._lock:
            cached = self._cached(version)
            if cached is not None:
                self._hits += 1
                return cached
            if version <= begins_at:
                return LayeredVersion((), 0) if self.layered else self._empty()
            self._misses += 1
            # read before the files: a delta rewritten after this makes the entry stale (it is
            # then reloaded), never a new stamp on old rows
            stamp = self._stamp(version)
            if self.layered:
                return self._build_layered(version, begins_at, stamp)
            return self._build_table(version, begins_at, stamp)

    def _base(self, version: int, begins_at: int) -> tuple[int, "pa.Table | LayeredVersion | None", str]:
        """Where a load of ``version`` starts: the newest snapshot at or below it, else the
        nearest cached version below it (the newer of the two), else empty at ``begins_at``.
        Returns that version, the cached rows (None: the snapshot's, to read, or empty) and
        what it is, for the log."""
        base_version, base = begins_at, None
        for v in sorted((v for v in self._loaded if base_version < v < version), reverse=True):
            below = self._cached(v)
            if below is not None:
                base_version, base = v, below
                break
        snapshots = [v for v, kinds in self.list_files().items() if _SNAPSHOT in kinds and base_version < v <= version]
        if snapshots:
            return max(snapshots), None, "snapshot"
        return base_version, base, "cache" if base is not None else "empty"

    def _build_table(self, version: int, begins_at: int, stamp: tuple[int, int] | None) -> pa.Table:
        """:meth:`_load` of a table: a version mapped by another worker of this machine, else
        the base's table with each delta applied."""
        checksum = self._delta_checksum(version) if self.conf.on_local_disk and stamp is not None else None
        if stamp is not None and checksum is not None:
            borrowed = self._borrow(version, stamp, checksum)
            if borrowed is not None:
                return borrowed
        base_version, base, kind = self._base(version, begins_at)
        if kind == "snapshot":
            base = self._read(base_version, _SNAPSHOT, version)
        table = base if isinstance(base, pa.Table) else self._empty()
        for v in range(base_version + 1, version + 1):
            table = self._apply_delta(table, self._read(v, _DELTA, version))
        table = table.combine_chunks() if table.num_rows else table
        log.info("loaded %s version %d from %s version %d (+%d deltas)", self.store_id, version, kind, base_version, version - base_version)
        return self._cache(version, table, stamp, checksum)

    # -- layered versions (conf.layered) --------------------------------------------------------
    def _run_writer(self) -> RunWriter:
        if not self.conf.on_local_disk:
            return RunWriter()
        return RunWriter(store_dir(self.store_id.checkpoint_root, self.run_id, self.store_id.relative_dir))

    def _stack(self, version: LayeredVersion, added: SortedRun, num_keys: int, writer: RunWriter | None = None) -> LayeredVersion:
        """``version`` with one more run (kept as this provider's: on local disk, with
        ``conf.on_local_disk``; ``writer``: the one that already wrote ``added``), compacted."""
        written = writer is not None
        writer = writer or self._run_writer()
        runs = list(version.runs)
        if added.num_rows:
            runs.append(added if written else writer.run(added.rows, added.rows.schema, added.hashes, added.level))
        runs = compact(runs, writer, self._nk)
        self._runs += [r for r in runs if r.files and any(p in writer.written for p in r.files)]
        return LayeredVersion(tuple(runs), num_keys)

    def _drop_unused_runs(self) -> None:
        """Delete the files of this provider's runs that no cached version holds."""
        held = {id(r) for t, _ in self._loaded.values() if isinstance(t, LayeredVersion) for r in t.runs}
        unused = [r for r in self._runs if id(r) not in held]
        if unused:
            self._runs = [r for r in self._runs if id(r) in held]
            drop_run_files(unused)

    def _with_delta(self, version: LayeredVersion, delta: pa.Table) -> LayeredVersion:
        """``version`` with a delta file's changes replayed as one more run."""
        run = run_from_changes(delta, self._nk)
        num_keys = version.num_keys
        if run.num_rows:
            keys = run.rows.select(list(range(self._nk)))
            run_of, row_of = resolve(version.runs, keys, run.hashes)
            was_live = found_in(version.runs, run_of, row_of)
            is_put = run.ops() == OP_PUT
            num_keys += int(np.count_nonzero(is_put & ~was_live)) - int(np.count_nonzero(~is_put & was_live))
        return self._stack(version, run, num_keys)

    def _build_layered(self, version: int, begins_at: int, stamp: tuple[int, int] | None) -> LayeredVersion:
        """:meth:`_load` for ``conf.layered``: the base's runs (a snapshot sorted once into a
        bottom run), with each delta above it added as a run (no version is rebuilt whole: a
        delta costs its own rows)."""
        base_version, base, kind = self._base(version, begins_at)
        layered = base if isinstance(base, LayeredVersion) else LayeredVersion((), 0)
        if kind == "snapshot":
            table = self._read(base_version, _SNAPSHOT, version)
            rows, hashes, order = sorted_table_rows(table, self._nk)
            del table
            writer = self._run_writer()
            bottom = writer.run(taken_in_slices(rows, order), rows.schema, hashes[order], level=0)
            del rows, hashes, order
            layered = self._stack(LayeredVersion((), 0), bottom, bottom.num_rows, writer)
        for v in range(base_version + 1, version + 1):
            layered = self._with_delta(layered, self._read(v, _DELTA, version))
        log.info(
            "loaded %s version %d as %d runs from %s version %d (+%d deltas)",
            self.store_id, version, len(layered.runs), kind, base_version, version - base_version,
        )
        self._drop(version)
        self._keep(version, layered, stamp)
        return layered

    def _commit_layered(
        self, base_version: int, version: LayeredVersion, change: SortedRun | None, num_keys: int, delta: pa.Table
    ) -> tuple[int, LayeredVersion]:
        """:meth:`_commit` for ``conf.layered``: write ``<base_version+1>.delta`` and cache the
        new version, ``version`` with ``change`` as one more run. Called by
        ``LayeredStateStore``."""
        new_version = base_version + 1
        self._write(delta, _DELTA, new_version)
        with self._lock:
            for v in [v for v in self._loaded if v >= new_version]:
                self._drop(v)
            if change is not None:
                committed = self._stack(version, change, num_keys)
            else:
                committed = LayeredVersion(version.runs, num_keys)
            self._keep(new_version, committed, self._stamp(new_version))
            self._drop_unused_runs()
        _trim_siblings(self, new_version)
        return new_version, committed

    # -- commit -------------------------------------------------------------------------------
    def _commit(self, base_version: int, table: "pa.Table | KeptAndPut", delta: pa.Table) -> tuple[int, pa.Table]:
        """Write ``<base_version+1>.delta`` and cache the new table; called by ``StateStore``.
        Returns the new version and its table as cached (``table`` may be a ``KeptAndPut``,
        which is written to local disk slice by slice, or else made one table)."""
        new_version = base_version + 1
        # the CRC of what this commit wrote: if a concurrent attempt rewrote the file since, the
        # mapped file's name (its stamp, this CRC) matches neither and no other worker maps it
        checksum = self._write(delta, _DELTA, new_version)
        with self._lock:
            # Versions above the new one belong to a history this commit has just replaced (a
            # re-executed batch): they must never be served again.
            for v in [v for v in self._loaded if v >= new_version]:
                self._drop(v)
            cached = self._cache(new_version, table, self._stamp(new_version), checksum)
        _trim_siblings(self, new_version)
        return new_version, cached

    def replace_version(self, version: int, table: pa.Table) -> None:
        """Write ``table`` as the full content of ``version`` (``<version>.snapshot``), for the
        state tools' in-place edit of a stopped query's last committed state. Loading prefers the
        newest snapshot at or below a version, so the edit wins over the deltas before it; the
        cached versions from ``version`` on are dropped."""
        if version <= 0:
            raise state_version_zero_replace_error(version, self.store_id)
        table = pa.Table.from_arrays(table.select(list(range(self._nk + self._nv))).columns, schema=self.schema)
        with self._lock:
            # files above the version belong to a batch that was not committed (it runs again
            # and rewrites them); a snapshot among them would outrank the edit
            for v, kinds in self.list_files().items():
                if v > version:
                    for kind in kinds:
                        self._files.delete(self.file_name(v, kind))
            self._write(table, _SNAPSHOT, version)
            for v in [v for v in self._loaded if v >= version]:
                self._drop(v)

    # -- maintenance --------------------------------------------------------------------------
    def maybe_do_maintenance(self, committed_version: int) -> bool:
        """Run :meth:`do_maintenance` after every ``(min_deltas_for_snapshot + 1)``-th version
        rather than after each commit: maintenance lists the store's directory, which is cheap
        locally but a slow, billed request per task and batch on an object store. Spark runs it
        from a background thread every ``maintenanceInterval``; keying it on the version number
        keeps ours deterministic and independent of which Python worker a partition's task lands
        in, and the period is the smallest at which each run has a snapshot to write. Returns
        whether it ran."""
        if committed_version % (self.conf.min_deltas_for_snapshot + 1) != 0:
            return False
        self.do_maintenance()
        return True

    def do_maintenance(self) -> None:
        """Snapshot and clean up, as Spark's maintenance task does for one provider.

        1. If the newest version on disk is cached and more than ``min_deltas_for_snapshot``
           delta files follow the last snapshot, write ``<newest>.snapshot``.
        2. Let ``earliest = newest - min_batches_to_retain``. If it is positive, find the first
           file needed to rebuild version ``earliest`` (the newest snapshot at or below it) and
           delete every state file of a lower version.
        """
        with self._lock:
            files = self.list_files()
            if not files:
                return
            newest = max(files)
            snapshots = [v for v, kinds in files.items() if _SNAPSHOT in kinds]
            last_snapshot = max(snapshots) if snapshots else 0
            deltas_since = sum(1 for v, kinds in files.items() if v > last_snapshot and _DELTA in kinds)
            table = self._cached(newest)
            if isinstance(table, LayeredVersion):
                # a merge of the runs, written a slice at a time as it comes
                table = LayeredStateStore(self, newest, table, read_only=True).iter_live()
            if table is not None and deltas_since > self.conf.min_deltas_for_snapshot:
                self._write(table, _SNAPSHOT, newest)
                files.setdefault(newest, set()).add(_SNAPSHOT)
                snapshots.append(newest)
                log.info("wrote snapshot %s", self._display(self.file_name(newest, _SNAPSHOT)))
            earliest = newest - self.conf.min_batches_to_retain
            if earliest <= 0:
                return
            usable = [v for v in snapshots if v <= earliest]
            if not usable:
                return  # version `earliest` needs every delta from 1.delta on
            first_needed = max(usable)
            doomed = [(v, kind) for v, kinds in files.items() if v < first_needed for kind in kinds]
            for v, kind in sorted(doomed):
                self._files.delete(self.file_name(v, kind))
            if doomed:
                log.info("deleted %d state files of %s below version %d", len(doomed), self.store_id, first_needed)

    def trim_cache(self, sibling_committed: int) -> list[int]:
        """Drop the cached versions that :func:`stale_cached_versions` finds useless now that
        another partition of this store committed ``sibling_committed`` in this process; returns
        them."""
        with self._lock:
            doomed = stale_cached_versions(sorted(self._loaded), sibling_committed)
            for v in doomed:
                self._drop(v)
            return doomed

    def close(self) -> None:
        """Drop the cached versions."""
        with self._lock:
            for v in list(self._loaded):
                self._drop(v)

    def __repr__(self) -> str:
        return f"StateStoreProvider({self.store_id}, run_id={self.run_id!r}, cached={self.cached_versions()})"


def stored_schemas(store_id: StateStoreId) -> tuple[pa.Schema, pa.Schema] | None:
    """The (key, value) schemas a store's own files record, or None if it has no file: the state
    tools read a store without the query that wrote it. Only the newest file's schema message is
    read."""
    files = CheckpointFileManager(store_id.checkpoint_root).child(store_id.relative_dir)
    if not files.exists():
        return None
    found = sorted((p, n) for n in files.list() if (p := parse_state_file_name(n)) is not None)
    if not found:
        return None
    (_, kind), name = found[-1]
    try:
        with pa.ipc.open_stream(files.open_input(name)) as reader:
            schema = reader.schema
    except (pa.ArrowException, OSError) as exc:
        raise state_file_unreadable_error(files.display(name), store_id, exc) from exc
    meta = schema.metadata or {}
    try:
        nk = int(meta[_META_NUM_KEYS])
    except (KeyError, ValueError) as exc:
        raise state_file_without_key_count_error(files.display(name), store_id) from exc
    fields = [f for f in schema.remove_metadata() if f.name != OP_COLUMN or kind != _DELTA]
    return pa.schema(fields[:nk]), pa.schema(fields[nk:])


# -- process-wide cache ---------------------------------------------------------------------------

_PROVIDERS: dict[tuple[StateStoreId, str], StateStoreProvider] = {}
_PROVIDERS_LOCK = threading.Lock()


def get_provider(
    store_id: StateStoreId,
    key_schema: pa.Schema,
    value_schema: pa.Schema,
    conf: StateStoreConf | None = None,
    run_id: str = "",
) -> StateStoreProvider:
    """The provider of ``store_id`` for query run ``run_id``, created on first use.

    Providers live in a module-level cache keyed by ``(store_id, run_id)``, so a Python worker
    reused across tasks keeps the last committed versions in memory. A new ``run_id`` (a restarted
    query) gets a fresh provider that reloads from the files, and the providers of the same store
    under older run ids are dropped. A cached provider whose schemas or conf differ from the
    request is replaced as well.
    """
    conf = conf or StateStoreConf()
    key = (store_id, run_id)
    with _PROVIDERS_LOCK:
        provider = _PROVIDERS.get(key)
        if provider is not None:
            if (
                provider.key_schema.equals(key_schema)
                and provider.value_schema.equals(value_schema)
                and provider.conf == conf
            ):
                return provider
            log.warning("replacing cached state store provider of %s: schema or conf changed", store_id)
            _PROVIDERS.pop(key).close()  # its mapped files go with it (another worker could map them)
        for stale in [k for k in _PROVIDERS if k[0] == store_id and k[1] != run_id]:
            _PROVIDERS.pop(stale).close()
        provider = StateStoreProvider(store_id, key_schema, value_schema, conf, run_id)
        _PROVIDERS[key] = provider
        return provider


def stale_cached_versions(cached: list[int], sibling_committed: int) -> list[int]:
    """The cached versions of a partition that no load can use any more, once another partition
    of the same store committed ``sibling_committed`` in this process.

    Why: a partition's task lands in whichever Python worker is free, so over a few batches
    every worker caches (up to) two versions of every partition, and the state is held once per
    worker and version. All partitions of a store move together, one version a batch, so a
    sibling's commit of ``v`` says the current batch loads ``v - 1`` everywhere. Below that, a
    version serves no load: neither this batch's (nor its re-execution's), which starts from
    ``v - 1`` or from the newest cached version below it, nor any later one. The newest cached
    version is always kept, as the base a later load replays deltas onto.
    """
    if not cached:
        return []
    keep_from = min(sibling_committed - 1, max(cached))
    return [v for v in cached if v < keep_from]


def _trim_siblings(provider: StateStoreProvider, committed: int) -> None:
    """Apply :func:`stale_cached_versions` to the other partitions of ``provider``'s store (same
    checkpoint, operator, store name and run) cached in this process."""
    sid = provider.store_id
    with _PROVIDERS_LOCK:
        siblings = [
            p
            for (other, run_id), p in _PROVIDERS.items()
            if p is not provider
            and run_id == provider.run_id
            and other.checkpoint_root == sid.checkpoint_root
            and other.operator_id == sid.operator_id
            and other.store_name == sid.store_name
        ]
    for sibling in siblings:
        dropped = sibling.trim_cache(committed)
        if dropped:
            log.debug("%s: dropped cached versions %s (a sibling committed %d)", sibling.store_id, dropped, committed)


def loaded_providers() -> list[StateStoreProvider]:
    """Every provider cached in this process."""
    with _PROVIDERS_LOCK:
        return list(_PROVIDERS.values())


def clear_provider_cache(run_id: str | None = None) -> None:
    """Drop cached providers (all, or only those of ``run_id``): e.g. when a query stops."""
    with _PROVIDERS_LOCK:
        for k in [k for k in _PROVIDERS if run_id is None or k[1] == run_id]:
            _PROVIDERS.pop(k).close()


def maintain_loaded_providers(providers: Iterable[StateStoreProvider] | None = None) -> None:
    """Run ``do_maintenance`` on the given (default: all cached) providers.

    Spark runs this on a background thread every 60 s; here the caller decides when (for
    example after a task committed). Errors are logged, not raised: maintenance never fails a
    batch.
    """
    for provider in list(providers) if providers is not None else loaded_providers():
        try:
            provider.do_maintenance()
        except (OSError, StateStoreError, pa.ArrowException):
            log.warning("state store maintenance failed for %s", provider.store_id, exc_info=True)
