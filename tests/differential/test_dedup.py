"""Differential tests of streaming deduplication: Spark's engine versus statestream, batch by batch.

``dropDuplicates`` (StreamingDeduplicateExec, operator ``dedupe``) with and without a watermark,
with and without the event time among the keys, and ``dropDuplicatesWithinWatermark``
(``dedupeWithinWatermark``); reference §5 and scenarios S19-S22. Besides the harness's checks
(rows, watermark, eventTime, numRowsTotal/Updated/Removed/DroppedByWatermark) every batch must
report the same ``numDroppedDuplicateRows`` and the same number of state store instances.

Which row of a key survives inside one batch: Spark keeps the first row its partition iterator
meets. Each input file is one scan task and Spark's hash exchange keeps each map task's row order,
so for these inputs that row is well defined, and ``test_first_row_of_a_key_wins`` compares the
surviving rows exactly. The other inputs make duplicates identical rows, so that their comparison
does not depend on that order.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from statestream.state import schema as S
from tests.differential.harness import (
    StreamRun,
    assert_batch_rows,
    assert_equivalent,
    assert_same_batches,
    run_stream,
    start_error,
)

SCHEMA = "value LONG"
KV = "k STRING, value LONG"
E: list[dict[str, Any]] = []


def vals(*values: int | None) -> list[tuple[int | None]]:
    return [(v,) for v in values]


def kv(*pairs: tuple[str | None, int | None]) -> list[tuple[str | None, int | None]]:
    return list(pairs)


def ev(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value"))


def w(df: DataFrame, delay: str = "10 seconds") -> DataFrame:
    return ev(df).withWatermark("eventTime", delay)


def dedup_metrics(run: StreamRun) -> list[list[tuple[Any, ...]]]:
    """Per batch, per dedup operator: (name, numDroppedDuplicateRows, shuffle partitions, instances)."""
    out = []
    for b in run.batches:
        ops = (b.progress or {}).get("stateOperators") or []
        out.append(
            [
                (
                    o["operatorName"],
                    (o.get("customMetrics") or {}).get("numDroppedDuplicateRows"),
                    o.get("numShufflePartitions"),
                    o.get("numStateStoreInstances"),
                )
                for o in ops
                if str(o.get("operatorName", "")).startswith("dedupe")
            ]
        )
    return out


def check(spark, ours, build, batches, schema, mode, tmp_path, **kwargs) -> tuple[StreamRun, StreamRun]:
    """``assert_equivalent`` plus the dedup operators' own metric."""
    exp, act = assert_equivalent(spark, ours, build, batches, schema, mode, tmp_path, **kwargs)
    assert dedup_metrics(act) == dedup_metrics(exp), f"\n{dedup_metrics(exp)}\n{dedup_metrics(act)}"
    return exp, act


def dropped(run: StreamRun) -> list[int | None]:
    return [m[0][1] if m else None for m in dedup_metrics(run)]


def state(run: StreamRun, key: str) -> list[Any]:
    return [b.state[0][key] if b.state else None for b in run.batches]


def secs_of(df: DataFrame, col: str = "eventTime") -> DataFrame:
    return df.select(F.col(col).cast("long").alias("t"))


# ------------------------------------------------------------------------------------------
# §10 scenarios S19-S22
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "update"])
def test_s19_dedup_without_watermark(spark, ours, tmp_path, mode):
    v = lambda x: {"value": x}  # noqa: E731
    exp, _ = check(
        spark, ours, lambda df: df.dropDuplicates(["value"]), [vals(1, 1, 2), vals(2, 3), vals(1)], SCHEMA, mode,
        tmp_path, reference=[[v(1), v(2)], [v(3)], E],
    )
    assert state(exp, "numRowsTotal") == [2, 3, 3]
    assert dropped(exp) == [1, 1, 1]
    assert state(exp, "numRowsRemoved") == [0, 0, 0]


def test_s20_dedup_with_event_time_key(spark, ours, tmp_path):
    t = lambda x: {"t": x}  # noqa: E731
    exp, _ = check(
        spark, ours, lambda df: secs_of(w(df).dropDuplicates()),
        [vals(*[v for v in range(10, 16) for _ in range(5)]), vals(25), vals(10), vals(45)], SCHEMA, "append",
        tmp_path,
        reference=[[t(v) for v in range(10, 16)], E, [t(25)], E, E, [t(45)], E],
    )
    assert state(exp, "numRowsTotal") == [6, 6, 7, 1, 1, 2, 1]
    assert state(exp, "numRowsRemoved") == [0, 0, 0, 6, 0, 0, 1]
    assert state(exp, "numRowsDroppedByWatermark") == [0, 0, 0, 0, 1, 0, 0]
    assert dropped(exp)[0] == 24


def test_s21_dedup_key_without_event_time(spark, ours, tmp_path):
    """The event time is not a key but is in the input: late rows are still dropped."""
    exp, _ = check(
        spark, ours, lambda df: secs_of(w(df).dropDuplicates(["k"]).select("k", "value", "eventTime")),
        [kv(("a", 30)), kv(("b", 5)), kv(("a", 40))], KV, "append", tmp_path,
        reference=[[{"t": 30}], E, E, E, E],
    )
    assert state(exp, "numRowsDroppedByWatermark") == [0, 0, 1, 0, 0]
    assert state(exp, "numRowsTotal") == [1, 1, 1, 1, 1]


@pytest.mark.parametrize("after", ["select", "filter_select"])
def test_unused_event_time_is_pruned_before_the_dedup(spark, ours, tmp_path, after):
    """Spark's column pruning removes a non-key event-time column nothing above the dedup uses,
    and the late-row filter goes with it: ``b@5`` is accepted although the watermark is 20 s."""

    def build(df: DataFrame) -> DataFrame:
        d = w(df).dropDuplicates(["k"])
        return d.select("k", "value") if after == "select" else d.filter("value > 0").select("k")

    exp, _ = check(spark, ours, build, [kv(("a", 30)), kv(("b", 5)), kv(("a", 40))], KV, "append", tmp_path)
    assert state(exp, "numRowsDroppedByWatermark") == [0, 0, 0, 0, 0]
    assert [len(b.rows) for b in exp.batches] == [1, 0, 1, 0, 0]


def test_within_watermark_keeps_its_event_time_when_unused_above(spark, ours, tmp_path):
    exp, _ = check(
        spark, ours, lambda df: w(df).dropDuplicatesWithinWatermark(["k"]).select("k"),
        [kv(("a", 30)), kv(("b", 5)), kv(("a", 40))], KV, "append", tmp_path,
        reference=[[{"k": "a"}], E, E, E, E],
    )
    assert state(exp, "numRowsDroppedByWatermark") == [0, 0, 1, 0, 0]


def test_s22_drop_duplicates_within_watermark(spark, ours, tmp_path):
    r = lambda k, x: {"k": k, "value": x}  # noqa: E731
    exp, _ = check(
        spark, ours, lambda df: w(df).dropDuplicatesWithinWatermark(["k"]).select("k", "value"),
        [kv(("a", 1)), kv(("b", 20)), kv(("a", 12)), kv(("c", 40)), kv(("a", 35))], KV, "append", tmp_path,
        reference=[[r("a", 1)], [r("b", 20)], E, E, [r("c", 40)], E, [r("a", 35)]],
    )
    assert exp.batches[5].state[0]["operatorName"] == "dedupeWithinWatermark"
    assert state(exp, "numRowsRemoved")[5] == 2


# ------------------------------------------------------------------------------------------
# Duplicates inside a batch, across batches, after expiry; keys of every shape
# ------------------------------------------------------------------------------------------


def test_first_row_of_a_key_wins(spark, ours, tmp_path):
    """Duplicates that differ outside the key: the row Spark's iterator meets first survives."""
    batches = [
        [("a", 1, "first"), ("b", 2, "x"), ("a", 3, "second"), ("c", 4, "y"), ("b", 5, "z"), ("a", 6, "third")],
        [("a", 7, "again"), ("d", 8, "new"), ("d", 9, "dup")],
    ]
    check(spark, ours, lambda df: df.dropDuplicates(["k"]), batches, "k STRING, value LONG, p STRING", "append", tmp_path)


def _events(seed: int, files: int, per_file: int, dup_rate: float, late_rate: float) -> list[list[tuple]]:
    """(id, ts, payload) events; event time advances 10 s per file; some rows repeat an earlier
    event exactly (from this file or an earlier one), some are late."""
    import datetime as dt

    rng = random.Random(seed)
    t0 = dt.datetime(2024, 1, 1)
    seen: list[tuple] = []
    out = []
    next_id = 0
    for f in range(files):
        rows = []
        for _ in range(per_file):
            if seen and rng.random() < dup_rate:
                rows.append(rng.choice(seen[-3 * per_file :]))
                continue
            offset = rng.uniform(0, 10) - (rng.uniform(10, 40) if rng.random() < late_rate else 0)
            row = (next_id, t0 + dt.timedelta(seconds=round(10 * f + offset, 3)), f"p{next_id % 7}")
            next_id += 1
            rows.append(row)
            seen.append(row)
        out.append(rows)
    return out


@pytest.mark.parametrize("mode", ["append", "update"])
def test_id_and_event_time_with_watermark(spark, ours, tmp_path, mode):
    """The programming guide's query: ``withWatermark`` then ``dropDuplicates([id, eventTime])``
    over random events with 10 % duplicates, some of them late or already evicted."""
    batches = _events(7, 4, 400, 0.1, 0.05)
    exp, _ = check(
        spark, ours, lambda df: df.withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"]), batches,
        "id LONG, ts TIMESTAMP, payload STRING", mode, tmp_path,
    )
    assert sum(d or 0 for d in dropped(exp)) > 0
    assert sum(state(exp, "numRowsRemoved")) > 0 and sum(state(exp, "numRowsDroppedByWatermark")) > 0


def test_within_watermark_all_columns(spark, ours, tmp_path):
    """No subset: every column is a key, the event time included; expiry still decides eviction."""
    check(
        spark, ours, lambda df: w(df, "5 seconds").dropDuplicatesWithinWatermark(),
        [kv(("a", 1), ("a", 1), ("a", 2)), kv(("a", 1), ("b", 12)), kv(("a", 2), ("c", 30)), kv(("a", 1))], KV,
        "append", tmp_path,
    )


def test_id_only_within_watermark_random(spark, ours, tmp_path):
    batches = _events(11, 4, 300, 0.15, 0.05)
    exp, _ = check(
        spark, ours, lambda df: df.withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["id"]), batches,
        "id LONG, ts TIMESTAMP, payload STRING", "append", tmp_path,
    )
    assert sum(state(exp, "numRowsRemoved")) > 0


def test_null_keys_and_null_event_time(spark, ours, tmp_path):
    batches = [kv((None, 10), (None, 10), ("a", None), ("a", None), ("b", 12)), kv((None, 10), ("a", None), (None, 30))]
    check(spark, ours, lambda df: w(df).dropDuplicates(["k", "eventTime"]).select("k", "value"), batches, KV, "append", tmp_path)


def test_negative_zero_and_nan_are_separate_binary_keys(spark, ours, tmp_path):
    """Spark compares dedup keys as binary rows: 0.0 and -0.0 are two keys (not normalised as
    grouping keys are), NaN is one."""
    r = lambda d, v: {"d": d, "v": v}  # noqa: E731
    check(
        spark, ours, lambda df: df.dropDuplicates(["d"]).select(F.col("d").cast("string").alias("d"), "v"),
        [[(0.0, 1), (-0.0, 2), (float("nan"), 3)], [(-0.0, 4), (0.0, 5), (float("nan"), 6), (1.5, 7)]],
        "d DOUBLE, v LONG", "append", tmp_path,
        reference=[[r("0.0", 1), r("-0.0", 2), r("NaN", 3)], [r("1.5", 7)]],
    )


def test_window_struct_key_evicts_by_window_end(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return (
            w(df, "5 seconds")
            .select(F.window("eventTime", "10 seconds").alias("win"), "value")
            .dropDuplicates(["win"])
            .select(F.col("win.start").cast("long").alias("start"), "value")
        )

    exp, _ = check(spark, ours, build, [vals(1, 3, 12), vals(14, 25), vals(8, 31), vals(50)], SCHEMA, "append", tmp_path)
    assert sum(state(exp, "numRowsRemoved")) > 0


def test_distinct_and_case_insensitive_subset(spark, ours, tmp_path):
    batches = [kv(("a", 1), ("a", 1), ("A", 1), ("b", 2)), kv(("b", 2), ("b", 3))]
    check(spark, ours, lambda df: df.distinct(), batches, KV, "append", tmp_path)
    check(spark, ours, lambda df: df.dropDuplicates(["K"]), batches, KV, "update", tmp_path)


# ------------------------------------------------------------------------------------------
# Together with an aggregation
# ------------------------------------------------------------------------------------------


def test_dedup_then_windowed_count(spark, ours, tmp_path):
    """Two state operators: the aggregation (closest to the sink) is operator 0, dedupe 1."""

    def build(df: DataFrame) -> DataFrame:
        return (
            w(df)
            .dropDuplicates(["k", "eventTime"])
            .groupBy(F.window("eventTime", "5 seconds"))
            .count()
            .select(F.col("window.start").cast("long").alias("start"), "count")
        )

    exp, _ = check(
        spark, ours, build, [kv(("a", 10), ("a", 10), ("b", 11)), kv(("a", 11), ("b", 11), ("c", 26)), kv(("d", 40))],
        KV, "append", tmp_path,
    )
    assert [s["operatorName"] for s in exp.batches[0].state] == ["stateStoreSave", "dedupe"]


def test_count_then_dedup_update(spark, ours, tmp_path):
    """An update-mode aggregation followed by a dedup without event-time key (allowed)."""
    check(
        spark, ours, lambda df: df.groupBy("k").count().dropDuplicates(["count"]).select("count"),
        [kv(("a", 1), ("b", 2)), kv(("a", 3), ("c", 4)), kv(("c", 5), ("d", 6), ("b", 7))], KV, "update", tmp_path,
    )


# ------------------------------------------------------------------------------------------
# Planning, analysis, state files
# ------------------------------------------------------------------------------------------

VERDICTS: dict[str, tuple[str, Callable[[DataFrame], DataFrame], bool]] = {
    "dedup_complete": ("complete", lambda df: df.dropDuplicates(), True),
    "dedup_update": ("update", lambda df: df.dropDuplicates(["value"]), False),
    "within_watermark_update": ("update", lambda df: w(df).dropDuplicatesWithinWatermark(["value"]), False),
    "within_watermark_after_update_agg": (
        "update",
        lambda df: w(df).groupBy("eventTime").count().dropDuplicatesWithinWatermark(["count"]),
        True,
    ),
    "event_time_dedup_named_in_other_case_after_update_agg": (
        "update",
        lambda df: w(df).groupBy("eventTime").count().dropDuplicates(["EVENTTIME"]),
        True,
    ),
    "event_time_dedup_after_append_agg": (
        "append",
        lambda df: w(df).groupBy(F.window("eventTime", "5 seconds").alias("win")).count().dropDuplicates(["win"]),
        False,
    ),
}


@pytest.mark.parametrize("name", list(VERDICTS))
def test_start_verdicts(spark, ours, tmp_path, name):
    mode, build, rejected = VERDICTS[name]
    expected = start_error(spark, build, SCHEMA, mode, tmp_path)
    assert (expected is not None) == rejected, f"Spark's verdict changed for {name}: {expected}"
    assert start_error(ours(), build, SCHEMA, mode, tmp_path) == expected


def test_empty_subset_fails_the_first_batch_like_spark(spark, ours, tmp_path):
    """``dropDuplicates([])`` has no key at all: Spark's planner refuses it in the first batch."""
    messages = []
    for engine in (spark, ours()):
        with pytest.raises(Exception) as info:  # noqa: PT011 - StreamingQueryException on both engines
            run_stream(engine, lambda df: df.dropDuplicates([]), [vals(1)], SCHEMA, "append", tmp_path)
        assert "[STREAM_FAILED]" in str(info.value)
        messages.append(_failure_text(info.value))
    needle = "requirement failed: The expressions for hash of a StatefulOpClusteredDistribution should not be Nil."
    assert needle in messages[0]
    assert messages[1] == messages[0]


def two_event_times(df: DataFrame) -> DataFrame:
    """Two event-time columns of one stream, each with its own ``withWatermark``."""
    return (
        df.withColumn("t1", F.timestamp_seconds("value"))
        .withColumn("t2", F.timestamp_seconds(F.col("value") + 100))
        .withWatermark("t1", "10 seconds")
        .withWatermark("t2", "20 seconds")
    )


TWO_WATERMARKS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "dedup_on_both_event_times": lambda df: two_event_times(df).dropDuplicates(["t1", "t2"]),
    "within_watermark": lambda df: two_event_times(df).dropDuplicatesWithinWatermark(["value"]),
    "stateless": lambda df: two_event_times(df).select("value", "t2"),
}


@pytest.mark.parametrize("name", list(TWO_WATERMARKS))
def test_second_watermark_fails_once_the_watermark_moves_like_spark(spark, ours, tmp_path, name):
    """Spark accepts two ``withWatermark`` on one stream at start (the second one takes the
    event-time marker off the first column), runs the batches while the global watermark is 0, and
    fails the query with ``Redefining watermark is disallowed`` when it first has another
    watermark to propagate: before the next batch is planned, with no new offsets written."""
    outcomes = []
    for engine in (spark, ours()):
        workdir = tmp_path / f"{name}-{uuid.uuid4().hex[:8]}"
        # the min-policy watermark stays 0 after the first batch (t1 - 10 s < 0), is 20 s after the second
        with pytest.raises(Exception) as info:  # noqa: PT011 - StreamingQueryException on both engines
            run_stream(engine, TWO_WATERMARKS[name], [vals(1, 1, 2), vals(30), vals(1)], SCHEMA, "append", tmp_path, workdir=workdir)
        assert "[STREAM_FAILED]" in str(info.value)
        logs = {d: sorted(p.name for p in (workdir / "checkpoint" / d).iterdir() if p.name.isdigit()) for d in ("offsets", "commits")}
        outcomes.append((_failure_text(info.value), logs))
    assert outcomes[0][0].startswith("Redefining watermark is disallowed.")
    assert outcomes[0][1] == {"offsets": ["0", "1"], "commits": ["0", "1"]}
    assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("within", [False, True])
def test_state_schema_and_operator_metadata_match_spark(spark, ours, tmp_path, within):
    def build(df: DataFrame) -> DataFrame:
        d = w(df)
        return d.dropDuplicatesWithinWatermark(["K"]) if within else d.dropDuplicates(["k", "eventTime"])

    runs = [run_stream(e, build, [kv(("a", 1))], KV, "append", tmp_path) for e in (spark, ours())]
    files = []
    for r in runs:
        root = str(Path(r.checkpoint) / "state")
        files.append((S.read_state_schema(root, 0), S.read_operator_metadata(root, 0)))
    assert files[1] == files[0]
    assert files[0][1].operator_name == ("dedupeWithinWatermark" if within else "dedupe")


# ------------------------------------------------------------------------------------------
# Restart: stop, then start again on the same checkpoint
# ------------------------------------------------------------------------------------------


def _starts(engine: Any, build, schema: str, mode: str, tmp_path: Path, plan) -> list[StreamRun]:
    workdir = tmp_path / f"restart-{uuid.uuid4().hex[:8]}"
    runs = []
    for files, edit in plan:
        if edit is not None:
            edit(workdir / "checkpoint")
        runs.append(run_stream(engine, build, files, schema, mode, tmp_path, workdir=workdir))
    return runs


def _delete_commit(n: int):
    def edit(checkpoint: Path) -> None:
        for name in (str(n), f".{n}.crc"):
            p = checkpoint / "commits" / name
            if p.exists():
                p.unlink()

    return edit


@pytest.mark.parametrize("within", [False, True])
def test_restart_keeps_dedup_state(spark, ours, tmp_path, within):
    """Duplicates of rows seen before a graceful stop are still dropped after the restart, and
    the restarted run's outputs equal an uninterrupted run's."""

    def build(df: DataFrame) -> DataFrame:
        d = w(df)
        d = d.dropDuplicatesWithinWatermark(["k"]) if within else d.dropDuplicates(["k", "eventTime"])
        return d.select("k", "value")

    first = [kv(("a", 10), ("a", 10), ("b", 11)), kv(("c", 30))]
    second = [kv(("a", 10), ("b", 11), ("c", 30), ("d", 31)), kv(("a", 45), ("e", 60))]
    plan = [(first, None), (second, None)]
    expected = _starts(spark, build, KV, "append", tmp_path, plan)
    actual = _starts(ours(), build, KV, "append", tmp_path, plan)
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
        assert dedup_metrics(a) == dedup_metrics(e)
    # the same outputs as one uninterrupted run (batch ids and rows)
    whole = run_stream(spark, build, first + second, KV, "append", tmp_path)
    restarted = [b for r in expected for b in r.batches]
    assert [b.batch_id for b in restarted] == [b.batch_id for b in whole.batches]
    assert_batch_rows(whole, [b.rows for b in restarted])


def test_restart_reruns_uncommitted_dedup_batch(spark, ours, tmp_path):
    """The last batch re-runs from its recorded offsets with state version N: its rows are not
    treated as duplicates of themselves."""

    def build(df: DataFrame) -> DataFrame:
        return w(df).dropDuplicates(["k", "eventTime"]).select("k", "value")

    plan = [
        ([kv(("a", 10), ("b", 11)), kv(("a", 10), ("c", 11))], None),  # b0, b1 ND (wm 1), b2
        ([], _delete_commit(2)),
        ([kv(("c", 11), ("d", 40))], None),
    ]
    expected = _starts(spark, build, KV, "append", tmp_path, plan)
    assert [b.batch_id for b in expected[0].batches] == [0, 1, 2]
    assert expected[1].batches[0].batch_id == 2 and expected[1].batches[0].rows == [{"k": "c", "value": 11}]
    actual = _starts(ours(), build, KV, "append", tmp_path, plan)
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
        assert dedup_metrics(a) == dedup_metrics(e)


RESTART_CHANGES: dict[str, tuple[Callable[[DataFrame], DataFrame], Callable[[DataFrame], DataFrame], str]] = {
    # name: (query of the first start, query of the restart, Spark's error condition)
    "key_schema_changed": (
        lambda df: df.dropDuplicates(["k"]),
        lambda df: df.dropDuplicates(["k", "value"]),
        "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    ),
    "operator_changed": (
        lambda df: w(df).dropDuplicates(["k"]),
        lambda df: w(df).dropDuplicatesWithinWatermark(["k"]),
        "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    ),
}


def _failure_text(exc: BaseException) -> str:
    """The cause's text of a ``[STREAM_FAILED]`` error (query and run ids left out)."""
    text = str(exc).split("terminated with exception: ", 1)[-1]
    for cut in ("\n=== Streaming Query ===", "\n\nJVM stacktrace:"):
        text = text.split(cut, 1)[0]
    return text.strip()


@pytest.mark.parametrize("name", list(RESTART_CHANGES))
def test_restart_with_changed_dedup_is_refused_like_spark(spark, ours, tmp_path, name):
    first, second, condition = RESTART_CHANGES[name]
    texts = []
    for engine in (spark, ours()):
        workdir = tmp_path / f"change-{uuid.uuid4().hex[:8]}"
        run_stream(engine, first, [kv(("a", 1))], KV, "append", tmp_path, workdir=workdir)
        with pytest.raises(Exception) as info:  # noqa: PT011 - StreamingQueryException on both engines
            run_stream(engine, second, [kv(("b", 2))], KV, "append", tmp_path, workdir=workdir)
        texts.append(_failure_text(info.value))
    assert condition in texts[0], texts[0]
    assert texts[1] == texts[0], f"\n  spark: {texts[0]}\n  ours:  {texts[1]}"


def test_s25_limit_after_dedup(spark, ours, tmp_path):
    """S25: the dedup below a streaming limit records every key it sees, also those the limit
    then drops (state 2, 4, 5), and its operator id is 1 (the limit is 0)."""
    exp, act = check(
        spark, ours, lambda df: df.dropDuplicates(["value"]).limit(3), [vals(1, 1, 2), vals(2, 3, 4), vals(5)],
        SCHEMA, "append", tmp_path,
    )
    assert [len(b.rows) for b in exp.batches] == [2, 1, 0]
    assert [[s["operatorName"] for s in b.state] for b in exp.batches] == [["globalLimit", "dedupe"]] * 3
    assert [b.state[1]["numRowsTotal"] for b in exp.batches] == [2, 4, 5]


def test_array_column_in_the_keys(spark, ours, tmp_path):
    """``dropDuplicates()`` over a row with an array column: Spark compares the binary rows."""
    check(
        spark, ours,
        lambda df: df.select(F.array("value", "value").alias("arr"), F.split("k", ",").alias("parts")).dropDuplicates(),
        [kv(("a", 1), ("a", 1), ("a,b", 2), (None, 2), (None, None)), kv(("a", 2), ("a,b", 2), ("b,", None), (None, None))],
        KV, "append", tmp_path,
    )
