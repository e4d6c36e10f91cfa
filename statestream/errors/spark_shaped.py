"""The exception classes PySpark raises for Spark's errors, with statestream's errors inside them.

An error that Spark raises for the same situation carries Spark's error class, message
parameters, SQLSTATE and text, and subclasses PySpark's own exception type, so that user code
(and the differential tests) catch it exactly as they would catch Spark's:

>>> from pyspark.errors import AnalysisException
>>> error = analysis_error("UNRESOLVED_COLUMN", "[UNRESOLVED_COLUMN] ... SQLSTATE: 42703", "42703")
>>> isinstance(error, AnalysisException), error.getCondition(), error.getSqlState()
(True, 'UNRESOLVED_COLUMN', '42703')
"""

from __future__ import annotations

from typing import Any

from pyspark.errors import AnalysisException as _PySparkAnalysisException
from pyspark.errors import ArithmeticException as _PySparkArithmeticException
from pyspark.errors import IllegalArgumentException as _PySparkIllegalArgumentException
from pyspark.errors import NumberFormatException as _PySparkNumberFormatException
from pyspark.errors import SparkRuntimeException as _PySparkSparkRuntimeException
from pyspark.errors import StreamingQueryException as _PySparkStreamingQueryException
from pyspark.errors import UnsupportedOperationException as _PySparkUnsupportedOperationException
from pyspark.errors.exceptions.captured import CapturedException as _PySparkCapturedException

from statestream.errors.base import StatestreamError

__all__ = [
    "StatestreamAnalysisException",
    "StatestreamStreamingQueryException",
    "StatestreamIllegalArgumentException",
    "StatestreamIllegalStateException",
    "StatestreamNumberFormatException",
    "StatestreamSparkRuntimeException",
    "StatestreamUnsupportedOperationException",
    "StatestreamArithmeticException",
    "spark_error_text",
    "analysis_error",
]


class _SparkShapedMixin:
    """Carries Spark's error class, SQLSTATE and message parameters."""

    def _init_spark_fields(
        self, message: str, error_class: str | None, params: dict[str, Any] | None, sql_state: str | None
    ) -> None:
        self._ss_message = message
        self._ss_error_class = error_class
        self._ss_params = dict(params or {})
        self._ss_sql_state = sql_state
        # the fields of PySpark's captured exceptions, which code (PySpark's own tests among it)
        # reads to walk a failure's chain: its text, the captured cause, no JVM origin
        self._desc = message
        self._stackTrace = None
        self._origin = None
        self._cause: Any = None

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        return self._ss_error_class

    def getErrorClass(self) -> str | None:  # noqa: N802 - PySpark's name
        return self._ss_error_class

    def getMessageParameters(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        return dict(self._ss_params)

    def getSqlState(self) -> str | None:  # noqa: N802 - PySpark's name
        return self._ss_sql_state

    def getMessage(self) -> str:  # noqa: N802 - PySpark's name
        return self._ss_message

    def __str__(self) -> str:
        return self._ss_message


class _JvmShapedException(_SparkShapedMixin):
    """Common constructor of the exceptions PySpark raises for a JVM exception: Spark's text,
    and its error class, parameters and SQLSTATE when Spark's error has them."""

    def __init__(
        self,
        message: str,
        error_class: str | None = None,
        params: dict[str, Any] | None = None,
        sql_state: str | None = None,
    ) -> None:
        Exception.__init__(self, message)  # type: ignore[arg-type]  # a mixin: each of its classes is an Exception
        self._init_spark_fields(message, error_class, params, sql_state)


class StatestreamAnalysisException(_JvmShapedException, _PySparkAnalysisException, StatestreamError):
    """An ``AnalysisException`` as Spark raises it: same class, same message text.

    ``message`` is the full text Spark prints (for error-class errors: ``[CLASS] text SQLSTATE: x``).
    """


class StatestreamStreamingQueryException(_SparkShapedMixin, _PySparkStreamingQueryException, StatestreamError):
    """The query terminated with an exception (Spark's ``[STREAM_FAILED]``).

    PySpark shows one failure in two shapes, and so do we: ``awaitTermination()`` raises it
    with error class ``STREAM_FAILED`` (:func:`stream_failed_error`), while ``query.exception()``
    gives the cause's message followed by a query report, without error class
    (:func:`query_exception_view`).
    """

    def __init__(
        self,
        message: str,
        cause: BaseException | None = None,
        params: dict[str, Any] | None = None,
        error_class: str | None = "STREAM_FAILED",
    ) -> None:
        Exception.__init__(self, message)
        self._init_spark_fields(message, error_class, params, "XXKST" if error_class else None)
        self.cause = cause
        # PySpark chains only captured exceptions (each with its own ``_desc``) through ``_cause``
        self._cause = cause if isinstance(cause, _PySparkCapturedException) else None


class StatestreamIllegalArgumentException(
    _JvmShapedException, _PySparkIllegalArgumentException, StatestreamError, ValueError
):
    """What PySpark raises for a JVM ``IllegalArgumentException`` (``requirement failed: ...``,
    invalid options and conf values): same class, same text."""


class StatestreamNumberFormatException(
    _JvmShapedException, _PySparkNumberFormatException, StatestreamError, ValueError
):
    """What PySpark raises for a JVM ``NumberFormatException`` (``For input string: "x"``), e.g. a
    numeric source option that is not a number."""


class StatestreamSparkRuntimeException(
    _JvmShapedException, _PySparkSparkRuntimeException, StatestreamError, RuntimeError
):
    """What PySpark raises for Spark's ``SparkRuntimeException`` (the state data sources'
    ``STDS_*`` errors among them): same class, same text."""


def spark_error_text(error_class: str, message: str, sql_state: str) -> str:
    """Spark's rendering of an error-class error: ``[CLASS] message SQLSTATE: state``."""
    return f"[{error_class}] {message} SQLSTATE: {sql_state}"


class StatestreamIllegalStateException(_JvmShapedException, StatestreamError, RuntimeError):
    """Spark's JVM ``IllegalStateException`` (and other JVM errors PySpark does not convert, which
    reach Python as py4j's ``Py4JJavaError``): Spark's text, a ``RuntimeError``."""


class StatestreamUnsupportedOperationException(
    _JvmShapedException, _PySparkUnsupportedOperationException, StatestreamError
):
    """What PySpark raises for a JVM ``UnsupportedOperationException``."""


class StatestreamArithmeticException(_JvmShapedException, _PySparkArithmeticException, StatestreamError, ArithmeticError):
    """What PySpark raises for a JVM ``ArithmeticException`` (overflows)."""


def analysis_error(error_class: str | None, message: str, sql_state: str | None = None, **params: Any) -> StatestreamAnalysisException:
    """Build an analysis error; ``message`` is the full Spark text (with ``[CLASS]`` and SQLSTATE)."""
    return StatestreamAnalysisException(message, error_class, params, sql_state)
