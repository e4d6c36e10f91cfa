"""A write-once, batch-indexed metadata log over one checkpoint directory.

Spark: ``HDFSMetadataLog``. The offset log and the commit log of a streaming query are both such
logs: a directory whose files are named by the batch id in decimal (``offsets/0``, ``offsets/1``,
...). An entry is written once and never overwritten, because the recovery rules on restart
(spark-semantics §7.5) read these files as the durable record of what each batch was and whether it
finished; overwriting one would silently change history.

Every file starts with a version line ``v<N>``. A reader that finds a version above the one it
supports refuses the file instead of guessing its layout, with a message that names the file and
both versions, so a checkpoint written by a newer engine fails loudly rather than being
misread.

All I/O goes through :class:`~statestream.checkpoint.files.CheckpointFileManager`, which makes
each write atomic (temporary file, then rename).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.checkpoint import (
    CheckpointError,
    FileAlreadyExistsError,
    log_batches_missing_error,
    log_file_corrupt_error,
    log_file_not_utf8_error,
    log_file_read_error,
    malformed_log_version_error,
    unsupported_log_version_error,
)

__all__ = [
    "MetadataLog",
    "parse_log_version",
    "split_lines",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def parse_log_version(text: str, max_supported: int, file: str) -> int:
    """Read the version line ``v<N>`` of a log file.

    Parameters
    ----------
    text:
        The first line of the file (surrounding blanks are ignored).
    max_supported:
        The highest version this reader understands.
    file:
        The file's path, used in error messages so the user knows which file to look at.

    Returns
    -------
    int
        The version number (``>= 1``).

    Raises
    ------
    CheckpointError
        The line is not ``v`` followed by a positive decimal number, or the number is above
        ``max_supported`` (the message names the file and both versions).
    """
    line = text.strip()
    version = 0
    if len(line) > 1 and line[0] == "v" and line[1:].isdigit() and line[1:].isascii():
        version = int(line[1:])
    if version <= 0:
        raise malformed_log_version_error(file, line)
    if version > max_supported:
        raise unsupported_log_version_error(file, max_supported, version)
    return version


def _is_batch_file_name(name: str) -> bool:
    return name.isascii() and name.isdigit()


class MetadataLog(ABC, Generic[T]):
    """A log of one entry per batch id, stored as one file per batch in ``directory``.

    Subclasses define the on-disk format through :meth:`serialize` and :meth:`deserialize`; this
    class handles naming, atomic write-once semantics, listing, range reads and purging.

    Lifecycle: entries are :meth:`add`-ed in increasing batch order by the driver (offsets before a
    batch runs, commits after it); on restart :meth:`get_latest` tells the loop where it stopped;
    :meth:`purge` deletes entries older than the retention window. :meth:`add` never replaces an
    entry: a batch that is re-executed after a crash reuses its existing entry instead.

    Parameters
    ----------
    directory:
        The log directory, as a path/URI or as a :class:`CheckpointFileManager` rooted at it.
        It is created on the first :meth:`add`.
    """

    #: Highest version of the file format this class reads (and the one it writes).
    VERSION: ClassVar[int] = 1

    def __init__(self, directory: str | CheckpointFileManager) -> None:
        self.files = directory if isinstance(directory, CheckpointFileManager) else CheckpointFileManager(directory)

    # -- format hooks -------------------------------------------------------------------------

    @abstractmethod
    def serialize(self, entry: T) -> bytes:
        """The file content for ``entry``."""

    @abstractmethod
    def deserialize(self, data: bytes, file: str) -> T:
        """Parse a file's content; ``file`` is the path to name in error messages.

        Implementations raise :class:`CheckpointError` for content they cannot read."""

    # -- paths --------------------------------------------------------------------------------

    @staticmethod
    def batch_file_name(batch_id: int) -> str:
        """The file name of a batch: its id in decimal, without padding."""
        return str(batch_id)

    def path_of(self, batch_id: int) -> str:
        """The displayable path of the file of ``batch_id`` (for messages)."""
        return self.files.display(self.batch_file_name(batch_id))

    # -- operations ---------------------------------------------------------------------------

    def add(self, batch_id: int, entry: T) -> bool:
        """Store ``entry`` for ``batch_id`` unless the batch already has an entry.

        Returns
        -------
        bool
            ``True`` when the entry was written; ``False`` when an entry for the batch already
            exists (it is left untouched). The write is atomic: readers see the whole file or
            nothing.
        """
        _check_batch_id(batch_id)
        name = self.batch_file_name(batch_id)
        if self.files.exists(name):
            return False
        try:
            self.files.write_atomic(name, self.serialize(entry), overwrite=False)
        except FileAlreadyExistsError:
            # Another writer won the race between our check and our rename: the batch exists
            # now, which is exactly what the caller must learn.
            logger.warning("log entry %s appeared while it was being written", self.path_of(batch_id))
            return False
        return True

    def get(self, batch_id: int) -> T | None:
        """The entry of ``batch_id``, or ``None`` when the batch has no file.

        Raises
        ------
        CheckpointError
            The file exists but cannot be read or parsed (the message names the file).
        """
        _check_batch_id(batch_id)
        name = self.batch_file_name(batch_id)
        if not self.files.exists(name):
            return None
        file = self.path_of(batch_id)
        try:
            data = self.files.read_bytes(name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise log_file_read_error(file, exc) from exc
        try:
            return self.deserialize(data, file)
        except CheckpointError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise log_file_corrupt_error(file, exc) from exc

    def list_batch_ids(self) -> list[int]:
        """All batch ids that have a file, ascending. Files whose name is not a decimal number
        (temporary files, checksum side files) are ignored."""
        return sorted(int(n) for n in self.files.list() if _is_batch_file_name(n))

    def get_latest_batch_id(self) -> int | None:
        """The highest batch id with a file, without reading it (``None`` for an empty log)."""
        ids = self.list_batch_ids()
        return ids[-1] if ids else None

    def get_latest(self) -> tuple[int, T] | None:
        """The entry with the highest batch id and that id, or ``None`` for an empty log.

        A file that vanishes between listing and reading is skipped (the next lower one is
        tried); a corrupt latest file raises, because silently falling back to an older batch
        would make the query redo or skip work."""
        for batch_id in reversed(self.list_batch_ids()):
            entry = self.get(batch_id)
            if entry is not None:
                return batch_id, entry
        return None

    def get_range(self, start: int | None, end: int | None) -> list[tuple[int, T]]:
        """The entries with ``start <= batch_id <= end`` (either bound may be ``None``), ascending.

        Raises
        ------
        CheckpointError
            Some batch inside the requested range has no file (a hole in the log, or a bound
            that does not exist), as Spark's log verifies: a silent gap would make a source
            replay the wrong data.
        ValueError
            ``start > end``.
        """
        if start is not None and end is not None and start > end:
            raise ValueError(f"start batch id {start} is after end batch id {end}")
        ids = [
            b
            for b in self.list_batch_ids()
            if (start is None or b >= start) and (end is None or b <= end)
        ]
        result: list[tuple[int, T]] = []
        for batch_id in ids:
            entry = self.get(batch_id)
            if entry is not None:
                result.append((batch_id, entry))
        if start is not None or end is not None:
            found = [b for b, _ in result]
            if found:
                lo = start if start is not None else found[0]
                hi = end if end is not None else found[-1]
                missing = sorted(set(range(lo, hi + 1)) - set(found))
            else:
                missing = sorted({b for b in (start, end) if b is not None})
            if missing:
                shown = ", ".join(str(m) for m in missing[:20]) + (", ..." if len(missing) > 20 else "")
                raise log_batches_missing_error(shown, self.files.display(), start, end)
        return result

    def purge(self, threshold_batch_id: int) -> None:
        """Delete every entry with ``batch_id < threshold_batch_id``.

        Idempotent: entries already gone are fine, and running it twice changes nothing."""
        for batch_id in self.list_batch_ids():
            if batch_id >= threshold_batch_id:
                break
            self.files.delete(self.batch_file_name(batch_id))
            logger.debug("purged log entry %s", self.path_of(batch_id))

    def purge_after(self, threshold_batch_id: int) -> None:
        """Delete every entry with ``batch_id > threshold_batch_id`` (Spark's ``purgeAfter``,
        used to roll back entries of batches that will be re-planned). Idempotent."""
        for batch_id in self.list_batch_ids():
            if batch_id > threshold_batch_id:
                self.files.delete(self.batch_file_name(batch_id))


def _check_batch_id(batch_id: int) -> None:
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ValueError(f"batch id must be a non-negative integer, got {batch_id!r}")


def split_lines(data: bytes, file: str) -> list[str]:
    """Decode a log file as UTF-8 and split it into lines on ``\\n``.

    A single trailing newline does not create an empty last line (Spark's line reader behaves the
    same), so files with or without a final ``\\n`` read alike. ``\\r`` before ``\\n`` is
    dropped as well."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise log_file_not_utf8_error(file, exc) from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
