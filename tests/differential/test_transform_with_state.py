"""Differential tests of ``groupBy(...).transformWithStateInPandas`` and ``transformWithState``:
Spark's engine (with its RocksDB state store provider, which it requires for these operators)
versus statestream.

The same ``StatefulProcessor`` classes run unchanged on both engines over the same file batches;
every batch's rows (sorted), the watermark and the operator's state figures must agree.
Processing-time timers and TTL are compared with Spark's engine only where the wall clock cannot
change the result; their exact firing is tested on statestream's side with a replaced batch
clock (``set_batch_clock``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from tests.differential.harness import assert_equivalent, assert_same_batches, run_stream, start_error, state_store_error_cause
from tests.spark_confs import session_confs

KV = "k STRING, v LONG"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@pytest.fixture
def spark_rocksdb(spark):
    """Spark's session with the RocksDB provider that Spark's transformWithState needs (set only
    for the test: the provider is recorded in each query's offset log)."""
    # the provider writes a changelog per version, which the state reader's change feed reads
    with session_confs(spark, {PROVIDER: ROCKSDB, CHANGELOG: "true"}):
        yield spark


# ------------------------------------------------------------------------------------------------
# Processors (module level: pickled by value into Spark's Python workers, see below)
# ------------------------------------------------------------------------------------------------


class RunningCount(StatefulProcessor):
    """ValueState: a running count and total per key."""

    def init(self, handle):
        self.state = handle.getValueState("state", "count LONG, total LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = s = 0
        for pdf in rows:
            n += len(pdf)
            s += int(pdf["v"].sum())
        count, total = self.state.get() if self.state.exists() else (0, 0)
        self.state.update((count + n, total + s))
        yield pd.DataFrame({"k": [key[0]], "count": [count + n], "total": [total + s]})

    def close(self):
        pass


class RunningCountRows(StatefulProcessor):
    """The same with transformWithState's rows."""

    def init(self, handle):
        self.state = handle.getValueState("state", "count LONG, total LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = s = 0
        for r in rows:
            n += 1
            s += r.v
        count, total = self.state.get() if self.state.exists() else (0, 0)
        self.state.update((count + n, total + s))
        yield Row(k=key[0], count=count + n, total=total + s)

    def close(self):
        pass


class ListsAndMaps(StatefulProcessor):
    """ListState and MapState: every value seen (list), a count per value (map); the list is
    replaced by its last three values when it grows past five, the map entry of a value is
    removed when it reaches 3, and the whole map is cleared on a value of 0."""

    def init(self, handle):
        self.seen = handle.getListState("seen", "v LONG")
        self.counts = handle.getMapState("counts", "v LONG", "n INT")

    def handleInputRows(self, key, rows, timerValues):
        for pdf in rows:
            for v in pdf["v"].tolist():
                self.seen.appendValue((v,))
                if v == 0:
                    self.counts.clear()
                    continue
                n = (self.counts.getValue((v,)) or (0,))[0] + 1
                if n >= 3:
                    self.counts.removeKey((v,))
                else:
                    self.counts.updateValue((v,), (n,))
        seen = [x[0] for x in self.seen.get()]
        if len(seen) > 5:
            self.seen.put([(x,) for x in seen[-3:]])
        entries = sorted((k[0], v[0]) for k, v in self.counts.iterator())
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "seen": [",".join(map(str, seen))],
                "counts": [",".join(f"{a}:{b}" for a, b in entries)],
                "has_counts": [self.counts.exists()],
                "keys": [len(list(self.counts.keys()))],
                "values": [sum(v[0] for v in self.counts.values())],
                "contains_1": [self.counts.containsKey((1,))],
            }
        )

    def close(self):
        pass


class SessionTimer(StatefulProcessor):
    """Event-time timers: a key's session closes when the watermark passes its last event + 10 s;
    a new event moves the timer (deleteTimer then registerTimer)."""

    def init(self, handle):
        self.handle = handle
        self.state = handle.getValueState("session", "count LONG, last LONG")

    def handleInputRows(self, key, rows, timerValues):
        count, last = self.state.get() if self.state.exists() else (0, None)
        for pdf in rows:
            count += len(pdf)
            hi = int(pdf["t"].max())
            last = hi if last is None else max(last, hi)
        for t in self.handle.listTimers():
            self.handle.deleteTimer(t)
        self.handle.registerTimer(last * 1000 + 10_000)
        self.state.update((count, last))
        yield pd.DataFrame(
            {"k": [key[0]], "count": [count], "last": [last], "closed": [False], "wm": [timerValues.getCurrentWatermarkInMs()]}
        )

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        count, last = self.state.get()
        self.state.clear()
        yield pd.DataFrame(
            {"k": [key[0]], "count": [count], "last": [last], "closed": [True], "wm": [expiredTimerInfo.getExpiryTimeInMs()]}
        )

    def close(self):
        pass


class SessionTimerWithMore(SessionTimer):
    """SessionTimer with more variables declared (five entries with its timers): the order of
    Spark's operator properties above four entries."""

    def init(self, handle):
        super().init(handle)
        self.first = handle.getValueState("first", "t LONG")
        self.seen = handle.getListState("seen_t", "t LONG")
        self.by_t = handle.getMapState("by_t", "t LONG", "n LONG")


class WithInitialState(StatefulProcessor):
    """handleInitialState seeds the running count of a key (first batch only)."""

    def init(self, handle):
        self.state = handle.getValueState("state", "count LONG")

    def handleInitialState(self, key, initialState, timerValues):
        base = int(initialState["start"].sum()) if hasattr(initialState, "columns") else int(initialState.start)
        have = self.state.get()[0] if self.state.exists() else 0
        self.state.update((have + base,))

    def handleInputRows(self, key, rows, timerValues):
        n = sum(len(p) for p in rows) if self.use_pandas else sum(1 for _ in rows)
        count = (self.state.get()[0] if self.state.exists() else 0) + n
        self.state.update((count,))
        yield self.out(key[0], count)

    use_pandas = True

    def out(self, k, count):
        return pd.DataFrame({"k": [k], "count": [count]})

    def close(self):
        pass


class WithInitialStateRows(WithInitialState):
    use_pandas = False

    def out(self, k, count):
        return Row(k=k, count=count)


class LongTtl(StatefulProcessor):
    """TTL state in processing time, with a TTL no test run can reach: the values behave as
    without TTL, and the TTL variables show in the metrics."""

    def init(self, handle):
        day = 86_400_000
        self.last = handle.getValueState("last", "v LONG", day)
        self.all = handle.getListState("all", "v LONG", day)
        self.per = handle.getMapState("per", "v LONG", "n LONG", day)

    def handleInputRows(self, key, rows, timerValues):
        for pdf in rows:
            for v in pdf["v"].tolist():
                self.last.update((v,))
                self.all.appendValue((v,))
                self.per.updateValue((v,), ((self.per.getValue((v,)) or (0,))[0] + 1,))
        yield pd.DataFrame(
            {"k": [key[0]], "last": [self.last.get()[0]], "n": [len(list(self.all.get()))], "distinct": [len(list(self.per.keys()))]}
        )

    def close(self):
        pass


class FarTimer(StatefulProcessor):
    """A processing-time timer an hour ahead (never due in a test run) per key, listed back."""

    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        for _ in rows:
            pass
        now = timerValues.getCurrentProcessingTimeInMs()
        self.handle.registerTimer(now + 3_600_000)
        yield pd.DataFrame({"k": [key[0]], "timers": [len(list(self.handle.listTimers()))], "has_clock": [now > 0]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield pd.DataFrame({"k": [key[0]], "timers": [-1], "has_clock": [True]})

    def close(self):
        pass


class EventTimeOut(StatefulProcessor):
    """Event-time mode with the output's own event time (eventTimeColumnName): each row goes
    out with its event time, so a window aggregation can follow."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        for pdf in rows:
            for t in pdf["eventTime"].tolist():
                n += 1
                yield pd.DataFrame({"k": [key[0]], "n": [n], "outTime": [t]})
        self.count.update((n,))

    def close(self):
        pass


class DeclaresLate(StatefulProcessor):
    """Declares a state variable outside init: Spark refuses it."""

    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        self.handle.getValueState("late", "v LONG")
        yield pd.DataFrame({"k": [key[0]]})

    def close(self):
        pass


class TimerWithoutTimeMode(StatefulProcessor):
    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        self.handle.registerTimer(1000)
        yield pd.DataFrame({"k": [key[0]]})

    def close(self):
        pass


class TtlWithoutProcessingTime(StatefulProcessor):
    def init(self, handle):
        self.state = handle.getValueState("count", "c LONG", 1000)

    def handleInputRows(self, key, rows, timerValues):
        yield pd.DataFrame({"k": [key[0]]})

    def close(self):
        pass


class IdleAlert(StatefulProcessor):
    """Processing-time timers and TTL under a replaced clock: each key's timer moves to 5 s of
    batch time after its latest row; a key idle that long is reported when its timer fires. Its
    count lives in a ValueState with a 7 s TTL, reported at each firing."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n LONG", 7000)

    def handleInputRows(self, key, rows, timerValues):
        n = sum(len(p) for p in rows)
        total = (self.count.get()[0] if self.count.exists() else 0) + n
        self.count.update((total,))
        for t in self.handle.listTimers():
            self.handle.deleteTimer(t)
        now = timerValues.getCurrentProcessingTimeInMs()
        self.handle.registerTimer(now + 5000)
        yield pd.DataFrame({"k": [key[0]], "event": ["data"], "count": [total], "at": [now]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        count = self.count.get()[0] if self.count.exists() else -1
        yield pd.DataFrame({"k": [key[0]], "event": ["idle"], "count": [count], "at": [timerValues.getCurrentProcessingTimeInMs()]})

    def close(self):
        pass


# Spark's Python workers cannot import this test module: ship its classes by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------------------------------------
# Queries
# ------------------------------------------------------------------------------------------------


def q_running_count(df: DataFrame) -> DataFrame:
    return df.groupBy("k").transformWithStateInPandas(RunningCount(), "k STRING, count LONG, total LONG", "Update", "None")


def q_running_count_rows(df: DataFrame) -> DataFrame:
    return df.groupBy("k").transformWithState(RunningCountRows(), "k STRING, count LONG, total LONG", "Update", "None")


def q_lists_and_maps(df: DataFrame) -> DataFrame:
    return df.groupBy("k").transformWithStateInPandas(
        ListsAndMaps(),
        "k STRING, seen STRING, counts STRING, has_counts BOOLEAN, keys LONG, values LONG, contains_1 BOOLEAN",
        "Update",
        "None",
    )


def q_sessions(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("eventTime", F.timestamp_seconds("t"))
        .withWatermark("eventTime", "10 seconds")
        .groupBy("k")
        .transformWithStateInPandas(
            SessionTimer(), "k STRING, count LONG, last LONG, closed BOOLEAN, wm LONG", "Append", "EventTime"
        )
    )


RUNNING = [[("a", 1), ("b", 2), ("a", 3)], [("a", 4)], [("c", 5), ("b", 6), ("b", 7)]]


def state_figures(run: Any, key: str) -> list[Any]:
    return [b.state[0][key] if b.state else None for b in run.batches]


def _normalised(value: Any) -> Any:
    """A reader's row as comparable data: maps as sorted entries (neither engine orders them)."""
    if isinstance(value, Row):
        return tuple(_normalised(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((repr(_normalised(k)), _normalised(v)) for k, v in value.items()))
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return value


def assert_state_reads_equal(spark, ours, exp, act, reads: list[dict[str, Any]], change_feeds: list[dict[str, Any]] = ()) -> None:
    """Spark's ``statestore`` reader over Spark's checkpoint and ours over statestream's give the
    same schema and rows for each option set, as of every batch; then each change feed over
    every batch; and ``state-metadata`` the same rows (issue 16's readers of Python state)."""
    engine = ours()
    seen: list[str] = []

    def both(options: dict[str, Any], fmt: str = "statestore") -> None:
        theirs = spark.read.format(fmt).options(**options).load(exp.checkpoint)
        mine = engine.read.format(fmt).options(**options).load(act.checkpoint)
        assert mine.schema == theirs.schema, f"{options}:\nSpark: {theirs.schema.simpleString()}\nours:  {mine.schema.simpleString()}"
        expected = sorted(map(repr, map(_normalised, theirs.collect())))
        got = sorted(map(repr, map(_normalised, mine.collect())))
        assert got == expected, f"{options}:\nSpark: {expected}\nours:  {got}"
        seen.extend(expected)

    both({}, "state-metadata")
    assert seen, "state-metadata: no row"
    for options in reads:
        seen.clear()
        for batch in [b.batch_id for b in exp.batches]:
            both(dict(options, batchId=batch))
        assert seen, f"{options}: the state was empty at every batch: the comparison proves nothing"
    for options in change_feeds:
        seen.clear()
        both(dict(options, readChangeFeed="true", changeStartBatchId=0))
        assert seen, f"{options}: no change in the feed"


def test_value_state_running_count(spark_rocksdb, ours, tmp_path):
    r = lambda k, c, t: {"k": k, "count": c, "total": t}  # noqa: E731
    exp, act = assert_equivalent(
        spark_rocksdb, ours, q_running_count, RUNNING, KV, "update", tmp_path,
        reference=[[r("a", 2, 4), r("b", 1, 2)], [r("a", 3, 8)], [r("c", 1, 5), r("b", 3, 15)]],
    )
    assert [b.state[0]["operatorName"] for b in exp.batches] == ["transformWithStateInPandasExec"] * 3
    assert_state_reads_equal(spark_rocksdb, ours, exp, act, [{"stateVarName": "state"}], [{"stateVarName": "state"}])
    from tests.differential.test_state_readers import _failure, _same_failure

    for options in ({}, {"stateVarName": "nope"}, {"readRegisteredTimers": "true"}, {"stateVarName": "state", "storeName": "other"}):
        theirs = _failure(lambda: spark_rocksdb.read.format("statestore").options(**options).load(exp.checkpoint).collect())
        mine = _failure(lambda: ours().read.format("statestore").options(**options).load(act.checkpoint).collect())
        assert theirs[0] is not type(None), f"Spark accepted {options}"
        _same_failure(mine, theirs)


def test_row_processor_running_count(spark_rocksdb, ours, tmp_path):
    assert_equivalent(spark_rocksdb, ours, q_running_count_rows, RUNNING, KV, "update", tmp_path)


LISTS = [
    [("a", 1), ("a", 1), ("b", 2), ("a", 2)],
    [("a", 1), ("b", 2), ("b", 0)],
    [("a", 3), ("a", 4), ("b", 2), ("b", 1)],
    [("a", 5), ("c", 1)],
]


#: runs that a later test of this module reads again (tests of a module share a worker)
_SHARED_RUNS: dict[str, Any] = {}


def test_list_and_map_state(spark_rocksdb, ours, tmp_path):
    exp, act = assert_equivalent(spark_rocksdb, ours, q_lists_and_maps, LISTS, KV, "update", tmp_path)
    _SHARED_RUNS["lists_and_maps"] = (exp, act)
    reads = [
        {"stateVarName": name, "flattenCollectionTypes": flatten} for name in ("seen", "counts") for flatten in ("true", "false")
    ]
    assert_state_reads_equal(spark_rocksdb, ours, exp, act, reads)


@pytest.mark.parametrize("variable", ["seen", "counts"])
def test_list_and_map_change_feed(spark_rocksdb, ours, tmp_path, variable):
    """The change feed of a list and of a map variable against Spark's (see known_gaps)."""
    if "lists_and_maps" not in _SHARED_RUNS:
        _SHARED_RUNS["lists_and_maps"] = assert_equivalent(spark_rocksdb, ours, q_lists_and_maps, LISTS, KV, "update", tmp_path)
    exp, act = _SHARED_RUNS["lists_and_maps"]
    assert_state_reads_equal(spark_rocksdb, ours, exp, act, [], [{"stateVarName": variable}])


SESSION_BATCHES = [
    [("a", 10), ("b", 12), ("a", 15)],
    [("a", 18), ("c", 30)],
    [("b", 5), ("c", 45)],  # b@5 is late (watermark 20 s): dropped
    [("d", 70)],
]


def test_operator_properties_of_five_entries_as_spark(spark_rocksdb, ours, tmp_path):
    """state-metadata's operatorProperties text equals Spark's for four variables and the
    timers (Spark lists them in its CHAMP map's order above four entries)."""

    def build(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("eventTime", F.timestamp_seconds("t")).withWatermark("eventTime", "10 seconds").groupBy("k")
            .transformWithStateInPandas(SessionTimerWithMore(), "k STRING, count LONG, last LONG, closed BOOLEAN, wm LONG", "Append", "EventTime")
        )

    exp, act = assert_equivalent(spark_rocksdb, ours, build, SESSION_BATCHES[:1], "k STRING, t LONG", "append", tmp_path)
    assert_state_reads_equal(spark_rocksdb, ours, exp, act, [{"readRegisteredTimers": "true"}])


def test_event_time_timers(spark_rocksdb, ours, tmp_path):
    """Sessions close in the batch where the watermark passes last + 10 s, data or no-data."""
    exp, act = assert_equivalent(spark_rocksdb, ours, q_sessions, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path)
    closed = sorted((r["k"], r["count"]) for b in exp.batches for r in b.rows if r["closed"])
    assert ("a", 3) in closed
    assert any(b.num_input_rows == 0 and b.rows for b in exp.batches)  # a no-data batch fired timers
    assert_state_reads_equal(spark_rocksdb, ours, exp, act, [{"readRegisteredTimers": "true"}, {"stateVarName": "session"}])


INITIAL = [("a", 10), ("c", 100), ("c", 5), ("z", 7)]


@pytest.mark.parametrize("variant", ["pandas", "rows"])
def test_initial_state_first_batch_only(spark_rocksdb, ours, tmp_path, variant):
    """handleInitialState runs in the first batch for every key of the initial state (a key
    with no rows too), and never again, also not after a restart."""
    processor = WithInitialState if variant == "pandas" else WithInitialStateRows
    method = "transformWithStateInPandas" if variant == "pandas" else "transformWithState"

    def build(df: DataFrame) -> DataFrame:
        init = df.sparkSession.createDataFrame(INITIAL, "k STRING, start LONG").groupBy("k")
        return getattr(df.groupBy("k"), method)(processor(), "k STRING, count LONG", "Update", "None", initialState=init)

    runs = {}
    for name, engine in (("spark", spark_rocksdb), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{variant}-{name}"
        first = run_stream(eng, build, RUNNING[:2], KV, "update", tmp_path, workdir=work)
        second = run_stream(eng, build, RUNNING[2:], KV, "update", tmp_path, workdir=work)
        runs[name] = (first, second)
    assert_same_batches(runs["spark"][0], runs["ours"][0])
    assert_same_batches(runs["spark"][1], runs["ours"][1])
    first_rows = sorted((r["k"], r["count"]) for r in runs["spark"][0].batches[0].rows)
    assert first_rows == [("a", 12), ("b", 1)]  # a: 10 from the initial state + 2 rows


def _data_batches(engine: Any, build: Any, batches: list, tmp_path: Any, timeout: float = 120.0) -> tuple[list, list]:
    """Run a processing-time query file by file and return, for each batch that read a file,
    its sorted rows and its operator's custom metrics. Such a query runs a batch on every
    trigger (Spark's ``shouldRunAnotherBatch`` is always true), so ``processAllAvailable``
    never returns on Spark's engine: the run waits for each file's batch instead."""
    import time
    import uuid
    from pyspark.sql.types import StructType

    from tests.differential.harness import write_input_file

    root = tmp_path / f"pt-{uuid.uuid4().hex[:8]}"
    (root / "input").mkdir(parents=True)
    seen: dict[int, list] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        rows = [r.asDict(recursive=True) for r in df.collect()]
        if rows:
            seen[int(batch_id)] = rows

    df = build(engine.readStream.format("parquet").schema(KV).option("maxFilesPerTrigger", 1).load(str(root / "input")))
    q = df.writeStream.outputMode("update").foreachBatch(sink).option("checkpointLocation", str(root / "checkpoint")).start()
    try:
        for i, b in enumerate(batches):
            write_input_file(root / "input", i, b, StructType.fromDDL(KV), "parquet", time.time() - 3600 + i)
            deadline = time.time() + timeout
            while len(seen) < i + 1:
                assert q.exception() is None, q.exception()
                assert time.time() < deadline, f"no batch read file {i} within {timeout} s"
                time.sleep(0.2)
        # the sink saw the last file's rows; its progress event comes after the sink call (on
        # Spark's engine a stop right away can lose it): wait for one event per file
        deadline = time.time() + timeout
        while sum(1 for p in q.recentProgress if (p if isinstance(p, dict) else json.loads(p.json)).get("numInputRows")) < len(batches):
            assert time.time() < deadline, "a file's batch left no progress event"
            time.sleep(0.2)
    finally:
        q.stop()
    progress = [p if isinstance(p, dict) else json.loads(p.json) for p in q.recentProgress]
    metrics = [
        {k: v for k, v in (p["stateOperators"][0].get("customMetrics") or {}).items() if k.startswith("num")}
        for p in progress if p.get("numInputRows")
    ]
    rows = [sorted(seen[b], key=lambda r: str(sorted(r.items()))) for b in sorted(seen)]
    return rows, metrics


def test_ttl_state_in_processing_time(spark_rocksdb, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").transformWithStateInPandas(
            LongTtl(), "k STRING, last LONG, n LONG, distinct LONG", "Update", "ProcessingTime"
        )

    exp_rows, exp_metrics = _data_batches(spark_rocksdb, build, RUNNING, tmp_path)
    act_rows, act_metrics = _data_batches(ours(), build, RUNNING, tmp_path)
    assert act_rows == exp_rows
    assert exp_metrics[0]["numValueStateWithTTLVars"] > 0
    assert act_metrics == exp_metrics


def test_processing_time_timer_registered_and_listed(spark_rocksdb, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").transformWithStateInPandas(FarTimer(), "k STRING, timers LONG, has_clock BOOLEAN", "Update", "ProcessingTime")

    exp_rows, exp_metrics = _data_batches(spark_rocksdb, build, RUNNING, tmp_path)
    act_rows, act_metrics = _data_batches(ours(), build, RUNNING, tmp_path)
    assert act_rows == exp_rows
    assert [(r["k"], r["timers"]) for r in exp_rows[1]] == [("a", 2)]
    assert act_metrics == exp_metrics


def q_event_time_out(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("eventTime", F.timestamp_seconds("t"))
        .withWatermark("eventTime", "10 seconds")
        .groupBy("k")
        .transformWithStateInPandas(EventTimeOut(), "k STRING, n LONG, outTime TIMESTAMP", "Append", "EventTime", eventTimeColumnName="outTime")
    )


def test_event_time_column_then_window_aggregation(spark_rocksdb, ours, tmp_path):
    """eventTimeColumnName carries the watermark through the operator: a window aggregation in
    append mode after it emits a window once the watermark passes its end."""

    def build(df: DataFrame) -> DataFrame:
        return q_event_time_out(df).groupBy(F.window("outTime", "10 seconds")).agg(F.count("*").alias("rows"), F.max("n").alias("n"))

    exp, _ = assert_equivalent(spark_rocksdb, ours, build, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path)
    assert any(b.rows for b in exp.batches)


def test_restart_keeps_state_and_timers(spark_rocksdb, ours, tmp_path):
    runs = {}
    for name, engine in (("spark", spark_rocksdb), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{name}-work"
        first = run_stream(eng, q_sessions, SESSION_BATCHES[:2], "k STRING, t LONG", "append", tmp_path, workdir=work)
        second = run_stream(eng, q_sessions, SESSION_BATCHES[2:], "k STRING, t LONG", "append", tmp_path, workdir=work)
        runs[name] = (first, second)
    assert_same_batches(runs["spark"][0], runs["ours"][0])
    assert_same_batches(runs["spark"][1], runs["ours"][1])


# ------------------------------------------------------------------------------------------------
# Refusals
# ------------------------------------------------------------------------------------------------


def _tws(processor, mode="Update", time_mode="None", before=None, after=None, watermark=False, **kw):
    def build(df: DataFrame) -> DataFrame:
        if watermark:
            df = df.withColumn("eventTime", F.timestamp_seconds("v")).withWatermark("eventTime", "10 seconds")
        if before == "aggregate":
            df = df.groupBy("k").agg(F.sum("v").alias("v"))
        out = df.groupBy("k").transformWithStateInPandas(processor(), "k STRING", mode, time_mode, **kw)
        if after == "aggregate":
            out = out.groupBy("k").count()
        return out

    return build


@pytest.mark.parametrize(
    ("build", "query_mode"),
    [
        (_tws(RunningCount), "complete"),
        (_tws(RunningCount, before="aggregate"), "update"),
        (_tws(RunningCount, "Append", "EventTime", eventTimeColumnName="k"), "append"),
    ],
    ids=["complete-mode", "after-an-aggregation", "event-time-column-without-watermark"],
)
def test_refused_like_spark(spark_rocksdb, ours, tmp_path, build, query_mode):
    expected = start_error(spark_rocksdb, build, KV, query_mode, tmp_path)
    assert expected is not None
    assert start_error(ours(), build, KV, query_mode, tmp_path) == expected


@pytest.mark.parametrize(
    ("processor", "time_mode", "needle"),
    [
        (DeclaresLate, "None", "Error initializing value state: [STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE] Failed to perform stateful processor operation=get_value_state with invalid handle state=INITIALIZED. SQLSTATE: 42802"),
        (TimerWithoutTimeMode, "None", "Error register timer: [STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE] Failed to perform stateful processor operation=register_timer with invalid timeMode=NoTime SQLSTATE: 42802"),
        (TtlWithoutProcessingTime, "None", "[STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL] Cannot use TTL for state=count in timeMode=NoTime, use TimeMode.ProcessingTime() instead. SQLSTATE: 42802"),
    ],
    ids=["state-declared-outside-init", "timer-without-time-mode", "ttl-without-processing-time"],
)
def test_processor_misuse_fails_the_query_like_spark(spark_rocksdb, ours, tmp_path, processor, time_mode, needle):
    for engine in (spark_rocksdb, ours()):
        run = None
        try:
            run = run_stream(
                engine,
                lambda df: df.groupBy("k").transformWithStateInPandas(processor(), "k STRING", "Update", time_mode),
                RUNNING[:1], KV, "update", tmp_path,
            )
        except Exception as exc:  # noqa: BLE001 - the failure is what the test reads
            assert needle in str(exc), str(exc)[:3000]
        assert run is None, "the query should have failed"


def test_processing_time_timers_and_ttl_with_a_manual_clock(ours, tmp_path):
    """statestream only: the batch clock is replaced, so timers fire and values expire at exact
    batch times. Files arrive 3 s of batch time apart; a key's timer is 5 s after its last row,
    its count expires 7 s after its last update.

    The clock reads 3 s more for each file the source has admitted (an entry of its log, which a
    trigger writes as it lists the files, before the batch reads the clock), so a batch's time is
    that of the files it can see. A clock moved forward before each file was written raced with
    a no-data batch (one runs on every trigger under processing-time timers) that listed the
    directory before the file landed and read the clock after: that batch expired a's count
    early, a second TTL removal."""
    from statestream.runtime.microbatch import set_batch_clock

    def batch_clock() -> int:
        admitted = [p for p in tmp_path.glob("*/checkpoint/sources/0/*") if p.name.split(".")[0].isdigit()]
        return 1_000_000 + 3000 * len(admitted)

    previous = set_batch_clock(batch_clock)
    try:
        run = run_stream(
            ours(),
            lambda df: df.groupBy("k").transformWithStateInPandas(
                IdleAlert(), "k STRING, event STRING, count LONG, at LONG", "Update", "ProcessingTime"
            ),
            [[("a", 1), ("b", 1)], [("a", 2)], [("a", 3)], [("c", 1)], [("c", 2)], [("a", 4)]],
            KV,
            "update",
            tmp_path,
        )
    finally:
        set_batch_clock(previous)
    rows = [(r["k"], r["event"], r["count"], r["at"]) for b in run.batches for r in b.rows]
    idle = [r for r in rows if r[1] == "idle"]
    # b's last row at 1_003_000: its timer (1_008_000) fires in the first batch after it, at
    # 1_009_000, with its count (updated at 1_003_000) alive until 1_010_000; a's row at
    # 1_009_000 fires at 1_015_000 (count alive until 1_016_000); a's next row, at 1_018_000,
    # finds its count expired and starts again from 1
    assert ("b", "idle", 1, 1_009_000) in idle
    assert ("a", "idle", 3, 1_015_000) in idle
    data = sorted(r[:3] for r in rows if r[1] == "data")
    assert data == [("a", "data", 1), ("a", "data", 1), ("a", "data", 2), ("a", "data", 3), ("b", "data", 1), ("c", "data", 1), ("c", "data", 2)]
    removed = [
        (b.progress or {}).get("stateOperators", [{}])[0].get("customMetrics", {}).get("numValuesRemovedDueToTTLExpiry", 0)
        for b in run.batches
    ]
    assert sum(removed) == 1  # b's count, cleaned up at the first batch after 1_010_000


class CountWithT(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(p) for p in rows)
        self.count.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self):
        pass


class ClearsAndDeletes(StatefulProcessor):
    """ValueState clear, deleteIfExists of a variable never declared, an empty put refused."""

    def init(self, handle):
        handle.deleteIfExists("never_declared")
        self.count = handle.getValueState("count", "n LONG")
        self.items = handle.getListState("items", "v LONG")

    def handleInputRows(self, key, rows, timerValues):
        vals = [v for p in rows for v in p["v"].tolist()]
        n = (self.count.get()[0] if self.count.exists() else 0) + len(vals)
        if n >= 3:
            self.count.clear()
        else:
            self.count.update((n,))
        for v in vals:
            self.items.appendValue((v,))
        if 0 in vals:
            self.items.put([])
        yield pd.DataFrame({"k": [key[0]], "n": [n], "items": [len(list(self.items.get()))]})

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("time_mode", ["None", "EventTime"])
def test_late_rows_dropped_in_event_time_mode_only(spark_rocksdb, ours, tmp_path, time_mode):
    def build(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("eventTime", F.timestamp_seconds("t"))
            .withWatermark("eventTime", "10 seconds")
            .groupBy("k")
            .transformWithStateInPandas(CountWithT(), "k STRING, n LONG", "Update", time_mode)
        )

    exp, _ = assert_equivalent(spark_rocksdb, ours, build, SESSION_BATCHES, "k STRING, t LONG", "update", tmp_path)
    # b@5 arrives below the 20 s watermark: dropped in event-time mode only, as Spark does
    assert sum(state_figures(exp, "numRowsDroppedByWatermark")) == (1 if time_mode == "EventTime" else 0)


def test_value_clear_and_delete_if_exists(spark_rocksdb, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").transformWithStateInPandas(ClearsAndDeletes(), "k STRING, n LONG, items LONG", "Update", "None")

    assert_equivalent(spark_rocksdb, ours, build, RUNNING, KV, "update", tmp_path)


def test_empty_list_put_fails_like_spark(spark_rocksdb, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").transformWithStateInPandas(ClearsAndDeletes(), "k STRING, n LONG, items LONG", "Update", "None")

    texts = []
    for engine in (spark_rocksdb, ours()):
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared by text below
            run_stream(engine, build, [[("a", 0)]], KV, "update", tmp_path)
        texts.append(str(info.value))
    needle = "[ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE]"
    assert needle in texts[0], texts[0][:2000]
    spark_line = next(ln for ln in texts[0].splitlines() if needle in ln).strip()
    assert spark_line in texts[1], (spark_line, texts[1][:2000])


class TwoVariables(StatefulProcessor):
    """A first version of a processor: a count and a list of values."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")
        self.old = handle.getListState("old", "v LONG")

    def handleInputRows(self, key, rows, timerValues):
        vals = [v for p in rows for v in p["v"].tolist()]
        n = (self.count.get()[0] if self.count.exists() else 0) + len(vals)
        self.count.update((n,))
        self.old.appendList([(v,) for v in vals])
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self):
        pass


class DropsOld(StatefulProcessor):
    """Its next version: keeps the count, deletes the list it no longer declares."""

    def init(self, handle):
        handle.deleteIfExists("old")
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(p) for p in rows)
        self.count.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_restart_with_a_variable_deleted(spark_rocksdb, ours, tmp_path):
    """A processor restarted without one of its variables, deleted with deleteIfExists in init:
    the other variable keeps its state, as on Spark's engine."""
    first = lambda df: df.groupBy("k").transformWithStateInPandas(TwoVariables(), "k STRING, n LONG", "Update", "None")  # noqa: E731
    second = lambda df: df.groupBy("k").transformWithStateInPandas(DropsOld(), "k STRING, n LONG", "Update", "None")  # noqa: E731
    runs = {}
    for name, engine in (("spark", spark_rocksdb), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{name}-work"
        run_stream(eng, first, RUNNING[:2], KV, "update", tmp_path, workdir=work)
        runs[name] = run_stream(eng, second, RUNNING[2:], KV, "update", tmp_path, workdir=work)
        if name == "ours":
            import glob

            assert not glob.glob(str(work / "checkpoint" / "state" / "0" / "*" / "old" / "*"))  # the list's files are gone
    assert_same_batches(runs["spark"], runs["ours"])


class ProcessorError(ValueError):
    pass


class RaisesOnB(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        for _ in rows:
            pass
        if key[0] == "b":
            raise ProcessorError("no b allowed here")  # the user's own line
        self.count.update((1,))
        yield pd.DataFrame({"k": [key[0]]})

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_processor_error_stops_the_query_without_commit(ours, tmp_path):
    """statestream only: the query fails with the processor's own traceback and a note naming
    the key (beyond Spark); the failing partition commits no state and the batch is not in the
    commit log."""
    import glob

    with pytest.raises(Exception) as info:  # noqa: PT011 - read below
        run_stream(
            ours(), lambda df: df.groupBy("k").transformWithStateInPandas(RaisesOnB(), "k STRING", "Update", "None"),
            [[("a", 1), ("b", 2)]], KV, "update", tmp_path, workdir=tmp_path / "w",
        )
    text = str(info.value)
    assert "ProcessorError: no b allowed here" in text
    assert 'raise ProcessorError("no b allowed here")  # the user\'s own line' in text
    assert "transformWithState: the processor failed for key ('b',)" in text
    checkpoint = tmp_path / "w" / "checkpoint"
    assert len(glob.glob(str(checkpoint / "state" / "0" / "*" / "count" / "1.delta"))) < 2
    assert not (checkpoint / "commits" / "0").exists()


def test_state_tables_read_and_edit_a_processors_state(ours, tmp_path):
    """statestream only (the debugging hook): a stopped query's variable read as a table as of
    each batch, edited in place, and the next run continuing from the edited value."""
    from statestream.tools.state_tables import StateTables

    work = tmp_path / "w"
    engine = ours()
    run_stream(engine, q_running_count, RUNNING[:2], KV, "update", tmp_path, workdir=work)
    tables = StateTables(str(work / "checkpoint"))
    assert tables.last_committed_batch() == 1
    assert tables.stores(0) == ("state",)

    def values(table):
        return sorted((r["k"], r["__value"]["count"], r["__value"]["total"]) for r in table.to_pylist())

    assert values(tables.read("state", batch_id=0)) == [("a", 2, 4), ("b", 1, 2)]
    state = tables.read("state")
    assert values(state) == [("a", 3, 8), ("b", 1, 2)]
    edited = [
        {**r, "__value": {"count": 10, "total": 20}} if r["k"] == "b" else r for r in state.to_pylist()
    ]
    tables.write(pa.Table.from_pylist(edited, schema=state.schema), "state")
    assert values(tables.read("state")) == [("a", 3, 8), ("b", 10, 20)]
    run = run_stream(engine, q_running_count, RUNNING[2:], KV, "update", tmp_path, workdir=work)
    assert sorted(map(tuple, (r.values() for r in run.batches[-1].rows))) == [("b", 12, 33), ("c", 1, 5)]
    with pytest.raises(ValueError, match="columns"):
        tables.write(state.drop_columns(["__value"]), "state")


class RunningCountTextTotal(StatefulProcessor):
    """RunningCount's variable restarted with ``total`` as a string."""

    def init(self, handle):
        self.state = handle.getValueState("state", "count LONG, total STRING")

    def handleInputRows(self, key, rows, timerValues):
        for _ in rows:
            pass
        yield pd.DataFrame({"k": [key[0]], "count": [0], "total": [0]})

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_changed_variable_schema_on_restart_fails_like_spark(spark_rocksdb, ours, tmp_path):
    """The second run declares the variable with another value schema: both engines refuse the
    checkpoint with the same error, naming the variable's two value schemas."""
    changed = lambda df: df.groupBy("k").transformWithStateInPandas(  # noqa: E731
        RunningCountTextTotal(), "k STRING, count LONG, total LONG", "Update", "None"
    )
    texts = {}
    for name, engine in (("spark", spark_rocksdb), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{name}-work"
        run_stream(eng, q_running_count, RUNNING[:1], KV, "update", tmp_path, workdir=work)
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared by text below
            run_stream(eng, changed, RUNNING[1:2], KV, "update", tmp_path, workdir=work)
        texts[name] = str(info.value)
    cause = state_store_error_cause
    assert "StructField(total,StringType,true)" in cause(texts["spark"])
    assert cause(texts["ours"]) == cause(texts["spark"])


def test_variable_added_on_restart_starts_empty_and_a_lost_store_is_named(ours, tmp_path):
    """statestream only: a variable declared from the second run on starts empty there, while a
    store of it lost after it was written stops the next run with the missing file named
    (the checkpoint records the batch that first declared each store)."""
    import shutil

    work = tmp_path / "w"
    engine = ours()
    only_count = lambda df: df.groupBy("k").transformWithStateInPandas(DropsOld(), "k STRING, n LONG", "Update", "None")  # noqa: E731
    with_list = lambda df: df.groupBy("k").transformWithStateInPandas(TwoVariables(), "k STRING, n LONG", "Update", "None")  # noqa: E731
    run_stream(engine, only_count, RUNNING[:1], KV, "update", tmp_path, workdir=work)
    run = run_stream(engine, with_list, RUNNING[1:2], KV, "update", tmp_path, workdir=work)
    assert [r["n"] for r in run.batches[-1].rows] == [3]
    from statestream.tools.state_tables import StateTables

    tables = StateTables(str(work / "checkpoint"))
    assert [(r["k"], r["__value"]["v"]) for r in tables.read("old").to_pylist()] == [("a", 4)]
    assert tables.read("old", batch_id=0).num_rows == 0  # before the variable was declared
    lost = work / "checkpoint" / "state" / "0" / "0" / "old"
    assert sorted(p.name for p in lost.iterdir()) == ["2.delta"]
    shutil.rmtree(lost)
    with pytest.raises(Exception, match=r"(?s)0/0/old/2\.delta of .*the file does not exist, but it is needed to load version 2"):
        run_stream(engine, with_list, RUNNING[2:], KV, "update", tmp_path, workdir=work)


class CountAndTotal(StatefulProcessor):
    """Two variables, both in the output."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")
        self.total = handle.getValueState("total", "t LONG")

    def handleInputRows(self, key, rows, timerValues):
        vals = [v for p in rows for v in p["v"].tolist()]
        n = (self.count.get()[0] if self.count.exists() else 0) + len(vals)
        t = (self.total.get()[0] if self.total.exists() else 0) + sum(vals)
        self.count.update((n,))
        self.total.update((t,))
        yield pd.DataFrame({"k": [key[0]], "n": [n], "t": [t]})

    def close(self):
        pass


class CountOnly(StatefulProcessor):
    """The same processor without ``total``, which it neither declares nor deletes."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(p) for p in rows)
        self.count.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n], "t": [-1]})

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_variable_left_out_of_runs_continues_when_declared_again(spark_rocksdb, ours, tmp_path):
    """A variable that two runs leave out (neither declared nor deleted) keeps its state: the run
    that declares it again continues from where the last run declaring it left it, as on Spark's
    engine; and a restart of that run goes on from its own state."""
    both = lambda df: df.groupBy("k").transformWithStateInPandas(CountAndTotal(), "k STRING, n LONG, t LONG", "Update", "None")  # noqa: E731
    count = lambda df: df.groupBy("k").transformWithStateInPandas(CountOnly(), "k STRING, n LONG, t LONG", "Update", "None")  # noqa: E731
    feeds = [[("a", 1), ("b", 2)], [("a", 10)], [("b", 20)], [("a", 100), ("b", 200)], [("a", 1000)]]
    runs = {}
    for name, engine in (("spark", spark_rocksdb), ("ours", None)):
        eng = engine if engine is not None else ours()
        work = tmp_path / f"{name}-work"
        plan = [(both, feeds[:1]), (count, feeds[1:2]), (count, feeds[2:3]), (both, feeds[3:4]), (both, feeds[4:])]
        batches = []
        for query, feed in plan:
            batches += run_stream(eng, query, feed, KV, "update", tmp_path, workdir=work).batches[-1:]
        runs[name] = batches
        if name == "ours":
            from statestream.tools.state_tables import StateTables

            tables = StateTables(str(work / "checkpoint"))
            totals = lambda batch: sorted((r["k"], r["__value"]["t"]) for r in tables.read("total", batch_id=batch).to_pylist())  # noqa: E731
            assert totals(0) == totals(2) == [("a", 1), ("b", 2)]  # frozen while left out
            assert totals(4) == [("a", 1101), ("b", 202)]
    rows = lambda batches: [sorted(tuple(r.values()) for r in b.rows) for b in batches]  # noqa: E731
    assert rows(runs["spark"])[3:] == [[("a", 3, 101), ("b", 3, 202)], [("a", 4, 1101)]]
    assert rows(runs["ours"]) == rows(runs["spark"])
    # the state readers: each batch reads with its run's variables (total is not defined in the
    # runs that left it out), and total's change feed skips the batches it was left out of
    ids = [b.batch_id for b in runs["spark"]]
    assert ids == [b.batch_id for b in runs["ours"]]
    reads = [{"stateVarName": v, "batchId": b} for v in ("count", "total") for b in ids]
    reads += [{"stateVarName": "total", "readChangeFeed": "true", "changeStartBatchId": 0}]
    reads += [{"stateVarName": "total", "readChangeFeed": "true", "changeStartBatchId": ids[3]}]

    def outcome(engine: Any, checkpoint: str, options: dict[str, Any]) -> Any:
        try:
            return sorted(repr(_normalised(r)) for r in engine.read.format("statestore").options(**options).load(checkpoint).collect())
        except Exception as exc:  # noqa: BLE001 - the outcome compared
            java = getattr(exc, "java_exception", None)
            return str(java.getMessage()) if java is not None else str(exc).split("\n\nJVM stacktrace:")[0]

    for options in reads:
        theirs = outcome(spark_rocksdb, str(tmp_path / "spark-work" / "checkpoint"), options)
        mine = outcome(ours(), str(tmp_path / "ours-work" / "checkpoint"), options)
        assert mine == theirs, f"{options}:\nSpark: {theirs}\nours:  {mine}"


class ShowsTimestamps(StatefulProcessor):
    """The Row variant: how each input row's timestamp reaches the processor."""

    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):
        for r in rows:
            yield Row(k=key[0], zone=repr(r.ts.tzinfo), shown=str(r.ts), nested=str(r.s["t"]))  # a nested struct comes as a dict, in PySpark too

    def close(self):
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_row_processor_sees_timestamps_in_the_session_time_zone(spark_rocksdb, ours, tmp_path):
    """A Row-based processor gets timestamps (nested ones too) in the session's time zone, as
    PySpark's row conversion gives them."""
    import datetime as dt

    utc = dt.timezone.utc
    build = lambda df: df.select("k", "ts", F.struct(F.col("ts").alias("t")).alias("s")).groupBy("k").transformWithState(  # noqa: E731
        ShowsTimestamps(), "k STRING, zone STRING, shown STRING, nested STRING", "Update", "None"
    )
    batches = [[("a", dt.datetime(2024, 1, 1, 12, 0, tzinfo=utc)), ("b", dt.datetime(2024, 7, 1, 12, 0, 5, tzinfo=utc))]]
    before = spark_rocksdb.conf.get("spark.sql.session.timeZone")
    spark_rocksdb.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        runs = [run_stream(e, build, batches, "k STRING, ts TIMESTAMP", "update", tmp_path) for e in (spark_rocksdb, ours())]
    finally:
        spark_rocksdb.conf.set("spark.sql.session.timeZone", before)
    rows = sorted(tuple(r.values()) for r in runs[0].batches[0].rows)
    assert rows[0][1:3] == ("zoneinfo.ZoneInfo(key='America/New_York')", "2024-01-01 07:00:00-05:00")
    assert_same_batches(runs[0], runs[1])


def test_explain_matches_spark(spark_rocksdb, ours, tmp_path):
    from tests.spark.test_explain import _explain_text, _with_ids_normalised

    theirs = _with_ids_normalised(_explain_text(q_running_count(spark_rocksdb.readStream.schema(KV).parquet(str(tmp_path)))))
    mine = _with_ids_normalised(_explain_text(q_running_count(ours().readStream.schema(KV).parquet(str(tmp_path)))))
    assert mine == theirs, "\n".join(["statestream:", *mine, "Spark:", *theirs])


@pytest.mark.parametrize("build, batches", [(q_sessions, SESSION_BATCHES), (q_lists_and_maps, LISTS)], ids=["timers", "lists_and_maps"])
def test_repartition_keeps_variables_and_timers(spark_rocksdb, ours, tmp_path, build, batches):
    """Offline repartition (issue 16): 4 -> 7 -> 2 state partitions between batches; every state
    variable and timer moves with its key, and the batches equal Spark's run."""
    from tests.differential.harness import assert_same_as_uninterrupted, run_repartitioned, run_stream

    splits = ((1, 7), (3, 2))
    mode = "append" if build is q_sessions else "update"
    schema = "k STRING, t LONG" if build is q_sessions else KV
    expected = run_stream(spark_rocksdb, build, batches, schema, mode, tmp_path / "spark")
    got, results = run_repartitioned(spark_rocksdb, build, batches, schema, mode, tmp_path, splits=splits)
    assert_same_as_uninterrupted(expected, got, results, splits=splits)
    assert sum(results[0].rows.values()) > 0
