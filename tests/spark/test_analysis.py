"""Streaming analysis checks on logical nodes with real templates, with Spark's own engine as
the oracle.

Each case builds the same query twice: as statestream logical nodes (templates analysed by Spark
on an empty relation, event-time marker set the way ``withWatermark`` sets it) and as a real
Spark streaming query on the ``rate`` source. ``check_for_streaming`` must refuse exactly what
``writeStream.start()`` refuses, with the same condition and message text (Spark appends
``;\\n<plan>`` to legacy messages, which statestream does not print).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest

from statestream.errors import StatestreamAnalysisException, check_batch_action_on_stream, write_stream_not_allowed_error
from statestream.plan import analysis as A
from statestream.plan.logical import (
    WATERMARK_DELAY_KEY,
    Aggregate,
    Deduplicate,
    EventTimeWatermark,
    Limit,
    LogicalPlan,
    Sort,
    Stateless,
    StreamingRelation,
    Union,
)
from tests.spark_confs import session_confs

F: Any = None
W: Any = None


@pytest.fixture(scope="module", autouse=True)
def _functions(spark):
    global F, W
    from pyspark.sql import Window
    from pyspark.sql import functions

    F, W = functions, Window


@dataclass
class Q:
    """A query under construction: statestream's node and Spark's streaming DataFrame."""

    node: LogicalPlan
    stream: Any

    def stateless(self, op: str, fn: Callable[[Any], Any]) -> "Q":
        return Q(Stateless(template=fn(self.node.template), child=self.node, op=op, transform=fn), fn(self.stream))

    def select(self, *cols: Any) -> "Q":
        return self.stateless("Project", lambda df: df.select(*cols))

    def with_column(self, name: str, col: Any) -> "Q":
        return self.stateless("Project", lambda df: df.withColumn(name, col))

    def filter(self, cond: Any) -> "Q":
        return self.stateless("Filter", lambda df: df.filter(cond))

    def watermark(self, column: str, delay_ms: int) -> "Q":
        template = self.node.template
        md = dict(template.schema[column].metadata or {})
        md[WATERMARK_DELAY_KEY] = delay_ms
        node = EventTimeWatermark(
            template=template.withMetadata(column, md), child=self.node, column=column, delay_ms=delay_ms
        )
        return Q(node, self.stream.withWatermark(column, f"{delay_ms // 1000} seconds"))

    def agg(self, grouping: list[Any], aggs: list[Any]) -> "Q":
        template = self.node.template.groupBy(*grouping).agg(*aggs)
        node = Aggregate(template=template, child=self.node, grouping=tuple(grouping), aggregates=tuple(aggs))
        return Q(node, self.stream.groupBy(*grouping).agg(*aggs))

    def count_by(self, *grouping: Any) -> "Q":
        return self.agg(list(grouping), [F.count(F.lit(1)).alias("count")])

    def sort(self, *cols: Any) -> "Q":
        fn = lambda df: df.orderBy(*cols)  # noqa: E731
        return Q(Sort(template=fn(self.node.template), child=self.node, transform=fn), fn(self.stream))

    def limit(self, n: int) -> "Q":
        return Q(Limit(template=self.node.template.limit(n), child=self.node, n=n), self.stream.limit(n))

    def dedup(self, keys: list[str] | None = None, within: bool = False) -> "Q":
        names = tuple(keys) if keys else tuple(self.node.template.columns)
        template = self.node.template.dropDuplicates(keys)
        node = Deduplicate(template=template, child=self.node, keys=names, within_watermark=within)
        stream = self.stream.dropDuplicatesWithinWatermark(keys) if within else self.stream.dropDuplicates(keys)
        return Q(node, stream)

    def union(self, other: "Q") -> "Q":
        template = self.node.template.union(other.node.template)
        return Q(Union(template=template, inputs=(self.node, other.node)), self.stream.union(other.stream))


@pytest.fixture
def src(spark) -> Q:
    stream = spark.readStream.format("rate").load()
    template = spark.createDataFrame([], stream.schema)
    return Q(StreamingRelation(template=template), stream).select(F.col("timestamp").alias("ts"), "value")


@pytest.fixture
def batch(spark) -> Q:
    df = spark.range(3).select(F.col("id").alias("value"))
    return Q(LogicalPlan(template=df), df)


def spark_outcome(stream: Any, mode: str) -> Exception | None:
    """What Spark's own ``writeStream.start()`` says about the query (None: accepted)."""
    from pyspark.errors import AnalysisException

    try:
        query = stream.writeStream.format("noop").outputMode(mode).start()
    except AnalysisException as e:
        return e
    query.stop()
    return None


def ours(q: Q, mode: str, conf: dict[str, str] | None = None) -> StatestreamAnalysisException | None:
    try:
        A.check_for_streaming(q.node, mode, conf)
    except StatestreamAnalysisException as e:
        return e
    return None


def spark_text(e: Exception) -> str:
    """Spark's message without the plan it appends to legacy (plan-carrying) errors."""
    return str(e).split(";\n", 1)[0]


def assert_same_as_spark(q: Q, mode: str, expected: str | None) -> None:
    """statestream refuses the query exactly as documented (§7.6) and exactly as Spark does."""
    mine = ours(q, mode)
    theirs = spark_outcome(q.stream, mode)
    if expected is None:
        assert mine is None, str(mine)
        assert theirs is None, str(theirs)
        return
    assert mine is not None, "statestream accepted a query Spark refuses"
    assert str(mine) == expected
    assert theirs is not None, "Spark accepted the query"
    assert mine.getCondition() == theirs.getCondition()
    assert mine.getMessageParameters() == theirs.getMessageParameters()
    assert mine.getSqlState() == theirs.getSqlState()
    assert str(mine) == spark_text(theirs)


APPEND_NO_WM = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: append. This output mode is "
    "not supported for streaming aggregations without watermark on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
COMPLETE_NO_AGG = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: complete. This output mode is "
    "not supported for no streaming aggregations on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
UPDATE_SESSION = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: update. This output mode is "
    "not supported for session window streaming aggregations on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
SORT = (
    "Sorting is not supported on streaming DataFrames/Datasets, unless it is on aggregated DataFrame/Dataset "
    "in Complete output mode"
)
DISTINCT = (
    "Distinct aggregations are not supported on streaming DataFrames/Datasets. Consider using "
    "approx_count_distinct() instead."
)
LIMIT_UPDATE = "Limits are not supported on streaming DataFrames/Datasets in Update output mode"
OFFSET = "Offset is not supported on streaming DataFrames/Datasets"
SAMPLE = "Sampling is not supported on streaming DataFrames/Datasets"
MONO = "Expression(s): monotonically_increasing_id() is not supported with streaming DataFrames/Datasets"
DDWW = "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets without watermark"
UNION = "Union between streaming and batch DataFrames/Datasets is not supported"
CORRECTNESS = (
    "Detected pattern of possible 'correctness' issue due to global watermark. The query contains stateful "
    "operation which can emit rows older than the current watermark plus allowed late record delay, which are "
    '"late rows" in downstream stateful operations and these rows can be discarded. Please refer the '
    "programming guide doc for more details. If you understand the possible risk of correctness issue and "
    "still need to run the query, you can disable this check by setting the config "
    "`spark.sql.streaming.statefulOperator.checkCorrectness.enabled` to false."
)
ROW_NUMBER_R = (
    "[NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING] Window function is not supported in ROW_NUMBER() (as column "
    "`r`) on streaming DataFrames/Datasets.\nStructured Streaming only supports time-window aggregation using "
    "the WINDOW function. (window specification: (PARTITION BY VALUE ORDER BY TS ASC NULLS FIRST ROWS BETWEEN "
    "UNBOUNDED PRECEDING AND CURRENT ROW)) SQLSTATE: 42KDE"
)


def _row_number():
    return F.row_number().over(W.partitionBy("value").orderBy("ts"))


def _win(q: Q) -> Q:
    return q.watermark("ts", 10000).count_by(F.window("ts", "5 seconds"), "value")


# (id, build(src, batch) -> Q, output mode, expected text or None when the query is legal)
CASES: list[tuple[str, Callable[[Q, Q], Q], str, str | None]] = [
    ("append-agg-no-watermark", lambda s, b: s.count_by("value"), "append", APPEND_NO_WM),
    ("append-agg-watermark-not-key", lambda s, b: s.watermark("ts", 10000).count_by("value"), "append", APPEND_NO_WM),
    ("append-agg-watermark-key", lambda s, b: s.watermark("ts", 10000).count_by("ts", "value"), "append", None),
    ("append-window-agg", lambda s, b: _win(s), "append", None),
    ("append-group-on-expression-of-ts", lambda s, b: s.watermark("ts", 10000).count_by((F.col("ts") + F.expr("interval 1 second")).alias("t")), "append", APPEND_NO_WM),
    ("append-outer-agg-decides", lambda s, b: _win(s).count_by("value"), "append", APPEND_NO_WM),
    ("complete-no-agg", lambda s, b: s.select("value"), "complete", COMPLETE_NO_AGG),
    ("update-no-agg", lambda s, b: s.select("value"), "update", None),
    ("update-session-window", lambda s, b: s.watermark("ts", 10000).count_by(F.session_window("ts", "5 seconds"), "value"), "update", UPDATE_SESSION),
    ("sort-append", lambda s, b: s.sort("value"), "append", SORT),
    ("sort-after-agg-update", lambda s, b: s.count_by("value").sort("value"), "update", SORT),
    ("sort-after-agg-complete", lambda s, b: s.count_by("value").sort("value"), "complete", None),
    ("sort-before-agg-complete", lambda s, b: s.sort("value").count_by("value"), "complete", SORT),
    ("count-distinct", lambda s, b: s.agg(["value"], [F.countDistinct("ts")]), "complete", DISTINCT),
    ("sum-distinct-global", lambda s, b: s.agg([], [F.sum_distinct("value").alias("s")]), "complete", DISTINCT),
    ("limit-update", lambda s, b: s.limit(3), "update", LIMIT_UPDATE),
    ("limit-after-agg-update", lambda s, b: s.count_by("value").limit(2), "update", LIMIT_UPDATE),
    ("limit-append", lambda s, b: s.limit(3), "append", None),
    ("limit-after-sorted-agg-complete", lambda s, b: s.count_by("value").sort("value").limit(2), "complete", None),
    ("offset", lambda s, b: s.stateless("Offset", lambda df: df.offset(3)), "append", OFFSET),
    ("sample", lambda s, b: s.stateless("Sample", lambda df: df.sample(0.5, seed=1)), "append", SAMPLE),
    ("row-number", lambda s, b: s.with_column("r", _row_number()), "append", ROW_NUMBER_R),
    ("mono-id", lambda s, b: s.with_column("id", F.monotonically_increasing_id()), "append", MONO),
    ("mono-id-twice", lambda s, b: s.select(F.monotonically_increasing_id().alias("x"), F.monotonically_increasing_id()), "append", MONO),
    ("mono-id-in-filter", lambda s, b: s.filter(F.monotonically_increasing_id() > 3), "append", MONO),
    ("mono-below-sample", lambda s, b: s.with_column("m", F.monotonically_increasing_id()).stateless("Sample", lambda df: df.sample(0.5, seed=1)), "append", MONO),
    ("sample-below-mono", lambda s, b: s.stateless("Sample", lambda df: df.sample(0.5, seed=1)).with_column("m", F.monotonically_increasing_id()), "append", SAMPLE),
    ("window-below-mono", lambda s, b: s.with_column("r", _row_number()).with_column("m", F.monotonically_increasing_id()), "append", ROW_NUMBER_R),
    ("window-and-mono-one-select", lambda s, b: s.select("value", _row_number().alias("r"), F.monotonically_increasing_id().alias("m")), "append", MONO),
    ("ddww-no-watermark", lambda s, b: s.dedup(["value"], within=True), "append", DDWW),
    ("ddww-no-watermark-then-agg", lambda s, b: s.dedup(["value"], within=True).count_by("value"), "complete", DDWW),
    ("ddww-watermark", lambda s, b: s.watermark("ts", 10000).dedup(["value"], within=True), "append", None),
    ("chained-agg-complete", lambda s, b: s.count_by("value").count_by("count"), "complete", CORRECTNESS),
    ("chained-agg-update", lambda s, b: s.count_by("value").count_by("count"), "update", CORRECTNESS),
    ("chained-window-agg-append", lambda s, b: s.watermark("ts", 10000).agg([F.window("ts", "5 seconds").alias("w"), "value"], [F.count(F.lit(1)).alias("count")]).count_by(F.window("w", "10 seconds")), "append", None),
    ("agg-then-event-time-dedup-update", lambda s, b: _win(s).dedup(["window"]), "update", CORRECTNESS),
    ("agg-then-dedup-all-update", lambda s, b: _win(s).dedup(), "update", CORRECTNESS),
    ("agg-then-ddww-update", lambda s, b: _win(s).dedup(["value"], within=True), "update", CORRECTNESS),
    ("agg-then-ddww-append", lambda s, b: _win(s).dedup(["value"], within=True), "append", None),
    ("agg-then-plain-dedup-update", lambda s, b: _win(s).dedup(["value"]), "update", None),
    ("distinct-before-correctness", lambda s, b: s.agg(["value"], [F.countDistinct("ts").alias("c")]).count_by("c"), "complete", DISTINCT),
    ("union-stream-batch", lambda s, b: s.select("value").union(b), "append", UNION),
    ("union-batch-stream", lambda s, b: b.union(s.select("value")), "append", UNION),
    ("cube-complete", lambda s, b: Q(*_cube(s)), "complete", None),
    ("append-agg-no-wm-and-sort", lambda s, b: s.count_by("value").sort("value"), "append", APPEND_NO_WM),
    ("update-session-and-sort", lambda s, b: s.watermark("ts", 10000).count_by(F.session_window("ts", "5 seconds"), "value").sort("value"), "update", UPDATE_SESSION),
]


def _cube(s: Q) -> tuple[LogicalPlan, Any]:
    template = s.node.template.cube("value").count()
    node = Aggregate(template=template, child=s.node, grouping=(F.col("value"),), aggregates=(F.count(F.lit(1)),))
    return node, s.stream.cube("value").count()


@pytest.mark.parametrize(("build", "mode", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_same_verdict_as_spark(src, batch, build, mode, expected):
    assert_same_as_spark(build(src, batch), mode, expected)


# ---------------------------------------------------------------------------------- window texts


def test_window_functions_with_column_references(src):
    """Functions that mention columns print attribute ids (``RANK(TS#2)``), which come from the
    template and need not match the streaming plan's; everything else matches."""
    q = src.select("value", _row_number().alias("a"), F.rank().over(W.partitionBy("value").orderBy("ts")).alias("b"))
    mine, theirs = ours(q, "append"), spark_outcome(q.stream, "append")
    assert mine is not None and theirs is not None
    assert mine.getCondition() == theirs.getCondition() == "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING"
    p_mine, p_theirs = mine.getMessageParameters(), theirs.getMessageParameters()
    assert p_mine["columnName"] == p_theirs["columnName"] == "`a`,`b`"
    assert p_mine["windowSpec"] == p_theirs["windowSpec"]
    strip_ids = lambda s: __import__("re").sub(r"#\d+L?", "#", s)  # noqa: E731
    assert strip_ids(p_mine["windowFunc"]) == strip_ids(p_theirs["windowFunc"])
    assert p_mine["windowFunc"].startswith("ROW_NUMBER(),RANK(TS#")


def test_window_frames_and_quoted_names(src):
    cases = [
        src.select(F.row_number().over(W.partitionBy("value").orderBy(F.col("ts").desc())).alias("my col")),
        src.select(F.sum("value").over(W.partitionBy("ts")).alias("s")),
        src.select(F.sum("value").over(W.partitionBy("ts").orderBy("value").rowsBetween(-1, 1)).alias("s")),
    ]
    for q in cases:
        mine, theirs = ours(q, "append"), spark_outcome(q.stream, "append")
        assert mine is not None and theirs is not None
        p_mine, p_theirs = mine.getMessageParameters(), theirs.getMessageParameters()
        assert p_mine["columnName"] == p_theirs["columnName"]
        assert p_mine["windowSpec"] == p_theirs["windowSpec"]


# ---------------------------------------------------------------------------------- inspector


def test_inspector_reports_only_what_a_node_introduces(src):
    inspector = A.JvmExpressionInspector()
    numbered = src.with_column("r", _row_number())
    above = numbered.select("value", "r")
    assert [type(f) for f in inspector.facts(numbered.node)] == [A.WindowFunctionUse]
    assert inspector.facts(above.node) == []
    assert inspector.facts(src.node) == []


def test_inspector_sees_distinct_aggregates(src):
    q = src.agg(["value"], [F.countDistinct("ts"), F.count("ts")])
    facts = A.JvmExpressionInspector().facts(q.node)
    assert facts == [A.DistinctAggregateUse(("count(DISTINCT ts)",))]


def test_event_time_marker_reaches_window_and_session_keys(src):
    wm = src.watermark("ts", 10000)
    assert A.has_event_time_key(wm.count_by(F.window("ts", "5 seconds")).node)
    session = wm.count_by(F.session_window("ts", "5 seconds"), "value").node
    assert A.has_event_time_key(session)
    assert A.is_session_window_aggregate(session)
    assert not A.is_session_window_aggregate(wm.count_by(F.window("ts", "5 seconds")).node)


# ---------------------------------------------------------------------------------- confs


def test_conf_switches_match_spark(spark, src):
    chained = src.count_by("value").count_by("count")
    key = A.CHECK_CORRECTNESS_CONF
    assert ours(chained, "complete", {key: "false"}) is None
    with session_confs(spark, {key: "false"}):
        assert spark_outcome(chained.stream, "complete") is None

    sampled = src.stateless("Sample", lambda df: df.sample(0.5, seed=1))
    key = A.UNSUPPORTED_OPERATION_CHECK_CONF
    assert ours(sampled, "append", {key: "false"}) is None
    assert ours(src.count_by("value"), "append", {key: "false"}) is None
    with session_confs(spark, {key: "false"}):
        assert spark_outcome(sampled.stream, "append") is None


# ---------------------------------------------------------------------------------- API helpers


def test_batch_action_and_write_stream_errors_match_spark(spark, src):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        src.stream.collect()
    mine = check_batch_action_on_stream()
    assert mine.getCondition() == info.value.getCondition()
    assert mine.getMessageParameters() == info.value.getMessageParameters()
    assert str(mine) == spark_text(info.value)

    with pytest.raises(AnalysisException) as info:
        spark.range(3).writeStream  # noqa: B018 - the property access is what fails
    mine = write_stream_not_allowed_error()
    assert mine.getCondition() == info.value.getCondition()
    assert mine.getSqlState() == info.value.getSqlState()
    assert str(mine) == str(info.value)
