"""``statestream.testing.TwsTester`` and ``ApplyInPandasWithStateTester``: a processor or an
applyInPandasWithState function run on given rows with no query (and no Spark: the schemas are
``StructType`` objects, which PySpark parses without a session), with the engine's state, timer,
TTL and timeout semantics and a manual clock."""

from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from statestream.testing import ApplyInPandasWithStateTester, TwsTester

COUNT = StructType([StructField("count", LongType())])
SCORE = StructType([StructField("score", DoubleType())])
WORD = StructType([StructField("word", StringType())])
SEEN = StructType([StructField("last", LongType())])


# ----------------------------------------------------------------------------------------------
# Processors
# ----------------------------------------------------------------------------------------------


class RunningCount(StatefulProcessor):
    """Counts rows per key; the initial state sets the starting count."""

    def init(self, handle):
        self.count = handle.getValueState("count", COUNT)

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        n += sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(key=key[0], count=n)

    def handleInitialState(self, key, initialState, timerValues):
        self.count.update((initialState.start,))

    def close(self):
        pass


class RunningCountPandas(StatefulProcessor):
    """RunningCount for transformWithStateInPandas (rows and initial state as DataFrames)."""

    def init(self, handle):
        self.count = handle.getValueState("count", COUNT)

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        n += sum(len(pdf) for pdf in rows)
        self.count.update((n,))
        yield pd.DataFrame({"key": [key[0]], "count": [n]})

    def handleInitialState(self, key, initialState, timerValues):
        self.count.update((int(initialState["start"].sum()),))

    def close(self):
        pass


class TopTwo(StatefulProcessor):
    """Keeps the two highest scores of a key in a list state, highest first."""

    def init(self, handle):
        self.top = handle.getListState("top", SCORE)

    def handleInputRows(self, key, rows, timerValues):
        scores = [s for (s,) in self.top.get()] + [r.score for r in rows]
        best = sorted(scores, reverse=True)[:2]
        self.top.put([(s,) for s in best])
        for s in best:
            yield Row(key=key[0], score=s)

    def close(self):
        pass


class WordCount(StatefulProcessor):
    """Counts words per key in a map state {word: count}."""

    def init(self, handle):
        self.freq = handle.getMapState("freq", WORD, COUNT)

    def handleInputRows(self, key, rows, timerValues):
        for r in rows:
            n = (self.freq.getValue((r.word,)) or (0,))[0] + 1
            self.freq.updateValue((r.word,), (n,))
            yield Row(key=key[0], word=r.word, count=n)

    def close(self):
        pass


class SessionEnd(StatefulProcessor):
    """Event time: keeps a key's last event time and registers a timer 10 s after it (moved on
    every new event); the timer emits the session's end and clears the state."""

    def init(self, handle):
        self.handle = handle
        self.last = handle.getValueState("last", SEEN)

    def handleInputRows(self, key, rows, timerValues):
        last = max(r.t for r in rows)
        if self.last.exists():
            old = self.last.get()[0]
            self.handle.deleteTimer(old + 10_000)
            last = max(last, old)
        self.last.update((last,))
        self.handle.registerTimer(last + 10_000)
        yield Row(key=key[0], event="seen", at=last)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.last.clear()
        yield Row(key=key[0], event="closed", at=expiredTimerInfo.getExpiryTimeInMs())

    def close(self):
        pass


class Reminder(StatefulProcessor):
    """Processing time: each call registers a timer 5 s after the batch's processing time."""

    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        now = timerValues.getCurrentProcessingTimeInMs()
        self.handle.registerTimer(now + 5_000)
        yield Row(key=key[0], event="registered", at=now + 5_000)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield Row(key=key[0], event="fired", at=timerValues.getCurrentProcessingTimeInMs())

    def close(self):
        pass


class CountWithTtl(StatefulProcessor):
    """A count whose value expires 10 s after it was last written."""

    def init(self, handle):
        self.count = handle.getValueState("count", COUNT, ttlDurationMs=10_000)

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get()[0] if self.count.exists() else 0) + sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(key=key[0], count=n)

    def close(self):
        pass


class FailsOnBad(StatefulProcessor):
    """Counts, but raises after the state update when a row says so."""

    def init(self, handle):
        self.count = handle.getValueState("count", COUNT)

    def handleInputRows(self, key, rows, timerValues):
        rows = list(rows)
        n = (self.count.get()[0] if self.count.exists() else 0) + len(rows)
        self.count.update((n,))
        if any(r.v == "bad" for r in rows):
            raise ValueError("bad row")
        yield Row(key=key[0], count=n)

    def close(self):
        pass


# ----------------------------------------------------------------------------------------------
# TwsTester: value, list and map state
# ----------------------------------------------------------------------------------------------


def test_value_state_is_kept_across_calls_and_can_be_peeked_and_set():
    with TwsTester(RunningCount()) as tester:
        assert tester.test("a", [Row(v=1), Row(v=2)]) == [Row(key="a", count=2)]
        assert tester.test("a", [Row(v=3)]) == [Row(key="a", count=3)]
        assert tester.peekValueState("count", "a") == (3,)
        assert tester.peekValueState("count", "b") is None
        tester.setValueState("count", "b", (10,))
        assert tester.test("b", [Row(v=1)]) == [Row(key="b", count=11)]
        assert tester.peekValueState("count", "b") == (11,)
        assert tester.peekValueState("count", "a") == (3,)  # another key is untouched
        tester.setValueState("count", "a", None)  # None clears
        assert tester.peekValueState("count", "a") is None
        assert tester.test("a", [Row(v=1)]) == [Row(key="a", count=1)]


def test_pandas_variant_returns_one_dataframe_per_call():
    with TwsTester(RunningCountPandas()) as tester:
        out = tester.testInPandas("a", pd.DataFrame({"v": [1, 2, 3]}))
        assert out.to_dict("records") == [{"key": "a", "count": 3}]
        out = tester.testInPandas("a", pd.DataFrame({"v": [4]}))
        assert out.to_dict("records") == [{"key": "a", "count": 4}]
        tester.updateValueState("count", "b", (7,))  # Spark 4.2's name for setValueState
        assert tester.testInPandas("b", pd.DataFrame({"v": [1]})).to_dict("records") == [{"key": "b", "count": 8}]


def test_list_state_peek_and_set():
    with TwsTester(TopTwo()) as tester:
        tester.setListState("top", "a", [(6.0,), (5.0,)])
        assert tester.test("a", [Row(score=10.0), Row(score=1.0)]) == [Row(key="a", score=10.0), Row(key="a", score=6.0)]
        assert tester.peekListState("top", "a") == [(10.0,), (6.0,)]
        assert tester.test("b", [Row(score=2.5)]) == [Row(key="b", score=2.5)]
        assert tester.peekListState("top", "b") == [(2.5,)]
        assert tester.peekListState("top", "c") == []
        tester.setListState("top", "a", [])  # an empty list clears
        assert tester.peekListState("top", "a") == []
        tester.deleteState("top", "b")
        assert tester.peekListState("top", "b") == []


def test_map_state_peek_and_set():
    with TwsTester(WordCount()) as tester:
        tester.setMapState("freq", "u1", {("hello",): (5,), ("world",): (3,)})
        out = tester.test("u1", [Row(word="hello"), Row(word="bye"), Row(word="hello")])
        assert out == [
            Row(key="u1", word="hello", count=6),
            Row(key="u1", word="bye", count=1),
            Row(key="u1", word="hello", count=7),
        ]
        assert tester.peekMapState("freq", "u1") == {("hello",): (7,), ("world",): (3,), ("bye",): (1,)}
        assert tester.peekMapState("freq", "u2") == {}
        tester.setMapState("freq", "u1", {("x",): (1,)})  # replaces the whole map
        assert tester.peekMapState("freq", "u1") == {("x",): (1,)}


def test_a_key_of_several_columns_is_a_tuple():
    with TwsTester(RunningCount()) as tester:
        tester.test(("a", 1), [Row(v=1)])
        tester.test(("a", 2), [Row(v=1), Row(v=2)])
        assert tester.peekValueState("count", ("a", 1)) == (1,)
        assert tester.peekValueState("count", ("a", 2)) == (2,)


def test_a_key_schema_fixes_the_key_type():
    key_schema = StructType([StructField("id", LongType())])
    with TwsTester(RunningCount(), keySchema=key_schema) as tester:
        assert tester.test(7, [Row(v=1)]) == [Row(key=7, count=1)]
        with pytest.raises(TypeError, match="does not fit the key schema"):
            tester.test("seven", [Row(v=1)])
        assert tester.peekValueState("count", 7) == (1,)


def test_state_errors_name_the_variable():
    with TwsTester(RunningCount()) as tester:
        with pytest.raises(KeyError, match="'nope' is not declared.*'count'"):
            tester.peekValueState("nope", "a")
        with pytest.raises(TypeError, match="'count' is a value state, not a list state"):
            tester.peekListState("count", "a")
        with pytest.raises(ValueError, match="no timers in timeMode None"):
            tester.peekTimers("a")


class DdlCount(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "count BIGINT")

    def handleInputRows(self, key, rows, timerValues):
        yield from ()

    def close(self):
        pass


def test_a_ddl_state_schema_without_a_session_says_what_to_do():
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:  # the whole suite in one process: DDL parses
        with TwsTester(DdlCount()) as tester:
            assert tester.peekValueState("count", "a") is None
        return
    with pytest.raises(Exception, match="SESSION_OR_CONTEXT_NOT_EXISTS") as info:
        TwsTester(DdlCount())
    assert any("use a StructType or start a session" in note for note in info.value.__notes__)


def test_a_failing_call_commits_nothing():
    with TwsTester(FailsOnBad()) as tester:
        assert tester.test("a", [Row(v="ok")]) == [Row(key="a", count=1)]
        with pytest.raises(ValueError, match="bad row") as info:
            tester.test("a", [Row(v="ok"), Row(v="bad")])
        assert any("key ('a',)" in note for note in info.value.__notes__)
        assert tester.peekValueState("count", "a") == (1,)  # the update of the failed batch is gone
        assert tester.test("a", [Row(v="ok")]) == [Row(key="a", count=2)]


def test_the_users_processor_object_is_not_modified():
    processor = RunningCount()
    with TwsTester(processor) as tester:
        tester.test("a", [Row(v=1)])
    assert not hasattr(processor, "count")  # each batch worked on its own copy, as in Spark


class Audit(StatefulProcessor):
    """A count (value state) and the history of row values (list state)."""

    def init(self, handle):
        self.count = handle.getValueState("count", COUNT)
        self.history = handle.getListState("history", WORD)

    def handleInputRows(self, key, rows, timerValues):
        words = [(r.word,) for r in rows]
        self.history.appendList(words)
        n = (self.count.get()[0] if self.count.exists() else 0) + len(words)
        self.count.update((n,))
        yield Row(key=key[0], count=n)

    def close(self):
        pass


def test_state_set_before_any_call_and_read_back_from_the_files():
    from statestream.state.provider import clear_provider_cache

    with TwsTester(Audit()) as tester:
        tester.setListState("history", "a", [("x",)])  # before the first batch
        for word in ("p", "q", "r", "s"):
            tester.test("a", [Row(word=word)])
        tester.setValueState("count", "a", (100,))
        clear_provider_cache(tester._dir.run_id)  # forget the cached versions: replay the delta files
        assert tester.peekListState("history", "a") == [("x",), ("p",), ("q",), ("r",), ("s",)]
        assert tester.test("a", [Row(word="t")]) == [Row(key="a", count=101)]
        assert tester.peekValueState("count", "a") == (101,)


# ----------------------------------------------------------------------------------------------
# TwsTester: initial state
# ----------------------------------------------------------------------------------------------


def test_initial_state_rows():
    with TwsTester(RunningCount(), initialStateRow=[("a", Row(start=10)), ("b", Row(start=20))]) as tester:
        assert tester.peekValueState("count", "a") == (10,)
        assert tester.peekValueState("count", "b") == (20,)
        assert tester.test("a", [Row(v=1)]) == [Row(key="a", count=11)]
        assert tester.test("c", [Row(v=1)]) == [Row(key="c", count=1)]


def test_initial_state_pandas_frame_with_key_columns():
    initial = pd.DataFrame({"user": ["a", "b", "a"], "start": [10, 20, 5]})
    with TwsTester(RunningCountPandas(), initialStatePandas=initial, keyColumns="user") as tester:
        assert tester.peekValueState("count", "a") == (15,)  # one call with both rows of "a"
        assert tester.peekValueState("count", "b") == (20,)
        assert tester.testInPandas("a", pd.DataFrame({"v": [0]})).to_dict("records") == [{"key": "a", "count": 16}]


def test_initial_state_pandas_pairs():
    pairs = [("a", pd.DataFrame({"start": [3]}))]
    with TwsTester(RunningCountPandas(), initialStatePandas=pairs) as tester:
        assert tester.peekValueState("count", "a") == (3,)


# ----------------------------------------------------------------------------------------------
# TwsTester: timers and the manual clock
# ----------------------------------------------------------------------------------------------


def test_event_time_timers_fire_when_the_watermark_passes_them():
    with TwsTester(SessionEnd(), timeMode="EventTime") as tester:
        assert tester.currentWatermarkMs == 0
        assert tester.test("a", [Row(t=1_000), Row(t=4_000)]) == [Row(key="a", event="seen", at=4_000)]
        assert tester.test("b", [Row(t=2_000)]) == [Row(key="b", event="seen", at=2_000)]
        assert tester.test("a", [Row(t=5_000)]) == [Row(key="a", event="seen", at=5_000)]
        assert tester.peekTimers("a") == [15_000]  # the 14_000 timer was deleted
        assert tester.registeredTimers() == [("b", 12_000), ("a", 15_000)]
        assert tester.setWatermark(11_999) == []  # fires at or below the watermark, as Spark's engine does
        assert tester.setWatermark(12_000) == [Row(key="b", event="closed", at=12_000)]
        assert tester.peekValueState("last", "b") is None
        assert tester.peekTimers("b") == []
        assert tester.advanceWatermark(10_000) == [Row(key="a", event="closed", at=15_000)]
        assert tester.registeredTimers() == []
        with pytest.raises(ValueError, match="must not move backwards"):
            tester.setWatermark(1_000)


def test_late_rows_are_dropped_with_an_event_time_extractor():
    with TwsTester(SessionEnd(), timeMode="EventTime", eventTimeExtractor=lambda r: r.t) as tester:
        tester.setWatermark(5_000)
        # 5_000 is at the watermark: late, as in the engine (at or below)
        assert tester.test("a", [Row(t=4_000), Row(t=5_000), Row(t=6_000)]) == [Row(key="a", event="seen", at=6_000)]
        assert tester.test("a", [Row(t=3_000)]) == []  # all late: no handleInputRows call
        assert tester.peekValueState("last", "a") == (6_000,)


def test_processing_time_timers_fire_on_clock_advance():
    with TwsTester(Reminder(), timeMode="ProcessingTime") as tester:
        tester.setProcessingTime(1_000)
        assert tester.test("a", [Row(v=1)]) == [Row(key="a", event="registered", at=6_000)]
        assert tester.peekTimers("a") == [6_000]
        assert tester.advanceProcessingTime(4_999) == []  # now 5_999: the timer is still ahead
        assert tester.advanceProcessingTime(1) == [Row(key="a", event="fired", at=6_000)]
        assert tester.peekTimers("a") == []
        assert tester.currentProcessingTimeMs == 6_000


def test_a_timer_already_due_fires_in_the_same_batch_as_the_data():
    # no eventTimeExtractor: nothing is dropped, and the timer (11_000) is below the watermark
    with TwsTester(SessionEnd(), timeMode="EventTime") as tester:
        tester.setWatermark(20_000)
        out = tester.test("a", [Row(t=1_000)])
        assert out == [Row(key="a", event="seen", at=1_000), Row(key="a", event="closed", at=11_000)]
        assert tester.peekValueState("last", "a") is None


def test_fire_timers_runs_a_no_data_batch_at_the_current_time():
    with TwsTester(Reminder(), timeMode="ProcessingTime") as tester:
        tester.test("a", [Row(v=1)])  # at 0: a timer at 5_000
        tester.test("b", [Row(v=1)])
        assert tester.fireTimers() == []
        out = tester.setProcessingTime(10_000)
        assert out == [Row(key="a", event="fired", at=10_000), Row(key="b", event="fired", at=10_000)]
        assert tester.fireTimers() == []


def test_ttl_values_expire_with_the_manual_clock():
    with TwsTester(CountWithTtl(), timeMode="ProcessingTime") as tester:
        tester.setProcessingTime(1_000)
        assert tester.test("a", [Row(v=1), Row(v=2)]) == [Row(key="a", count=2)]  # expires at 11_000
        tester.setProcessingTime(10_999)
        assert tester.peekValueState("count", "a") == (2,)
        assert tester.test("a", [Row(v=3)]) == [Row(key="a", count=3)]  # written again: expires at 20_999
        tester.setProcessingTime(20_998)
        assert tester.peekValueState("count", "a") == (3,)
        tester.setProcessingTime(20_999)  # the batch time reaches the expiration: gone
        assert tester.peekValueState("count", "a") is None
        assert tester.test("a", [Row(v=4)]) == [Row(key="a", count=1)]


def test_ttl_of_a_value_set_by_the_test_starts_at_the_current_time():
    with TwsTester(CountWithTtl(), timeMode="ProcessingTime") as tester:
        tester.setProcessingTime(5_000)
        tester.setValueState("count", "a", (40,))
        tester.setProcessingTime(14_999)
        assert tester.test("a", [Row(v=1)]) == [Row(key="a", count=41)]
        tester.setProcessingTime(30_000)
        assert tester.peekValueState("count", "a") is None


def test_ttl_needs_processing_time_mode():
    with pytest.raises(Exception, match="STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL"):
        TwsTester(CountWithTtl(), timeMode="None")


# ----------------------------------------------------------------------------------------------
# ApplyInPandasWithStateTester
# ----------------------------------------------------------------------------------------------

OUT = StructType([StructField("user", StringType()), StructField("events", LongType()), StructField("closed", StringType())])
STATE = StructType([StructField("events", LongType())])


def count_until_idle(key, pdfs, state):
    """Counts a user's events; after 1 s of processing time without events, emits and forgets."""
    if state.hasTimedOut:
        (n,) = state.get
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "events": [n], "closed": ["yes"]})
        return
    n = state.get[0] if state.exists else 0
    n += sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    state.setTimeoutDuration(1_000)
    yield pd.DataFrame({"user": [key[0]], "events": [n], "closed": ["no"]})


def test_apply_in_pandas_tester_with_a_processing_time_timeout():
    with ApplyInPandasWithStateTester(
        count_until_idle, OUT, STATE, "Update", GroupStateTimeout.ProcessingTimeTimeout, keyColumns="user"
    ) as tester:
        out = tester.test("u1", pd.DataFrame({"v": [1, 2]}))
        assert out.to_dict("records") == [{"user": "u1", "events": 2, "closed": "no"}]
        assert tester.peekState("u1") == (2,)
        assert tester.peekTimeoutTimestamp("u1") == 1_000
        tester.setProcessingTime(500)
        assert tester.test("u1", pd.DataFrame({"v": [3]})).to_dict("records") == [{"user": "u1", "events": 3, "closed": "no"}]
        assert tester.peekTimeoutTimestamp("u1") == 1_500
        assert tester.setProcessingTime(1_500).empty  # not strictly below: nothing times out
        out = tester.advanceProcessingTime(1)
        assert out.to_dict("records") == [{"user": "u1", "events": 3, "closed": "yes"}]
        assert tester.peekState("u1") is None
        assert tester.peekTimeoutTimestamp("u1") is None


def test_apply_in_pandas_tester_set_state_and_timeout():
    with ApplyInPandasWithStateTester(
        count_until_idle, OUT, STATE, "Update", GroupStateTimeout.ProcessingTimeTimeout, keyColumns="user"
    ) as tester:
        tester.setState("u2", (41,), timeoutTimestampMs=300)
        assert tester.peekState("u2") == (41,)
        assert tester.peekTimeoutTimestamp("u2") == 300
        assert tester.test("u2", pd.DataFrame({"v": [0]})).to_dict("records") == [{"user": "u2", "events": 42, "closed": "no"}]
        tester.setState("u3", {"events": 7}, timeoutTimestampMs=100)
        out = tester.setProcessingTime(200)  # u3's timeout is due; u2's is 1_000 now
        assert out.to_dict("records") == [{"user": "u3", "events": 7, "closed": "yes"}]
        tester.setState("u2", None)  # removes the key
        assert tester.peekState("u2") is None


def sessions(key, pdfs, state):
    """Event time: a session closes when the watermark passes its last event plus 10 s."""
    if state.hasTimedOut:
        (last,) = state.get
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "events": [last], "closed": ["yes"]})
        return
    last = state.get[0] if state.exists else 0
    for pdf in pdfs:
        last = max(last, int(pdf["t"].max()))
    state.update((last,))
    state.setTimeoutTimestamp(last + 10_000)
    yield pd.DataFrame({"user": [key[0]], "events": [last], "closed": ["no"]})


def test_apply_in_pandas_tester_with_an_event_time_timeout_and_late_rows():
    with ApplyInPandasWithStateTester(
        sessions, OUT, STATE, "Append", GroupStateTimeout.EventTimeTimeout, keyColumns="user", eventTimeColumn="ts"
    ) as tester:
        rows = pd.DataFrame({"t": [1_000, 3_000], "ts": pd.to_datetime([1_000, 3_000], unit="ms")})
        assert tester.test("u1", rows).to_dict("records") == [{"user": "u1", "events": 3_000, "closed": "no"}]
        assert tester.peekTimeoutTimestamp("u1") == 13_000
        assert tester.setWatermark(13_000).empty
        late = pd.DataFrame({"t": [12_000, 13_000], "ts": pd.to_datetime([12_000, 13_000], unit="ms")})
        out = tester.test("u2", late)  # both at or below the watermark: dropped, no call
        assert out.empty
        assert tester.peekState("u2") is None
        out = tester.advanceWatermark(1)
        assert out.to_dict("records") == [{"user": "u1", "events": 3_000, "closed": "yes"}]
        assert tester.peekState("u1") is None


def test_apply_in_pandas_tester_without_timeout_checks_the_function_result():
    def wrong_columns(key, pdfs, state):
        yield pd.DataFrame({"only": [1]})

    with ApplyInPandasWithStateTester(wrong_columns, OUT, STATE, "Update", "NoTimeout", keyColumns="user") as tester:
        with pytest.raises(Exception, match="RESULT_COLUMN_SCHEMA_MISMATCH"):
            tester.test("u1", pd.DataFrame({"v": [1]}))
        assert tester.peekState("u1") is None
        with pytest.raises(ValueError, match="needs timeoutConf"):
            tester.setState("u1", (1,), timeoutTimestampMs=5)
