"""What a ``transformWithState`` processor sees of its state in one task: Spark's
``StatefulProcessorHandleImpl`` with ``ValueStateImpl``, ``ListStateImpl``, ``MapStateImpl``,
``TimerStateImpl`` and the TTL cleanup, over statestream's state store.

Spark keeps every state variable of a partition in one RocksDB store (a column family each) and
serves each call from Python over a socket. Here the state lives next to the processor: each
variable is a store of its own under the operator's partition directory (store name = the
variable's name; the timers are ``$procTimers_keyToTimestamp`` or ``$eventTimers_keyToTimestamp``),
and calls are served from Python lists. The work is done per *phase* (the keys with data, then the
keys with expired timers): a variable's stored rows for all the phase's keys are read with one
vectorised lookup the first time the phase reads it (a processor that only writes never reads),
writes are kept per key and go to the store as one ``put``/``insert`` and one removal when the
phase ends, and the TTL cleanup at the end of the batch is one vectorised eviction per variable.

Store layouts (key columns first):

* value state: the grouping key; ``__value`` (the user's struct) [, ``__ttlExpirationMs``];
* list state: the grouping key, ``__index`` (increasing: ``version << 32`` + the task's append
  counter, so appending never reads); ``__value`` [, ``__ttlExpirationMs``] per element;
* map state: the grouping key, ``__userKey`` (struct); ``__value`` [, ``__ttlExpirationMs``];
* timers: the grouping key, ``__expiryTimestampMs``; ``__unused`` (null).

The classes subclass PySpark's own ``StatefulProcessorHandle``, ``ValueState``, ``ListState`` and
``MapState``, so a processor written for Spark's engine runs unchanged and ``isinstance`` checks
hold; every call that Spark refuses is refused with Spark's error class and text, wrapped as
PySpark's client wraps it (``PySparkRuntimeError("Error initializing value state: [...]")``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.errors.stateful_processor import (
    Prefix,
    empty_list,
    implicit_key_not_found,
    invalid_handle_state,
    invalid_time_mode,
    not_initialized,
    null_value,
    state_already_exists,
    stateful_processor_error,
    ttl_not_positive,
    ttl_time_mode,
)
from statestream.operators.python_state_values import from_session_wall_clock, has_timestamp, to_session_wall_clock
from statestream.state.keys import group_ids, match_keys

__all__ = [
    "NO_TIME",
    "PROCESSING_TIME",
    "EVENT_TIME",
    "StateVariableInfo",
    "TaskState",
    "StatefulProcessorHandleImpl",
    "DriverStatefulProcessorHandle",
    "time_mode_shown",
    "ttl_expiration_ms",
    "ttl_expired",
    "timer_threshold",
    "timer_expired",
    "timer_list_order",
    "timer_values",
    "timer_store_name",
]

log = logging.getLogger(__name__)

NO_TIME = "none"
PROCESSING_TIME = "processingtime"
EVENT_TIME = "eventtime"
TIME_MODES = (NO_TIME, PROCESSING_TIME, EVENT_TIME)

VALUE = "value"
LIST = "list"
MAP = "map"

INDEX_COLUMN = "__index"
USER_KEY_COLUMN = "__userKey"
VALUE_COLUMN = "__value"
TTL_COLUMN = "__ttlExpirationMs"
EXPIRY_COLUMN = "__expiryTimestampMs"
UNUSED_COLUMN = "__unused"

#: list elements of batch ``v`` get indices ``v << 32`` upwards: increasing across batches
#: without reading what the list holds
_INDEX_SHIFT = 32

# the handle's life cycle (Spark's StatefulProcessorHandleState)
PRE_INIT = "PRE_INIT"
CREATED = "CREATED"
INITIALIZED = "INITIALIZED"
DATA_PROCESSED = "DATA_PROCESSED"
TIMER_PROCESSED = "TIMER_PROCESSED"
CLOSED = "CLOSED"
_ORDER = {PRE_INIT: 0, CREATED: 1, INITIALIZED: 2, DATA_PROCESSED: 3, TIMER_PROCESSED: 4, CLOSED: 5}

_REMOVED = object()  # a cleared value / removed map entry in a phase's writes


# ----------------------------------------------------------------------------------------------
# Pure rules (no Spark)
# ----------------------------------------------------------------------------------------------


def time_mode_shown(time_mode: str) -> str:
    """Spark's ``TimeMode.toString`` of a PySpark time mode string, as its errors print it."""
    return {NO_TIME: "NoTime", PROCESSING_TIME: "ProcessingTime", EVENT_TIME: "EventTime"}[time_mode.lower()]


def ttl_expiration_ms(batch_timestamp_ms: int, ttl_ms: int) -> int:
    """When a value written in this batch expires: the batch's processing time plus the TTL."""
    return int(batch_timestamp_ms) + int(ttl_ms)


def ttl_expired(expiration_ms: Any, batch_timestamp_ms: int) -> np.ndarray:
    """Which values have expired (Spark: the batch time has reached the expiration)."""
    return np.asarray(expiration_ms, dtype=np.int64) <= int(batch_timestamp_ms)


def timer_threshold(time_mode: str, batch_timestamp_ms: int | None, watermark_ms: int | None) -> int | None:
    """The time a timer must be at or below to fire in this batch: the batch's processing time,
    or the eviction watermark; ``None`` when timers cannot fire (no time mode, no watermark)."""
    if time_mode == PROCESSING_TIME:
        return batch_timestamp_ms
    if time_mode == EVENT_TIME:
        return watermark_ms
    return None


def timer_expired(expiry_ms: Any, threshold: int) -> np.ndarray:
    """Which timers fire: their time is at or below the threshold (Spark's engine fires a timer
    set at exactly the watermark in that batch; checked against it)."""
    return np.asarray(expiry_ms, dtype=np.int64) <= int(threshold)


def timer_list_order(timestamps: Any) -> list[int]:
    """A key's timers in the order Spark's ``listTimers`` returns them: the byte order of the
    little-endian longs its store keys hold (20000 before 12000), not numeric order."""
    ts = [int(t) for t in timestamps]
    return sorted(ts, key=lambda t: int(t).to_bytes(8, "little", signed=True))


def timer_values(time_mode: str, batch_timestamp_ms: int | None, watermark_ms: int | None) -> tuple[int, int]:
    """``TimerValues`` of a batch: (processing time, watermark), -1 where the mode has none."""
    if time_mode == NO_TIME:
        return -1, -1
    batch = -1 if batch_timestamp_ms is None else int(batch_timestamp_ms)
    wm = -1 if watermark_ms is None else int(watermark_ms)
    return batch, wm


def timer_store_name(time_mode: str) -> str:
    """Spark's column family of a time mode's timers (keyed by grouping key, then time)."""
    return "$procTimers_keyToTimestamp" if time_mode == PROCESSING_TIME else "$eventTimers_keyToTimestamp"


# ----------------------------------------------------------------------------------------------
# State variables: their declaration, and the conversion of their values
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateVariableInfo:
    """One state variable a processor declared in ``init``: its kind, name, schemas (Spark
    ``StructType``) and TTL (ms, ``None``: never expires)."""

    name: str
    kind: str
    value_schema: Any = field(repr=False)
    user_key_schema: Any = field(default=None, repr=False)
    ttl_ms: int | None = None

    def describe(self) -> dict:
        """What the schema file records of the variable (compared on restart)."""
        out = {"name": self.name, "kind": self.kind, "valueSchema": self.value_schema.jsonValue(), "ttl": self.ttl_ms is not None}
        if self.user_key_schema is not None:
            out["userKeySchema"] = self.user_key_schema.jsonValue()
        return out


def _parse_schema(schema: Any) -> Any:
    """A state schema given as a DDL string or a ``StructType`` (a bare type is wrapped)."""
    from pyspark.sql.types import DataType, StructField, StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        return StructType.fromDDL(schema)
    if isinstance(schema, DataType):
        return StructType([StructField("value", schema)])
    msg = f"a state schema must be a StructType or a DDL string, got {type(schema).__name__}"
    raise TypeError(msg)


def _ttl_ms(ttl: Any) -> int | None:
    return None if ttl is None else int(ttl)


class _Codec:
    """The user's tuples of one schema to and from an Arrow struct array. Values come back as
    PySpark's state clients return them: tuples, nested structs as ``Row``, timestamps as naive
    wall-clock times of the session time zone."""

    def __init__(self, schema: Any, zone: Any) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self.schema = schema
        self.type = to_arrow_type(schema, timestamp_utc=True)
        self.names = list(schema.names)
        self.zone = zone
        self.timestamps = has_timestamp(self.type)
        self.flat = not self.timestamps and not any(
            pa.types.is_struct(f.type) or pa.types.is_list(f.type) or pa.types.is_map(f.type) for f in self.type
        )

    def to_arrow(self, values: list, what: str) -> pa.Array:
        rows = [_normalise(v, len(self.names)) for v in values]
        if self.timestamps:
            rows = [from_session_wall_clock(r, self.type, self.zone) for r in rows]
        try:
            return pa.array(rows, type=self.type)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            msg = f"{what}: a value does not fit the state schema {self.schema.simpleString()}: {exc}"
            raise ValueError(msg) from exc

    def from_arrow(self, arr: Any) -> list:
        """The values of ``arr`` as tuples (``None`` for a null value)."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        n = len(arr)
        if n == 0:
            return []
        if self.flat:
            columns = [arr.field(i).to_pylist() for i in range(arr.type.num_fields)]
            rows: list[tuple[Any, ...] | None] = list(zip(*columns)) if columns else [()] * n
            if arr.null_count:
                valid = arr.is_valid().to_pylist()
                rows = [r if ok else None for r, ok in zip(rows, valid)]
            return rows

        out: list[tuple[Any, ...] | None] = []
        for d in arr.to_pylist():
            if d is None:
                out.append(None)
                continue
            if self.timestamps:
                d = to_session_wall_clock(d, self.type, self.zone)
            out.append(tuple(_as_row(d[f.name], f.type) for f in self.type))
        return out


def _normalise(value: Any, width: int | None = None) -> Any:
    """A user's value as pyarrow takes it: a tuple, numpy scalars as Python ones. As PySpark's
    state client, any sequence is taken field by field (a ``Row``, a list, a string: ``"0"``
    is the one-field value ``("0",)``) and zipped with the schema's ``width`` fields, so extra
    items are dropped."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, (tuple, list)):
        try:
            value = tuple(value)
        except TypeError:
            msg = f"a state value must be a tuple (or Row), got {type(value).__name__}: {value!r}"
            raise TypeError(msg) from None
    if width is not None and len(value) > width:
        value = value[:width]
    return tuple(v.item() if isinstance(v, np.generic) else v for v in value)


def _as_row(value: Any, t: pa.DataType) -> Any:
    """A nested value of ``to_pylist`` in PySpark's unpickled state shape: a struct as a
    ``Row``, a map as a ``dict``."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        from pyspark.sql.types import Row

        return Row(**{f.name: _as_row(value[f.name], f.type) for f in t})
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_as_row(v, t.value_type) for v in value]
    if pa.types.is_map(t):  # PySpark gives a map as a dict (``to_pylist``: a list of pairs)
        pairs = value.items() if isinstance(value, dict) else value
        return {_as_row(k, t.key_type): _as_row(v, t.item_type) for k, v in pairs}
    return value


# ----------------------------------------------------------------------------------------------
# The task's state: stores, phases, writes
# ----------------------------------------------------------------------------------------------


class _Phase:
    """The keys one phase works on (data keys, or keys with expired timers)."""

    def __init__(self, keys: pa.Table, tuples: list[tuple]) -> None:
        self.keys = keys
        self.tuples = tuples


class _Variable:
    """One state variable's store and its working set in the current phase."""

    def __init__(self, task: "TaskState", info: StateVariableInfo) -> None:
        self.task = task
        self.info = info
        self.codec = _Codec(info.value_schema, task.zone)
        self.key_codec = _Codec(info.user_key_schema, task.zone) if info.user_key_schema is not None else None
        self.ttl = info.ttl_ms
        self.provider, self.store = task.open_store(info.name, self.key_schema(), self.value_schema())
        #: ``deleteIfExists`` dropped the variable: Spark's state server no longer knows it
        self.deleted = False
        self.reset()

    # -- layout --------------------------------------------------------------------------------

    def extra_key_fields(self) -> list[pa.Field]:
        if self.info.kind == LIST:
            return [pa.field(INDEX_COLUMN, pa.int64(), nullable=False)]
        if self.info.kind == MAP:
            assert self.key_codec is not None
            return [pa.field(USER_KEY_COLUMN, self.key_codec.type)]
        return []

    def key_schema(self) -> pa.Schema:
        return pa.schema(list(self.task.key_schema) + self.extra_key_fields())

    def value_schema(self) -> pa.Schema:
        fields = [pa.field(VALUE_COLUMN, self.codec.type)]
        if self.ttl is not None:
            fields.append(pa.field(TTL_COLUMN, pa.int64()))
        return pa.schema(fields)

    # -- phase life cycle ----------------------------------------------------------------------

    def reset(self) -> None:
        self.loaded: list | None = None  # per phase row: value, list or dict (what is stored)
        self.writes: dict[int, Any] = {}
        self.cleared: set[int] = set()  # list/map: rows whose stored elements go

    def _stored_rows(self) -> tuple[pa.Table, np.ndarray]:
        """The stored rows of the phase's keys (not expired) and the phase row of each."""
        table = self.store.table()
        phase = self.task.phase
        assert phase is not None
        nk = self.task.num_key_columns
        if table.num_rows == 0 or phase.keys.num_rows == 0:
            return table.slice(0, 0), np.empty(0, np.int64)
        li, ri = match_keys(phase.keys, table.select(list(range(nk))))
        rows = table.take(pa.array(ri, type=pa.int64()))
        if self.ttl is not None and rows.num_rows:
            live = ~ttl_expired(rows.column(TTL_COLUMN).to_numpy(zero_copy_only=False), self.task.batch_timestamp_ms)
            rows, li = rows.filter(pa.array(live)), li[live]
        return rows, li

    def load(self) -> list:
        if self.loaded is not None:
            return self.loaded
        rows, li = self._stored_rows()
        n = self.task.phase.keys.num_rows  # type: ignore[union-attr]
        kind = self.info.kind
        if kind == VALUE:
            loaded: list = [None] * n
            for r, v in zip(li.tolist(), self.codec.from_arrow(rows.column(VALUE_COLUMN))):
                loaded[r] = v
        elif kind == LIST:
            loaded = [[] for _ in range(n)]
            if rows.num_rows:
                order = np.lexsort((rows.column(INDEX_COLUMN).to_numpy(), li))
                values = self.codec.from_arrow(rows.column(VALUE_COLUMN).take(pa.array(order)))
                for r, v in zip(li[order].tolist(), values):
                    loaded[r].append(v)
        else:
            assert self.key_codec is not None
            loaded = [{} for _ in range(n)]
            if rows.num_rows:
                keys = self.key_codec.from_arrow(rows.column(USER_KEY_COLUMN))
                values = self.codec.from_arrow(rows.column(VALUE_COLUMN))
                for r, k, v in sorted(zip(li.tolist(), keys, values), key=lambda x: (x[0], _sort_key(x[1]))):
                    loaded[r][k] = v
        self.loaded = loaded
        return loaded

    # -- reads of the current key --------------------------------------------------------------

    def value(self, row: int) -> Any:
        if row in self.writes:
            w = self.writes[row]
            return None if w is _REMOVED else w
        return self.load()[row]

    def elements(self, row: int) -> list:
        """A list state's elements (stored, unless replaced, then appended)."""
        w = self.writes.get(row)
        if row in self.cleared:
            return list(w or [])
        return list(self.load()[row]) + list(w or [])

    def entry(self, row: int, key: Any) -> Any:
        """One map entry after this phase's writes (``None`` when absent), without copying."""
        w = self.writes.get(row)
        if w is not None and key in w:
            v = w[key]
            return None if v is _REMOVED else v
        if row in self.cleared:
            return None
        return self.load()[row].get(key)

    def has_elements(self, row: int) -> bool:
        """Whether a list or map state holds anything, without copying a list."""
        w = self.writes.get(row)
        if self.info.kind == LIST:
            return bool(w) or (row not in self.cleared and bool(self.load()[row]))
        return bool(self.entries(row)) if w else (row not in self.cleared and bool(self.load()[row]))

    def entries(self, row: int) -> dict:
        """A map state's entries after this phase's writes."""
        base = {} if row in self.cleared else dict(self.load()[row])
        for k, v in (self.writes.get(row) or {}).items():
            if v is _REMOVED:
                base.pop(k, None)
            else:
                base[k] = v
        return base

    # -- flush ----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the phase's changes: one removal and one put/insert."""
        phase = self.task.phase
        if phase is None or (not self.writes and not self.cleared):
            self.reset()
            return
        kind = self.info.kind
        expiration = (
            ttl_expiration_ms(self.task.batch_timestamp_ms, self.ttl) if self.ttl is not None else None
        )
        if kind == VALUE:
            puts = [(r, v) for r, v in self.writes.items() if v is not _REMOVED]
            removes = [r for r, v in self.writes.items() if v is _REMOVED]
            if removes:
                self.store.remove(phase.keys.take(pa.array(removes, type=pa.int64())))
            if puts:
                rows = pa.array([r for r, _ in puts], type=pa.int64())
                cols = list(phase.keys.take(rows).columns)
                cols.append(self.codec.to_arrow([v for _, v in puts], f"ValueState {self.info.name!r}"))
                if expiration is not None:
                    cols.append(pa.array(np.full(len(puts), expiration, dtype=np.int64)))
                self.store.put(pa.Table.from_arrays(cols, schema=self.provider.schema))
        elif kind == LIST:
            if self.cleared:
                self._evict_prefix(sorted(self.cleared))
            rows_of: list[int] = []
            values: list = []
            for r, elems in self.writes.items():
                if elems:
                    rows_of.extend([r] * len(elems))
                    values.extend(elems)
            if values:
                take = pa.array(rows_of, type=pa.int64())
                cols = list(phase.keys.take(take).columns)
                cols.append(pa.array(self.task.next_indices(len(values)), type=pa.int64()))
                cols.append(self.codec.to_arrow(values, f"ListState {self.info.name!r}"))
                if expiration is not None:
                    cols.append(pa.array(np.full(len(values), expiration, dtype=np.int64)))
                self.store.insert(pa.Table.from_arrays(cols, schema=self.provider.schema))
        else:
            assert self.key_codec is not None
            if self.cleared:
                self._evict_prefix(sorted(self.cleared))
            put_rows, put_keys, put_values, rem_rows, rem_keys = [], [], [], [], []
            for r, changes in self.writes.items():
                for k, v in changes.items():
                    if v is _REMOVED:
                        if r not in self.cleared:
                            rem_rows.append(r)
                            rem_keys.append(k)
                    else:
                        put_rows.append(r)
                        put_keys.append(k)
                        put_values.append(v)
            if rem_rows:
                cols = list(phase.keys.take(pa.array(rem_rows, type=pa.int64())).columns)
                cols.append(self.key_codec.to_arrow(rem_keys, f"MapState {self.info.name!r} key"))
                self.store.remove(pa.Table.from_arrays(cols, schema=self.store.key_schema))
            if put_rows:
                cols = list(phase.keys.take(pa.array(put_rows, type=pa.int64())).columns)
                cols.append(self.key_codec.to_arrow(put_keys, f"MapState {self.info.name!r} key"))
                cols.append(self.codec.to_arrow(put_values, f"MapState {self.info.name!r}"))
                if expiration is not None:
                    cols.append(pa.array(np.full(len(put_rows), expiration, dtype=np.int64)))
                self.store.put(pa.Table.from_arrays(cols, schema=self.provider.schema))
        self.reset()

    def _evict_prefix(self, rows: list[int]) -> int:
        """Remove every stored row of these phase rows' grouping keys."""
        phase = self.task.phase
        assert phase is not None
        keys = phase.keys.take(pa.array(rows, type=pa.int64()))
        nk = self.task.num_key_columns

        def mask(table: pa.Table) -> np.ndarray:
            out = np.zeros(table.num_rows, dtype=bool)
            _, ri = match_keys(keys, table.select(list(range(nk))))
            out[ri] = True
            return out

        return self.store.evict(mask).num_rows

    def remove_expired(self) -> int:
        """The TTL cleanup: drop every expired value; returns how many went."""
        if self.ttl is None:
            return 0
        batch_ts = self.task.batch_timestamp_ms
        evicted = self.store.evict(
            lambda t: ttl_expired(pc.fill_null(t.column(TTL_COLUMN), np.iinfo(np.int64).max).to_numpy(zero_copy_only=False), batch_ts)
        )
        return evicted.num_rows


def _sort_key(value: Any) -> Any:
    """A total order for map keys (nulls first; values of mixed or unorderable types by their
    text), for a deterministic iteration order."""
    if not isinstance(value, tuple):
        value = (value,)
    return tuple((0, "") if v is None else (1, v) if isinstance(v, (int, float, str, bool)) else (2, str(v)) for v in value)


class _Timers:
    """The timers of the task (Spark's ``TimerStateImpl``)."""

    def __init__(self, task: "TaskState") -> None:
        self.task = task
        self.name = timer_store_name(task.time_mode)
        key_schema = pa.schema(list(task.key_schema) + [pa.field(EXPIRY_COLUMN, pa.int64(), nullable=False)])
        value_schema = pa.schema([pa.field(UNUSED_COLUMN, pa.bool_())])
        self.provider, self.store = task.open_store(self.name, key_schema, value_schema)
        self.reset()

    def reset(self) -> None:
        self.loaded: list[set] | None = None
        self.added: dict[int, set] = {}
        self.deleted: dict[int, set] = {}

    def load(self) -> list[set]:
        if self.loaded is None:
            phase = self.task.phase
            assert phase is not None
            table = self.store.table()
            loaded: list[set] = [set() for _ in range(phase.keys.num_rows)]
            if table.num_rows and phase.keys.num_rows:
                li, ri = match_keys(phase.keys, table.select(list(range(self.task.num_key_columns))))
                ts = table.column(EXPIRY_COLUMN).take(pa.array(ri, type=pa.int64())).to_pylist()
                for r, t in zip(li.tolist(), ts):
                    loaded[r].add(t)
            self.loaded = loaded
        return self.loaded

    def current(self, row: int) -> set:
        have = set(self.load()[row]) | self.added.get(row, set())
        return have - self.deleted.get(row, set())

    def register(self, row: int, ts: int) -> None:
        self.deleted.get(row, set()).discard(ts)
        self.added.setdefault(row, set()).add(ts)

    def delete(self, row: int, ts: int) -> None:
        if ts in self.added.get(row, set()):
            self.added[row].discard(ts)
        self.deleted.setdefault(row, set()).add(ts)

    def flush(self) -> None:
        phase = self.task.phase
        if phase is None:
            self.reset()
            return

        def rows_of(changes: dict[int, set]) -> pa.Table | None:
            rows = [(r, t) for r, ts in changes.items() for t in sorted(ts)]
            if not rows:
                return None
            keys = phase.keys.take(pa.array([r for r, _ in rows], type=pa.int64()))
            cols = list(keys.columns) + [pa.array([t for _, t in rows], type=pa.int64())]
            return pa.Table.from_arrays(cols, schema=self.store.key_schema)

        gone = rows_of(self.deleted)
        if gone is not None:
            self.store.remove(gone)
        new = rows_of(self.added)
        if new is not None:
            cols = list(new.columns) + [pa.nulls(new.num_rows, pa.bool_())]
            self.store.put(pa.Table.from_arrays(cols, schema=self.provider.schema))
        self.reset()

    def expired(self, threshold: int) -> tuple[pa.Table, list[int]]:
        """The timers at or below ``threshold`` in firing order (time, then key): their grouping keys
        and times."""
        table = self.store.table()
        nk = self.task.num_key_columns
        if table.num_rows == 0:
            return table.select(list(range(nk))), []
        ts = table.column(EXPIRY_COLUMN).to_numpy()
        due = np.flatnonzero(timer_expired(ts, threshold))
        if not len(due):
            return table.select(list(range(nk))).slice(0, 0), []
        due_ts = ts[due]
        order = due[np.argsort(due_ts, kind="stable")]
        picked = table.take(pa.array(order, type=pa.int64()))
        return picked.select(list(range(nk))), picked.column(EXPIRY_COLUMN).to_pylist()


class TaskState:
    """The state of one ``transformWithState`` partition in one batch: the stores of the
    variables ``init`` declares, the timers, the phases and the metrics Spark reports."""

    def __init__(
        self,
        open_store: Callable[[str, pa.Schema, pa.Schema], tuple[Any, Any]],
        key_schema: pa.Schema,
        time_mode: str,
        batch_timestamp_ms: int | None,
        watermark_ms: int | None,
        version: int,
        zone: Any,
        delete_store: Callable[[str], bool] | None = None,
        known: tuple[StateVariableInfo, ...] = (),
    ) -> None:
        self._open_store = open_store
        self.known = {v.name: v for v in known}
        self._delete_store = delete_store
        self.key_schema = key_schema
        self.num_key_columns = len(key_schema)
        self.time_mode = time_mode
        self.batch_timestamp_ms = int(batch_timestamp_ms) if batch_timestamp_ms is not None else 0
        self.watermark_ms = watermark_ms
        self.version = version
        self.zone = zone
        self.handle_state = CREATED
        self.variables: dict[str, _Variable] = {}
        self.timers: _Timers | None = _Timers(self) if time_mode != NO_TIME else None
        self.phase: _Phase | None = None
        self.row: int | None = None
        self._next_index = int(version) << _INDEX_SHIFT
        self.metrics: dict[str, int] = dict.fromkeys(_CUSTOM_METRICS, 0)
        self.updated = 0
        self.removed = 0

    def open_store(self, name: str, key_schema: pa.Schema, value_schema: pa.Schema) -> tuple[Any, Any]:
        return self._open_store(name, key_schema, value_schema)

    def next_indices(self, n: int) -> np.ndarray:
        start = self._next_index
        self._next_index += n
        return np.arange(start, start + n, dtype=np.int64)

    # -- declarations --------------------------------------------------------------------------

    def declare(self, info: StateVariableInfo) -> _Variable:
        if info.name in self.variables:
            raise stateful_processor_error(_DECLARE_PREFIX[info.kind], state_already_exists(info.kind, info.name))
        variable = _Variable(self, info)
        self.variables[info.name] = variable
        ttl = "WithTTL" if info.ttl_ms is not None else ""
        self.metrics[f"num{info.kind.capitalize()}State{ttl}Vars"] += 1
        return variable

    # -- phases ---------------------------------------------------------------------------------

    def begin_phase(self, keys: pa.Table, tuples: list[tuple]) -> None:
        self.phase = _Phase(keys, tuples)
        self.row = None

    def end_phase(self) -> None:
        for v in self.variables.values():
            v.flush()
        if self.timers is not None:
            self.timers.flush()
        self.phase = None
        self.row = None

    def set_key(self, row: int | None) -> None:
        self.row = row

    def current_row(self, operation: str) -> int:
        if self.row is None:
            # Spark: a state call outside a key (in init or close) finds no implicit key
            raise stateful_processor_error("", implicit_key_not_found(operation))
        return self.row

    def delete_if_exists(self, name: str) -> None:
        """``deleteIfExists``: a declared variable's stored values go (all of this partition's),
        committed with the batch, and the variable refuses every later call of the batch (its
        iterators are empty), as Spark's state server, which forgets it. In a query, a variable only an older run declared was removed
        on the driver before the run's first batch (``operators/transform_with_state.py``), and
        ``delete_store`` is not given; the test kit gives it for its own stores."""
        if name in self.variables:
            variable = self.variables[name]
            variable.store.evict(lambda t: np.ones(t.num_rows, dtype=bool))
            variable.reset()
            variable.deleted = True
            self.metrics["numDeletedStateVars"] += 1
        elif self._delete_store is not None and self._delete_store(name):
            self.metrics["numDeletedStateVars"] += 1

    def remove_expired(self) -> int:
        """Spark's ``doTtlCleanup``: every TTL variable drops its expired values."""
        n = sum(v.remove_expired() for v in self.variables.values())
        self.metrics["numValuesRemovedDueToTTLExpiry"] += n
        return n

    def num_rows_total(self) -> int:
        """Spark's ``numRowsTotal``: the keys of the variables' column families (a list counts
        once per grouping key; timers are internal and not counted)."""
        total = 0
        for v in self.variables.values():
            table = v.store.table()
            if v.info.kind == LIST and table.num_rows:
                ids = group_ids(list(table.select(list(range(self.num_key_columns))).columns), table.num_rows)
                total += int(ids.max()) + 1  # the distinct grouping keys (nested ones too)
            else:
                total += table.num_rows
        return total

    def stores(self) -> list[tuple[Any, Any]]:
        """(provider, store) of every store the task opened, timers last."""
        out = [(v.provider, v.store) for v in self.variables.values()]
        if self.timers is not None:
            out.append((self.timers.provider, self.timers.store))
        return out


_DECLARE_PREFIX = {VALUE: Prefix.INIT_VALUE, LIST: Prefix.INIT_LIST, MAP: Prefix.INIT_MAP}
_OPERATION = {VALUE: "get_value_state", LIST: "get_list_state", MAP: "get_map_state"}

#: Spark's custom metrics of the operator, all sums over tasks
_CUSTOM_METRICS = (
    "numValueStateVars",
    "numListStateVars",
    "numMapStateVars",
    "numDeletedStateVars",
    "numRegisteredTimers",
    "numDeletedTimers",
    "numExpiredTimers",
    "numValueStateWithTTLVars",
    "numListStateWithTTLVars",
    "numMapStateWithTTLVars",
    "numValuesRemovedDueToTTLExpiry",
)


def _check_declaration(state: str, kind: str, name: str, ttl: int | None, time_mode: str) -> None:
    """Spark's checks of a ``get*State`` call: only in ``init``; TTL only in processing time."""
    if state not in (CREATED, PRE_INIT):
        raise stateful_processor_error(_DECLARE_PREFIX[kind], invalid_handle_state(_OPERATION[kind], state))
    if ttl is not None:
        if time_mode != PROCESSING_TIME:
            raise stateful_processor_error(_DECLARE_PREFIX[kind], ttl_time_mode(name, time_mode_shown(time_mode)))
        if ttl <= 0:
            raise stateful_processor_error(_DECLARE_PREFIX[kind], ttl_not_positive(name))


def _check_timer_call(state: str, operation: str, time_mode: str, prefix: str) -> None:
    """Spark's checks of a timer call: a time mode, and a key being processed."""
    if time_mode == NO_TIME:
        raise stateful_processor_error(prefix, invalid_time_mode(operation, time_mode_shown(time_mode)))
    if _ORDER[state] < _ORDER[INITIALIZED] or _ORDER[state] >= _ORDER[TIMER_PROCESSED]:
        raise stateful_processor_error(prefix, invalid_handle_state(operation, state))


# ----------------------------------------------------------------------------------------------
# The PySpark-facing objects
# ----------------------------------------------------------------------------------------------


def _pyspark_classes():
    from pyspark.sql.streaming.stateful_processor import ListState, MapState, StatefulProcessorHandle, ValueState

    return StatefulProcessorHandle, ValueState, ListState, MapState


def _make_classes():
    StatefulProcessorHandle, ValueState, ListState, MapState = _pyspark_classes()  # noqa: N806

    class _Bound:
        """What the three state classes share: the variable behind them and its current key's
        row (PySpark's classes hold a client and the state's name instead)."""

        def __init__(self, variable: _Variable) -> None:
            self._variable = variable
            self._stateName = variable.info.name

        def _row(self, prefix: str) -> int:
            """The current key's row; refused as Spark's state server refuses a call on a
            variable ``deleteIfExists`` dropped (PySpark's client puts ``prefix`` before it)."""
            if self._variable.deleted:
                raise stateful_processor_error(prefix, not_initialized(self._variable.info.kind, self._variable.info.name))
            return self._variable.task.current_row(self._stateName)

        def _value(self, value: Any) -> Any:
            return _normalise(value, len(self._variable.codec.names))

        def _key(self, key: Any) -> Any:
            assert self._variable.key_codec is not None
            return _normalise(key, len(self._variable.key_codec.names))

    class ValueStateImpl(_Bound, ValueState):
        """PySpark's ``ValueState`` over the task's state."""

        def exists(self) -> bool:
            return self._variable.value(self._row(Prefix.VALUE_EXISTS)) is not None

        def get(self) -> Any:
            return self._variable.value(self._row(Prefix.GET_VALUE_STATE))

        def update(self, newValue: Any) -> None:  # noqa: N803
            row = self._row(Prefix.UPDATE_VALUE)
            if newValue is None:
                raise stateful_processor_error(Prefix.UPDATE_VALUE, null_value(self._stateName))
            self._variable.writes[row] = self._value(newValue)
            self._variable.task.updated += 1

        def clear(self) -> None:
            row = self._row(Prefix.CLEAR_VALUE)
            self._variable.writes[row] = _REMOVED
            self._variable.task.removed += 1

    class ListStateImpl(_Bound, ListState):
        """PySpark's ``ListState`` over the task's state."""

        def exists(self) -> bool:
            # PySpark's list client words this one as the value client does
            return self._variable.has_elements(self._row(Prefix.VALUE_EXISTS))

        def get(self) -> Iterator[tuple]:
            if self._variable.deleted:  # PySpark's client ends an iterator on any error
                return iter([])
            return iter(self._variable.elements(self._row("")))

        def put(self, newState: list) -> None:  # noqa: N803
            row = self._row(Prefix.UPDATE_VALUE)
            values = [self._value(v) for v in (newState or [])]
            if not values:
                raise stateful_processor_error(Prefix.UPDATE_VALUE, empty_list(self._stateName))
            self._variable.cleared.add(row)
            self._variable.writes[row] = values
            # Spark's put restarts the task's count of updated rows, then counts each element
            self._variable.task.updated = len(values)

        def appendValue(self, newState: Any) -> None:  # noqa: N802,N803
            row = self._row(Prefix.UPDATE_VALUE)
            self._variable.writes.setdefault(row, []).append(self._value(newState))
            self._variable.task.updated += 1

        def appendList(self, newState: list) -> None:  # noqa: N802,N803
            row = self._row(Prefix.UPDATE_VALUE)
            values = [self._value(v) for v in (newState or [])]
            if not values:
                raise stateful_processor_error(Prefix.UPDATE_VALUE, empty_list(self._stateName))
            self._variable.writes.setdefault(row, []).extend(values)
            self._variable.task.updated += len(values)

        def clear(self) -> None:
            row = self._row(Prefix.CLEAR_VALUE)
            self._variable.task.removed += len(self._variable.elements(row))  # Spark: the entry count
            self._variable.cleared.add(row)
            self._variable.writes[row] = []

    class MapStateImpl(_Bound, MapState):
        """PySpark's ``MapState`` over the task's state."""

        def exists(self) -> bool:
            return self._variable.has_elements(self._row(Prefix.MAP_EXISTS))

        def getValue(self, key: Any) -> Any:  # noqa: N802
            return self._variable.entry(self._row(Prefix.GET_VALUE), self._key(key))

        def containsKey(self, key: Any) -> bool:  # noqa: N802
            return self._variable.entry(self._row(Prefix.CONTAINS_KEY), self._key(key)) is not None

        def updateValue(self, key: Any, value: Any) -> None:  # noqa: N802
            row = self._row(Prefix.UPDATE_MAP)
            self._variable.writes.setdefault(row, {})[self._key(key)] = self._value(value)
            self._variable.task.updated += 1

        def _entries(self) -> dict:
            if self._variable.deleted:  # PySpark's client ends an iterator on any error
                return {}
            return self._variable.entries(self._row(""))

        def iterator(self) -> Iterator[tuple[tuple, tuple]]:
            return iter(list(self._entries().items()))

        def keys(self) -> Iterator[tuple]:
            return iter(list(self._entries()))

        def values(self) -> Iterator[tuple]:
            return iter(list(self._entries().values()))

        def removeKey(self, key: Any) -> None:  # noqa: N802
            row = self._row(Prefix.REMOVE_MAP_KEY)
            self._variable.writes.setdefault(row, {})[self._key(key)] = _REMOVED
            self._variable.task.removed += 1

        def clear(self) -> None:
            row = self._row(Prefix.CLEAR_MAP)
            self._variable.task.removed += len(self._variable.entries(row))  # Spark: a removeKey each
            self._variable.cleared.add(row)
            self._variable.writes[row] = {}

    class StatefulProcessorHandleImpl(StatefulProcessorHandle):
        """PySpark's ``StatefulProcessorHandle`` over the task's state (Spark:
        ``StatefulProcessorHandleImpl``)."""

        def __init__(self, task: TaskState) -> None:
            self._task = task

        def _declare(self, kind: str, name: str, schema: Any, key_schema: Any, ttl: Any) -> _Variable:
            t = self._task
            ttl_ms = _ttl_ms(ttl)
            _check_declaration(t.handle_state, kind, name, ttl_ms, t.time_mode)
            known = t.known.get(name)
            if known is not None and known.kind == kind:
                # the driver parsed the schemas (a DDL string needs a session, absent in a task)
                value_schema, user_key_schema = known.value_schema, known.user_key_schema
            else:
                value_schema = _parse_schema(schema)
                user_key_schema = _parse_schema(key_schema) if key_schema is not None else None
            return t.declare(StateVariableInfo(name, kind, value_schema, user_key_schema, ttl_ms))

        def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return ValueStateImpl(self._declare(VALUE, stateName, schema, None, ttlDurationMs))

        def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return ListStateImpl(self._declare(LIST, stateName, schema, None, ttlDurationMs))

        def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return MapStateImpl(self._declare(MAP, stateName, valueSchema, userKeySchema, ttlDurationMs))

        def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
            t = self._task
            _check_timer_call(t.handle_state, "register_timer", t.time_mode, Prefix.REGISTER_TIMER)
            assert t.timers is not None
            t.timers.register(t.current_row("register_timer"), int(expiryTimestampMs))
            t.metrics["numRegisteredTimers"] += 1

        def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
            t = self._task
            _check_timer_call(t.handle_state, "delete_timer", t.time_mode, Prefix.DELETE_TIMER)
            assert t.timers is not None
            t.timers.delete(t.current_row("delete_timer"), int(expiryTimestampMs))
            t.metrics["numDeletedTimers"] += 1

        def listTimers(self) -> Iterator[int]:  # noqa: N802
            t = self._task
            _check_timer_call(t.handle_state, "list_timers", t.time_mode, Prefix.LIST_TIMERS)
            assert t.timers is not None
            return iter(timer_list_order(t.timers.current(t.current_row("list_timers"))))

        def deleteIfExists(self, stateName: str) -> None:  # noqa: N802,N803
            t = self._task
            if t.handle_state not in (CREATED, PRE_INIT):
                raise stateful_processor_error(Prefix.DELETE_STATE, invalid_handle_state("delete_if_exists", t.handle_state))
            t.delete_if_exists(stateName)

    return ValueStateImpl, ListStateImpl, MapStateImpl, StatefulProcessorHandleImpl


class _Lazy:
    classes: tuple | None = None


def _classes() -> tuple:
    if _Lazy.classes is None:
        _Lazy.classes = _make_classes()
    return _Lazy.classes


def StatefulProcessorHandleImpl(task: TaskState) -> Any:  # noqa: N802 - a factory named as Spark's class
    """The processor's handle over ``task`` (a subclass of PySpark's, built on first use so that
    importing this module does not import PySpark's streaming client)."""
    return _classes()[3](task)


# ----------------------------------------------------------------------------------------------
# The driver's pre-init: what variables a processor declares
# ----------------------------------------------------------------------------------------------


class _Recorder:
    """A stand-in for a state variable on the driver: any call is a mistake there."""

    def __init__(self, name: str) -> None:
        self._stateName = name

    def __getattr__(self, item: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            msg = f"state variable {self._stateName!r}: {item}() was called in init(), where no key is being processed"
            raise RuntimeError(msg)

        return refuse


def DriverStatefulProcessorHandle(time_mode: str) -> Any:  # noqa: N802 - a factory named as Spark's class
    """A handle that records the declarations of ``init`` (Spark's
    ``DriverStatefulProcessorHandleImpl``): ``handle.variables`` lists them, with Spark's
    errors for a duplicate name or a TTL outside processing time."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

    class _Driver(StatefulProcessorHandle):
        def __init__(self) -> None:
            self.variables: list[StateVariableInfo] = []
            self.deleted: list[str] = []

        def _declare(self, kind: str, name: str, schema: Any, key_schema: Any, ttl: Any) -> Any:
            ttl_ms = _ttl_ms(ttl)
            _check_declaration(PRE_INIT, kind, name, ttl_ms, time_mode)
            if any(v.name == name for v in self.variables):
                raise stateful_processor_error(_DECLARE_PREFIX[kind], state_already_exists(kind, name))
            self.variables.append(
                StateVariableInfo(name, kind, _parse_schema(schema), _parse_schema(key_schema) if key_schema is not None else None, ttl_ms)
            )
            return _Recorder(name)

        def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return self._declare(VALUE, stateName, schema, None, ttlDurationMs)

        def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return self._declare(LIST, stateName, schema, None, ttlDurationMs)

        def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802,N803
            return self._declare(MAP, stateName, valueSchema, userKeySchema, ttlDurationMs)

        def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
            _check_timer_call(PRE_INIT, "register_timer", time_mode, Prefix.REGISTER_TIMER)

        def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802,N803
            _check_timer_call(PRE_INIT, "delete_timer", time_mode, Prefix.DELETE_TIMER)

        def listTimers(self) -> Iterator[int]:  # noqa: N802
            _check_timer_call(PRE_INIT, "list_timers", time_mode, Prefix.LIST_TIMERS)
            return iter([])

        def deleteIfExists(self, stateName: str) -> None:  # noqa: N802,N803
            self.deleted.append(stateName)

    return _Driver()
