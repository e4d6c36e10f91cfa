"""The file sink (parquet, json, csv, ...) and the compactible metadata log it shares with the
file source.

Spark: ``FileStreamSink``, ``ManifestFileCommitProtocol``, ``FileStreamSinkLog`` and
``CompactibleFileStreamLog``. What is mirrored:

* Every batch's data files are listed in ``<path>/_spark_metadata/<batchId>``: a ``v1`` line,
  then one JSON object per file (``path`` as a URI, ``size``, ``isDir``, ``modificationTime``,
  ``blockReplication``, ``blockSize``, ``action`` = ``"add"``). A reader that finds
  ``_spark_metadata`` (Spark's own ``spark.read.parquet(path)`` included) reads only the files the
  log lists, so files of a batch that crashed half-way are never seen.
* A batch id that the log already holds is skipped: re-delivery after a crash writes nothing.
* Every ``compactInterval`` (10) batches the log is compacted: batch ``b`` with
  ``(b + 1) % 10 == 0`` is written as ``b.compact`` and holds every live entry so far; readers
  then start from the newest compact file. After a compaction, the files of batches before the
  compact file that keeps ``minBatchesToRetain`` batches readable are deleted once they are
  older than ``...log.cleanupDelay`` (10 minutes; a reader listing the log meanwhile still
  finds them), as Spark does (``...log.deletion`` turns it off): the log stays bounded.
* Only the append output mode is accepted, with Spark's error for the others.

Data files are written by a Spark batch job into a hidden staging directory of the output path
(``.statestream-staging-<batch>-<uuid>``), moved next to the earlier files once the job has
finished, and only then listed in the log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote, unquote

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import FileAlreadyExistsError
from statestream.errors import (
    file_log_compaction_input_missing_error,
    file_log_corrupt_error,
    file_log_entry_missing_error,
    file_log_line_corrupt_error,
    file_log_line_not_object_error,
    file_sink_concurrent_update_error,
    file_sink_log_behind_error,
    file_sink_output_mode_error,
    log_version_line_missing_error,
    newer_log_version_error,
)
from statestream.faults import crash_point
from statestream.sinks.base import Sink
from statestream.sources.options import time_string_as_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FileStreamSink",
    "CompactibleFileStreamLog",
    "FileStreamSinkLog",
    "path_to_uri",
    "uri_to_path",
    "qualified_path",
    "METADATA_DIR",
]

logger = logging.getLogger(__name__)

METADATA_DIR = "_spark_metadata"
_COMPACT_SUFFIX = ".compact"
_BATCH_FILE = re.compile(r"^([0-9]+)(\.compact)?$")
_STAGING_PREFIX = ".statestream-staging-"

#: Hadoop's local file system reports these for every file (replication 1, 32 MB blocks).
_LOCAL_BLOCK_REPLICATION = 1
_LOCAL_BLOCK_SIZE = 33554432


# -- paths ----------------------------------------------------------------------------------------


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file:")


def _local_abspath(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    return os.path.abspath(path)


def qualified_path(path: str) -> str:
    """The path as Spark's ``makeQualified`` shows it (``file:/abs/dir`` for local paths), used in
    ``description()`` strings."""
    if _is_remote(path):
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
    if _is_remote(path):
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


def _is_hidden(name: str) -> bool:
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
        to_write: list[Mapping[str, Any]] = list(entries)
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


def log_settings(spark: "SparkSession | None", which: str) -> dict[str, Any]:
    """A compactible log's settings from Spark's confs ``spark.sql.streaming.<which>.log.*``
    (``which``: ``fileSink`` or ``fileSource``) and ``minBatchesToRetain``."""
    conf = (lambda key, default: default) if spark is None else (lambda key, default: spark.conf.get(key, default) or default)
    return {
        "default_compact_interval": int(conf(f"spark.sql.streaming.{which}.log.compactInterval", "10")),
        "delete_expired": str(conf(f"spark.sql.streaming.{which}.log.deletion", "true")).strip().lower() == "true",
        "cleanup_delay_ms": time_string_as_ms(conf(f"spark.sql.streaming.{which}.log.cleanupDelay", "10m")),
        "min_batches_to_retain": int(conf("spark.sql.streaming.minBatchesToRetain", "100")),
    }


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


# -- the sink -------------------------------------------------------------------------------------


class FileStreamSink(Sink):
    """Appends each micro-batch as new files under ``path``, exactly once per batch id.

    Parameters
    ----------
    spark:
        Only used for ``spark.sql.streaming.fileSink.log.compactInterval``.
    path:
        The output directory (local path, ``file:`` URI, or any URI Spark and pyarrow share).
    fmt:
        ``parquet``, ``json``, ``csv``, ``orc``, ``text``: whatever ``DataFrameWriter.format``
        accepts.
    options:
        Passed to the writer (``compression``, ``header``, ``sep``, ...).
    partition_by:
        Columns for ``DataFrameWriter.partitionBy``; files land in ``k=v`` sub-directories.
    output_mode:
        Checked at construction: anything but ``append`` raises Spark's error.
    """

    def __init__(
        self,
        spark: "SparkSession | None",
        path: str,
        fmt: str,
        options: Mapping[str, Any] | None = None,
        partition_by: Sequence[str] | None = None,
        output_mode: str | None = None,
    ) -> None:
        self.path = path
        self.fmt = fmt
        if output_mode is not None and output_mode.lower() != "append":
            raise file_sink_output_mode_error(fmt, output_mode)
        skip = {"path", "checkpointlocation", "queryname"}
        # an option set to None reaches Spark's writer as null, as PySpark passes it
        self.options = {str(k): (None if v is None else str(v)) for k, v in (options or {}).items() if str(k).lower() not in skip}
        self.partition_by = list(partition_by or [])
        self._out = CheckpointFileManager(path)
        self._out.mkdirs()
        # Creating the log directory up front makes readers use the (empty) log from the start
        # instead of listing half-written files of the first batch.
        self.log = FileStreamSinkLog(self._out.uri(METADATA_DIR), **log_settings(spark, "fileSink"))
        self._cleanup_staging()
        self._last_rows = -1

    def on_query_start(self, checkpoint_location: str, plan: Any) -> None:
        """Check the sink's log before the first batch, so that a damaged one stops ``start()``
        naming the file instead of leaving output that readers cannot see or read: every live
        entry must parse and be there, and a log that has entries must reach the checkpoint's
        last committed batch (each batch's entry is written before its commit)."""
        from statestream.checkpoint.commits import CommitLog

        self.log.all_entries()
        latest = self.log.latest_batch_id()
        committed = CommitLog(CheckpointFileManager(checkpoint_location).child("commits")).get_latest_batch_id()
        if latest is not None and committed is not None and latest < committed:
            missing = self.log.files.display(self.log._name(latest + 1))  # noqa: SLF001
            raise file_sink_log_behind_error(self.log.files.display(), latest, checkpoint_location, committed, missing)

    def _spark_path(self, rel: str = "") -> str:
        if _is_remote(self.path):
            return self.path.rstrip("/") + ("/" + rel if rel else "")
        return self._out.path(rel)

    def _cleanup_staging(self) -> None:
        # CheckpointFileManager.list() hides dot-files, so the directory is scanned directly.
        sel = pafs.FileSelector(self._out.path(), allow_not_found=True, recursive=False)
        for info in self._out.fs.get_file_info(sel):
            if info.base_name.startswith(_STAGING_PREFIX) and info.type == pafs.FileType.Directory:
                logger.info("removing leftover staging directory %s", info.path)
                self._out.fs.delete_dir(info.path)

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        if output_mode.lower() != "append":
            raise file_sink_output_mode_error(self.fmt, output_mode)
        latest = self.log.latest_batch_id()
        if latest is not None and batch_id <= latest:
            logger.info("Skipping already committed batch %d (file sink log is at %d)", batch_id, latest)
            self._last_rows = -1
            return
        staging_rel = f"{_STAGING_PREFIX}{batch_id}-{uuid.uuid4().hex}"
        writer = df.write.format(self.fmt).options(**self.options).mode("errorifexists")
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        try:
            # inside: a failed job's staging directory goes too (a batch run again after a lost
            # block writes to a staging directory of its own)
            writer.save(self._spark_path(staging_rel))
            entries = self._publish(staging_rel)
            crash_point("sink_files_published", batch_id)
            if not self.log.add(batch_id, entries):
                raise file_sink_concurrent_update_error(batch_id, self.log.files.display(str(batch_id)))
        finally:
            self._out.delete(staging_rel)
        logger.info("file sink committed batch %d with %d file(s)", batch_id, len(entries))

    def _publish(self, staging_rel: str) -> list[dict[str, Any]]:
        """Move the finished job's data files next to the earlier batches and describe them."""
        fs = self._out.fs
        staging = self._out.path(staging_rel)
        sel = pafs.FileSelector(staging, allow_not_found=True, recursive=True)
        entries: list[dict[str, Any]] = []
        for info in sorted(fs.get_file_info(sel), key=lambda i: i.path):
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(staging) :].lstrip("/")
            if any(_is_hidden(part) for part in rel.split("/")):
                continue
            target_rel = rel
            target = self._out.path(target_rel)
            fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            fs.move(info.path, target)
            moved = fs.get_file_info(target)
            mtime_ms = int(moved.mtime_ns // 1_000_000) if moved.mtime_ns is not None else 0
            entries.append(
                {
                    "path": path_to_uri(self._spark_path(target_rel)),
                    "size": int(moved.size or 0),
                    "isDir": False,
                    "modificationTime": mtime_ms,
                    "blockReplication": _LOCAL_BLOCK_REPLICATION,
                    "blockSize": _LOCAL_BLOCK_SIZE,
                    "action": "add",
                }
            )
        return entries

    def num_output_rows(self) -> int:
        return -1  # a V1 sink in Spark: the count is unknown

    def description(self) -> str:
        return f"FileSink[{qualified_path(self.path)}]"

    def committed_files(self) -> list[str]:
        """Paths (URIs) of all files the log lists: what a reader of ``path`` will read."""
        return [e["path"] for e in self.log.all_entries()]
