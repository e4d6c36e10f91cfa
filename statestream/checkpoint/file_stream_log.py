"""Spark's compactible metadata logs of file streams: a file sink's ``_spark_metadata`` log
(``FileStreamSinkLog``), which Spark's file source also reads to list a sink's committed files,
and the paths as those logs store them.

Spark: ``CompactibleFileStreamLog``, ``FileStreamSinkLog``. Pure module: no PySpark import (the
sink and the file source both keep their logs through it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote, unquote

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.checkpoint import (
    FileAlreadyExistsError,
    file_log_compaction_input_missing_error,
    file_log_corrupt_error,
    file_log_entry_missing_error,
    file_log_line_corrupt_error,
    file_log_line_not_object_error,
    log_version_line_missing_error,
    newer_log_version_error,
)

__all__ = [
    "METADATA_DIR",
    "CompactibleFileStreamLog",
    "FileStreamSinkLog",
    "first_compaction_to_keep",
    "is_hidden_file",
    "is_remote_path",
    "path_to_uri",
    "uri_to_path",
    "qualified_path",
]

logger = logging.getLogger(__name__)

#: the folder of a file sink's metadata log, under its output path
METADATA_DIR = "_spark_metadata"
_COMPACT_SUFFIX = ".compact"
_BATCH_FILE = re.compile(r"^([0-9]+)(\.compact)?$")


# -- paths ----------------------------------------------------------------------------------------


def is_remote_path(path: str) -> bool:
    return "://" in path and not path.startswith("file:")


def _local_abspath(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    return os.path.abspath(path)


def qualified_path(path: str) -> str:
    """The path as Spark's ``makeQualified`` shows it (``file:/abs/dir`` for local paths), used in
    ``description()`` strings and plans; ``<unknown>`` (a plan shown before a query starts) is kept."""
    if path.startswith("<") or is_remote_path(path):
        return path.rstrip("/")
    return "file:" + _local_abspath(path)


#: ASCII characters a URI path keeps as they are (``java.net.URI``'s unreserved and punctuation
#: characters, ``@`` and ``/``), which is what Hadoop's ``Path.toUri`` produces.
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" "_-!.~'()*" ",;:$&+=" "@/")


def _quote_uri_path(path: str) -> str:
    """Percent-encode ``path`` as ``java.net.URI`` does for a path component: safe ASCII and
    non-ASCII letters stay, everything else (space, ``%``, ``#``, ``?``, controls...) becomes its
    UTF-8 bytes in ``%XX``."""
    out = []
    for ch in path:
        if ch in _URI_PATH_SAFE or (ord(ch) > 0x7F and ch.isprintable() and not ch.isspace()):
            out.append(ch)
        else:
            out.append(quote(ch, safe=""))
    return "".join(out)


def path_to_uri(path: str) -> str:
    """A file's path as Spark's metadata logs store it: a URI as Hadoop's ``Path.toUri`` prints
    it (``file:///...`` for local files; ``=`` of partition directories kept, ``%`` and spaces
    encoded)."""
    if is_remote_path(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{_quote_uri_path(rest)}"
    return "file://" + _quote_uri_path(_local_abspath(path))


def uri_to_path(uri: str) -> str:
    """Inverse of :func:`path_to_uri`: a path Spark's reader and pyarrow can open."""
    if uri.startswith("file:"):
        rest = uri[len("file:") :]
        while rest.startswith("//"):
            rest = rest[1:]
        return unquote(rest)
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        return f"{scheme}://{unquote(rest)}"
    return unquote(uri)


def is_hidden_file(name: str) -> bool:
    """Spark's rule for files a directory listing skips (``_SUCCESS``, ``.crc``, temp files), but
    not partition directories like ``_k=1``."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


# -- the compactible metadata log ------------------------------------------------------------------


class CompactibleFileStreamLog:
    """A batch-id-indexed log of JSON entries with periodic compaction.

    Spark: ``CompactibleFileStreamLog``. File ``<b>`` holds batch ``b``'s entries
    (``v<version>`` line, then one JSON object per line, no trailing newline); at compaction
    batches the file is ``<b>.compact`` and holds all live entries of batches ``0..b``. Entries are
    plain dicts; ``key_order`` fixes the JSON key order (Spark's Jackson writes fields in
    declaration order).

    Parameters
    ----------
    root:
        The log directory (``<out>/_spark_metadata`` or ``<checkpoint>/sources/<i>``).
    version:
        The format version this code writes and the highest it reads.
    default_compact_interval:
        Used unless compact files already present imply another interval.
    """

    key_order: Sequence[str] = ()

    def __init__(
        self,
        root: str,
        version: int = 1,
        default_compact_interval: int = 10,
        *,
        delete_expired: bool = True,
        cleanup_delay_ms: int = 600_000,
        min_batches_to_retain: int = 100,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if default_compact_interval <= 0:
            raise ValueError(f"compactInterval must be positive, got {default_compact_interval}")
        self.files = CheckpointFileManager(root)
        self.version = version
        self.default_compact_interval = default_compact_interval
        self._compact_interval: int | None = None
        self.delete_expired = delete_expired
        self.cleanup_delay_ms = cleanup_delay_ms
        self.min_batches_to_retain = min_batches_to_retain
        self._clock = clock
        self.files.mkdirs()

    # batch ids and files

    def _batch_files(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for name in self.files.list():
            m = _BATCH_FILE.match(name)
            if m:
                out[int(m.group(1))] = name
        return out

    @property
    def compact_interval(self) -> int:
        """Spark's ``determineCompactInterval``: with compact files present, the interval must
        divide ``latestCompact + 1``; the smallest such divisor not below the default wins."""
        if self._compact_interval is None:
            compacts = sorted(b for b, n in self._batch_files().items() if n.endswith(_COMPACT_SUFFIX))
            interval = self.default_compact_interval
            if compacts:
                n = compacts[-1] + 1
                if n <= interval:
                    interval = n
                else:
                    interval = next((i for i in range(interval, n // 2 + 1) if n % i == 0), n)
            self._compact_interval = interval
        return self._compact_interval

    def is_compaction_batch(self, batch_id: int) -> bool:
        return (batch_id + 1) % self.compact_interval == 0

    def _name(self, batch_id: int) -> str:
        return f"{batch_id}{_COMPACT_SUFFIX}" if self.is_compaction_batch(batch_id) else str(batch_id)

    def latest_batch_id(self) -> int | None:
        ids = self._batch_files()
        return max(ids) if ids else None

    # (de)serialisation

    def _serialize(self, entries: Iterable[Mapping[str, Any]]) -> bytes:
        lines = [f"v{self.version}"]
        for e in entries:
            ordered = {k: e[k] for k in self.key_order if k in e}
            ordered.update({k: v for k, v in e.items() if k not in ordered})
            lines.append(json.dumps(ordered, separators=(",", ":"), ensure_ascii=False))
        return "\n".join(lines).encode("utf-8")

    def _deserialize(self, data: bytes, name: str) -> list[dict[str, Any]]:
        where = self.files.display(name)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise file_log_corrupt_error(where, exc) from None
        lines = text.split("\n")
        head = lines[0].strip()
        if not head.startswith("v") or not head[1:].isdigit():
            raise log_version_line_missing_error(where)
        found = int(head[1:])
        if found > self.version:
            raise newer_log_version_error(self.version, found, where)
        entries = []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise file_log_line_corrupt_error(where, number, exc) from None
            if not isinstance(entry, dict):
                raise file_log_line_not_object_error(where, number)
            entries.append(entry)
        return entries

    # reading

    def get(self, batch_id: int) -> list[dict[str, Any]] | None:
        """The entries stored in batch ``batch_id``'s file (for a compact file: all of them),
        ``None`` when it does not exist."""
        name = self._name(batch_id)
        if not self.files.exists(name):
            # A log written with another interval may still hold the plain file.
            alt = str(batch_id) if name.endswith(_COMPACT_SUFFIX) else f"{batch_id}{_COMPACT_SUFFIX}"
            if not self.files.exists(alt):
                return None
            name = alt
        return self._deserialize(self.files.read_bytes(name), name)

    def _valid_batches(self, batch_id: int) -> range:
        start = max(0, (batch_id + 1) // self.compact_interval * self.compact_interval - 1)
        return range(start, batch_id + 1)

    def all_entries(self) -> list[dict[str, Any]]:
        """Every live entry: the newest compact file plus the batch files after it."""
        latest = self.latest_batch_id()
        if latest is None:
            return []
        out: list[dict[str, Any]] = []
        for b in self._valid_batches(latest):
            entries = self.get(b)
            if entries is None:
                raise file_log_entry_missing_error(self.files.display(self._name(b)), latest, self.compact_interval)
            out.extend(entries)
        return self.compact_logs(out)

    def compact_logs(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """How a compaction merges entries (Spark's ``compactLogs``); identity by default."""
        return entries

    # writing

    def add(self, batch_id: int, entries: Sequence[Mapping[str, Any]]) -> bool:
        """Write batch ``batch_id``; ``False`` (and nothing written) if it already exists."""
        if self.get(batch_id) is not None:
            return False
        to_write: Sequence[Mapping[str, Any]] = list(entries)
        if self.is_compaction_batch(batch_id) and batch_id > 0:
            previous: list[dict[str, Any]] = []
            for b in self._valid_batches(batch_id - 1):
                got = self.get(b)
                if got is None:
                    raise file_log_compaction_input_missing_error(self.files.display(self._name(b)), batch_id, self.compact_interval)
                previous.extend(got)
            to_write = self.compact_logs(previous + [dict(e) for e in entries])
        try:
            self.files.write_atomic(self._name(batch_id), self._serialize(to_write), overwrite=False)
        except FileAlreadyExistsError:
            return False
        if self.delete_expired and self.is_compaction_batch(batch_id):
            self._delete_expired(batch_id)
        return True

    def _delete_expired(self, compaction_batch_id: int) -> None:
        """Delete the files of batches below the compact file that keeps the last
        ``min_batches_to_retain`` batches readable, if older than the cleanup delay."""
        below = first_compaction_to_keep(compaction_batch_id, self.compact_interval, self.min_batches_to_retain)
        if below is None:
            return
        expired = self._clock() * 1000 - self.cleanup_delay_ms
        sel = pafs.FileSelector(self.files.path(), allow_not_found=True, recursive=False)
        deleted = 0
        for info in self.files.fs.get_file_info(sel):
            m = _BATCH_FILE.match(info.base_name)
            if m is None or int(m.group(1)) >= below or info.mtime_ns is None or info.mtime_ns / 1e6 > expired:
                continue
            self.files.fs.delete_file(info.path)
            deleted += 1
        if deleted:
            logger.info("deleted %d expired log file(s) below batch %d of %s", deleted, below, self.files.display())


def first_compaction_to_keep(current_batch_id: int, compact_interval: int, min_batches_to_retain: int) -> int | None:
    """The compaction batch from which a compactible log must be kept so that the last
    ``min_batches_to_retain`` batches stay readable (every file below it may go), or None
    while the log is too short to delete anything (Spark's rule)."""
    if compact_interval > current_batch_id + 1 - min_batches_to_retain:
        return None
    lowest = current_batch_id + 1 - min_batches_to_retain
    return lowest - lowest % compact_interval - 1


class FileStreamSinkLog(CompactibleFileStreamLog):
    """``<out>/_spark_metadata``: Spark's ``FileStreamSinkLog`` (version 1)."""

    key_order = ("path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action")

    def compact_logs(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        deleted = {e["path"] for e in entries if e.get("action") == "delete"}
        if not deleted:
            return entries
        return [e for e in entries if e["path"] not in deleted]
