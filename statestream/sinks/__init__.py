"""Built-in streaming sinks and the factory the writer uses to build them.

``create_sink`` maps a ``writeStream.format(...)`` name to a :class:`~statestream.sinks.base.Sink`:

* ``console``: :class:`~statestream.sinks.console.ConsoleSink`
* ``memory``: :class:`~statestream.sinks.memory.MemorySink` (needs ``queryName``)
* ``noop``: :class:`~statestream.sinks.noop.NoopSink`
* ``foreach`` (with ``foreach_writer``): :class:`~statestream.sinks.foreach.ForeachSink`
* ``foreachBatch`` (or any format when ``foreach_batch`` is given): :class:`~statestream.sinks.foreach_batch.ForeachBatchSink`
* ``parquet``, ``json``, ``csv``, ``orc``, ``text``: :class:`~statestream.sinks.files.FileStreamSink` (append only)

``writeStream.toTable`` resolves (or creates) its table with :func:`statestream.sinks.table.prepare_table`
and then writes through the file sink of the table's provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from statestream.errors import (
    data_source_not_found_error,
    file_sink_output_mode_error,
    sink_partitioning_not_supported_error,
    sink_path_not_specified_error,
)
from statestream.sinks.console import ConsoleSink
from statestream.sinks.foreach import ForeachSink
from statestream.sinks.foreach_batch import ForeachBatchSink
from statestream.sinks.noop import NoopSink
from statestream.sinks.python_datasource import python_data_source_sink
from statestream.sources.options import present_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from statestream.sinks.base import Sink

__all__ = ["create_sink", "FILE_FORMATS", "validate_output_mode"]

FILE_FORMATS = ("parquet", "json", "csv", "orc", "text")


#: Sinks Spark refuses ``partitionBy`` for, with the name its error shows.
_UNPARTITIONED = {"memory": "memory", "foreach": "foreach", "foreachbatch": "foreachBatch"}


def validate_output_mode(fmt: str, output_mode: str) -> None:
    """Raise Spark's ``start()`` error if sink ``fmt`` cannot take ``output_mode``
    (file sinks accept only append)."""
    if fmt.lower() in FILE_FORMATS and output_mode.lower() != "append":
        raise file_sink_output_mode_error(fmt.lower(), output_mode)


def create_sink(
    fmt: str,
    options: Mapping[str, Any] | None,
    query_name: str | None,
    spark: "SparkSession",
    *,
    foreach_batch: Callable[..., Any] | None = None,
    foreach_writer: Any = None,
    output_mode: str | None = None,
    partition_by: Sequence[str] | None = None,
    path: str | None = None,
    schema: "StructType | None" = None,
) -> "Sink":
    """Build the sink for ``format(fmt)``.

    Parameters
    ----------
    fmt:
        Format name, case-insensitive (``foreachBatch`` is what ``DataStreamWriter.foreachBatch``
        sets).
    options:
        Writer options; ``path`` is taken from here when ``path`` is not given.
    query_name:
        ``queryName(...)``; required by the memory sink.
    spark:
        The user's session (the memory sink registers its view there).
    foreach_batch:
        The function given to ``foreachBatch``.
    foreach_writer:
        The writer (object or function) given to ``foreach``.
    output_mode:
        Checked now for file sinks, so ``start()`` fails like Spark's.
    partition_by:
        File sinks: ``partitionBy`` columns.
    schema:
        Memory sink: lets the (empty) view exist before the first batch.

    Raises
    ------
    AnalysisException
        Memory sink without ``queryName``; file sink in a mode other than append; ``partitionBy``
        with the memory, ``foreach`` or ``foreachBatch`` sink.
    IllegalArgumentException
        File sink without a path (Spark: ``'path' is not specified.``).
    """
    name = fmt.lower()
    opts = dict(options or {})
    if partition_by and name in _UNPARTITIONED:
        raise sink_partitioning_not_supported_error(_UNPARTITIONED[name])
    if name == "foreach":
        return ForeachSink(foreach_writer)
    if foreach_batch is not None or name == "foreachbatch":
        if foreach_batch is None:
            raise ValueError("format('foreachBatch') needs the function given to foreachBatch(func)")
        return ForeachBatchSink(foreach_batch)
    if name == "console":
        return ConsoleSink(present_options(opts))  # a V2 sink: an option set to None takes its default
    if name == "noop":
        return NoopSink()
    if name == "memory":
        from statestream.sinks.memory import MemorySink  # lazy: pyarrow; a foreach task's worker imports this package

        return MemorySink(spark, query_name, schema=schema, output_mode=output_mode)
    if name == "kafka":
        from statestream.sinks.kafka import KafkaSink  # lazy: pyarrow; a foreach task's worker imports this package

        return KafkaSink(opts)
    if name in FILE_FORMATS:
        from statestream.sinks.files import FileStreamSink  # lazy: pyarrow; a foreach task's worker imports this package

        if output_mode is not None:
            validate_output_mode(name, output_mode)
        lowered = {str(k).lower(): v for k, v in opts.items()}
        target = path if path is not None else lowered.get("path")
        if not target:
            raise sink_path_not_specified_error()
        return FileStreamSink(spark, str(target), name, opts, partition_by=partition_by, output_mode=output_mode)

    python_sink = python_data_source_sink(spark, fmt, opts, output_mode)  # registered with spark.dataSource.register
    if python_sink is not None:
        return python_sink
    raise data_source_not_found_error(fmt)
