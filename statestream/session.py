"""StreamingSession: the entry point, used in place of ``spark`` for streaming queries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.errors import spark_connect_session_error
from statestream.query import StreamingQueryManager

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statestream.batch_reader import DataFrameReader
    from statestream.checkpoint_manager import StreamingCheckpointManager
    from statestream.reader import DataStreamReader

__all__ = ["StreamingSession"]

def use_driver_python(spark: Any) -> None:
    """Spark's Python workers run ``PYSPARK_PYTHON`` (default ``python3`` on the PATH), which in
    an unactivated virtualenv is not the interpreter that has statestream and pyarrow; when the
    variable is unset and the workers run on this machine (a ``local`` master), they run the
    driver's own interpreter instead."""
    import os
    import sys

    if os.environ.get("PYSPARK_PYTHON"):
        return
    context = getattr(spark, "sparkContext", None)
    master = str(getattr(context, "master", "") or "")
    if not master.startswith(("local", "local-cluster")):
        return  # executors on other machines: the driver's path means nothing there
    if context is not None and getattr(context, "pythonExec", None) in (None, "python3", "python"):
        context.pythonExec = sys.executable  # read when each Python function is shipped


#: streaming global temporary views (``global_temp.<name>``), shared by every StreamingSession
_GLOBAL_VIEWS: dict[str, Any] = {}


class StreamingSession:
    """Wraps a ``SparkSession``; ``readStream`` and ``streams`` behave as Spark's.

    >>> ss = StreamingSession(spark)                                          # doctest: +SKIP
    >>> counts = ss.readStream.format("rate").load().groupBy("value").count() # doctest: +SKIP
    """

    def __init__(self, spark: "SparkSession") -> None:
        from statestream.dataframe import install_stream_on_the_right

        if type(spark).__module__.startswith("pyspark.sql.connect"):
            raise spark_connect_session_error(spark)
        self.sparkSession = spark
        use_driver_python(spark)
        install_stream_on_the_right()
        self._streams = StreamingQueryManager()
        #: streaming temporary views of this session (lower-case name -> statestream DataFrame)
        self._views: dict[str, Any] = {}

    def _register_view(self, name: str, df: Any, replace: bool, is_global: bool = False) -> None:
        """``df.createTempView(name)`` and its variants: the stream's template under ``name`` in
        Spark's catalog (Spark's own checks and errors), the stream itself in this session."""
        template = df._plan.template  # noqa: SLF001
        if is_global:
            (template.createOrReplaceGlobalTempView if replace else template.createGlobalTempView)(name)
            _GLOBAL_VIEWS[f"global_temp.{name.lower()}"] = df
        else:
            (template.createOrReplaceTempView if replace else template.createTempView)(name)
            self._views[name.lower()] = df

    def _view(self, name: str) -> Any:
        key = name.lower()
        return self._views.get(key) or _GLOBAL_VIEWS.get(key)

    def table(self, tableName: str) -> Any:  # noqa: N802,N803
        """A streaming temporary view of this session as its DataFrame; any other table is read by
        Spark as a batch DataFrame (``readStream.table`` reads a stream)."""
        view = self._view(tableName)
        return view if view is not None else self.sparkSession.table(tableName)

    def sql(self, sqlQuery: str, args: Any = None, **kwargs: Any) -> Any:  # noqa: N803
        """Spark SQL; over a streaming temporary view the result is a stream (stateless SQL only,
        see ``plan/sql.py``), otherwise Spark's batch DataFrame."""
        from statestream.errors import not_supported_yet
        from statestream.plan.sql import relations_in

        streams = sorted({n for n in relations_in(self.sparkSession, sqlQuery) if self._view(n) is not None})
        if not streams:
            return self.sparkSession.sql(sqlQuery, args, **kwargs)
        if any(n.startswith("global_temp.") for n in streams):
            raise not_supported_yet("StreamingSession", "sql", f"SQL over a streaming global temporary view ({', '.join(streams)})")
        if len(streams) > 1 or args or kwargs:
            raise not_supported_yet("StreamingSession", "sql", f"SQL over several streaming views or with arguments ({', '.join(streams)})")
        return self._view(streams[0])._sql_over_view(streams[0], sqlQuery)  # noqa: SLF001

    @property
    def read(self) -> "DataFrameReader":
        """Spark's batch reader, plus the ``statestore`` and ``state-metadata`` sources over
        statestream checkpoints (``batch_reader``)."""
        from statestream.batch_reader import DataFrameReader

        return DataFrameReader(self.sparkSession)

    @property
    def checkpointManager(self) -> "StreamingCheckpointManager":  # noqa: N802
        """Offline operations on a stopped query's checkpoint: ``repartition``, ``rollback``,
        ``check`` (of a changed query)."""
        from statestream.checkpoint_manager import StreamingCheckpointManager

        return StreamingCheckpointManager(self)

    @property
    def _streamingCheckpointManager(self) -> "StreamingCheckpointManager":  # noqa: N802
        """Spark's (private) name of :attr:`checkpointManager`."""
        return self.checkpointManager

    def __getattr__(self, name: str) -> Any:
        """Everything else of the SparkSession (``createDataFrame``, ``range``, ``udf``,
        ``catalog``, ``version``, ...): a job that says ``StreamingSession(spark)`` where it said
        ``spark`` keeps its batch code."""
        if name.startswith("_") or name == "sparkSession":
            raise AttributeError(name)
        return getattr(self.sparkSession, name)

    @property
    def readStream(self) -> "DataStreamReader":  # noqa: N802
        from statestream.reader import DataStreamReader

        return DataStreamReader(self)

    @property
    def streams(self) -> StreamingQueryManager:
        return self._streams

    def memoryStream(self, schema) -> "Any":  # noqa: N802
        """A ``MemoryStream`` (for tests): ``add_data(rows)`` adds one batch; ``toDF()`` is the
        streaming DataFrame over it."""
        from statestream.reader import memory_stream_df
        from statestream.sources.memory import MemoryStream

        stream = MemoryStream(self.sparkSession, schema)
        stream.to_df = lambda: memory_stream_df(self, stream)
        stream.toDF = stream.to_df
        return stream

    @property
    def conf(self):
        return self.sparkSession.conf
