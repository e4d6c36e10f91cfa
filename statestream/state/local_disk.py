"""Committed state versions kept on the executor's local disk, memory-mapped, instead of in memory.

Why: a provider caches the versions it committed so that the next batch of its partition starts
without reading files. In memory, that cache is the whole state of every partition a worker
served, held in the Python worker's heap, and a state larger than the machine's memory cannot
run. Spark answers the same problem with its RocksDB provider, which keeps the state on the
executor's local disk. Ours keeps the Arrow table itself there: a committed version is written
once, uncompressed, as an Arrow IPC *file* under Spark's local directories and read back
memory-mapped. The table then costs no heap: its pages belong to the file, the kernel keeps the
hot ones in its page cache and drops the others under memory pressure, and every Arrow kernel
reads it as before (a memory-mapped table is an ordinary Arrow table). A batch's own work (the
merge of its rows into one partition's state) still happens in memory, so the memory a worker
needs is about one partition's state, not the whole store's: more shuffle partitions, smaller
partitions.

This is a cache, not a store: the checkpoint's delta and snapshot files stay the source of
truth, and a lost local file only costs a reload from them.

The Python workers of one executor share what they wrote. A partition's task goes to whichever
worker is free, so a worker often has to load the version another worker committed in the batch
before; replaying that delta onto an older version it cached costs a read, a key match and a
copy of the whole partition. Instead it maps the other worker's file of that version
(:func:`find_mapped`). A file's name holds its version and, of the version's delta file, the size,
the modification time and the CRC-32 of its trailer (:func:`mapped_file_name`): a re-executed
batch that rewrites the delta with other rows names another file even when the size and a
coarse modification time are the same. A worker takes these from the delta before it reads it
(on a load) or from what it wrote (on a commit), so a rewrite racing with it leaves its file
under a name no reader looks for. Files are named per process
(``<local dir>/statestream-state-<pid>-<random>/...``) and deleted when their version leaves the
cache; a process that exits normally removes its directory itself. But PySpark's daemon ends its
workers with ``os._exit`` (which skips Python's exit hooks), a killed worker runs none, and Spark
stops a Python worker that sat idle for a minute, so with a trigger of a minute or more, with
``spark.python.worker.reuse=false`` or after failed tasks, dead workers' files would pile up
until the executor stops. So each process holds an exclusive ``flock`` on a lock file beside its
directory (``<directory>.lock``) for as long as it lives (the kernel releases it however the
process ends), and a process creating its directory (at its first mapped version) deletes those
of the others whose lock it can take (:func:`sweep_dead_roots`): their owners are gone. What is
left at most is the directories of processes that ended since a process last created one. This
needs the local directories on a local file system, as Spark's are: where ``flock`` fails, a
process keeps its directory without a lock and nothing is swept; NFS emulates ``flock`` with
locks a process does not see as its own, so a process never sweeps its own directory by name.
A forked child forgets its parent's directory (``os.register_at_fork``) and never removes it.

A query keeps its versions this way unless ``spark.statestream.stateStore.onLocalDisk`` is
``false`` (:data:`ON_LOCAL_DISK_DEFAULT`): on the benchmark's W1 to W4 and W9, the mapped
versions were as fast as versions in the heap within the noise or faster (W3 about a tenth: a
worker given another worker's partition maps its file instead of replaying a delta), with a
peak memory lower or the same (bench/README.md). A :class:`StateStoreConf` built without it
(the tools that read a checkpoint on the driver) keeps them in memory.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Protocol

import pyarrow as pa

try:
    import fcntl
except ImportError:  # not POSIX: no locks, so directories are never swept
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "ON_LOCAL_DISK_CONF",
    "ON_LOCAL_DISK_DEFAULT",
    "local_state_root",
    "release_root",
    "sweep_dead_roots",
    "store_dir",
    "mapped_file_name",
    "find_mapped",
    "write_mapped",
    "read_mapped",
    "remove_mapped",
]

log = logging.getLogger(__name__)


class BatchSource(Protocol):
    """Rows to write that are not one table (``store.KeptAndPut``)."""

    @property
    def schema(self) -> pa.Schema: ...

    def iter_batches(self) -> Iterator[pa.RecordBatch]: ...


#: The session conf that keeps committed state versions memory-mapped on local disk.
ON_LOCAL_DISK_CONF = "spark.statestream.stateStore.onLocalDisk"
#: What a query does when the session does not set :data:`ON_LOCAL_DISK_CONF`.
ON_LOCAL_DISK_DEFAULT = True

_ROOT: Path | None = None
_ROOT_LOCK = threading.Lock()
#: the directories of this process's versions start with this; ``<directory>.lock`` is its lock
ROOT_PREFIX = "statestream-state-"
_LOCK_SUFFIX = ".lock"
#: how many names a process tries for its directory before it gives up (another process or a
#: sweeper holding a new name's lock file is a rare race, not a state that lasts)
_CLAIM_ATTEMPTS = 8
#: directory -> (its held lock's descriptor or None, the pid that claimed it), this process's
_CLAIMED: dict[Path, tuple["int | None", int]] = {}


def _base_dir() -> str:
    """Spark's first local directory (``SPARK_LOCAL_DIRS``, which Spark sets for its Python
    workers: the executor's scratch disks), else the system's temporary directory."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d.strip()]
    return dirs[0].strip() if dirs else tempfile.gettempdir()


def local_state_root() -> Path:
    """This process's directory for memory-mapped versions, created on first use, when the
    directories of processes that ended are deleted (:func:`sweep_dead_roots`); removed at a
    normal exit of the process (see the module docstring for the others). Raises ``OSError``
    when no directory can be made (the caller keeps its version in memory)."""
    global _ROOT
    with _ROOT_LOCK:
        if _ROOT is None:
            base = Path(_base_dir())
            base.mkdir(parents=True, exist_ok=True)
            root, lock = _claim_root(base)
            _CLAIMED[root] = (lock, os.getpid())
            _ROOT = root
            if lock is not None:
                try:
                    sweep_dead_roots(base)
                except Exception:  # a cleanup: never the batch's failure
                    log.debug("could not sweep %s", base, exc_info=True)
        return _ROOT


def _lock_path(root: Path) -> Path:
    return root.with_name(root.name + _LOCK_SUFFIX)


def _claim_root(base: Path) -> tuple[Path, "int | None"]:
    """A new directory for this process and the descriptor of its held lock, or ``None`` where
    ``flock`` is missing or refused (that directory is never swept). The lock file is made and
    locked before the directory; a sweeper that took a new lock file first deletes it, and the
    claim tries another name."""
    for _ in range(_CLAIM_ATTEMPTS):
        root = base / f"{ROOT_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        if fcntl is None:
            root.mkdir()
            return root, None
        lock_path = _lock_path(root)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a sweeper has it: it will delete the file
            os.close(fd)
            continue
        except OSError:  # this file system refuses flock: a directory without a lock
            os.close(fd)
            _unlink(lock_path)
            root.mkdir()
            return root, None
        try:
            ours = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            ours = False
        if not ours:  # a sweeper took it and deleted it before this process locked it
            os.close(fd)
            continue
        try:
            root.mkdir()
        except OSError:
            os.close(fd)
            _unlink(lock_path)
            raise
        return root, fd
    raise OSError(f"could not claim a directory for state versions under {base} in {_CLAIM_ATTEMPTS} attempts")


def sweep_dead_roots(base: Path) -> list[Path]:
    """Delete the version directories under ``base`` whose owner is gone (its lock on
    ``<directory>.lock`` can be taken) and return them. The directories this process claimed
    (``_CLAIMED``, where a new one goes before the sweep) are never touched, and a directory
    without a lock file (of a version of statestream before the locks, or where ``flock``
    failed) is left alone. Another process's files that a worker still maps stay readable: only
    their names go."""
    if fcntl is None:
        return []
    own = set(_CLAIMED)
    swept = []
    try:
        locks = [p for p in base.iterdir() if p.name.startswith(ROOT_PREFIX) and p.name.endswith(_LOCK_SUFFIX)]
    except OSError:
        return []
    for lock_path in locks:
        root = lock_path.with_name(lock_path.name[: -len(_LOCK_SUFFIX)])
        if root in own:
            continue
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(lock_path).st_ino != os.fstat(fd).st_ino:
                continue  # deleted and made again meanwhile: not the file this lock was on
            shutil.rmtree(root, ignore_errors=True)
            if root.exists():
                continue  # partly deleted: the lock file stays, for a later sweep to finish
            os.unlink(lock_path)
            swept.append(root)
        except OSError:
            continue  # held: its process lives (or the file went meanwhile)
        finally:
            os.close(fd)
    if swept:
        log.info("deleted the state versions of %d Python processes that ended: %s", len(swept), [p.name for p in swept])
    return swept


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def release_root(root: Path) -> None:
    """Remove ``root``, a directory this process claimed, with its lock file, and release the
    lock. Only the process that claimed it does anything: a forked child's exit leaves its
    parent's directory alone."""
    lock, owner = _CLAIMED.get(root, (None, -1))
    if owner != os.getpid():
        return
    del _CLAIMED[root]
    shutil.rmtree(root, ignore_errors=True)
    if lock is not None:
        _unlink(_lock_path(root))
        try:
            os.close(lock)
        except OSError:
            pass


@atexit.register
def _release_all() -> None:
    for root in list(_CLAIMED):
        release_root(root)


def _forget_after_fork() -> None:
    """In a forked child: the parent's directory and lock stay the parent's (closing the
    child's copy of the descriptor leaves the parent's lock held)."""
    global _ROOT, _ROOT_LOCK
    for lock, _ in _CLAIMED.values():
        if lock is not None:
            try:
                os.close(lock)
            except OSError:
                pass
    _CLAIMED.clear()
    _ROOT = None
    _ROOT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _run_tag(checkpoint_root: str, run_id: str) -> str:
    return hashlib.sha1(f"{checkpoint_root}\0{run_id}".encode()).hexdigest()[:16]


def store_dir(checkpoint_root: str, run_id: str, relative_dir: str) -> Path:
    """The directory of one store's versions: one per checkpoint and run (a restarted query
    never maps a file of the run before it), then the store's own relative directory."""
    return local_state_root() / _run_tag(checkpoint_root, run_id) / relative_dir


def mapped_file_name(version: int, delta_stamp: tuple[int, int] | None, delta_checksum: int | None) -> str:
    """The file name of ``version``: with the (size, mtime_ns) of its delta file and the CRC-32
    in that file's trailer, the version as the checkpoint holds it (see the module docstring);
    without them, a name no other process looks for."""
    if delta_stamp is None or delta_checksum is None:
        return f"{version}.arrow"
    size, mtime_ns = delta_stamp
    return f"{version}.{size}.{mtime_ns}.{delta_checksum:08x}.arrow"


def find_mapped(checkpoint_root: str, run_id: str, relative_dir: str, name: str) -> list[Path]:
    """The files ``name`` of one store as the statestream processes under the same local
    directory wrote them (this process's own included). A directory that cannot be read (another
    user's, a failing disk) is passed over: this is a cache."""
    base = Path(_base_dir())
    tail = Path(_run_tag(checkpoint_root, run_id)) / relative_dir / name
    try:
        roots = [d for d in base.iterdir() if d.name.startswith(ROOT_PREFIX) and not d.name.endswith(_LOCK_SUFFIX)]
    except OSError:
        return []
    found = []
    for root in roots:
        path = root / tail
        try:
            if path.is_file():
                found.append(path)
        except OSError:
            continue
    return found


def write_mapped(table: "pa.Table | BatchSource", path: Path) -> pa.Table:
    """Write ``table`` to ``path`` as an uncompressed Arrow IPC file and return it read back
    memory-mapped (same schema, same rows; no copy in memory). ``table`` may also be anything
    with a ``schema`` and ``iter_batches()`` (``store.KeptAndPut``: a new version written from
    slices of the last one, never whole in memory).

    The file is written beside its final name and renamed over it, so a version written again
    (a re-executed batch) never changes the pages a table mapped earlier still reads. On an
    ``OSError`` (a full or missing disk) neither file is left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            if isinstance(table, pa.Table):
                writer.write_table(table)
            else:
                for batch in table.iter_batches():
                    writer.write_batch(batch)
        os.replace(tmp, path)
        mapped = read_mapped(path)
    except OSError:
        remove_mapped(tmp)
        remove_mapped(path)
        raise
    except BaseException:
        # (building the rows failed: a memory error, an Arrow error) no file of it stays either
        remove_mapped(tmp)
        raise
    # the map stays alive as long as the table's buffers do; closing the file object does not
    # unmap it
    return mapped


def read_mapped(path: Path) -> pa.Table:
    """The table of a file :func:`write_mapped` wrote, memory-mapped (no copy in memory)."""
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


def remove_mapped(path: Path) -> None:
    """Delete a version's file. A table still mapped from it stays readable (the pages live
    until the last buffer is released); only the name goes."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        log.debug("could not delete %s", path, exc_info=True)
