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

import logging
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pyarrow.fs as pafs

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.file_stream_log import (
    METADATA_DIR,
    FileStreamSinkLog,
    is_hidden_file,
    is_remote_path,
    path_to_uri,
    qualified_path,
)
from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import file_sink_concurrent_update_error, file_sink_log_behind_error, file_sink_output_mode_error
from statestream.faults import crash_point
from statestream.sinks.base import Sink
from statestream.sources.options import log_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FileStreamSink"]

logger = logging.getLogger(__name__)

_STAGING_PREFIX = ".statestream-staging-"

#: Hadoop's local file system reports these for every file (replication 1, 32 MB blocks).
_LOCAL_BLOCK_REPLICATION = 1
_LOCAL_BLOCK_SIZE = 33554432

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
        self.log.all_entries()
        latest = self.log.latest_batch_id()
        committed = CommitLog(CheckpointFileManager(checkpoint_location).child("commits")).get_latest_batch_id()
        if latest is not None and committed is not None and latest < committed:
            missing = self.log.files.display(self.log._name(latest + 1))  # noqa: SLF001
            raise file_sink_log_behind_error(self.log.files.display(), latest, checkpoint_location, committed, missing)

    def _spark_path(self, rel: str = "") -> str:
        if is_remote_path(self.path):
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
            if any(is_hidden_file(part) for part in rel.split("/")):
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
