"""Differential tests of the semantic corners of issue 2's query slice.

* Filter pushdown (reference §3.1, scenario S38): Spark's optimizer moves deterministic filters
  that do not read the event-time column below ``EventTimeWatermark``, and filters on grouping keys
  below a streaming aggregation, so the rows they remove never reach the event-time statistics
  (hence the watermark) or the state store.
* ``current_timestamp()`` / ``current_date()`` / ``localtimestamp()`` are the batch's
  ``batchTimestampMs`` from the offset log, also when a batch runs again after recovery;
  ``now()`` is not (Spark leaves it to the batch's own planning time).
* ``cube`` / ``rollup`` on a stream, and the column names of ``GroupedData`` shortcuts.

Every query runs on Spark's engine and on statestream over the same files; every batch's rows,
watermark, eventTime stats and state metrics must agree.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import StreamRun, assert_equivalent, assert_same_batches, run_stream
from tests.spark_confs import session_confs

# ------------------------------------------------------------------------------------------
# S38 in the reference's notation (value = event time in seconds)
# ------------------------------------------------------------------------------------------


def vals(*values: int) -> list[tuple[int]]:
    return [(v,) for v in values]


def w10(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value")).withWatermark("eventTime", "10 seconds")


def cnt_t5(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("eventTime", "5 seconds")).count().select(F.col("window.start").cast("long").alias("start"), "count")


def test_s38_filter_on_value_goes_below_the_watermark(spark, ours, tmp_path):
    """W10, filter(value != 100), cnt(T5), append: the 100 s row never counts for the watermark."""
    exp, _ = assert_equivalent(
        spark,
        ours,
        lambda df: cnt_t5(w10(df).filter("value != 100")),
        [vals(5, 100), vals(20)],
        "value LONG",
        "append",
        tmp_path,
        reference=[[], [], [{"start": 5, "count": 1}]],
    )
    assert exp.batches[0].event_time["max"] == "1970-01-01T00:00:05.000Z"


def test_s38_filter_on_event_time_stays_above_the_watermark(spark, ours, tmp_path):
    """Same with filter(eventTime < 100 s): the 100 s row advances the watermark to 90 s."""
    exp, _ = assert_equivalent(
        spark,
        ours,
        lambda df: cnt_t5(w10(df).filter(F.col("eventTime") < F.timestamp_seconds(F.lit(100)))),
        [vals(5, 100), vals(20)],
        "value LONG",
        "append",
        tmp_path,
        reference=[[], [{"start": 5, "count": 1}], []],
    )
    assert exp.batches[2].state[0]["numRowsDroppedByWatermark"] == 1


# ------------------------------------------------------------------------------------------
# More shapes: projections, mixed conjuncts, UDFs, aggregation keys, sliding windows, union
# ------------------------------------------------------------------------------------------

SCHEMA = "ts TIMESTAMP, k STRING, x LONG"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# The rows a pushed filter removes carry the largest event times, so a wrong placement moves the
# watermark (and eventTime min/max/avg) visibly.
INPUT = [
    [(at(0), "a", 1), (at(50), "b", -2), (at(3), "c", 5), (at(4), None, None)],
    [(at(21), "a", 2), (at(90), "b", 7), (at(22), "c", -1)],
    [(at(2), "a", 3), (at(30), "c", 4), (at(120), "b", 1)],
]


def wm(df: DataFrame) -> DataFrame:
    return df.withWatermark("ts", "10 seconds")


def by_window(df: DataFrame, *extra: Any) -> DataFrame:
    return df.groupBy(F.window("ts", "5 seconds").alias("w"), *extra).agg(F.count("*").alias("n"), F.sum("x").alias("s"))


STATELESS = {
    "filter_through_projection": lambda df: wm(df).withColumn("y", F.col("x") * 2).filter("y > 0"),
    "mixed_conjuncts": lambda df: wm(df).filter((F.col("x") > 0) & (F.col("ts") < F.lit(at(100)))),
    "copy_of_event_time_stays_above": lambda df: wm(df).withColumn("t2", F.col("ts")).filter(F.col("t2") < F.lit(at(40))),
    "renamed_column": lambda df: wm(df).withColumnRenamed("x", "z").select("ts", "z").filter("z > 0"),
    "two_filters_and_a_window_column": lambda df: wm(df)
    .filter("k is not null")
    .withColumn("win", F.window("ts", "5 seconds"))
    .filter(F.col("k") != "b"),
    "python_udf_is_pushed": lambda df: wm(df).filter(F.udf(lambda v: v is not None and v > 0, "boolean")("x")),
    "nondeterministic_udf_stays_above": lambda df: wm(df).filter(
        F.udf(lambda v: v is not None and v > 0, "boolean").asNondeterministic()("x")
    ),
}


@pytest.mark.parametrize("name", list(STATELESS))
def test_stateless_filter_pushdown(spark, ours, tmp_path, name):
    assert_equivalent(spark, ours, STATELESS[name], INPUT, SCHEMA, "append", tmp_path)


def test_filter_pushed_into_both_inputs_of_a_union(spark, ours, tmp_path):
    """Each input of the union gets the conjunct over its own columns (x + 3 > 0 on the right).

    Both inputs read the same source, and numInputRows counts the rows of every scan of it, so
    twice the file's rows, as Spark counts them."""

    def build(df: DataFrame) -> DataFrame:
        return wm(df).union(wm(df.withColumn("x", F.col("x") + 3))).filter("x > 0")

    exp = run_stream(spark, build, INPUT, SCHEMA, "append", tmp_path)
    act = run_stream(ours(), build, INPUT, SCHEMA, "append", tmp_path)
    assert any(b.num_input_rows for b in exp.batches)
    assert_same_batches(exp, act)


AGGREGATIONS = {
    # a grouping-key filter goes below the aggregation and below the watermark
    "key_filter_below_aggregation_and_watermark": lambda df: by_window(wm(df), "k").filter("k != 'b'"),
    # a window filter goes below the aggregation only (it reads the event time)
    "window_filter_below_aggregation": lambda df: by_window(wm(df), "k").filter(F.col("w.start") > F.lit(at(0))),
    # an aggregate-value filter stays above
    "count_filter_stays_above": lambda df: by_window(wm(df), "k").filter("n > 0"),
    # a sliding window is made by Expand: the window filter stops inside the aggregation
    "sliding_window_filter": lambda df: wm(df)
    .groupBy(F.window("ts", "10 seconds", "5 seconds").alias("w"))
    .count()
    .filter(F.col("w.start") >= F.lit(at(0))),
    # an expression key
    "expression_key_filter": lambda df: wm(df).groupBy(F.window("ts", "5 seconds"), (F.col("x") % 2).alias("p")).count().filter("p = 1"),
}


@pytest.mark.parametrize("mode", ["update", "append"])
@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_aggregation_filter_pushdown(spark, ours, tmp_path, name, mode):
    assert_equivalent(spark, ours, AGGREGATIONS[name], INPUT, SCHEMA, mode, tmp_path)


def test_complete_mode_key_filter(spark, ours, tmp_path):
    """Complete mode, no watermark: keys are filtered before they reach the state."""
    build = lambda df: df.groupBy("k").agg(F.sum("x").alias("s")).filter("k != 'a'")  # noqa: E731
    assert_equivalent(spark, ours, build, INPUT, SCHEMA, "complete", tmp_path)


# ------------------------------------------------------------------------------------------
# current_timestamp() and friends: the batch timestamp of the offset log
# ------------------------------------------------------------------------------------------

UTC = dt.timezone.utc


def batch_timestamp_ms(checkpoint: str | Path, batch_id: int) -> int:
    """``batchTimestampMs`` of ``offsets/<batch_id>`` (line 2 of the entry)."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return int(json.loads(lines[1])["batchTimestampMs"])


def current_time_columns(df: DataFrame) -> DataFrame:
    return df.select(
        "k",
        F.current_timestamp().alias("ct"),
        F.expr("unix_millis(current_timestamp())").alias("ms"),
        F.current_date().alias("cd"),
        F.localtimestamp().alias("lt"),
        F.now().alias("nw"),
    )


def _ms(t: dt.datetime) -> int:
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    return round(t.timestamp() * 1000)


def check_rows_use_batch_timestamp(run: StreamRun) -> None:
    """Every row of batch N carries offsets/N's batchTimestampMs (session time zone: UTC)."""
    checked = 0
    for b in run.batches:
        ts = batch_timestamp_ms(run.checkpoint, b.batch_id)
        instant = dt.datetime.fromtimestamp(ts / 1000, tz=UTC)
        for r in b.rows:
            assert r["ms"] == ts, f"{run.engine} batch {b.batch_id}: {r} vs batchTimestampMs {ts}"
            ct = r["ct"] if r["ct"].tzinfo else r["ct"].replace(tzinfo=UTC)
            assert ct == instant
            assert r["cd"] == instant.date()
            assert r["lt"] == instant.replace(tzinfo=None)
            nw = r["nw"] if r["nw"].tzinfo else r["nw"].replace(tzinfo=UTC)
            assert nw >= instant  # now() is the planning time of the batch, never before it
            checked += 1
    assert checked > 0, f"{run.engine}: no rows to check"


def _delete_commit(checkpoint: Path, n: int) -> None:
    (checkpoint / "commits" / str(n)).unlink()
    crc = checkpoint / "commits" / f".{n}.crc"
    if crc.exists():
        crc.unlink()


def _run_twice(engine: Any, tmp_path: Path) -> tuple[StreamRun, StreamRun]:
    """Two batches, then a restart after deleting the last commit: batch 1 runs again."""
    workdir = tmp_path / f"now-{uuid.uuid4().hex[:8]}"
    files = [[(at(0), "a", 1), (at(1), "b", 2)], [(at(2), "c", 3)]]
    first = run_stream(engine, current_time_columns, files, SCHEMA, "append", tmp_path, workdir=workdir)
    _delete_commit(workdir / "checkpoint", 1)
    again = run_stream(engine, current_time_columns, [], SCHEMA, "append", tmp_path, workdir=workdir)
    return first, again


def test_current_timestamp_is_the_batch_timestamp_also_after_recovery(spark, ours, tmp_path):
    expected = _run_twice(spark, tmp_path)
    actual = _run_twice(ours(), tmp_path)
    for exp, act in zip(expected, actual):
        check_rows_use_batch_timestamp(exp)
        check_rows_use_batch_timestamp(act)
        assert [b.batch_id for b in exp.batches] == [b.batch_id for b in act.batches]
        assert [b.columns for b in exp.batches] == [b.columns for b in act.batches]
    for first, again in (expected, actual):
        # the re-run of batch 1 sees the timestamp of its first run
        assert [b.batch_id for b in again.batches] == [1]
        assert again.batches[0].rows[0]["ms"] == first.batches[1].rows[0]["ms"]


def test_current_timestamp_in_a_stateful_aggregation(spark, ours, tmp_path):
    """Complete mode: min(processing time) per key is the batch timestamp of the key's first batch."""

    def build(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("pt", F.current_timestamp())
            .groupBy("k")
            .agg(F.min("pt").alias("first"), F.count("*").alias("n"))
        )

    files = [[(at(0), "a", 1)], [(at(1), "b", 2), (at(2), "a", 3)]]
    runs = [run_stream(e, build, files, SCHEMA, "complete", tmp_path) for e in (spark, ours())]
    for run in runs:
        t0, t1 = batch_timestamp_ms(run.checkpoint, 0), batch_timestamp_ms(run.checkpoint, 1)
        assert t0 < t1
        got = {r["k"]: (_ms(r["first"]), r["n"]) for r in run.batches[-1].rows}
        assert got == {"a": (t0, 2), "b": (t1, 1)}, run.describe()
    assert runs[0].batches[-1].columns == runs[1].batches[-1].columns


def test_current_timestamp_inside_an_aggregate_function_fails_like_spark(spark, ours, tmp_path):
    """The batch timestamp is a non-deterministic expression to Spark's analyser, so an aggregate
    function over it fails the first batch: [AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION]."""

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(F.max(F.current_timestamp()).alias("last"))

    messages = []
    for engine in (spark, ours()):
        with pytest.raises(Exception) as info:  # noqa: PT011 - the engines raise different classes; the text is compared
            run_stream(engine, build, [[(at(0), "a", 1)]], SCHEMA, "complete", tmp_path)
        messages.append(str(info.value))
    for m in messages:
        assert "[STREAM_FAILED]" in m and "[AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION]" in m, m


# ------------------------------------------------------------------------------------------
# cube and rollup: Spark's Expand below the aggregation, the grouping id in the state key
# ------------------------------------------------------------------------------------------

GROUPING_SETS = {
    "cube_update": ("update", lambda df: df.cube("k").agg(F.count("*").alias("c"), F.sum("x"))),
    "rollup_complete": ("complete", lambda df: df.rollup("k", (F.col("x") % 2).alias("p")).count()),
    "rollup_avg_min_max_update": ("update", lambda df: df.rollup("k").agg(F.avg("x"), F.min("ts"), F.max("x"))),
    "cube_window_append": ("append", lambda df: wm(df).cube(F.window("ts", "5 seconds"), "k").count()),
    "cube_window_update": ("update", lambda df: wm(df).cube(F.window("ts", "5 seconds"), "k").count()),
    "cube_grouping_functions_complete": (
        "complete",
        lambda df: df.cube("k", "x").agg(
            F.grouping_id().alias("g"), F.grouping("k").alias("gk"), F.grouping("x").alias("gx"), F.count("*")
        ),
    ),
    "cube_key_filter_update": ("update", lambda df: df.cube("k", (F.col("x") > 2).alias("big")).count().filter("k != 'a'")),
}


@pytest.mark.parametrize("name", list(GROUPING_SETS))
def test_cube_and_rollup(spark, ours, tmp_path, name):
    mode, build = GROUPING_SETS[name]
    assert_equivalent(spark, ours, build, INPUT, SCHEMA, mode, tmp_path)


def test_cube_state_key_has_spark_grouping_id(spark, ours, tmp_path):
    """The state schema file names the grouping id as Spark does (state format compatibility)."""
    build = lambda df: df.cube("k").count()  # noqa: E731
    runs = [run_stream(e, build, INPUT[:1], SCHEMA, "complete", tmp_path) for e in (spark, ours())]
    for run in runs:
        text = (Path(run.checkpoint) / "state" / "0" / "0" / "_metadata" / "schema").read_bytes()
        assert b'"name":"spark_grouping_id","type":"long","nullable":false' in text, run.engine


# ------------------------------------------------------------------------------------------
# GroupedData shortcuts: Spark's result names
# ------------------------------------------------------------------------------------------

NUMERIC_SCHEMA = "k STRING, x LONG, d DOUBLE, i INT"
NUMERIC_INPUT = [[("a", 1, 0.5, 3), ("b", 2, None, 4), (None, 3, 1.5, None)], [("a", 4, 2.0, 5)]]

SHORTCUTS = {
    "count": lambda df: df.groupBy("k").count(),
    "sum_without_names_includes_numeric_keys": lambda df: df.groupBy("k", "i").sum(),
    "avg_several": lambda df: df.groupBy("k").avg("x", "d"),
    "mean": lambda df: df.groupBy("k").mean("d", "i"),
    "min_without_names": lambda df: df.groupBy("k").min(),
    "max_several": lambda df: df.groupBy("k").max("i", "x"),
    "dict_with_star_count": lambda df: df.groupBy("k").agg({"x": "sum", "*": "count", "d": "mean"}),
    "dataframe_agg_dict": lambda df: df.agg({"x": "max", "i": "avg"}),
    "cube_sum": lambda df: df.cube("k").sum("x", "i"),
    "expression_key_count": lambda df: df.groupBy(F.col("x") % 2).count(),
}


@pytest.mark.parametrize("name", list(SHORTCUTS))
def test_grouped_data_shortcut_names(spark, ours, tmp_path, name):
    exp, _ = assert_equivalent(spark, ours, SHORTCUTS[name], NUMERIC_INPUT, NUMERIC_SCHEMA, "complete", tmp_path)
    assert exp.batches[0].columns  # the compared schema is not empty


# ------------------------------------------------------------------------------------------
# A batch DataFrame in a streaming query
# ------------------------------------------------------------------------------------------


def test_union_with_batch_runs_when_the_check_is_off(spark, ours, tmp_path):
    """Refused at start() by default (test_rejections); with the unsupported-operation check off,
    Spark unions the whole batch DataFrame into every micro-batch, and so does statestream."""

    def build(df: DataFrame) -> DataFrame:
        return df.union(df.sparkSession.range(2).withColumnRenamed("id", "value"))

    with session_confs(spark, {"spark.sql.streaming.unsupportedOperationCheck": "false"}):
        exp, _ = assert_equivalent(spark, ours, build, [vals(10), vals(11)], "value LONG", "append", tmp_path)
    assert sorted(r["value"] for r in exp.batches[1].rows) == [0, 1, 11]


def test_event_time_avg_is_spark_running_mean(spark, ours, tmp_path):
    """``eventTime.avg`` is Spark's running mean (``avg += (t - avg) / count`` row by row, then
    truncated to ms), not the exact mean: for these eight times the exact mean is 110.125 s, the
    running mean 110124.99999999999 ms, reported as 00:01:50.124."""
    times = [95, 104, 118, 116, 98, 107, 127, 116]
    exp = run_stream(spark, lambda df: cnt_t5(w10(df)), [vals(*times)], "value LONG", "append", tmp_path)
    assert exp.batches[0].event_time["avg"] == "1970-01-01T00:01:50.124Z"
    act = run_stream(ours(), lambda df: cnt_t5(w10(df)), [vals(*times)], "value LONG", "append", tmp_path)
    assert_same_batches(exp, act)
