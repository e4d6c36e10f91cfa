"""DataStreamWriter (``DataFrame.writeStream``) with PySpark's names, arguments and chaining;
``start()`` hands the query to the runtime's ``MicroBatchExecution``.

The writer holds the DataFrame's logical plan and session, not the DataFrame: ``dataframe.py``
imports this module, so this module imports neither it nor ``session.py`` (the session is typed
with ``StreamingSessionLike``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

from statestream.errors import (
    checkpoint_location_required_error,
    cluster_by_with_partition_by_error,
    clustering_column_not_found_error,
    invalid_output_mode_error,
    missing_member,
    mixed_engines_error,
    not_supported_yet,
    null_path_error,
    only_allow_single_trigger_error,
    value_not_non_empty_str_error,
    value_not_true_error,
)
from statestream.api.handover import hands_over
from statestream.plan.analysis import check_for_streaming, inputs_from_spark_engine, spark_stream_sources
from statestream.api.query import StreamingQuery
from statestream.runtime.intervals import parse_trigger_interval_ms
from statestream.runtime.microbatch import UI_PORT_CONF, MicroBatchExecution, Trigger
from statestream.sinks import FILE_FORMATS, create_sink
from statestream.sinks.foreach import partition_task
from statestream.sinks.table import prepare_table
from statestream.sources.options import default_source, option_string
from statestream.tools.dashboard import serve_dashboard

if TYPE_CHECKING:
    from statestream.plan import logical as L
    from statestream.runtime.interfaces import StreamingSessionLike

logger = logging.getLogger(__name__)

#: the sinks a query may start without a checkpoint location (Spark's
#: ``SOURCES_ALLOW_ONE_TIME_QUERY``): it then gets a temporary one; any other sink (files, Kafka, a
#: Python data source, a table) needs ``checkpointLocation``
ONE_TIME_QUERY_SINKS = frozenset({"memory", "foreach", "foreachbatch", "console", "noop"})

__all__ = ["DataStreamWriter"]


@hands_over
class DataStreamWriter:
    """``DataFrame.writeStream``: PySpark's ``DataStreamWriter``; ``start()`` runs the query on
    statestream's engine.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> ms = ss.memoryStream("a INT")
    >>> ms.add_data([(1,), (2,)])
    0
    >>> writer = ms.toDF().writeStream.format("memory").queryName("writer_class").outputMode("append")
    >>> q = writer.start()
    >>> q.processAllAvailable()
    >>> sorted(spark.table("writer_class").collect())
    [Row(a=1), Row(a=2)]
    >>> q.stop()
    """

    #: its settings return the writer itself; once a setting or ``start`` handed the query over
    #: to Spark's engine (``handover.py``), the rest of its calls go to Spark's writer
    _handover_builder = True

    def __init__(self, plan: "L.LogicalPlan", session: "StreamingSessionLike") -> None:
        self._plan = plan
        self._session = session
        self._mode = "append"
        #: ``None`` until ``format`` (or ``foreach``/``foreachBatch``) is called: Spark's default
        #: is then ``spark.sql.sources.default``, and ``toTable`` tells it from an explicit format
        self._format: str | None = None
        self._options: dict[str, str | None] = {}
        self._query_name: str | None = None
        self._trigger: Any = None
        self._foreach_batch: Callable | None = None
        self._foreach_writer: Any = None
        self._partition_by: list[str] = []
        self._cluster_by: list[str] = []

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.streaming.readwriter import DataStreamWriter as _PySpark

        raise missing_member("DataStreamWriter", _PySpark, name)

    def outputMode(self, outputMode: str) -> "DataStreamWriter":  # noqa: N802,N803
        """Set how each trigger's result reaches the sink, as PySpark's ``DataStreamWriter.outputMode``:
        ``"append"`` (the default), ``"update"`` or ``"complete"``, in any case.

        Parameters
        ----------
        outputMode : str
            ``"append"``, ``"update"`` or ``"complete"``.

        Returns
        -------
        DataStreamWriter
            This writer.

        Raises
        ------
        Exception
            PySpark's error of an unknown output mode (checked here, not at ``start()``).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("a",)])
        0
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("Complete").format("memory").queryName("writer_mode").start()
        >>> q.processAllAvailable()
        >>> spark.table("writer_mode").collect()
        [Row(k='a', count=2)]
        >>> q.stop()
        """
        mode = outputMode.lower() if isinstance(outputMode, str) else outputMode
        if mode not in ("append", "update", "complete"):
            raise invalid_output_mode_error(outputMode)
        self._mode = mode
        return self

    def format(self, source: str) -> "DataStreamWriter":
        """Set the sink (``"memory"``, ``"console"``, ``"noop"``, ``"parquet"``, ``"kafka"``, ...), as
        PySpark's ``DataStreamWriter.format``; the name is kept lower-cased. Without it ``start()``
        uses ``spark.sql.sources.default``.

        Parameters
        ----------
        source : str
            The sink's short name.

        Returns
        -------
        DataStreamWriter
            This writer.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,)])
        0
        >>> q = ms.toDF().writeStream.format("noop").start()
        >>> q.processAllAvailable()
        >>> q.isActive
        True
        >>> q.stop()
        """
        self._format = source.lower()
        return self

    def option(self, key: str, value: Any) -> "DataStreamWriter":
        """Set an option; ``None`` sets it to null, as PySpark does (``checkpointLocation`` set to
        null then fails ``start()`` as in Spark, a V2 sink's option takes its default).

        Parameters
        ----------
        key : str
            The option's name (``checkpointLocation``, ``path``, a sink's own option).
        value : str, int, float, bool or None
            Kept as Spark keeps it: a string (``True`` becomes ``'true'``).

        Returns
        -------
        DataStreamWriter
            This writer.

        Examples
        --------
        >>> import os
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,)])
        0
        >>> checkpoint = f"{tmp}/writer_option"
        >>> q = ms.toDF().writeStream.format("noop").option("checkpointLocation", checkpoint).start()
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> os.path.isdir(checkpoint)
        True
        """
        self._options[key] = option_string(value)
        return self

    def options(self, **options: Any) -> "DataStreamWriter":
        """Set several options, as PySpark's ``DataStreamWriter.options``: each as ``option(key, value)``
        would.

        Returns
        -------
        DataStreamWriter
            This writer.
        """
        for k, v in options.items():
            self.option(k, v)
        return self

    def partitionBy(self, *cols: str) -> "DataStreamWriter":  # noqa: N802
        """Partition a file sink's output by these columns (directories ``col=value``), as PySpark's
        ``DataStreamWriter.partitionBy``; one list or tuple of names is taken as the names.

        Returns
        -------
        DataStreamWriter
            This writer.
        """
        self._partition_by = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)
        return self

    def clusterBy(self, *cols: str) -> "DataStreamWriter":  # noqa: N802
        """Clustering columns. As in Spark, they must not be combined with ``partitionBy``; a file
        sink and ``toTable`` check that they are columns of the stream, and a table that
        ``toTable`` creates records them (``CLUSTER BY``); the files written are the same."""
        self._cluster_by = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)
        return self

    def queryName(self, queryName: str) -> "DataStreamWriter":  # noqa: N802,N803
        """Name the query, as PySpark's ``DataStreamWriter.queryName``: the name shows in ``query.name``
        and its progress, and names the memory sink's table. Two active queries cannot share one.

        Parameters
        ----------
        queryName : str
            A non-empty name.

        Returns
        -------
        DataStreamWriter
            This writer.

        Raises
        ------
        Exception
            PySpark's ``VALUE_NOT_NON_EMPTY_STR`` error, for an empty or non-string name.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("writer_named").start()
        >>> q.name
        'writer_named'
        >>> q.stop()
        """
        if not queryName or not isinstance(queryName, str) or not queryName.strip():
            raise value_not_non_empty_str_error("queryName", queryName)
        self._query_name = queryName
        return self

    def trigger(
        self,
        *,
        processingTime: str | None = None,  # noqa: N803
        once: bool | None = None,
        continuous: str | None = None,
        availableNow: bool | None = None,  # noqa: N803
    ) -> "DataStreamWriter":
        # PySpark's checks, in its order: exactly one kind, then that kind's value
        """Set when micro-batches run, as PySpark's ``DataStreamWriter.trigger``, with PySpark's checks
        (exactly one keyword). Without a trigger, a batch starts as soon as the previous one ends.

        Parameters
        ----------
        processingTime : str, optional
            An interval (``"5 seconds"``): one micro-batch per interval.
        once : bool, optional
            ``True``: one micro-batch of everything available, then the query stops.
        continuous : str, optional
            Continuous processing; statestream runs micro-batches only.
        availableNow : bool, optional
            ``True``: everything available, in as many micro-batches as the sources' limits ask,
            then the query stops.

        Returns
        -------
        DataStreamWriter
            This writer.

        Raises
        ------
        NotSupportedYetError
            For ``continuous=...``: statestream does not run continuous processing (Spark does).
        Exception
            PySpark's errors of no keyword or several, or of a bad value.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,), (2,)])
        0
        >>> q = ms.toDF().writeStream.format("memory").queryName("writer_available_now").trigger(availableNow=True).start()
        >>> q.awaitTermination(60)
        True
        >>> sorted(spark.table("writer_available_now").collect())
        [Row(a=1), Row(a=2)]
        >>> q.stop()
        """
        given = [x for x in (processingTime, once, continuous, availableNow) if x is not None]
        if len(given) != 1:
            raise only_allow_single_trigger_error()
        if processingTime is not None:
            if not isinstance(processingTime, str) or not processingTime.strip():
                raise value_not_non_empty_str_error("processingTime", processingTime)

            self._trigger = Trigger("processingTime", parse_trigger_interval_ms(processingTime))
        elif once is not None:
            if once is not True:
                raise value_not_true_error("once", once)
            self._trigger = Trigger("once")
        elif continuous is not None:
            if not isinstance(continuous, str) or not continuous.strip():
                raise value_not_non_empty_str_error("continuous", continuous)
            raise not_supported_yet("DataStreamWriter", "trigger", "statestream runs micro-batches only, not continuous processing")
        else:
            if availableNow is not True:
                raise value_not_true_error("availableNow", availableNow)
            self._trigger = Trigger("availableNow")
        return self

    def foreachBatch(self, func: Callable) -> "DataStreamWriter":  # noqa: N802
        """Hand each micro-batch's output to ``func(batch_df, batch_id)``, as PySpark's
        ``DataStreamWriter.foreachBatch``: ``batch_df`` is a batch DataFrame.

        Parameters
        ----------
        func : callable
            Called with the batch's DataFrame and the batch id (an int), on the driver.

        Returns
        -------
        DataStreamWriter
            This writer.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,), (2,)])
        0
        >>> seen = []
        >>> def record(batch_df, batch_id):
        ...     seen.append((batch_id, sorted(row.a for row in batch_df.collect())))
        >>> q = ms.toDF().writeStream.foreachBatch(record).start()
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> seen
        [(0, [1, 2])]
        """
        self._foreach_batch = func
        self._format = "foreachbatch"
        return self

    def foreach(self, f: Any) -> "DataStreamWriter":
        """Hand each output row to a function or a writer object, as PySpark's
        ``DataStreamWriter.foreach``: a callable ``f(row)``, or an object with ``process(row)``
        (and optional ``open(partition_id, epoch_id)`` and ``close(error)``).

        Parameters
        ----------
        f : callable or object
            The row function, or the writer object (without a callable ``process`` it is refused
            here, as PySpark refuses it).

        Returns
        -------
        DataStreamWriter
            This writer.
        """
        partition_task(f)  # PySpark refuses a writer without a callable process() right here
        self._foreach_writer = f
        self._foreach_batch = None
        self._format = "foreach"
        return self

    def _set(self, format: str | None, outputMode: str | None, partitionBy: Any, queryName: str | None, options: dict) -> None:  # noqa: A002,N803
        """The settings ``start()`` and ``toTable()`` take as arguments, applied as their setters
        would (an argument left ``None`` keeps the setter's value)."""
        if format is not None:
            self.format(format)
        if outputMode is not None:
            self.outputMode(outputMode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if queryName is not None:
            self.queryName(queryName)
        self.options(**options)

    def toTable(  # noqa: N802 - PySpark's name and arguments
        self,
        tableName: str,  # noqa: N803
        format: str | None = None,  # noqa: A002
        outputMode: str | None = None,  # noqa: N803
        partitionBy: Any = None,  # noqa: N803
        queryName: str | None = None,  # noqa: N803
        **options: Any,
    ) -> "StreamingQuery":
        """Start the query writing to a catalog table, as PySpark's ``DataStreamWriter.toTable``: the
        table is created when missing (with the format, partitioning and ``clusterBy`` columns
        given), and its files are written as a file sink writes.

        Parameters
        ----------
        tableName : str
            The table's name.
        format, outputMode, partitionBy, queryName, **options
            Applied as their setters would (``None`` keeps the setter's value).

        Returns
        -------
        StreamingQuery
            The started query.
        """
        self._set(format, outputMode, partitionBy, queryName, options)
        clustering = self._clustering_columns(check_names=True)
        target = prepare_table(
            self._session.sparkSession, tableName, self._format, dict(self._options), self._partition_by, self._plan.schema, clustering
        )
        self._format = target.format
        return self.start(path=target.path)

    def _clustering_columns(self, check_names: bool) -> list[str]:
        """The ``clusterBy`` columns; Spark refuses them together with ``partitionBy``, and
        where it uses them (file sinks, tables) each must name a top-level column of the stream
        (case-insensitively; the stream's spelling is kept)."""
        if self._cluster_by and self._partition_by:
            raise cluster_by_with_partition_by_error()
        if not check_names:
            return list(self._cluster_by)
        names = list(self._plan.schema.names)
        resolved = []
        for col in self._cluster_by:
            match = [n for n in names if n.lower() == str(col).lower()]
            if not match:
                raise clustering_column_not_found_error(col, names)
            resolved.append(match[0])
        return resolved

    def _option_set(self, name: str) -> tuple[bool, str | None]:
        """Whether option ``name`` was set (any case, as Spark's options are), and its value."""
        for key, value in self._options.items():
            if key.lower() == name.lower():
                return True, value
        return False, None

    def start(
        self,
        path: str | None = None,
        format: str | None = None,  # noqa: A002
        outputMode: str | None = None,  # noqa: N803
        partitionBy: Any = None,  # noqa: N803
        queryName: str | None = None,  # noqa: N803
        **options: Any,
    ) -> "StreamingQuery":
        """Start the query, as PySpark's ``DataStreamWriter.start``: it runs in a background thread
        and the handle is returned at once.

        The checkpoint is ``option("checkpointLocation")``, else a directory named after the query
        under ``spark.sql.streaming.checkpointLocation``, else a temporary directory deleted when
        the query stops; file sinks need one of the first two.

        Parameters
        ----------
        path : str, optional
            The output path of a file sink (the ``path`` option).
        format, outputMode, partitionBy, queryName, **options
            Applied as their setters would (``None`` keeps the setter's value).

        Returns
        -------
        StreamingQuery
            The running query.

        Raises
        ------
        Exception
            Spark's errors of a query Spark's engine would refuse (an output mode the query does not
            support, a file sink without a checkpoint, a name an active query has, ...).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,), (2,), (3,)])
        0
        >>> q = ms.toDF().where("a > 1").writeStream.start(format="memory", queryName="writer_start", checkpointLocation=f"{tmp}/writer_start")
        >>> q.processAllAvailable()
        >>> sorted(spark.table("writer_start").collect())
        [Row(a=2), Row(a=3)]
        >>> q.stop()
        """
        self._set(format, outputMode, partitionBy, queryName, options)
        if path is not None:
            self._options["path"] = path
        spark = self._session.sparkSession
        fmt = self._format if self._format is not None else default_source(spark)
        self._clustering_columns(check_names=fmt in FILE_FORMATS)
        conf = {k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {}
        from_spark = inputs_from_spark_engine(self._plan)
        if from_spark:
            raise mixed_engines_error([s for node in from_spark for s in spark_stream_sources(node.template)])
        check_for_streaming(self._plan, self._mode, conf)
        sink = create_sink(
            fmt,
            dict(self._options),
            self._query_name,
            spark,
            foreach_batch=self._foreach_batch,
            foreach_writer=self._foreach_writer,
            output_mode=self._mode,
            partition_by=self._partition_by,
        )
        given, checkpoint = self._option_set("checkpointLocation")
        if given and checkpoint is None:
            raise null_path_error()  # Hadoop's Path, as in Spark
        temporary_checkpoint = False
        if checkpoint is None:
            root = spark.conf.get("spark.sql.streaming.checkpointLocation", None)
            if root:
                checkpoint = os.path.join(root, self._query_name or __import__("uuid").uuid4().hex)
        if checkpoint is None:
            if fmt not in ONE_TIME_QUERY_SINKS:
                raise checkpoint_location_required_error()
            checkpoint = tempfile.mkdtemp(prefix="statestream-checkpoint-")
            temporary_checkpoint = True
            logger.info("using temporary checkpoint location %s", checkpoint)
        ex = MicroBatchExecution(
            session=self._session,
            plan=self._plan,
            sink=sink,
            output_mode=self._mode,
            trigger=self._trigger or Trigger(),
            checkpoint_location=checkpoint,
            query_name=self._query_name,
            delete_checkpoint_on_stop=temporary_checkpoint,
        )
        query = StreamingQuery(ex)
        port = self._session.sparkSession.conf.get(UI_PORT_CONF, None)
        if port is not None:  # served before the query starts: a busy port fails start(), not a running query
            query._dashboard = ex.dashboard = serve_dashboard(checkpoint, int(port))  # noqa: SLF001
        try:
            self._session.streams._start(query)  # noqa: SLF001 - checks name and id, then starts
        except BaseException:
            if query._dashboard is not None:  # noqa: SLF001
                query._dashboard.stop()  # noqa: SLF001
            raise
        dashboard = query._dashboard  # noqa: SLF001
        # one line per start (Spark's engine logs its own start at INFO too)
        logger.info(
            "query %s started: id %s, run %s, checkpoint %s%s", self._query_name or "(unnamed)", query.id, query.runId, checkpoint,
            f", dashboard {dashboard.url}" if dashboard is not None else "",
        )
        return query
