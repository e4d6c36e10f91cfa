"""Differential tests of stream-stream joins (Spark's ``StreamingSymmetricHashJoinExec``): Spark's
engine versus statestream on the same file micro-batches, every batch compared (rows sorted,
watermark, event-time statistics, the join's state row counts).

One input stream carries both sides, told apart by ``side`` ('L' or 'R'); each side is a filter of
it with its own watermark on its own time column. The input has duplicate keys on both sides, null
keys on both sides, matches inside one batch and across batches, matches with rows the other
side's state is about to evict and late rows on each side.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import uuid
from pathlib import Path

from tests.differential.harness import assert_same_batches, error_text, run_stream, start_error
from tests.spark_confs import session_confs

SCHEMA = "side STRING, k LONG, ts TIMESTAMP, v LONG"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def t(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def L(k: Any, s: int, v: int) -> tuple:
    return ("L", k, t(s), v)


def R(k: Any, s: int, v: int) -> tuple:
    return ("R", k, t(s), v)


#: watermark delay of both sides: 10 s; the time range: rts in [lts, lts + 5 s]
INPUT = [
    # duplicate keys on both sides matching inside the batch; null keys on both sides;
    # keys only one side has
    [L(1, 0, 10), L(1, 1, 11), R(1, 2, 100), R(1, 3, 101), L(None, 3, 12), R(None, 3, 102), L(2, 4, 13), R(3, 4, 103)],
    # matches across batches (right rows meeting stored left rows), one outside the range
    [R(2, 6, 104), R(1, 5, 105), R(1, 9, 106), L(3, 1, 14)],
    # the left side moves ahead: left watermark 20 s (every file has rows of both sides: a
    # Parquet row group of one side only is skipped by the other side's scan on Spark's engine,
    # which then counts fewer input rows)
    [L(4, 30, 15), L(6, 31, 16), R(10, 9, 113)],
    # the right side moves ahead: right watermark 32 s; global (min) 20 s
    [R(4, 33, 107), R(7, 42, 108), L(11, 25, 21)],
    # late rows on both sides (<= 20 s), rows matching stored rows
    [L(1, 5, 17), R(2, 8, 109), R(6, 34, 110), L(7, 40, 18), L(8, 50, 19)],
    # both sides far ahead: everything old leaves the state
    [L(9, 100, 20), R(9, 101, 111), R(8, 52, 112)],
]


def _sides(df: DataFrame, delay: str = "10 seconds") -> tuple[DataFrame, DataFrame]:
    left = df.filter("side = 'L'").select("k", F.col("ts").alias("lts"), F.col("v").alias("lv")).withWatermark("lts", delay)
    right = df.filter("side = 'R'").select(F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")).withWatermark("rts", delay)
    return left, right


def _range_join(how: str) -> Callable[[DataFrame], DataFrame]:
    def build(df: DataFrame) -> DataFrame:
        left, right = _sides(df)
        cond = (left.k == right.rk) & (right.rts >= left.lts) & (right.rts <= left.lts + F.expr("INTERVAL 5 SECONDS"))
        return left.join(right, cond, how)

    return build


def _compare(spark, ours, tmp_path, build, batches=INPUT, mode: str = "append", **kw):
    expected = run_stream(spark, build, batches, SCHEMA, mode, tmp_path, **kw)
    actual = run_stream(ours(), build, batches, SCHEMA, mode, tmp_path, **kw)
    assert_same_batches(expected, actual)
    return expected, actual


# ------------------------------------------------------------------------------------------
# Accepted join types
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "left_semi"])
def test_time_range_join(spark, ours, tmp_path, how):
    """Each accepted join type with an event-time range condition and watermarks on both sides:
    matches inside a batch and across batches, duplicate keys on both sides, null keys on both
    sides, late rows on each side, rows leaving the state (outer rows padded with nulls then)."""
    _compare(spark, ours, tmp_path, _range_join(how))


#: two files: matches inside the first batch, then both sides move ahead, and the no-data batch
#: that follows evicts the old rows (the unmatched ones padded with nulls in outer joins)
SHORT_INPUT = [
    [L(1, 0, 10), L(1, 1, 11), R(1, 2, 100), L(2, 4, 12), L(None, 3, 13), R(None, 3, 101), R(3, 5, 102)],
    [L(4, 30, 14), R(4, 33, 103), R(2, 6, 104), L(3, 2, 15)],
]


@pytest.fixture(params=["in_tasks", "spark_join"])
def matching(request, spark, monkeypatch):
    """Both ways statestream matches a join's rows: in the state step's tasks (the condition as an
    Arrow predicate) and, the general path for conditions without one, with a Spark join. The
    in-task variant fails if the Spark-join path's state scan runs at all."""
    from statestream.operators import stream_join
    from statestream.plan.stream_joins import MATCH_IN_TASKS_CONF

    if request.param == "spark_join":
        spark.conf.set(MATCH_IN_TASKS_CONF, "false")
    else:
        def refuse(**_: Any) -> None:
            raise AssertionError("the stream-stream join took the Spark-join path")

        monkeypatch.setattr(stream_join, "JoinStateScan", refuse)
    yield request.param
    spark.conf.unset(MATCH_IN_TASKS_CONF)


@pytest.mark.parametrize("how", ["left", "full"])
def test_outer_join_short(spark, ours, tmp_path, how, matching):
    """The quick version of ``test_time_range_join`` (three batches): outer rows padded with
    nulls in the no-data batch where the watermark passes them."""
    expected, _ = _compare(spark, ours, tmp_path, _range_join(how), SHORT_INPUT)
    padded = [r for b in expected.batches for r in b.rows if r.get("rk") is None]
    assert padded, "the input no longer exercises the null-padded rows"


def test_condition_on_alias_qualified_columns(spark, ours, tmp_path):
    """Both sides aliased (``df.alias("a")``) and the condition and output written with the
    aliases' qualified names (``F.col("a.k")``), a common way to write a self-join."""

    def build(df: DataFrame) -> DataFrame:
        rows = df.select("side", "k", "ts", "v")
        left = rows.filter("side = 'L'").withWatermark("ts", "10 seconds").alias("a")
        right = rows.filter("side = 'R'").withWatermark("ts", "10 seconds").alias("b")
        cond = (F.col("a.k") == F.col("b.k")) & (F.col("b.ts") >= F.col("a.ts")) & (F.col("b.ts") <= F.col("a.ts") + F.expr("INTERVAL 5 SECONDS"))
        return left.join(right, cond).select(F.col("a.k").alias("k"), F.col("a.v").alias("lv"), F.col("b.v").alias("rv"))

    _compare(spark, ours, tmp_path, build, SHORT_INPUT)


def test_condition_with_arithmetic_under_not(spark, ours, tmp_path, matching):
    """A condition beyond the plain time range: integer arithmetic under NOT (a pair of new rows
    inside the batch fails it, its left row then padded with nulls); both ways of matching agree
    with Spark."""

    def build(df: DataFrame) -> DataFrame:
        left, right = _sides(df)
        upper = left.lts + F.expr("INTERVAL 5 SECONDS")
        cond = (left.k == right.rk) & (right.rts >= left.lts) & (right.rts <= upper) & ~((right.rv - left.lv) == 90)
        return left.join(right, cond, "left")

    expected, _ = _compare(spark, ours, tmp_path, build, SHORT_INPUT)
    rows = [r for b in expected.batches for r in b.rows]
    assert any(r["lv"] == 10 and r.get("rk") is None for r in rows), "the pair (10, 100) no longer fails the condition"


def test_join_as_the_second_input_of_a_union(spark, ours, tmp_path):
    """A join below the second input of a union: Spark runs the union's inputs as one stage whose
    task ids continue after the first input's, and the state must still be found by partition."""

    def build(df: DataFrame) -> DataFrame:
        first = df.filter("side = 'L'").select(
            "k", F.col("ts").alias("lts"), F.col("v").alias("lv"), F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")
        )
        return first.union(_range_join("left")(df))

    _compare(spark, ours, tmp_path, build, SHORT_INPUT)


#: an inner join on the key only, no watermark: the state keeps everything
NO_WATERMARK_INPUT = [
    [L(1, 0, 10), L(1, 1, 11), R(1, 2, 100), L(None, 3, 12), R(None, 3, 102), R(3, 4, 103)],
    [R(1, 5, 104), L(3, 1, 13), R(2, 6, 105)],
    [L(2, 0, 14), R(1, 0, 106)],
]


def test_inner_join_without_watermarks_keeps_all_state(spark, ours, tmp_path):
    """An inner join of two streams without any watermark (Spark accepts it): every row stays in
    the state and matches rows of the other side arriving later; null keys never match."""

    def build(df: DataFrame) -> DataFrame:
        left = df.filter("side = 'L'").select("k", F.col("v").alias("lv"))
        right = df.filter("side = 'R'").select("k", F.col("v").alias("rv"))
        return left.join(right, "k")

    _compare(spark, ours, tmp_path, build, NO_WATERMARK_INPUT)


#: rows in 10-second windows; the join key includes the window (a key carrying the watermark)
WINDOW_INPUT = [
    [L(1, 1, 10), L(1, 2, 11), R(1, 3, 100), R(2, 4, 101), L(None, 5, 12)],
    [R(1, 12, 102), L(2, 8, 13), L(3, 14, 14), R(3, 25, 103)],
    [L(4, 40, 15), R(4, 41, 104)],  # watermark 30 s on both sides: windows ending <= 30 s go
    [L(3, 15, 16), R(5, 45, 105), L(5, 44, 17)],  # a late left row
]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["left", "full"])
def test_join_on_a_watermarked_window_key(spark, ours, tmp_path, how):
    """Outer joins bounded by a join key carrying the event-time marker (``window`` of the time
    column): the state is evicted by key, unmatched rows come out when their window closes."""

    def build(df: DataFrame) -> DataFrame:
        left = df.filter("side = 'L'").withWatermark("ts", "10 seconds").select(
            "k", F.window("ts", "10 seconds").alias("w"), F.col("v").alias("lv")
        )
        right = df.filter("side = 'R'").withWatermark("ts", "10 seconds").select(
            F.col("k").alias("rk"), F.window("ts", "10 seconds").alias("rw"), F.col("v").alias("rv")
        )
        return left.join(right, (left.k == right.rk) & (left.w == right.rw), how)

    _compare(spark, ours, tmp_path, build, WINDOW_INPUT)


# ------------------------------------------------------------------------------------------
# Restart, operators after the join, several watermarks
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_restart_in_the_middle(spark, ours, tmp_path):
    """Stop after three files and start again on the same checkpoint: the join state and the
    watermark survive, and the batches after the restart equal Spark's."""
    build = _range_join("left")
    runs = {}
    for name, engine in (("spark", spark), ("ours", ours())):
        workdir = Path(tmp_path) / f"{name}-{uuid.uuid4().hex[:6]}"
        first = run_stream(engine, build, INPUT[:3], SCHEMA, "append", tmp_path, workdir=workdir)
        second = run_stream(engine, build, INPUT[3:], SCHEMA, "append", tmp_path, workdir=workdir)
        runs[name] = (first, second)
    assert_same_batches(runs["spark"][0], runs["ours"][0])
    assert_same_batches(runs["spark"][1], runs["ours"][1])


@pytest.mark.slow
def test_window_aggregation_after_a_join(spark, ours, tmp_path):
    """Join, then a window count in append mode: the aggregation evicts with the watermark the
    join passes on (the smallest of its state watermarks and its input), as in Spark 3.4+."""

    def build(df: DataFrame) -> DataFrame:
        joined = _range_join("inner")(df)
        return joined.groupBy(F.window("lts", "10 seconds")).agg(F.count("*").alias("n"), F.sum("rv").alias("s"))

    _compare(spark, ours, tmp_path, build)


@pytest.mark.slow
def test_deduplication_after_a_join(spark, ours, tmp_path):
    """Left outer join, then ``dropDuplicates`` on the key and the left time: the dedup evicts
    with the watermark the join passes on. (Only the left time is kept: with both event-time
    columns Spark's dedup fails its tasks, "More than one event time columns are available".)"""

    def build(df: DataFrame) -> DataFrame:
        joined = _range_join("left")(df)
        # columns the key decides: which of a key's joined rows comes first is each engine's own
        return joined.select("k", "lts", "lv").dropDuplicates(["k", "lts"])

    _compare(spark, ours, tmp_path, build)


@pytest.mark.slow
def test_max_watermark_policy(spark, ours, tmp_path):
    """``multipleWatermarkPolicy=max``: the global watermark follows the faster side, so more
    rows are late and the state goes sooner."""
    key = "spark.sql.streaming.multipleWatermarkPolicy"
    with session_confs(spark, {key: "max"}):
        _compare(spark, ours, tmp_path, _range_join("inner"))


# ------------------------------------------------------------------------------------------
# Progress and explain
# ------------------------------------------------------------------------------------------


def _join_progress(engine: Any, tmp_path: Path) -> tuple[dict, list[str]]:
    root = Path(tmp_path) / f"p-{uuid.uuid4().hex[:6]}"
    (root / "input").mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = INPUT[0]
    pq.write_table(
        pa.table({"side": [r[0] for r in rows], "k": pa.array([r[1] for r in rows], pa.int64()), "ts": [r[2] for r in rows], "v": pa.array([r[3] for r in rows], pa.int64())}),
        root / "input" / "part-0.parquet",
    )
    df = engine.readStream.schema(SCHEMA).parquet(str(root / "input"))
    query = _range_join("left")(df).writeStream.format("noop").option("checkpointLocation", str(root / "c")).start()
    try:
        query.processAllAvailable()
        progress = query.lastProgress
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            query.explain()
        return dict(progress["stateOperators"][0]), out.getvalue().splitlines()
    finally:
        query.stop()


def test_progress_and_explain_show_spark_s_operator(spark, ours, tmp_path):
    """``stateOperators`` has Spark's operator name, counts, partitions and store instances (four
    per partition); ``explain()`` shows ``StreamingSymmetricHashJoin`` with Spark's keys, join
    type, condition split and state cleanup predicates over two stateful exchanges."""
    import re

    expected, expected_plan = _join_progress(spark, tmp_path)
    actual, actual_plan = _join_progress(ours(), tmp_path)
    for k in ("operatorName", "numRowsTotal", "numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark", "numShufflePartitions", "numStateStoreInstances"):
        assert actual[k] == expected[k], (k, expected, actual)
    for k in ("loadedMapCacheHitCount", "loadedMapCacheMissCount", "stateOnCurrentVersionSizeBytes"):
        assert k in actual["customMetrics"], actual

    def shown(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            line = re.sub(r"#\d+L?|, \[plan_id=\d+\]|runId = [0-9a-f-]+|checkpoint = \S+", "", line)
            line = re.sub(r"^[\s:+-]*(\*\(\d+\) )?", "", line)
            if line.startswith(("StreamingSymmetricHashJoin", "Exchange")):
                out.append(line)
        return out

    assert shown(actual_plan) == shown(expected_plan), "\n".join(["spark:", *expected_plan, "ours:", *actual_plan])


def test_query_explain_of_a_window_aggregation_after_the_join(spark, ours, tmp_path):
    """``StreamingQuery.explain()`` of an inner join followed by a window aggregation (append):
    the whole physical plan, ids and run-specific values removed, equals Spark's below the
    ``WriteToDataSourceV2`` root (which statestream does not show, see README)."""
    import contextlib
    import io
    import re

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(tmp_path) / "explain-agg"
    (root / "input").mkdir(parents=True)
    rows = SHORT_INPUT[0]
    pq.write_table(
        pa.table({"side": [r[0] for r in rows], "k": pa.array([r[1] for r in rows], pa.int64()), "ts": [r[2] for r in rows], "v": pa.array([r[3] for r in rows], pa.int64())}),
        root / "input" / "part-0.parquet",
    )

    def plan(engine: Any, name: str) -> list[str]:
        df = engine.readStream.schema(SCHEMA).parquet(str(root / "input"))
        joined = _range_join("inner")(df)
        q = (
            joined.groupBy(F.window("lts", "10 seconds")).count().writeStream.format("noop").outputMode("append")
            .option("checkpointLocation", str(root / f"c-{name}")).start()
        )
        try:
            q.processAllAvailable()
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                q.explain()
        finally:
            q.stop()
        lines = [re.sub(r"#\d+L?|, \[plan_id=\d+\]|runId = [0-9a-f-]+|checkpoint = \S+|[0-9a-f]{8}-[0-9a-f-]{27}", "", line) for line in out.getvalue().splitlines()]
        lines = [line for line in lines if line.strip() and not line.startswith(("== ", "WriteToDataSourceV2"))]
        indent = min(len(line) - len(line.lstrip(" +-:")) for line in lines)
        return [line[indent:] if not line.startswith("WriteToDataSourceV2") else line for line in lines]

    theirs, ours_ = plan(spark, "spark"), plan(ours(), "ours")
    assert ours_ == theirs, "\n".join(["statestream:", *ours_, "Spark:", *theirs])


def test_explain_before_start(spark, ours, tmp_path):
    """``df.explain()`` of a streaming join before it starts: the same join node (state info with
    an unknown checkpoint, both watermarks ``Long.MinValue`` and Spark's state cleanup
    predicates computed, with its long overflow, from them) and exchanges."""
    import contextlib
    import io
    import re

    root = Path(tmp_path) / "in"
    root.mkdir()

    def lines(engine: Any) -> list[str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            _range_join("left")(engine.readStream.schema(SCHEMA).parquet(str(root))).explain()
        shown = []
        for line in out.getvalue().splitlines():
            line = re.sub(r"#\d+L?|, \[plan_id=\d+\]|runId = [0-9a-f-]+", "", line)
            line = re.sub(r"^[\s:+-]*(\*\(\d+\) )?", "", line)
            if line.startswith(("StreamingSymmetricHashJoin", "Exchange")):
                shown.append(line)
        return shown

    expected = lines(spark)
    assert len(expected) == 3 and "state cleanup [ left value predicate" in expected[0]
    assert lines(ours()) == expected


# ------------------------------------------------------------------------------------------
# Refused joins
# ------------------------------------------------------------------------------------------


def test_join_without_an_equality_fails_the_first_batch(spark, ours, tmp_path):
    """A cross join of two streams starts on Spark's engine and fails when its first batch is
    planned ("Stream-stream join without equality predicate is not supported.")."""

    def build(df: DataFrame) -> DataFrame:
        left, right = _sides(df)
        return left.crossJoin(right)

    def failure(engine: Any) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        root = Path(tmp_path) / f"x-{uuid.uuid4().hex[:6]}"
        (root / "input").mkdir(parents=True)
        rows = INPUT[0]
        pq.write_table(
            pa.table({"side": [r[0] for r in rows], "k": pa.array([r[1] for r in rows], pa.int64()), "ts": [r[2] for r in rows], "v": pa.array([r[3] for r in rows], pa.int64())}),
            root / "input" / "part-0.parquet",
        )
        query = build(engine.readStream.schema(SCHEMA).parquet(str(root / "input"))).writeStream.format("noop").option(
            "checkpointLocation", str(root / "c")
        ).start()
        try:
            query.awaitTermination(60)
        except Exception as exc:  # noqa: BLE001 - the query's failure is what is compared
            # the cause's text; Spark's ends with the plan (cut by error_text), and the
            # STREAM_FAILED suffix follows the plan
            return error_text(exc).split("terminated with exception: ", 1)[-1].removesuffix(" SQLSTATE: XXKST")
        finally:
            query.stop()
        return "(no failure)"

    assert start_error(spark, build, SCHEMA, "append", tmp_path) is None
    assert start_error(ours(), build, SCHEMA, "append", tmp_path) is None
    expected = failure(spark)
    assert expected.startswith("Stream-stream join without equality predicate is not supported.")
    assert failure(ours()) == expected


REFUSED: dict[str, tuple[str, Callable[[DataFrame], DataFrame]]] = {
    "update_mode": ("update", _range_join("inner")),
    "complete_mode": ("complete", lambda df: _range_join("inner")(df).groupBy("k").count()),
    "left_anti": ("append", _range_join("left_anti")),
    "left_outer_range_without_right_watermark": (
        "append",
        lambda df: (lambda lr: lr[0].join(lr[1].select("rk", "rts", "rv"), (lr[0].k == lr[1].rk) & (lr[1].rts >= lr[0].lts), "left"))(
            (_sides(df)[0], df.filter("side = 'R'").select(F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")))
        ),
    ),
    "right_outer_bounding_only_the_left_side": (
        "append",
        lambda df: (lambda lr: lr[0].join(lr[1], (lr[0].k == lr[1].rk) & (lr[1].rts <= lr[0].lts + F.expr("INTERVAL 5 SECONDS")), "right"))(_sides(df)),
    ),
    "full_outer_without_a_range": ("append", lambda df: (lambda lr: lr[0].join(lr[1], lr[0].k == lr[1].rk, "full"))(_sides(df))),
    "semi_with_an_interval_in_months": (
        "append",
        lambda df: (lambda lr: lr[0].join(lr[1], (lr[0].k == lr[1].rk) & (lr[1].rts <= lr[0].lts + F.expr("INTERVAL 1 MONTH")) & (lr[1].rts >= lr[0].lts), "semi"))(_sides(df)),
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_join_error_matches_spark(spark, ours, tmp_path, name):
    """Error class and text from ``start()``, as on Spark's engine."""
    mode, build = REFUSED[name]
    expected = start_error(spark, build, SCHEMA, mode, tmp_path)
    assert expected is not None, f"Spark's verdict changed for {name}"
    assert start_error(ours(), build, SCHEMA, mode, tmp_path) == expected


ACCEPTED: dict[str, Callable[[DataFrame], DataFrame]] = {
    # the left side is bounded from below by the right watermark: enough for a left outer join
    "left_outer_lower_bound_only": lambda df: (lambda lr: lr[0].join(lr[1], (lr[0].k == lr[1].rk) & (lr[1].rts <= lr[0].lts + F.expr("INTERVAL 5 SECONDS")), "left"))(_sides(df)),
    "semi_between": lambda df: (lambda lr: lr[0].join(lr[1], (lr[0].k == lr[1].rk) & F.expr("rts BETWEEN lts AND lts + INTERVAL 5 SECONDS"), "semi"))(_sides(df)),
    "full_outer_one_side_bounded": lambda df: (lambda lr: lr[0].join(lr[1], (lr[0].k == lr[1].rk) & (lr[0].lts >= lr[1].rts - F.expr("INTERVAL 2 SECONDS")), "full"))(_sides(df)),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_bounded_outer_and_semi_joins_start(spark, ours, tmp_path, name):
    """Conditions Spark's solver finds a bound in: both engines start the query."""
    build = ACCEPTED[name]
    assert start_error(spark, build, SCHEMA, "append", tmp_path) is None
    assert start_error(ours(), build, SCHEMA, "append", tmp_path) is None


# ------------------------------------------------------------------------------------------
# Beyond Spark: outer rows emitted on arrival (opt-in)
# ------------------------------------------------------------------------------------------


def test_outer_early_emit_pads_on_arrival_and_still_emits_later_matches(spark, ours, tmp_path):
    """With ``spark.statestream.streamJoin.outerEarlyEmit`` a left outer join emits a left row
    that finds no partner in its arrival batch at once, padded with nulls, and its matches when
    they come; the watermark's eviction then emits nothing. Derived from Spark's run of the same
    input: the pairs are Spark's, batch for batch; the padded rows are the left rows Spark emits
    (matched or padded) that had no partner in their arrival batch, in that batch."""
    from statestream.plan.stream_joins import OUTER_EARLY_EMIT_CONF

    build = _range_join("left")
    expected = run_stream(spark, build, INPUT, SCHEMA, "append", tmp_path)
    with session_confs(spark, {OUTER_EARLY_EMIT_CONF: "true"}):
        actual = run_stream(ours(), build, INPUT, SCHEMA, "append", tmp_path)
    data_batches = [b.batch_id for b in expected.batches if b.num_input_rows]
    arrival = {}  # left row's lv -> the batch its file ran in
    for i, rows in enumerate(INPUT):
        for r in rows:
            if r[0] == "L":
                arrival[r[3]] = data_batches[i]
    left_cols = ("k", "lts", "lv")

    def key(r: dict) -> tuple:
        return tuple(str(r.get(c)) for c in ("k", "lts", "lv", "rk", "rts", "rv"))

    emitted_left = {r["lv"]: {c: r[c] for c in left_cols} for b in expected.batches for r in b.rows}
    matched_on_arrival = {r["lv"] for b in expected.batches for r in b.rows if r["rk"] is not None and arrival[r["lv"]] == b.batch_id}
    padded_somewhere = False
    for b in expected.batches:
        pairs = sorted(key(r) for r in b.rows if r["rk"] is not None)
        padded = sorted(
            key({**row, "rk": None, "rts": None, "rv": None})
            for lv, row in emitted_left.items()
            if arrival[lv] == b.batch_id and lv not in matched_on_arrival
        )
        padded_somewhere = padded_somewhere or bool(padded)
        got = sorted(key(r) for r in actual.rows(b.batch_id))
        assert got == sorted(pairs + padded), f"batch {b.batch_id}:\n{expected.describe()}\n{actual.describe()}"
    assert padded_somewhere
    # a row padded on arrival and matched later: both come out
    later = [lv for lv in emitted_left if lv not in matched_on_arrival and any(r["lv"] == lv and r["rk"] is not None for b in expected.batches for r in b.rows)]
    assert later, "the input no longer has a left row matched after its arrival batch"
