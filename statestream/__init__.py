"""statestream: Spark Structured Streaming's stateful engine, rebuilt in Python on PySpark.

Use ``StreamingSession(spark)`` where you would use ``spark`` for ``readStream``; the rest of the
query is the PySpark API you know.

The names below are imported on first use (PEP 562), so that importing a submodule does not
import PySpark: the Python daemon of local-mode workers (``runtime.python_daemon``) is started
as ``python -m statestream.runtime.python_daemon`` and chooses where PySpark is imported from
before anything imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestream.aggregate_function import AggregateFunction
    from statestream.errors import (
        CheckpointError,
        IncompatibleRestartError,
        StatestreamAnalysisException,
        StatestreamError,
        StatestreamStreamingQueryException,
        StateStoreError,
    )
    from statestream.session import StreamingSession
    from statestream.sources.memory import MemoryStream

__all__ = [
    "StreamingSession",
    "MemoryStream",
    "AggregateFunction",
    "StatestreamError",
    "StatestreamAnalysisException",
    "StatestreamStreamingQueryException",
    "StateStoreError",
    "CheckpointError",
    "IncompatibleRestartError",
]

__version__ = "0.1.0"

#: each public name and the module it lives in
_HOMES = {
    "StreamingSession": "statestream.session",
    "MemoryStream": "statestream.sources.memory",
    "AggregateFunction": "statestream.aggregate_function",
    "StatestreamError": "statestream.errors",
    "StatestreamAnalysisException": "statestream.errors",
    "StatestreamStreamingQueryException": "statestream.errors",
    "StateStoreError": "statestream.errors",
    "CheckpointError": "statestream.errors",
    "IncompatibleRestartError": "statestream.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'statestream' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
