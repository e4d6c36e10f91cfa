"""``writeStream.toTable(name)``: append a stream to a catalog table.

Spark: ``DataStreamWriter.toTable``. What is mirrored, in Spark's order:

1. A temporary view of that name is refused.
2. A table that does not exist is created, as a ``CREATE TABLE`` would: the stream's columns (all
   nullable), ``USING`` the writer's format (``spark.sql.sources.default``, i.e. ``parquet``, when
   none was given), ``PARTITIONED BY`` the writer's ``partitionBy`` columns or ``CLUSTER BY`` its
   ``clusterBy`` columns, and at the writer's ``path`` option when there is one (an external table)
   or else in the warehouse (managed). The writer's other options are not stored on the table.
3. A view is refused; a table whose provider is not the writer's format is refused.
4. The query then runs as the file sink of the table's provider, writing into the table's location
   (with the ``_spark_metadata`` log, through which ``spark.table(name)`` reads the committed files
   only). As in Spark, the files are partitioned by the *writer's* ``partitionBy`` columns.

Only file-based tables (``parquet``, ``json``, ``csv``, ``orc``, ``text``) can be written; Spark
also writes to V2 tables of other catalogs, which statestream does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pyspark.sql.session import SparkSession as ClassicSparkSession  # PySpark's own sql, not an enabled session's

from statestream.errors import (
    table_not_file_based_error,
    table_provider_mismatch_error,
    table_temp_view_error,
    table_view_error,
    table_without_location_error,
    table_without_provider_error,
)
from statestream.sinks import FILE_FORMATS
from statestream.sources.options import default_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["TableTarget", "prepare_table", "default_source"]


@dataclass(frozen=True)
class TableTarget:
    """Where a ``toTable`` query writes: the table's provider (the file sink's format) and its
    location (the file sink's path, as Spark's catalog prints it, e.g. ``file:/...``)."""

    format: str
    path: str
    created: bool


def _catalog_entry(spark: "SparkSession", name: str) -> Any | None:
    """``spark.catalog.getTable(name)``, or ``None`` when nothing has that name."""
    from pyspark.errors import AnalysisException

    try:
        return spark.catalog.getTable(name)
    except AnalysisException:
        return None


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _create_table(
    spark: "SparkSession",
    name: str,
    source: str,
    schema: "StructType",
    partition_by: Sequence[str],
    path: str | None,
    cluster_by: Sequence[str] = (),
) -> None:
    from pyspark.sql.types import StructField, StructType

    nullable = StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])
    sql = f"CREATE TABLE {name} ({nullable.toDDL()}) USING {_quote(source)}"
    if partition_by:
        sql += " PARTITIONED BY (" + ", ".join(_quote(c) for c in partition_by) + ")"
    if cluster_by:
        # Spark's toTable also keeps the writer's clustering option as a table property
        sql += " CLUSTER BY (" + ", ".join(_quote(c) for c in cluster_by) + ")"
        sql += f" TBLPROPERTIES ('__clustering_columns' = {_sql_string(json.dumps(list(cluster_by), separators=(',', ':')))})"
    if path:
        sql += f" LOCATION {_sql_string(path)}"
    ClassicSparkSession.sql(spark, sql)


def prepare_table(
    spark: "SparkSession",
    name: str,
    source: str | None,
    options: Mapping[str, Any],
    partition_by: Sequence[str],
    schema: "StructType",
    cluster_by: Sequence[str] = (),
) -> TableTarget:
    """Steps 1 to 3 of the module's docstring: the table ``name`` exists afterwards, and the
    returned target says what to write where.

    Parameters
    ----------
    source:
        The writer's format, ``None`` for Spark's default source.
    options:
        The writer's options; ``path`` (any case) becomes the location of a new table.
    cluster_by:
        The writer's ``clusterBy`` columns (checked, in the stream's spelling): a new table is
        created ``CLUSTER BY`` them.
    """
    fmt = source if source is not None else default_source(spark)
    entry = _catalog_entry(spark, name)
    if entry is not None and entry.isTemporary:
        raise table_temp_view_error(name)
    created = False
    if entry is None:
        lowered = {str(k).lower(): v for k, v in options.items()}
        path = lowered.get("path")
        _create_table(spark, name, fmt, schema, partition_by, None if path is None else str(path), cluster_by)
        created = True
    elif (entry.tableType or "").upper() == "VIEW":
        raise table_view_error(name)
    info = json.loads(ClassicSparkSession.sql(spark, f"DESCRIBE TABLE EXTENDED {name} AS JSON").collect()[0][0])
    if str(info.get("type", "")).upper() == "VIEW":
        raise table_view_error(name)
    provider = info.get("provider")
    if provider is None:
        raise table_without_provider_error(name)
    if fmt != provider:
        raise table_provider_mismatch_error(fmt, name, provider)
    if provider.lower() not in FILE_FORMATS:
        raise table_not_file_based_error(FILE_FORMATS, name, provider)
    location = info.get("location")
    if not location:
        raise table_without_location_error(name)
    return TableTarget(format=provider.lower(), path=str(location), created=created)
