"""StreamingSession: the entry point, used in place of ``spark`` for streaming queries."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from pyspark.sql.session import SparkSession as ClassicSparkSession

from statestream.api.batch_reader import DataFrameReader
from statestream.api.checkpoint_manager import StreamingCheckpointManager
from statestream.api.dataframe import install_stream_on_the_right
from statestream.errors import not_supported_yet, spark_connect_session_error
from statestream.plan.sql import relations_in
from statestream.api.query import StreamingQueryManager
from statestream.api.reader import DataStreamReader, memory_stream_df
from statestream.sources.memory import MemoryStream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["StreamingSession", "enable", "disable", "is_enabled", "enable_everywhere", "ENABLED_CONF"]

#: a session's conf that says whether ``statestream run`` (and ``statestream-python``) serve its
#: streaming entry points: ``false`` leaves that session's streams on Spark's engine
ENABLED_CONF = "spark.statestream.enabled"

#: the attribute of an enabled SparkSession that holds its StreamingSession
_SESSION_ATTRIBUTE = "_statestream_session"

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


logger = logging.getLogger(__name__)

#: streaming global temporary views (``global_temp.<name>``), shared by every StreamingSession
_GLOBAL_VIEWS: dict[str, Any] = {}


class StreamingSession:
    """Wraps a ``SparkSession``; ``readStream`` and ``streams`` behave as Spark's.

    Parameters
    ----------
    spark : SparkSession
        A classic (not Spark Connect) session. Its batch API stays reachable through the
        wrapper (``ss.createDataFrame``, ``ss.range``, ...).

    Raises
    ------
    NotSupportedYetError
        When ``spark`` is a Spark Connect session.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> words = ss.memoryStream("word STRING")
    >>> words.add_data([("a",), ("b",), ("a",)])
    0
    >>> counts = words.toDF().groupBy("word").count()
    >>> q = counts.writeStream.outputMode("complete").format("memory").queryName("session_words").start()
    >>> q.processAllAvailable()
    >>> sorted(spark.table("session_words").collect())
    [Row(word='a', count=2), Row(word='b', count=1)]
    >>> q.stop()
    """

    def __new__(cls, spark: "SparkSession") -> "StreamingSession":
        # over a session that statestream.enable() serves: that session's own StreamingSession,
        # so that ``ss.streams`` and ``spark.streams`` are one query manager
        if cls is StreamingSession and is_enabled(spark):
            return _served(spark)
        return super().__new__(cls)

    def __init__(self, spark: "SparkSession") -> None:
        if getattr(self, "sparkSession", None) is spark:
            return  # the StreamingSession of an enabled session, already made
        if type(spark).__module__.startswith("pyspark.sql.connect"):
            raise spark_connect_session_error(spark)
        self.sparkSession = spark
        use_driver_python(spark)
        install_stream_on_the_right()
        self._streams = StreamingQueryManager(spark)
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

    def table(self, tableName: str) -> Any:  # noqa: N803
        """A streaming temporary view of this session as its DataFrame; any other table is read by
        Spark as a batch DataFrame (``readStream.table`` reads a stream)."""
        view = self._view(tableName)
        return view if view is not None else ClassicSparkSession.table(self.sparkSession, tableName)

    def sql(self, sqlQuery: str, args: Any = None, **kwargs: Any) -> Any:  # noqa: N803
        """Spark SQL; over a streaming temporary view the result is a stream (stateless SQL only,
        see ``plan/sql.py``), otherwise Spark's batch DataFrame."""
        try:
            relations = relations_in(self.sparkSession, sqlQuery)
        except Exception:  # noqa: BLE001 - not parsable before PySpark fills in {name} arguments: Spark's own
            relations = []
        streams = sorted({n for n in relations if self._view(n) is not None})
        if not streams:
            return ClassicSparkSession.sql(self.sparkSession, sqlQuery, args, **kwargs)
        if any(n.startswith("global_temp.") for n in streams):
            raise not_supported_yet("StreamingSession", "sql", f"SQL over a streaming global temporary view ({', '.join(streams)})")
        if len(streams) > 1 or args or kwargs:
            raise not_supported_yet("StreamingSession", "sql", f"SQL over several streaming views or with arguments ({', '.join(streams)})")
        return self._view(streams[0])._sql_over_view(streams[0], sqlQuery)  # noqa: SLF001

    @property
    def read(self) -> "DataFrameReader":
        """Spark's batch reader, plus the ``statestore`` and ``state-metadata`` sources over
        statestream checkpoints (``batch_reader``)."""
        return DataFrameReader(self.sparkSession)

    @property
    def checkpointManager(self) -> "StreamingCheckpointManager":  # noqa: N802
        """Offline operations on a stopped query's checkpoint: ``repartition``, ``rollback``,
        ``check`` (of a changed query)."""
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
        """The ``DataStreamReader`` of this session: behaves as PySpark's ``SparkSession.readStream``,
        and the streams it reads run on statestream's engine.

        Returns
        -------
        DataStreamReader
            A new reader (its settings are its own).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> df = ss.readStream.format("rate").load()
        >>> df.isStreaming
        True
        >>> df.columns
        ['timestamp', 'value']
        """
        return DataStreamReader(self)

    @property
    def streams(self) -> StreamingQueryManager:
        """The ``StreamingQueryManager`` of the queries this session started, as PySpark's
        ``SparkSession.streams``.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("session_streams").start()
        >>> [query.name for query in ss.streams.active]
        ['session_streams']
        >>> q.stop()
        >>> ss.streams.active
        []
        """
        return self._streams

    def memoryStream(self, schema) -> "Any":  # noqa: N802
        """A ``MemoryStream`` (for tests): ``add_data(rows)`` adds one batch; ``toDF()`` is the
        streaming DataFrame over it.

        Parameters
        ----------
        schema : StructType or str
            The rows' schema, a ``StructType`` or a DDL string (``"k STRING, v INT"``).

        Returns
        -------
        MemoryStream
            ``add_data(rows)`` returns the offset of the batch it added (``0`` first).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING, v INT")
        >>> ms.add_data([("a", 1), ("b", 2)])
        0
        >>> q = ms.toDF().writeStream.format("memory").queryName("memory_stream_rows").start()
        >>> q.processAllAvailable()
        >>> sorted(spark.table("memory_stream_rows").collect())
        [Row(k='a', v=1), Row(k='b', v=2)]
        >>> q.stop()
        """
        stream = MemoryStream(self.sparkSession, schema)
        stream.to_df = lambda: memory_stream_df(self, stream)
        stream.toDF = stream.to_df  # type: ignore[attr-defined]  # the API's name, set per instance beside to_df
        return stream

    @property
    def conf(self):
        """The runtime configuration of the wrapped SparkSession (``spark.conf``, the same object).

        Examples
        --------
        >>> StreamingSession(spark).conf.get("spark.sql.shuffle.partitions")
        '2'
        """
        return self.sparkSession.conf


# ------------------------------------------------------------------------------------------------
# A SparkSession whose streaming entry points are statestream's
# ------------------------------------------------------------------------------------------------


#: makes the StreamingSession of an enabled session once, whichever thread asks first
_SERVING_LOCK = threading.RLock()


def _served(spark: "SparkSession") -> StreamingSession:
    """The StreamingSession behind an enabled session (made on first use for a session that
    ``newSession()`` made from an enabled one: it is of the enabled class too)."""
    served = spark.__dict__.get(_SESSION_ATTRIBUTE)
    if served is None:
        with _SERVING_LOCK:
            served = spark.__dict__.get(_SESSION_ATTRIBUTE)
            if served is None:
                served = object.__new__(StreamingSession)
                StreamingSession.__init__(served, spark)
                spark.__dict__[_SESSION_ATTRIBUTE] = served
    return served


class _ServedEntryPoints:
    """The members an enabled ``SparkSession`` takes from statestream: the streaming entry points
    (``readStream``, ``streams``), the batch reader with the ``statestore`` and
    ``state-metadata`` sources (``read``), and ``sql``/``table``, which see the streaming
    temporary views. Everything else is the SparkSession's own."""

    #: read by the API's hand-over to Spark's engine (``handover.py``) and the query manager
    _statestream_served = True

    @property
    def readStream(self) -> "DataStreamReader":  # noqa: N802 - PySpark's name
        """statestream's ``DataStreamReader`` (see :meth:`StreamingSession.readStream`)."""
        return _served(self).readStream  # type: ignore[arg-type]

    @property
    def streams(self) -> StreamingQueryManager:
        """statestream's query manager: the queries this session started, their listeners."""
        return _served(self).streams  # type: ignore[arg-type]

    @property
    def read(self) -> "DataFrameReader":
        """Spark's batch reader, plus the ``statestore`` and ``state-metadata`` sources."""
        return _served(self).read  # type: ignore[arg-type]

    def sql(self, sqlQuery: str, args: Any = None, **kwargs: Any) -> Any:  # noqa: N803
        """Spark SQL; over a streaming temporary view, a stream (:meth:`StreamingSession.sql`)."""
        return _served(self).sql(sqlQuery, args, **kwargs)  # type: ignore[arg-type]

    def table(self, tableName: str) -> Any:  # noqa: N803
        """A streaming temporary view as its stream; any other table as Spark reads it."""
        return _served(self).table(tableName)  # type: ignore[arg-type]


#: the enabled class made for each SparkSession class (one: PySpark's classic SparkSession)
_ENABLED_CLASSES: dict[type, type] = {}


def _enabled_class(base: type) -> type:
    cls = _ENABLED_CLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (_ServedEntryPoints, base), {"__module__": __name__, "__doc__": base.__doc__})
        cls.__qualname__ = base.__qualname__
        _ENABLED_CLASSES[base] = cls
    return cls


def is_enabled(spark: Any) -> bool:
    """Whether ``spark``'s streaming entry points are statestream's.

    >>> statestream.is_enabled(statestream.enable(spark))                    # doctest: +SKIP
    True
    """
    return isinstance(spark, _ServedEntryPoints)


def enable(spark: "SparkSession") -> "SparkSession":
    """Serve ``spark``'s streaming entry points with statestream, and return ``spark``.

    After it, the job's own code runs on statestream unchanged: ``spark.readStream`` is
    statestream's reader (so every DataFrame read from it, its ``writeStream`` and its queries
    are statestream's), ``spark.streams`` its query manager, ``spark.read`` reads the
    ``statestore`` and ``state-metadata`` sources of statestream checkpoints, and
    ``spark.sql``/``spark.table`` see streaming temporary views. Batch DataFrames, ``spark.sql``
    over tables, UDFs and everything else stay Spark's. The object stays the same
    ``SparkSession`` (``isinstance`` holds); :func:`disable` undoes it. Idempotent.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A classic session (a Spark Connect session is refused, see ``StreamingSession``).

    Returns
    -------
    pyspark.sql.SparkSession
        ``spark`` itself.

    Examples
    --------
    >>> import statestream                                                    # doctest: +SKIP
    >>> spark = statestream.enable(SparkSession.builder.getOrCreate())        # doctest: +SKIP
    >>> q = spark.readStream.format("rate").load().writeStream.format("noop").start()  # doctest: +SKIP
    >>> type(q).__module__                                                    # doctest: +SKIP
    'statestream.api.query'
    """
    with _SERVING_LOCK:
        if is_enabled(spark) and _SESSION_ATTRIBUTE in spark.__dict__:
            return spark
        served = object.__new__(StreamingSession)
        StreamingSession.__init__(served, spark)  # refuses a Connect session before anything changes
        spark.__dict__[_SESSION_ATTRIBUTE] = served
        if not is_enabled(spark):
            spark.__class__ = _enabled_class(type(spark))
    logger.info("statestream serves the streaming entry points of SparkSession %s", hex(id(spark)))
    return spark


def disable(spark: "SparkSession") -> "SparkSession":
    """Give ``spark``'s streaming entry points back to Spark's engine (undoes :func:`enable`).
    Queries already started keep running on statestream.

    >>> statestream.is_enabled(statestream.disable(spark))                   # doctest: +SKIP
    False
    """
    if is_enabled(spark):
        spark.__class__ = next(c for c in type(spark).__mro__[1:] if c is not _ServedEntryPoints)
        spark.__dict__.pop(_SESSION_ATTRIBUTE, None)
    return spark


def _wanted(spark: "SparkSession") -> bool:
    """Whether a session made under :func:`enable_everywhere` is served: unless its conf
    ``spark.statestream.enabled`` is ``false``."""
    try:
        return str(spark.conf.get(ENABLED_CONF, "true")).strip().lower() != "false"
    except Exception:  # noqa: BLE001 - a session whose conf cannot be read is served
        return True


def enable_everywhere() -> None:
    """Serve every classic SparkSession of this process with statestream, those made later
    included (``SparkSession.builder.getOrCreate()`` in any module, ``newSession()``): what
    ``statestream run`` and ``statestream-python`` set before the job's code runs. A session
    whose conf ``spark.statestream.enabled`` is ``false`` is left to Spark's engine. Idempotent.

    >>> statestream.enable_everywhere()                                       # doctest: +SKIP
    >>> statestream.is_enabled(SparkSession.builder.getOrCreate())           # doctest: +SKIP
    True
    """
    original = ClassicSparkSession.__init__
    if not getattr(original, "_statestream_enables", False):

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            original(self, *args, **kwargs)
            if _wanted(self):
                enable(self)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        __init__._statestream_enables = True  # type: ignore[attr-defined]  # noqa: SLF001
        __init__.__doc__ = original.__doc__
        ClassicSparkSession.__init__ = __init__  # type: ignore[method-assign]
    existing = ClassicSparkSession._instantiatedSession  # noqa: SLF001
    if existing is not None and _wanted(existing):
        enable(existing)
