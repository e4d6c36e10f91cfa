"""``MemoryStream``: a source fed from the test, one ``add_data`` call per batch of rows.

Spark: ``MemoryStream``. Offsets are integers: the first ``add_data`` returns ``0``, the next
``1``, ... (Spark's ``LongOffset``), and the rows of ``(start, end]`` are those of the calls
``start+1 .. end``. Rows stay on the driver (that is the point of a test source); a batch
DataFrame is built from them with ``spark.createDataFrame(rows, schema)``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from statestream.sources.base import ReadLimit, Source
from statestream.sources.files import parse_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["MemoryStream"]

logger = logging.getLogger(__name__)


class MemoryStream(Source):
    """A source whose batches are exactly the row lists passed to :meth:`add_data`.

    Parameters
    ----------
    spark:
        The session batch DataFrames are created on when ``get_batch`` gets none.
    schema:
        ``StructType`` or DDL string (``"k STRING, ts TIMESTAMP"``).

    Examples
    --------
    >>> ms = MemoryStream(spark, "a INT")                      # doctest: +SKIP
    >>> ms.add_data([(1,), (2,)])                              # doctest: +SKIP
    0
    """

    short_name = "MemoryStream"

    #: Set by the public API (``toDF()``): a callable returning a streaming DataFrame over this source.
    to_df: Callable[[], Any] | None = None

    def __init__(self, spark: "SparkSession | None", schema: "StructType | str") -> None:
        self.spark = spark
        parsed = parse_schema(schema)
        if parsed is None:
            raise ValueError("MemoryStream needs a schema")
        self._schema = parsed
        self._batches: list[list[Any]] = []
        self._lock = threading.Lock()
        self.to_df = None

    @property
    def schema(self) -> "StructType":
        return self._schema

    def _normalise(self, row: Any) -> Any:
        # A scalar is a one-column row, like MemoryStream[Int] in Spark.
        if len(self._schema.fields) == 1 and not isinstance(row, (tuple, list, dict)) and not hasattr(row, "__fields__"):
            return (row,)
        return row

    def add_data(self, rows: Iterable[Any]) -> int:
        """Append one batch of rows; returns its offset (``0`` for the first call)."""
        batch = [self._normalise(r) for r in rows]
        with self._lock:
            self._batches.append(batch)
            offset = len(self._batches) - 1
        logger.debug("MemoryStream: added %d rows at offset %d", len(batch), offset)
        return offset

    addData = add_data  # noqa: N815 - Spark's name, handy in tests ported from Scala

    @property
    def current_offset(self) -> int | None:
        with self._lock:
            return len(self._batches) - 1 if self._batches else None

    def latest_offset(self, start: int | None, limit: ReadLimit) -> int | None:
        return self.current_offset

    def rows_between(self, start: int | None, end: int) -> list[Any]:
        """The rows of ``(start, end]``, in the order they were added."""
        lo = -1 if start is None else int(start)
        hi = int(end)
        with self._lock:
            if hi >= len(self._batches):
                raise ValueError(f"MemoryStream has no offset {hi} (latest is {len(self._batches) - 1})")
            return [r for b in self._batches[lo + 1 : hi + 1] for r in b]

    def get_batch(self, spark: "SparkSession", start: int | None, end: int) -> "DataFrame":
        session = spark if spark is not None else self.spark
        assert session is not None, "MemoryStream.get_batch needs a SparkSession"
        return session.createDataFrame(self.rows_between(start, end), self._schema)

    def description(self) -> str:
        return "MemoryStream[" + ",".join(f.name for f in self._schema.fields) + "]"
