"""The query metadata file ``<checkpoint>/metadata``.

Spark: ``StreamMetadata``. It holds the query id, written once when a checkpoint is first used and
read on every restart, so ``StreamingQuery.id`` (and the ``id`` of every progress event) stays the
same across restarts while the run id changes. Format (Spark 4.1, no trailing newline)::

    {"id":"b0736d78-eee3-4eb7-825d-ccc870e716a9"}
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.checkpoint import (
    CheckpointError,
    FileAlreadyExistsError,
    query_metadata_corrupt_error,
    query_metadata_exists_error,
    query_metadata_without_id_error,
)

__all__ = ["StreamMetadata", "METADATA_FILE"]

logger = logging.getLogger(__name__)

METADATA_FILE = "metadata"


@dataclass(frozen=True)
class StreamMetadata:
    """The stable identity of a streaming query."""

    id: str

    def to_json(self) -> str:
        return json.dumps({"id": self.id}, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def read(cls, checkpoint: str | CheckpointFileManager) -> "StreamMetadata | None":
        """The metadata of ``checkpoint``, or ``None`` when the file does not exist.

        Raises
        ------
        CheckpointError
            The file exists but is not a JSON object with a string ``id``.
        """
        files = _manager(checkpoint)
        if not files.exists(METADATA_FILE):
            return None
        where = files.display(METADATA_FILE)
        try:
            obj = json.loads(files.read_bytes(METADATA_FILE).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise query_metadata_corrupt_error(where, exc) from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
            raise query_metadata_without_id_error(where)
        return cls(obj["id"])

    def write(self, checkpoint: str | CheckpointFileManager) -> None:
        """Write the file atomically; fails if it already exists (the id must never change)."""
        files = _manager(checkpoint)
        try:
            files.write_atomic(METADATA_FILE, self.to_json().encode("utf-8"), overwrite=False)
        except FileAlreadyExistsError as exc:
            raise query_metadata_exists_error(files.display(METADATA_FILE)) from exc

    @classmethod
    def get_or_create(cls, checkpoint: str | CheckpointFileManager) -> "StreamMetadata":
        """The checkpoint's metadata, creating it with a new random UUID on first use.

        If another process creates the file at the same moment, its id is the one returned, so
        every caller agrees on a single id."""
        files = _manager(checkpoint)
        existing = cls.read(files)
        if existing is not None:
            return existing
        created = cls(str(uuid.uuid4()))
        try:
            created.write(files)
        except CheckpointError:
            existing = cls.read(files)
            if existing is None:
                raise
            return existing
        logger.info("created query metadata %s with id %s", files.display(METADATA_FILE), created.id)
        return created


def _manager(checkpoint: str | CheckpointFileManager) -> CheckpointFileManager:
    return checkpoint if isinstance(checkpoint, CheckpointFileManager) else CheckpointFileManager(checkpoint)
