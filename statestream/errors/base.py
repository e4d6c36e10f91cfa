"""The root of statestream's errors, and the errors of what statestream does not run yet.

Pure module: no PySpark import (the storage layers' errors derive from these).
"""

from __future__ import annotations

import sys

__all__ = [
    "StatestreamError",
    "NotSupportedYetError",
    "NotSupportedYetAttributeError",
    "not_supported_yet",
    "not_supported_yet_attribute",
    "stream_stream_join_not_supported_error",
    "spark_connect_session_error",
    "missing_member",
]


class StatestreamError(Exception):
    """Root of statestream's own errors (those Spark has no equivalent for).

    Examples
    --------
    >>> from statestream.errors import StatestreamError, not_supported_yet
    >>> isinstance(not_supported_yet("DataStreamWriter", "clusterBy"), StatestreamError)
    True
    """


class NotSupportedYetError(StatestreamError, NotImplementedError):
    """A PySpark method or option that Spark's engine accepts on a stream but statestream does
    not run yet. The message names the method, so a job stops at a clear line rather than at an
    ``AttributeError``."""


class NotSupportedYetAttributeError(NotSupportedYetError, AttributeError):
    """``NotSupportedYetError`` for a member reached through attribute lookup, so that
    ``hasattr``/``getattr(obj, name, default)`` keep working."""


def not_supported_yet(owner: str, name: str, hint: str = "") -> NotSupportedYetError:
    """The error of ``owner.name()`` that statestream lacks (``hint``: what to use instead).

    Examples
    --------
    >>> str(not_supported_yet("DataStreamWriter", "clusterBy", "partitionBy works"))
    'DataStreamWriter.clusterBy() is not supported by statestream yet; partitionBy works'
    """
    return NotSupportedYetError(_not_yet_text(owner, name) + (f"; {hint}" if hint else ""))


def _not_yet_text(owner: str, name: str) -> str:
    return f"{owner}.{name}() is not supported by statestream yet"


def not_supported_yet_attribute(owner: str, name: str) -> NotSupportedYetAttributeError:
    """The error of ``obj.name`` when PySpark's ``owner`` class has the member (one a newer
    PySpark added) and statestream's has not: a ``NotSupportedYetError`` that is an
    ``AttributeError`` too.

    Examples
    --------
    >>> str(not_supported_yet_attribute("DataFrame", "mergeInto"))
    'DataFrame.mergeInto() is not supported by statestream yet'
    """
    return NotSupportedYetAttributeError(_not_yet_text(owner, name))


def stream_stream_join_not_supported_error(join_type: str) -> NotSupportedYetError:
    """A join of two streaming DataFrames reaching the stream-static join's planner (the planner
    sends these to the stream-stream join)."""
    return NotSupportedYetError(
        f"{join_type} join: joins of two streaming DataFrames (stream-stream joins) are not supported by statestream yet; "
        "join a stream with a static DataFrame, or run this query on Spark's engine"
    )


def spark_connect_session_error(spark: object) -> NotSupportedYetError:
    """The error of ``StreamingSession(spark)`` over a Spark Connect session. Why it cannot run:
    statestream plans each micro-batch with Spark's own analyzer and optimizer and builds the
    batch's physical plan through the driver's JVM (py4j), and keeps the state step's
    accumulators in the driver's SparkContext; a Connect client has neither, only a gRPC
    channel to a server that plans for it."""
    return NotSupportedYetError(
        f"StreamingSession needs a classic SparkSession, and {type(spark).__module__}.{type(spark).__name__} is a Spark Connect "
        "session: statestream plans every micro-batch with Spark's analyzer through the driver's JVM (py4j), which a Connect "
        "client does not have. Serve Connect clients with `statestream connect-server` (their streaming queries then run on "
        "statestream in its driver, unchanged), or run the streaming job in a driver with a classic session."
    )


def missing_member(owner: str, pyspark_class: type, name: str) -> AttributeError:
    """The error of ``obj.name`` when statestream's ``owner`` class has no such member: a
    ``NotSupportedYetError`` naming it when PySpark's class has it (a member a newer PySpark
    added), else the plain ``AttributeError`` of a typo. Both are ``AttributeError``s, so
    ``hasattr`` and ``getattr(obj, name, default)`` keep working.

    Examples
    --------
    >>> class Writer:
    ...     def clusterBy(self): ...
    >>> type(missing_member("DataStreamWriter", Writer, "clusterBy")).__name__
    'NotSupportedYetAttributeError'
    >>> str(missing_member("DataStreamWriter", Writer, "clusterby"))
    "'DataStreamWriter' object has no attribute 'clusterby'"
    """
    if not name.startswith("_") and hasattr(pyspark_class, name):
        return not_supported_yet_attribute(owner, name)
    return AttributeError(f"'{owner}' object has no attribute '{name}'")


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``: a line the traceback prints below ``exc``'s message, telling where
    a user's function failed. Notes came with Python 3.11; on 3.10 ``exc`` is left as it is (the
    traceback there would not print the note), rather than failing in the handler and hiding
    ``exc`` behind an ``AttributeError``."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
