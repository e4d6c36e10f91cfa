"""statestream: Spark Structured Streaming's stateful engine, rebuilt in Python on PySpark.

Use ``StreamingSession(spark)`` where you would use ``spark`` for ``readStream``; the rest of the
query is the PySpark API you know.
"""

from __future__ import annotations

from statestream.errors import (
    CheckpointError,
    IncompatibleRestartError,
    StateStoreError,
    StatestreamAnalysisException,
    StatestreamError,
    StatestreamStreamingQueryException,
)
from statestream.session import StreamingSession

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


def __getattr__(name: str):
    if name == "MemoryStream":
        from statestream.sources.memory import MemoryStream

        return MemoryStream
    if name == "AggregateFunction":
        from statestream.aggregate_function import AggregateFunction

        return AggregateFunction
    raise AttributeError(name)
