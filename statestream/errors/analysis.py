"""Errors of planning a streaming query: what Spark's analyzer refuses, and what statestream
cannot plan yet.

>>> redefined_watermark_error().getCondition()
'_LEGACY_ERROR_TEMP_3076'
"""

from __future__ import annotations

import traceback

from statestream.errors.base import StatestreamError
from statestream.errors.spark_shaped import StatestreamAnalysisException, StatestreamArithmeticException, analysis_error

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "MIXED_ENGINES_CONDITION",
    "UnsupportedAggregateError",
    "IntervalArithmeticError",
    "python_data_source_error",
    "mixed_engines_error",
    "redefined_watermark_error",
]


class UnsupportedAggregateError(StatestreamError, ValueError):
    """An aggregate expression statestream cannot decompose yet (raised from ``start()``)."""


class IntervalArithmeticError(StatestreamArithmeticException):
    """Spark's ``ArithmeticException`` for an interval whose duration overflows 64 bits.

    >>> IntervalArithmeticError().getCondition()
    'INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION'
    """

    def __init__(self, message: str | None = None) -> None:
        message = message or (
            "[INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION] Integer overflow while operating with "
            "intervals. Try devising appropriate values for the interval parameters. SQLSTATE: 22015"
        )
        super().__init__(message, "INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION", {}, "22015")


#: Spark's conf that selects the watermark propagation (named in the error below)
ALLOW_MULTIPLE_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"


def python_data_source_error(action: str, cause: BaseException) -> StatestreamAnalysisException:
    """Spark's ``PYTHON_DATA_SOURCE_ERROR``: a Python data source's code failed while Spark's
    engine drove it on the driver (``action``: ``initialize source``, ...), with the Python
    traceback as Spark shows it."""
    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source {action}: {detail} SQLSTATE: 38000"
    return analysis_error("PYTHON_DATA_SOURCE_ERROR", message, "38000", action="plan", type=action, msg=detail)


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
