"""DataStreamReader (``StreamingSession.readStream``) with PySpark's names, arguments and chaining,
and the ``SourceSpec`` of a streaming relation.

Below ``session.py`` and above ``dataframe.py`` (the reader makes DataFrames; the DataFrame makes
the writer, ``writer.py``): the session is typed with ``StreamingSessionLike``, as importing
``session.py`` here would be a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.session import SparkSession as ClassicSparkSession

from statestream.api.dataframe import DataFrame
from statestream.errors import missing_member, not_supported_yet
from statestream.api.handover import root
from statestream.plan import logical as L
from statestream.sources import create_source
from statestream.sources.options import default_source, option_string
from statestream.sources.table import table_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from statestream.runtime.interfaces import StreamingSessionLike
    from statestream.sources.base import Source

__all__ = ["DataStreamReader", "SourceSpec", "memory_stream_df"]


@dataclass
class SourceSpec:
    """How to create a source when a query starts (each run gets a fresh source object, given
    its ``sources/<i>`` checkpoint directory). A ``MemoryStream`` is passed as ``instance`` and
    shared across runs, like Spark's."""

    format: str
    #: the reader's options; ``None`` for an option set to null
    options: dict[str, str | None] = field(default_factory=dict)
    schema: Any = None
    path: str | None = None
    instance: Any = None
    #: the schema the source had when the DataFrame was made (Spark fixes it at ``load()``)
    load_schema: Any = None

    @property
    def short_name(self) -> str:
        """The source's name in Spark's plans: ``FileSource[<path>]`` for a file source."""
        if self.instance is not None:
            return "MemoryStream"
        if self.format.lower() in ("parquet", "json", "csv", "orc", "text") and self.path:
            return f"FileSource[{self.path}]"
        return self.format

    def create(self, spark: "SparkSession", metadata_dir: str | None) -> "Source":
        """The source this spec describes: the ``MemoryStream`` instance itself, or a new source made
        from the format, options, schema and path (with the schema fixed at ``load()``, when the
        source can keep it).

        Parameters
        ----------
        spark : SparkSession
            The session the source reads with.
        metadata_dir : str or None
            The checkpoint's directory for the source's own metadata; ``None`` for a probe.
        """
        if self.instance is not None:
            return self.instance

        source = create_source(self.format, dict(self.options), self.schema, self.path, metadata_dir, spark)
        if self.load_schema is not None and hasattr(source, "fix_schema"):
            source.fix_schema(self.load_schema)
        return source


class DataStreamReader:
    """``StreamingSession.readStream``: PySpark's ``DataStreamReader``, whose streams run on
    statestream's engine.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> reader = ss.readStream.format("rate").option("rowsPerSecond", 10)
    >>> reader.load().dtypes
    [('timestamp', 'timestamp'), ('value', 'bigint')]
    """

    def __init__(self, session: "StreamingSessionLike") -> None:
        self._session = session
        #: ``None`` until ``format`` is called: Spark's default is ``spark.sql.sources.default``
        self._format: str | None = None
        self._options: dict[str, str | None] = {}
        self._schema: Any = None

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.streaming.readwriter import DataStreamReader as _PySpark

        raise missing_member("DataStreamReader", _PySpark, name)

    def format(self, source: str) -> "DataStreamReader":
        """Set the source's format (``"rate"``, ``"json"``, ``"kafka"``, ...), as PySpark's
        ``DataStreamReader.format``; without it ``load()`` uses ``spark.sql.sources.default``.

        Parameters
        ----------
        source : str
            The source's short name.

        Returns
        -------
        DataStreamReader
            This reader.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.format("rate").load().columns
        ['timestamp', 'value']
        """
        self._format = source
        return self

    def option(self, key: str, value: Any) -> "DataStreamReader":
        """Set an option; ``None`` sets it to null, as PySpark does (a file source's own option
        then reads as ``'null'``, a V2 source's takes its default, a file format's option goes
        to Spark's reader as null).

        Parameters
        ----------
        key : str
            The option's name (Spark's options are case-insensitive).
        value : str, int, float, bool or None
            Kept as Spark keeps it: a string (``True`` becomes ``'true'``).

        Returns
        -------
        DataStreamReader
            This reader.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.format("rate").option("rowsPerSecond", 10).load().isStreaming
        True
        """
        self._options[key] = option_string(value)
        return self

    def options(self, **options: Any) -> "DataStreamReader":
        """Set several options, as PySpark's ``DataStreamReader.options``: each as ``option(key, value)``
        would (a ``None`` value sets the option to null).

        Returns
        -------
        DataStreamReader
            This reader.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.format("rate").options(rowsPerSecond=10, numPartitions=1).load().isStreaming
        True
        """
        for k, v in options.items():
            self.option(k, v)
        return self

    def schema(self, schema: "StructType | str") -> "DataStreamReader":
        """Set the schema of the rows to read, as PySpark's ``DataStreamReader.schema`` (file sources
        need one unless schema inference is on).

        Parameters
        ----------
        schema : StructType or str
            A ``StructType``, or a DDL string (``"a INT, b STRING"``) parsed with ``StructType.fromDDL``.

        Returns
        -------
        DataStreamReader
            This reader.

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_schema")
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.schema("a INT, b STRING").json(f"{tmp}/reader_schema").dtypes
        [('a', 'int'), ('b', 'string')]
        """
        from pyspark.sql.types import StructType

        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)  # type: ignore[assignment]  # a field list parses to a StructType
        self._schema = schema
        return self

    def load(self, path: str | None = None, format: str | None = None, schema: Any = None, **options: Any) -> "DataFrame":  # noqa: A002
        """The streaming DataFrame over the source, as PySpark's ``DataStreamReader.load``. The source
        is made once here, so a bad option or a missing schema fails at ``load()``, as in Spark.

        Parameters
        ----------
        path : str, optional
            The path of a file source (or a source's ``path`` option).
        format : str, optional
            Sets the format, as ``format()`` would.
        schema : StructType or str, optional
            Sets the schema, as ``schema()`` would.
        **options
            Set as ``options()`` would.

        Returns
        -------
        DataFrame
            A streaming DataFrame (``isStreaming`` is true).

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_load")
        >>> with open(f"{tmp}/reader_load/part-0.json", "w") as f:
        ...     _ = f.write('{"a": 1}' + chr(10) + '{"a": 2}' + chr(10))
        >>> ss = StreamingSession(spark)
        >>> df = ss.readStream.load(f"{tmp}/reader_load", format="json", schema="a INT")
        >>> q = df.writeStream.format("memory").queryName("reader_load").start()
        >>> q.processAllAvailable()
        >>> sorted(spark.table("reader_load").collect())
        [Row(a=1), Row(a=2)]
        >>> q.stop()
        """
        if format is not None:
            self.format(format)
        if schema is not None:
            self.schema(schema)
        self.options(**options)
        fmt = self._format if self._format is not None else default_source(self._session.sparkSession)
        spec = SourceSpec(fmt.lower(), dict(self._options), self._schema, path)
        return _relation(self._session, spec)

    # PySpark's format methods name their options as arguments and leave those given as None
    # unset (only option()/options()/load() set an option to null)
    def parquet(self, path: str, **options: Any) -> "DataFrame":
        """A stream of the Parquet files that arrive under ``path``, as PySpark's
        ``DataStreamReader.parquet``; options given as ``None`` are left unset.

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_parquet")
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.schema("a INT").parquet(f"{tmp}/reader_parquet").isStreaming
        True
        """
        return self.format("parquet").load(path, **_not_none(options))

    def json(self, path: str, schema: Any = None, **options: Any) -> "DataFrame":
        """A stream of the JSON-lines files that arrive under ``path``, as PySpark's
        ``DataStreamReader.json``; options given as ``None`` are left unset.

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_json")
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.json(f"{tmp}/reader_json", schema="a INT, b STRING").columns
        ['a', 'b']
        """
        return self.format("json").load(path, schema=schema, **_not_none(options))

    def csv(self, path: str, schema: Any = None, **options: Any) -> "DataFrame":
        """A stream of the CSV files that arrive under ``path``, as PySpark's ``DataStreamReader.csv``;
        options given as ``None`` are left unset.

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_csv")
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.csv(f"{tmp}/reader_csv", schema="a INT, b STRING", header=True).columns
        ['a', 'b']
        """
        return self.format("csv").load(path, schema=schema, **_not_none(options))

    def text(
        self,
        path: str,
        wholetext: bool = False,
        lineSep: str | None = None,  # noqa: N803
        pathGlobFilter: Any = None,  # noqa: N803
        recursiveFileLookup: Any = None,  # noqa: N803
        **options: Any,
    ) -> "DataFrame":
        """Lines of text files as ``value STRING`` (no schema needed, as in Spark)."""
        given = dict(wholetext=wholetext, lineSep=lineSep, pathGlobFilter=pathGlobFilter, recursiveFileLookup=recursiveFileLookup)
        return self.format("text").load(path, **_not_none({**options, **given}))

    def orc(
        self,
        path: str,
        mergeSchema: Any = None,  # noqa: N803
        pathGlobFilter: Any = None,  # noqa: N803
        recursiveFileLookup: Any = None,  # noqa: N803
        **options: Any,
    ) -> "DataFrame":
        """A stream of the ORC files that arrive under ``path``, as PySpark's ``DataStreamReader.orc``;
        options given as ``None`` are left unset.

        Examples
        --------
        >>> import os
        >>> os.makedirs(f"{tmp}/reader_orc")
        >>> ss = StreamingSession(spark)
        >>> ss.readStream.schema("a INT").orc(f"{tmp}/reader_orc").isStreaming
        True
        """
        given = dict(mergeSchema=mergeSchema, pathGlobFilter=pathGlobFilter, recursiveFileLookup=recursiveFileLookup)
        return self.format("orc").load(path, **_not_none({**options, **given}))

    def xml(self, path: str, rowTag: str | None = None, schema: Any = None, **options: Any) -> "DataFrame":  # noqa: N803
        """XML files (PySpark 4.0+); ``rowTag`` names the element that makes a row."""
        from pyspark.sql.streaming.readwriter import DataStreamReader as _SparkReader

        if not hasattr(_SparkReader, "xml"):
            raise not_supported_yet("DataStreamReader", "xml", "this PySpark has no XML source")
        return self.format("xml").load(path, schema=schema, **_not_none(dict(rowTag=rowTag, **options)))

    def table(self, tableName: str) -> "DataFrame":  # noqa: N803
        """A stream over a table: a streaming temporary view of this session, or a file-based
        catalog table, whose files are read as a file source (as Spark does)."""
        view = self._session._view(tableName)  # noqa: SLF001
        if view is not None:
            return view

        fmt, path, schema, options = table_source(self._session.sparkSession, tableName)
        spec = SourceSpec(fmt, {**options, **self._options}, schema, path)
        spark = self._session.sparkSession
        return root(_relation(self._session, spec), lambda: ClassicSparkSession.readStream.fget(spark).table(tableName))  # type: ignore[attr-defined]


def _not_none(options: dict[str, Any]) -> dict[str, Any]:
    """PySpark's reader methods leave options given as ``None`` unset."""
    return {k: v for k, v in options.items() if v is not None}


def _relation(session: "StreamingSessionLike", spec: SourceSpec) -> "DataFrame":
    spark = session.sparkSession
    probe = spec.create(spark, None)  # validates options and gives the schema (Spark fails at load())
    schema = probe.schema
    if spec.instance is None:
        spec.load_schema = schema
        probe.stop()
    template = spark.createDataFrame([], schema)
    df = DataFrame(L.StreamingRelation(template=template, source_spec=spec), session)
    if spec.instance is None:  # a MemoryStream is statestream's own: no twin on Spark's engine
        root(df, lambda: _spark_stream(spark, spec))
    return df


def _spark_stream(spark: "SparkSession", spec: SourceSpec) -> Any:
    """The same stream read by Spark's own engine (the twin a hand-over replays the query on)."""
    reader = ClassicSparkSession.readStream.fget(spark).format(spec.format)  # type: ignore[attr-defined]
    if spec.schema is not None:
        reader = reader.schema(spec.schema)
    for key, value in spec.options.items():
        reader = reader.option(key, value)
    return reader.load(spec.path) if spec.path is not None else reader.load()


def memory_stream_df(session: "StreamingSessionLike", stream: Any) -> "DataFrame":
    """A streaming DataFrame over a ``MemoryStream`` (tests)."""
    return _relation(session, SourceSpec("memory", instance=stream))
