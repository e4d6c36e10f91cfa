"""The Python state processors the randomized differential tester draws (``random_queries.py``):
one behaviour, a running count per key with an optional event-time timeout, written for each
of PySpark's Python state APIs (``applyInPandasWithState``, ``transformWithStateInPandas``,
``transformWithState`` with rows), so that the drawn key types, output modes, watermarks and
timeouts meet each API's conversions and handle.

Per key the state is ``(n, last)``: the rows seen and the largest ``id``. With a gap, every
batch of a key moves its timeout (or its one timer) to the key's latest event time plus the gap,
never before the watermark; when it fires, the key's final row is emitted and its state goes.
With ``every_batch``, a key's row is also emitted each time it has input.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

#: the output columns after the key ``k``
OUTPUT = "n LONG, last LONG, final BOOLEAN"
#: the state's schema
STATE = "n LONG, last LONG"


def _ms(ts: Any) -> int:
    """Epoch milliseconds of a timestamp as pandas or a Row gives it (naive: the session's zone
    is UTC in the tests)."""
    return int(pd.Timestamp(ts).value // 1_000_000)


def _frame(key: Any, n: int, last: int, final: bool) -> pd.DataFrame:
    return pd.DataFrame({"k": [key], "n": [n], "last": [last], "final": [final]})


def apply_in_pandas_function(gap_ms: int, every_batch: bool) -> Callable[..., Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function (``EventTimeTimeout`` when ``gap_ms``)."""

    def func(key: tuple, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:
            n, last = state.get
            state.remove()
            yield _frame(key[0], n, last, True)
            return
        n, last = state.get if state.exists else (0, -1)
        newest = None
        for pdf in frames:
            n += len(pdf)
            last = max(last, int(pdf["id"].max()))
            latest = _ms(pdf["ts"].max())
            newest = latest if newest is None else max(newest, latest)
        state.update((n, last))
        if gap_ms:
            state.setTimeoutTimestamp(max(newest, state.getCurrentWatermarkMs()) + gap_ms)
        if every_batch:
            yield _frame(key[0], n, last, False)

    return func


class PandasCounter(StatefulProcessor):
    """The behaviour for ``transformWithStateInPandas`` (timers in ``EventTime`` mode)."""

    def __init__(self, gap_ms: int, every_batch: bool) -> None:
        self.gap_ms = gap_ms
        self.every_batch = every_batch

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", STATE)

    def handleInputRows(self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        n, last = self.state.get() if self.state.exists() else (0, -1)
        newest = None
        for pdf in rows:
            n += len(pdf)
            last = max(last, int(pdf["id"].max()))
            latest = _ms(pdf["ts"].max())
            newest = latest if newest is None else max(newest, latest)
        self.state.update((n, last))
        if self.gap_ms:
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(max(newest, timerValues.getCurrentWatermarkInMs()) + self.gap_ms)
        if self.every_batch:
            yield _frame(key[0], n, last, False)

    def handleExpiredTimer(self, key: tuple, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        n, last = self.state.get()
        self.state.clear()
        yield _frame(key[0], n, last, True)

    def close(self) -> None:
        pass


class RowCounter(StatefulProcessor):
    """The behaviour for ``transformWithState`` (rows in, rows out)."""

    def __init__(self, gap_ms: int, every_batch: bool) -> None:
        self.gap_ms = gap_ms
        self.every_batch = every_batch

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", STATE)

    def handleInputRows(self, key: tuple, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        n, last = self.state.get() if self.state.exists() else (0, -1)
        newest = None
        for r in rows:
            n += 1
            last = max(last, r.id)
            newest = _ms(r.ts) if newest is None else max(newest, _ms(r.ts))
        self.state.update((n, last))
        if self.gap_ms:
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(max(newest, timerValues.getCurrentWatermarkInMs()) + self.gap_ms)
        if self.every_batch:
            yield Row(k=key[0], n=n, last=last, final=False)

    def handleExpiredTimer(self, key: tuple, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        n, last = self.state.get()
        self.state.clear()
        yield Row(k=key[0], n=n, last=last, final=True)

    def close(self) -> None:
        pass
