"""The marker of a checkpoint rollback in progress (``tools.rollback``).

A rollback deletes log entries and state files in several steps; a query started in between
would run on a half-rolled-back checkpoint. The rollback writes this marker first and removes it
last, and a start refuses a checkpoint that has it.
"""

from __future__ import annotations

import json

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.checkpoint import interrupted_rollback_error

__all__ = ["ROLLBACK_MARKER", "check_no_interrupted_rollback"]

#: written first, removed last: a start refuses a checkpoint that has it
ROLLBACK_MARKER = ".statestream-rollback"


def check_no_interrupted_rollback(fm: CheckpointFileManager) -> None:
    """Refuse a checkpoint whose rollback was interrupted (called by a query's start)."""
    if not fm.exists(ROLLBACK_MARKER):
        return
    try:
        target = json.loads(fm.read_bytes(ROLLBACK_MARKER)).get("toBatch")
    except (ValueError, OSError):
        target = "N"
    raise interrupted_rollback_error(fm.display(), target, fm.display(ROLLBACK_MARKER))
