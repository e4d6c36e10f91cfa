"""What statestream records of each run's query beside Spark's checkpoint files.

Spark's checkpoint does not say in which output mode, or with which watermarks, the query ran;
the compatibility check (``tools.compatibility``) compares a changed query with them, and a
rollback removes the undone batches' late rows, so every start writes
``<checkpoint>/.statestream-query``: ``{"outputMode": ..., "watermarks": [{"column": ...,
"delay": ...}], "lateRows": <the late-row ledger's root or null>, "fileSink": <a file sink's output
directory or null>}``, after the start took the writer lock. Nothing in a run reads it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from statestream.checkpoint.files import CheckpointFileManager

__all__ = ["QUERY_RECORD", "read_query_record", "record_query"]

log = logging.getLogger(__name__)

#: the file, at the checkpoint's root
QUERY_RECORD = ".statestream-query"


def record_query(
    fm: CheckpointFileManager, output_mode: str, watermarks: list[tuple[str, str]], late_rows: str | None = None, file_sink: str | None = None
) -> None:
    """Record a run's output mode, watermarks and late-row ledger (written at each start; the
    compatibility check compares them, a rollback finds the ledger)."""
    body = {"outputMode": output_mode, "watermarks": [{"column": c, "delay": d} for c, d in watermarks], "lateRows": late_rows, "fileSink": file_sink}
    try:
        fm.write_atomic(QUERY_RECORD, json.dumps(body).encode())
    except OSError:
        log.warning("could not record the query's output mode in %s", fm.display(QUERY_RECORD), exc_info=True)


def read_query_record(fm: CheckpointFileManager) -> dict[str, Any] | None:
    """The last run's record, or None (a checkpoint of Spark's or of an older statestream)."""
    try:
        return json.loads(fm.read_bytes(QUERY_RECORD)) if fm.exists(QUERY_RECORD) else None
    except (ValueError, OSError):
        return None
