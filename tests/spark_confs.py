"""Session confs set for one block of a test, then put back."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

__all__ = ["session_confs"]


@contextlib.contextmanager
def session_confs(spark: Any, confs: Mapping[str, str]) -> Iterator[None]:
    """Set ``confs`` on ``spark``'s session for the block; each goes back to the value it had
    (unset when it had none of its own), so a failing test leaves the shared session as it
    found it for the tests after it."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
