"""Differential tests of ``groupBy(...).applyInPandasWithState``: Spark's engine versus statestream.

The same user function runs on both engines over the same file batches; every batch's rows
(sorted), output columns, watermark and the state operator's figures (``applyInPandasWithState``:
numRowsTotal/Updated/Removed/DroppedByWatermark) must agree. Processing-time timeouts are tested
on statestream's side with a replaced batch clock (``set_batch_clock``): Spark's engine reads the
wall clock, so only the deterministic part is compared with it.
"""

from __future__ import annotations

import glob
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent, assert_same_batches, run_stream, start_error, state_store_error_cause

KV = "k STRING, v LONG"
E: list[dict[str, Any]] = []


# ------------------------------------------------------------------------------------------------
# User functions (module level: pickled by reference into Spark's Python workers)
# ------------------------------------------------------------------------------------------------


def running_count(key, pdfs, state):
    n = 0
    s = 0
    for pdf in pdfs:
        n += len(pdf)
        s += int(pdf["v"].sum())
    count, total = state.get if state.exists else (0, 0)
    state.update((count + n, total + s))
    yield pd.DataFrame({"k": [key[0]], "count": [count + n], "total": [total + s]})


def count_until_three(key, pdfs, state):
    """Removes a key's state once it has seen 3 rows, emitting it then."""
    n = sum(len(p) for p in pdfs)
    count = (state.get[0] if state.exists else 0) + n
    if count >= 3:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "count": [count], "done": [True]})
    else:
        state.update((count,))
        yield pd.DataFrame({"k": [key[0]], "count": [count], "done": [False]})


GAP_MS = 10_000


def sessionise(key, pdfs, state):
    """A session per key closes when the watermark passes its last event + 10 s."""
    if state.hasTimedOut:
        count, first, last = state.get
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "count": [count], "first": [first], "last": [last], "closed": [True]})
        return
    count, first, last = state.get if state.exists else (0, None, None)
    for pdf in pdfs:
        secs = pdf["t"]
        count += len(pdf)
        first = int(secs.min()) if first is None else min(first, int(secs.min()))
        last = int(secs.max()) if last is None else max(last, int(secs.max()))
    state.update((count, first, last))
    state.setTimeoutTimestamp(max(last * 1000 + GAP_MS, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"k": [key[0]], "count": [count], "first": [first], "last": [last], "closed": [False]})


def wrong_columns(key, pdfs, state):
    for _ in pdfs:
        pass
    yield pd.DataFrame({"k": [key[0]]})


class UserFunctionError(ValueError):
    pass


def raises_on_b(key, pdfs, state):
    for _ in pdfs:
        pass
    if key[0] == "b":
        raise UserFunctionError("no b allowed here")  # the user's own line
    state.update((1,))
    yield pd.DataFrame({"k": [key[0]], "count": [1]})


def idle_timeout(key, pdfs, state):
    """Processing-time timeout: a key that gets no data for 5 s of batch time is reported."""
    if state.hasTimedOut:
        (count,) = state.get
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "count": [count], "timedOut": [True], "at": [state.getCurrentProcessingTimeMs()]})
        return
    n = sum(len(p) for p in pdfs)
    count = (state.get[0] if state.exists else 0) + n
    state.update((count,))
    state.setTimeoutDuration(5000)
    yield pd.DataFrame({"k": [key[0]], "count": [count], "timedOut": [False], "at": [state.getCurrentProcessingTimeMs()]})


# Spark's Python workers cannot import this test module: ship its functions by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------------------------------------
# Queries
# ------------------------------------------------------------------------------------------------


def q_running_count(df: DataFrame) -> DataFrame:
    return df.groupBy("k").applyInPandasWithState(
        running_count, "k STRING, count LONG, total LONG", "count LONG, total LONG", "Update", "NoTimeout"
    )


def q_count_until_three(df: DataFrame) -> DataFrame:
    return df.groupBy("k").applyInPandasWithState(
        count_until_three, "k STRING, count LONG, done BOOLEAN", "count LONG", "Update", "NoTimeout"
    )


def q_sessions(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("eventTime", F.timestamp_seconds("t"))
        .withWatermark("eventTime", "10 seconds")
        .groupBy("k")
        .applyInPandasWithState(
            sessionise,
            "k STRING, count LONG, first LONG, last LONG, closed BOOLEAN",
            "count LONG, first LONG, last LONG",
            "Append",
            "EventTimeTimeout",
        )
    )


RUNNING = [[("a", 1), ("b", 2), ("a", 3)], [("a", 4)], [("c", 5), ("b", 6), ("b", 7)]]


def counts(run, key: str) -> list[Any]:
    return [b.state[0][key] if b.state else None for b in run.batches]


def test_running_count_update(spark, ours, tmp_path):
    r = lambda k, c, t: {"k": k, "count": c, "total": t}  # noqa: E731
    exp, act = assert_equivalent(
        spark, ours, q_running_count, RUNNING, KV, "update", tmp_path,
        reference=[[r("a", 2, 4), r("b", 1, 2)], [r("a", 3, 8)], [r("c", 1, 5), r("b", 3, 15)]],
    )
    shape = lambda run: [  # noqa: E731
        [(o["numShufflePartitions"], o["numStateStoreInstances"]) for o in (b.progress or {}).get("stateOperators", [])]
        for b in run.batches
    ]
    assert shape(act) == shape(exp)
    assert [b.state[0]["operatorName"] for b in exp.batches] == ["applyInPandasWithState"] * 3
    assert counts(exp, "numRowsTotal") == [2, 2, 3]
    assert counts(exp, "numRowsUpdated") == [2, 1, 2]
    from tests.differential.test_transform_with_state import assert_state_reads_equal

    assert_state_reads_equal(spark, ours, exp, act, [{}], [{}])


def test_state_removal(spark, ours, tmp_path):
    r = lambda k, c, d: {"k": k, "count": c, "done": d}  # noqa: E731
    exp, _ = assert_equivalent(
        spark, ours, q_count_until_three, RUNNING, KV, "update", tmp_path,
        reference=[[r("a", 2, False), r("b", 1, False)], [r("a", 3, True)], [r("c", 1, False), r("b", 3, True)]],
    )
    assert counts(exp, "numRowsRemoved") == [0, 1, 1]
    assert counts(exp, "numRowsTotal") == [2, 1, 1]


SESSION_BATCHES = [
    [("a", 10), ("b", 12), ("a", 15)],
    [("a", 18), ("c", 30)],
    [("b", 5), ("c", 45)],  # b@5 is late (watermark 20 s): dropped
    [("d", 70)],
]


def test_sessions_with_event_time_timeout(spark, ours, tmp_path):
    """Sessions close in the batch where the watermark passes last + 10 s, data or no-data."""
    exp, act = assert_equivalent(spark, ours, q_sessions, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path)
    closed = [sorted((r["k"], r["count"]) for r in b.rows if r["closed"]) for b in exp.batches]
    assert [("a", 3), ("b", 1)] in closed  # closed by a watermark move
    assert sum(counts(exp, "numRowsDroppedByWatermark")) == 1
    assert any(b.num_input_rows == 0 and b.rows for b in exp.batches)  # a no-data batch fired timeouts
    from tests.differential.test_transform_with_state import assert_state_reads_equal

    assert_state_reads_equal(spark, ours, exp, act, [{}], [{}])


def test_restart_mid_stream(spark, ours, tmp_path):
    """Stop after two files and start again on the same checkpoint: the same batches as Spark's."""
    runs = {}
    for name, engine in (("spark", spark), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{name}-work"
        first = run_stream(eng, q_sessions, SESSION_BATCHES[:2], "k STRING, t LONG", "append", tmp_path, workdir=work)
        second = run_stream(eng, q_sessions, SESSION_BATCHES[2:], "k STRING, t LONG", "append", tmp_path, workdir=work)
        runs[name] = (first, second)
    assert_same_batches(runs["spark"][0], runs["ours"][0])
    assert_same_batches(runs["spark"][1], runs["ours"][1])


# ------------------------------------------------------------------------------------------------
# Refusals from start()
# ------------------------------------------------------------------------------------------------


def _apply(mode: str, timeout: str = "NoTimeout", watermark: bool = False, aggregate: str = ""):
    def build(df: DataFrame) -> DataFrame:
        if watermark:
            df = df.withColumn("eventTime", F.timestamp_seconds("v")).withWatermark("eventTime", "10 seconds")
        if aggregate == "before":
            df = df.groupBy("k", F.window("eventTime", "10 seconds")).agg(F.count("*").alias("v")).select("k", "v")
        out = df.groupBy("k").applyInPandasWithState(running_count, "k STRING, count LONG, total LONG", "count LONG, total LONG", mode, timeout)
        if aggregate == "after":
            out = out.groupBy("k").count()
        return out

    return build


@pytest.mark.parametrize(
    ("func_mode", "query_mode", "timeout", "watermark", "aggregate", "refused"),
    [
        ("Update", "append", "NoTimeout", False, "", True),
        ("Append", "update", "NoTimeout", False, "", True),
        ("Update", "complete", "NoTimeout", False, "", True),
        ("Update", "update", "NoTimeout", True, "after", True),
        ("Append", "append", "NoTimeout", True, "before", True),
        ("Update", "update", "EventTimeTimeout", False, "", True),
        ("Append", "update", "NoTimeout", True, "after", False),  # accepted by Spark
    ],
)
def test_refused_like_spark(spark, ours, tmp_path, func_mode, query_mode, timeout, watermark, aggregate, refused):
    build = _apply(func_mode, timeout, watermark, aggregate)
    expected = start_error(spark, build, KV, query_mode, tmp_path)
    assert (expected is not None) == refused, expected
    assert start_error(ours(), build, KV, query_mode, tmp_path) == expected


# ------------------------------------------------------------------------------------------------
# Failures while running
# ------------------------------------------------------------------------------------------------


def _run_failing(engine, func, out_schema: str, tmp_path: Path) -> tuple[str, Path]:
    from tests.differential.harness import write_input_file
    from pyspark.sql.types import StructType

    root = tmp_path / f"fail-{uuid.uuid4().hex[:6]}"
    (root / "input").mkdir(parents=True)
    import time

    write_input_file(root / "input", 0, [("a", 1), ("b", 2)], StructType.fromDDL(KV), "parquet", time.time() - 60)
    df = engine.readStream.format("parquet").schema(KV).load(str(root / "input"))
    q = (
        df.groupBy("k").applyInPandasWithState(func, out_schema, "count LONG", "Update", "NoTimeout")
        .writeStream.outputMode("update").foreachBatch(lambda d, i: d.collect())
        .option("checkpointLocation", str(root / "checkpoint")).start()
    )
    try:
        q.awaitTermination(120)
    except Exception:  # noqa: BLE001 - the failure is read from exception() below
        pass
    q.stop()
    exc = q.exception()
    assert exc is not None, "the query should have failed"
    return str(exc), root / "checkpoint"


def test_wrong_columns_fails_like_spark(spark, ours, tmp_path):
    theirs, _ = _run_failing(spark, wrong_columns, "k STRING, count LONG", tmp_path)
    text, _ = _run_failing(ours(), wrong_columns, "k STRING, count LONG", tmp_path)
    needle = "[RESULT_COLUMN_SCHEMA_MISMATCH] Number of columns of the returned data doesn't match specified schema. Expected: 2 Actual: 1"
    assert needle in theirs
    assert needle in text


def test_user_error_stops_the_query_without_commit(ours, tmp_path):
    text, checkpoint = _run_failing(ours(), raises_on_b, "k STRING, count LONG", tmp_path)
    assert "UserFunctionError: no b allowed here" in text
    assert 'raise UserFunctionError("no b allowed here")  # the user\'s own line' in text
    assert "test_apply_in_pandas_with_state.py" in text
    assert "applyInPandasWithState: the function failed for key ('b',)" in text  # beyond Spark
    # the failing key's partition aborted its store (the other partition may have committed its
    # version 1, as in Spark: the batch is not in the commit log, so a restart runs it again)
    assert len(glob.glob(str(checkpoint / "state" / "0" / "*" / "1.delta"))) < 2
    assert not os.path.exists(checkpoint / "commits" / "0")


# ------------------------------------------------------------------------------------------------
# Processing-time timeout with a controlled clock (statestream only)
# ------------------------------------------------------------------------------------------------


def test_processing_time_timeout_with_a_manual_clock(ours, tmp_path):
    from statestream.runtime.microbatch import set_batch_clock

    now = [1_000_000]
    previous = set_batch_clock(lambda: now[0])

    def step(i: int) -> None:
        now[0] += 3000  # each file arrives 3 s of batch time after the previous one

    try:
        run = run_stream(
            ours(),
            lambda df: df.groupBy("k").applyInPandasWithState(
                idle_timeout, "k STRING, count LONG, timedOut BOOLEAN, at LONG", "count LONG", "Update", "ProcessingTimeTimeout"
            ),
            [[("a", 1), ("b", 1)], [("a", 2)], [("a", 3)], [("c", 1)]],
            KV,
            "update",
            tmp_path,
            before_file=step,
        )
    finally:
        set_batch_clock(previous)
    rows = [r for b in run.batches for r in b.rows]
    timed_out = [(r["k"], r["count"], r["at"]) for r in rows if r["timedOut"]]
    # b last had data at 1_003_000 (timeout 1_008_000): it fires in the first batch after that,
    # at 1_009_000; a keeps getting data every 3 s until 1_009_000 and fires at 1_015_000 never (run ends at 1_012_000)
    assert timed_out == [("b", 1, 1_009_000)]
    assert sorted((r["k"], r["count"]) for r in rows if not r["timedOut"]) == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1)]


# ------------------------------------------------------------------------------------------------
# State schema changed on restart
# ------------------------------------------------------------------------------------------------


def running_count_text(key, pdfs, state):
    n = sum(len(p) for p in pdfs)
    state.update((n, "x"))
    yield pd.DataFrame({"k": [key[0]], "count": [n], "total": [0]})


def test_changed_state_schema_on_restart_fails_like_spark(spark, ours, tmp_path):
    """The second start declares ``total`` as a string: both engines refuse the checkpoint's state
    with the same error, naming the value schemas."""

    def changed(df: DataFrame) -> DataFrame:
        return df.groupBy("k").applyInPandasWithState(
            running_count_text, "k STRING, count LONG, total LONG", "count LONG, total STRING", "Update", "NoTimeout"
        )

    texts = {}
    for name in ("spark", "ours"):
        eng = spark if name == "spark" else ours()
        work = tmp_path / f"{name}-work"
        run_stream(eng, q_running_count, RUNNING[:1], KV, "update", tmp_path, workdir=work)
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared by text below
            run_stream(eng, changed, RUNNING[1:2], KV, "update", tmp_path, workdir=work)
        texts[name] = str(info.value)
    cause = state_store_error_cause
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in texts["spark"]
    assert "StructField(total,StringType,true)" in cause(texts["spark"])
    assert cause(texts["ours"]) == cause(texts["spark"])


# ------------------------------------------------------------------------------------------------
# Several keys, null keys, the values the function sees
# ------------------------------------------------------------------------------------------------


def describe_calls(key, pdfs, state):
    """Reports the key tuple, the columns and dtypes it was given and the state it found."""
    seen = [(list(p.columns), [str(t) for t in p.dtypes], len(p)) for p in pdfs]
    before = state.getOption
    state.update(((before[0] if before else 0) + sum(n for _, _, n in seen),))
    yield pd.DataFrame({"key": [repr(tuple(None if v is None else v for v in key))], "seen": [repr(seen)], "before": [repr(before)]})


def test_two_keys_with_nulls_and_what_the_function_sees(spark, ours, tmp_path):
    batches = [
        [("a", 1, "x"), ("a", 2, None), (None, 3, "x"), (None, 4, None), ("a", 5, "x")],
        [("a", 6, None), (None, 7, None), ("b", 8, "y")],
    ]
    assert_equivalent(
        spark, ours,
        lambda df: df.groupBy("k", "g").applyInPandasWithState(describe_calls, "key STRING, seen STRING, before STRING", "n LONG", "Update", "NoTimeout"),
        batches, "k STRING, v LONG, g STRING", "update", tmp_path,
    )


def latest_time(key, pdfs, state):
    """Keeps the latest event time in the state; outputs it as a timestamp and the stored value's repr."""
    before = state.getOption
    latest = max(p["eventTime"].max() for p in pdfs)
    if before is not None and before[0] is not None:
        latest = max(latest, pd.Timestamp(before[0]))
    state.update((latest,))
    yield pd.DataFrame({"k": [key[0]], "latest": [latest], "before": [repr(before)]})


def test_timestamps_in_data_state_and_output(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours,
        lambda df: df.withColumn("eventTime", F.timestamp_seconds("v")).groupBy("k").applyInPandasWithState(
            latest_time, "k STRING, latest TIMESTAMP, before STRING", "t TIMESTAMP", "Update", "NoTimeout"
        ),
        [[("a", 10), ("a", 20), ("b", 5)], [("a", 15), ("b", 30)]], KV, "update", tmp_path,
    )


# ------------------------------------------------------------------------------------------------
# explain()
# ------------------------------------------------------------------------------------------------


def test_explain_matches_spark(spark, ours, tmp_path):
    from tests.spark.test_explain import _explain_text, _with_ids_normalised

    theirs = _with_ids_normalised(_explain_text(q_sessions(spark.readStream.schema("k STRING, t LONG").parquet(str(tmp_path)))))
    mine = _with_ids_normalised(_explain_text(q_sessions(ours().readStream.schema("k STRING, t LONG").parquet(str(tmp_path)))))
    assert mine == theirs, "\n".join(["statestream:", *mine, "Spark:", *theirs])


def test_repartition_keeps_state_and_timeouts(spark, ours, tmp_path):
    """Offline repartition (issue 16): 4 -> 7 -> 2 state partitions between batches; the batches
    (state, timeout timestamps and the no-data batch a timeout fires in) equal Spark's run."""
    from tests.differential.harness import assert_same_as_uninterrupted, run_repartitioned, run_stream

    splits = ((1, 7), (3, 2))
    expected = run_stream(spark, q_sessions, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path / "spark")
    got, results = run_repartitioned(spark, q_sessions, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path, splits=splits)
    assert_same_as_uninterrupted(expected, got, results, splits=splits)
    assert sum(results[0].rows.values()) > 0
