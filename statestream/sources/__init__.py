"""Built-in streaming sources and the factory the reader uses to build them.

``create_source`` maps a ``readStream.format(...)`` name to a :class:`~statestream.sources.base.Source`:

* ``rate``: :class:`~statestream.sources.rate.RateSource`
* ``rate-micro-batch``: :class:`~statestream.sources.rate_micro_batch.RatePerMicroBatchSource`
* ``socket``: :class:`~statestream.sources.socket.TextSocketSource`
* ``kafka``: :class:`~statestream.sources.kafka.stream.KafkaMicroBatchStream`
* ``parquet``, ``json``, ``csv``, ``orc``, ``text``, ``xml``: :class:`~statestream.sources.files.FileStreamSource`

``MemoryStream`` (tests) is created directly, not through the factory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from statestream.errors import data_source_not_found_error, kafka_fixed_schema_error, user_schema_not_supported_error
from statestream.sources.options import present_options
from statestream.sources.python_datasource import python_data_source
from statestream.sources.rate_micro_batch import RatePerMicroBatchSource
from statestream.sources.socket import TextSocketSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from statestream.sources.base import Source

__all__ = ["create_source", "FILE_FORMATS"]

#: Formats served by the file source (Spark's built-in file formats).
FILE_FORMATS = ("parquet", "json", "csv", "orc", "text", "xml")


def create_source(
    fmt: str,
    options: Mapping[str, Any] | None,
    schema: "StructType | str | None",
    path: str | None,
    metadata_dir: str | None,
    spark: "SparkSession | None",
    clock: Any = None,
) -> "Source":
    """Build the source for ``format(fmt)``.

    Parameters
    ----------
    fmt:
        Format name, case-insensitive.
    options:
        Reader options as given by the user (string values, or ``None`` for an option set to
        null, as PySpark sets it; keys case-insensitive).
    schema:
        User schema (``StructType`` or DDL); required by file sources, refused by ``rate``.
    path:
        ``load(path)``; file sources also accept ``options["path"]``.
    metadata_dir:
        ``<checkpoint>/sources/<i>`` or ``None`` (no recovery, e.g. when only probing the schema).
    spark:
        The user's session.
    clock:
        Rate source only: a callable returning epoch ms (tests).

    Raises
    ------
    IllegalArgumentException
        Missing schema or path, invalid option values (Spark's texts).
    UnsupportedOperationException
        A user schema given to ``rate``.
    StatestreamError
        An unknown format (Spark: ``[DATA_SOURCE_NOT_FOUND]``).
    """
    name = fmt.lower()
    opts = dict(options or {})
    if name in ("rate", "rate-micro-batch", "socket"):
        opts = present_options(opts)  # V2 sources: an option set to None takes its default
    if name == "rate":
        if schema is not None:
            raise user_schema_not_supported_error("RateStreamProvider")
        from statestream.sources.rate import RateSource  # lazy: pyarrow.fs; a Kafka task's worker imports this package

        return RateSource(spark, opts, metadata_dir=metadata_dir, clock=clock)
    if name == "rate-micro-batch":
        if schema is not None:
            raise user_schema_not_supported_error("RatePerMicroBatchProvider")

        return RatePerMicroBatchSource(spark, opts)
    if name == "socket":
        if schema is not None:
            raise user_schema_not_supported_error("TextSocketSourceProvider")

        return TextSocketSource(spark, opts)
    if name == "kafka":
        from statestream.sources.kafka.stream import KafkaMicroBatchStream  # lazy: pyarrow.fs; a Kafka task's worker imports this package

        source = KafkaMicroBatchStream({k: v for k, v in opts.items() if v is not None}, metadata_dir=metadata_dir)
        if schema is not None:
            raise kafka_fixed_schema_error()
        return source
    if name in FILE_FORMATS:
        from statestream.sources.files import FileStreamSource  # lazy: pyarrow.fs; a Kafka task's worker imports this package

        return FileStreamSource(spark, path, name, schema, opts, metadata_dir=metadata_dir)

    python_source = python_data_source(spark, fmt, opts, schema, path)  # registered with spark.dataSource.register
    if python_source is not None:
        return python_source
    raise data_source_not_found_error(fmt)
