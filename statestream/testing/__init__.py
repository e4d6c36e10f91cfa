"""Test helpers for statestream queries.

``MemoryStream`` is Spark's test source (``org.apache.spark.sql.execution.streaming.MemoryStream``,
which PySpark does not expose): every ``addData`` call becomes the next offset, and ``toDF()`` is
the streaming DataFrame over it::

    from statestream.testing import MemoryStream

    stream = MemoryStream(ss, "k STRING, v INT")      # ss: a StreamingSession (or a SparkSession)
    query = stream.toDF().groupBy("k").count().writeStream.format("memory").queryName("c") ...
    stream.addData([("a", 1), ("b", 2)])
    query.processAllAvailable()

``TwsTester`` and ``ApplyInPandasWithStateTester`` unit-test the Python stateful code itself: a
``transformWithState`` processor or an ``applyInPandasWithState`` function runs on rows the test
gives for one key, with no streaming query and a manual clock, and the test reads and sets its
state between calls. Both run statestream's own operator code over its real state store (in a
temporary directory), so state, timer, TTL and timeout semantics are the engine's::

    from statestream.testing import TwsTester

    tester = TwsTester(MyProcessor(), timeMode="ProcessingTime")
    assert tester.test("a", [Row(v=1)]) == [Row(key="a", count=1)]
    assert tester.peekValueState("count", "a") == (1,)
    fired = tester.advanceProcessingTime(60_000)   # due timers fire: handleExpiredTimer's rows
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors.base import add_note
from statestream.operators.aggregate import PARTITION_ID_COLUMN
from statestream.operators.flat_map_groups_with_state import (
    EVENT_TIME_TIMEOUT,
    GROUP_STATE_FIELD,
    NO_TIMEOUT,
    NO_TIMESTAMP,
    PROCESSING_TIME_TIMEOUT,
    TIMEOUT_TIMESTAMP_FIELD,
    FlatMapGroupsWithStateInfo,
    FlatMapGroupsWithStateStep,
)
from statestream.operators.python_state_values import from_session_wall_clock, session_zone, to_session_wall_clock
from statestream.operators.state_step import StateStoreTask
from statestream.operators.stateful import older_than_watermark
from statestream.operators.stateful_processor_handle import (
    CLOSED,
    DATA_PROCESSED,
    EVENT_TIME,
    INITIALIZED,
    NO_TIME,
    PROCESSING_TIME,
    TIME_MODES,
    TIMER_PROCESSED,
    StatefulProcessorHandleImpl,
    TaskState,
    timer_threshold,
    timer_values,
)
from statestream.operators.transform_with_state import check_pandas_results, fire_expired_timers
from statestream.plan.transform_with_state import declared_state_variables
from statestream.api.reader import memory_stream_df
from statestream.api.session import StreamingSession
from statestream.sources.memory import MemoryStream as _MemoryStreamSource
from statestream.state.provider import clear_provider_cache, get_provider
from statestream.state.store import FOUND_COLUMN, StateStoreConf, StateStoreId

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["MemoryStream", "TwsTester", "ApplyInPandasWithStateTester"]


class MemoryStream(_MemoryStreamSource):
    """A ``MemoryStream`` bound to a session: ``addData``/``add_data`` add one batch of rows
    (returning its offset, ``0`` for the first), ``toDF``/``to_df`` give the streaming DataFrame.

    Parameters
    ----------
    session:
        A ``statestream.StreamingSession``, or a ``SparkSession`` (wrapped in a new
        ``StreamingSession``; its queries are then listed in that session's ``streams``).
    schema:
        ``StructType`` or DDL string; a one-column schema takes bare values (``addData([1, 2])``).
    """

    def __init__(self, session: Any, schema: "StructType | str") -> None:
        if not isinstance(session, StreamingSession):
            session = StreamingSession(session)
        super().__init__(session.sparkSession, schema)
        del self.to_df  # the base class sets it per instance; here it is the method below
        self.session = session

    def to_df(self) -> Any:
        """The streaming DataFrame over this stream (each call gives a new one, as in Spark)."""
        return memory_stream_df(self.session, self)

    toDF = to_df  # noqa: N815 - Spark's name


# ==============================================================================================
# Unit-testing a transformWithState processor or an applyInPandasWithState function
# ==============================================================================================


def _session_time_zone() -> str:
    """The active SparkSession's session time zone, else UTC (a tester needs no session)."""
    try:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
    except Exception:  # noqa: BLE001 - no usable PySpark session: the documented default
        active = None
    if active is not None:
        zone = active.conf.get("spark.sql.session.timeZone")
        if zone:
            return str(zone)
    return "UTC"


def _struct_type(schema: Any, what: str) -> Any:
    """A ``StructType`` from a ``StructType`` or a DDL string (which needs an active session)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            return StructType.fromDDL(schema)
        except Exception as exc:
            add_note(exc, f"{what} {schema!r}: a DDL string needs an active SparkSession; pass a StructType to test without one")
            raise
    msg = f"{what} must be a StructType or a DDL string, got {type(schema).__name__}"
    raise TypeError(msg)


def _key_values(key: Any) -> tuple:
    """A grouping key as a tuple: a scalar is a one-column key; a tuple, list or ``Row`` is a
    key of several columns. NumPy scalars become Python ones (as Arrow hands keys back)."""
    values = tuple(key) if isinstance(key, (tuple, list)) else (key,)
    return tuple(v.item() if isinstance(v, np.generic) else v for v in values)


def _shown_key(values: tuple) -> Any:
    """A key as the tester's caller passes it: the bare value of a one-column key."""
    return values[0] if len(values) == 1 else values


def _key_names(key_columns: "str | Sequence[str] | None", n: int) -> list[str]:
    if key_columns is None:
        return ["key"] if n == 1 else [f"key{i}" for i in range(n)]
    names = [key_columns] if isinstance(key_columns, str) else list(key_columns)
    if len(names) != n:
        msg = f"keyColumns names {len(names)} column(s) ({', '.join(names)}), but the key has {n} value(s)"
        raise ValueError(msg)
    return names


class _Clock:
    """The tester's manual clock: the batch's processing time and the event-time watermark.

    Neither moves backwards (Spark's batch timestamps and watermarks never do); equal values are
    accepted, so ``advance...(0)`` is a no-op move."""

    def __init__(self, watermark_ms: int | None) -> None:
        self.processing_time_ms = 0
        self.watermark_ms = watermark_ms

    def set_processing_time(self, ms: int) -> None:
        ms = int(ms)
        if ms < self.processing_time_ms:
            msg = f"processing time must not move backwards: it is {self.processing_time_ms} ms, got {ms} ms"
            raise ValueError(msg)
        self.processing_time_ms = ms

    def set_watermark(self, ms: int) -> bool:
        """Move the watermark; whether it moved forward (what makes Spark run a no-data batch)."""
        ms = int(ms)
        before = self.watermark_ms
        if before is not None and ms < before:
            msg = f"the watermark must not move backwards: it is {before} ms, got {ms} ms"
            raise ValueError(msg)
        self.watermark_ms = ms
        return before is None or ms > before


class _StateDir:
    """A temporary state root with its own run id: the stores of one tester. Removed (files and
    the process-wide cached providers of the run) when the tester is closed or collected."""

    def __init__(self) -> None:
        import shutil
        import tempfile
        import uuid
        import weakref

        self.root = tempfile.mkdtemp(prefix="statestream-tester-")
        self.run_id = f"tester-{uuid.uuid4().hex}"

        def cleanup(root: str, run_id: str) -> None:
            clear_provider_cache(run_id)
            shutil.rmtree(root, ignore_errors=True)

        self._finalizer = weakref.finalize(self, cleanup, self.root, self.run_id)

    def provider(self, name: str, key_schema: pa.Schema, value_schema: pa.Schema) -> Any:
        """The engine's provider of store ``name`` (partition 0 of operator 0)."""
        sid = StateStoreId(self.root, 0, 0, name)
        return get_provider(sid, key_schema, value_schema, StateStoreConf(), self.run_id)

    def delete(self, name: str) -> bool:
        """Remove every file of store ``name`` (the engine's ``deleteIfExists`` of a variable the
        batch did not declare); whether there were any."""
        files = CheckpointFileManager(self.root).child(StateStoreId(self.root, 0, 0, name).relative_dir)
        names = files.list() if files.exists() else []
        for n in names:
            files.delete(n)
        return bool(names)

    def close(self) -> None:
        self._finalizer()


class _Results:
    """What a processor yields in one batch, consumed at once (so that its state calls run under
    the key being processed, as in the engine) and checked as PySpark's worker checks it."""

    def __init__(self, use_pandas: bool) -> None:
        self.use_pandas = use_pandas
        self.items: list = []

    def add(self, result: Any) -> None:
        if result is None:
            return
        if not self.use_pandas:
            self.items.extend(result)
            return

        self.items.extend(pdf for pdf in check_pandas_results(result) if len(pdf))

    def value(self) -> Any:
        """A list of ``Row`` (row processors), or one pandas DataFrame (empty: no columns)."""
        if not self.use_pandas:
            return list(self.items)
        import pandas as pd

        return pd.concat(self.items, ignore_index=True) if self.items else pd.DataFrame()


class TwsTester:
    """Runs a ``transformWithState`` / ``transformWithStateInPandas`` processor on given rows,
    without a streaming query, and lets the test look at and set its state in between.

    PySpark after 4.1 has a tester of this name (``pyspark.sql.streaming.tws_tester``) over a
    simplified in-memory state where TTL is ignored; this one has its methods and arguments,
    but every call runs statestream's own engine code on the processor: the handle,
    value/list/map state, timers and TTL of ``operators/stateful_processor_handle.py`` over the
    real state store (a temporary directory, one store per variable, a version committed per
    call). What a processor does here is what it does in a statestream query, and so (the
    engine being checked against Spark's) in a Spark one. Hence these differences from
    Spark's tester: a timer already due
    fires in the batch of the :meth:`test` call that registered it; a key whose rows are all
    dropped (or none given) gets no ``handleInputRows`` call; TTL expires values; the
    processor is copied per call rather than initialised once.

    **Every call is one micro-batch** of the engine, on one partition:

    1. a fresh copy of the processor (as each Spark task deserialises its own) gets
       ``init(handle)``;
    2. :meth:`test` / :meth:`testInPandas`: with an ``eventTimeExtractor``, rows at or below
       the watermark are dropped; the key's rows, if any are left, go to one
       ``handleInputRows`` call;
    3. the timers of *every* key that are due fire, in time order: those at or below the
       processing time (``ProcessingTime`` mode) or the watermark (``EventTime`` mode);
    4. ``close()``; in ``ProcessingTime`` mode the TTL cleanup drops expired values;
    5. every store commits. If the processor raises, nothing is committed: the state stays as
       it was before the call, and the exception has a note naming the key.

    **The clock is manual.** Processing time (the batch timestamp) and the watermark start at
    0 and only move forward, by :meth:`setProcessingTime` / :meth:`advanceProcessingTime` and
    :meth:`setWatermark` / :meth:`advanceWatermark`. Moving them runs at once the no-data batch
    Spark's engine would run then (in ``ProcessingTime`` mode on every move; in ``EventTime``
    mode when the watermark moved forward) and returns what its timers emitted, as Spark's
    tester does; :meth:`fireTimers` runs such a batch at the current time on demand. TTL reads
    use the current processing time, so an expired value reads as absent (``peek*State`` too).
    One watermark serves both Spark's late-row filter and its timer threshold: after the
    no-data batch a move runs, the engine's two watermarks are equal anyway.

    Parameters
    ----------
    processor:
        The ``StatefulProcessor`` (PySpark's class). It is never modified: each call works on a
        copy, so attributes it sets on itself do not survive a call, as in a query.
    initialStateRow, initialStatePandas:
        Initial state, handled at construction as the first batch's initial state is (keys in
        sorted order; timers due then fire on the next call). Rows: ``[(key, Row), ...]``, one
        ``handleInitialState`` call per row. Pandas: ``[(key, DataFrame), ...]`` or one
        DataFrame holding the ``keyColumns``; one call per key with all its rows.
    timeMode:
        ``"None"``, ``"ProcessingTime"`` or ``"EventTime"`` (any case).
    outputMode:
        ``"Append"``, ``"Update"`` or ``"Complete"``; kept for parity with Spark (a processor
        does not see it).
    eventTimeExtractor:
        ``row -> event time in ms`` (a ``Row``, or a row of the pandas DataFrame): rows at or
        below the watermark are dropped before ``handleInputRows``, as the engine drops late
        rows of a watermarked input. Spark's tester requires it in ``EventTime`` mode; here it
        is optional.
    keyColumns:
        Names of the grouping-key columns (default ``key``, or ``key0``, ``key1``... for a key
        of several columns): the key columns of an initial-state DataFrame.
    keySchema:
        The key's types (``StructType``, ``pyarrow.Schema`` or DDL string); by default inferred
        from the first key used (``str`` -> string, ``int`` -> bigint, ...). A key is given as a
        scalar, or a tuple for several columns; the processor receives it as the tuple the
        engine passes.
    timeZone:
        Session time zone of timestamps in the state; default: the active SparkSession's, else
        UTC.

    Notes
    -----
    State schemas the processor gives as DDL strings are parsed by PySpark, which needs an
    active SparkSession; ``StructType`` schemas need none, and then no Spark runs at all.

    Examples
    --------
    With ``RunningCount`` a processor keeping a count per key in the value state ``count``::

        tester = TwsTester(RunningCount(), timeMode="ProcessingTime")
        tester.test("a", [Row(v=1), Row(v=2)])     # [Row(key='a', count=2)]
        tester.peekValueState("count", "a")        # (2,)
        tester.setValueState("count", "b", (10,))
        tester.advanceProcessingTime(60_000)       # what the timers due by then emitted
    """

    def __init__(
        self,
        processor: Any,
        initialStateRow: "list[tuple[Any, Any]] | None" = None,  # noqa: N803 - Spark's names
        initialStatePandas: Any = None,  # noqa: N803
        timeMode: str = "None",  # noqa: N803
        outputMode: str = "Append",  # noqa: N803
        eventTimeExtractor: "Callable[[Any], int] | None" = None,  # noqa: N803
        *,
        keyColumns: "str | Sequence[str] | None" = None,  # noqa: N803
        keySchema: Any = None,  # noqa: N803
        timeZone: str | None = None,  # noqa: N803
    ) -> None:
        mode = str(timeMode).lower()
        if mode not in TIME_MODES:
            msg = f"timeMode must be one of None, ProcessingTime, EventTime; got {timeMode!r}"
            raise ValueError(msg)
        if str(outputMode).lower() not in ("append", "update", "complete"):
            msg = f"outputMode must be one of Append, Update, Complete; got {outputMode!r}"
            raise ValueError(msg)
        if initialStateRow is not None and initialStatePandas is not None:
            msg = "give initialStateRow or initialStatePandas, not both"
            raise ValueError(msg)
        self.processor = processor
        self.timeMode = mode
        self.outputMode = outputMode
        self._event_time = eventTimeExtractor
        self._key_columns = keyColumns
        self._key_schema: pa.Schema | None = _arrow_key_schema(keySchema) if keySchema is not None else None
        self._zone_name = timeZone or _session_time_zone()
        self._zone = session_zone(self._zone_name)
        self._clock = _Clock(0 if mode == EVENT_TIME else None)
        self._use_pandas: bool | None = None
        self._variables = self._declared_variables()
        self._dir = _StateDir()
        self._version = 0
        #: (key schema, value schema) of every store created, all committed in each batch
        self._stores: dict[str, tuple[pa.Schema, pa.Schema]] = {}
        if initialStateRow is not None:
            self._use_pandas = False
            self._initial_state([(k, [r]) for k, r in initialStateRow])
        elif initialStatePandas is not None:
            self._use_pandas = True
            self._initial_state(self._pandas_initial_state(initialStatePandas))

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the tester's state directory (also done when the tester is collected)."""
        self._dir.close()

    def __enter__(self) -> "TwsTester":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- running the processor ------------------------------------------------------------------

    def test(self, key: Any, input: "list[Any]") -> "list[Any]":  # noqa: A002 - Spark's name
        """One micro-batch with ``input`` (``Row`` objects) as the rows of ``key``; returns what
        ``handleInputRows``, then any timer that fired, emitted (``transformWithState``)."""
        self._use_pandas = False
        rows = list(input)
        if self._event_time is not None:
            rows = self._drop_late(rows, [self._event_time(r) for r in rows])
        return self._run_batch(key, rows if rows else None).value()

    def testInPandas(self, key: Any, input: Any) -> Any:  # noqa: N802,A002 - Spark's names
        """One micro-batch with the pandas DataFrame ``input`` as the rows of ``key``; returns
        one DataFrame of what ``handleInputRows``, then any timer that fired, emitted
        (``transformWithStateInPandas``; an empty ``DataFrame()`` when nothing was)."""
        self._use_pandas = True
        pdf = input.reset_index(drop=True)
        if self._event_time is not None and len(pdf):
            times = [self._event_time(row) for _, row in pdf.iterrows()]
            keep = ~np.asarray(self._late_mask(times), dtype=bool)
            pdf = pdf[keep].reset_index(drop=True)
        return self._run_batch(key, pdf if len(pdf) else None).value()

    def fireTimers(self) -> Any:  # noqa: N802
        """Run a no-data batch at the current clock: the due timers fire (and, in
        ``ProcessingTime`` mode, the TTL cleanup runs); returns what the timers emitted."""
        return self._run_batch(None, None).value()

    # -- the manual clock ------------------------------------------------------------------------

    @property
    def currentProcessingTimeMs(self) -> int:  # noqa: N802
        """The processing time of the next batch (ms)."""
        return self._clock.processing_time_ms

    @property
    def currentWatermarkMs(self) -> int | None:  # noqa: N802
        """The watermark of the next batch (ms); ``None`` outside ``EventTime`` mode until set."""
        return self._clock.watermark_ms

    def setProcessingTime(self, currentTimeMs: int) -> Any:  # noqa: N802,N803 - Spark's names
        """Set the processing time; in ``ProcessingTime`` mode run the batch Spark's engine runs
        on every trigger and return what its timers emitted (else an empty result)."""
        self._clock.set_processing_time(currentTimeMs)
        if self.timeMode == PROCESSING_TIME:
            return self.fireTimers()
        return _Results(bool(self._use_pandas)).value()

    def advanceProcessingTime(self, durationMs: int) -> Any:  # noqa: N802,N803
        """:meth:`setProcessingTime` to the current processing time plus ``durationMs``."""
        return self.setProcessingTime(self._clock.processing_time_ms + int(durationMs))

    def setWatermark(self, currentWatermarkMs: int) -> Any:  # noqa: N802,N803
        """Set the watermark; when it moved forward in ``EventTime`` mode (or on any move in
        ``ProcessingTime`` mode) run the no-data batch Spark's engine runs then and return what
        its timers emitted (else an empty result)."""
        moved = self._clock.set_watermark(currentWatermarkMs)
        if self.timeMode == PROCESSING_TIME or (self.timeMode == EVENT_TIME and moved):
            return self.fireTimers()
        return _Results(bool(self._use_pandas)).value()

    def advanceWatermark(self, durationMs: int) -> Any:  # noqa: N802,N803
        """:meth:`setWatermark` to the current watermark (0 if none) plus ``durationMs``."""
        return self.setWatermark((self._clock.watermark_ms or 0) + int(durationMs))

    # -- looking at and setting state -------------------------------------------------------------

    def peekValueState(self, stateName: str, key: Any) -> "tuple | None":  # noqa: N802,N803
        """The value of ``key`` (a tuple), or ``None``; an expired TTL value reads as absent."""
        return self._peek(stateName, key, "value", lambda s: s.get())

    def peekListState(self, stateName: str, key: Any) -> "list[tuple]":  # noqa: N802,N803
        """The elements of ``key``'s list (tuples, in order; ``[]`` if none)."""
        return self._peek(stateName, key, "list", lambda s: list(s.get()))

    def peekMapState(self, stateName: str, key: Any) -> dict:  # noqa: N802,N803
        """The entries of ``key``'s map as ``{user key tuple: value tuple}`` (``{}`` if none)."""
        return self._peek(stateName, key, "map", lambda s: dict(s.iterator()))

    def setValueState(self, stateName: str, key: Any, value: Any) -> None:  # noqa: N802,N803
        """Set ``key``'s value (a tuple or ``Row``; ``None`` clears it), as the processor's
        ``update`` would in a batch at the current processing time (which starts its TTL)."""
        self._set(stateName, key, "value", lambda s: s.clear() if value is None else s.update(value))

    def setListState(self, stateName: str, key: Any, value: "list[Any]") -> None:  # noqa: N802,N803
        """Replace ``key``'s list (``[]`` clears it)."""
        values = list(value or [])
        self._set(stateName, key, "list", lambda s: s.put(values) if values else s.clear())

    def setMapState(self, stateName: str, key: Any, value: dict) -> None:  # noqa: N802,N803
        """Replace ``key``'s map with ``value`` (``{user key: value}``; ``{}`` clears it)."""
        entries = dict(value or {})

        def write(s: Any) -> None:
            s.clear()
            for k, v in entries.items():
                s.updateValue(k, v)

        self._set(stateName, key, "map", write)

    # Spark 4.2's names for the same
    updateValueState = setValueState  # noqa: N815
    updateListState = setListState  # noqa: N815
    updateMapState = setMapState  # noqa: N815

    def deleteState(self, stateName: str, key: Any) -> None:  # noqa: N802,N803
        """Clear ``key``'s value, list or map of ``stateName``."""
        info = self._variable(stateName, None)
        self._set(stateName, key, info.kind, lambda s: s.clear())

    def peekTimers(self, key: Any) -> "list[int]":  # noqa: N802
        """The timers registered for ``key`` (ms, ascending)."""
        self._require_timers("peekTimers")
        values = _key_values(key)

        def read(task: Any) -> list[int]:
            assert task.timers is not None
            return sorted(int(t) for t in task.timers.current(0))

        return self._with_key(values, read)

    def registeredTimers(self) -> "list[tuple[Any, int]]":  # noqa: N802
        """Every registered timer as ``(key, ms)``, in the order they would fire."""
        self._require_timers("registeredTimers")
        if self._key_schema is None:
            return []
        stores = self._batch_stores()
        try:
            task = self._task(stores, set())
            assert task.timers is not None
            keys, times = task.timers.expired(np.iinfo(np.int64).max)
        finally:
            stores.abort()
        columns = [c.to_pylist() for c in keys.columns]
        return [(_shown_key(tuple(k)), int(t)) for k, t in zip(zip(*columns), times)]

    # -- internals ---------------------------------------------------------------------------------

    def _declared_variables(self) -> tuple:
        """What ``init`` declares, learnt as the engine's planner learns it (a recording handle
        on a copy of the processor)."""
        try:
            return declared_state_variables(self.processor, self.timeMode)
        except Exception as exc:
            if "SESSION_OR_CONTEXT_NOT_EXISTS" in str(exc):
                add_note(exc, "the processor gives a state schema as a DDL string, which PySpark parses only with an active SparkSession; use a StructType or start a session")
            raise

    def _variable(self, name: str, kind: str | None) -> Any:
        info = next((v for v in self._variables if v.name == name), None)
        if info is None:
            declared = ", ".join(repr(v.name) for v in self._variables) or "none"
            msg = f"state {name!r} is not declared by the processor's init (declared: {declared})"
            raise KeyError(msg)
        if kind is not None and info.kind != kind:
            msg = f"state {name!r} is a {info.kind} state, not a {kind} state"
            raise TypeError(msg)
        return info

    def _require_timers(self, what: str) -> None:
        if self.timeMode == NO_TIME:
            msg = f"{what}: there are no timers in timeMode None"
            raise ValueError(msg)

    def _late_mask(self, times_ms: list) -> np.ndarray:
        """Which event times (ms) are late: the engine's rule (at or below the watermark)."""
        wm = self._clock.watermark_ms
        if wm is None:
            return np.zeros(len(times_ms), dtype=bool)
        micros = pa.array([None if t is None else int(t) * 1000 for t in times_ms], type=pa.int64())
        table = pa.table({"t": micros})
        return older_than_watermark(table, "t", False, wm).to_numpy(zero_copy_only=False)

    def _drop_late(self, rows: list, times_ms: list) -> list:
        late = self._late_mask(times_ms)
        return [r for r, is_late in zip(rows, late) if not is_late]

    def _ensure_key_schema(self, values: tuple) -> pa.Schema:
        if self._key_schema is None:
            names = _key_names(self._key_columns, len(values))
            fields = []
            for name, v in zip(names, values):
                if v is None:
                    msg = f"cannot infer the type of key column {name!r} from None; pass keySchema"
                    raise ValueError(msg)
                fields.append(pa.field(name, pa.array([v]).type))
            self._key_schema = pa.schema(fields)
        elif len(values) != len(self._key_schema):
            msg = f"a key of {len(values)} value(s) for a key schema of {len(self._key_schema)} column(s) ({', '.join(self._key_schema.names)})"
            raise ValueError(msg)
        return self._key_schema

    def _keys_table(self, keys: "list[tuple]") -> tuple[pa.Table, list[tuple]]:
        """The keys as the engine's key table, and each as the tuple the engine passes."""
        schema = self._ensure_key_schema(keys[0])
        try:
            arrays = [pa.array([k[i] for k in keys], type=f.type) for i, f in enumerate(schema)]
        except (pa.ArrowException, TypeError, ValueError) as exc:
            msg = f"key {keys!r} does not fit the key schema {schema}: {exc}"
            raise TypeError(msg) from exc
        table = pa.Table.from_arrays(arrays, schema=schema)
        columns = [c.to_pylist() for c in table.columns]
        return table, [tuple(t) for t in zip(*columns)]

    def _batch_stores(self) -> StateStoreTask:
        """The lifecycle of a batch's stores at the current version (the engine's)."""
        return StateStoreTask(self._version, 0)

    def _task(self, stores: StateStoreTask, names: set[str]) -> Any:
        """The engine's ``TaskState`` of a batch at the current clock and version, opening its
        stores in ``stores`` (their names added to ``names``)."""
        assert self._key_schema is not None

        def open_store(name: str, key_schema: pa.Schema, value_schema: pa.Schema) -> tuple[Any, Any]:
            provider = self._dir.provider(name, key_schema, value_schema)
            store = stores.open(provider, begins_at=None)
            names.add(name)
            self._stores[name] = (key_schema, value_schema)
            return provider, store

        def delete_store(name: str) -> bool:
            self._stores.pop(name, None)
            return self._dir.delete(name)

        return TaskState(
            open_store,
            self._key_schema,
            self.timeMode,
            self._clock.processing_time_ms,
            self._clock.watermark_ms,
            self._version,
            self._zone,
            delete_store=delete_store,
            known=self._variables,
        )

    def _open_the_others(self, stores: StateStoreTask, names: set[str]) -> None:
        """Open every store this batch did not (the engine opens them all in every batch), so
        that all commit version N+1 and stay at the same version."""
        for name, (key_schema, value_schema) in list(self._stores.items()):
            if name not in names:
                stores.open(self._dir.provider(name, key_schema, value_schema), begins_at=None)

    def _with_key(self, values: tuple, read: "Callable[[Any], Any]") -> Any:
        """``read(task)`` with ``key`` being processed, in a batch that commits nothing."""
        table, tuples = self._keys_table([values])
        stores = self._batch_stores()
        try:
            task = self._task(stores, set())
            task.begin_phase(table, tuples)
            task.set_key(0)
            return read(task)
        finally:
            stores.abort()

    def _peek(self, name: str, key: Any, kind: str, read: "Callable[[Any], Any]") -> Any:
        info = self._variable(name, kind)

        def run(task: Any) -> Any:
            return read(_declare(StatefulProcessorHandleImpl(task), info))

        return self._with_key(_key_values(key), run)

    def _set(self, name: str, key: Any, kind: str, write: "Callable[[Any], None]") -> None:
        """``write(state)`` under ``key`` in a batch of its own, committed like any batch."""
        info = self._variable(name, kind)
        table, tuples = self._keys_table([_key_values(key)])
        stores, names = self._batch_stores(), set[str]()
        with stores:
            task = self._task(stores, names)
            handle = StatefulProcessorHandleImpl(task)
            state = _declare(handle, info)
            for other in self._variables:  # every store is opened, as by the processor's init
                if other.name != info.name:
                    _declare(handle, other)
            task.begin_phase(table, tuples)
            task.set_key(0)
            write(state)
            task.end_phase()
            self._open_the_others(stores, names)
        self._version += 1

    def _pandas_initial_state(self, initial: Any) -> "list[tuple[Any, list]]":
        import pandas as pd

        if not isinstance(initial, pd.DataFrame):
            return [(k, [pdf]) for k, pdf in initial]
        names = [self._key_columns] if isinstance(self._key_columns, str) else list(self._key_columns or ["key"])
        missing = [n for n in names if n not in initial.columns]
        if missing:
            msg = f"the initial state DataFrame has no key column(s) {missing} (columns: {list(initial.columns)}); name them with keyColumns"
            raise ValueError(msg)
        if self._key_columns is None:
            self._key_columns = names
        groups = initial.groupby(names if len(names) > 1 else names[0], sort=False, dropna=False)
        return [(k, [g.reset_index(drop=True)]) for k, g in groups]

    def _initial_state(self, entries: "list[tuple[Any, list]]") -> None:
        """The first batch's initial-state phase: each key (in the sorted order the engine
        processes keys in) gets ``handleInitialState`` with its rows, or its one DataFrame."""
        import warnings

        import pyarrow.compute as pc

        if not entries:
            return
        by_key: dict[tuple, list] = {}
        for key, items in entries:
            by_key.setdefault(_key_values(key), []).extend(items)
        table, tuples = self._keys_table(list(by_key))
        with warnings.catch_warnings():
            # the engine's call (pyarrow >= 25 wants the placement per key, older ones refuse that)
            warnings.simplefilter("ignore", FutureWarning)
            order = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in table.column_names], null_placement="at_start").to_pylist()
        table = table.take(pa.array(order, type=pa.int64()))
        items = [by_key[list(by_key)[i]] for i in order]
        tuples = [tuples[i] for i in order]

        def phase(task: Any, processor: Any, tv: Any, out: _Results) -> None:
            import pandas as pd

            task.begin_phase(table, tuples)
            for g, key in enumerate(tuples):
                task.set_key(g)
                if self._use_pandas:
                    frames = items[g]
                    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
                    processor.handleInitialState(key, pdf, tv)
                else:
                    for row in items[g]:
                        processor.handleInitialState(key, row, tv)
            task.end_phase()

        self._batch(phase, fire_timers=False)

    def _run_batch(self, key: Any, rows: Any) -> _Results:
        """A batch whose data phase is ``rows`` for ``key`` (none: a no-data batch)."""
        if key is None or rows is None:
            if key is not None:
                self._keys_table([_key_values(key)])  # the key's type is still checked / learnt
            return self._batch(None, fire_timers=True)
        table, tuples = self._keys_table([_key_values(key)])

        def phase(task: Any, processor: Any, tv: Any, out: _Results) -> None:
            task.begin_phase(table, tuples)
            task.set_key(0)
            values = iter([rows]) if self._use_pandas else iter(rows)
            try:
                out.add(processor.handleInputRows(tuples[0], values, tv))
            except Exception as exc:
                add_note(exc, f"transformWithState: the processor failed for key {tuples[0]!r}")
                raise
            task.end_phase()

        return self._batch(phase, fire_timers=True)

    def _batch(self, data_phase: "Callable[..., None] | None", fire_timers: bool) -> _Results:
        """One micro-batch, driven as ``TransformWithStateStep.process`` drives the engine's
        ``TaskState``: init, the data phase, the timer phase, close, TTL cleanup, commit."""
        from pyspark import cloudpickle
        from pyspark.sql.streaming.stateful_processor import TimerValues

        out = _Results(bool(self._use_pandas))
        if self._key_schema is None:
            # no key was ever given: nothing can be stored yet, and no timer can be due
            return out
        clock = self._clock
        tv = TimerValues(*timer_values(self.timeMode, clock.processing_time_ms, clock.watermark_ms))
        stores, names = self._batch_stores(), set[str]()
        with stores:
            task = self._task(stores, names)
            processor = cloudpickle.loads(cloudpickle.dumps(self.processor))  # a fresh copy, as in Spark
            processor.init(StatefulProcessorHandleImpl(task))
            task.handle_state = INITIALIZED
            if data_phase is not None:
                data_phase(task, processor, tv, out)
            task.handle_state = DATA_PROCESSED
            if fire_timers:
                self._fire_timers(task, processor, tv, out)
            task.handle_state = TIMER_PROCESSED
            processor.close()
            task.handle_state = CLOSED
            if self.timeMode == PROCESSING_TIME:
                task.remove_expired()
            self._open_the_others(stores, names)
        self._version += 1
        return out

    def _fire_timers(self, task: Any, processor: Any, tv: Any, out: _Results) -> None:
        """The engine's timer phase at the tester's clock."""
        threshold = timer_threshold(self.timeMode, self._clock.processing_time_ms, self._clock.watermark_ms)
        fire_expired_timers(task, processor, threshold, tv, out)


def _declare(handle: Any, info: Any) -> Any:
    """The PySpark state object of ``info`` through the engine's handle (its schemas are those
    the planner learnt, so no DDL is parsed again)."""
    if info.kind == "value":
        return handle.getValueState(info.name, info.value_schema, info.ttl_ms)
    if info.kind == "list":
        return handle.getListState(info.name, info.value_schema, info.ttl_ms)
    return handle.getMapState(info.name, info.user_key_schema, info.value_schema, info.ttl_ms)


def _arrow_key_schema(schema: Any) -> pa.Schema:
    """A key schema given as a ``pyarrow.Schema``, ``StructType`` or DDL string."""
    if isinstance(schema, pa.Schema):
        return schema
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(_struct_type(schema, "keySchema"), timestamp_utc=True)


class ApplyInPandasWithStateTester:
    """Runs an ``applyInPandasWithState`` function on given rows, without a streaming query, and
    lets the test look at and set each key's state and timeout in between.

    Every call is one micro-batch of statestream's own operator step
    (``FlatMapGroupsWithStateStep`` of ``operators/flat_map_groups_with_state.py``) over the real
    state store in a temporary directory: PySpark's ``GroupState``, Spark's rules for what is
    written or removed after a call, the timeout rules, the late-row filter and PySpark's
    checks of what the function returns are the engine's, not re-implemented. Spark has no
    such tester.

    A batch (:meth:`test`) calls the function with the key's rows (if any), then with
    ``hasTimedOut`` true and an empty DataFrame for every key whose timeout is due (strictly
    below the processing time with ``ProcessingTimeTimeout``, the watermark with
    ``EventTimeTimeout``), and commits. If the function raises, nothing is committed.

    The clock is manual, as in :class:`TwsTester`: processing time starts at 0, the watermark at
    0 when the query would have one (an ``EventTimeTimeout`` or an ``eventTimeColumn``; else
    there is none until :meth:`setWatermark`). Moving the clock runs at once the no-data batch
    Spark's engine runs then (with ``ProcessingTimeTimeout`` on every move, with
    ``EventTimeTimeout`` when the watermark moved forward) and returns what the timed-out calls
    emitted; :meth:`fireTimeouts` runs one on demand.

    Parameters
    ----------
    func, outputStructType, stateStructType, outputMode, timeoutConf:
        As for ``GroupedData.applyInPandasWithState`` (schemas as ``StructType``, or DDL strings
        with an active SparkSession).
    keyColumns:
        Names of the grouping columns (default ``key``; ``key0``, ``key1``... for several). The
        function receives them in its DataFrames, as in a query; :meth:`test` adds them when
        the given DataFrame lacks them.
    inputSchema:
        Spark schema of the rows (``StructType`` or DDL), so that the function sees the dtypes
        of a query exactly; by default Arrow's inference from the pandas dtypes.
    eventTimeColumn:
        The watermarked timestamp column: with ``EventTimeTimeout``, rows at or below the
        watermark are dropped before the call (the engine's late-row filter).
    timeZone:
        Session time zone (naive timestamps in rows and state are wall-clock times of it);
        default: the active SparkSession's, else UTC.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        outputStructType: Any,  # noqa: N803 - PySpark's names
        stateStructType: Any,  # noqa: N803
        outputMode: str = "Update",  # noqa: N803
        timeoutConf: str = "NoTimeout",  # noqa: N803
        *,
        keyColumns: "str | Sequence[str] | None" = None,  # noqa: N803
        inputSchema: Any = None,  # noqa: N803
        eventTimeColumn: str | None = None,  # noqa: N803
        timeZone: str | None = None,  # noqa: N803
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        confs = {c.lower(): c for c in (NO_TIMEOUT, PROCESSING_TIME_TIMEOUT, EVENT_TIME_TIMEOUT)}
        if str(timeoutConf).lower() not in confs:
            msg = f"timeoutConf must be one of {', '.join(confs.values())}; got {timeoutConf!r}"
            raise ValueError(msg)
        if str(outputMode).lower() not in ("append", "update"):
            msg = f"outputMode must be Append or Update; got {outputMode!r}"
            raise ValueError(msg)
        self.func = func
        self.outputStructType = _struct_type(outputStructType, "outputStructType")
        self.stateStructType = _struct_type(stateStructType, "stateStructType")
        self.outputMode = str(outputMode).lower()
        self.timeoutConf = confs[str(timeoutConf).lower()]
        self._key_columns = keyColumns
        self._input_arrow = (
            to_arrow_schema(_struct_type(inputSchema, "inputSchema"), timestamp_utc=True) if inputSchema is not None else None
        )
        self._event_time_column = eventTimeColumn
        self._zone_name = timeZone or _session_time_zone()
        self._zone = session_zone(self._zone_name)
        has_watermark = self.timeoutConf == EVENT_TIME_TIMEOUT or eventTimeColumn is not None
        self._clock = _Clock(0 if has_watermark else None)
        self._key_schema: pa.Schema | None = None
        self._last_input: pa.Schema | None = None
        self._dir = _StateDir()
        self._version = 0

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the tester's state directory (also done when the tester is collected)."""
        self._dir.close()

    def __enter__(self) -> "ApplyInPandasWithStateTester":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- running the function ----------------------------------------------------------------------

    def test(self, key: Any, pdf: Any) -> Any:
        """One micro-batch with ``pdf`` as the rows of ``key``; returns one DataFrame of all the
        function emitted in it (the key's call, then any timed-out key's)."""
        values = _key_values(key)
        names = self._names(len(values))
        pdf = pdf.reset_index(drop=True).copy()
        for pos, (name, v) in enumerate(zip(names, values)):
            if name not in pdf.columns:
                pdf.insert(pos, name, [v] * len(pdf))
            elif len(pdf) and not (pdf[name] == v).all():
                msg = f"the rows given for key {key!r} hold other values in key column {name!r}"
                raise ValueError(msg)
        return self._batch(self._to_arrow(pdf))

    def fireTimeouts(self) -> Any:  # noqa: N802
        """Run a no-data batch at the current clock; returns what the timed-out calls emitted."""
        if self._last_input is not None:
            return self._batch(self._last_input.empty_table())
        if self._key_schema is not None:
            return self._batch(self._key_schema.empty_table())
        return self._to_pandas(None)

    fireTimers = fireTimeouts  # noqa: N815 - the TwsTester name

    # -- the manual clock ------------------------------------------------------------------------

    @property
    def currentProcessingTimeMs(self) -> int:  # noqa: N802
        """The processing time of the next batch (ms)."""
        return self._clock.processing_time_ms

    @property
    def currentWatermarkMs(self) -> int | None:  # noqa: N802
        """The watermark of the next batch (ms), ``None`` while the query would have none."""
        return self._clock.watermark_ms

    def setProcessingTime(self, currentTimeMs: int) -> Any:  # noqa: N802,N803
        """Set the processing time; with ``ProcessingTimeTimeout`` run the batch Spark runs on
        every trigger and return what timed-out calls emitted (else an empty DataFrame)."""
        self._clock.set_processing_time(currentTimeMs)
        if self.timeoutConf == PROCESSING_TIME_TIMEOUT:
            return self.fireTimeouts()
        return self._to_pandas(None)

    def advanceProcessingTime(self, durationMs: int) -> Any:  # noqa: N802,N803
        """:meth:`setProcessingTime` to the current processing time plus ``durationMs``."""
        return self.setProcessingTime(self._clock.processing_time_ms + int(durationMs))

    def setWatermark(self, currentWatermarkMs: int) -> Any:  # noqa: N802,N803
        """Set the watermark; with ``EventTimeTimeout``, when it moved forward, run the no-data
        batch Spark runs then and return what timed-out calls emitted (else an empty DataFrame)."""
        moved = self._clock.set_watermark(currentWatermarkMs)
        if self.timeoutConf == PROCESSING_TIME_TIMEOUT or (self.timeoutConf == EVENT_TIME_TIMEOUT and moved):
            return self.fireTimeouts()
        return self._to_pandas(None)

    def advanceWatermark(self, durationMs: int) -> Any:  # noqa: N802,N803
        """:meth:`setWatermark` to the current watermark (0 if none) plus ``durationMs``."""
        return self.setWatermark((self._clock.watermark_ms or 0) + int(durationMs))

    # -- looking at and setting state -------------------------------------------------------------

    def peekState(self, key: Any) -> "tuple | None":  # noqa: N802
        """``key``'s state as the function's ``state.get`` returns it (a tuple), or ``None``."""
        found = self._lookup(key)
        if found is None or found[GROUP_STATE_FIELD] is None:
            return None
        state_type = self._value_schema().field(GROUP_STATE_FIELD).type
        value = to_session_wall_clock(found[GROUP_STATE_FIELD], state_type, self._zone)
        return tuple(value[n] for n in self.stateStructType.names)

    def peekTimeoutTimestamp(self, key: Any) -> int | None:  # noqa: N802
        """The timeout stored for ``key`` (ms), or ``None`` when none is set."""
        found = self._lookup(key)
        if found is None or TIMEOUT_TIMESTAMP_FIELD not in found:
            return None
        ts = found[TIMEOUT_TIMESTAMP_FIELD]
        return None if ts is None or ts == NO_TIMESTAMP else int(ts)

    def setState(self, key: Any, value: Any, timeoutTimestampMs: int | None = None) -> None:  # noqa: N802,N803
        """Store ``value`` (a tuple, ``Row`` or dict of the state's fields) for ``key``, with a
        timeout (ms) if given; ``value=None`` without a timeout removes the key. Committed as a
        batch of its own, as the rows the engine would write."""
        if timeoutTimestampMs is not None and self.timeoutConf == NO_TIMEOUT:
            msg = "setState: a timeout needs timeoutConf ProcessingTimeTimeout or EventTimeTimeout"
            raise ValueError(msg)
        keys = self._key_table(key)
        value_schema = self._value_schema()
        provider = self._dir.provider("default", keys.schema, value_schema)
        with StateStoreTask(self._version, 0) as stores:
            store = stores.open(provider)
            if value is None and timeoutTimestampMs is None:
                store.remove(keys)
            else:
                state_type = value_schema.field(GROUP_STATE_FIELD).type
                stored = None if value is None else from_session_wall_clock(self._state_dict(value), state_type, self._zone)
                cols = list(keys.columns) + [pa.array([stored], type=state_type)]
                if self.timeoutConf != NO_TIMEOUT:
                    cols.append(pa.array([NO_TIMESTAMP if timeoutTimestampMs is None else int(timeoutTimestampMs)], type=pa.int64()))
                store.put(pa.Table.from_arrays(cols, schema=provider.schema))
        self._version += 1

    # -- internals ---------------------------------------------------------------------------------

    def _names(self, n: int) -> list[str]:
        names = _key_names(self._key_columns, n)
        if self._key_schema is not None and names != self._key_schema.names:
            msg = f"a key of {n} value(s) for the key columns {self._key_schema.names}"
            raise ValueError(msg)
        return names

    def _value_schema(self) -> pa.Schema:
        """The operator's state value layout (Spark's state format version 2)."""
        from pyspark.sql.pandas.types import to_arrow_type

        fields = [pa.field(GROUP_STATE_FIELD, to_arrow_type(self.stateStructType, timestamp_utc=True), nullable=True)]
        if self.timeoutConf != NO_TIMEOUT:
            fields.append(pa.field(TIMEOUT_TIMESTAMP_FIELD, pa.int64(), nullable=False))
        return pa.schema(fields)

    def _state_dict(self, value: Any) -> dict:
        names = list(self.stateStructType.names)
        if isinstance(value, dict):
            return {n: value.get(n) for n in names}
        values = tuple(value)
        if len(values) != len(names):
            msg = f"a state of {len(values)} value(s) for the state schema {self.stateStructType.simpleString()}"
            raise ValueError(msg)
        return dict(zip(names, (v.item() if isinstance(v, np.generic) else v for v in values)))

    def _to_arrow(self, pdf: Any) -> pa.Table:
        """The rows as the operator's input: naive timestamps are wall-clock times of the session
        time zone (as Spark hands them to the function); key columns keep the store's types."""
        import pandas as pd

        pdf = pdf.copy()
        for name in pdf.columns:
            if pd.api.types.is_datetime64_dtype(pdf[name].dtype) and not isinstance(pdf[name].dtype, pd.DatetimeTZDtype):
                pdf[name] = pdf[name].dt.tz_localize(self._zone_name)
        if self._input_arrow is not None:
            missing = [n for n in self._input_arrow.names if n not in pdf.columns]
            if missing:
                msg = f"the rows have no column(s) {missing} of inputSchema (columns: {list(pdf.columns)})"
                raise ValueError(msg)
            table = pa.Table.from_pandas(pdf[self._input_arrow.names], schema=self._input_arrow, preserve_index=False)
        else:
            table = pa.Table.from_pandas(pdf, preserve_index=False)
        table = table.replace_schema_metadata(None)
        if self._key_schema is not None:
            for f in self._key_schema:
                i = table.column_names.index(f.name)
                if not table.schema.field(i).type.equals(f.type):
                    table = table.set_column(i, f, table.column(i).cast(f.type))
        return table

    def _key_table(self, key: Any) -> pa.Table:
        values = _key_values(key)
        names = self._names(len(values))
        if self._key_schema is None:
            import pandas as pd

            inferred = self._to_arrow(pd.DataFrame({n: [v] for n, v in zip(names, values)}))
            self._key_schema = pa.schema([inferred.schema.field(n) for n in names])
        try:
            arrays = [pa.array([v], type=f.type) for v, f in zip(values, self._key_schema)]
        except (pa.ArrowException, TypeError, ValueError) as exc:
            msg = f"key {key!r} does not fit the key schema {self._key_schema}: {exc}"
            raise TypeError(msg) from exc
        return pa.Table.from_arrays(arrays, schema=self._key_schema)

    def _lookup(self, key: Any) -> dict | None:
        """The stored row of ``key`` (value columns by name), or ``None``."""
        if self._key_schema is None:
            return None
        keys = self._key_table(key)
        store = self._dir.provider("default", keys.schema, self._value_schema()).get_read_store(self._version)
        try:
            row = store.lookup(keys).to_pylist()[0]
        finally:
            store.abort()
        return row if row.pop(FOUND_COLUMN) else None

    def _batch(self, table: pa.Table) -> Any:
        names = _key_names(self._key_columns, len(self._key_schema) if self._key_schema is not None else 1)
        missing = [n for n in names if n not in table.column_names]
        if missing:
            msg = f"no key column(s) {missing} in the rows (columns: {table.column_names})"
            raise ValueError(msg)
        if self._key_schema is None:
            self._key_schema = pa.schema([table.schema.field(n) for n in names])
        event_index = None
        if self._event_time_column is not None:
            if self._event_time_column not in table.column_names:
                msg = f"eventTimeColumn {self._event_time_column!r} is not a column of the rows ({table.column_names})"
                raise ValueError(msg)
            event_index = table.column_names.index(self._event_time_column)
        self._last_input = table.schema
        info = FlatMapGroupsWithStateInfo(
            key_indices=tuple(table.column_names.index(n) for n in names),
            key_names=tuple(names),
            func=self.func,
            output_schema=self.outputStructType,
            state_schema=self.stateStructType,
            func_output_mode=self.outputMode,
            timeout_conf=self.timeoutConf,
            event_time_index=event_index,
            watermark_present=self._clock.watermark_ms is not None,
        )
        wm = self._clock.watermark_ms
        step = FlatMapGroupsWithStateStep(
            state_root=self._dir.root,
            run_id=self._dir.run_id,
            operator_id=0,
            version=self._version,
            info=info,
            input_schema=pa.schema(list(table.schema) + [pa.field(PARTITION_ID_COLUMN, pa.int32())]),
            data_names=tuple(table.column_names),
            w_late_ms=wm,
            w_evict_ms=wm,
            batch_timestamp_ms=self._clock.processing_time_ms,
            timezone=self._zone_name,
        )
        rows = table.append_column(PARTITION_ID_COLUMN, pa.array(np.zeros(table.num_rows, dtype=np.int32)))
        out, _ = step.process(0, rows.to_batches())
        self._version += 1
        return self._to_pandas(out)

    def _to_pandas(self, out: pa.Table | None) -> Any:
        """The output as PySpark converts Arrow to pandas (timestamps in the session zone)."""
        import pandas as pd
        from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer
        from pyspark.sql.pandas.types import to_arrow_schema

        if out is None:
            out = to_arrow_schema(self.outputStructType, timestamp_utc=True).empty_table()
        if out.num_columns == 0:
            return pd.DataFrame()
        ser = ArrowStreamPandasUDFSerializer(self._zone_name, False, True, arrow_cast=True)
        pdf = pd.concat([ser.arrow_to_pandas(c, i) for i, c in enumerate(out.columns)], axis=1)
        pdf.columns = out.column_names
        return pdf
