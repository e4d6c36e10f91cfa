"""Small helpers shared by the adapted PySpark streaming tests."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import pytest


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "the condition") -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def visible_files(root: str) -> list[str]:
    """The files under ``root`` (any depth) whose names do not start with a dot."""
    found = []
    for _, _, names in os.walk(root):
        found.extend(n for n in names if not n.startswith("."))
    return found


def wait_for_rows(query: Any, timeout: float = 60.0) -> None:
    """Wait until ``query`` has reported a trigger that read at least one row."""
    wait_until(
        lambda: any(p.numInputRows > 0 for p in query.recentProgress),
        timeout,
        "a trigger with input rows",
    )
