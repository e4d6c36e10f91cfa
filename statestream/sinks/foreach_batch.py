"""``foreachBatch``: hand each micro-batch's DataFrame to user code.

Spark: ``ForeachBatchSink``. The function is called with ``(df, batch_id)`` for every executed
batch, including a batch re-executed after a restart (same id again): exactly-once is the
function's business, typically by keying its writes on ``batch_id``.

An exception from the function fails the query with Spark's ``FOREACH_BATCH_USER_FUNCTION_ERROR``.
Its reason is the text PySpark's engine gets back from the Python function, which crosses Py4J
there: ``An exception was raised by the Python Proxy. Return Message: `` and the traceback. The
original exception is the error's ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from statestream.sinks.base import Sink
from statestream.errors import foreach_batch_user_function_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ForeachBatchSink"]


class ForeachBatchSink(Sink):
    """Calls ``func(df, batch_id)`` once per batch.

    Parameters
    ----------
    func:
        Any callable taking ``(DataFrame, int)``; its return value is ignored and an exception
        fails the query (wrapped as Spark wraps it, see the module's docstring).
    """

    def __init__(self, func: Callable[["DataFrame", int], Any]) -> None:
        if not callable(func):
            raise TypeError(f"foreachBatch needs a callable, got {type(func).__name__}")
        self.func = func

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        try:
            self.func(df, batch_id)
        except Exception as exc:  # any user failure, as Spark wraps any
            raise foreach_batch_user_function_error(exc) from exc

    def num_output_rows(self) -> int:
        return -1  # Spark cannot know what the function wrote

    def description(self) -> str:
        return "ForeachBatchSink"
