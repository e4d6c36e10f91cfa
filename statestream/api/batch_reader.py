"""``StreamingSession.read``: Spark's DataFrameReader, with the state data sources added.

Every format Spark reads is read by Spark (the reader's settings are replayed on
``spark.read``); ``statestore`` and ``state-metadata`` read statestream's checkpoints
(``tools.state_reader``), as Spark's own sources of those names read Spark's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.session import SparkSession as ClassicSparkSession

from statestream.errors import schema_not_supported_error
from statestream.tools.state_reader import (
    STATE_METADATA_FORMAT,
    STATE_STORE_FORMAT,
    read_state_metadata,
    read_state_store,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DataFrameReader"]


class DataFrameReader:
    """PySpark's ``DataFrameReader`` surface (``format``, ``option``, ``options``, ``schema``,
    ``load`` and the per-format shortcuts), chaining like it.

    Examples
    --------
    >>> spark.range(3).write.parquet(f"{tmp}/batch_reader_class")
    >>> ss = StreamingSession(spark)
    >>> ss.read.format("parquet").load(f"{tmp}/batch_reader_class").count()
    3
    """

    def __init__(self, spark: "SparkSession") -> None:
        self._spark = spark
        self._format: str | None = None
        self._options: dict[str, Any] = {}
        self._schema: Any = None

    def format(self, source: str) -> "DataFrameReader":
        """Set the format, as PySpark's ``DataFrameReader.format``; ``"statestore"`` and
        ``"state-metadata"`` read statestream checkpoints, every other format is Spark's.

        Returns
        -------
        DataFrameReader
            This reader.
        """
        self._format = source
        return self

    def option(self, key: str, value: Any) -> "DataFrameReader":
        """Set an option, as PySpark's ``DataFrameReader.option`` (for the state sources:
        ``batchId``, ``operatorId``, ``storeName``, ...).

        Returns
        -------
        DataFrameReader
            This reader.
        """
        self._options[key] = value
        return self

    def options(self, **options: Any) -> "DataFrameReader":
        """Set several options, as PySpark's ``DataFrameReader.options``.

        Returns
        -------
        DataFrameReader
            This reader.
        """
        self._options.update(options)
        return self

    def schema(self, schema: Any) -> "DataFrameReader":
        """Set the schema, as PySpark's ``DataFrameReader.schema``; the state sources refuse one at
        ``load()``, as Spark's do.

        Returns
        -------
        DataFrameReader
            This reader.
        """
        self._schema = schema
        return self

    def _ours(self) -> str | None:
        name = (self._format or "").lower()
        return name if name in (STATE_STORE_FORMAT, STATE_METADATA_FORMAT) else None

    def _spark_reader(self) -> Any:
        # PySpark's own reader: the session's ``read`` is this class's when statestream.enable() serves it
        reader = ClassicSparkSession.read.fget(self._spark)  # type: ignore[attr-defined]
        if self._format is not None:
            reader = reader.format(self._format)
        if self._options:
            reader = reader.options(**self._options)
        if self._schema is not None:
            reader = reader.schema(self._schema)
        return reader

    def load(self, path: Any = None, format: str | None = None, schema: Any = None, **options: Any) -> "DataFrame":  # noqa: A002
        """A batch DataFrame, as PySpark's ``DataFrameReader.load``: Spark reads every format but the
        state sources, which read the statestream checkpoint at ``path`` (or the ``path`` option).

        Parameters
        ----------
        path : str, optional
            What to read; for the state sources, a query's checkpoint location.
        format : str, optional
            Sets the format, as ``format()`` would.
        schema : StructType or str, optional
            Sets the schema, as ``schema()`` would.
        **options
            Set as ``options()`` would.

        Returns
        -------
        pyspark.sql.DataFrame
            A batch (not streaming) DataFrame.

        Raises
        ------
        AnalysisException
            Spark's error of a schema given to a state source.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("b",), ("a",)])
        0
        >>> checkpoint = f"{tmp}/batch_reader_load"
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint).start()
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> state = ss.read.format("statestore").load(checkpoint)
        >>> state.isStreaming
        False
        >>> state.count()
        2
        """
        if format is not None:
            self.format(format)
        if schema is not None:
            self.schema(schema)
        self._options.update(options)
        ours = self._ours()
        if ours is None:
            return self._spark_reader().load(path)

        if self._schema is not None:
            raise schema_not_supported_error(ours)
        path = path if path is not None else self._options.get("path")
        if ours == STATE_METADATA_FORMAT:
            return read_state_metadata(self._spark, path)
        return read_state_store(self._spark, self._options, path)

    def __getattr__(self, name: str) -> Any:
        # parquet, json, csv, table, jdbc, orc, text, xml: Spark's, with the settings so far
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._spark_reader(), name)
