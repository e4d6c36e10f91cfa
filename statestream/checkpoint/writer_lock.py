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

Object stores (``s3://``, ``gs://``) have no such lock; there a second writer is stopped only as
on Spark, when it finds the offset log entry it is about to write already there (logged when
the query starts).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager

__all__ = ["LOCK_FILE", "CheckpointWriterLock", "CheckpointLockedError"]

log = logging.getLogger(__name__)

LOCK_FILE = ".statestream-writer.lock"


class CheckpointLockedError(RuntimeError):
    """Another live process holds the checkpoint's writer lock; ``holder`` is what it wrote
    about itself (empty if it had not written yet)."""

    def __init__(self, path: str, holder: dict[str, Any]) -> None:
        self.path = path
        self.holder = holder
        who = (
            f"run {holder.get('runId')} of query {holder.get('id')} in process {holder.get('pid')} on host {holder.get('host')}, "
            f"since {holder.get('since')}"
            if holder
            else "another process"
        )
        super().__init__(f"the checkpoint is in use by {who} (it holds the lock {path})")


class CheckpointWriterLock:
    """The exclusive writer lock of one checkpoint. ``acquire`` raises ``CheckpointLockedError``
    when another holder has it; ``release`` is idempotent."""

    def __init__(self, fm: CheckpointFileManager) -> None:
        self.fm = fm
        self._fd: int | None = None

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
        return self._fd is not None

    def acquire(self, query_id: str, run_id: str) -> None:
        if self._fd is not None:
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
        holder = {
            "id": query_id, "runId": run_id, "pid": os.getpid(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
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
