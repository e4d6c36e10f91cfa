"""Every public member of PySpark's streaming surface, called on Spark's engine and on statestream
with the same arguments: ``DataFrame`` and ``GroupedData`` of a streaming DataFrame,
``DataStreamReader`` (``readStream``), ``DataStreamWriter`` (``writeStream``), ``StreamingQuery``
(a started query), ``StreamingQueryManager`` (``streams``), ``DataFrameNaFunctions`` (``df.na``)
and ``DataFrameStatFunctions`` (``df.stat``).

Each member must do one of three things on statestream: what it does on Spark's engine (a
DataFrame, a Column, ... of the same kind), Spark's own error where Spark refuses it on a stream
(the same error condition), or a ``NotSupportedYetError`` that names it. Never ``AttributeError``.
A member a future PySpark adds fails ``test_every_member_is_classified`` until it gets a row
in the table of its class (``DATAFRAME_CALLS``, ``GROUPED_CALLS``, ``READER_CALLS``, ...).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame as SparkDataFrame
from pyspark.sql import GroupedData as SparkGroupedData
from pyspark.sql import functions as F
from pyspark.sql.dataframe import DataFrameNaFunctions as SparkNaFunctions
from pyspark.sql.dataframe import DataFrameStatFunctions as SparkStatFunctions
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery as SparkStreamingQuery
from pyspark.sql.streaming.query import StreamingQueryManager as SparkStreamingQueryManager
from pyspark.sql.streaming.readwriter import DataStreamReader as SparkDataStreamReader
from pyspark.sql.streaming.readwriter import DataStreamWriter as SparkDataStreamWriter
from pyspark.sql.types import StructType

SCHEMA = "id LONG, v DOUBLE, s STRING, ts TIMESTAMP"


def _view(name: str, df: Any) -> str:
    """A view name per engine (global temporary views are shared by all sessions)."""
    return f"{name}_{type(df).__module__.split('.')[0]}"


def _static(spark):
    return spark.range(3).selectExpr("id", "CAST(id AS DOUBLE) AS v", "CAST(id AS STRING) AS s", "CAST(id AS TIMESTAMP) AS ts")


#: member -> function of (streaming DataFrame, static DataFrame) calling it; ``None``: a property
DATAFRAME_CALLS: dict[str, Callable[[Any, Any], Any] | None] = {
    "agg": lambda df, st: df.agg(F.count("*")),
    "alias": lambda df, st: df.alias("a"),
    "approxQuantile": lambda df, st: df.approxQuantile("v", [0.5], 0.1),
    "asTable": lambda df, st: df.asTable(),
    "cache": lambda df, st: df.cache(),
    "checkpoint": lambda df, st: df.checkpoint(),
    "coalesce": lambda df, st: df.coalesce(1),
    "colRegex": lambda df, st: df.colRegex("`v`"),
    "collect": lambda df, st: df.collect(),
    "columns": None,
    "corr": lambda df, st: df.corr("v", "id"),
    "count": lambda df, st: df.count(),
    "cov": lambda df, st: df.cov("v", "id"),
    "createGlobalTempView": lambda df, st: df.createGlobalTempView(_view("surface_gv1", df)),
    "createOrReplaceGlobalTempView": lambda df, st: df.createOrReplaceGlobalTempView(_view("surface_gv2", df)),
    "createOrReplaceTempView": lambda df, st: df.createOrReplaceTempView(_view("surface_v3", df)),
    "createTempView": lambda df, st: df.createTempView(_view("surface_v4", df)),
    "crossJoin": lambda df, st: df.crossJoin(st),
    "crosstab": lambda df, st: df.crosstab("s", "id"),
    "cube": lambda df, st: df.cube("s"),
    "describe": lambda df, st: df.describe(),
    "distinct": lambda df, st: df.distinct(),
    "drop": lambda df, st: df.drop("v"),
    "dropDuplicates": lambda df, st: df.dropDuplicates(),
    "dropDuplicatesWithinWatermark": lambda df, st: df.withWatermark("ts", "1 second").dropDuplicatesWithinWatermark(),
    "drop_duplicates": lambda df, st: df.drop_duplicates(),
    "dropna": lambda df, st: df.dropna(),
    "dtypes": None,
    "exceptAll": lambda df, st: df.exceptAll(st),
    "executionInfo": None,
    "exists": lambda df, st: df.exists(),
    "explain": lambda df, st: df.explain(),
    "fillna": lambda df, st: df.fillna(0),
    "filter": lambda df, st: df.filter("id > 0"),
    "first": lambda df, st: df.first(),
    "foreach": lambda df, st: df.foreach(lambda r: None),
    "foreachPartition": lambda df, st: df.foreachPartition(lambda it: None),
    "freqItems": lambda df, st: df.freqItems(["s"]),
    "groupBy": lambda df, st: df.groupBy("s"),
    "groupby": lambda df, st: df.groupby("s"),
    "groupingSets": lambda df, st: df.groupingSets([["s"]], "s"),
    "head": lambda df, st: df.head(1),
    "hint": lambda df, st: df.hint("broadcast"),
    "inputFiles": lambda df, st: df.inputFiles(),
    "intersect": lambda df, st: df.intersect(st),
    "intersectAll": lambda df, st: df.intersectAll(st),
    "isEmpty": lambda df, st: df.isEmpty(),
    "isLocal": lambda df, st: df.isLocal(),
    "isStreaming": None,
    "join": lambda df, st: df.join(st, "id"),
    "lateralJoin": lambda df, st: df.lateralJoin(st),
    "limit": lambda df, st: df.limit(1),
    "localCheckpoint": lambda df, st: df.localCheckpoint(),
    "mapInArrow": lambda df, st: df.mapInArrow(lambda it: it, SCHEMA),
    "mapInPandas": lambda df, st: df.mapInPandas(lambda it: it, SCHEMA),
    "melt": lambda df, st: df.melt(["id"], ["v"], "k", "val"),
    "mergeInto": lambda df, st: df.mergeInto("t", F.lit(True)),
    "metadataColumn": lambda df, st: df.metadataColumn("_metadata"),
    "na": None,
    "observe": lambda df, st: df.observe("m", F.count("*").alias("c")),
    "offset": lambda df, st: df.offset(1),
    "orderBy": lambda df, st: df.orderBy("id"),
    "pandas_api": lambda df, st: df.pandas_api(),
    "persist": lambda df, st: df.persist(),
    "plot": None,
    "printSchema": lambda df, st: df.printSchema(),
    "randomSplit": lambda df, st: df.randomSplit([0.5, 0.5], 7),
    "rdd": None,
    "registerTempTable": lambda df, st: df.registerTempTable(_view("surface_v5", df)),
    "repartition": lambda df, st: df.repartition(2, "s"),
    "repartitionById": lambda df, st: df.repartitionById(2, F.col("id").cast("int")),
    "repartitionByRange": lambda df, st: df.repartitionByRange(2, "id"),
    "replace": lambda df, st: df.replace(1.0, 2.0),
    "rollup": lambda df, st: df.rollup("s"),
    "sameSemantics": lambda df, st: df.sameSemantics(df),
    "sample": lambda df, st: df.sample(0.5, 3),
    "sampleBy": lambda df, st: df.sampleBy("s", {"0": 0.5}, 3),
    "scalar": lambda df, st: df.scalar(),
    "schema": None,
    "select": lambda df, st: df.select("id"),
    "selectExpr": lambda df, st: df.selectExpr("id"),
    "semanticHash": lambda df, st: df.semanticHash(),
    "show": lambda df, st: df.show(),
    "sort": lambda df, st: df.sort("id"),
    "sortWithinPartitions": lambda df, st: df.sortWithinPartitions("id"),
    "sparkSession": None,
    "stat": None,
    "storageLevel": None,
    "subtract": lambda df, st: df.subtract(st),
    "summary": lambda df, st: df.summary(),
    "tail": lambda df, st: df.tail(1),
    "take": lambda df, st: df.take(1),
    "to": lambda df, st: df.to(StructType.fromDDL("id LONG, s STRING")),
    "toArrow": lambda df, st: df.toArrow(),
    "toDF": lambda df, st: df.toDF("a", "b", "c", "d"),
    "toJSON": lambda df, st: df.toJSON(),
    "toLocalIterator": lambda df, st: df.toLocalIterator(),
    "toPandas": lambda df, st: df.toPandas(),
    "transform": lambda df, st: df.transform(lambda d: d.select("id")),
    "transpose": lambda df, st: df.transpose(),
    "union": lambda df, st: df.union(df),
    "unionAll": lambda df, st: df.unionAll(df),
    "unionByName": lambda df, st: df.unionByName(df),
    "unpersist": lambda df, st: df.unpersist(),
    "unpivot": lambda df, st: df.unpivot(["id"], ["v"], "k", "val"),
    "where": lambda df, st: df.where("id > 0"),
    "withColumn": lambda df, st: df.withColumn("x", F.lit(1)),
    "withColumnRenamed": lambda df, st: df.withColumnRenamed("v", "w"),
    "withColumns": lambda df, st: df.withColumns({"x": F.lit(1)}),
    "withColumnsRenamed": lambda df, st: df.withColumnsRenamed({"v": "w"}),
    "withMetadata": lambda df, st: df.withMetadata("v", {"a": 1}),
    "withWatermark": lambda df, st: df.withWatermark("ts", "1 second"),
    "write": None,
    "writeStream": None,
    "writeTo": lambda df, st: df.writeTo("t"),
}

GROUPED_CALLS: dict[str, Callable[[Any], Any]] = {
    "agg": lambda g: g.agg(F.count("*")),
    "apply": lambda g: g.apply(lambda pdf: pdf),
    "applyInArrow": lambda g: g.applyInArrow(lambda t: t, SCHEMA),
    "applyInPandas": lambda g: g.applyInPandas(lambda pdf: pdf, SCHEMA),
    "applyInPandasWithState": lambda g: g.applyInPandasWithState(lambda k, it, st: it, SCHEMA, "c LONG", "append", "NoTimeout"),
    "avg": lambda g: g.avg("v"),
    "cogroup": lambda g: g.cogroup(g),
    "count": lambda g: g.count(),
    "max": lambda g: g.max("v"),
    "mean": lambda g: g.mean("v"),
    "min": lambda g: g.min("v"),
    "pivot": lambda g: g.pivot("s"),
    "sum": lambda g: g.sum("v"),
    "transformWithState": lambda g: g.transformWithState(object(), SCHEMA, "append", "None"),
    "transformWithStateInPandas": lambda g: g.transformWithStateInPandas(object(), SCHEMA, "append", "None"),
}



class Side:
    """What the calls of one engine need: the engine (``spark`` or a ``StreamingSession``), its
    streaming DataFrame, a started query, and places of its own (directories, table names)."""

    def __init__(self, tag: str, engine: Any, stream: Any, root: Any, table: str) -> None:
        self.tag = tag
        self.engine = engine
        self.stream = stream
        self.root = root
        #: a parquet table of the session catalog that ``readStream.table`` can stream
        self.table = table
        self.query: Any = None

    def dir(self, name: str) -> str:
        """An empty directory of this engine (input of the file readers)."""
        path = self.root / self.tag / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def checkpoint(self, name: str) -> str:
        return str(self.root / self.tag / f"checkpoint-{name}")


#: DataStreamReader member -> function of (a new ``readStream``, Side)
READER_CALLS: dict[str, Callable[[Any, Side], Any]] = {
    "csv": lambda r, s: r.csv(s.dir("csv"), schema=SCHEMA),
    "format": lambda r, s: r.format("rate"),
    "json": lambda r, s: r.json(s.dir("json"), schema=SCHEMA),
    "load": lambda r, s: r.format("rate").load(),
    "option": lambda r, s: r.option("rowsPerSecond", 5),
    "options": lambda r, s: r.options(rowsPerSecond=5, numPartitions=1),
    "orc": lambda r, s: r.schema(SCHEMA).orc(s.dir("orc")),
    "parquet": lambda r, s: r.schema(SCHEMA).parquet(s.dir("parquet")),
    "schema": lambda r, s: r.schema(SCHEMA),
    "table": lambda r, s: r.table(s.table),
    "text": lambda r, s: r.text(s.dir("text")),
    "xml": lambda r, s: r.xml(s.dir("xml"), rowTag="row", schema=SCHEMA),
}

#: DataStreamWriter member -> function of (a new ``stream.writeStream``, Side); a query it starts
#: is stopped after the comparison
WRITER_CALLS: dict[str, Callable[[Any, Side], Any]] = {
    "clusterBy": lambda w, s: w.clusterBy("id"),
    "foreach": lambda w, s: w.foreach(lambda row: None),
    "foreachBatch": lambda w, s: w.foreachBatch(lambda df, batch_id: None),
    "format": lambda w, s: w.format("noop"),
    "option": lambda w, s: w.option("checkpointLocation", s.checkpoint("option")),
    "options": lambda w, s: w.options(checkpointLocation=s.checkpoint("options"), numRows=5),
    "outputMode": lambda w, s: w.outputMode("append"),
    "partitionBy": lambda w, s: w.partitionBy("s"),
    "queryName": lambda w, s: w.queryName(f"surface_name_{s.tag}"),
    "start": lambda w, s: w.format("noop").option("checkpointLocation", s.checkpoint("start")).start(),
    "toTable": lambda w, s: w.option("checkpointLocation", s.checkpoint("toTable")).toTable(f"surface_to_table_{s.tag}"),
    "trigger": lambda w, s: w.trigger(processingTime="1 second"),
}

#: StreamingQuery member -> function of (the side's started query, Side); ``None``: a property.
#: ``stop`` is called last.
QUERY_CALLS: dict[str, Callable[[Any, Side], Any] | None] = {
    "awaitTermination": lambda q, s: q.awaitTermination(0.2),
    "exception": lambda q, s: q.exception(),
    "explain": lambda q, s: q.explain(),
    "id": None,
    "isActive": None,
    "lastProgress": None,
    "name": None,
    "processAllAvailable": lambda q, s: q.processAllAvailable(),
    "recentProgress": None,
    "runId": None,
    "status": None,
    "stop": lambda q, s: q.stop(),
}


class _Listener(StreamingQueryListener):
    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


_LISTENER = _Listener()

#: StreamingQueryManager member -> function of (``streams``, Side); ``None``: a property
MANAGER_CALLS: dict[str, Callable[[Any, Side], Any] | None] = {
    "active": None,
    "addListener": lambda m, s: m.addListener(_LISTENER),
    "awaitAnyTermination": lambda m, s: (m.resetTerminated(), m.awaitAnyTermination(0.2))[1],
    "get": lambda m, s: m.get(s.query.id),
    "removeListener": lambda m, s: m.removeListener(_LISTENER),
    "resetTerminated": lambda m, s: m.resetTerminated(),
}

#: DataFrameNaFunctions member -> function of the streaming DataFrame's ``na``
NA_CALLS: dict[str, Callable[[Any], Any]] = {
    "drop": lambda na: na.drop(),
    "fill": lambda na: na.fill(0),
    "replace": lambda na: na.replace(1.0, 2.0),
}

#: DataFrameStatFunctions member -> function of the streaming DataFrame's ``stat``
STAT_CALLS: dict[str, Callable[[Any], Any]] = {
    "approxQuantile": lambda st: st.approxQuantile("v", [0.5], 0.1),
    "corr": lambda st: st.corr("v", "id"),
    "cov": lambda st: st.cov("v", "id"),
    "crosstab": lambda st: st.crosstab("s", "id"),
    "freqItems": lambda st: st.freqItems(["s"]),
    "sampleBy": lambda st: st.sampleBy("s", {"0": 0.5}, 3),
}


def _members(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("error", exception)."""
    try:
        return "ok", call()
    except Exception as e:  # noqa: BLE001 - every outcome is compared
        return "error", e


def _condition(e: BaseException) -> str | None:
    get = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    try:
        return get() if get else None
    except Exception:  # noqa: BLE001
        return None


def _kind(value: Any) -> str:
    """A comparable kind of a result: statestream's DataFrame and GroupedData count as PySpark's."""
    name = type(value).__name__
    if isinstance(value, list) and value and all(type(v).__name__ == "DataFrame" for v in value):
        return "list[DataFrame]"
    return name


def _check(member: str, spark_outcome: tuple[str, Any], our_outcome: tuple[str, Any]) -> str | None:
    """A problem with statestream's outcome, or ``None``."""
    from statestream.errors import NotSupportedYetError

    s_kind, s_value = spark_outcome
    o_kind, o_value = our_outcome
    if o_kind == "error" and isinstance(o_value, AttributeError):
        return f"{member}: AttributeError {o_value}"
    if o_kind == "error" and isinstance(o_value, NotSupportedYetError):
        if s_kind == "error" and _condition(s_value):
            return f"{member}: Spark refuses it with {_condition(s_value)}, statestream says not supported yet"
        name = member.split(" ")[0].rsplit(".", 1)[-1]  # "na.replace" -> "replace", "stop (active)" -> "stop"
        return None if name in str(o_value) else f"{member}: the message does not name the member: {o_value}"
    if s_kind == "error":
        if o_kind != "error":
            return f"{member}: Spark raises {type(s_value).__name__} ({_condition(s_value)}: {s_value}), statestream returns {_kind(o_value)}"
        if _condition(s_value) != _condition(o_value) or (_condition(s_value) is None and type(s_value).__name__ != type(o_value).__name__):
            return f"{member}: Spark raises {type(s_value).__name__}/{_condition(s_value)}, statestream {type(o_value).__name__}/{_condition(o_value)}: {o_value}"
        return None
    if o_kind == "error":
        return f"{member}: Spark returns {_kind(s_value)}, statestream raises {type(o_value).__name__}: {o_value}"
    if _kind(s_value) != _kind(o_value):
        return f"{member}: Spark returns {_kind(s_value)}, statestream {_kind(o_value)}"
    return None


@pytest.fixture(scope="module")
def streams(spark, tmp_path_factory):
    from statestream import StreamingSession

    path = str(tmp_path_factory.mktemp("surface") / "in")
    _static(spark).write.parquet(path)
    theirs = spark.readStream.schema(SCHEMA).parquet(path)
    ours = StreamingSession(spark).readStream.schema(SCHEMA).parquet(path)
    return theirs, ours, _static(spark)


#: every PySpark class of the surface and the table that classifies its members
SURFACE: dict[type, dict[str, Any]] = {
    SparkDataFrame: DATAFRAME_CALLS,
    SparkGroupedData: GROUPED_CALLS,
    SparkDataStreamReader: READER_CALLS,
    SparkDataStreamWriter: WRITER_CALLS,
    SparkStreamingQuery: QUERY_CALLS,
    SparkStreamingQueryManager: MANAGER_CALLS,
    SparkNaFunctions: NA_CALLS,
    SparkStatFunctions: STAT_CALLS,
}


@pytest.mark.parametrize("cls", list(SURFACE), ids=lambda c: c.__name__)
def test_every_member_is_classified(cls):
    assert sorted(set(_members(cls)) - set(SURFACE[cls])) == []


def test_dataframe_members_match_spark_or_say_not_supported(streams, capsys):
    theirs, ours, static = streams
    problems = []
    for member in _members(SparkDataFrame):
        call = DATAFRAME_CALLS.get(member)
        if call is None:
            problems.append(_check(member, _outcome(lambda: getattr(theirs, member)), _outcome(lambda: getattr(ours, member))))
        else:
            problems.append(_check(member, _outcome(lambda: call(theirs, static)), _outcome(lambda: call(ours, static))))
    capsys.readouterr()  # explain/printSchema output
    assert [p for p in problems if p] == []


def test_grouped_data_members_match_spark_or_say_not_supported(streams):
    theirs, ours, _ = streams
    problems = []
    for member in _members(SparkGroupedData):
        call = GROUPED_CALLS[member]
        problems.append(_check(member, _outcome(lambda: call(theirs.groupBy("s"))), _outcome(lambda: call(ours.groupBy("s")))))
    assert [p for p in problems if p] == []


def test_a_member_pyspark_may_add_later_is_named(streams, monkeypatch):
    from statestream.errors import NotSupportedYetError

    _, ours, _ = streams
    monkeypatch.setattr(SparkDataFrame, "brandNewMethod", lambda self: None, raising=False)
    with pytest.raises(NotSupportedYetError, match=r"DataFrame\.brandNewMethod\(\) is not supported by statestream yet"):
        ours.brandNewMethod()
    with pytest.raises(AttributeError):
        ours.no_such_column_or_method  # noqa: B018 - still PySpark's AttributeError for a plain typo


def test_not_yet_members_are_listed_in_the_porting_guide():
    """The documentation's porting page (docs/porting.md) names what is not supported yet."""
    from pathlib import Path

    from statestream.api.dataframe import DataFrame

    page = Path(__file__).resolve().parents[2].joinpath("docs", "porting.md").read_text()
    missing = [m for m in DataFrame.NOT_YET if f"`{m}`" not in page]
    assert missing == []


def test_static_dataframe_join_takes_a_statestream_stream(streams):
    """PySpark's ``join``/``crossJoin`` called on a static DataFrame with the stream as argument
    (the stream on the right, as Spark allows for inner, cross and right outer joins): a
    streaming DataFrame on both engines, with the same columns; other arguments still reach
    PySpark's own method."""
    theirs, ours, static = streams
    calls = {
        "join on a name": lambda s: static.join(s, "id"),
        "right outer join": lambda s: static.join(s, on=["id"], how="right"),
        "join on a condition": lambda s: static.join(s, static.id == s.id, "inner"),
        "cross join": lambda s: static.crossJoin(s),
    }
    for name, call in calls.items():
        expected, actual = call(theirs), call(ours)
        assert actual.isStreaming and expected.isStreaming, name
        assert actual.columns == expected.columns, name
        assert type(actual).__module__ == "statestream.api.dataframe", name
    assert not static.join(static, "id").isStreaming  # a static argument: PySpark's join as before


# -- readStream, writeStream, the query and its manager, df.na and df.stat -------------------------


@pytest.fixture(scope="module")
def sides(spark, streams, tmp_path_factory):
    """One ``Side`` per engine, each with a started query (memory sink) that has run its batch."""
    from statestream import StreamingSession

    theirs, ours, _ = streams
    root = tmp_path_factory.mktemp("surface-sides")
    table = "surface_stream_table"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.range(2).selectExpr("id", "CAST(id AS DOUBLE) AS v").write.format("parquet").saveAsTable(table)
    out = []
    for tag, engine, stream in (("spark", spark, theirs), ("ours", StreamingSession(spark), ours)):
        side = Side(tag, engine, stream, root, table)
        side.query = stream.writeStream.format("memory").queryName(f"surface_query_{tag}").start()
        side.query.processAllAvailable()
        out.append(side)
    yield out
    for side in out:
        side.query.stop()
    for tag in ("spark", "ours"):
        spark.sql(f"DROP TABLE IF EXISTS surface_to_table_{tag}")
    spark.sql(f"DROP TABLE IF EXISTS {table}")


def _stop_started(outcome: tuple[str, Any]) -> None:
    """Stop a query that a call started (``start``, ``toTable``)."""
    kind, value = outcome
    if kind == "ok" and type(value).__name__ == "StreamingQuery" and value.isActive:
        value.stop()


def _compare(member: str, call: Callable[[Side], Any], sides: list[Side]) -> str | None:
    theirs, ours = sides
    spark_outcome = _outcome(lambda: call(theirs))
    _stop_started(spark_outcome)
    our_outcome = _outcome(lambda: call(ours))
    _stop_started(our_outcome)
    return _check(member, spark_outcome, our_outcome)


def test_reader_members_match_spark_or_say_not_supported(sides):
    problems = [_compare(m, lambda s: READER_CALLS[m](s.engine.readStream, s), sides) for m in _members(SparkDataStreamReader)]
    assert [p for p in problems if p] == []


def test_writer_members_match_spark_or_say_not_supported(sides):
    problems = [_compare(m, lambda s: WRITER_CALLS[m](s.stream.writeStream, s), sides) for m in _members(SparkDataStreamWriter)]
    assert [p for p in problems if p] == []


def test_query_members_match_spark_or_say_not_supported(sides, capsys):
    """Every member of a started query; ``stop`` last, and then the members again on the stopped
    query (Spark answers them after the end too)."""
    members = sorted(_members(SparkStreamingQuery), key=lambda m: m == "stop")
    problems = []
    for when in ("active", "stopped"):
        for m in members:
            call = QUERY_CALLS[m]
            if call is None:
                problems.append(_compare(f"{m} ({when})", lambda s: getattr(s.query, m), sides))
            else:
                problems.append(_compare(f"{m} ({when})", lambda s: call(s.query, s), sides))
    capsys.readouterr()  # explain's output
    assert [p for p in problems if p] == []


def test_manager_members_match_spark_or_say_not_supported(sides):
    problems = []
    for m in _members(SparkStreamingQueryManager):
        call = MANAGER_CALLS[m]
        if call is None:
            problems.append(_compare(m, lambda s: getattr(s.engine.streams, m), sides))
        else:
            problems.append(_compare(m, lambda s: call(s.engine.streams, s), sides))
    assert [p for p in problems if p] == []


def test_na_and_stat_members_match_spark_or_say_not_supported(streams):
    theirs, ours, _ = streams
    problems = []
    for m in _members(SparkNaFunctions):
        problems.append(_check(f"na.{m}", _outcome(lambda: NA_CALLS[m](theirs.na)), _outcome(lambda: NA_CALLS[m](ours.na))))
    for m in _members(SparkStatFunctions):
        problems.append(_check(f"stat.{m}", _outcome(lambda: STAT_CALLS[m](theirs.stat)), _outcome(lambda: STAT_CALLS[m](ours.stat))))
    assert [p for p in problems if p] == []


@pytest.mark.parametrize(
    "cls, get",
    [
        (SparkDataStreamReader, lambda s: s.engine.readStream),
        (SparkDataStreamWriter, lambda s: s.stream.writeStream),
        (SparkStreamingQuery, lambda s: s.query),
        (SparkStreamingQueryManager, lambda s: s.engine.streams),
        (SparkNaFunctions, lambda s: s.stream.na),
        (SparkStatFunctions, lambda s: s.stream.stat),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else "",
)
def test_a_member_pyspark_may_add_later_is_named_on_every_class(sides, monkeypatch, cls, get):
    from statestream.errors import NotSupportedYetError

    ours = get(sides[1])
    monkeypatch.setattr(cls, "brandNewMethod", lambda self: None, raising=False)
    with pytest.raises(NotSupportedYetError, match=rf"{cls.__name__}\.brandNewMethod\(\) is not supported by statestream yet"):
        ours.brandNewMethod()
    assert not hasattr(ours, "no_such_member")  # a typo stays PySpark's plain AttributeError
