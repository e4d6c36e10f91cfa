"""Reading records inside a Spark task (Spark: ``KafkaBatchPartitionReader`` and
``KafkaDataConsumer``): each task reads the ranges it is given with a consumer assigned to
their partitions, as Arrow record batches in the source's schema.

Offsets missing inside a range while the partition's log still begins at or below them
(compaction, transaction markers) are skipped, as Spark skips them. Offsets below the log's
beginning (aged out by retention) are data loss: an error with ``failOnDataLoss``, otherwise a
warning and the rest of the range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from statestream.sources.kafka.client import consumer_config
from statestream.sources.kafka.offsets import KafkaDataLossError, OffsetRange
from statestream.sources.kafka.options import tp_text

__all__ = ["KafkaRangeReader", "arrow_schema"]

log = logging.getLogger(__name__)

#: records fetched per poll
_BATCH = 10_000
#: Arrow batch size handed to Spark
_ROWS_PER_BATCH = 50_000

_HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The source's schema as Arrow (Spark's timestamps as UTC microseconds)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS))
    return pa.schema(fields)


class _Columns:
    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.offsets: list[int] = []
        self.stamps: list[Any] = []
        self.types: list[int] = []
        self.headers: list[Any] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, msg: Any) -> None:
        self.keys.append(msg.key())
        self.values.append(msg.value())
        self.offsets.append(msg.offset())
        kind, stamp = msg.timestamp()
        # confluent-kafka's 0/1/2 (none, create, log append) are Kafka's -1/0/1
        self.types.append(kind - 1)
        self.stamps.append(None if kind == 0 else stamp * 1000)
        if self.include_headers:
            hs = msg.headers()
            self.headers.append(None if not hs else [{"key": k, "value": v} for k, v in hs])

    def batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, _HEADERS))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class KafkaRangeReader:
    """The ``mapInArrow`` function of a Kafka batch: the input holds the task's range numbers
    (``id`` of ``spark.range``), ``ranges`` what they stand for."""

    ranges: Sequence[OffsetRange]
    kafka_params: Mapping[str, str]
    group_id: str
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    accumulator: Any = field(default=None, compare=False)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ids = [int(i) for b in batches for i in b.column(0).to_pylist()]
        if not ids:
            return
        from confluent_kafka import Consumer

        consumer = Consumer(consumer_config(self.kafka_params, self.group_id + "-executor", {"auto.offset.reset": "error"}))
        try:
            for i in ids:
                yield from self.read(consumer, self.ranges[i])
        finally:
            consumer.close()

    def read(self, consumer: Any, r: OffsetRange) -> Iterator[pa.RecordBatch]:
        """The records of one range, in Arrow batches."""
        from confluent_kafka import KafkaError, TopicPartition

        schema = arrow_schema(self.include_headers)
        cols = _Columns(self.include_headers)
        nxt = r.from_offset
        consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
        timeout_s = self.poll_timeout_ms / 1000.0
        try:
            while nxt < r.until_offset:
                msgs = consumer.consume(min(_BATCH, r.until_offset - nxt), timeout=timeout_s)
                if not msgs:
                    nxt = self._nothing_returned(consumer, r, nxt, timeout_s)
                    if nxt is None:
                        break
                    consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
                    continue
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            moved = self._out_of_range(consumer, r, nxt, timeout_s)
                            if moved is None:
                                return
                            nxt = moved
                            consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
                            break
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(f"Kafka: reading {tp_text((r.topic, r.partition))} at offset {nxt} failed: {err}")
                    offset = msg.offset()
                    if offset >= r.until_offset:
                        nxt = r.until_offset
                        break
                    if offset > nxt:
                        self._gap(consumer, r, nxt, offset, timeout_s)
                    cols.add(msg)
                    nxt = offset + 1
                if len(cols) >= _ROWS_PER_BATCH:
                    yield cols.batch(r.topic, r.partition, schema)
                    cols.clear()
        finally:
            consumer.unassign()
        if len(cols):
            yield cols.batch(r.topic, r.partition, schema)

    def _low(self, consumer: Any, r: OffsetRange, timeout_s: float) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=timeout_s, cached=False)
        return int(low), int(high)

    def _lost(self, r: OffsetRange, start: int, end: int) -> None:
        """Records ``[start, end)`` of the range are gone from Kafka."""
        if self.fail_on_data_loss:
            raise KafkaDataLossError(
                "COULD_NOT_READ_OFFSET_RANGE",
                f"Could not read records in offset [{start}, {end}) for topic partition {tp_text((r.topic, r.partition))}\n"
                f"with consumer group {self.group_id}-executor.",
            )
        log.warning(
            "Kafka: records [%d, %d) of %s are no longer available (failOnDataLoss=false): skipped",
            start, end, tp_text((r.topic, r.partition)),
        )

    def _gap(self, consumer: Any, r: OffsetRange, nxt: int, got: int, timeout_s: float) -> None:
        """A record beyond the one asked for: data loss only if the log now begins above it."""
        low, _ = self._low(consumer, r, timeout_s)
        if low > nxt:
            self._lost(r, nxt, min(got, low))

    def _out_of_range(self, consumer: Any, r: OffsetRange, nxt: int, timeout_s: float) -> int | None:
        low, high = self._low(consumer, r, timeout_s)
        if nxt < low:
            self._lost(r, nxt, min(low, r.until_offset))
            return low if low < r.until_offset else None
        raise RuntimeError(
            f"Kafka: offset {nxt} of {tp_text((r.topic, r.partition))} is out of range [{low}, {high}) while reading up to {r.until_offset}"
        )

    def _nothing_returned(self, consumer: Any, r: OffsetRange, nxt: int, timeout_s: float) -> int | None:
        """A poll that returned nothing: the rest of the range aged out, or a timeout."""
        low, high = self._low(consumer, r, timeout_s)
        if low > nxt:
            self._lost(r, nxt, min(low, r.until_offset))
            return low if low < r.until_offset else None
        if high <= nxt:
            # the log ends below the range (records that will never come, e.g. aborted ones)
            return None
        from statestream.errors import StatestreamIllegalStateException

        raise StatestreamIllegalStateException(
            f"Cannot fetch record for offset {nxt} in {self.poll_timeout_ms} milliseconds"
        )
