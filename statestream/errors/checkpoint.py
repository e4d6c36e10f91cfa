"""Errors of the checkpoint: its logs, its files and its writer lock.

Pure module: no PySpark import (``checkpoint/`` raises these).
"""

from __future__ import annotations

from typing import Any

from statestream.errors.base import StatestreamError

__all__ = [
    "CheckpointError",
    "ConcurrentStreamLogUpdateError",
    "concurrent_stream_log_update_error",
    "FileAlreadyExistsError",
    "CheckpointLockedError",
    "WriterLeaseLostError",
]


class CheckpointError(StatestreamError):
    """A checkpoint log file is missing, corrupt, or written by a newer version.

    Examples
    --------
    >>> error = concurrent_stream_log_update_error(3, "/tmp/q/offsets/3")
    >>> isinstance(error, CheckpointError), error.getCondition()
    (True, 'CONCURRENT_STREAM_LOG_UPDATE')
    """


class ConcurrentStreamLogUpdateError(CheckpointError):
    """Another writer wrote the log entry this query was about to write: two runs on one
    checkpoint (Spark's CONCURRENT_STREAM_LOG_UPDATE)."""

    error_class = "CONCURRENT_STREAM_LOG_UPDATE"

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        """Spark's error class."""
        return self.error_class


def concurrent_stream_log_update_error(batch_id: int, path: str) -> ConcurrentStreamLogUpdateError:
    """The offset log already holds ``batch_id`` when this run comes to write it:
    Spark's text, and the file (``path``) the other writer wrote."""
    return ConcurrentStreamLogUpdateError(
        f"[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for {batch_id}. "
        f"Please make sure only one streaming job runs on a specific checkpoint location at a time. ({path} was written by another run)"
    )


class FileAlreadyExistsError(FileExistsError):
    """``CheckpointFileManager.write_atomic(..., overwrite=False)`` found the target already
    there (Hadoop's ``FileAlreadyExistsException``): another writer was first."""


class CheckpointLockedError(RuntimeError):
    """Another live process holds the checkpoint's writer lock; ``holder`` is what it wrote
    about itself (empty if it had not written yet).

    Examples
    --------
    >>> str(CheckpointLockedError("/q/.statestream-writer.lock", {}))
    'the checkpoint is in use by another process (it holds the lock /q/.statestream-writer.lock)'
    """

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


class WriterLeaseLostError(CheckpointLockedError):
    """This run's object-store lease was taken over by another run (this one had stood still for
    longer than the lease): it stops before it writes the checkpoint's logs again."""

    def __init__(self, path: str, holder: dict[str, Any]) -> None:
        super().__init__(path, holder)
        self.args = (
            f"this run lost the checkpoint's writer lease ({path}) to run {holder.get('runId')}, which took it over after "
            "this run's lease stood still for the whole lease timeout; the run stops before it writes the logs again",
        )
