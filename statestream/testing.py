"""Test helpers for statestream queries.

``MemoryStream`` is Spark's test source (``org.apache.spark.sql.execution.streaming.MemoryStream``,
which PySpark does not expose): every ``addData`` call becomes the next offset, and ``toDF()`` is
the streaming DataFrame over it::

    from statestream.testing import MemoryStream

    stream = MemoryStream(ss, "k STRING, v INT")      # ss: a StreamingSession (or a SparkSession)
    query = stream.toDF().groupBy("k").count().writeStream.format("memory").queryName("c") ...
    stream.addData([("a", 1), ("b", 2)])
    query.processAllAvailable()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.sources.memory import MemoryStream as _MemoryStreamSource

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["MemoryStream"]


class MemoryStream(_MemoryStreamSource):
    """A ``MemoryStream`` bound to a session: ``addData``/``add_data`` add one batch of rows
    (returning its offset, ``0`` for the first), ``toDF``/``to_df`` give the streaming DataFrame.

    Parameters
    ----------
    session:
        A ``statestream.StreamingSession``, or a ``SparkSession`` (wrapped in a new
        ``StreamingSession``; its queries are then listed in that session's ``streams``).
    schema:
        ``StructType`` or DDL string; a one-column schema takes bare values (``addData([1, 2])``).
    """

    def __init__(self, session: Any, schema: "StructType | str") -> None:
        from statestream.session import StreamingSession

        if not isinstance(session, StreamingSession):
            session = StreamingSession(session)
        super().__init__(session.sparkSession, schema)
        del self.to_df  # the base class sets it per instance; here it is the method below
        self.session = session

    def to_df(self) -> Any:  # type: ignore[override]
        """The streaming DataFrame over this stream (each call gives a new one, as in Spark)."""
        from statestream.readwriter import memory_stream_df

        return memory_stream_df(self.session, self)

    toDF = to_df  # noqa: N815 - Spark's name
