"""Streaming deduplication: StreamingDeduplicateExec and StreamingDeduplicateWithinWatermarkExec.

Spark: ``BaseStreamingDeduplicateExec`` and its two subclasses (``statefulOperators.scala``),
planned by ``StreamingDeduplicationStrategy`` under an ``Exchange hashpartitioning(keys, N)``.

How a batch runs here: the exchange is Spark's own ``repartition(N, *keys)`` (the same
``pmod(murmur3(keys), N)`` partitioning as Spark's stateful exchange), and ``mapInArrow`` then hands
each task the rows of one state partition. The task (``DeduplicationStateStep``) works on the
whole partition at once, on Arrow:

1. rows whose event time is ``<=`` the late-event watermark are dropped, whenever the *input* has
   an event-time column, even if it is not a key (``numRowsDroppedByWatermark``);
2. the first row of each distinct key, in the partition's row order, is a candidate (Spark keeps
   the first row its iterator meets); one ``lookup`` of all candidates' keys in the store tells
   which are new; new rows are emitted and their keys put, everything else counts in
   ``numDroppedDuplicateRows``;
3. eviction: ``dropDuplicates`` removes keys whose event-time key column is ``<=`` the eviction
   watermark (only when a key carries the event-time marker; otherwise state is kept forever);
   ``dropDuplicatesWithinWatermark`` removes keys whose ``expiresAtMicros`` (event time of the
   accepted row plus the watermark delay) is ``<=`` the eviction watermark;
4. commit of version N+1; the metrics go to the driver through the accumulator.

Key equality is Spark's for this operator: the state key is a binary ``UnsafeRow``, and unlike an
aggregation's grouping keys the dedup keys are not float-normalised, so ``-0.0`` and ``0.0`` are
two keys (checked on Spark 4.1). Floating-point key columns are therefore matched on their bit
patterns (NaN made canonical, as ``UnsafeRow`` writes it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream.errors import dedup_key_list_type_error
from statestream.operators.state_step import StateStep, finish_writer_metrics, map_state_partitions
from statestream.operators.aggregate import PARTITION_ID_COLUMN, ShuffleExchangeExec
from statestream.operators.partition_routes import exchange_keys, state_partition_id
from statestream.operators.base import (
    PhysicalOperator,
    StatefulOperatorStateInfo,
    StateStoreWriter,
    WatermarkSupport,
)
from statestream.operators.stateful import event_time_micros, older_than_watermark
from statestream.state.keys import match_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

logger = logging.getLogger(__name__)

__all__ = [
    "DeduplicationInfo",
    "StatefulShuffleExchangeExec",
    "StreamingDeduplicateExec",
    "StreamingDeduplicateWithinWatermarkExec",
    "DeduplicationStateStep",
    "DROPPED_DUPLICATES_METRIC",
    "first_occurrence_indices",
    "binary_comparable",
    "binary_comparable_decoded",
    "binary_comparable_decoded_keys",
]

#: The operator's custom metric (Spark's name), reported under ``customMetrics``.
DROPPED_DUPLICATES_METRIC = "numDroppedDuplicateRows"

#: Value column of ``dropDuplicates`` state: one always-null field (Spark: ``struct<__dummy__: void>``).
DUMMY_VALUE_FIELD = "__dummy__"
#: Value column of ``dropDuplicatesWithinWatermark`` state (Spark's name).
EXPIRES_AT_FIELD = "expiresAtMicros"



# ----------------------------------------------------------------------------------------------
# Pure rules (no Spark)
# ----------------------------------------------------------------------------------------------


def _needs_rewrite(t: pa.DataType) -> bool:
    """Whether a key type must be re-encoded to be matched as Spark matches dedup keys."""
    if pa.types.is_floating(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_needs_rewrite(t.field(i).type) for i in range(t.num_fields))
    return False


def _fixed_width_codes(values: pa.Array) -> np.ndarray | None:
    """Non-null int64 codes of a fixed-width element array (nulls as 0), or ``None`` for element
    types this encoding does not cover."""
    t = values.type
    if pa.types.is_floating(t):
        values = _binary_view(values)
    elif pa.types.is_boolean(t):
        values = values.cast(pa.int8())
    elif pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t) or pa.types.is_time64(t):
        values = values.cast(pa.int64())
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        values = values.cast(pa.int32())
    elif not pa.types.is_integer(values.type):
        return None
    filled = pc.fill_null(values, pa.scalar(0, values.type)) if values.null_count else values
    return filled.to_numpy(zero_copy_only=False).astype("<i8", copy=False)


def _encode_list(arr: pa.Array) -> pa.Array:
    """A list column as one ``large_binary`` value per row that is equal exactly when Spark's
    binary rows are: per element a validity byte, then 8 bytes of value (fixed-width elements) or
    4 bytes of length and the bytes (strings, binary). A null list stays null; an empty list is
    the empty string. Vectorised with numpy and Arrow's kernels: no per-row Python."""
    n = len(arr)
    # a null list may still span values in Arrow: make it empty first, so offsets and values agree
    dense = arr.fill_null(pa.scalar([], arr.type)) if arr.null_count else arr
    offsets = dense.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    values = dense.flatten()
    m = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8) if m else np.zeros(0, np.uint8)
    t = values.type
    codes = _fixed_width_codes(values) if m else np.zeros(0, np.int64)
    if codes is not None:
        elem = np.empty(m, dtype=[("n", "u1"), ("v", "<i8")])
        elem["n"] = valid
        elem["v"] = codes
        data = elem.tobytes()
        row_offsets = offsets * 9
    else:
        # per element a validity byte, 4 bytes of length and the bytes: of a string or binary
        # element itself, of any other element its exact encoding (structs, nested lists, decimals)
        text = pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        parts = _length_prefixed(values.cast(pa.large_binary()) if text else _element_bytes(values))
        part_offsets = np.frombuffer(parts.buffers()[1], dtype=np.int64)[parts.offset : parts.offset + m + 1] if m else np.zeros(1, np.int64)
        data = np.frombuffer(parts.buffers()[2], dtype=np.uint8)[part_offsets[0] : part_offsets[-1]].tobytes() if m else b""
        row_offsets = part_offsets[offsets] - part_offsets[0]
    validity = None
    if arr.null_count:
        validity = pa.array(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)).buffers()[1]
    return pa.Array.from_buffers(
        pa.large_binary(), n, [validity, pa.py_buffer(row_offsets.astype(np.int64).tobytes()), pa.py_buffer(data)]
    )


_NO_SEPARATOR = pa.scalar(b"", pa.large_binary())


def _map_entries(arr: pa.Array) -> pa.Array:
    """A map column as the list of its (key, value) entries, in the order the map holds them:
    Spark compares dedup keys as binary rows, in which ``{a: 1, b: 2}`` and ``{b: 2, a: 1}``
    differ (unlike an aggregation's grouping, which sorts a map's entries first)."""
    if arr.offset:  # Arrow takes a validity mask only with offsets that start the array
        arr = pa.concat_arrays([arr])
    entries = pa.StructArray.from_arrays([arr.keys, arr.items], names=["key", "value"])
    return pa.ListArray.from_arrays(arr.offsets, entries, mask=arr.is_null() if arr.null_count else None)


def _length_prefixed(values: pa.Array) -> pa.Array:
    """Each value of a ``large_binary`` array (nulls as empty) after a validity byte and its
    length in 4 bytes: parts that concatenate without ambiguity."""
    n = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8) if n else np.zeros(0, np.uint8)
    filled = pc.fill_null(values, b"") if values.null_count else values
    lens = pc.binary_length(filled).to_numpy(zero_copy_only=False).astype("<i4") if n else np.zeros(0, "<i4")
    head = np.empty(n, dtype=[("n", "u1"), ("len", "<i4")])
    head["n"] = valid
    head["len"] = lens
    heads = pa.FixedSizeBinaryArray.from_buffers(pa.binary(5), n, [None, pa.py_buffer(head.tobytes())])
    return pc.binary_join_element_wise(heads.cast(pa.large_binary()), filled, _NO_SEPARATOR)


def _element_bytes(values: pa.Array) -> pa.Array:
    """Each element of a list as ``large_binary`` bytes equal exactly when Spark's binary rows of
    the elements are (null elements are told apart by the list encoding's validity byte): a
    struct as its fields' parts in order, a list by :func:`_encode_list`, a fixed-width value by
    its 8-byte code, a string or binary by its bytes, a decimal (of the column's one scale) by
    its text."""
    t = values.type
    n = len(values)
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return _with_nulls_of(values, pa.array([b""] * n, pa.large_binary()))
        parts = [_length_prefixed(_element_bytes(child)) for child in values.flatten()]
        return _with_nulls_of(values, pc.binary_join_element_wise(*parts, _NO_SEPARATOR))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _encode_list(values)
    if pa.types.is_map(t):
        return _encode_list(_map_entries(values))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return values.cast(pa.large_binary())
    if pa.types.is_decimal(t):
        return values.cast(pa.string()).cast(pa.large_binary())
    codes = _fixed_width_codes(values)
    if codes is None:
        raise dedup_key_list_type_error(t)
    encoded = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), n, [None, pa.py_buffer(codes.astype("<i8").tobytes())])
    return _with_nulls_of(values, encoded.cast(pa.large_binary()))


def _with_nulls_of(values: pa.Array, encoded: pa.Array) -> pa.Array:
    """``encoded``, null where ``values`` is."""
    if not values.null_count:
        return encoded
    return pc.if_else(values.is_valid(), encoded, pa.scalar(None, encoded.type))


def _binary_view(arr: pa.Array) -> pa.Array:
    """``arr`` as Spark compares it in a binary key row: floating-point values by their bits (NaN
    made canonical, as ``UnsafeRow`` writes it), lists and maps (their entries in order) by an
    exact byte encoding."""
    t = arr.type
    if pa.types.is_floating(t):
        canonical = pc.if_else(pc.is_nan(arr), pa.scalar(float("nan"), t), arr)
        width = {32: pa.int32(), 64: pa.int64()}[t.bit_width]
        return canonical.view(width)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _encode_list(arr)
    if pa.types.is_map(t):
        return _encode_list(_map_entries(arr))
    if pa.types.is_struct(t) and _needs_rewrite(t):
        children = [_binary_view(arr.field(i)) for i in range(t.num_fields)]
        fields = [pa.field(t.field(i).name, c.type, t.field(i).nullable) for i, c in enumerate(children)]
        mask = pc.is_null(arr) if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    return arr


def binary_comparable(keys: pa.Table) -> pa.Table:
    """The key columns as the state store should match them for deduplication.

    Spark compares dedup keys as binary rows: ``-0.0`` and ``0.0`` are different keys, while the
    store's matching follows grouping equality (which unifies them), and array columns are legal
    keys, which the store cannot join on. Floating-point columns (and struct fields) become
    integers of the same width holding their bits, and lists an exact byte encoding, which makes
    the store's exact match Spark's binary one. Other columns are returned untouched (no copy).
    """
    if not any(_needs_rewrite(f.type) for f in keys.schema):
        return keys
    cols = []
    fields = []
    for f, col in zip(keys.schema, keys.columns):
        if _needs_rewrite(f.type):
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            arr = _binary_view(arr)
            cols.append(arr)
            fields.append(pa.field(f.name, arr.type, f.nullable))
        else:
            cols.append(col)
            fields.append(f)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def binary_comparable_decoded_keys(columns: Sequence[pa.Array], spark_types: Sequence[Any]) -> list[pa.Array] | int:
    """A deduplication's stored key columns decoded by their Spark types
    (:func:`binary_comparable_decoded` each), or the index of the first column that has no
    decoding yet: the state reader and the repartition each refuse that column in their own
    words."""
    out = []
    for i, (column, spark_type) in enumerate(zip(columns, spark_types)):
        decoded = binary_comparable_decoded(column, spark_type)
        if decoded is None:
            return i
        out.append(decoded)
    return out


def binary_comparable_decoded(arr: pa.Array, spark_type: Any) -> pa.Array | None:
    """One key column as the state holds it (:func:`binary_comparable`) back as the query had
    it, given its Spark type (``jsonValue`` form, as the state schema file records it):
    floating-point columns and struct fields from their bits (``-0.0`` and NaN included, NaN
    canonical), other columns as they are. None when the column holds an encoding that has no
    decoding yet (a list's byte encoding). A column stored as it was (a float stored as a float)
    is returned as it is."""
    t = arr.type
    if spark_type == "double" and t == pa.int64():
        return arr.view(pa.float64())
    if spark_type == "float" and t == pa.int32():
        return arr.view(pa.float32())
    kind = spark_type.get("type") if isinstance(spark_type, dict) else None
    if kind == "struct" and pa.types.is_struct(t):
        fields = spark_type.get("fields", [])
        if len(fields) != t.num_fields:
            return None
        children = []
        for i, f in enumerate(fields):
            child = binary_comparable_decoded(arr.field(i), f.get("type"))
            if child is None:
                return None
            children.append(child)
        if all(c.type == t.field(i).type for i, c in enumerate(children)):
            return arr
        out_fields = [pa.field(t.field(i).name, c.type, t.field(i).nullable) for i, c in enumerate(children)]
        mask = pc.is_null(arr) if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=out_fields, mask=mask)
    if kind in ("array", "map") and (pa.types.is_large_binary(t) or pa.types.is_binary(t)):
        return None
    return arr


def first_occurrence_indices(keys: pa.Table) -> np.ndarray:
    """Ascending row indices of the first row of every distinct key in ``keys``.

    Spark keeps, within a batch, the first row of a key its partition iterator meets; the rows
    of a partition reach the step in that order, so the first index per key is that row.
    Equality is the state store's (null == null; use :func:`binary_comparable` first for
    Spark's binary float equality).
    """
    n = keys.num_rows
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if keys.num_columns == 0:
        return np.zeros(1, dtype=np.int64)
    li, ri = match_keys(keys, keys)
    if len(li) == n:  # every row matched only itself: all keys distinct
        return np.arange(n, dtype=np.int64)
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, li, ri)
    return np.flatnonzero(first == np.arange(n, dtype=np.int64))


# ----------------------------------------------------------------------------------------------
# Planning
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeduplicationInfo:
    """What the exchange and the dedup operator of one ``dropDuplicates`` share."""

    key_indices: tuple[int, ...]  # positions of the key columns in the input, in Spark's key order
    key_names: tuple[str, ...]
    within_watermark: bool
    output_schema: Any = field(repr=False)  # the input's StructType (with metadata); output = input
    event_time_index: int | None = None  # the input's event-time column (late-row filter)
    event_time_is_struct: bool = False
    event_time_key: int | None = None  # position *among the keys* of the event-time key, if any
    event_time_key_is_struct: bool = False
    delay_ms: int = 0  # the event-time column's watermark delay (within-watermark expiry)
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)

    def key_sql(self) -> str:
        return ", ".join(self.key_names)


# ----------------------------------------------------------------------------------------------
# Physical operators
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatefulShuffleExchangeExec(ShuffleExchangeExec):
    """``Exchange hashpartitioning(keys, N), REQUIRED_BY_STATEFUL_OPERATOR`` performed by Spark's
    ``repartition(N, *keys)``, which uses exactly that partitioning. Each row also carries its
    partition id, ``pmod(hash(keys), N)``, so that the state step can check it met the rows of
    its own state partition only."""

    info: DeduplicationInfo | None = None

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import functions as F

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        n = int(self.num_partitions or 1)
        cols = [F.col("`" + df.columns[i].replace("`", "``") + "`") for i in self.info.key_indices]
        hashed = exchange_keys(df, cols, self.info.key_schema_json)
        return df.withColumn(PARTITION_ID_COLUMN, state_partition_id(hashed, n)).repartition(n, *hashed)


@dataclass(frozen=True)
class StreamingDeduplicateExec(PhysicalOperator, StateStoreWriter, WatermarkSupport):
    """``dropDuplicates(keys)`` on a stream (Spark: ``StreamingDeduplicateExec``)."""

    child: PhysicalOperator | None = None
    info: DeduplicationInfo | None = None
    state_info: StatefulOperatorStateInfo | None = None
    event_time_watermark_for_late_events: int | None = None
    event_time_watermark_for_eviction: int | None = None
    store_conf: Any = None
    #: explain only: the keys as the input shows them, with attribute ids (``value#1L``)
    keys_text: str = ""

    operator_name = "dedupe"
    reusable_in_batch_plans = True
    #: Spark does not validate the value schema of this operator's state (the dummy value).
    check_value_schema = False

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        """Spark: in any output mode, another batch is due once the watermark passed the one
        this batch evicted with (even when no key carries the event time)."""
        return self.watermark_passed_eviction(new_input_watermark_ms)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql.pandas.types import to_arrow_schema

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        out_schema = self.info.output_schema
        step = DeduplicationStateStep(
            **self.state_step_args(ctx),
            key_indices=self.info.key_indices,
            key_names=self.info.key_names,
            within_watermark=self.info.within_watermark,
            input_schema=to_arrow_schema(df.schema, timestamp_utc=True),
            w_late_ms=self.event_time_watermark_for_late_events,
            w_evict_ms=self.event_time_watermark_for_eviction,
            event_time_index=self.info.event_time_index,
            event_time_is_struct=self.info.event_time_is_struct,
            event_time_key=self.info.event_time_key,
            event_time_key_is_struct=self.info.event_time_key_is_struct,
            delay_ms=self.info.delay_ms,
        )
        out = map_state_partitions(df, step, out_schema, ctx, self.get_state_info().num_partitions)
        for f in out_schema.fields:
            if f.metadata:
                out = out.withMetadata(f.name, dict(f.metadata))
        return out

    def _spark_name(self) -> str:
        return "StreamingDeduplicate"

    def simple_string(self) -> str:
        assert self.info is not None
        si = self.state_info
        late = self.event_time_watermark_for_late_events
        evict = self.event_time_watermark_for_eviction
        return (
            f"{self._spark_name()} [{self.keys_text or self.info.key_sql()}], {si if si else 'state info [ <unknown> ]'} "
            f"stateStoreCkptIds = None, {late if late is not None else 'None'}, {evict if evict is not None else 'None'}"
        )


@dataclass(frozen=True)
class StreamingDeduplicateWithinWatermarkExec(StreamingDeduplicateExec):
    """``dropDuplicatesWithinWatermark(keys)`` (Spark: ``StreamingDeduplicateWithinWatermarkExec``):
    a key is remembered until the watermark passes the event time of its accepted row plus the
    watermark delay."""

    operator_name = "dedupeWithinWatermark"
    check_value_schema = True

    def _spark_name(self) -> str:
        return "StreamingDeduplicateWithinWatermark"


# ----------------------------------------------------------------------------------------------
# The per-partition state step
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeduplicationStateStep(StateStep):
    """The state step of one partition, picklable for Spark's Python workers; ``__call__`` is
    the ``mapInArrow`` function and ``process`` the Spark-free part (unit-testable)."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    key_indices: tuple[int, ...]
    key_names: tuple[str, ...]
    within_watermark: bool
    input_schema: pa.Schema
    w_late_ms: int | None
    w_evict_ms: int | None
    event_time_index: int | None = None
    event_time_is_struct: bool = False
    event_time_key: int | None = None
    event_time_key_is_struct: bool = False
    delay_ms: int = 0
    store_conf: Any = None

    batch_fields: ClassVar[tuple[str, ...]] = ("version", "w_late_ms", "w_evict_ms")

    def _value_schema(self) -> pa.Schema:
        if self.within_watermark:
            return pa.schema([pa.field(EXPIRES_AT_FIELD, pa.int64(), nullable=False)])
        return pa.schema([pa.field(DUMMY_VALUE_FIELD, pa.null())])

    def process(self, partition: int, batches) -> tuple[pa.Table, dict]:
        """Deduplicate one partition's rows against its state; returns (rows to emit, metrics)."""
        table = self.partition_input(batches, partition, "the exchange did not partition by the deduplication keys")

        keys_all = binary_comparable(
            pa.Table.from_arrays([table.column(i) for i in self.key_indices], names=list(self.key_names))
        )
        key_schema = keys_all.schema
        value_schema = self._value_schema()
        m = self.new_metrics(partition)
        with self.store_task(partition) as stores:
            store = stores.open(self.provider(partition, key_schema, value_schema))
            t0 = time.perf_counter()
            keys = keys_all
            if self.event_time_index is not None and self.w_late_ms is not None and table.num_rows:
                late = older_than_watermark(table, self.event_time_index, self.event_time_is_struct, self.w_late_ms)
                n_late = int(pc.sum(late).as_py() or 0)
                if n_late:
                    self.record_late_rows(partition, table.filter(late), self.w_late_ms)
                    keep = pc.invert(late)
                    table = table.filter(keep)
                    keys = keys.filter(keep)
                m["numRowsDroppedByWatermark"] = n_late
            candidates = first_occurrence_indices(keys)
            if len(candidates):
                cand_keys = keys.take(pa.array(candidates))
                found = store.lookup(cand_keys).column("__found").to_numpy(zero_copy_only=False)
                new_rows = candidates[~found]
                new_keys = cand_keys.filter(pa.array(~found))
            else:
                new_rows = candidates
                new_keys = keys.slice(0, 0)
            output = table.take(pa.array(new_rows, type=pa.int64()))
            if new_keys.num_rows:
                store.insert(pa.Table.from_arrays(list(new_keys.columns) + [self._values(output)], schema=pa.schema(list(key_schema) + list(value_schema))))
            m["numUpdatedStateRows"] = new_keys.num_rows
            m[DROPPED_DUPLICATES_METRIC] = table.num_rows - new_keys.num_rows
            updates_ms = (time.perf_counter() - t0) * 1000
            r0 = time.perf_counter()
            evicted = self._evict(store)
            removal_ms = (time.perf_counter() - r0) * 1000
            m["numRemovedStateRows"] = evicted
        finish_writer_metrics(
            m, stores, updates_ms, removal_ms, num_output_rows=output.num_rows,
            custom={DROPPED_DUPLICATES_METRIC: m[DROPPED_DUPLICATES_METRIC]},
        )
        return output, m

    def _values(self, rows: pa.Table) -> pa.Array:
        """The state value of each newly accepted row."""
        n = rows.num_rows
        if not self.within_watermark:
            return pa.nulls(n)
        assert self.event_time_index is not None, "dropDuplicatesWithinWatermark needs an event-time column"
        # Spark reads the event time as a long; a null event time reads as 0.
        micros = pc.fill_null(event_time_micros(rows, self.event_time_index, self.event_time_is_struct), 0)
        expires = pc.add(micros, pa.scalar(self.delay_ms * 1000, pa.int64()))
        return expires.combine_chunks() if isinstance(expires, pa.ChunkedArray) else expires

    def _evict(self, store) -> int:
        """Remove expired keys; returns how many."""
        if self.w_evict_ms is None:
            return 0
        wm_us = self.w_evict_ms * 1000
        nk = len(self.key_indices)
        if self.within_watermark:
            evicted = store.evict(lambda t: pc.less_equal(t.column(nk), wm_us), row_wise=True)
            return evicted.num_rows
        if self.event_time_key is None:
            return 0
        col, is_struct, wm = self.event_time_key, self.event_time_key_is_struct, self.w_evict_ms
        return store.evict(lambda t: older_than_watermark(t, col, is_struct, wm), row_wise=True).num_rows
