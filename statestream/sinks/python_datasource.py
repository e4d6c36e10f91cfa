"""Streaming writes into a data source written in Python (PySpark's Python Data Source API).

Spark: ``PythonStreamingWrite`` of a ``DataSource`` registered with ``spark.dataSource.register``
whose ``streamWriter(schema, overwrite)`` gives a ``DataSourceStreamWriter`` (or its Arrow
variant). As in Spark's engine, each batch makes its writers from a fresh instance of the data
source, with the query's output schema and ``overwrite`` in complete mode (Spark's truncate; update
mode is refused, as Spark refuses it): every partition of the batch's result is given to
``write(iterator)`` in a Spark task (rows as ``Row``\\ s, or Arrow record batches for an Arrow
writer; a batch without partitions is one empty task), and the tasks' ``WriterCommitMessage``\\ s
go to ``commit(messages, batchId)`` of another writer on the driver, or to
``abort(messages, batchId)`` when a task failed (the messages of the tasks that finished before
the job failed, None for the others, as Spark gives them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator

from pyspark.accumulators import AccumulatorParam
from pyspark.serializers import CloudPickleSerializer

from statestream.errors import python_sink_update_mode_error
from statestream.sinks.base import Sink
from statestream.sources.python_datasource import data_source_options, lookup_python_data_source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import StructType

    from statestream.plan.logical import LogicalPlan

__all__ = ["PythonDataSourceSink", "python_data_source_sink"]

logger = logging.getLogger(__name__)


class PythonDataSourceSink(Sink):
    """``writeStream.format(<registered name>)`` of a Python ``DataSource``.

    Examples
    --------
    >>> spark.dataSource.register(MyStreamSink)                               # doctest: +SKIP
    >>> q = df.writeStream.format("my_sink").option("checkpointLocation", cp).start()  # doctest: +SKIP
    """

    def __init__(self, data_source_cls: "type[DataSource]", options: dict[str, Any], output_mode: str | None) -> None:
        self.data_source_cls = data_source_cls
        self.options = options
        self.output_mode = (output_mode or "append").lower()
        self.overwrite = self.output_mode == "complete"
        self._schema: "StructType | None" = None
        self._rows = -1

    def on_query_start(self, checkpoint_location: str, plan: "LogicalPlan") -> None:
        self._schema = plan.schema

    def _writer(self) -> Any:
        """A writer from a fresh instance of the data source, as Spark makes one for a batch's
        tasks and another for its commit."""
        from pyspark.errors import PySparkAssertionError
        from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamWriter

        data_source = self.data_source_cls(options=data_source_options(self.options))
        writer = data_source.streamWriter(schema=self._schema, overwrite=self.overwrite)  # type: ignore[arg-type]  # set by on_query_start, before any writer
        if not isinstance(writer, (DataSourceStreamWriter, DataSourceStreamArrowWriter)):
            raise PySparkAssertionError(
                errorClass="DATA_SOURCE_TYPE_MISMATCH",
                messageParameters={
                    "expected": "an instance of DataSourceStreamWriter or DataSourceStreamArrowWriter",
                    "actual": f"'{type(writer).__name__}'",
                },
            )
        return writer

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        """``write`` in a task per partition (one task for a batch without partitions, as Spark
        writes an empty batch), then ``commit`` (or ``abort``) on the driver."""
        if self.output_mode == "update":  # Spark's Python writer supports append and truncate only
            raise python_sink_update_mode_error(str(self.data_source_cls.name()))
        assert self._schema is not None, "on_query_start gives the schema"
        sc = df.sparkSession.sparkContext
        # the tasks that finish add their message under their partition, so that an abort gets
        # the messages of the tasks that finished before the job failed (None for the others)
        finished = sc.accumulator({}, _PartitionMessages())
        write = _write_partition_function(self._writer(), self._schema, str(self.data_source_cls.name()), finished)
        partitions = df.rdd.getNumPartitions()
        if partitions == 0:
            df, partitions = df.sparkSession.createDataFrame(sc.parallelize([], 1), self._schema), 1
        try:
            results = df.mapInArrow(write, "message BINARY, rows LONG").collect()
        except Exception:
            done = finished.value
            serializer = CloudPickleSerializer()
            messages = [serializer.loads(done[p]) if p in done else None for p in range(partitions)]
            try:
                self._writer().abort(messages, batch_id)
            except Exception:  # the write's own error is the one to raise
                logger.warning("Python data source %s: abort of batch %s failed", self.data_source_cls.name(), batch_id, exc_info=True)
            raise
        messages = [CloudPickleSerializer().loads(bytes(r.message)) for r in results]
        self._rows = sum(int(r.rows) for r in results)
        self._writer().commit(messages, batch_id)

    def num_output_rows(self) -> int:
        return self._rows

    def description(self) -> str:
        return f"PythonDataSourceSink[{self.data_source_cls.name()}]"


class _PartitionMessages(AccumulatorParam):
    """An accumulator of the write tasks' pickled commit messages, by partition (a retried
    task's message replaces its earlier attempt's)."""

    def zero(self, value: dict[int, bytes]) -> dict[int, bytes]:
        return {}

    def addInPlace(self, value1: dict[int, bytes], value2: dict[int, bytes]) -> dict[int, bytes]:  # noqa: N802 - PySpark's name
        value1.update(value2)
        return value1


def _write_partition_function(writer: Any, schema: "StructType", name: str, finished: Any) -> Any:
    """The ``mapInArrow`` function of a batch's write tasks: the partition's rows to
    ``writer.write`` (as PySpark's ``Row``\\ s, or the Arrow batches themselves for an Arrow
    writer), and its commit message back, pickled, with the number of rows written; the message
    also goes to ``finished`` (an accumulator) under the task's partition."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext
        from pyspark.errors import PySparkRuntimeError
        from pyspark.serializers import CloudPickleSerializer
        from pyspark.sql.conversion import ArrowTableToRowsConversion
        from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
        from pyspark.sql.types import _create_row

        counted = [0]

        def counting(it: Iterator[Any]) -> Iterator[Any]:
            for b in it:
                counted[0] += b.num_rows
                yield b

        converters = [
            ArrowTableToRowsConversion._create_converter(f.dataType, none_on_identity=False, binary_as_bytes=True)  # noqa: SLF001
            for f in schema.fields
        ]
        fields = schema.fieldNames()

        def rows() -> Iterator[Any]:
            for batch in counting(batches):
                columns = [c.to_pylist() for c in batch.columns]
                for i in range(batch.num_rows):
                    yield _create_row(fields=fields, values=[converters[c](columns[c][i]) for c in range(batch.num_columns)])  # type: ignore[misc]  # none_on_identity=False: never None

        result = writer.write(counting(batches)) if isinstance(writer, DataSourceStreamArrowWriter) else writer.write(rows())
        if not isinstance(result, WriterCommitMessage):
            raise PySparkRuntimeError(
                errorClass="DATA_SOURCE_TYPE_MISMATCH",
                messageParameters={"expected": "'WriterCommitMessage' as the return type of the `write` method", "actual": type(result).__name__},
            )
        message = CloudPickleSerializer().dumps(result)
        finished.add({TaskContext.get().partitionId(): message})  # type: ignore[union-attr]  # a task's function: its TaskContext is set
        yield pa.record_batch([pa.array([message], pa.binary()), pa.array([counted[0]], pa.int64())], names=["message", "rows"])

    return write


def python_data_source_sink(spark: "SparkSession", name: str, options: dict[str, Any], output_mode: str | None) -> PythonDataSourceSink | None:
    """The sink of the Python data source registered as ``name``, None when there is none."""
    cls = lookup_python_data_source(spark, name)
    if cls is None:
        return None
    return PythonDataSourceSink(cls, dict(options), output_mode)
