"""The contract between the micro-batch loop and a streaming source.

Spark: ``SupportsAdmissionControl`` / ``MicroBatchStream``. Offsets are plain JSON-serialisable
values (dicts, ints); the loop writes them into the offset log as JSON, one line per source, and
hands them back verbatim after a restart, so a source must be able to rebuild a batch from a
``(start, end)`` pair alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["Source", "ReadLimit", "empty_batch"]

Offset = Any  # JSON-serialisable


def empty_batch(spark: "SparkSession", schema: "StructType") -> "DataFrame":
    """An empty batch DataFrame with exactly ``schema``, for a source with nothing new.

    Built on an RDD with no partitions: scanning it schedules no task, while
    ``spark.createDataFrame([], schema)`` parallelises an empty list into one task per core (about
    half a second per no-data batch). Not a ``LocalRelation`` either: Spark's optimizer knows that
    one is empty and folds the aggregation and exchange above it away
    (``PropagateEmptyRelation``), so the state tasks of a no-data batch, which evict and emit,
    would never run. After the exchange there are still one task per state partition.
    """
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)


class ReadLimit:
    """What a trigger allows a source to admit in one batch (Spark's ``ReadLimit``)."""

    ALL_AVAILABLE: "ReadLimit"

    def __init__(self, max_files: int | None = None, max_rows: int | None = None, max_bytes: int | None = None) -> None:
        self.max_files = max_files
        self.max_rows = max_rows
        self.max_bytes = max_bytes


ReadLimit.ALL_AVAILABLE = ReadLimit()


class Source(ABC):
    """A streaming source.

    Life cycle (driven by ``MicroBatchExecution``):

    1. ``__init__`` with the reader's options and, if the query has a checkpoint,
       ``metadata_dir`` = ``<checkpoint>/sources/<i>`` for the source's private bookkeeping.
    2. ``prepare_for_trigger_available_now()`` once, when the trigger is ``availableNow``: the
       source fixes the end of the data it will serve in this run. On a restart,
       ``set_latest_seen_offset(end)`` with the last logged batch's end offset.
    3. Per batch: ``latest_offset(start, limit)`` (``start`` is the previous batch's end offset or
       ``None``); if it differs from ``start`` the batch has new data for this source.
    4. ``get_batch(spark, start, end)`` returns the rows in ``(start, end]`` as a batch
       DataFrame with exactly ``schema``. It must return the same rows for the same offsets
       (re-execution after a crash relies on it).
    5. ``commit(end)`` once the *next* batch's offsets are logged (Spark's moment: a file source's
       ``cleanSource`` acts then, so the last batch's files stay until another batch is planned):
       data up to ``end`` may be discarded.
    6. ``stop()``.
    """

    #: Short name shown in ``explain()`` (``StreamingRelation <name>``) and progress.
    short_name: str = "source"

    @property
    @abstractmethod
    def schema(self) -> "StructType":
        """The source's output schema."""

    @abstractmethod
    def latest_offset(self, start: Offset | None, limit: ReadLimit) -> Offset | None:
        """The end offset of the next batch given the last processed offset ``start``
        (``None`` when the source has no data at all yet)."""

    @abstractmethod
    def get_batch(self, spark: "SparkSession", start: Offset | None, end: Offset) -> "DataFrame":
        """The rows after ``start`` up to and including ``end``."""

    def empty_relation(self, spark: "SparkSession") -> "DataFrame | None":
        """No rows, read the way a batch with rows is read (a file source: its reader over no
        files), for a batch plan kept from such a batch to serve a batch where this source has
        nothing new (``runtime.batch_plan_reuse``); None when the source's batches are not
        read that way."""
        return None

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit.ALL_AVAILABLE

    def has_new_data(self, start: Offset | None, end: Offset | None) -> bool:
        """Whether ``(start, end]`` holds data: the offsets differ (a Python data source's
        offsets are compared as JSON text, as Spark compares them)."""
        return end is not None and end != start

    def prepare_for_trigger_available_now(self) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Called once at the start of an ``availableNow`` run."""

    def set_latest_seen_offset(self, offset: Offset) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Called once on a restart, before any batch, with the end offset of the last batch in
        the offset log, committed or not (Spark's ``AcceptsLatestSeenOffset``)."""

    def commit(self, end: Offset) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Everything up to ``end`` is processed and committed."""

    def stop(self) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
        """Release resources."""

    def metrics(self, end: Offset | None) -> dict[str, str]:
        """The source's ``metrics`` in progress for a batch ending at ``end`` (Spark's
        ``ReportsSourceMetrics``; e.g. Kafka's offsets behind latest)."""
        return {}

    #: Spark's ``SupportsAdmissionControl``: a batch's progress shows the source's
    #: :meth:`reported_latest_offset` as ``latestOffset``, null when it reports none; for the
    #: other sources it shows the batch's end offset
    admission_controlled: bool = False

    def reported_latest_offset(self) -> Offset | None:
        """``latestOffset`` in progress: the latest offset seen before rate limits, where the
        source knows it (None: null for an admission-controlled source, else the batch's end
        offset)."""
        return None

    def description(self) -> str:
        """``description`` in progress reports (e.g. ``RateStreamV2[rowsPerSecond=10, ...]``)."""
        return type(self).__name__
