"""The driver's view of the Kafka cluster (Spark: ``KafkaOffsetReaderAdmin``): which partitions
the strategy reads, their earliest and latest offsets, and the offsets of timestamps. One
consumer per source, used only for metadata and offset look-ups, never to read records."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from statestream.errors import (
    KafkaUnreachableError,
    kafka_metadata_unavailable_error,
    kafka_no_answer_error,
    kafka_no_offset_for_timestamp_error,
    kafka_partition_missing_error,
    kafka_refused_error,
    kafka_starting_offsets_partitions_mismatch_error,
    kafka_timestamp_partitions_mismatch_error,
)
from statestream.sources.kafka.client import ClientErrors, consumer_config
from statestream.sources.kafka.offsets import set_text
from statestream.sources.kafka.options import EARLIEST, LATEST, ConsumerStrategy, KafkaSourceOptions, OffsetRangeLimit, TopicPartition, tp_text

__all__ = ["KafkaOffsetReader"]

log = logging.getLogger(__name__)

#: Kafka's own topics, never matched by a subscribePattern (as Spark's Admin-based reader lists
#: topics without internal ones)
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class KafkaOffsetReader:
    """Offsets of the partitions that ``options.strategy`` selects, fetched from the brokers.

    ``timeout_ms`` bounds each request: an unreachable broker is an error naming the servers
    tried, not a hang."""

    def __init__(self, options: KafkaSourceOptions, group_id: str, timeout_ms: int = 30_000) -> None:
        from confluent_kafka import Consumer

        self.options = options
        self.strategy: ConsumerStrategy = options.strategy
        self.timeout_s = timeout_ms / 1000.0
        self.errors = ClientErrors()
        self._consumer = Consumer(self.errors.attach(consumer_config(options.kafka_params, group_id)))
        self._warned_missing: set[str] = set()

    def close(self) -> None:
        self._consumer.close()

    def _unreachable(self, what: str, exc: BaseException) -> KafkaUnreachableError:
        servers = self.options.kafka_params.get("bootstrap.servers", "")
        if self.errors.fatal:
            return kafka_refused_error(servers, what, self.errors.fatal)
        return kafka_no_answer_error(servers, what, self.timeout_s, exc, self.errors.last)

    def _list_topics(self):
        """The cluster's metadata, asked for in short slices so that a refused login or TLS
        handshake (reported by the error callback; the request itself would only time out)
        fails at once."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                return self._consumer.list_topics(timeout=max(0.05, min(1.0, left)))
            except KafkaException as exc:
                self._consumer.poll(0)  # serves the error callback
                if self.errors.fatal or left <= 1.0:
                    raise self._unreachable("list the topics", exc) from None

    def partitions(self) -> list[TopicPartition]:
        """The partitions the strategy reads now. A topic the brokers do not know is not there
        (yet); one whose metadata carries another error (a leader being elected) is asked for
        again a few times, then the error is raised: taking it for deleted would be data loss."""
        from confluent_kafka import KafkaError

        for attempt in range(self.options.fetch_offset_retries + 1):
            meta = self._list_topics()
            troubled = {
                name: t.error for name, t in meta.topics.items()
                if t.error is not None and t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART and self._wanted(name)
            }
            if not troubled:
                break
            if attempt == self.options.fetch_offset_retries:
                raise kafka_metadata_unavailable_error(troubled)
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
        cluster = {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}
        if self.strategy.kind == "subscribepattern":
            cluster = {name: n for name, n in cluster.items() if name not in _INTERNAL_TOPICS}
        if self.strategy.kind == "subscribe":
            for topic in self.strategy.topics:
                if topic not in cluster and topic not in self._warned_missing:
                    self._warned_missing.add(topic)
                    log.warning("Kafka topic %r does not exist (yet): the source reads it once it does", topic)
        return self.strategy.assigned(cluster)

    def _wanted(self, topic: str) -> bool:
        """Whether the strategy would read ``topic`` (its metadata errors matter)."""
        if self.strategy.kind == "subscribe":
            return topic in self.strategy.topics
        if self.strategy.kind == "assign":
            return any(t == topic for t, _ in self.strategy.partitions)
        return topic not in _INTERNAL_TOPICS and self.strategy.assigned({topic: 1}) != []

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(earliest, latest) of a partition; None if the brokers no longer know it."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition as KafkaTopicPartition

        try:
            low, high = self._consumer.get_watermark_offsets(KafkaTopicPartition(tp[0], tp[1]), timeout=self.timeout_s, cached=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and getattr(err, "code", lambda: None)() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):  # noqa: SLF001 - librdkafka's internal error codes, as confluent_kafka names them
                return None
            raise self._unreachable(f"fetch the offsets of {tp_text(tp)}", exc) from None
        return int(low), int(high)

    def earliest(self, tps: "list[TopicPartition] | None" = None) -> dict[TopicPartition, int]:
        """The earliest offsets; a partition gone meanwhile is left out (the caller's data-loss
        check names it)."""
        out = {}
        for tp in self.partitions() if tps is None else tps:
            found = self._watermarks(tp)
            if found is not None:
                out[tp] = found[0]
        return out

    def latest(self, known: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """The latest offsets of every partition read now. One below a known offset is fetched
        again a few times (a broker can answer with a stale high watermark), then accepted."""
        out = {}
        for tp in self.partitions():
            found = self._watermarks(tp)
            if found is not None:
                out[tp] = found[1]
        for _ in range(self.options.fetch_offset_retries):
            behind = [tp for tp in out if known and tp in known and out[tp] < known[tp]]
            if not behind:
                break
            log.warning("Kafka latest offsets behind the known ones for %s: fetching again", ", ".join(map(tp_text, behind)))
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
            for tp in behind:
                found = self._watermarks(tp)
                if found is not None:
                    out[tp] = found[1]
        return out

    def offsets_for_timestamps(self, stamps: Mapping[TopicPartition, int], on_no_match: str) -> dict[TopicPartition, int]:
        """The first offset of each partition whose record's timestamp is at or after the given
        one; none such: an error, or the latest offset (``on_no_match="latest"``)."""
        from confluent_kafka import KafkaException, TopicPartition as KafkaTopicPartition

        try:
            found = self._consumer.offsets_for_times([KafkaTopicPartition(t, p, ts) for (t, p), ts in stamps.items()], timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._unreachable("look up offsets by timestamp", exc) from None
        out = {}
        for ktp in found:
            tp = (ktp.topic, ktp.partition)
            if ktp.offset >= 0:
                out[tp] = int(ktp.offset)
            elif on_no_match == "latest":
                out[tp] = self._edge(tp, 1)
            else:
                raise kafka_no_offset_for_timestamp_error(tp_text(tp), stamps[tp])
        return out

    def initial_offsets(self, starting: OffsetRangeLimit) -> dict[TopicPartition, int]:
        """Where a new query starts, as numbers."""
        if starting.kind == "earliest":
            return self.earliest()
        if starting.kind == "latest":
            return self.latest()
        tps = self.partitions()
        if starting.kind == "timestamp":
            assert starting.timestamp is not None
            return self.offsets_for_timestamps(dict.fromkeys(tps, starting.timestamp), starting.on_no_match)
        given = set(starting.offsets)
        if given != set(tps):
            if starting.kind == "timestamps":
                # Spark's KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED (Kafka's texts carry no class prefix)
                raise kafka_timestamp_partitions_mismatch_error(set_text(given), set_text(set(tps)))
            raise kafka_starting_offsets_partitions_mismatch_error(set_text(given), set_text(set(tps)))
        if starting.kind == "timestamps":
            return self.offsets_for_timestamps(starting.offsets, starting.on_no_match)
        out = {}
        for tp, offset in starting.offsets.items():
            if offset == LATEST:
                out[tp] = self._edge(tp, 1)
            elif offset == EARLIEST:
                out[tp] = self._edge(tp, 0)
            else:
                out[tp] = int(offset)
        return out

    def _edge(self, tp: TopicPartition, which: int) -> int:
        found = self._watermarks(tp)
        if found is None:
            raise kafka_partition_missing_error(tp_text(tp))
        return found[which]
