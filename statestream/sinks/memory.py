"""The memory sink: all output rows kept on the driver and queryable as a temp view.

Spark: ``MemorySink``. Like Spark's, it is meant for tests and small outputs: every batch is
collected. Rows of append/update batches are added; a complete-mode batch replaces everything.
A batch id not newer than the last one added is skipped, which makes re-delivery after a crash
harmless. After every batch the temp view ``queryName`` in the *user's* session is replaced by a
DataFrame over the rows held, so ``spark.sql("select * from <queryName>")`` and
``spark.table(queryName)`` see the output.

Starting a query (:meth:`MemorySink.on_query_start`) registers the view at once, empty, with the
query's schema, as Spark's ``start()`` does, also when a restart on an existing checkpoint has no
new data to run. Like Spark, only a complete-mode query may start again on a checkpoint that has
offsets: the rows of earlier runs are gone with their sink, so an append or update query is
refused with Spark's error.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import memory_sink_query_name_error, memory_sink_recovery_error
from statestream.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["MemorySink"]

logger = logging.getLogger(__name__)


def _offsets_path(checkpoint_location: str) -> str:
    """``<checkpoint>/offsets`` as Hadoop's ``Path`` prints it (``file:///x`` becomes ``file:/x``)."""
    root = checkpoint_location.rstrip("/") or "/"
    if root.startswith("file://"):
        root = "file:/" + root[len("file://") :].lstrip("/")
    return f"{root}/offsets" if root != "/" else "/offsets"


class MemorySink(Sink):
    """Keeps every batch's rows and publishes them as temp view ``query_name``.

    Parameters
    ----------
    spark:
        The user's session: the temp view is registered there (temp views are per session, and
        the engine runs batches on a cloned one).
    query_name:
        Required; the view name.
    schema:
        When known up front the (empty) view exists from the start, as in Spark; otherwise it
        appears with :meth:`on_query_start` or the first batch.
    output_mode:
        The query's output mode; anything but ``complete`` refuses to restart on a checkpoint
        with offsets (:meth:`on_query_start`).
    """

    def __init__(
        self,
        spark: "SparkSession",
        query_name: str | None,
        schema: "StructType | None" = None,
        output_mode: str | None = None,
    ) -> None:
        if not query_name:
            raise memory_sink_query_name_error()
        self.spark = spark
        self.query_name = query_name
        self.schema = schema
        self.output_mode = (output_mode or "append").lower()
        self._batches: list[tuple[int, list["Row"]]] = []
        self._latest_batch_id: int | None = None
        self._last_rows = 0
        self._lock = threading.Lock()
        if schema is not None:
            self._refresh_view()

    def on_query_start(self, checkpoint_location: str, plan: object) -> None:
        """Spark's ``start()`` for the memory sink: refuse to recover an append or update query
        from a checkpoint with offsets, then (re)register the view, empty, with the query's
        schema."""
        if self.output_mode != "complete" and CheckpointFileManager(checkpoint_location).exists("offsets"):
            raise memory_sink_recovery_error(_offsets_path(checkpoint_location))
        with self._lock:
            if self.schema is None:
                self.schema = getattr(plan, "schema", None)
        if self.schema is not None:
            self._refresh_view()

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        with self._lock:
            if self._latest_batch_id is not None and batch_id <= self._latest_batch_id:
                logger.debug("Skipping already committed batch: %d", batch_id)
                self._last_rows = 0
                return
        rows = df.collect()
        with self._lock:
            if output_mode.lower() == "complete":
                self._batches = [(batch_id, rows)]
            else:
                self._batches.append((batch_id, rows))
            self._latest_batch_id = batch_id
            self._last_rows = len(rows)
            if self.schema is None:
                self.schema = df.schema
        self._refresh_view()

    def _refresh_view(self) -> None:
        assert self.schema is not None
        frame = self.spark.createDataFrame(self.all_rows(), self.schema)
        frame.createOrReplaceTempView(self.query_name)

    def all_rows(self) -> list["Row"]:
        """Every row currently held (for complete mode: the last batch's)."""
        with self._lock:
            return [r for _, rows in self._batches for r in rows]

    allData = all_rows  # noqa: N815 - Spark's name

    def latest_batch_rows(self) -> list["Row"]:
        """Rows of the last batch added (``[]`` before the first)."""
        with self._lock:
            return list(self._batches[-1][1]) if self._batches else []

    latestBatchData = latest_batch_rows  # noqa: N815 - Spark's name

    @property
    def latest_batch_id(self) -> int | None:
        return self._latest_batch_id

    def clear(self) -> None:
        """Drop all rows (Spark's ``clear()``, used by tests that restart a query)."""
        with self._lock:
            self._batches = []
            self._latest_batch_id = None
        if self.schema is not None:
            self._refresh_view()

    def num_output_rows(self) -> int:
        return self._last_rows

    def description(self) -> str:
        return "MemorySink"

    def __repr__(self) -> str:
        return f"MemorySink[{self.query_name}, {len(self.all_rows())} rows]"
