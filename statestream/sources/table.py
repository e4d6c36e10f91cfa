"""``readStream.table(name)`` over a catalog table.

Spark streams a file-based table of its session catalog (``saveAsTable`` with ``parquet``,
``json``, ``csv``, ``orc``, ``text``) by reading the table's location as a file source: the
table's provider is the format, its schema (partition columns last) the source schema and its
storage properties the reader options (``explain()`` shows ``StreamingRelation
FileSource[<location>]``). A batch temporary view is refused with Spark's error; other tables
(views, Hive SerDe tables, tables of a v2 catalog that needs a streaming scan) are refused as not
supported yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.session import SparkSession as ClassicSparkSession  # PySpark's own sql, not an enabled session's

from statestream.checkpoint.file_stream_log import uri_to_path
from statestream.errors import not_supported_yet, streaming_table_is_temp_view_error
from statestream.sources import FILE_FORMATS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["table_source"]


def table_source(spark: "SparkSession", name: str) -> tuple[str, str, "StructType", dict[str, str]]:
    """``(format, location, schema, options)`` of the file source that streams table ``name``.

    Raises
    ------
    AnalysisException
        Spark's own, for a table that does not exist.
    NotSupportedYetError
        A view, or a table whose provider is not one of the file sources.
    """
    schema = ClassicSparkSession.table(spark, name).schema  # Spark's TABLE_OR_VIEW_NOT_FOUND for an unknown name
    if spark.catalog.getTable(name).isTemporary:
        raise streaming_table_is_temp_view_error(name)
    info: dict[str, Any] = {}
    storage: dict[str, str] = {}
    for row in ClassicSparkSession.sql(spark, f"DESCRIBE TABLE EXTENDED {name}").collect():
        key = (row[0] or "").strip()
        if key:
            info.setdefault(key, row[1])
    kind = str(info.get("Type") or "").upper()
    provider = str(info.get("Provider") or "").lower()
    location = info.get("Location")
    if kind == "VIEW" or not location or provider not in FILE_FORMATS:
        what = "a view" if kind == "VIEW" else f"a table with provider '{provider or 'unknown'}'"
        raise not_supported_yet(
            "DataStreamReader", "table", f"{name} is {what}; statestream streams file-based catalog tables only"
        )
    raw_props = str(info.get("Storage Properties") or "").strip()
    if raw_props.startswith("[") and raw_props.endswith("]"):
        for part in raw_props[1:-1].split(", "):
            if "=" in part:
                k, v = part.split("=", 1)
                storage[k] = v
    path = str(location)
    return provider, uri_to_path(path) if path.startswith("file:") else path, schema, storage
