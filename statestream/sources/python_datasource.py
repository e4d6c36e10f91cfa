"""Streaming reads of a data source written in Python (PySpark's Python Data Source API).

Spark: ``PythonMicroBatchStream`` over a ``DataSource`` registered with
``spark.dataSource.register``. The registered class is found where Spark keeps it (the session's
data source manager, as the pickled class), and statestream then drives the reader as Spark's
engine does:

* the reader that plans batches lives on the driver, made once per run with PySpark's own
  ``_streamReader`` (which wraps a ``SimpleDataSourceStreamReader`` in PySpark's prefetching
  wrapper, as Spark does); every offset goes to it and comes back through JSON, as across
  Spark's socket to its Python runner;
* a fresh query's batch 0 runs from ``initialOffset()`` to the first ``latestOffset()``, whatever
  they are (Spark runs batch 0 even when they are equal); a restart first calls
  ``partitions(end, end)`` with the last logged end offset (Spark's ``setLatestSeenOffset``);
* ``partitions(start, end)`` plans a batch on the driver; each partition is read by a Spark task
  (``read(partition)`` of a second reader instance, shipped pickled, as Spark ships the one its
  planner made), its tuples converted to Arrow by PySpark's own conversion; a simple reader's
  prefetched rows are served from the driver, as Spark serves them from its block manager;
* ``commit(end)`` when the next batch's offsets are logged, ``stop()`` when the query stops;
* ``availableNow`` fixes the end at the first ``latestOffset()`` of the run, as Spark's wrapper
  of a source without admission control does.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from statestream.errors import python_data_source_broadcast_error, python_data_source_error, python_streaming_source_error
from statestream._jvm.calls import java_session, jvm_view, static_member
from statestream.sources.base import ReadLimit, Source, empty_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import StructType

__all__ = ["lookup_python_data_source", "python_data_source", "PythonMicroBatchStream", "data_source_schema", "data_source_options"]

logger = logging.getLogger(__name__)

#: Spark's conf for the rows of one Arrow batch (the reader's output is cut into such batches)
MAX_RECORDS_PER_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


def lookup_python_data_source(spark: "SparkSession", name: str) -> "type[DataSource] | None":
    """The ``DataSource`` class registered under ``name`` (any case) in ``spark``'s session, or
    None: read back from the session's data source manager, where ``spark.dataSource.register``
    put it pickled.

    >>> lookup_python_data_source(spark, "fake_stream")                       # doctest: +SKIP
    <class '__main__.FakeStreamDataSource'>
    """
    from pyspark.serializers import CloudPickleSerializer

    manager = java_session(spark).sessionState().dataSourceManager()
    if not manager.dataSourceExists(name):
        return None
    function = manager.lookupDataSource(name).dataSourceCls()
    if function.broadcastVars().size() > 0:  # a class pickled larger than PySpark's broadcast threshold
        raise python_data_source_broadcast_error(name)
    raw = function.command().toArray(static_member(jvm_view(spark), "scala.reflect.ClassTag", "Byte")())
    return CloudPickleSerializer().loads(bytes(raw))


def data_source_options(options: Mapping[str, Any]) -> Any:
    """A data source's options as Spark hands them to Python: a case-insensitive dict of strings,
    without the options set to null."""
    from pyspark.sql.datasource import CaseInsensitiveDict

    return CaseInsensitiveDict({k: str(v) for k, v in options.items() if v is not None})


def data_source_schema(data_source: "DataSource", user_schema: "StructType | str | None") -> "StructType":
    """The stream's schema: the reader's ``schema(...)`` when given, else the source's
    ``schema()`` (a ``StructType`` or a DDL string), as Spark takes it."""
    from pyspark.errors import PySparkAssertionError
    from pyspark.sql.types import DataType, StructType

    schema: DataType | str = user_schema if user_schema is not None else data_source.schema()
    if isinstance(schema, str):
        schema = StructType.fromDDL(schema)
    if not isinstance(schema, StructType):
        raise PySparkAssertionError(
            errorClass="DATA_SOURCE_TYPE_MISMATCH",
            messageParameters={"expected": "an output schema of type 'StructType'", "actual": f"'{type(schema).__name__}'"},
        )
    return schema


def _through_json(offset: Any) -> Any:
    """An offset as the reader gets it back in Spark: written as JSON and parsed again."""
    return json.loads(json.dumps(offset))


def _calling(action: str, method: Any, *args: Any) -> Any:
    """A call of the reader on the driver; what it raises becomes Spark's
    ``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR`` naming the action, as Spark reports it."""
    try:
        return method(*args)
    except Exception as exc:  # wrapped with the Python traceback
        raise python_streaming_source_error(action, exc) from exc


class PythonMicroBatchStream(Source):
    """``readStream.format(<registered name>)`` of a Python ``DataSource``.

    Parameters
    ----------
    spark:
        The user's session (reads the batch size conf; its context runs the read tasks).
    data_source_cls:
        The registered ``DataSource`` subclass.
    options:
        The reader's options (given to the data source as a case-insensitive dict of strings).
    schema:
        A user schema (``readStream.schema(...)``), else the source's own ``schema()``.

    Examples
    --------
    >>> spark.dataSource.register(FakeStreamDataSource)                       # doctest: +SKIP
    >>> df = statestream.enable(spark).readStream.format("fake_stream").load()  # doctest: +SKIP
    """

    def __init__(self, spark: "SparkSession | None", data_source_cls: "type[DataSource]", options: Mapping[str, Any], schema: Any) -> None:
        self._spark = spark
        self.short_name = str(data_source_cls.name())
        self.data_source = data_source_cls(options=data_source_options(options))
        self._schema = data_source_schema(self.data_source, schema)
        self._planner: Any = None  # the driver's reader: offsets, partitions, commit
        self._task_reader: Any = None  # the reader the read tasks get, pickled
        self._seen_offset: Any = None
        self._available_now = False
        self._available_now_end: Any = None

    @property
    def schema(self) -> "StructType":
        return self._schema

    def _reader(self) -> Any:
        from pyspark.sql.datasource_internal import _streamReader

        if self._planner is None:
            try:
                self._planner = _streamReader(self.data_source, self._schema)
            except Exception as exc:  # Spark's error, with the Python traceback
                raise python_data_source_error("initialize source", exc) from exc
        return self._planner

    def initial_offset(self) -> Any:
        reader = self._reader()
        return _calling("initialOffset", lambda: _through_json(reader.initialOffset()))

    def set_latest_seen_offset(self, offset: Any) -> None:
        """A restart's last logged end offset: ``partitions(end, end)``, which sets a simple
        reader's prefetching start (Spark's ``setLatestSeenOffset``)."""
        if offset is not None and self._seen_offset is None:
            self._seen_offset = offset
            reader = self._reader()
            _calling("planPartitions", reader.partitions, _through_json(offset), _through_json(offset))

    def prepare_for_trigger_available_now(self) -> None:
        self._available_now = True

    def latest_offset(self, start: Any, limit: ReadLimit) -> Any:
        """The reader's ``latestOffset()`` (an ``availableNow`` run: its first one, kept)."""
        if self._available_now and self._available_now_end is not None:
            return self._available_now_end
        reader = self._reader()
        end = _calling("latestOffset", lambda: _through_json(reader.latestOffset()))
        if self._available_now:
            self._available_now_end = end
        return end

    def reported_latest_offset(self) -> Any:
        return None

    def has_new_data(self, start: Any, end: Any) -> bool:
        """Spark compares a Python source's offsets as the JSON text the reader's dicts make
        (``{"a": 1}`` and ``{"a": 1.0}`` differ)."""
        return end is not None and (start is None or json.dumps(end) != json.dumps(start))

    def get_batch(self, spark: "SparkSession", start: Any, end: Any) -> "DataFrame":
        """The rows of ``(start, end]``: the planned partitions, each read by a task (a simple
        reader's prefetched rows from the driver)."""
        from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper

        reader = self._reader()
        first = self.initial_offset() if start is None else _through_json(start)
        last = _through_json(end)
        partitions = list(_calling("planPartitions", reader.partitions, first, last))
        if isinstance(reader, _SimpleStreamReaderWrapper):
            cached = reader.getCache(first, last)
            if cached is not None:
                return self._from_driver(spark, cached)
        if not partitions:
            return empty_batch(spark, self._schema)
        return self._read_in_tasks(spark, partitions)

    def _batch_size(self, spark: "SparkSession") -> int:
        return max(1, int(spark.conf.get(MAX_RECORDS_PER_BATCH_CONF, "10000") or 10000))

    def _from_driver(self, spark: "SparkSession", rows: Iterator[Any]) -> "DataFrame":
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

        batches = list(records_to_arrow_batches(iter(rows), self._batch_size(spark), self._schema, self.data_source))
        if not batches:
            return empty_batch(spark, self._schema)
        table = pa.Table.from_batches(batches, schema=to_arrow_schema(self._schema))
        return spark.createDataFrame(table, schema=self._schema)

    def _read_in_tasks(self, spark: "SparkSession", partitions: list[Any]) -> "DataFrame":
        from pyspark.serializers import CloudPickleSerializer
        from pyspark.sql.datasource_internal import _streamReader

        if self._task_reader is None:
            self._task_reader = _streamReader(self.data_source, self._schema)
        pickled = [bytearray(CloudPickleSerializer().dumps(p)) for p in partitions]
        rdd = spark.sparkContext.parallelize([(p,) for p in pickled], len(pickled))
        plan = spark.createDataFrame(rdd, "partition BINARY")
        return plan.mapInArrow(
            _read_partition_function(self._task_reader, self.data_source, self._schema, self._batch_size(spark)), self._schema
        )

    def commit(self, end: Any) -> None:
        reader = self._reader()
        _calling("commitSource", reader.commit, _through_json(end))

    def stop(self) -> None:
        for reader in (self._planner,):
            if reader is not None:
                try:
                    reader.stop()
                except Exception:  # the query is stopping; say so and go on
                    logger.warning("Python data source %s: stop() failed", self.short_name, exc_info=True)
        self._planner = None

    def description(self) -> str:
        return f"PythonMicroBatchStream[{self.short_name}]"


def _read_partition_function(reader: Any, data_source: Any, schema: "StructType", batch_size: int) -> Any:
    """The ``mapInArrow`` function of a batch's read tasks: each task has one pickled partition,
    reads it with the shipped reader and gives its rows as Arrow batches of ``schema``
    (PySpark's conversion of a data source's tuples, rows or record batches)."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.serializers import CloudPickleSerializer
        from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

        for batch in batches:
            for raw in batch.column(0).to_pylist():
                partition = CloudPickleSerializer().loads(raw)
                output = reader.read(partition)
                if not isinstance(output, Iterator):
                    raise PySparkRuntimeError(
                        errorClass="DATA_SOURCE_INVALID_RETURN_TYPE",
                        messageParameters={"type": type(output).__name__, "name": data_source.name(), "supported_types": "iterator"},
                    )
                yield from records_to_arrow_batches(output, batch_size, schema, data_source)

    return read


def python_data_source(
    spark: "SparkSession | None", name: str, options: Mapping[str, Any], schema: Any, path: str | None = None
) -> "PythonMicroBatchStream | None":
    """The stream of the Python data source registered as ``name``, None when there is none
    (or no session to look in); ``load(path)`` gives the source the option ``path``, as in Spark."""
    if spark is None:
        return None
    cls = lookup_python_data_source(spark, name)
    if cls is None:
        return None
    return PythonMicroBatchStream(spark, cls, {**options, "path": path} if path is not None else options, schema)
