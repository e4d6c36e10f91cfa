"""The file source: new files in a directory become the rows of the next micro-batch.

Spark: ``FileStreamSource``, ``FileStreamSourceLog``, ``FileStreamSourceOffset``. What is
mirrored:

* A user schema is required (Spark's ``IllegalArgumentException`` text otherwise).
* Each ``latest_offset`` call lists the directory (recursively, skipping hidden ``_``/``.``
  names), keeps files it has not seen, orders them by modification time (ties by path; newest
  first with ``latestFirst``), takes at most ``ReadLimit.max_files`` of them, and records them as
  the next entry of its own log in ``metadata_dir``: a ``v1`` line then one
  ``{"path","timestamp","batchId"}`` JSON per file, compacted every 10 entries like Spark's. The
  offset is ``{"logOffset": N}``, the newest log entry.
* A restart rebuilds the set of seen files from that log, so no file is read twice.
* ``get_batch(start, end)`` reads exactly the files of log entries ``start+1 .. end`` with
  ``spark.read.schema(schema).format(fmt).options(...).load(files)``.
* If the directory is the output of a file sink (it has ``_spark_metadata``), the sink's log is
  the list of files, as in Spark.
* ``maxFileAge`` (default 7d) bounds the seen-file map; ``fileNameOnly`` compares by name only.

Not mirrored: the unread-file cache (``maxCachedFiles``/``discardCachedInputRatio``), the
``maxBytesPerTrigger`` limit and ``cleanSource``/``sourceArchiveDir``.
"""

from __future__ import annotations

import glob as _glob
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import (
    StatestreamArithmeticException,
    StatestreamError,
    StatestreamIllegalArgumentException,
    StatestreamUnsupportedOperationException,
)
from statestream.sinks.files import (
    METADATA_DIR,
    CompactibleFileStreamLog,
    FileStreamSinkLog,
    _is_hidden,
    _is_remote,
    path_to_uri,
    qualified_path,
    uri_to_path,
)
from statestream.sources.base import ReadLimit, Source, empty_batch
from statestream.sources.options import TIME_SUFFIX_MS, arithmetic_error, illegal_argument, unsupported_operation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "FileStreamSource",
    "FileStreamSourceLog",
    "SeenFilesMap",
    "StatestreamIllegalArgumentException",
    "StatestreamUnsupportedOperationException",
    "StatestreamArithmeticException",
    "illegal_argument",
    "unsupported_operation",
    "arithmetic_error",
    "SCHEMA_REQUIRED_MESSAGE",
    "parse_schema",
]

logger = logging.getLogger(__name__)

SCHEMA_REQUIRED_MESSAGE = (
    "Schema must be specified when creating a streaming source DataFrame. If some files already "
    "exist in the directory, then depending on the file format you may be able to create a static "
    "DataFrame on that directory with 'spark.read.load(directory)' and infer schema from it."
)

#: Options the source consumes itself (lower-case); everything else goes to the batch reader too.
_SOURCE_OPTIONS = {"maxfilespertrigger", "latestfirst", "maxfileage", "filenameonly", "path"}

_GLOB_CHARS = set("*?[{")


# -- helpers --------------------------------------------------------------------------------------


def parse_schema(schema: "StructType | str | None") -> "StructType | None":
    """A ``StructType`` from a ``StructType`` or a DDL string (``"a INT, b STRING"``)."""
    if schema is None:
        return None
    from pyspark.sql.types import StructType, _parse_datatype_string

    if isinstance(schema, StructType):
        return schema
    parsed = _parse_datatype_string(str(schema))
    if not isinstance(parsed, StructType):
        from pyspark.sql.types import StructField

        parsed = StructType([StructField("value", parsed, True)])
    return parsed


def _bool_option(opts: Mapping[str, Any], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise illegal_argument(f"Invalid value '{raw}' for option '{name}', must be 'true' or 'false'")


def _time_string_as_ms(text: str) -> int:
    m = re.fullmatch(r"\s*(-?[0-9]+)\s*([a-z]+)?\s*", str(text).lower())
    if m is None or (m.group(2) is not None and m.group(2) not in TIME_SUFFIX_MS):
        raise ValueError(f"Failed to parse time string: {text}")
    return int(int(m.group(1)) * TIME_SUFFIX_MS[m.group(2) or "ms"])


@dataclass
class SeenFilesMap:
    """Files already taken into a batch, with the time-based purge of Spark's ``SeenFilesMap``.

    A file is new if it is not in the map and not older than the last purge threshold
    (``newest timestamp - maxFileAge``), so the map stays bounded on long-running queries.
    """

    max_age_ms: int
    file_name_only: bool = False

    def __post_init__(self) -> None:
        self._map: dict[str, int] = {}
        self._latest = 0
        self._last_purge = 0

    def _key(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[-1] if self.file_name_only else path

    def add(self, path: str, timestamp: int) -> None:
        self._map[self._key(path)] = timestamp
        self._latest = max(self._latest, timestamp)

    def is_new_file(self, path: str, timestamp: int) -> bool:
        return timestamp >= self._last_purge and self._key(path) not in self._map

    def purge(self) -> int:
        self._last_purge = self._latest - self.max_age_ms
        old = [k for k, ts in self._map.items() if ts < self._last_purge]
        for k in old:
            del self._map[k]
        return len(old)

    def __len__(self) -> int:
        return len(self._map)


class FileStreamSourceLog(CompactibleFileStreamLog):
    """``<checkpoint>/sources/<i>``: Spark's ``FileStreamSourceLog`` (version 1)."""

    key_order = ("path", "timestamp", "batchId")

    def batch_entries(self, batch_id: int) -> list[dict[str, Any]] | None:
        """Entries that belong to ``batch_id``; a compact file holds earlier batches too, which
        is why every entry carries its ``batchId``."""
        entries = self.get(batch_id)
        if entries is None:
            return None
        return [e for e in entries if int(e.get("batchId", batch_id)) == batch_id]


# -- the source -----------------------------------------------------------------------------------


class FileStreamSource(Source):
    """Reads files that appear in ``path`` as a stream.

    Parameters
    ----------
    spark:
        The session used for conf look-ups (log compaction interval).
    path:
        Directory (or local glob) to watch; ``options["path"]`` is used when it is ``None``.
    fmt:
        ``parquet``, ``json``, ``csv``, ``orc``, ``text``, ...: any batch reader format.
    schema:
        Required, ``StructType`` or DDL string.
    options:
        Source options ``maxFilesPerTrigger``, ``latestFirst``, ``maxFileAge``,
        ``fileNameOnly`` (case-insensitive); all options except ``path`` also go to the reader
        (``header``, ``sep``, ``multiLine``, ...).
    metadata_dir:
        ``<checkpoint>/sources/<i>``; without one a temporary directory is used (no recovery).

    Raises
    ------
    IllegalArgumentException
        No schema, no path, or an invalid option value (Spark's texts).
    """

    def __init__(
        self,
        spark: "SparkSession | None",
        path: str | None,
        fmt: str,
        schema: "StructType | str | None",
        options: Mapping[str, Any] | None = None,
        metadata_dir: str | None = None,
    ) -> None:
        raw_opts = {str(k): v for k, v in (options or {}).items()}
        opts = {k.lower(): v for k, v in raw_opts.items()}
        parsed = parse_schema(schema)
        if parsed is None:
            raise illegal_argument(SCHEMA_REQUIRED_MESSAGE)
        path = path if path is not None else opts.get("path")
        if not path:
            raise illegal_argument("'path' is not specified.")
        self.path = str(path)
        self.fmt = fmt
        self._schema = parsed
        self.max_files_per_trigger: int | None = None
        if opts.get("maxfilespertrigger") is not None:
            raw = opts["maxfilespertrigger"]
            try:
                value = int(str(raw).strip())
            except ValueError:
                value = 0
            if value <= 0:
                raise illegal_argument(f"Invalid value '{raw}' for option 'maxFilesPerTrigger', must be a positive integer")
            self.max_files_per_trigger = value
        self.latest_first = _bool_option(opts, "latestfirst", "latestFirst", False)
        self.file_name_only = _bool_option(opts, "filenameonly", "fileNameOnly", False)
        max_age = _time_string_as_ms(opts.get("maxfileage", "7d"))
        if self.latest_first and self.max_files_per_trigger is not None:
            max_age = 2**63 - 1  # Spark ignores maxFileAge then
        if self.latest_first:
            logger.warning(
                "'latestFirst' is true: new files are processed first, which may affect the watermark; "
                "'maxFileAge' is ignored when maxFilesPerTrigger is set."
            )
        self.reader_options: dict[str, str] = {
            k: str(v) for k, v in raw_opts.items() if k.lower() != "path"
        }
        if not self._is_glob(self.path):
            self.reader_options.setdefault("basePath", self._spark_path(self.path))
        # Stop the reader from treating '[' or '*' in a listed file name as a glob.
        self.reader_options["__globPaths__"] = "false"

        interval = 10
        if spark is not None:
            interval = int(spark.conf.get("spark.sql.streaming.fileSource.log.compactInterval", "10") or 10)
        self._temp_metadata_dir: str | None = None
        if metadata_dir is None:
            metadata_dir = self._temp_metadata_dir = tempfile.mkdtemp(prefix="statestream-filesource-")
            logger.info("file source without checkpoint: seen files kept in %s", metadata_dir)
        self.log = FileStreamSourceLog(metadata_dir, default_compact_interval=interval)
        latest = self.log.latest_batch_id()
        self._log_offset = -1 if latest is None else latest
        self.seen_files = SeenFilesMap(max_age, self.file_name_only)
        for entry in self.log.all_entries():
            self.seen_files.add(entry["path"], int(entry["timestamp"]))
        self.seen_files.purge()
        self._available_now_files: list[tuple[str, int]] | None = None

    # -- listing ----------------------------------------------------------------------------------

    @staticmethod
    def _is_glob(path: str) -> bool:
        return any(c in _GLOB_CHARS for c in path)

    @staticmethod
    def _spark_path(path: str) -> str:
        return path if _is_remote(path) else os.path.abspath(path[5:] if path.startswith("file:") else path)

    def _roots(self) -> list[str]:
        if self._is_glob(self.path) and not _is_remote(self.path):
            return sorted(_glob.glob(self._spark_path(self.path)))
        return [self.path]

    def _fetch_all_files(self) -> list[tuple[str, int]]:
        """Every candidate file as ``(uri, modification ms)``, in processing order."""
        files: list[tuple[str, int]] = []
        for root in self._roots():
            mgr = CheckpointFileManager(root)
            if not self._is_glob(self.path) and mgr.exists(METADATA_DIR):
                # The directory is a file sink's output: its log says which files are complete.
                for e in FileStreamSinkLog(mgr.path(METADATA_DIR)).all_entries():
                    if not e.get("isDir", False):
                        files.append((e["path"], int(e["modificationTime"])))
                continue
            info = mgr.fs.get_file_info(mgr.path())
            if info.type == pafs.FileType.File:
                files.append((path_to_uri(self._uri_of(root, info.path)), int((info.mtime_ns or 0) // 1_000_000)))
                continue
            if info.type != pafs.FileType.Directory:
                continue
            files.extend(self._walk(mgr, root))
        if self.latest_first:
            files.sort(key=lambda f: (-f[1], f[0]))
        else:
            files.sort(key=lambda f: (f[1], f[0]))
        return files

    def _uri_of(self, root: str, fs_path: str) -> str:
        if _is_remote(root):
            scheme = root.split("://", 1)[0]
            return f"{scheme}://{fs_path}"
        return fs_path

    def _walk(self, mgr: CheckpointFileManager, root: str) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        pending = [mgr.path()]
        while pending:
            d = pending.pop()
            for info in mgr.fs.get_file_info(pafs.FileSelector(d, allow_not_found=True, recursive=False)):
                if _is_hidden(info.base_name):
                    continue
                if info.type == pafs.FileType.Directory:
                    pending.append(info.path)
                elif info.type == pafs.FileType.File:
                    out.append((path_to_uri(self._uri_of(root, info.path)), int((info.mtime_ns or 0) // 1_000_000)))
        return out

    # -- Source contract --------------------------------------------------------------------------

    @property
    def schema(self) -> "StructType":
        return self._schema

    @property
    def short_name(self) -> str:  # type: ignore[override]
        return f"FileSource[{self.path}]"

    def default_read_limit(self) -> ReadLimit:
        if self.max_files_per_trigger is not None:
            return ReadLimit(max_files=self.max_files_per_trigger)
        return ReadLimit.ALL_AVAILABLE

    def prepare_for_trigger_available_now(self) -> None:
        """Fix the files of this availableNow run: later arrivals wait for the next run."""
        self._available_now_files = self._fetch_all_files()

    def latest_offset(self, start: Any, limit: ReadLimit) -> dict[str, int] | None:
        """Admit up to ``limit.max_files`` unseen files as a new log entry; the offset is the
        newest entry (``None`` while no file was ever seen)."""
        candidates = self._available_now_files if self._available_now_files is not None else self._fetch_all_files()
        new_files = [(p, ts) for p, ts in candidates if self.seen_files.is_new_file(p, ts)]
        if limit is not None and limit.max_files is not None:
            new_files = new_files[: limit.max_files]
        for p, ts in new_files:
            self.seen_files.add(p, ts)
        self.seen_files.purge()
        if new_files:
            batch = self._log_offset + 1
            entries = [{"path": p, "timestamp": ts, "batchId": batch} for p, ts in new_files]
            if not self.log.add(batch, entries):
                raise StatestreamError(
                    f"Concurrent update to the log. Multiple streaming jobs detected for {batch} "
                    f"({self.log.files.display(str(batch))})"
                )
            self._log_offset = batch
            logger.info("Log offset set to %d with %d new files", batch, len(new_files))
        return None if self._log_offset < 0 else {"logOffset": self._log_offset}

    @staticmethod
    def _log_offset_of(offset: Any) -> int:
        if offset is None:
            return -1
        if isinstance(offset, Mapping):
            return int(offset["logOffset"])
        return int(offset)

    def files_between(self, start: Any, end: Any) -> list[str]:
        """URIs of the files of log entries ``start+1 .. end``."""
        lo = self._log_offset_of(start)
        hi = self._log_offset_of(end)
        if lo > hi:
            raise AssertionError(f"start offset {lo} > end offset {hi}")
        out: list[str] = []
        for b in range(lo + 1, hi + 1):
            entries = self.log.batch_entries(b)
            if entries is None:
                raise StatestreamError(f"file source log entry {self.log.files.display(str(b))} is missing")
            out.extend(e["path"] for e in entries)
        return out

    def get_batch(self, spark: "SparkSession", start: Any, end: Any) -> "DataFrame":
        files = self.files_between(start, end)
        logger.info("Processing %d files from %s:%s", len(files), self._log_offset_of(start) + 1, self._log_offset_of(end))
        if not files:
            return empty_batch(spark, self._schema)
        reader = spark.read.schema(self._schema).format(self.fmt).options(**self.reader_options)
        return reader.load([uri_to_path(f) for f in files])

    def stop(self) -> None:
        """Remove the temporary seen-file log of a source created without a checkpoint."""
        if self._temp_metadata_dir is not None:
            import shutil

            shutil.rmtree(self._temp_metadata_dir, ignore_errors=True)
            self._temp_metadata_dir = None

    def description(self) -> str:
        return f"FileStreamSource[{qualified_path(self.path)}]"
