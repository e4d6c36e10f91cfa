"""The commit log (``<checkpoint>/commits/<N>``).

Spark: ``CommitLog`` / ``CommitMetadata``. ``commits/<N>`` is written after batch N's sink write
and marks the batch as finished: on restart a batch with an offset entry but no commit entry is run
again (spark-semantics §7.5). It also carries the global watermark G computed from batch N's data,
which becomes ``wm(N+1)``; without it a restart would lose the watermark progress of the last
batch.

File format (byte-compatible with Spark 4.1, no trailing newline)::

    v1
    {"nextBatchWatermarkMs":15000}

A file with only the version line reads as ``nextBatchWatermarkMs = 0`` (Spark's reader does the
same).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from statestream.checkpoint.log import MetadataLog, parse_log_version, split_lines
from statestream.errors.checkpoint import commit_metadata_corrupt_error, incomplete_commit_log_file_error

__all__ = ["CommitMetadata", "CommitLog"]


@dataclass(frozen=True)
class CommitMetadata:
    """What a committed batch leaves behind: the global watermark after it."""

    next_batch_watermark_ms: int = 0

    def to_json(self) -> str:
        return json.dumps({"nextBatchWatermarkMs": int(self.next_batch_watermark_ms)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "CommitMetadata":
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ValueError(f"commit metadata is not a JSON object: {text!r}")
        value = obj.get("nextBatchWatermarkMs", 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"nextBatchWatermarkMs must be an integer: {text!r}")
        return cls(value)


class CommitLog(MetadataLog[CommitMetadata]):
    """``<checkpoint>/commits``: one :class:`CommitMetadata` per finished batch."""

    VERSION = 1

    def serialize(self, entry: CommitMetadata) -> bytes:
        return f"v{self.VERSION}\n{entry.to_json()}".encode("utf-8")

    def deserialize(self, data: bytes, file: str) -> CommitMetadata:
        lines = split_lines(data, file)
        if not lines:
            raise incomplete_commit_log_file_error(file)
        parse_log_version(lines[0], self.VERSION, file)
        text = lines[1].strip() if len(lines) > 1 else "{}"
        try:
            return CommitMetadata.from_json(text or "{}")
        except ValueError as exc:
            raise commit_metadata_corrupt_error(file, exc) from exc
