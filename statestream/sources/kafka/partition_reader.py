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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from statestream.errors import kafka_fetch_timeout_error, kafka_offset_range_lost_error
from statestream.operators.python_worker import forget_zip_importers
from statestream.sources.kafka.client import ClientErrors, consumer_config
from statestream.sources.kafka.offsets import OffsetRange
from statestream.sources.kafka.options import tp_text

__all__ = ["KafkaRangeReader", "arrow_schema"]

log = logging.getLogger(__name__)

#: records fetched per poll
_BATCH = 10_000
#: how long one poll waits: an empty one is looked into (see ``KafkaRangeReader.read``)
_SLICE_S = 0.2
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
        self.stamps.append(stamp * 1000 if kind != 0 else -1000)  # no timestamp: -1 ms, as Spark shows it
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
    kafka_params: Mapping[str, str] = field(repr=False)  # may hold credentials
    group_id: str = ""
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000

    @property
    def executor_group_id(self) -> str:
        """The group id the tasks' consumers use: the user's, or the query's with ``-executor``."""
        return self.kafka_params.get("group.id") or f"{self.group_id}-executor"

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ids = [int(i) for b in batches for i in b.column(0).to_pylist() if int(i) < len(self.ranges)]
        if not ids:
            return
        from confluent_kafka import Consumer

        errors = ClientErrors()
        consumer = Consumer(errors.attach(consumer_config(self.kafka_params, self.executor_group_id, {"auto.offset.reset": "error"})))
        try:
            for i in ids:
                yield from self.read(consumer, self.ranges[i], errors)
        finally:
            consumer.close()
            forget_zip_importers()

    def read(self, consumer: Any, r: OffsetRange, errors: ClientErrors | None = None) -> Iterator[pa.RecordBatch]:
        """The records of one range, in Arrow batches.

        A poll that brings nothing is looked into rather than waited out: a consumer whose
        position moved past the offset asked for skipped offsets without records (transaction
        markers, compaction), which is not data loss; a log that now begins above it, or ends
        below it, lost records (``failOnDataLoss``); only a position that does not move for
        ``kafkaConsumer.pollTimeoutMs`` is a timeout, as in Spark."""
        from confluent_kafka import TopicPartition

        schema = arrow_schema(self.include_headers)
        cols = _Columns(self.include_headers)
        nxt, until = r.from_offset, r.until_offset
        consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
        idle_s = 0.0
        try:
            while nxt < until:
                msgs = consumer.consume(min(_BATCH, until - nxt), timeout=_SLICE_S)
                low = None  # the log's first offset, fetched at most once per chunk
                seek_to = None
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        seek_to = self._on_error(consumer, r, nxt, err)
                        if seek_to is not None:
                            break
                        continue
                    offset = msg.offset()
                    if offset < nxt:
                        continue
                    if offset >= until:
                        nxt = until
                        break
                    if offset > nxt:  # offsets without records: lost only below the log's start
                        if low is None:
                            low = self._watermarks(consumer, r)[0]
                        if low > nxt:
                            self._lost(r, nxt, min(offset, low))
                    cols.add(msg)
                    nxt = offset + 1
                if seek_to is not None:
                    if seek_to >= until:
                        break
                    nxt = seek_to
                    consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
                    idle_s = 0.0
                    continue
                if len(cols) >= _ROWS_PER_BATCH:
                    yield cols.batch(r.topic, r.partition, schema)
                    cols.clear()
                if msgs or nxt >= until:
                    idle_s = 0.0
                    continue
                if errors is not None and errors.fatal:  # a refused login or TLS handshake
                    raise RuntimeError(f"Kafka: the brokers refused this task's consumer of {tp_text((r.topic, r.partition))}: {errors.fatal}")
                moved = self._after_empty_poll(consumer, r, nxt)
                if moved is None:
                    break
                if moved > nxt:
                    nxt = moved
                    if nxt < until:
                        consumer.assign([TopicPartition(r.topic, r.partition, nxt)])
                    idle_s = 0.0
                    continue
                idle_s += _SLICE_S
                if idle_s * 1000 >= self.poll_timeout_ms:
                    raise kafka_fetch_timeout_error(nxt, self.poll_timeout_ms)
        finally:
            consumer.unassign()
        if len(cols):
            yield cols.batch(r.topic, r.partition, schema)

    def _watermarks(self, consumer: Any, r: OffsetRange) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=self.poll_timeout_ms / 1000.0, cached=False)
        return int(low), int(high)

    def _lost(self, r: OffsetRange, start: int, end: int) -> None:
        """Records ``[start, end)`` of the range are gone from Kafka."""
        if self.fail_on_data_loss:
            raise kafka_offset_range_lost_error(start, end, tp_text((r.topic, r.partition)), self.executor_group_id)
        log.warning(
            "Kafka: records [%d, %d) of %s are no longer available (failOnDataLoss=false): skipped",
            start, end, tp_text((r.topic, r.partition)),
        )

    def _after_empty_poll(self, consumer: Any, r: OffsetRange, nxt: int) -> int | None:
        """Where to go on after a poll that brought nothing: the consumer's position if it moved
        past ``nxt`` (offsets without records), the log's start if the records aged out, None
        when the range is over (the log now ends below it: lost), ``nxt`` to keep waiting."""
        from confluent_kafka import TopicPartition

        position = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
        if position > nxt:
            return position if position < r.until_offset else None
        low, high = self._watermarks(consumer, r)
        if low > nxt:
            self._lost(r, nxt, min(low, r.until_offset))
            return low if low < r.until_offset else None
        if high <= nxt:  # the log was cut below the planned range (truncation, a recreated topic)
            self._lost(r, nxt, r.until_offset)
            return None
        return nxt

    def _on_error(self, consumer: Any, r: OffsetRange, nxt: int, err: Any) -> int | None:
        """An error event of the poll: an offset out of range is data loss or a move to the
        log's start (the offset to go on from is returned); transient broker trouble is logged
        and waited out; anything else about this partition fails the task."""
        from confluent_kafka import KafkaError

        code = err.code()
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):  # noqa: SLF001 - librdkafka's internal error codes, as confluent_kafka names them
            low, high = self._watermarks(consumer, r)
            if nxt < low:
                self._lost(r, nxt, min(low, r.until_offset))
                return low
            if nxt >= high:
                self._lost(r, nxt, r.until_offset)  # the log ends below the offset asked for
                return r.until_offset
            return nxt  # a stale answer (the log moved meanwhile): ask again
        if code == KafkaError._PARTITION_EOF:  # noqa: SLF001 - librdkafka's internal error codes, as confluent_kafka names them
            return None
        if not err.fatal() and (err.retriable() or code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT)):  # noqa: SLF001 - librdkafka's internal error codes, as confluent_kafka names them
            log.warning("Kafka: %s while reading %s at offset %d: retrying", err, tp_text((r.topic, r.partition)), nxt)
            return None
        raise RuntimeError(f"Kafka: reading {tp_text((r.topic, r.partition))} at offset {nxt} failed: {err}")
