"""Errors raised by statestream.

Errors that Spark itself raises for the same situation carry Spark's error class, message
parameters and message text, and subclass PySpark's own exception types, so that user code (and
our differential tests) can catch them exactly as they would catch Spark's.
Every message text lives in this module, built by small factories grouped by area.
"""

from __future__ import annotations

from typing import Any

from pyspark.errors import AnalysisException as _PySparkAnalysisException
from pyspark.errors import ArithmeticException as _PySparkArithmeticException
from pyspark.errors import IllegalArgumentException as _PySparkIllegalArgumentException
from pyspark.errors import NumberFormatException as _PySparkNumberFormatException
from pyspark.errors import SparkRuntimeException as _PySparkSparkRuntimeException
from pyspark.errors import UnsupportedOperationException as _PySparkUnsupportedOperationException
from pyspark.errors import PySparkValueError as _PySparkValueError
from pyspark.errors import StreamingQueryException as _PySparkStreamingQueryException
from pyspark.errors.exceptions.captured import CapturedException as _PySparkCapturedException

__all__ = [
    "StatestreamError",
    "StatestreamAnalysisException",
    "StatestreamStreamingQueryException",
    "StateStoreError",
    "schema_must_be_nullable_error",
    "StatestreamIllegalArgumentException",
    "StatestreamIllegalStateException",
    "StatestreamNumberFormatException",
    "StatestreamSparkRuntimeException",
    "StatestreamUnsupportedOperationException",
    "StatestreamArithmeticException",
    "CheckpointError",
    "IncompatibleRestartError",
    "NotSupportedYetError",
]


class StatestreamError(Exception):
    """Root of statestream's own errors (those Spark has no equivalent for)."""


class NotSupportedYetError(StatestreamError, NotImplementedError):
    """A PySpark method or option that Spark's engine accepts on a stream but statestream does
    not run yet. The message names the method, so a job stops at a clear line rather than at an
    ``AttributeError``."""


class NotSupportedYetAttributeError(NotSupportedYetError, AttributeError):
    """``NotSupportedYetError`` for a member reached through attribute lookup, so that
    ``hasattr``/``getattr(obj, name, default)`` keep working."""


def not_supported_yet(owner: str, name: str, hint: str = "") -> NotSupportedYetError:
    """The error of ``owner.name()`` that statestream lacks (``hint``: what to use instead)."""
    return NotSupportedYetError(f"{owner}.{name}() is not supported by statestream yet" + (f"; {hint}" if hint else ""))


def spark_connect_session_error(spark: object) -> NotSupportedYetError:
    """The error of ``StreamingSession(spark)`` over a Spark Connect session. Why it cannot run:
    statestream plans each micro-batch with Spark's own analyzer and optimizer and builds the
    batch's physical plan through the driver's JVM (py4j), and keeps the state step's
    accumulators in the driver's SparkContext; a Connect client has neither, only a gRPC
    channel to a server that plans for it."""
    return NotSupportedYetError(
        f"StreamingSession needs a classic SparkSession, and {type(spark).__module__}.{type(spark).__name__} is a Spark Connect "
        "session: statestream plans every micro-batch with Spark's analyzer through the driver's JVM (py4j), which a Connect "
        "client does not have. Run the streaming job in a driver with a classic session (SparkSession.builder.master(...) or "
        "spark-submit, on the same cluster); Connect clients can still read what its sinks write."
    )


def missing_member(owner: str, pyspark_class: type, name: str) -> AttributeError:
    """The error of ``obj.name`` when statestream's ``owner`` class has no such member: a
    ``NotSupportedYetError`` naming it when PySpark's class has it (a member a newer PySpark
    added), else the plain ``AttributeError`` of a typo. Both are ``AttributeError``s, so
    ``hasattr`` and ``getattr(obj, name, default)`` keep working."""
    if not name.startswith("_") and hasattr(pyspark_class, name):
        return NotSupportedYetAttributeError(f"{owner}.{name}() is not supported by statestream yet")
    return AttributeError(f"'{owner}' object has no attribute '{name}'")


# -- argument checks PySpark makes in Python, before calling the JVM ---------------------------


def value_not_non_empty_str_error(arg_name: str, arg_value: Any) -> _PySparkValueError:
    """PySpark's ``VALUE_NOT_NON_EMPTY_STR``: ``queryName("")``, ``trigger(processingTime="")``."""
    return _PySparkValueError(errorClass="VALUE_NOT_NON_EMPTY_STR", messageParameters={"arg_name": arg_name, "arg_value": str(arg_value)})


def value_not_true_error(arg_name: str, arg_value: Any) -> _PySparkValueError:
    """PySpark's ``VALUE_NOT_TRUE``: ``trigger(once=False)``, ``trigger(availableNow=False)``."""
    return _PySparkValueError(errorClass="VALUE_NOT_TRUE", messageParameters={"arg_name": arg_name, "arg_value": str(arg_value)})


def only_allow_single_trigger_error() -> _PySparkValueError:
    """PySpark's ``ONLY_ALLOW_SINGLE_TRIGGER``: ``trigger()`` with no kind, or with two."""
    return _PySparkValueError(errorClass="ONLY_ALLOW_SINGLE_TRIGGER", messageParameters={})


def value_not_positive_error(arg_name: str, arg_value: Any) -> _PySparkValueError:
    """PySpark's ``VALUE_NOT_POSITIVE`` for a timeout that is not a positive number
    (``awaitTermination("hello")``); as in PySpark, the message names the value's type."""
    return _PySparkValueError(errorClass="VALUE_NOT_POSITIVE", messageParameters={"arg_name": arg_name, "arg_value": type(arg_value).__name__})


def checked_timeout(timeout: Any, allow_zero: bool) -> float | None:
    """A wait's ``timeout`` checked as PySpark checks it before calling the JVM: ``None`` (wait
    for ever) or an ``int``/``float`` above 0 (``awaitTermination``) or at least 0
    (``awaitAnyTermination``, ``allow_zero``); anything else raises ``VALUE_NOT_POSITIVE``."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or timeout < 0 or (timeout == 0 and not allow_zero):
        raise value_not_positive_error("timeout", timeout)
    return float(timeout)


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
        Exception.__init__(self, message)
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


def stream_failed_error(query_id: str, run_id: str, cause: BaseException) -> StatestreamStreamingQueryException:
    """Spark's ``STREAM_FAILED`` as ``awaitTermination()`` raises it. The error class's SQLSTATE
    is appended after the cause's message, so a cause that has an error class of its own ends
    with two ``SQLSTATE`` suffixes, exactly as Spark prints it."""
    msg = f"[STREAM_FAILED] Query [id = {query_id}, runId = {run_id}] terminated with exception: {cause} SQLSTATE: XXKST"
    params = {"id": query_id, "runId": run_id, "message": str(cause)}
    return StatestreamStreamingQueryException(msg, cause=cause, params=params)


def query_exception_view(
    exc: StatestreamStreamingQueryException, query_id: str, run_id: str, name: str | None = None
) -> StatestreamStreamingQueryException:
    """The same failure as ``query.exception()`` shows it in PySpark: the cause's message, then
    the ``=== Streaming Query ===`` report (Spark's also lists offsets and its logical plan), and no
    error class."""
    cause = exc.cause if exc.cause is not None else exc
    unwrapped = getattr(cause, "unwrapped_message", None)
    # Spark shows the user's failure here, not a sink's FOREACH_(BATCH_)USER_FUNCTION_ERROR around it
    shown = unwrapped() if callable(unwrapped) else str(cause)
    ident = f"[id = {query_id}, runId = {run_id}]"
    msg = f"{shown}\n=== Streaming Query ===\nIdentifier: {f'{name} ' if name else ''}{ident}\n"
    return StatestreamStreamingQueryException(msg, cause=cause, params=None, error_class=None)




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


def duplicate_query_name_error(name: str) -> StatestreamIllegalArgumentException:
    """``start()`` of a query whose name an active query of the same session has."""
    return StatestreamIllegalArgumentException(
        f"Cannot start query with name {name} as a query with that name is already active in this SparkSession"
    )


def duplicate_query_id_error(query_id: str) -> StatestreamIllegalStateException:
    """``start()`` of a query whose checkpoint's id is running already, when
    ``spark.sql.streaming.stopActiveRunOnRestart`` is false (otherwise that run is stopped)."""
    return StatestreamIllegalStateException(
        f"Cannot start query with id {query_id} as another query with same id is already active. "
        "Perhaps you are attempting to restart a query from checkpoint that is already active. "
        'You may stop the old query by setting the SQL configuration: spark.conf.set("spark.sql.streaming.stopActiveRunOnRestart", true) '
        "and retry."
    )


def checkpoint_in_use_error(query_id: str, detail: str) -> StatestreamIllegalStateException:
    """``start()`` on a checkpoint that a query in another process is running: Spark's text for
    an active query of the same id, and who holds the checkpoint (Spark itself would run a whole
    batch before failing on the offset log)."""
    return StatestreamIllegalStateException(
        f"Cannot start query with id {query_id} as another query with same id is already active. "
        f"Perhaps you are attempting to restart a query from checkpoint that is already active: {detail}. "
        "Stop that query first; a killed one releases the checkpoint with its process."
    )


def concurrent_query_error() -> StatestreamIllegalStateException:
    """Two runs of one query id started at the same moment: the second one is refused."""
    return StatestreamIllegalStateException(
        "[CONCURRENT_QUERY] Another instance of this query was just started by a concurrent session. SQLSTATE: 0A000",
        "CONCURRENT_QUERY",
        None,
        "0A000",
    )


def number_format_error(raw: Any) -> StatestreamNumberFormatException:
    """Java's text for a string that does not parse as a number."""
    return StatestreamNumberFormatException(f'For input string: "{raw}"')


class StatestreamUnsupportedOperationException(
    _JvmShapedException, _PySparkUnsupportedOperationException, StatestreamError
):
    """What PySpark raises for a JVM ``UnsupportedOperationException``."""


class StatestreamArithmeticException(_JvmShapedException, _PySparkArithmeticException, StatestreamError, ArithmeticError):
    """What PySpark raises for a JVM ``ArithmeticException`` (overflows)."""


class StateStoreError(StatestreamError):
    """A state store file is missing, corrupt, or its schema is incompatible."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        return self.error_class


def schema_must_be_nullable_error(column_family: str, schema_text: str) -> StateStoreError:
    """Spark's ``TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE``: with the Avro state encoding, a
    transformWithState variable (``column_family``) whose schema (``schema_text``, as Spark's
    ``StructType.toString`` prints it) has a field that is not nullable."""
    return StateStoreError(
        "[TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE] If Avro encoding is enabled, all the fields in the schema for "
        f"column family {column_family} must be nullable\nwhen using the TransformWithState operator.\n"
        f"Please make the schema nullable. Current schema: {schema_text} SQLSTATE: XXKST",
        "TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE",
    )


class CheckpointError(StatestreamError):
    """A checkpoint log file is missing, corrupt, or written by a newer version."""


class ConcurrentStreamLogUpdateError(CheckpointError):
    """Another writer wrote the log entry this query was about to write: two runs on one
    checkpoint (Spark's CONCURRENT_STREAM_LOG_UPDATE)."""

    error_class = "CONCURRENT_STREAM_LOG_UPDATE"

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.error_class


def concurrent_stream_log_update_error(batch_id: int, path: str) -> ConcurrentStreamLogUpdateError:
    """The offset log already holds ``batch_id`` when this run comes to write it:
    Spark's text, and the file (``path``) the other writer wrote."""
    return ConcurrentStreamLogUpdateError(
        f"[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for {batch_id}. "
        f"Please make sure only one streaming job runs on a specific checkpoint location at a time. ({path} was written by another run)"
    )


class IncompatibleRestartError(StatestreamError):
    """A query restarted on a checkpoint that it cannot continue (and the message says why)."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        return self.error_class


def analysis_error(error_class: str | None, message: str, sql_state: str | None = None, **params: Any) -> StatestreamAnalysisException:
    """Build an analysis error; ``message`` is the full Spark text (with ``[CLASS]`` and SQLSTATE)."""
    return StatestreamAnalysisException(message, error_class, params, sql_state)


#: Spark's conf that selects the watermark propagation (named in the error below)
ALLOW_MULTIPLE_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"


def python_data_source_error(action: str, cause: BaseException) -> StatestreamAnalysisException:
    """Spark's ``PYTHON_DATA_SOURCE_ERROR``: a Python data source's code failed while Spark's
    engine drove it on the driver (``action``: ``initialize source``, ...), with the Python
    traceback as Spark shows it."""
    import traceback

    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source {action}: {detail} SQLSTATE: 38000"
    return analysis_error("PYTHON_DATA_SOURCE_ERROR", message, "38000", action="plan", type=action, msg=detail)


def python_streaming_source_error(action: str, cause: BaseException) -> StatestreamSparkRuntimeException:
    """Spark's ``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR``: a Python streaming source's
    ``initialOffset``, ``latestOffset``, ``partitions`` (``planPartitions``) or ``commit``
    (``commitSource``) raised, with the Python traceback."""
    import traceback

    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform {action}: {detail} SQLSTATE: 38000"
    return StatestreamSparkRuntimeException(message, "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR", {"action": action, "msg": detail}, "38000")


def python_sink_update_mode_error(name: str) -> "StatestreamIllegalArgumentException":
    """Spark's refusal of update mode for a Python data source's streaming writer (its write
    builder truncates, it does not take updates as appends)."""
    return StatestreamIllegalArgumentException(f"requirement failed: {name} does not support Update mode.")


#: the condition of a query whose inputs come from both engines (statestream's own: Spark has no
#: such query, since it has one engine)
MIXED_ENGINES_CONDITION = "STATESTREAM_MIXED_STREAMING_ENGINES"


def mixed_engines_error(spark_inputs: list[str]) -> StatestreamAnalysisException:
    """The refusal at ``start()`` of a query that reads a stream of Spark's own engine
    (``spark.readStream`` on a session statestream does not serve) beside statestream's
    streams: its batches would fail with Spark's "must be executed with writeStream.start()".
    ``spark_inputs`` names those inputs (``rate [timestamp, value]``)."""
    named = "; ".join(spark_inputs) or "a streaming DataFrame of Spark's engine"
    message = (
        f"[{MIXED_ENGINES_CONDITION}] This query reads {len(spark_inputs) or 1} stream(s) through Spark's own streaming "
        f"engine ({named}) beside streams read through statestream; one query runs on one engine. Create that input "
        "with statestream's reader as well: call statestream.enable(spark) before spark.readStream (or run the job with "
        "`statestream run`), or read it with StreamingSession(spark).readStream. SQLSTATE: 42KDE"
    )
    return analysis_error(MIXED_ENGINES_CONDITION, message, "42KDE", inputs=named)


def redefined_watermark_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_3076``: a ``withWatermark`` above another one of the same
    stream, met when the watermark propagation is simulated (a batch whose watermark is not 0)."""
    message = (
        "Redefining watermark is disallowed. You can set the config "
        f"'{ALLOW_MULTIPLE_CONF}' to 'false' to restore the previous behavior. "
        "Note that multiple stateful operators will be disallowed."
    )
    return analysis_error("_LEGACY_ERROR_TEMP_3076", message, None, config=ALLOW_MULTIPLE_CONF)
