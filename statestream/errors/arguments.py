"""The checks PySpark makes of a method's arguments in Python, before it calls the JVM, and
Java's and Scala's refusals of a number or a boolean that does not parse.

>>> checked_timeout(2, allow_zero=False)
2.0
>>> checked_timeout("hello", allow_zero=False)
Traceback (most recent call last):
...
pyspark.errors.exceptions.base.PySparkValueError: [VALUE_NOT_POSITIVE] Value for `timeout` must be positive, got 'str'.
"""

from __future__ import annotations

from typing import Any

from pyspark.errors import PySparkValueError as _PySparkValueError

from statestream.errors.spark_shaped import StatestreamIllegalArgumentException, StatestreamNumberFormatException

__all__ = [
    "value_not_non_empty_str_error",
    "value_not_true_error",
    "only_allow_single_trigger_error",
    "value_not_positive_error",
    "checked_timeout",
    "number_format_error",
    "boolean_format_error",
]


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


def number_format_error(raw: Any) -> StatestreamNumberFormatException:
    """Java's text for a string that does not parse as a number."""
    return StatestreamNumberFormatException(f'For input string: "{raw}"')


def boolean_format_error(raw: Any) -> StatestreamIllegalArgumentException:
    """Scala's ``toBoolean`` refusal of a string that is neither true nor false (a boolean
    option Spark reads that way: the Kafka source's ``includeHeaders``, the state source's
    ``readChangeFeed``)."""
    return StatestreamIllegalArgumentException(f'For input string: "{raw}"')
