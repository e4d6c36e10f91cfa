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
    "checkpoint_location_not_directory_error",
    "malformed_log_version_error",
    "unsupported_log_version_error",
    "log_file_read_error",
    "log_file_corrupt_error",
    "log_file_not_utf8_error",
    "log_batches_missing_error",
    "incomplete_commit_log_file_error",
    "commit_metadata_corrupt_error",
    "incomplete_offset_log_file_error",
    "offset_log_file_without_metadata_error",
    "offset_metadata_corrupt_error",
    "offset_corrupt_error",
    "previous_batch_missing_error",
    "query_metadata_corrupt_error",
    "query_metadata_without_id_error",
    "query_metadata_exists_error",
    "interrupted_rollback_error",
    "log_version_line_missing_error",
    "newer_log_version_error",
    "file_log_corrupt_error",
    "file_log_line_corrupt_error",
    "file_log_line_not_object_error",
    "file_log_entry_missing_error",
    "file_log_compaction_input_missing_error",
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


def checkpoint_location_not_directory_error(shown: str, is_root: bool) -> CheckpointError:
    """The checkpoint location (``is_root``) or one of its parents (``shown``) is a file: the
    texts of Hadoop's errors that Spark's ``start()`` fails with."""
    text = "Destination exists and is not a directory" if is_root else "Parent path is not a directory"
    return CheckpointError(f"checkpoint location: {text}: {shown}")


def malformed_log_version_error(file: str, line: str) -> CheckpointError:
    """A log file whose first line is not ``v<positive int>`` (Spark's wording)."""
    return CheckpointError(f"Cannot read log file {file}: Log file was malformed: failed to read correct log version from {line}.")


def unsupported_log_version_error(file: str, max_supported: int, found: int) -> CheckpointError:
    """A log file written by a newer version (Spark's ``UnsupportedLogVersion`` wording)."""
    return CheckpointError(
        f"Cannot read log file {file}: UnsupportedLogVersion: maximum supported log version is v{max_supported}, but "
        f"encountered v{found}. The log file was produced by a newer version of Spark and "
        "cannot be read by this version. Please upgrade."
    )


def log_file_read_error(file: str, cause: BaseException) -> CheckpointError:
    """Reading a log file failed (``cause``: the file system's error)."""
    return CheckpointError(f"Cannot read log file {file}: {cause}")


def log_file_corrupt_error(file: str, cause: BaseException) -> CheckpointError:
    """A log file whose content does not parse."""
    return CheckpointError(f"Cannot read log file {file}: it is corrupt ({cause})")


def log_file_not_utf8_error(file: str, cause: BaseException) -> CheckpointError:
    """A log file that is not UTF-8 text."""
    return CheckpointError(f"Cannot read log file {file}: it is not UTF-8 text ({cause})")


def log_batches_missing_error(shown: str, log: str, start: int | None, end: int | None) -> CheckpointError:
    """A range read of a log (``log``) that misses batches (``shown``: their ids) between
    ``start`` and ``end``."""
    return CheckpointError(f"batches ({shown}) don't exist in {log} (startId: {start}, endId: {end})")


def incomplete_commit_log_file_error(file: str) -> CheckpointError:
    """An empty commit log file."""
    return CheckpointError(f"Cannot read log file {file}: Incomplete log file in the offset commit log")


def commit_metadata_corrupt_error(file: str, cause: BaseException) -> CheckpointError:
    """A commit log file whose JSON does not parse."""
    return CheckpointError(f"Cannot read log file {file}: corrupt commit metadata ({cause})")


def incomplete_offset_log_file_error(file: str) -> CheckpointError:
    """An empty offset log file."""
    return CheckpointError(f"Cannot read log file {file}: Incomplete log file")


def offset_log_file_without_metadata_error(file: str) -> CheckpointError:
    """An offset log file that has its version line and nothing else."""
    return CheckpointError(f"Cannot read log file {file}: Incomplete log file (no metadata line)")


def offset_metadata_corrupt_error(file: str, cause: BaseException) -> CheckpointError:
    """An offset log file whose metadata line does not parse."""
    return CheckpointError(f"Cannot read log file {file}: corrupt metadata line ({cause})")


def offset_corrupt_error(file: str, source: int, text: str, cause: BaseException) -> CheckpointError:
    """An offset log file whose offset of ``source`` (``text``) is not JSON."""
    return CheckpointError(f"Cannot read log file {file}: corrupt offset of source {source} ({text!r}: {cause})")


def previous_batch_missing_error(batch_id: int) -> CheckpointError:
    """A restart whose offset log lacks the batch before the last one (Spark's text)."""
    return CheckpointError(f"batch {batch_id} doesn't exist")


def query_metadata_corrupt_error(where: str, cause: BaseException) -> CheckpointError:
    """The checkpoint's ``metadata`` file (the query id) is not JSON."""
    return CheckpointError(f"Cannot read query metadata file {where}: it is corrupt ({cause})")


def query_metadata_without_id_error(where: str) -> CheckpointError:
    """The checkpoint's ``metadata`` file has no string ``id``."""
    return CheckpointError(f'Cannot read query metadata file {where}: no string "id" field')


def query_metadata_exists_error(where: str) -> CheckpointError:
    """The checkpoint's ``metadata`` file was written by another run first (the id never changes)."""
    return CheckpointError(f"Query metadata file {where} already exists")


def interrupted_rollback_error(checkpoint: str, target: object, marker: str) -> CheckpointError:
    """A start on a checkpoint whose rollback (to batch ``target``) was interrupted: its
    ``marker`` file is still there."""
    return CheckpointError(
        f"A rollback of the checkpoint {checkpoint} to batch {target} was interrupted ({marker} "
        f"is there): run `statestream checkpoint rollback {checkpoint} --to-batch {target}` again to finish it before "
        "starting the query"
    )


# -- the compactible metadata logs of file streams (checkpoint/file_stream_log.py) ----------------


def log_version_line_missing_error(where: str) -> CheckpointError:
    """A source's or sink's log file (a file sink's, a rate source's) without its ``v<N>`` line."""
    return CheckpointError(f"Log file was malformed: failed to detect the log file version line. ({where})")


def newer_log_version_error(max_supported: int, found: int, where: str) -> CheckpointError:
    """A source's or sink's log file written by a newer version (Spark's ``UnsupportedLogVersion``)."""
    return CheckpointError(
        f"UnsupportedLogVersion: maximum supported log version is v{max_supported}, but encountered "
        f"v{found} in {where}. The log file was produced by a newer version."
    )


def file_log_corrupt_error(where: str, cause: BaseException) -> CheckpointError:
    """A file source's or sink's log file that is not UTF-8."""
    return CheckpointError(f"Log file {where} is corrupt: {cause}")


def file_log_line_corrupt_error(where: str, number: int, cause: BaseException) -> CheckpointError:
    """A line of a file source's or sink's log file that is not JSON."""
    return CheckpointError(f"Log file {where} is corrupt: line {number}: {cause}")


def file_log_line_not_object_error(where: str, number: int) -> CheckpointError:
    """A line of a file source's or sink's log file that is JSON but not an object."""
    return CheckpointError(f"Log file {where} is corrupt: line {number} is not a JSON object")


def file_log_entry_missing_error(file: str, latest: int, compact_interval: int) -> CheckpointError:
    """A file source's or sink's log whose entry (``file``) a read of all its entries needs is
    not there."""
    return CheckpointError(f"{file} doesn't exist (latestId: {latest}, compactInterval: {compact_interval})")


def file_log_compaction_input_missing_error(file: str, batch_id: int, compact_interval: int) -> CheckpointError:
    """A file source's or sink's log entry (``file``) that compacting ``batch_id`` needs is not there."""
    return CheckpointError(f"{file} doesn't exist when compacting batch {batch_id} (compactInterval: {compact_interval})")
