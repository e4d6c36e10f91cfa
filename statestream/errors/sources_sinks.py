"""Errors of the sources and sinks: a Python data source's failure, Kafka's unreachable brokers
and lost data, and a user's foreach or foreachBatch function that raised.

>>> error = foreach_batch_user_function_error(ValueError("boom"))
>>> error.getCondition(), error.getSqlState()
('FOREACH_BATCH_USER_FUNCTION_ERROR', '39000')
"""

from __future__ import annotations

import traceback

from statestream.errors.base import StatestreamError
from statestream.errors.spark_shaped import (
    StatestreamIllegalArgumentException,
    StatestreamIllegalStateException,
    StatestreamSparkRuntimeException,
)

__all__ = [
    "python_streaming_source_error",
    "python_sink_update_mode_error",
    "KafkaUnreachableError",
    "KafkaDataLossError",
    "ForeachUserFuncError",
    "foreach_user_function_error",
    "foreach_batch_user_function_error",
]


def python_streaming_source_error(action: str, cause: BaseException) -> StatestreamSparkRuntimeException:
    """Spark's ``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR``: a Python streaming source's
    ``initialOffset``, ``latestOffset``, ``partitions`` (``planPartitions``) or ``commit``
    (``commitSource``) raised, with the Python traceback."""
    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform {action}: {detail} SQLSTATE: 38000"
    return StatestreamSparkRuntimeException(message, "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR", {"action": action, "msg": detail}, "38000")


def python_sink_update_mode_error(name: str) -> "StatestreamIllegalArgumentException":
    """Spark's refusal of update mode for a Python data source's streaming writer (its write
    builder truncates, it does not take updates as appends)."""
    return StatestreamIllegalArgumentException(f"requirement failed: {name} does not support Update mode.")


#: the head of Spark's ``KAFKA_DATA_LOSS`` texts (the reason follows)
_DATA_LOSS_HEAD = (
    "Some data may have been lost because they are not available in Kafka any more;\n"
    "either the data was aged out by Kafka or the topic may have been deleted before all the data in the\n"
    "topic was processed.\n"
    "If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.\n"
    "Reason:"
)


class KafkaDataLossError(StatestreamIllegalStateException):
    """Spark's ``KAFKA_DATA_LOSS`` condition: the message has no ``[CLASS]`` prefix (Kafka's
    exceptions carry the plain text), the condition is ``condition`` and ``getCondition()``."""

    def __init__(self, sub: str, reason: str) -> None:
        self.condition = f"KAFKA_DATA_LOSS.{sub}"
        self.reason = reason
        super().__init__(f"{_DATA_LOSS_HEAD} {reason}")

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.condition

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        return "22000"


class KafkaUnreachableError(StatestreamIllegalStateException):
    """The brokers did not answer a metadata or offset request in time, or refused the
    client's login or TLS handshake."""


class ForeachUserFuncError(StatestreamError):
    """Spark's ``FOREACH_USER_FUNCTION_ERROR`` / ``FOREACH_BATCH_USER_FUNCTION_ERROR``: the user's
    sink code raised. ``reason`` is the user's failure as Spark shows it; the query's
    ``exception()`` shows the reason alone, as Spark unwraps these two errors there."""

    def __init__(self, error_class: str, sink: str, reason: str) -> None:
        message = (
            f"[{error_class}] An error occurred in the user provided function in {sink}. "
            f"Reason: {reason} SQLSTATE: 39000"
        )
        super().__init__(message)
        self.error_class = error_class
        self.reason = reason
        self._message = message

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.error_class

    getErrorClass = getCondition  # noqa: N815 - PySpark's name

    def getMessageParameters(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        return {"reason": self.reason}

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        return "39000"

    def unwrapped_message(self) -> str:
        """What ``query.exception()`` shows: Spark reports the cause of these errors."""
        return self.reason

    def __str__(self) -> str:
        return self._message


def foreach_user_function_error(reason: str) -> ForeachUserFuncError:
    """``FOREACH_USER_FUNCTION_ERROR`` with ``reason`` (a task's Python traceback)."""
    return ForeachUserFuncError("FOREACH_USER_FUNCTION_ERROR", "foreach sink", reason)


def foreach_batch_user_function_error(exc: BaseException) -> ForeachUserFuncError:
    """``FOREACH_BATCH_USER_FUNCTION_ERROR`` for ``exc`` raised by the user's function (Spark's
    text: the failure came back through the Python proxy of py4j)."""
    reason = "An exception was raised by the Python Proxy. Return Message: " + "".join(traceback.format_exception(exc))
    return ForeachUserFuncError("FOREACH_BATCH_USER_FUNCTION_ERROR", "foreach batch sink", reason)
