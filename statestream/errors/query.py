"""Errors of a streaming query's life: starting it next to another run, and its failure as
``awaitTermination()`` and ``exception()`` show it.

>>> error = stream_failed_error("q-1", "r-1", ValueError("boom"))
>>> error.getCondition(), str(error)
('STREAM_FAILED', '[STREAM_FAILED] Query [id = q-1, runId = r-1] terminated with exception: boom SQLSTATE: XXKST')
"""

from __future__ import annotations

from statestream.errors.spark_shaped import (
    StatestreamIllegalArgumentException,
    StatestreamIllegalStateException,
    StatestreamStreamingQueryException,
)

__all__ = [
    "stream_failed_error",
    "query_exception_view",
    "duplicate_query_name_error",
    "duplicate_query_id_error",
    "checkpoint_in_use_error",
    "concurrent_query_error",
]


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
