"""The Python state processors the randomized differential tester draws (``random_queries.py``):
one behaviour, a running count per key with an optional event-time timeout, written for each
of PySpark's Python state APIs (``applyInPandasWithState``, ``transformWithStateInPandas``,
``transformWithState`` with rows), so that the drawn key types, output modes, watermarks and
timeouts meet each API's conversions and handle.

Per key the state is ``(n, last)``: the rows seen and the largest ``id`` (transformWithState's
processors keep it in a value, a list of the ids, or a map by the ids' parity). With a gap, every
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


#: the kinds of state variable a transformWithState processor keeps its count in
STATE_KINDS = ("value", "list", "map")
#: a list state's element and a map state's user key
LIST_ELEMENT = "id LONG"
MAP_KEY = "parity INT"


class _Counter(StatefulProcessor):
    """The behaviour for ``transformWithState``, over the state variable ``state`` of one kind:
    a value ``(n, last)``; a list of the key's ids; or a map from an id's parity to that
    parity's ``(n, last)``. Subclasses read their API's input and make its output rows."""

    def __init__(self, gap_ms: int, every_batch: bool, state_kind: str = "value") -> None:
        self.gap_ms = gap_ms
        self.every_batch = every_batch
        self.state_kind = state_kind

    def init(self, handle: Any) -> None:
        self.handle = handle
        if self.state_kind == "list":
            self.state = handle.getListState("state", LIST_ELEMENT)
        elif self.state_kind == "map":
            self.state = handle.getMapState("state", MAP_KEY, STATE)
        else:
            self.state = handle.getValueState("state", STATE)

    def _read(self, rows: Iterator[Any]) -> tuple[list[int], int]:
        """The ids of a key's input and its latest event time (epoch ms)."""
        raise NotImplementedError

    def _output(self, key: Any, n: int, last: int, final: bool) -> Any:
        """One output row (the API's form: a DataFrame or a Row)."""
        raise NotImplementedError

    def _load(self) -> tuple[int, int]:
        """The key's ``(n, last)`` from its state (``(0, -1)`` with none)."""
        if self.state_kind == "list":
            ids = [int(e[0]) for e in self.state.get()]
            return len(ids), max(ids, default=-1)
        if self.state_kind == "map":
            counts = list(self.state.values())
            return sum(int(c[0]) for c in counts), max((int(c[1]) for c in counts), default=-1)
        return tuple(self.state.get()) if self.state.exists() else (0, -1)  # type: ignore[return-value]

    def _add(self, ids: list[int]) -> None:
        """Count the ids of one call into the key's state."""
        if self.state_kind == "list":
            self.state.appendList([(i,) for i in ids])
        elif self.state_kind == "map":
            for parity in sorted({i % 2 for i in ids}):
                mine = [i for i in ids if i % 2 == parity]
                n, last = self.state.getValue((parity,)) if self.state.containsKey((parity,)) else (0, -1)
                self.state.updateValue((parity,), (int(n) + len(mine), max(int(last), *mine)))
        else:
            n, last = self._load()
            self.state.update((n + len(ids), max(last, *ids)))

    def handleInputRows(self, key: tuple, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        ids, newest = self._read(rows)
        self._add(ids)
        n, last = self._load()
        if self.gap_ms:
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(max(newest, timerValues.getCurrentWatermarkInMs()) + self.gap_ms)
        if self.every_batch:
            yield self._output(key[0], n, last, False)

    def handleExpiredTimer(self, key: tuple, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        n, last = self._load()
        self.state.clear()
        yield self._output(key[0], n, last, True)

    def close(self) -> None:
        pass


class PandasCounter(_Counter):
    """The behaviour for ``transformWithStateInPandas`` (timers in ``EventTime`` mode)."""

    def _read(self, rows: Iterator[pd.DataFrame]) -> tuple[list[int], int]:
        ids: list[int] = []
        newest = None
        for pdf in rows:
            ids += [int(i) for i in pdf["id"]]
            latest = _ms(pdf["ts"].max())
            newest = latest if newest is None else max(newest, latest)
        return ids, newest  # type: ignore[return-value]

    def _output(self, key: Any, n: int, last: int, final: bool) -> pd.DataFrame:
        return _frame(key, n, last, final)


class RowCounter(_Counter):
    """The behaviour for ``transformWithState`` (rows in, rows out)."""

    def _read(self, rows: Iterator[Row]) -> tuple[list[int], int]:
        ids: list[int] = []
        newest = None
        for r in rows:
            ids.append(r.id)
            newest = _ms(r.ts) if newest is None else max(newest, _ms(r.ts))
        return ids, newest  # type: ignore[return-value]

    def _output(self, key: Any, n: int, last: int, final: bool) -> Row:
        return Row(k=key, n=n, last=last, final=final)
