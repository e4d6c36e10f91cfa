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

import sys
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from tests.differential.harness import assert_equivalent, assert_same_batches, run_stream, start_error

KV = "k STRING, v LONG"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@pytest.fixture
def spark_rocksdb(spark):
    """Spark's session with the RocksDB provider that Spark's transformWithState needs (set only
    for the test: the provider is recorded in each query's offset log)."""
    before = spark.conf.get(PROVIDER, None)
    spark.conf.set(PROVIDER, ROCKSDB)
    yield spark
    if before is None:
        spark.conf.unset(PROVIDER)
    else:
        spark.conf.set(PROVIDER, before)


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


def test_value_state_running_count(spark_rocksdb, ours, tmp_path):
    r = lambda k, c, t: {"k": k, "count": c, "total": t}  # noqa: E731
    exp, _ = assert_equivalent(
        spark_rocksdb, ours, q_running_count, RUNNING, KV, "update", tmp_path,
        reference=[[r("a", 2, 4), r("b", 1, 2)], [r("a", 3, 8)], [r("c", 1, 5), r("b", 3, 15)]],
    )
    assert [b.state[0]["operatorName"] for b in exp.batches] == ["transformWithStateInPandasExec"] * 3


def test_row_processor_running_count(spark_rocksdb, ours, tmp_path):
    assert_equivalent(spark_rocksdb, ours, q_running_count_rows, RUNNING, KV, "update", tmp_path)


LISTS = [
    [("a", 1), ("a", 1), ("b", 2), ("a", 2)],
    [("a", 1), ("b", 2), ("b", 0)],
    [("a", 3), ("a", 4), ("b", 2), ("b", 1)],
    [("a", 5), ("c", 1)],
]


def test_list_and_map_state(spark_rocksdb, ours, tmp_path):
    assert_equivalent(spark_rocksdb, ours, q_lists_and_maps, LISTS, KV, "update", tmp_path)


SESSION_BATCHES = [
    [("a", 10), ("b", 12), ("a", 15)],
    [("a", 18), ("c", 30)],
    [("b", 5), ("c", 45)],  # b@5 is late (watermark 20 s): dropped
    [("d", 70)],
]


def test_event_time_timers(spark_rocksdb, ours, tmp_path):
    """Sessions close in the batch where the watermark passes last + 10 s, data or no-data."""
    exp, _ = assert_equivalent(spark_rocksdb, ours, q_sessions, SESSION_BATCHES, "k STRING, t LONG", "append", tmp_path)
    closed = sorted((r["k"], r["count"]) for b in exp.batches for r in b.rows if r["closed"])
    assert ("a", 3) in closed
    assert any(b.num_input_rows == 0 and b.rows for b in exp.batches)  # a no-data batch fired timers
