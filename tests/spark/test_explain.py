"""``explain()`` of a streaming DataFrame that has not started, compared with Spark's.

Spark prints attribute ids (``value#1L``) from a global counter, event-time markers
(``-T20000ms``), plan ids and random run ids that statestream does not reproduce (its stateless
steps show ids too, other numbers: the stateless tests compare with ids normalised); window() and computed grouping keys also add
``Project``/``Filter``/``Expand`` nodes inside Spark's first codegen stage. After removing exactly those,
the two texts must be equal line for line: node names, tree layout, codegen stage numbers,
state info (operator id, version, partitions, unknown checkpoint), output mode, watermarks and
state format version.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any, Callable

import pytest

from statestream import StreamingSession
from tests.spark_confs import session_confs

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _normalise(text: str) -> list[str]:
    """The plan's node lines, top down, without tree indentation (every plan compared here is
    a chain), with ids and expression renderings replaced by placeholders."""
    lines = []
    for line in text.strip().splitlines():
        body = re.sub(r"^[ :|+-]*", "", line)
        bare = re.sub(r"^\*\(\d+\) ", "", body)
        if bare.startswith(("Project [named_struct(", "Filter isnotnull(", "Expand [[named_struct(")):
            continue  # nodes Spark's analyzer adds for window() (Expand: sliding windows)
        body = re.sub(r"#\d+L?", "", body)
        body = re.sub(r"-T\d+ms", "", body)
        body = re.sub(r", \[plan_id=\d+\]", "", body)
        body = re.sub(UUID, "<uuid>", body)
        # Keys, functions and projections are rendered differently (Spark: resolved expressions,
        # statestream: the output columns and the user's expressions); the rest must be equal.
        body = re.sub(r"keys=\[[^\]]*\]", "keys=[K]", body)
        body = re.sub(r"(StateStore(?:Save|Restore)) \[[^\]]*\]", r"\1 [K]", body)
        body = re.sub(r"hashpartitioning\(.*, (\d+)\)", r"hashpartitioning(K, \1)", body)
        body = re.sub(r"functions=\[.*\]\)$", "functions=[F])", body)
        body = re.sub(r"^(\*\(\d+\) )?(Project|Filter) .*$", r"\1\2 [P]", body)
        body = re.sub(r"StreamingRelation (\w+), \[.*\]$", r"StreamingRelation \1, [C]", body)
        lines.append(body)
    return lines


def _explain_text(df: Any) -> str:
    """What ``df.explain()`` prints (PySpark prints the JVM's string with Python's print)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain()
    return buf.getvalue()


def _rate(reader: Any) -> Any:
    return reader.format("rate").option("rowsPerSecond", 10).load()


def _static() -> Any:
    """A small static DataFrame (``value``, ``name``) of the test session, for joins."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.range(3).selectExpr("id AS value", "CAST(id AS STRING) AS name")


CASES: dict[str, Callable[[Any], Any]] = {
    "seed_query": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds").alias("group"))
        .agg(F.count("value").alias("value_count"))
    ),
    "sliding_window_several_aggregates": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.window("timestamp", "10 seconds", "5 seconds"))
        .agg(F.sum("value"), F.max("value"), F.avg("value"))
    ),
    "column_key_without_watermark": lambda F: lambda r: (
        _rate(r).selectExpr("value % 3 AS k", "value").groupBy("k").agg(F.min("value"))
    ),
    "limit": lambda F: lambda r: _rate(r).limit(3),
    "limit_after_windowed_aggregate": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds"))
        .agg(F.count("value"))
        .limit(2)
    ),
    "limit_before_aggregate": lambda F: lambda r: (
        _rate(r).limit(5).selectExpr("value % 3 AS k").groupBy("k").count()
    ),
    "two_limits_apart": lambda F: lambda r: _rate(r).limit(5).where("value > 1").limit(3),
    "limit_zero": lambda F: lambda r: _rate(r).limit(0),
    "limit_after_dedup": lambda F: lambda r: _rate(r).dropDuplicates(["value"]).limit(1),
    "session_window": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.session_window("timestamp", "5 seconds"), "value")
        .agg(F.count("value"), F.sum("value"))
    ),
    # Spark's planner picks the aggregate node from the functions' buffers (AggUtils): a
    # typed-imperative function (collect_list/set) gives ObjectHashAggregate, a buffer that cannot
    # be updated in place (max of a string) SortAggregate with a Sort below each step, fixed-width
    # buffers HashAggregate.
    "collect_list_object_hash_aggregate": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds"))
        .agg(F.collect_list("value"))
    ),
    "max_string_sort_aggregate": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds"))
        .agg(F.max(F.col("value").cast("string")))
    ),
    "max_string_column_key_sort_aggregate": lambda F: lambda r: (
        _rate(r).selectExpr("value % 3 AS k", "CAST(value AS STRING) AS s").groupBy("k").agg(F.max("s"), F.count("s"))
    ),
    "stddev_hash_aggregate": lambda F: lambda r: (
        _rate(r).selectExpr("value % 3 AS k", "value").groupBy("k").agg(F.stddev("value"), F.avg("value"), F.count("value"))
    ),
    "mixed_functions_object_hash_aggregate": lambda F: lambda r: (
        _rate(r)
        .selectExpr("value % 3 AS k", "value")
        .groupBy("k")
        .agg(F.count("value"), F.collect_set("value"), F.max(F.col("value").cast("string")), F.stddev("value"))
    ),
    "session_window_sort_aggregate": lambda F: lambda r: (
        _rate(r)
        .selectExpr("timestamp", "value", "CAST(value AS STRING) AS s")
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.session_window("timestamp", "5 seconds"), "value")
        .agg(F.max("s"))
    ),
    # stream-static joins: Spark's join node (strategy, keys, build side), its exchanges and the
    # static side's plan; with a stateful operator above or below, in Spark's codegen stages
    # (a condition, not on=: Spark's project for on= merges with the window's, which statestream
    # does not show)
    "join_then_windowed_aggregate": lambda F: lambda r: (
        lambda stream, static: stream.withWatermark("timestamp", "20 seconds")
        .join(static, stream.value == static.value)
        .groupBy(F.window("timestamp", "5 seconds"), "name")
        .agg(F.count("name"))
    )(_rate(r), _static()),
    "dedup_then_join": lambda F: lambda r: _rate(r).dropDuplicates(["value"]).join(_static(), "value", "left"),
    "join_then_limit": lambda F: lambda r: _rate(r).join(_static(), "value", "left_semi").limit(3),
    "join_then_dedup_sort_merge": lambda F: lambda r: (
        _rate(r).join(_static().hint("merge"), "value").dropDuplicates(["name"])
    ),
    # more aggregation shapes, with Spark's ids through every step
    "cube_with_watermark": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .selectExpr("timestamp", "value % 2 AS a", "value % 3 AS b", "value")
        .cube(F.window("timestamp", "5 seconds"), "a", "b")
        .agg(F.sum("value"))
    ),
    "global_aggregate": lambda F: lambda r: _rate(r).agg(F.count("*").alias("n"), F.max("value")),
    "renamed_event_time_column": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .select(F.col("timestamp").alias("ts"), (F.col("value") + 1).alias("v"))
        .groupBy(F.window("ts", "10 seconds"))
        .agg(F.avg("v"), F.count(F.when(F.col("v") > 2, 1)))
    ),
    "aggregate_filter_and_expression": lambda F: lambda r: (
        _rate(r)
        .selectExpr("value % 5 AS k", "value")
        .groupBy("k")
        .agg((F.sum("value") * 2 + F.count("value")).alias("x"), F.expr("count(value) FILTER (WHERE value > 2)").alias("c"))
        .where("k > 1")
    ),
    "approx_count_distinct": lambda F: lambda r: (
        _rate(r).selectExpr("value % 5 AS k", "value").groupBy("k").agg(F.approx_count_distinct("value"))
    ),
    "aggregate_after_dedup": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .dropDuplicates(["value", "timestamp"])
        .groupBy(F.window("timestamp", "5 seconds"))
        .count()
    ),
    "within_watermark_dedup_after_projection": lambda F: lambda r: (
        _rate(r)
        .withWatermark("timestamp", "10 seconds")
        .selectExpr("timestamp", "value % 7 AS k")
        .dropDuplicatesWithinWatermark(["k"])
    ),
    "union_then_aggregate": lambda F: lambda r: (
        _rate(r).union(_rate(r)).selectExpr("value % 3 AS k").groupBy("k").count()
    ),
    # no stateful operator: Spark shows the adaptive initial plan
    "stateless_broadcast_join": lambda F: lambda r: _rate(r).join(_static(), "value"),
    "stateless_sort_merge_join": lambda F: lambda r: _rate(r).join(_static().hint("merge"), "value", "left_anti"),
    "stateless_stream_on_the_right": lambda F: lambda r: _static().join(_rate(r), "value", "right"),
    "stateless_cross_join": lambda F: lambda r: _rate(r).crossJoin(_static().select("name")),
    "stateless_repartition": lambda F: lambda r: _rate(r).repartition(3),
}

#: the aggregate node each case above is there for: Spark's explain must show it, or the case
#: no longer tests what its name says
AGGREGATE_NODE = {
    "collect_list_object_hash_aggregate": "ObjectHashAggregate(keys=",
    "max_string_sort_aggregate": "SortAggregate(key=",
    "max_string_column_key_sort_aggregate": "SortAggregate(key=",
    "stddev_hash_aggregate": "HashAggregate(keys=",
    "mixed_functions_object_hash_aggregate": "ObjectHashAggregate(keys=",
    "session_window_sort_aggregate": "SortAggregate(key=",
}


#: the modes compared line for line, logical and physical plans
STRICT_MODES = ("simple", "extended", "cost", "formatted")

#: cases whose ``cost``-mode logical plan is statestream's outline: Spark's statistics there come
#: from the whole plan (a limit's row count, a size grown by a projection below the node), which
#: the parts statestream asks Spark about one at a time do not see; their physical plan is compared
COST_OUTLINE = {
    "join_then_limit",
    "limit",
    "limit_after_dedup",
    "limit_after_windowed_aggregate",
    "limit_before_aggregate",
    "limit_zero",
    "session_window_sort_aggregate",
    "two_limits_apart",
}


def _physical_section(text: str, mode: str) -> list[str]:
    lines = _with_ids_normalised(text)
    if mode in ("extended", "cost"):
        return lines[lines.index("== Physical Plan ==") :]
    return lines


@pytest.mark.parametrize("case", sorted(CASES))
def test_explain_matches_spark(spark, case):
    """Spark's explain text, line for line in every mode (attribute ids, plan ids and random ids
    normalised): the parsed, analysed and optimised logical plans (``cost``: with statistics),
    and the physical plan's node names and arguments, keys and functions with attribute ids,
    event-time markers, the window's Project/Filter/Expand, codegen stages, state info, and the
    formatted mode's numbered nodes with their details."""
    from pyspark.sql import functions as F

    build = CASES[case](F)
    for mode in STRICT_MODES:
        theirs = _with_ids_normalised(_explain_mode_text(build(spark.readStream), mode))
        ours = _with_ids_normalised(_explain_mode_text(build(StreamingSession(spark).readStream), mode))
        if mode == "cost" and case in COST_OUTLINE:
            outline = ours[: ours.index("== Physical Plan ==")]
            assert not any("#N" in line for line in outline), outline
            theirs, ours = theirs[theirs.index("== Physical Plan ==") :], ours[ours.index("== Physical Plan ==") :]
        assert ours == theirs, "\n".join([f"mode {mode}", "statestream:", *ours, "Spark:", *theirs])
    theirs = _normalise(_explain_text(build(spark.readStream)))
    if case in AGGREGATE_NODE:
        # four steps (a session window: Partial and Final; MergingSessions does the merges)
        steps = 2 if "session" in case else 4
        nodes = [re.sub(r"^\*\(\d+\) ", "", line) for line in theirs]
        assert sum(line.startswith(AGGREGATE_NODE[case]) for line in nodes) == steps, theirs
        if AGGREGATE_NODE[case].startswith("SortAggregate"):
            sorts = [line for line in theirs if re.match(r"\*\(\d\) Sort \[.* ASC NULLS FIRST\], false, 0$", line)]
            assert len(sorts) == (3 if "session" in case else 4), theirs


def test_explain_shows_state_info_and_event_time_column(spark):
    from pyspark.sql import functions as F

    text = _explain_text(CASES["seed_query"](F)(StreamingSession(spark).readStream))
    # the state key is Spark's grouping attribute (the window, with its event-time marker), not
    # the output name ``group``; the watermark's column keeps the source's attribute id
    assert re.search(r"StateStoreSave \[window#\d+-T20000ms\], state info \[ checkpoint = <unknown>, runId = " + UUID, text)
    assert "opId = 0, ver = 0, numPartitions = 2]" in text
    column = re.search(r"EventTimeWatermark " + UUID + r", (timestamp#\d+): timestamp, 20 seconds", text)
    assert column is not None
    assert f"StreamingRelation rate, [{column.group(1)}, value#" in text


def test_explain_session_window_local_merge_matches_spark(spark):
    """With ``...sessionWindow.merge.sessions.in.local.partition`` Spark adds a Sort and a
    MergingSessions (without a required distribution) before the exchange."""
    from pyspark.sql import functions as F

    key = "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"
    build = CASES["session_window"](F)
    with session_confs(spark, {key: "true"}):
        theirs = _with_ids_normalised(_explain_text(build(spark.readStream)))
        ours = _with_ids_normalised(_explain_text(build(StreamingSession(spark).readStream)))
    assert any(re.match(r"^[ |+-]*MergingSessions true, 2,", line) for line in theirs), theirs
    assert ours == theirs, "\n".join(["statestream:", *ours, "Spark:", *theirs])


def test_explain_without_object_hash_aggregate_matches_spark(spark):
    """With ``spark.sql.execution.useObjectHashAggregateExec=false`` Spark plans collect_list
    with the sort-based aggregate; statestream reads the same conf."""
    from pyspark.sql import functions as F

    key = "spark.sql.execution.useObjectHashAggregateExec"
    build = CASES["collect_list_object_hash_aggregate"](F)
    with session_confs(spark, {key: "false"}):
        theirs = _with_ids_normalised(_explain_text(build(spark.readStream)))
        ours = _with_ids_normalised(_explain_text(build(StreamingSession(spark).readStream)))
    assert sum("SortAggregate(key=[window#N-T20000ms]" in line for line in theirs) == 4, theirs
    assert ours == theirs, "\n".join(["statestream:", *ours, "Spark:", *theirs])


def test_aggregate_node_falls_back_to_hash_aggregate():
    """When Spark's plan cannot be inspected, explain shows the hash aggregate as before."""
    from statestream.plan.planner import spark_aggregate_node

    assert spark_aggregate_node(object()) == ("HashAggregate", True)


def _explain_mode_text(df: Any, mode: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(mode)
    return buf.getvalue()


def _formatted_outline(text: str) -> list[str]:
    """The formatted plan's tree and the details' headers (name, number, codegen id)."""
    tree, _, details = text.partition("\n\n\n")
    headers = [line for line in details.splitlines() if re.match(r"^\(\d+\) ", line)]
    return [line for line in tree.splitlines() if line] + headers


FORMATTED_CASES: dict[str, Callable[[Any], Any]] = {
    "stateless": lambda F: lambda r: _rate(r).filter("value > 0").select("value", (F.col("value") * 2).alias("x")),
    "aggregation": CASES["stddev_hash_aggregate"],
    "limit": CASES["limit"],
    "dedup": lambda F: lambda r: _rate(r).dropDuplicates(["value"]),
}


@pytest.mark.parametrize("case", sorted(FORMATTED_CASES))
def test_explain_formatted_matches_spark(spark, case):
    """``explain("formatted")``: the same numbered tree and operator headers as Spark's."""
    from pyspark.sql import functions as F

    build = FORMATTED_CASES[case](F)
    theirs = _formatted_outline(_explain_mode_text(build(spark.readStream), "formatted"))
    ours = _formatted_outline(_explain_mode_text(build(StreamingSession(spark).readStream), "formatted"))
    assert ours == theirs, "\n".join(["statestream:", *ours, "Spark:", *theirs])


@pytest.mark.parametrize("mode", ["simple", "extended", "cost", "codegen"])
def test_explain_modes_have_sparks_sections(spark, mode):
    from pyspark.sql import functions as F

    build = FORMATTED_CASES["aggregation"](F)
    headers = lambda text: [line for line in text.splitlines() if line.startswith(("== ", "Found "))]  # noqa: E731
    theirs = headers(_explain_mode_text(build(spark.readStream), mode))
    ours = headers(_explain_mode_text(build(StreamingSession(spark).readStream), mode))
    # Spark names each codegen subtree with its code sizes, which exist only once compiled
    assert [re.sub(r" \(maxMethodCodeSize.*\)", "", h) for h in ours] == [re.sub(r" \(maxMethodCodeSize.*\)", "", h) for h in theirs]


def test_explain_unknown_mode_is_sparks_error(spark):
    with pytest.raises(Exception, match="Unknown explain mode: nope"):
        StreamingSession(spark).readStream.format("rate").load().explain("nope")


def _with_ids_normalised(text: str) -> list[str]:
    """The whole explain text, line for line, with the numbers Spark draws from global counters
    or at random replaced: attribute ids (``value#12L`` -> ``value#NL``), plan ids, run and
    watermark node ids, and the hash codes of the source's provider and table objects in the
    logical plans (``RateStreamProvider@1f2e3d`` -> ``@H``)."""
    text = re.sub(r"#\d+", "#N", text.strip())
    text = re.sub(r"@[0-9a-f]+\b", "@H", text)
    text = re.sub(UUID, "<uuid>", text)
    text = re.sub(r"\[plan_id=\d+\]", "[plan_id=N]", text)
    return text.splitlines()


#: stateless queries: Spark's engine shows its own resolved, optimised plan (projections
#: collapsed, filters pushed through projections with inferred ``isnotnull``, attribute ids)
STATELESS_CASES: dict[str, Callable[[Any], Any]] = {
    "project_filter_with_column": lambda F: lambda r: (
        r.format("rate").load().withColumn("x", F.col("value") * 2).filter("x > 3").select("timestamp", "x")
    ),
    "select_with_expressions": lambda F: lambda r: (
        _rate(r).select((F.col("value") + 1).alias("v1"), F.hour("timestamp").alias("h"), F.lit("a").alias("s"))
    ),
    "filter_pushed_through_projections": lambda F: lambda r: (
        _rate(r)
        .selectExpr("value", "value * 10 AS big", "timestamp")
        .select("big", "value")
        .where("value % 2 = 0 AND big > 5")
    ),
}


@pytest.mark.parametrize("mode", ["simple", "extended", "cost"])
@pytest.mark.parametrize("case", sorted(STATELESS_CASES))
def test_explain_stateless_is_sparks_text(spark, case, mode):
    """Stateless plans: Spark's own text, ids normalised, in the physical and logical sections."""
    from pyspark.sql import functions as F

    build = STATELESS_CASES[case](F)
    theirs = _with_ids_normalised(_explain_mode_text(build(spark.readStream), mode))
    ours = _with_ids_normalised(_explain_mode_text(build(StreamingSession(spark).readStream), mode))
    assert any("#N" in line for line in theirs), theirs
    assert ours == theirs, "\n".join(["statestream:", *ours, "Spark:", *theirs])


def test_explain_stateful_children_show_ids(spark):
    """Below a stateful operator, the stateless steps and the source are Spark's text with ids
    (the stateful nodes keep statestream's own rendering)."""
    from pyspark.sql import functions as F

    build = CASES["column_key_without_watermark"](F)
    theirs = _with_ids_normalised(_explain_mode_text(build(spark.readStream), "simple"))
    ours = _with_ids_normalised(_explain_mode_text(build(StreamingSession(spark).readStream), "simple"))
    assert "StreamingRelation rate, [timestamp#N, value#NL]" in ours[-1]
    assert re.search(r"Project \[\(value#NL % 3\) AS k#NL, value#NL\]", ours[-2]), ours
    assert ours[-2:] == theirs[-2:], "\n".join(["statestream:", *ours, "Spark:", *theirs])


def test_explain_file_source_is_sparks_text(spark, tmp_path):
    """A file source's query: its logical plans name the source as Spark's ``DataSource(...)``
    with its options, and the whole explain equals Spark's in every mode."""
    from pyspark.sql import functions as F

    def build(reader: Any) -> Any:
        df = reader.format("json").schema("k STRING, value LONG, ts TIMESTAMP").option("maxFilesPerTrigger", 1).load(str(tmp_path))
        return df.withWatermark("ts", "5 seconds").where("value > 0").groupBy("k", F.window("ts", "10 seconds")).agg(F.sum("value"))

    for mode in STRICT_MODES:
        theirs = _with_ids_normalised(_explain_mode_text(build(spark.readStream), mode))
        ours = _with_ids_normalised(_explain_mode_text(build(StreamingSession(spark).readStream), mode))
        if mode == "extended":
            assert any("~StreamingRelation DataSource(" in line and "maxFilesPerTrigger -> 1" in line for line in theirs), theirs
        assert ours == theirs, "\n".join([f"mode {mode}", "statestream:", *ours, "Spark:", *theirs])
