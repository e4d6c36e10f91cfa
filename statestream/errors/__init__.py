"""Every error statestream raises, by area, each with Spark's error class where Spark has one.

An error that Spark raises for the same situation carries Spark's error class, message
parameters, SQLSTATE and text, and subclasses PySpark's own exception type
(:mod:`~statestream.errors.spark_shaped`), so that user code and the differential tests catch
it exactly as they would catch Spark's. Every error text lives in this package, built by small
factories in the module of its area:

==========================  =============================================================
``base``                    the root ``StatestreamError``; what statestream does not run yet
``state``                   the state store: its files, keys and settings; restarts the
                            stored state refuses
``checkpoint``              the checkpoint's logs, files and writer lock; the compactible
                            metadata logs of file streams
``spark_shaped``            PySpark's exception classes for Spark's JVM errors
``arguments``               PySpark's argument checks, made in Python before the JVM
``query``                   a query's start next to another run; its failure
``analysis``                what Spark's analyzer refuses (the writer's settings,
                            intervals, watermarks); what statestream cannot plan
``unsupported_operations``  what a streaming query cannot do (Spark's
                            ``UnsupportedOperationChecker``): output modes, sorts, limits...
``sources_sinks``           the sources' and sinks' options, logs and failures: files, rate,
                            socket, tables, memory, Python data sources, Kafka, foreach
                            and foreachBatch
``tools``                   the checkpoint tools: rollback, state tables, compatibility,
                            the repartition's own checks
``spark_tools``             the tools Spark has too: the state data sources (``STDS_*``),
                            the state repartition (``STATE_REPARTITION_INVALID_*``)
``stateful_processor``      transformWithState's handle and state variables, as PySpark's
                            client reports the state server's errors
``connect``                 what the Spark Connect endpoint does not rebuild on statestream
==========================  =============================================================

``state``, ``checkpoint``, ``tools`` and ``base`` import no PySpark (the storage layers and the
checkpoint tools raise them), and this front door imports a name's module only when the name is
first used (PEP 562), looking through the modules that import no PySpark first, so that
``statestream.state``, ``statestream.checkpoint`` and the checkpoint tools stay free of PySpark.

Examples
--------
>>> from statestream.errors import CheckpointError, StatestreamError
>>> issubclass(CheckpointError, StatestreamError)
True
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestream.errors.analysis import *  # noqa: F403
    from statestream.errors.arguments import *  # noqa: F403
    from statestream.errors.base import *  # noqa: F403
    from statestream.errors.checkpoint import *  # noqa: F403
    from statestream.errors.connect import *  # noqa: F403
    from statestream.errors.query import *  # noqa: F403
    from statestream.errors.sources_sinks import *  # noqa: F403
    from statestream.errors.spark_shaped import *  # noqa: F403
    from statestream.errors.spark_tools import *  # noqa: F403
    from statestream.errors.state import *  # noqa: F403
    from statestream.errors.stateful_processor import *  # noqa: F403
    from statestream.errors.tools import *  # noqa: F403
    from statestream.errors.unsupported_operations import *  # noqa: F403

#: the area modules, in the order a name is looked up: those that import no PySpark first, so
#: that a name of theirs never brings PySpark in
AREAS = ("base", "state", "checkpoint", "tools", "spark_shaped", "arguments", "query", "analysis", "unsupported_operations", "sources_sinks", "spark_tools", "stateful_processor", "connect")


def area_module(area: str) -> ModuleType:
    """The module of one of :data:`AREAS` (imported on first use)."""
    return importlib.import_module(f"statestream.errors.{area}")


def __getattr__(name: str) -> Any:
    if not name.startswith("_"):
        for area in AREAS:
            module = area_module(area)
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'statestream.errors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {name for area in AREAS for name in area_module(area).__all__})
