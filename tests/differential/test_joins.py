"""Differential tests of stream-static joins: Spark's engine versus statestream, batch by batch.

The stream (``k LONG, ts TIMESTAMP, v LONG`` files, one per micro-batch) has duplicate keys, null
keys and keys the static side lacks; the static side (a Parquet directory read with
``spark.read.parquet``) has duplicate keys and a null key too. Join types that take the same
input run as one query, a ``union`` of one join per type tagged with its name, so one oracle run
covers them all. Refused joins are compared by error class and text at ``start()``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent, assert_same_batches, error_text, run_stream, start_error
from tests.spark_confs import session_confs

SCHEMA = "k LONG, ts TIMESTAMP, v LONG"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def t(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


INPUT = [
    # duplicate stream keys, a null key, a key the static side lacks
    [(1, t(0), 10), (1, t(1), 11), (None, t(2), 12), (3, t(3), 13)],
    # a null key far ahead in event time (the inner join's inferred filter keeps it out of the
    # event-time statistics on Spark's engine), keys matching once and twice
    [(2, t(20), 20), (None, t(100), 21), (5, t(21), 22)],
    [],  # an empty file: a data batch with no rows
    [(1, t(4), 30), (2, t(40), 31), (3, t(41), 32)],
    [(5, t(60), 40), (1, t(61), 41)],
]

STATIC_ROWS = [(1, "one"), (1, "uno"), (2, "two"), (None, "nobody"), (5, "five")]


def _write_static(path: Path, rows: list[tuple[Any, Any]], name: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "name": pa.array([r[1] for r in rows], pa.string())})
    pq.write_table(table, path / name)


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("joins") / "static"
    _write_static(path, STATIC_ROWS, "part-0.parquet")
    return path


@pytest.fixture
def static(spark, static_dir) -> DataFrame:
    return spark.read.parquet(str(static_dir))


def _tagged(df: DataFrame, tag: str, *cols: Any) -> DataFrame:
    return df.select(*cols).withColumn("how", F.lit(tag))


# ------------------------------------------------------------------------------------------
# Accepted join types
# ------------------------------------------------------------------------------------------


def test_stream_on_the_left_every_accepted_type(spark, ours, tmp_path, static):
    """Inner (``on`` a name), left outer (a Column condition), left semi and left anti (a list
    of names, ``how`` spelled as PySpark accepts it) and a cross join, stream on the left."""

    def build(df: DataFrame) -> DataFrame:
        st = static
        name = F.col("name")
        inner = _tagged(df.join(st, "k"), "inner", "k", "v", name)
        left = _tagged(df.join(st, df.k == st.k, "left_outer"), "left", df.k, "v", name)
        semi = _tagged(df.join(st, ["k"], "semi"), "semi", "k", "v", F.lit(None).cast("string").alias("name"))
        anti = _tagged(df.join(st, [df.k == st.k], "LEFT_ANTI"), "anti", "k", "v", F.lit(None).cast("string").alias("name"))
        cross = _tagged(df.crossJoin(st.filter("k = 2").select("name")), "cross", "k", "v", name)
        return inner.union(left).union(semi).union(anti).union(cross)

    assert_equivalent(spark, ours, build, INPUT, SCHEMA, "append", tmp_path)


def test_stream_on_the_right_inner_and_right_outer(spark, ours, tmp_path, static):
    """``static.join(stream, ...)``: inner (names) and right outer (a Column condition), the
    static DataFrame's own ``join`` taking the statestream stream; and ``static.crossJoin(stream)``."""

    def build(df: DataFrame) -> DataFrame:
        st = static
        inner = _tagged(st.join(df, ["k"], "inner"), "inner", "k", "v", "name")
        right = _tagged(st.join(df, st.k == df.k, how="right"), "right", df.k, "v", "name")
        cross = _tagged(st.filter("k = 5").select("name").crossJoin(df), "cross", "k", "v", "name")
        return inner.union(right).union(cross)

    assert_equivalent(spark, ours, build, INPUT, SCHEMA, "append", tmp_path)


def test_update_mode_and_column_references_after_the_join(spark, ours, tmp_path, static):
    """Update mode (no stateful operator: every joined row once); columns of both sides picked
    after a Column-condition join where both sides have ``k`` (``df.k``, ``static.k``)."""

    def build(df: DataFrame) -> DataFrame:
        joined = df.join(static, df.k == static.k, "left")
        return (
            joined.filter(df.k.isNotNull())
            .withColumn("k2", df.k * 2)
            .select(df.k, static.k.alias("static_k"), "name", "k2", "v")
            .drop(static.k)
        )

    assert_equivalent(spark, ours, build, INPUT, SCHEMA, "update", tmp_path)


def test_broadcast_hints_with_broadcasting_off(spark, ours, tmp_path, static):
    """``F.broadcast(static)`` and ``hint("broadcast")`` with Spark's size-based broadcast turned
    off: the hints make Spark broadcast anyway; the rows are Spark's either way."""

    def build(df: DataFrame) -> DataFrame:
        a = _tagged(df.join(F.broadcast(static), "k"), "hinted", "k", "v", "name")
        b = _tagged(df.join(static.hint("broadcast"), "k", "left"), "hint", "k", "v", "name")
        c = _tagged(df.join(static.hint("merge"), "k"), "merge", "k", "v", "name")
        return a.union(b).union(c)

    key = "spark.sql.autoBroadcastJoinThreshold"
    with session_confs(spark, {key: "-1"}):
        assert_equivalent(spark, ours, build, INPUT, SCHEMA, "append", tmp_path)


# ------------------------------------------------------------------------------------------
# Watermarks and stateful operators after a join
# ------------------------------------------------------------------------------------------


def test_inner_join_keeps_null_keys_out_of_the_event_time_statistics(spark, ours, tmp_path, static):
    """Spark's optimizer infers ``isnotnull(k)`` from an inner join and moves it below
    ``withWatermark``: the null-key row at 100 s never reaches the watermark (it would make it
    90 s). A left outer join infers nothing on its stream side: there it does."""

    def build(how: str) -> Callable[[DataFrame], DataFrame]:
        return lambda df: df.withWatermark("ts", "10 seconds").join(static, "k", how).select("k", "ts", "v", "name")

    exp, _ = assert_equivalent(spark, ours, build("inner"), INPUT[:2], SCHEMA, "append", tmp_path)
    assert exp.batches[-1].event_time["max"] == "2024-05-01T12:00:21.000Z", exp.describe()
    exp, _ = assert_equivalent(spark, ours, build("left"), INPUT[:2], SCHEMA, "append", tmp_path)
    assert exp.batches[-1].event_time["max"] == "2024-05-01T12:01:40.000Z", exp.describe()


def test_filter_after_the_join_moves_below_the_watermark(spark, ours, tmp_path, static):
    """A filter written after a left outer join on a column of the stream side: Spark pushes it
    into the stream side (the side a left outer join keeps) and below ``withWatermark``, so the
    row it drops (v = 21, at 100 s) is not in the event-time statistics either."""

    def build(df: DataFrame) -> DataFrame:
        return df.withWatermark("ts", "10 seconds").join(static, "k", "left").filter("v != 21").select("k", "v", "name")

    exp, _ = assert_equivalent(spark, ours, build, INPUT[:2], SCHEMA, "append", tmp_path)
    assert exp.batches[-1].event_time["max"] == "2024-05-01T12:00:21.000Z", exp.describe()


def _windowed_counts(static: DataFrame) -> Callable[[DataFrame], DataFrame]:
    def build(df: DataFrame) -> DataFrame:
        return (
            df.withWatermark("ts", "10 seconds")
            .join(static, "k")
            .groupBy(F.window("ts", "10 seconds"), "name")
            .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
            .select(F.col("window.start").cast("long").alias("start"), "name", "n", "total")
        )

    return build


def test_join_then_windowed_aggregation_append(spark, ours, tmp_path, static):
    """Join, then a windowed aggregation with the stream's watermark in append mode: the
    event-time column keeps its watermark through the join; late rows are dropped and windows
    emitted when the watermark passes them, batch for batch as Spark."""
    exp, _ = assert_equivalent(spark, ours, _windowed_counts(static), INPUT, SCHEMA, "append", tmp_path)
    assert any(b.rows for b in exp.batches), exp.describe()
    assert any(s["numRowsDroppedByWatermark"] for b in exp.batches for s in b.state), exp.describe()


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_join_then_aggregation_update_and_complete(spark, ours, tmp_path, static, mode):
    """A stream-static join is allowed in every output mode; the aggregation above it keeps its
    state by the static side's column (null for the unmatched rows of the left outer join)."""

    def build(df: DataFrame) -> DataFrame:
        return df.join(static, "k", "left").groupBy("name").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

    assert_equivalent(spark, ours, build, INPUT, SCHEMA, mode, tmp_path)


def test_join_then_drop_duplicates(spark, ours, tmp_path, static):
    """Join, then ``dropDuplicates`` on a static column (state keyed by it) and, with the
    watermark, ``dropDuplicatesWithinWatermark`` on the join key."""

    def by_name(df: DataFrame) -> DataFrame:
        return df.join(static, "k", "left").dropDuplicates(["name"]).select("k", "name")

    def by_key(df: DataFrame) -> DataFrame:
        joined = df.withWatermark("ts", "10 seconds").join(static, "k", "left")
        return joined.dropDuplicatesWithinWatermark(["k"]).select("k", "ts", "name")

    assert_equivalent(spark, ours, by_name, INPUT, SCHEMA, "append", tmp_path)
    assert_equivalent(spark, ours, by_key, INPUT, SCHEMA, "append", tmp_path)


def test_join_then_limit_and_session_window(spark, ours, tmp_path, static):
    """A stream-static join below a streaming limit, and below a session-window aggregation."""

    def limited(df: DataFrame) -> DataFrame:
        return df.join(static, "k").select("k", "v", "name").limit(4)

    def sessions(df: DataFrame) -> DataFrame:
        return (
            df.withWatermark("ts", "10 seconds")
            .join(static, "k", "left")
            .groupBy(F.session_window("ts", "5 seconds"), "k")
            .agg(F.count("*").alias("n"), F.max("name").alias("name"))
            .select(F.col("session_window.start").cast("long").alias("start"), "k", "n", "name")
        )

    assert_equivalent(spark, ours, limited, INPUT, SCHEMA, "append", tmp_path)
    assert_equivalent(spark, ours, sessions, INPUT, SCHEMA, "append", tmp_path)


def test_restart_in_the_middle(spark, ours, tmp_path, static):
    """Stopped after two files and started again on the same checkpoint: the join and the
    windowed aggregation above it go on as on Spark's engine."""
    build = _windowed_counts(static)
    runs = {}
    for engine in ("spark", "ours"):
        session = spark if engine == "spark" else ours()
        workdir = tmp_path / f"{engine}-{uuid.uuid4().hex[:8]}"
        runs[engine] = [
            run_stream(session, build, INPUT[:2], SCHEMA, "append", tmp_path, workdir=workdir),
            run_stream(session, build, INPUT[2:], SCHEMA, "append", tmp_path, workdir=workdir),
        ]
    for expected, actual in zip(runs["spark"], runs["ours"]):
        assert_same_batches(expected, actual)


def test_static_parquet_directory_that_gains_files(spark, ours, tmp_path):
    """The static side is evaluated in every batch as its DataFrame reads: a Parquet directory
    read with ``spark.read.parquet`` keeps the file listing it made when the DataFrame was made,
    so a file added between two batches is not seen, on Spark's engine as on statestream."""
    runs = []
    for engine in (spark, ours()):
        directory = tmp_path / f"static-{uuid.uuid4().hex[:8]}"
        _write_static(directory, [(1, "one")], "part-0.parquet")
        static = spark.read.parquet(str(directory))

        def grow(i: int, directory: Path = directory) -> None:
            if i == 1:
                _write_static(directory, [(2, "two"), (3, "three")], "part-1.parquet")

        runs.append(
            run_stream(engine, lambda df, st=static: df.join(st, "k").select("k", "v", "name"), INPUT[:2] + INPUT[3:], SCHEMA, "append", tmp_path, before_file=grow)
        )
    assert_same_batches(runs[0], runs[1])
    assert not any(r["k"] in (2, 3) for b in runs[0].batches for r in b.rows), runs[0].describe()


# ------------------------------------------------------------------------------------------
# Refused joins
# ------------------------------------------------------------------------------------------


def _static_of(df: DataFrame) -> DataFrame:
    return df.sparkSession.range(3).selectExpr("id AS k", "CAST(id AS STRING) AS name")


def _other_stream(df: DataFrame) -> DataFrame:
    return df.select("k", F.col("v").alias("v2"), F.col("ts").alias("ts2"))


REFUSED: dict[str, tuple[str, Callable[[DataFrame], DataFrame]]] = {
    "full_outer_stream_left": ("append", lambda df: df.join(_static_of(df), "k", "full")),
    "full_outer_stream_right": ("append", lambda df: _static_of(df).join(df, "k", "fullouter")),
    "left_outer_stream_right": ("append", lambda df: _static_of(df).join(df, "k", "left")),
    "left_semi_stream_right": ("append", lambda df: _static_of(df).join(df, "k", "leftsemi")),
    "left_anti_stream_right": ("append", lambda df: _static_of(df).join(df, "k", "anti")),
    "right_outer_stream_left": ("append", lambda df: df.join(_static_of(df), "k", "right_outer")),
    "refused_join_below_aggregation": (
        "update",
        lambda df: df.join(_static_of(df), "k", "outer").groupBy("name").count(),
    ),
    "stream_stream_update": ("update", lambda df: df.join(_other_stream(df), "k")),
    "stream_stream_complete": ("complete", lambda df: df.join(_other_stream(df), "k").groupBy("k").count()),
    "stream_stream_left_anti": ("append", lambda df: df.join(_other_stream(df), "k", "left_anti")),
    "stream_stream_left_outer_without_watermark": ("append", lambda df: df.join(_other_stream(df), "k", "left")),
    "stream_stream_full_outer_without_watermark": ("append", lambda df: df.join(_other_stream(df), "k", "full")),
    "stream_stream_left_semi_watermark_on_the_left_only": (
        "append",
        lambda df: df.withWatermark("ts", "1 second").join(_other_stream(df), "k", "semi"),
    ),
    "stream_stream_right_outer_no_range_condition": (
        "append",
        lambda df: df.withWatermark("ts", "1 second").join(
            _other_stream(df).withWatermark("ts2", "1 second"), "k", "right"
        ),
    ),
    "complete_mode_stream_static_without_aggregation": ("complete", lambda df: df.join(_static_of(df), "k")),
}


def _start_refusal(engine: Any, build: Callable[[DataFrame], DataFrame], mode: str, tmp_path: Path) -> tuple[str | None, str] | None:
    """``(error condition, text)`` of the ``AnalysisException`` ``start()`` raises for the query
    (building it must succeed, as on Spark's engine), or ``None`` if it starts."""
    from pyspark.errors import AnalysisException

    root = tmp_path / f"refusal-{uuid.uuid4().hex[:8]}"
    (root / "input").mkdir(parents=True)
    df = build(engine.readStream.schema(SCHEMA).parquet(str(root / "input")))
    try:
        query = df.writeStream.outputMode(mode).format("noop").option("checkpointLocation", str(root / "checkpoint")).start()
    except AnalysisException as exc:
        return exc.getCondition(), error_text(exc)
    query.stop()
    return None


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_join_error_matches_spark(spark, ours, tmp_path, name):
    """Error condition and text from ``start()``, as on Spark's engine (and the same verdict
    through the harness's ``start_error``)."""
    mode, build = REFUSED[name]
    expected = _start_refusal(spark, build, mode, tmp_path)
    assert expected is not None, f"Spark's verdict changed for {name}"
    actual = _start_refusal(ours(), build, mode, tmp_path)
    assert actual == expected, f"{name} ({mode}):\n  spark: {expected}\n  ours:  {actual}"
    assert start_error(ours(), build, SCHEMA, mode, tmp_path) == ("AnalysisException", expected[1])


def test_refused_join_error_parameters(spark, ours, tmp_path):
    """The refusal carries Spark's legacy condition ``_LEGACY_ERROR_TEMP_3102`` with the text as
    its ``msg`` parameter."""
    from pyspark.errors import AnalysisException

    query = ours().readStream.format("rate").load().withColumnRenamed("value", "k")
    joined = query.join(_static_of(query), "k", "full_outer")  # building it is fine, as in Spark
    with pytest.raises(AnalysisException) as refused:
        joined.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    assert refused.value.getCondition() == "_LEGACY_ERROR_TEMP_3102"
    assert refused.value.getMessageParameters() == {"msg": error_text(refused.value)}


def test_stream_stream_outer_join_with_watermarks_and_an_unsolvable_comparison(spark, ours, tmp_path):
    """A left outer join of two streams with a watermark on each side and a comparison across
    them that bounds nothing (``ts2 > ts``): Spark solves it for a state watermark, finds none
    and refuses the query."""

    def build(df: DataFrame) -> DataFrame:
        left = df.withWatermark("ts", "1 second")
        right = _other_stream(df).withWatermark("ts2", "1 second")
        return left.join(right, (left.k == right.k) & (right.ts2 > left.ts), "left")

    expected = start_error(spark, build, SCHEMA, "append", tmp_path)
    assert expected is not None
    assert start_error(ours(), build, SCHEMA, "append", tmp_path) == expected
