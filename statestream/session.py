"""StreamingSession: the entry point, used in place of ``spark`` for streaming queries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.query import StreamingQueryManager

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statestream.readwriter import DataStreamReader

__all__ = ["StreamingSession"]


class StreamingSession:
    """Wraps a ``SparkSession``; ``readStream`` and ``streams`` behave as Spark's.

    >>> ss = StreamingSession(spark)                                          # doctest: +SKIP
    >>> counts = ss.readStream.format("rate").load().groupBy("value").count() # doctest: +SKIP
    """

    def __init__(self, spark: "SparkSession") -> None:
        self.sparkSession = spark
        self._streams = StreamingQueryManager()

    @property
    def readStream(self) -> "DataStreamReader":  # noqa: N802
        from statestream.readwriter import DataStreamReader

        return DataStreamReader(self)

    @property
    def streams(self) -> StreamingQueryManager:
        return self._streams

    def memoryStream(self, schema) -> "Any":  # noqa: N802
        """A ``MemoryStream`` (for tests): ``add_data(rows)`` adds one batch; ``toDF()`` is the
        streaming DataFrame over it."""
        from statestream.readwriter import memory_stream_df
        from statestream.sources.memory import MemoryStream

        stream = MemoryStream(self.sparkSession, schema)
        stream.to_df = lambda: memory_stream_df(self, stream)
        stream.toDF = stream.to_df
        return stream

    @property
    def conf(self):
        return self.sparkSession.conf
