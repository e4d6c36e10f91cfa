"""The file source: new files in a directory become the rows of the next micro-batch.

Spark: ``FileStreamSource``, ``FileStreamSourceLog``, ``FileStreamSourceOffset``. What is
mirrored:

* A user schema is required (Spark's ``IllegalArgumentException`` text otherwise), except for
  ``text`` (always ``value STRING``) and when ``spark.sql.streaming.schemaInference`` is true:
  then the schema is inferred from the files already there, partition columns included.
* Each ``latest_offset`` call lists the directory (recursively, skipping hidden ``_``/``.``
  names), keeps files it has not seen, orders them by modification time (ties by path; newest
  first with ``latestFirst``), takes at most ``ReadLimit.max_files`` of them (with
  ``maxBytesPerTrigger``: the first one, then more while their total size stays within the limit),
  and records them as the next entry of its own log in ``metadata_dir``: a ``v1`` line then one
  ``{"path","timestamp","batchId"}`` JSON per file, compacted every 10 entries like Spark's. The
  offset is ``{"logOffset": N}``, the newest log entry.
* A restart rebuilds the set of seen files from that log, so no file is read twice.
* ``get_batch(start, end)`` reads exactly the files of log entries ``start+1 .. end`` with
  ``spark.read.schema(schema).format(fmt).options(...).load(files)``.
* If the directory is the output of a file sink (it has ``_spark_metadata``), the sink's log is
  the list of files, as in Spark.
* ``maxFileAge`` (default 7d) bounds the seen-file map; ``fileNameOnly`` compares by name only.
* ``pathGlobFilter`` keeps only files whose name matches the glob; ``key=value`` directories
  become partition columns (the batch reader infers them below ``basePath``), unless
  ``recursiveFileLookup`` is set.
* ``cleanSource``: ``archive`` (to ``sourceArchiveDir``, keeping the file's full path below it) or
  ``delete``: the files of a batch are moved/removed when the source is told that batch is
  committed (Spark does that when it plans the *next* batch). Failures are logged, not raised.
  Invalid values fail the query when it starts, with Spark's texts.

* With ``maxFilesPerTrigger``/``maxBytesPerTrigger``, the files listed but not taken are kept
  (at most ``maxCachedFiles``) and used before the directory is listed again, as long as at
  least ``discardCachedInputRatio`` of the limit is left (Spark's unread-file cache).
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

from statestream.checkpoint.file_stream_log import (
    METADATA_DIR,
    CompactibleFileStreamLog,
    FileStreamSinkLog,
    is_hidden_file,
    is_remote_path,
    path_to_uri,
    qualified_path,
    uri_to_path,
)
from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import (
    StatestreamArithmeticException,
    StatestreamIllegalArgumentException,
    StatestreamUnsupportedOperationException,
    archive_dir_matches_source_error,
    archive_dir_other_file_system_error,
    archive_dir_required_error,
    clean_source_mode_error,
    file_source_boolean_option_error,
    file_source_concurrent_update_error,
    file_source_invalid_batch_error,
    file_source_log_behind_error,
    file_source_log_entry_missing_error,
    file_source_positive_option_error,
    max_files_and_bytes_per_trigger_error,
    path_not_found_error,
    schema_required_error,
    source_path_not_specified_error,
)
from statestream._jvm.calls import java_session, jvm_view, quiet_jvm_logger, static_member
from statestream.sources.base import ReadLimit, Source, empty_batch
from statestream.sources.options import log_settings, time_string_as_ms

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
    "parse_schema",
]

logger = logging.getLogger(__name__)

#: Options the source consumes itself (lower-case); everything else goes to the batch reader too.
_SOURCE_OPTIONS = {
    "maxfilespertrigger",
    "maxbytespertrigger",
    "latestfirst",
    "maxfileage",
    "filenameonly",
    "cleansource",
    "sourcearchivedir",
    "path",
}

#: Spark's ``spark.sql.streaming.schemaInference``.
SCHEMA_INFERENCE_CONF = "spark.sql.streaming.schemaInference"

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


def _require_existing_path(path: str) -> None:
    """Spark's PATH_NOT_FOUND for a source directory that does not exist (checked at load())."""
    if not CheckpointFileManager(FileStreamSource._spark_path(path)).exists():  # noqa: SLF001 - the source's own path rule, shared with this check
        shown = path.partition("?")[0]  # as given (Spark's text); a URI's query may hold credentials
        raise path_not_found_error(shown)


def _bool_option(opts: Mapping[str, Any], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise file_source_boolean_option_error(raw, name)


def _positive_option(opts: Mapping[str, Any], name: str) -> int | None:
    """``maxFilesPerTrigger``/``maxBytesPerTrigger``: absent, or a positive integer (Spark's text)."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise file_source_positive_option_error(raw, name)
    return value


def glob_match(pattern: str, name: str) -> bool:
    """Hadoop's ``GlobFilter`` on a file name: ``*``, ``?``, ``[...]`` (``[^...]`` negated) and
    ``{a,b}`` alternatives; a backslash escapes."""
    return re.fullmatch(_glob_regex(pattern), name, flags=re.DOTALL) is not None


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    i, depth = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and pattern.find("]", i + 1) > i:
            j = pattern.find("]", i + 1)
            body = pattern[i + 1 : j]
            if body[:1] in ("^", "!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _is_partition_dir(name: str) -> bool:
    """A ``key=value`` directory name, which Spark's partition discovery reads as a column."""
    key, eq, _ = name.partition("=")
    return bool(eq) and bool(key)


def _archive_matches_source(source: str, archive: str) -> bool:
    """Spark's check that archived files could be listed again: both paths' components up to the
    smaller depth, each archive component matched against the source's as a glob."""
    src = [p for p in source.split("/") if p]
    arc = [p for p in archive.split("/") if p]
    depth = min(len(src), len(arc))
    return all(glob_match(s, a) for s, a in zip(src[:depth], arc[:depth]))


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

    admission_controlled = True

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
        # an option set to None is null in Spark's options map: the source's own options then
        # read it as the text "null" (Spark: "Invalid value 'null' for option ..."), the batch
        # reader gets it as null (PySpark passes None through)
        opts = {k.lower(): ("null" if v is None and k.lower() not in ("path", "pathglobfilter") else v) for k, v in raw_opts.items()}
        parsed = parse_schema(schema)
        infer = fmt == "text" or (
            spark is not None and str(spark.conf.get(SCHEMA_INFERENCE_CONF, "false")).strip().lower() == "true"
        )
        # Spark's order at load() (DataSource.sourceSchema): a path given, existing unless it
        # is a glob (which may only match once upstream writes), then a schema
        path = path if path is not None else opts.get("path")
        if not path:
            raise source_path_not_specified_error()
        if metadata_dir is None and not self._is_glob(str(path)):
            _require_existing_path(str(path))
        if parsed is None and not infer:
            raise schema_required_error()
        self.path = str(path)
        self.fmt = fmt
        if parsed is None and fmt != "text":
            parsed = self._infer_schema(spark, raw_opts)
        else:
            parsed = self._with_partition_columns(spark, parsed or self._text_schema(), raw_opts)
        self._schema = parsed
        #: (the session, the schema's JSON, the JVM's StructType) of the last batch's reader
        self._jvm_schema: tuple[Any, str, Any] | None = None
        # Spark checks the source's own options when the query starts (FileStreamOptions), not at
        # load(): a source built only to give the DataFrame its schema (no metadata_dir) lets
        # invalid values pass and uses the defaults
        starting = metadata_dir is not None

        def checked(parse: Any, default: Any) -> Any:
            try:
                return parse()
            except ValueError:  # StatestreamIllegalArgumentException included
                if starting:
                    raise
                return default

        self.max_files_per_trigger: int | None = checked(lambda: _positive_option(opts, "maxFilesPerTrigger"), None)
        self.max_bytes_per_trigger: int | None = checked(lambda: _positive_option(opts, "maxBytesPerTrigger"), None)
        self.clean_source = "off"
        self.archive_dir: str | None = None
        if starting:
            self._init_clean_source(opts)
        self.path_glob_filter = opts.get("pathglobfilter")
        self.max_cached_files = checked(lambda: int(str(opts.get("maxcachedfiles", 10000)).strip()), 10000)
        self.discard_cached_input_ratio = checked(lambda: float(str(opts.get("discardcachedinputratio", 0.2)).strip()), 0.2)
        self.recursive_file_lookup = _bool_option(opts, "recursivefilelookup", "recursiveFileLookup", False)
        self.latest_first = checked(lambda: _bool_option(opts, "latestfirst", "latestFirst", False), False)
        self.file_name_only = checked(lambda: _bool_option(opts, "filenameonly", "fileNameOnly", False), False)
        max_age = checked(lambda: time_string_as_ms(opts.get("maxfileage", "7d")), 7 * 86_400_000)
        if self.max_files_per_trigger is not None and self.max_bytes_per_trigger is not None and starting:
            raise max_files_and_bytes_per_trigger_error()
        if self.latest_first and (self.max_files_per_trigger is not None or self.max_bytes_per_trigger is not None):
            max_age = 2**63 - 1  # Spark ignores maxFileAge then
        if self.latest_first:
            logger.warning(
                "'latestFirst' is true: new files are processed first, which may affect the watermark; "
                "'maxFileAge' is ignored when maxFilesPerTrigger is set."
            )
        self.reader_options: dict[str, str | None] = {
            k: (None if v is None else str(v)) for k, v in raw_opts.items() if k.lower() != "path"
        }
        if not self._is_glob(self.path):
            self.reader_options.setdefault("basePath", self._spark_path(self.path))
        # Stop the reader from treating '[' or '*' in a listed file name as a glob.
        self.reader_options["__globPaths__"] = "false"

        self._temp_metadata_dir: str | None = None
        if metadata_dir is None:
            metadata_dir = self._temp_metadata_dir = tempfile.mkdtemp(prefix="statestream-filesource-")
            logger.info("file source without checkpoint: seen files kept in %s", metadata_dir)
        self.log = FileStreamSourceLog(metadata_dir, **log_settings(spark, "fileSource"))
        latest = self.log.latest_batch_id()
        self._log_offset = -1 if latest is None else latest
        self.seen_files = SeenFilesMap(max_age, self.file_name_only)
        for entry in self.log.all_entries():
            self.seen_files.add(entry["path"], int(entry["timestamp"]))
        self.seen_files.purge()
        self._available_now_files: list[tuple[str, int]] | None = None
        #: files listed but not taken yet (Spark's unread-file cache), served before listing again
        self._unread: list[tuple[str, int]] | None = None
        #: size in bytes of each listed file (maxBytesPerTrigger)
        self._sizes: dict[str, int] = {}

    def _infer_schema(self, spark: "SparkSession | None", raw_opts: Mapping[str, Any]) -> "StructType":
        """The schema Spark infers when no schema is given: ``value STRING`` for text, otherwise
        what a batch read of the files there now gives (partition columns last), or Spark's
        ``UNABLE_TO_INFER_SCHEMA`` error when there is nothing to infer it from."""
        assert spark is not None
        opts = {k: (None if v is None else str(v)) for k, v in raw_opts.items() if k.lower() not in _SOURCE_OPTIONS}
        return spark.read.format(self.fmt).options(**opts).load(self._spark_path(self.path)).schema

    @staticmethod
    def _text_schema() -> "StructType":
        from pyspark.sql.types import StringType, StructField, StructType

        return StructType([StructField("value", StringType(), True)])

    def _with_partition_columns(
        self, spark: "SparkSession | None", schema: "StructType", raw_opts: Mapping[str, Any]
    ) -> "StructType":
        """Spark adds the partition columns found in the directory when the source is created
        (``key=value`` sub-directories) to a given schema that lacks them."""
        from pyspark.sql.types import StructType

        if spark is None or self._is_glob(self.path):
            return schema
        local = self._spark_path(self.path)
        if not is_remote_path(local) and not os.path.isdir(local):
            return schema
        opts = {k: (None if v is None else str(v)) for k, v in raw_opts.items() if k.lower() not in _SOURCE_OPTIONS}
        try:
            found = spark.read.schema(schema).format(self.fmt).options(**opts).load(local).schema
        except Exception as exc:  # noqa: BLE001 - no listing, no partition columns
            logger.debug("file source %s: no partition columns (%s)", self.path, exc)
            return schema
        names = {f.name.lower() for f in schema.fields}
        extra = [f for f in found.fields if f.name.lower() not in names]
        return StructType(list(schema.fields) + extra) if extra else schema

    def _init_clean_source(self, opts: Mapping[str, Any]) -> None:
        raw = opts.get("cleansource")
        if raw is not None:
            mode = str(raw).strip().lower()
            if mode not in ("archive", "delete", "off"):
                raise clean_source_mode_error(raw)
            self.clean_source = mode
        if self.clean_source == "archive":
            archive = opts.get("sourcearchivedir")
            if archive is None:
                raise archive_dir_required_error()
            archive_path = self._spark_path(str(archive))
            if is_remote_path(self.path) != is_remote_path(archive_path) or (
                is_remote_path(archive_path) and archive_path.split("/", 3)[:3] != self.path.split("/", 3)[:3]
            ):
                raise archive_dir_other_file_system_error(qualified_path(self.path), qualified_path(archive_path))
            if _archive_matches_source(self._spark_path(self.path), archive_path):
                raise archive_dir_matches_source_error()
            self.archive_dir = archive_path

    # -- listing ----------------------------------------------------------------------------------

    @staticmethod
    def _is_glob(path: str) -> bool:
        return any(c in _GLOB_CHARS for c in path)

    @staticmethod
    def _spark_path(path: str) -> str:
        return path if is_remote_path(path) else os.path.abspath(path[5:] if path.startswith("file:") else path)

    def _roots(self) -> list[str]:
        if self._is_glob(self.path) and not is_remote_path(self.path):
            return sorted(_glob.glob(self._spark_path(self.path)))
        return [self.path]

    def _fetch_all_files(self) -> list[tuple[str, int]]:
        """Every candidate file as ``(uri, modification ms)``, in processing order."""
        files: list[tuple[str, int]] = []
        walked: list[tuple[str, int, str | None]] = []
        for root in self._roots():
            mgr = CheckpointFileManager(root)
            if not self._is_glob(self.path) and mgr.exists(METADATA_DIR):
                # The directory is a file sink's output: its log says which files are complete.
                for e in FileStreamSinkLog(mgr.uri(METADATA_DIR)).all_entries():
                    if not e.get("isDir", False):
                        files.append((e["path"], int(e["modificationTime"])))
                continue
            info = mgr.fs.get_file_info(mgr.path())
            if info.type == pafs.FileType.File:
                uri = path_to_uri(self._uri_of(root, info.path))
                self._sizes[uri] = int(info.size or 0)
                files.append((uri, int((info.mtime_ns or 0) // 1_000_000)))
                continue
            if info.type != pafs.FileType.Directory:
                continue
            walked.extend(self._walk(mgr, root))
        # Spark's file index gives the files below sub-directories only when they are partition
        # directories (``key=value``) or with recursiveFileLookup; otherwise the files directly in
        # the path only
        partitioned = any(_is_partition_dir(parent) for _, _, parent in walked if parent is not None)
        files.extend((uri, ts) for uri, ts, parent in walked if parent is None or partitioned or self.recursive_file_lookup)
        if self.latest_first:
            files.sort(key=lambda f: (-f[1], f[0]))
        else:
            files.sort(key=lambda f: (f[1], f[0]))
        return files

    def _uri_of(self, root: str, fs_path: str) -> str:
        if is_remote_path(root):
            scheme = root.split("://", 1)[0]
            return f"{scheme}://{fs_path}"
        return fs_path

    def _walk(self, mgr: CheckpointFileManager, root: str) -> list[tuple[str, int, str | None]]:
        """Files below ``root`` as ``(uri, modification ms, name of the parent directory or None
        for a file directly in root)``."""
        out: list[tuple[str, int, str | None]] = []
        top = mgr.path()
        pending = [top]
        while pending:
            d = pending.pop()
            for info in mgr.fs.get_file_info(pafs.FileSelector(d, allow_not_found=True, recursive=False)):
                if is_hidden_file(info.base_name):
                    continue
                if info.type == pafs.FileType.Directory:
                    pending.append(info.path)
                elif info.type == pafs.FileType.File:
                    if self.path_glob_filter is not None and not glob_match(str(self.path_glob_filter), info.base_name):
                        continue
                    uri = path_to_uri(self._uri_of(root, info.path))
                    self._sizes[uri] = int(info.size or 0)
                    parent = None if d == top else d.rstrip("/").rsplit("/", 1)[-1]
                    out.append((uri, int((info.mtime_ns or 0) // 1_000_000), parent))
        return out

    # -- Source contract --------------------------------------------------------------------------

    @property
    def schema(self) -> "StructType":
        return self._schema

    @property
    def short_name(self) -> str:  # type: ignore[override]
        return f"FileSource[{self.path}]"

    def fix_schema(self, schema: "StructType") -> None:
        """Use the schema the DataFrame got at ``load()`` (inferred columns, partition columns found
        then), as Spark does, rather than what the directory holds when the query starts."""
        self._schema = schema

    def default_read_limit(self) -> ReadLimit:
        if self.max_files_per_trigger is not None:
            return ReadLimit(max_files=self.max_files_per_trigger)
        if self.max_bytes_per_trigger is not None:
            return ReadLimit(max_bytes=self.max_bytes_per_trigger)
        return ReadLimit.ALL_AVAILABLE

    def prepare_for_trigger_available_now(self) -> None:
        """Fix the files of this availableNow run: later arrivals wait for the next run."""
        self._available_now_files = self._fetch_all_files()

    def latest_offset(self, start: Any, limit: ReadLimit) -> dict[str, int] | None:
        """Admit up to ``limit.max_files`` unseen files as a new log entry; the offset is the
        newest entry (``None`` while no file was ever seen).

        Files listed but left out by the limit are kept (Spark's unread-file cache) and served
        before the directory is listed again, unless fewer than ``discardCachedInputRatio`` of
        the limit are left (files, or bytes with ``maxBytesPerTrigger``); not with
        ``latestFirst`` or ``availableNow``.

        A log that ends below ``start`` (the offset the query's offset log has reached) lost
        its last entries: the files they held would be read again as new, so it is an error
        naming the missing file."""
        reached = self._log_offset_of(start)
        if reached > self._log_offset:
            missing = self.log.files.display(self.log._name(self._log_offset + 1))  # noqa: SLF001
            raise file_source_log_behind_error(self.log.files.display(), self._log_offset, reached, missing)
        if self._unread:
            candidates = self._unread
        else:
            listed = self._available_now_files if self._available_now_files is not None else self._fetch_all_files()
            candidates = [(p, ts) for p, ts in listed if self.seen_files.is_new_file(p, ts)]
        should_cache = not self.latest_first and self._available_now_files is None
        unread: list[tuple[str, int]] | None = None
        max_bytes = getattr(limit, "max_bytes", None) if limit is not None else None
        if limit is not None and limit.max_files is not None:
            new_files, rest = candidates[: limit.max_files], candidates[limit.max_files :]
            if should_cache and len(rest) >= limit.max_files * self.discard_cached_input_ratio:
                unread = rest
        elif max_bytes is not None:
            new_files = self._take_until_bytes(candidates, int(max_bytes))
            rest = candidates[len(new_files) :]
            rest_bytes = sum(self._sizes.get(p, 0) for p, _ in rest)
            if should_cache and rest_bytes >= int(max_bytes) * self.discard_cached_input_ratio:
                unread = rest
        else:
            new_files = candidates
        self._unread = unread[: self.max_cached_files] if unread and self.max_cached_files > 0 else None
        for p, ts in new_files:
            self.seen_files.add(p, ts)
        self.seen_files.purge()
        if new_files:
            batch = self._log_offset + 1
            entries = [{"path": p, "timestamp": ts, "batchId": batch} for p, ts in new_files]
            if not self.log.add(batch, entries):
                raise file_source_concurrent_update_error(batch, self.log.files.display(str(batch)))
            self._log_offset = batch
            logger.info("Log offset set to %d with %d new files", batch, len(new_files))
        return None if self._log_offset < 0 else {"logOffset": self._log_offset}

    def _take_until_bytes(self, files: list[tuple[str, int]], max_bytes: int) -> list[tuple[str, int]]:
        """The first file always, then files while the running total stays within ``max_bytes``;
        the first file that does not fit ends the batch."""
        taken: list[tuple[str, int]] = []
        total = 0
        for f in files:
            size = self._sizes.get(f[0], 0)
            if taken and total + size > max_bytes:
                break
            taken.append(f)
            total += size
        return taken

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
                raise file_source_log_entry_missing_error(self.log.files.display(str(b)))
            out.extend(e["path"] for e in entries)
        return out

    def get_batch(self, spark: "SparkSession", start: Any, end: Any) -> "DataFrame":
        files = self.files_between(start, end)
        logger.info("Processing %d files from %s:%s", len(files), self._log_offset_of(start) + 1, self._log_offset_of(end))
        if not files:
            return empty_batch(spark, self._schema)
        paths = [uri_to_path(f) for f in files]
        df = self._read_files(spark, paths)
        if not any("=" in p for p in paths):
            # no directory can be a partition (``key=value``): the batch has the schema's columns
            return df
        want = [f.name for f in self._schema.fields]
        got = [f.name for f in df.schema.fields]
        if got != want:
            if sorted(got) != sorted(want):
                # partition directories that were not there when the source was created: Spark's
                # assertion on the batch's attributes
                raise file_source_invalid_batch_error(want, got)
            df = df.select(*want)
        return df

    def empty_relation(self, spark: "SparkSession") -> "DataFrame":
        """The reader over no files: a file relation with no rows, which Spark's optimizer does
        not fold away as it folds an empty local relation (the state tasks of a batch without
        new files must still run), and which schedules no scan task. (Spark's reader warns
        that "all paths were ignored" over no paths, which Spark's engine never asks for: that
        warning is silenced for this one call.)"""
        with quiet_jvm_logger(spark, "org.apache.spark.sql.execution.datasources.DataSource"):
            return self._read_files(spark, [])

    def _read_files(self, spark: "SparkSession", paths: list[str]) -> "DataFrame":
        """``spark.read.schema(...).format(...).options(...).load(paths)``, made on the JVM's
        reader directly with the schema parsed once: PySpark's reader finds the active session
        and parses the schema again on every call, some twenty Py4J round trips a batch."""
        from pyspark.sql import DataFrame

        jsession = java_session(spark)
        text = self._schema.json()
        cached = self._jvm_schema
        if cached is None or cached[0] is not jsession or cached[1] != text:
            cached = self._jvm_schema = (jsession, text, jsession.parseDataType(text))
        jreader = jsession.read().schema(cached[2]).format(self.fmt)
        for key, value in self.reader_options.items():
            jreader = jreader.option(key, value)
        if len(paths) == 1:
            jdf = jreader.load(paths[0])
        else:
            jdf = jreader.load(static_member(jvm_view(spark), "org.apache.spark.api.python.PythonUtils", "toSeq")(paths))
        return DataFrame(jdf, spark)

    def commit(self, end: Any) -> None:
        """``cleanSource``: archive or delete the files of log entry ``end`` (only those: earlier
        entries were cleaned when they were committed)."""
        if self.clean_source == "off":
            return
        batch = self._log_offset_of(end)
        if batch < 0:
            return
        for entry in self.log.batch_entries(batch) or []:
            self._clean(entry["path"])

    def _clean(self, uri: str) -> None:
        local = uri_to_path(uri)
        mgr = CheckpointFileManager(local)
        fs, path = mgr.fs, mgr.path()
        verb = "remove" if self.clean_source == "delete" else "move"
        try:
            if self.clean_source == "delete":
                logger.debug("Removing completed file %s", uri)
                fs.delete_file(path)
                return
            assert self.archive_dir is not None
            # the archived file keeps its whole path below the archive directory
            target = CheckpointFileManager(self.archive_dir.rstrip("/") + "/" + path.lstrip("/"))
            fs.create_dir(target.path().rsplit("/", 1)[0], recursive=True)
            logger.debug("Archiving completed file %s to %s", uri, target.path())
            fs.move(path, target.path())
        except OSError as exc:
            logger.warning("Fail to %s %s / skip %s file: %s", verb, uri, "removing" if verb == "remove" else "moving", exc)

    def stop(self) -> None:
        """Remove the temporary seen-file log of a source created without a checkpoint."""
        if self._temp_metadata_dir is not None:
            import shutil

            shutil.rmtree(self._temp_metadata_dir, ignore_errors=True)
            self._temp_metadata_dir = None

    def description(self) -> str:
        return f"FileStreamSource[{qualified_path(self.path)}]"
