"""One writer per checkpoint, across processes.

Spark keeps a second run of a query out only within one driver (by query id); a driver in
another process starts, runs a whole batch (sink output included) and fails only when it comes
to write the offset log ("Concurrent update to the log"). statestream refuses it at ``start()``:
the running query holds an exclusive lock on ``<checkpoint>/.statestream-writer.lock`` for as long
as it runs.

The lock is the operating system's (``flock``), so it cannot outlive its holder: a writer killed
at any instruction releases it with its process, and of two restarts racing for it after a crash
exactly one gets it. It works on a local directory and on a shared POSIX mount (NFS emulates it
with its own locks). The file is never deleted: a deleted lock file would let a second process
lock a new file of the same name while the first still holds the old one. Its content names the
holder (host, process, query run), for the error the next writer gets.

An object store has no such lock, and no rename either. On S3 (with its conditional PUT, see
``checkpoint.object_store``) the lock is a lease instead: numbered lease files under
``<checkpoint>/.statestream-writer-lease/``, the highest number being the holder's. A writer takes
the lease by creating the next number (create-if-absent, so of two writers exactly one gets it)
and renews it every ``lease / 6`` by rewriting its own file with a beat count. A starting writer
that finds a lease that is not released watches it: if the beat moves, the holder is alive and
the start is refused; if it stays still for a whole lease, the holder is dead (a crash cannot
release) and the lease is taken over. (A holder that was a process of this host which no longer
exists is dead at once.) No clocks are compared across hosts. A holder that finds a
higher number than its own has lost the lease (it was stalled for longer than a lease) and stops
before its next log write. Behind the lease, every log entry is itself created only if absent,
so even a stalled holder cannot overwrite a batch the new one wrote.

Elsewhere (another object store, or S3 without boto3), a second writer is stopped only as on
Spark, when it finds the offset log entry it is about to write already there (logged when the
query starts).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.checkpoint import CheckpointLockedError, WriterLeaseLostError

if TYPE_CHECKING:
    from statestream.checkpoint.object_store import S3ConditionalWrites

__all__ = ["LEASE_DIR", "LOCK_FILE", "CheckpointWriterLock", "ObjectStoreLease"]

log = logging.getLogger(__name__)

LOCK_FILE = ".statestream-writer.lock"
LEASE_DIR = ".statestream-writer-lease"
#: how long a lease's beat may stand still before its holder counts as dead
DEFAULT_LEASE_MS = 30_000


class CheckpointWriterLock:
    """The exclusive writer lock of one checkpoint. ``acquire`` raises ``CheckpointLockedError``
    when another holder has it; ``release`` is idempotent."""

    def __init__(self, fm: CheckpointFileManager, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        self.fm = fm
        self._fd: int | None = None
        self._lease: ObjectStoreLease | None = None
        self.lease_ms = lease_ms

    @property
    def supported(self) -> bool:
        """Whether the checkpoint's file system has the lock (a local or mounted directory, on
        a system with ``flock``)."""
        try:
            import fcntl  # noqa: F401 - POSIX only
        except ImportError:
            return False
        return isinstance(self.fm.fs, pafs.LocalFileSystem)

    @property
    def held(self) -> bool:
        return self._fd is not None or self._lease is not None

    def check_held(self) -> None:
        """Raise ``CheckpointLockedError`` if this writer lost its object-store lease to another
        run (a ``flock`` cannot be lost)."""
        if self._lease is not None:
            self._lease.check_held()

    def acquire(self, query_id: str, run_id: str) -> None:
        if self.held:
            return
        if not self.supported and self.fm.conditional is not None:
            lease = ObjectStoreLease(self.fm, self.lease_ms)
            lease.acquire(_holder(query_id, run_id))
            self._lease = lease
            return
        if not self.supported:
            log.info(
                "checkpoint %s is on a file system (or system) without locks: a second writer in another process is refused "
                "only when it writes the offset log (as on Spark)", self.fm.display(),
            )
            return
        import fcntl

        self.fm.mkdirs()
        path = self.fm.path(LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise CheckpointLockedError(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder(query_id, run_id)).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
        fd, self._fd = self._fd, None
        if fd is None:
            return
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        holder = json.loads(data) if data else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def _holder(query_id: str, run_id: str) -> dict[str, Any]:
    return {
        "id": query_id, "runId": run_id, "pid": os.getpid(), "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _dead_here(holder: dict[str, Any]) -> bool:
    """Whether the holder was a process of this host that no longer exists: a restart on the
    machine where the writer was killed need not watch its lease for a whole timeout. (A reused
    process id only makes it watch.)"""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class ObjectStoreLease:
    """The writer lease of a checkpoint on an object store with create-if-absent (see the module
    docstring). ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(
        self, fm: CheckpointFileManager, lease_ms: int = DEFAULT_LEASE_MS,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.fm = fm
        self.lease_s = lease_ms / 1000.0
        self.clock = clock
        self.sleep = sleep
        self.number: int | None = None
        self._holder: dict[str, Any] = {}
        self._beats = 0
        self._lost: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = threading.Lock()

    # -- files ----------------------------------------------------------------------------------

    @property
    def _writes(self) -> S3ConditionalWrites:
        """The store's conditional writes: a lease is taken only on a store that has them."""
        writes = self.fm.conditional
        if writes is None:
            msg = f"checkpoint {self.fm.display()} has no conditional writes: its writer lease cannot be taken"
            raise RuntimeError(msg)
        return writes

    def _rel(self, number: int) -> str:
        return f"{LEASE_DIR}/{number}"

    def _numbers(self) -> list[int]:
        return sorted(int(n) for n in self.fm.list(LEASE_DIR) if n.isdigit())

    def _read(self, number: int) -> dict[str, Any] | None:
        try:
            data = json.loads(self.fm.read_bytes(self._rel(number)))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _body(self, **extra: Any) -> bytes:
        return json.dumps(dict(self._holder, beat=self._beats, leaseMs=int(self.lease_s * 1000), **extra)).encode()

    # -- taking and giving back ----------------------------------------------------------------

    def acquire(self, holder: dict[str, Any]) -> None:
        """Take the lease, or raise ``CheckpointLockedError`` naming the live holder. Waits up
        to one lease when the last holder neither released nor beats (it may be dead)."""
        self._holder = dict(holder)
        watched: tuple[int, Any] | None = None
        watch_deadline = 0.0
        while True:
            numbers = self._numbers()
            top = numbers[-1] if numbers else 0
            current = self._read(top) if top else None
            if top and current is None:
                # listed but unreadable: deleted under us (an old number) or being written
                self.sleep(0.05)
                continue
            free = (
                current is None or current.get("released") or current.get("runId") == holder.get("runId")
                or _dead_here(current)
            )
            if not free and current is not None:  # (a held lease is one that was read)
                beat = (top, current.get("beat"))
                if watched != beat:
                    if watched is not None:
                        raise CheckpointLockedError(self.fm.display(self._rel(top)), current)
                    watched, watch_deadline = beat, self.clock() + self.lease_s
                    log.info(
                        "checkpoint %s: lease %d is held by run %s and not released; watching it for up to %.0f s "
                        "to learn whether that run is alive", self.fm.display(), top, current.get("runId"), self.lease_s,
                    )
                if self.clock() < watch_deadline:
                    self.sleep(min(0.5, self.lease_s / 12))
                    continue
                log.warning(
                    "checkpoint %s: the lease of run %s has not moved for %.0f s; taking it over",
                    self.fm.display(), current.get("runId"), self.lease_s,
                )
            if self._writes.create(self.fm.path(self._rel(top + 1)), self._body()):
                self.number = top + 1
                break
            watched = None  # another writer took the next number first: look again
        for old in numbers:
            if old < top:
                self.fm.delete(self._rel(old))
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="statestream-writer-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and mark the lease released, so that the next writer takes it at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_s)
            self._thread = None
        if self.number is not None and self._lost is None and self._still_top():
            with self._write_lock:
                self._writes.put(self.fm.path(self._rel(self.number)), self._body(released=True))
        self.number = None

    # -- renewing --------------------------------------------------------------------------------

    def _still_top(self) -> bool:
        numbers = self._numbers()
        higher = [n for n in numbers if self.number is not None and n > self.number]
        if higher:
            self._lost = self._read(higher[-1]) or {}
            return False
        return True

    def renew(self) -> bool:
        """One beat: ``False`` (and the lease is lost) when a higher number exists."""
        if self._lost is not None or self.number is None:
            return False
        if not self._still_top():
            lost: dict[str, Any] = self._lost or {}  # set by _still_top
            log.error("checkpoint %s: lost the writer lease to run %s", self.fm.display(), lost.get("runId"))
            return False
        self._beats += 1
        with self._write_lock:
            self._writes.put(self.fm.path(self._rel(self.number)), self._body())
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 6):
            try:
                if not self.renew():
                    return
            except Exception:  # a failed beat is retried; a lost lease is seen by the next one
                log.warning("checkpoint %s: renewing the writer lease failed; trying again", self.fm.display(), exc_info=True)

    def check_held(self) -> None:
        """Raise ``CheckpointLockedError`` once the lease was lost."""
        if self._lost is not None:
            raise WriterLeaseLostError(self.fm.display(LEASE_DIR), self._lost)
