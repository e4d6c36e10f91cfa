"""The errors of transformWithState's handle and state variables, as Spark's state server
raises them and as PySpark's client wraps them: a ``PySparkRuntimeError`` whose text is the
client's prefix for the call (:class:`Prefix`) followed by Spark's error, with its class and
SQLSTATE in the text (``STATEFUL_PROCESSOR_*``, ``ILLEGAL_STATE_STORE_VALUE.*``).

Examples
--------
>>> error = stateful_processor_error(Prefix.UPDATE_VALUE, null_value("count"))
>>> type(error).__name__, str(error).split("]")[0]
('PySparkRuntimeError', 'Error updating value state: [ILLEGAL_STATE_STORE_VALUE.NULL_VALUE')
"""

from __future__ import annotations

__all__ = [
    "Prefix",
    "empty_list",
    "implicit_key_not_found",
    "invalid_handle_state",
    "invalid_time_mode",
    "not_initialized",
    "null_value",
    "state_already_exists",
    "stateful_processor_error",
    "ttl_not_positive",
    "ttl_time_mode",
]


class Prefix:
    """What PySpark's client puts before the state server's error, per call."""

    CONTAINS_KEY = "Error checking if map state contains key: "
    MAP_EXISTS = "Error checking map state exists: "
    VALUE_EXISTS = "Error checking value state exists: "
    CLEAR_MAP = "Error clearing map state: "
    CLEAR_VALUE = "Error clearing value state: "
    DELETE_STATE = "Error deleting state: "
    DELETE_TIMER = "Error deleting timer: "
    GET_VALUE_STATE = "Error getting value state: "
    GET_VALUE = "Error getting value: "
    INIT_LIST = "Error initializing list state: "
    INIT_MAP = "Error initializing map state: "
    INIT_VALUE = "Error initializing value state: "
    LIST_TIMERS = "Error listing timers: "
    REGISTER_TIMER = "Error register timer: "
    REMOVE_MAP_KEY = "Error removing key from map state: "
    UPDATE_MAP = "Error updating map state value: "
    UPDATE_VALUE = "Error updating value state: "


def stateful_processor_error(prefix: str, message: str) -> Exception:
    """The ``PySparkRuntimeError`` a processor's call gets: ``prefix`` then ``message``."""
    from pyspark.errors import PySparkRuntimeError  # lazy: the pure areas of this package come first

    return PySparkRuntimeError(f"{prefix}{message}")


def invalid_handle_state(operation: str, state: str) -> str:
    """A handle call in a phase that does not allow it (``init`` only, a key being processed...)."""
    return (
        "[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE] Failed to perform stateful "
        f"processor operation={operation} with invalid handle state={state}. SQLSTATE: 42802"
    )


def invalid_time_mode(operation: str, time_mode: str) -> str:
    """A timer call in a query without a time mode (``time_mode`` as Spark prints it: ``NoTime``)."""
    return (
        "[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE] Failed to perform stateful "
        f"processor operation={operation} with invalid timeMode={time_mode} SQLSTATE: 42802"
    )


def ttl_time_mode(state_name: str, time_mode: str) -> str:
    """A TTL outside processing time (``time_mode`` as Spark prints it)."""
    return (
        f"[STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL] Cannot use TTL for state={state_name} in "
        f"timeMode={time_mode}, use TimeMode.ProcessingTime() instead. SQLSTATE: 42802"
    )


def ttl_not_positive(state_name: str) -> str:
    """A TTL of zero or less."""
    return (
        "[STATEFUL_PROCESSOR_TTL_DURATION_MUST_BE_POSITIVE] TTL duration must be greater than zero for "
        f"State store operation=update on state={state_name}. SQLSTATE: 42802"
    )


def not_initialized(kind: str, state_name: str) -> str:
    """Spark's state server's answer to a call on a variable that ``deleteIfExists`` dropped."""
    return f"{kind.capitalize()} state {state_name} is not initialized."


def empty_list(state_name: str) -> str:
    """A list state given no values to write."""
    return (
        "[ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE] Illegal value provided to the State Store Cannot write "
        f"empty list values to State Store for StateName {state_name}. SQLSTATE: 42601"
    )


def null_value(state_name: str) -> str:
    """A value state given ``None`` to write."""
    return (
        "[ILLEGAL_STATE_STORE_VALUE.NULL_VALUE] Illegal value provided to the State Store Cannot write null values "
        f"to State Store for StateName {state_name}. SQLSTATE: 42601"
    )


def state_already_exists(kind: str, state_name: str) -> str:
    """A variable declared twice."""
    return f"{kind.capitalize()} state {state_name} already exists"


def implicit_key_not_found(state_name: str) -> str:
    """A state call outside a key being processed (in ``init`` or ``close``)."""
    return f"Implicit key not found in state store for stateName={state_name}"
