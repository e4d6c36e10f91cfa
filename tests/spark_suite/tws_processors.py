"""The ``StatefulProcessor`` classes of the adapted transformWithState tests
(``test_transform_with_state.py``), after the behaviour of the processors in PySpark's
``python/pyspark/sql/tests/pandas/helper/helper_pandas_transform_with_state.py`` (Spark 4.1).

Every class serves both APIs: built with ``pandas=True`` it is a processor for
``transformWithStateInPandas`` (rows come as pandas DataFrames and it yields DataFrames), with
``pandas=False`` one for ``transformWithState`` (``Row`` objects in and out). The input rows of
these tests have the columns ``id`` (string) and ``temperature`` (int), or ``id`` and
``eventTime`` (timestamp).

Spark's Python workers cannot import ``tests``: this module is registered with cloudpickle to be
shipped by value (at the bottom), like the test modules of the differential suite.
"""

from __future__ import annotations

import calendar
import datetime
import json
import sys
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

INT_VALUE = StructType([StructField("value", IntegerType(), True)])
STRING_VALUE = StructType([StructField("value", StringType(), True)])


# ------------------------------------------------------------------------------------------------
# What the processors share
# ------------------------------------------------------------------------------------------------


class _BothApis(StatefulProcessor):
    """A processor for either API; ``self.pandas`` says which."""

    def __init__(self, pandas: bool = True) -> None:
        self.pandas = pandas

    def emit(self, **columns: Any) -> Any:
        """One output row: a one-row DataFrame (pandas) or a ``Row`` (columns in schema order)."""
        if self.pandas:
            return pd.DataFrame({name: [value] for name, value in columns.items()})
        return Row(**columns)

    def chunks(self, rows: Iterable[Any]) -> Iterator[list]:
        """The input in the pieces the API hands out (a DataFrame each, or a row each), each as
        a list of row dicts."""
        for piece in rows:
            if self.pandas:
                yield piece.to_dict("records")
            else:
                yield [piece.asDict()]

    def close(self) -> None:
        pass


def _temperatures(chunks: Iterable[list]) -> list:
    """Every non-null ``temperature`` of the input."""
    return [r["temperature"] for chunk in chunks for r in chunk if r["temperature"] is not None and not pd.isna(r["temperature"])]


def _epoch_seconds(value: Any) -> int:
    """A timestamp of the input (pandas ``Timestamp`` or naive ``datetime`` of the session time
    zone, UTC in these tests) as whole seconds since the epoch."""
    return calendar.timegm(pd.Timestamp(value).to_pydatetime().timetuple())


def _raises_runtime_error(call: Callable[[], Any], text: str) -> None:
    """``call`` must fail with PySpark's ``PySparkRuntimeError`` mentioning ``text``."""
    try:
        call()
    except PySparkRuntimeError as exc:
        assert text in str(exc), f"unexpected error text: {exc}"
        return
    raise AssertionError(f"expected a PySparkRuntimeError mentioning {text!r}")


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones (for json)."""
    return value.item() if hasattr(value, "item") else value


# ------------------------------------------------------------------------------------------------
# Value state
# ------------------------------------------------------------------------------------------------


class ViolationCounter(_BothApis):
    """Counts each key's rows and, in value state ``numViolations``, its temperatures above 100;
    checks the stored count against what the two input files of the tests give. It also declares
    ``tempState`` and deletes it at once (``deleteIfExists``): any use of it afterwards fails.
    ``ttl_ms`` gives ``numViolations`` a TTL (and its schema as a ``StructType``; without TTL the
    schema is a DDL string)."""

    #: the stored count after the first input file, and after the second
    TOTALS = ({"0": 1, "1": 2}, {"0": 4, "1": 3})

    def __init__(self, pandas: bool = True, ttl_ms: int | None = None) -> None:
        super().__init__(pandas)
        self.ttl_ms = ttl_ms

    def init(self, handle) -> None:
        if self.ttl_ms is None:
            self.violations = handle.getValueState("numViolations", "value int")
        else:
            self.violations = handle.getValueState("numViolations", INT_VALUE, self.ttl_ms)
        self.scratch = handle.getValueState("tempState", INT_VALUE)
        handle.deleteIfExists("tempState")

    def handleInputRows(self, key, rows, timerValues):
        _raises_runtime_error(self.scratch.exists, "Error checking value state exists")
        k = key[0]
        known = self.violations.exists()
        before = self.violations.get()[0] if known else 0
        if known:
            assert before == self.TOTALS[0][k], (k, before)
        temperatures = _temperatures(self.chunks(rows))
        total = before + sum(1 for t in temperatures if t > 100)
        assert total == self.TOTALS[1 if known else 0][k], (k, total)
        self.violations.update((total,))
        yield self.emit(id=k, countAsString=str(len(temperatures)))


class AbsentValueReader(_BothApis):
    """Reads a value state that was never written: it does not exist, ``get`` gives ``None``
    and ``clear`` is harmless."""

    def init(self, handle) -> None:
        self.violations = handle.getValueState("numViolations", INT_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        assert not self.violations.exists()
        assert self.violations.get() is None
        self.violations.clear()
        yield self.emit(id=key[0], countAsString="0")


# ------------------------------------------------------------------------------------------------
# List state
# ------------------------------------------------------------------------------------------------


class ListOps(_BothApis):
    """Two list states written the same way per input piece (``put`` of 120 and 20, then
    ``appendValue`` of 111 (first list) or 222 (second), then ``appendList`` of 120 and 20), read
    back through interleaved iterators; a third list holds one timestamp per piece. ``put`` of
    the second list is given ``Row`` objects, the rest tuples. ``ttl_ms`` puts a TTL on the two
    number lists."""

    def __init__(self, pandas: bool = True, ttl_ms: int | None = None) -> None:
        super().__init__(pandas)
        self.ttl_ms = ttl_ms

    def init(self, handle) -> None:
        temperature = StructType([StructField("temperature", IntegerType(), True)])
        extra = () if self.ttl_ms is None else (self.ttl_ms,)
        self.first = handle.getListState("listState1", temperature, *extra)
        self.second = handle.getListState("listState2", temperature, *extra)
        self.stamps = handle.getListState("listStateTimestamp", StructType([StructField("time", TimestampType(), True)]))

    def handleInputRows(self, key, rows, timerValues):
        counted = 0
        stamps = []
        for chunk in self.chunks(rows):
            self.first.put([(120,), (20,)])
            self.second.put([Row(temperature=120), Row(temperature=20)])
            self.first.appendValue((111,))
            self.second.appendValue((222,))
            self.first.appendList([(120,), (20,)])
            self.second.appendList([(120,), (20,)])
            counted += sum(1 for r in chunk if r["temperature"] is not None)
            now = datetime.datetime.fromtimestamp(timerValues.getCurrentProcessingTimeInMs() / 1000)
            stamps.append((now + datetime.timedelta(minutes=1),))
        a, b = self.first.get(), self.second.get()
        # the iterators advance independently, and a third one starts from the beginning
        assert [next(a)[0], next(b)[0], next(a)[0], next(b)[0]] == [120, 120, 20, 20]
        c = self.first.get()
        assert [next(c)[0], next(c)[0]] == [120, 20]
        assert [next(a)[0], next(b)[0], next(c)[0]] == [111, 222, 111]
        assert [next(a)[0], next(b)[0], next(c)[0]] == [120, 120, 120]
        assert [next(a)[0], next(b)[0], next(c)[0]] == [20, 20, 20]
        for it in (a, b, c):
            assert next(it, None) is None
        if stamps:
            self.stamps.put(stamps)
        yield self.emit(id=key[0], countAsString=str(counted))


class GrowingList(_BothApis):
    """A list of numbers per key and its length in a value state: the first batch writes 0..99
    (key ``0`` with ``put``, other keys with ``appendList``), each later batch checks the list
    against the stored length and extends it by 90 (``put`` of the whole list for key ``0``,
    ``appendList`` of the new numbers for the others)."""

    def init(self, handle) -> None:
        self.numbers = handle.getListState("listState", INT_VALUE)
        self.size = handle.getValueState("listSizeState", StructType([StructField("size", IntegerType(), True)]))

    def handleInputRows(self, key, rows, timerValues):
        for _ in self.chunks(rows):
            pass
        before = list(self.numbers.get())
        if not before:
            assert self.size.get() is None
            fresh = [(i,) for i in range(100)]
            if key == ("0",):
                self.numbers.put(fresh)
            else:
                self.numbers.appendList(fresh)
            self.size.update((len(fresh),))
        else:
            stored = self.size.get()
            assert stored is not None
            n = stored[0]
            assert before == [(i,) for i in range(n)], (n, len(before))
            if key == ("0",):
                self.numbers.put([(i,) for i in range(n + 90)])
            else:
                self.numbers.appendList([(i,) for i in range(n, n + 90)])
            self.size.update((n + 90,))
        after = ",".join(str(v[0]) for v in self.numbers.get())
        yield self.emit(id=key[0], prevElements=",".join(str(v[0]) for v in before), updatedElements=after)


# ------------------------------------------------------------------------------------------------
# Map state
# ------------------------------------------------------------------------------------------------


class MapOps(_BothApis):
    """A map state per key (``name`` -> ``count``): both entries ``key1`` and ``key2`` get the
    key's row count added, the keys, values and entries are read back in order, then ``key1`` is
    removed and the map cleared. With ``ttl_ms`` the map has a TTL (schemas as ``StructType``)
    and a list state ``listState`` is declared beside it, never written."""

    def __init__(self, pandas: bool = True, ttl_ms: int | None = None) -> None:
        super().__init__(pandas)
        self.ttl_ms = ttl_ms

    def init(self, handle) -> None:
        if self.ttl_ms is None:
            self.entries = handle.getMapState("mapState", "name string", "count int")
        else:
            name = StructType([StructField("name", StringType(), True)])
            count = StructType([StructField("count", IntegerType(), True)])
            self.entries = handle.getMapState("mapState", name, count, self.ttl_ms)
            self.unused = handle.getListState("listState", name)

    def handleInputRows(self, key, rows, timerValues):
        n = len(_temperatures(self.chunks(rows)))
        one, two = ("key1",), ("key2",)
        first = second = n
        if self.entries.exists():
            if self.entries.containsKey(one):
                first += self.entries.getValue(one)[0]
            if self.entries.containsKey(two):
                second += self.entries.getValue(two)[0]
        self.entries.updateValue(one, (first,))
        self.entries.updateValue(two, (second,))
        assert [k[0] for k in self.entries.keys()] == ["key1", "key2"]
        assert [v[0] for v in self.entries.values()] == [first, second]
        entries = self.entries.iterator()
        assert next(entries)[0] == one
        assert next(entries)[1] == (second,)
        self.entries.removeKey(one)
        assert not self.entries.containsKey(one)
        assert self.entries.exists()
        self.entries.clear()
        assert not self.entries.exists()
        yield self.emit(id=key[0], countAsString=str(n))


# ------------------------------------------------------------------------------------------------
# Timers
# ------------------------------------------------------------------------------------------------


class ProcTimeCounter(_BothApis):
    """A running row count per key (as a string, in value state ``count_state``); key ``0``
    registers a processing-time timer 1 ms ahead in each batch, and a timer that fires clears the
    count and deletes itself. Inside ``handleExpiredTimer``, ``listTimers`` is read twice (both
    reads agree) and lists two timers when it lists any. Output: the count with the batch's
    processing time, or ``-1`` with the timer's time."""

    def init(self, handle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count_state", STRING_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        count = int(self.count.get()[0]) if self.count.exists() else 0
        now = timerValues.getCurrentProcessingTimeInMs()
        if key == ("0",):
            self.handle.registerTimer(now + 1)
        count += sum(len(chunk) for chunk in self.chunks(rows))
        self.count.update((str(count),))
        yield self.emit(id=key[0], countAsString=str(count), timeValues=str(now))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        listed = list(self.handle.listTimers())
        again = []
        for i, t in enumerate(self.handle.listTimers()):
            again.append(t)
            assert again[i] == listed[i]
        assert again == listed
        if listed:
            assert len(listed) == 2, listed
        self.count.clear()
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.handle.deleteTimer(expiry)
        yield self.emit(id=key[0], countAsString="-1", timeValues=str(expiry))


class MaxEventTime(_BothApis):
    """The largest event time (seconds) seen per key, in value state ``max_state``; each batch
    registers an event-time timer at the current watermark. A timer that fires clears the
    maximum, deletes itself and reports ``<key>-expired`` with its time."""

    def init(self, handle) -> None:
        self.handle = handle
        self.largest = handle.getValueState("max_state", STRING_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        seconds = [_epoch_seconds(r["eventTime"]) for chunk in self.chunks(rows) for r in chunk]
        current = int(self.largest.get()[0]) if self.largest.exists() else 0
        largest = str(max(current, max(seconds)))
        self.largest.update((largest,))
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
        yield self.emit(id=key[0], timestamp=largest)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.largest.clear()
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.handle.deleteTimer(expiry)
        yield self.emit(id=f"{key[0]}-expired", timestamp=str(expiry))


class MinEventTime(_BothApis):
    """The smallest event time (seconds) seen per key, in value state ``min_state``; no timers."""

    def init(self, handle) -> None:
        self.smallest = handle.getValueState("min_state", STRING_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        seconds = [_epoch_seconds(r["eventTime"]) for chunk in self.chunks(rows) for r in chunk]
        current = int(self.smallest.get()[0]) if self.smallest.exists() else sys.maxsize
        smallest = str(min(current, min(seconds)))
        self.smallest.update((smallest,))
        yield self.emit(id=key[0], timestamp=smallest)


class FirstEventTime(_BothApis):
    """No state: answers each key with the first event time of its (last) input piece, as the
    output's event-time column."""

    def init(self, handle) -> None:
        pass

    def handleInputRows(self, key, rows, timerValues):
        first = None
        for chunk in self.chunks(rows):
            if first is None or self.pandas:
                first = chunk[0]["eventTime"]
        yield self.emit(id=key[0], outputTimestamp=first)


# ------------------------------------------------------------------------------------------------
# Initial state
# ------------------------------------------------------------------------------------------------


class InitialStateSum(_BothApis):
    """A running sum of the temperatures per key (value state ``value_state``), started from the
    initial state's ``initVal``; with two grouping keys the output has both (``id1``, ``id2``)."""

    #: the initial state the single-key tests give
    INITIAL = {"0": 789, "3": 987}

    def init(self, handle) -> None:
        self.handle = handle
        self.total = handle.getValueState("value_state", INT_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        total = self.total.get()[0] if self.total.exists() else 0
        total += sum(_temperatures(self.chunks(rows)))
        self.total.update((total,))
        if len(key) > 1:
            yield self.emit(id1=key[0], id2=key[1], value=str(total))
        else:
            yield self.emit(id=key[0], value=str(total))

    def initial_values(self, initialState) -> list:
        """The ``initVal`` of each initial-state row handed over in one call."""
        if self.pandas:
            return [_plain(v) for v in initialState["initVal"].tolist()]
        return [initialState.initVal]

    def handleInitialState(self, key, initialState, timerValues) -> None:
        value = self.initial_values(initialState)[0]
        self.total.update((value,))
        if len(key) == 1:
            assert self.INITIAL[key[0]] == value, (key, value)


class InitialStateWithTimers(InitialStateSum):
    """:class:`InitialStateSum` that also registers, for each initial-state key, a processing-time
    timer already due (1 ms before now); a timer that fires deletes itself and reports
    ``<key>-expired`` with its time."""

    def handleInitialState(self, key, initialState, timerValues) -> None:
        super().handleInitialState(key, initialState, timerValues)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() - 1)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.handle.deleteTimer(expiry)
        yield self.emit(id=f"{key[0]}-expired", value=str(expiry))


class InitialStateIntoList(InitialStateSum):
    """:class:`InitialStateSum` whose initial state goes, value by value, into a list state
    ``list_state`` (the sum starts from nothing)."""

    def init(self, handle) -> None:
        super().init(handle)
        self.initial = handle.getListState("list_state", INT_VALUE)

    def handleInitialState(self, key, initialState, timerValues) -> None:
        for value in self.initial_values(initialState):
            self.initial.appendValue((value,))


# ------------------------------------------------------------------------------------------------
# Composite types
# ------------------------------------------------------------------------------------------------


class CompositeState(_BothApis):
    """Value, list and map state of nested types (arrays of arrays, arrays of structs given as
    dicts and as tuples, maps of arrays and of maps). The map's user key is given as a bare
    string (PySpark reads any sequence as the key's fields).

    Spark's processor writes its addresses as named tuples and writes back the ``Row`` objects
    it read: PySpark 4.1's state client rebuilds every nested tuple with ``type(v)(generator)``,
    which fails for both (a named tuple misses its fields, a ``Row`` holds the generator), so
    here nested structs go in as plain tuples or dicts."""

    TAGS = [["dummy1", "dummy2"], ["dummy3"]]
    METADATA = [{"key": "env", "value": "prod"}, {"key": "region", "value": "us-west"}]
    ATTRIBUTES = {"key1": [1], "key2": [10]}
    CONFS = {"e1": {"e2": 5, "e3": 10}}
    ADDRESS = [(1, "Seattle"), (3, "SF")]

    def init(self, handle) -> None:
        pair = StructType([StructField("key", StringType()), StructField("value", StringType())])
        place = StructType([StructField("road_id", IntegerType()), StructField("city", StringType())])
        obj = StructType(
            [
                StructField("id", ArrayType(IntegerType())),
                StructField("tags", ArrayType(ArrayType(StringType()))),
                StructField("metadata", ArrayType(pair)),
                StructField("address", ArrayType(place)),
            ]
        )
        entry = StructType(
            [
                StructField("id", IntegerType(), True),
                StructField("attributes", MapType(StringType(), ArrayType(IntegerType())), True),
                StructField("confs", MapType(StringType(), MapType(StringType(), IntegerType()), True), True),
            ]
        )
        self.obj = handle.getValueState("obj_state", obj)
        self.objs = handle.getListState("list_state", obj)
        self.entries = handle.getMapState("map_state", "name string", entry)

    def handleInputRows(self, key, rows, timerValues):
        k = key[0]
        total = sum(_temperatures(self.chunks(rows)))
        if self.obj.exists():
            ids, tags, metadata, address = self.obj.get()
            assert tags == self.TAGS, tags
            assert metadata == [Row(**m) for m in self.METADATA], metadata
            assert address == [Row(road_id=r, city=c) for r, c in self.ADDRESS], address
            ids = [int(x + total) for x in ids]
        else:
            ids = [0]
        self.obj.update((ids, self.TAGS, self.METADATA, self.ADDRESS))

        kept = []
        for item_ids, tags, metadata, address in self.objs.get():
            item_ids.append(total)
            kept.append((item_ids, tags, [m.asDict() for m in metadata], [tuple(a) for a in address]))
        if not kept:
            kept.append((ids, self.TAGS, self.METADATA, self.ADDRESS))
        self.objs.put(kept)
        flat = [i for item in kept for i in item[0]]

        if not self.entries.containsKey(k):
            self.entries.updateValue(k, (0, self.ATTRIBUTES, self.CONFS))
        else:
            entry_id, attributes, confs = self.entries.getValue(k)
            attributes[k] = [total]
            confs.setdefault("e1", {})[k] = total
            self.entries.updateValue(k, (entry_id, attributes, confs))
        _, attributes, confs = self.entries.getValue(k)
        yield self.emit(
            id=k,
            value_arr=",".join(map(str, ids)),
            list_state_arr=",".join(map(str, flat)),
            map_state_arr=json.dumps(attributes, sort_keys=True, default=_plain),
            nested_map_state_arr=json.dumps(confs, sort_keys=True, default=_plain),
        )


class CompositeOutput(_BothApis):
    """A running row count per key, answered with nested output columns built from it: a
    string, an array and a map of strings, an array and a map of structs (each struct with an
    int, a double, an array and a map)."""

    def init(self, handle) -> None:
        self.count = handle.getValueState("count_state", INT_VALUE)

    def inner(self, i: int, scale: int, factor: float) -> Any:
        fields = {
            "intValue": i * scale,
            "doubleValue": float(i * factor),
            "arrayValue": [f"elem_{i}_{j}" for j in range(i + 1)],
            "mapValue": {f"map_{i}_{j}": f"val_{i}_{j}" for j in range(i + 1)},
        }
        return fields if self.pandas else Row(**fields)

    def handleInputRows(self, key, rows, timerValues):
        count = self.count.get()[0] if self.count.exists() else 0
        count += sum(len(chunk) for chunk in self.chunks(rows))
        self.count.update((count,))
        yield self.emit(
            primitiveValue=f"key_{key[0]}_count_{count}",
            listOfPrimitive=[f"item_{i}" for i in range(count)],
            mapOfPrimitive={f"key{i}": f"value{i}" for i in range(count)},
            listOfComposite=[self.inner(i, 1, 1.5) for i in range(count)],
            mapOfComposite={f"nested_key{i}": self.inner(i, 10, 2.5) for i in range(count)},
        )


class LargeValues(_BothApis):
    """Writes and reads back 512 KB strings in a value, a list and a map state."""

    SIZE = 512 * 1024

    def init(self, handle) -> None:
        self.value = handle.getValueState("valueState", STRING_VALUE)
        self.items = handle.getListState("listState", STRING_VALUE)
        self.entries = handle.getMapState("mapState", "key string", "value string")

    def handleInputRows(self, key, rows, timerValues):
        for _ in self.chunks(rows):
            pass
        big = "a" * self.SIZE
        self.value.update((big,))
        self.items.put([(big,), (big + "b",), (big + "c",)])
        self.entries.updateValue(("large_string_key",), (big,))
        yield self.emit(
            id=key[0],
            valueStateResult=self.value.get()[0],
            listStateResult=",".join(v[0] for v in self.items.get()),
            mapStateResult=f"large_string_key:{self.entries.getValue(('large_string_key',))[0]}",
        )


# ------------------------------------------------------------------------------------------------
# Pieces of the input
# ------------------------------------------------------------------------------------------------


class PieceCounter(StatefulProcessor):
    """(pandas only) How many DataFrames each key's rows came in; with ``initial`` it also takes
    an initial state into a value state."""

    def __init__(self, initial: bool = False) -> None:
        self.initial = initial

    def init(self, handle) -> None:
        if self.initial:
            self.value = handle.getValueState("value_state", INT_VALUE)

    def handleInputRows(self, key, rows, timerValues):
        pieces = sum(1 for _ in rows)
        yield pd.DataFrame({"id": [key[0]], "chunkCount": [pieces]})

    def handleInitialState(self, key, initialState, timerValues) -> None:
        self.value.update((_plain(initialState["initVal"].iloc[0]),))

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------
# State schemas across restarts (Avro encoding)
# ------------------------------------------------------------------------------------------------


class StateShape(_BothApis):
    """Writes one value state ``state`` whose schema is the class's ``SCHEMA``, and answers with
    the stored struct: ``fresh`` (from the key) when absent, else ``carried`` (from the stored
    tuple, as a dict by field name) -> the tuple to store. Subclasses pick the schema and rules."""

    SCHEMA = StructType([StructField("id", IntegerType(), True), StructField("name", StringType(), True)])

    def init(self, handle) -> None:
        self.state = handle.getValueState("state", self.SCHEMA)

    def fresh(self, key_id: int) -> dict:
        return {"id": key_id, "name": f"name-{key_id}"}

    def carried(self, key_id: int, stored: dict) -> tuple[dict, dict]:
        """(what to answer, what to store) given the stored struct; by default the key's own."""
        value = self.fresh(key_id)
        return value, value

    def handleInputRows(self, key, rows, timerValues):
        for _ in self.chunks(rows):
            pass
        key_id = int(key[0])
        names = self.SCHEMA.names
        if self.state.exists():
            shown, stored = self.carried(key_id, dict(zip(names, self.state.get())))
        else:
            shown = stored = self.fresh(key_id)
        self.state.update(tuple(stored[n] for n in names))
        yield self.emit(id=key[0], value=shown if self.pandas else Row(**{n: shown[n] for n in names}))


class BasicShape(StateShape):
    """(id int, name string): always the key's own value."""


class NotNullableShape(StateShape):
    """(id int not null, name string not null)."""

    SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("name", StringType(), False)])


class AddedFieldsShape(StateShape):
    """Three fields more than :class:`BasicShape`; answers the stored struct (new fields null
    when the stored row had none) and stores it with ``"0"`` appended to the name."""

    SCHEMA = StructType(
        [
            StructField("id", IntegerType(), True),
            StructField("name", StringType(), True),
            StructField("count", IntegerType(), True),
            StructField("active", BooleanType(), True),
            StructField("score", FloatType(), True),
        ]
    )

    def fresh(self, key_id: int) -> dict:
        return {"id": key_id, "name": f"name-{key_id}", "count": 100, "active": True, "score": 99.9}

    def handleInputRows(self, key, rows, timerValues):
        for _ in self.chunks(rows):
            pass
        key_id = int(key[0])
        names = self.SCHEMA.names
        shown = dict(zip(names, self.state.get())) if self.state.exists() else self.fresh(key_id)
        stored = dict(shown, name=shown["name"] + "0")
        self.state.update(tuple(stored[n] for n in names))
        yield self.emit(id=key[0], value=shown if self.pandas else Row(**{n: shown[n] for n in names}))


class RemovedFieldsShape(StateShape):
    """(id, name) again after :class:`AddedFieldsShape`: keeps the stored name."""

    def carried(self, key_id: int, stored: dict) -> tuple[dict, dict]:
        value = {"id": key_id, "name": stored["name"]}
        return value, value


class ReorderedFieldsShape(AddedFieldsShape):
    """The fields of :class:`AddedFieldsShape` in another order."""

    SCHEMA = StructType(
        [
            StructField("name", StringType(), True),
            StructField("id", IntegerType(), True),
            StructField("score", FloatType(), True),
            StructField("count", IntegerType(), True),
            StructField("active", BooleanType(), True),
        ]
    )


class UpcastShape(StateShape):
    """``id`` widened to long; adds the stored id plus one to the key's."""

    SCHEMA = StructType([StructField("id", LongType(), True), StructField("name", StringType(), True)])

    def carried(self, key_id: int, stored: dict) -> tuple[dict, dict]:
        value = {"id": key_id + stored["id"] + 1, "name": f"name-{key_id}"}
        return value, value


# Spark's Python workers cannot import this module: ship its classes by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
