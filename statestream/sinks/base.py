"""The contract between the micro-batch loop and a sink.

Spark: ``Sink.addBatch`` (V1) / ``StreamingWrite``. The loop calls ``add_batch`` once per executed
micro-batch, with the batch id and a DataFrame holding the batch's result, already materialised by
the engine (the stateful work has run before the sink sees it, and reading the DataFrame does not
run it again, so a sink may use it any number of times, or not at all). The same batch id may be
delivered again: after a crash, and within a run when a block of the batch's materialised rows
was lost with its executor (the loop then runs the whole batch again). Sinks that promise
exactly-once (files, memory) must make ``add_batch`` idempotent per batch id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.plan.logical import LogicalPlan

__all__ = ["Sink"]


class Sink(ABC):
    """A streaming sink."""

    @abstractmethod
    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        """Write one micro-batch's result (``output_mode`` is ``append``/``update``/``complete``)."""

    def num_output_rows(self) -> int:
        """Rows written by the last ``add_batch`` (-1 when unknown, like Spark's V1 sinks)."""
        return -1

    def description(self) -> str:
        """``sink.description`` in progress reports (e.g. ``MemorySink``, ``ForeachBatchSink``)."""
        return type(self).__name__

    def on_query_start(self, checkpoint_location: str, plan: "LogicalPlan") -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Called once by ``start()`` with the query's checkpoint location and logical plan (its
        ``schema`` is the output's), before the first batch; an exception raised here is raised by ``start()``.
        The memory sink refuses a restart it cannot recover from and registers its view here."""

    def stop(self) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Release resources."""
