"""statestream: Spark Structured Streaming's stateful engine, rebuilt in Python on PySpark.

A PySpark job runs on it unchanged: ``statestream run job.py`` (or ``spark-submit --conf
spark.pyspark.driver.python=statestream-python job.py``), or one line in code,
``statestream.enable(spark)``, after which ``spark.readStream`` and ``spark.streams`` are
statestream's. ``StreamingSession(spark)`` gives the same entry points without touching ``spark``.

This module is the front door; the names it serves live in ``api/`` (the PySpark-shaped public
API: ``api.session``, ``api.reader``, ``api.dataframe``, ``api.writer``, ``api.query``...),
``sources/`` and ``errors/``. Beside it: ``commands/`` (the ``statestream`` command line, also
``python -m statestream``, and ``statestream-python``), ``testing/`` (the test kit:
``from statestream.testing import TwsTester``), ``tools/`` (checkpoint tooling), the engine
(``plan/``, ``runtime/``, ``operators/``, ``state/``, ``checkpoint/``, ``sources/``, ``sinks/``),
``_jvm/`` (the one bridge to the JVM) and ``faults.py`` (the test-only crash points).

The names below are imported on first use (PEP 562), so that importing a submodule does not
import PySpark: the Python daemon of local-mode workers (``runtime.python_daemon``) is started
as ``python -m statestream.runtime.python_daemon`` and chooses where PySpark is imported from
before anything imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestream.api.aggregate_function import AggregateFunction
    from statestream.errors import (
        CheckpointError,
        IncompatibleRestartError,
        StatestreamAnalysisException,
        StatestreamError,
        StatestreamStreamingQueryException,
        StateStoreError,
    )
    from statestream.api.session import StreamingSession, disable, enable, enable_everywhere, is_enabled
    from statestream.sources.memory import MemoryStream

__all__ = [
    "enable",
    "disable",
    "is_enabled",
    "enable_everywhere",
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
    "StreamingSession": "statestream.api.session",
    "enable": "statestream.api.session",
    "disable": "statestream.api.session",
    "is_enabled": "statestream.api.session",
    "enable_everywhere": "statestream.api.session",
    "MemoryStream": "statestream.sources.memory",
    "AggregateFunction": "statestream.api.aggregate_function",
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
