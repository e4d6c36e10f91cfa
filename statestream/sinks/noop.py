"""The no-op sink: ``writeStream.format("noop")``.

Spark: ``NoopTable`` / ``NoopStreamingWrite``. Every batch runs (the state is updated, the
watermark moves, the progress is reported), and its rows are thrown away. In statestream the batch
is materialised by the engine before any sink sees it, so running it is already done; the sink only
counts the rows, because Spark's no-op sink is a V2 sink and reports how many rows it was given.
Every output mode is accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statestream.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["NoopSink"]


class NoopSink(Sink):
    """Discards every batch, reporting its row count as ``sink.numOutputRows``."""

    def __init__(self) -> None:
        self._last_rows = -1

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        self._last_rows = df.count()

    def num_output_rows(self) -> int:
        return self._last_rows

    def description(self) -> str:
        return "NoopTable"
