"""The Kafka source's options: validated as Spark's ``KafkaSourceProvider`` validates them, in
its order and with its texts, when the streaming DataFrame is created (so that a bad option
fails before the query starts), and parsed into :class:`KafkaSourceOptions`.

Pure: no Kafka client, no Spark. Option names are case-insensitive, as Spark's
``CaseInsensitiveMap``; Spark's messages spell them lower-case where it does.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statestream.errors import (
    boolean_format_error,
    kafka_assign_json_error,
    kafka_auto_offset_reset_error,
    kafka_bootstrap_servers_required_error,
    kafka_deserializer_error,
    kafka_empty_assign_error,
    kafka_empty_pattern_error,
    kafka_empty_subscribe_error,
    kafka_ending_offsets_error,
    kafka_ending_timestamp_error,
    kafka_min_above_max_offsets_error,
    kafka_min_partitions_error,
    kafka_no_match_strategy_error,
    kafka_no_strategy_error,
    kafka_offsets_json_error,
    kafka_option_not_supported_error,
    kafka_several_strategies_error,
    kafka_single_long_error,
    kafka_subscribe_pattern_error,
    kafka_time_string_error,
    kafka_timestamps_json_error,
    number_format_error,
)
from statestream.sources.options import TIME_SUFFIX_MS

__all__ = [
    "ConsumerStrategy",
    "KafkaSourceOptions",
    "OffsetRangeLimit",
    "TopicPartition",
    "parse_assign_json",
    "parse_partition_offsets_json",
    "include_headers",
    "parse_source_options",
    "validate_stream_options",
    "redacted_params",
]

log = logging.getLogger(__name__)

#: (topic, partition), Kafka's TopicPartition; shown as ``topic-partition``
TopicPartition = tuple[str, int]

SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN = "subscribe", "subscribepattern", "assign"
#: in the order Spark's messages list them
STRATEGY_KEYS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)

#: the special offsets of a startingOffsets JSON
LATEST, EARLIEST = -1, -2

#: Spark's default ``spark.redaction.regex`` (what a logged Kafka parameter is masked by)
REDACTION_REGEX = re.compile(r"(?i)secret|password|token|access[.]?key")
REDACTED = "*********(redacted)"


def tp_text(tp: TopicPartition) -> str:
    """Kafka's rendering of a TopicPartition, ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


@dataclass(frozen=True)
class ConsumerStrategy:
    """Which partitions the source reads: ``subscribe`` (topics), ``subscribePattern`` (a regex
    found anywhere in a topic's name, as Spark's Admin-based reader matches it) or ``assign``
    (partitions)."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def assigned(self, cluster: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions read, given the cluster's topics and their partition counts (internal
        topics left out by the caller). An assigned partition that does not exist is skipped."""
        if self.kind == ASSIGN:
            return [tp for tp in self.partitions if tp[0] in cluster and 0 <= tp[1] < cluster[tp[0]]]
        if self.kind == SUBSCRIBE:
            names = [t for t in self.topics if t in cluster]
        else:
            regex = re.compile(self.pattern)
            names = sorted(t for t in cluster if regex.search(t))
        return [(t, p) for t in names for p in range(cluster[t])]

    def __str__(self) -> str:
        if self.kind == ASSIGN:
            return "Assign[" + ", ".join(tp_text(tp) for tp in self.partitions) + "]"
        if self.kind == SUBSCRIBE:
            return "Subscribe[" + ", ".join(self.topics) + "]"
        return f"SubscribePattern[{self.pattern}]"


@dataclass(frozen=True)
class OffsetRangeLimit:
    """Where a new query starts: ``earliest``, ``latest``, ``specific`` offsets per partition
    (-1 latest, -2 earliest), a ``timestamp`` for every partition or ``timestamps`` per
    partition (the first offset whose record's timestamp is at or after it)."""

    kind: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    #: a starting timestamp that no record reaches: "error" or "latest"
    on_no_match: str = "error"


@dataclass(frozen=True)
class KafkaSourceOptions:
    """A validated Kafka source configuration."""

    strategy: ConsumerStrategy
    #: the ``kafka.*`` options without their prefix, for the Kafka client
    kafka_params: Mapping[str, str]
    starting: OffsetRangeLimit
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    group_id_prefix: str = "spark-kafka-source"


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _long(text: str, bits: int = 64) -> int:
    """Scala's ``toLong`` (``toInt`` with ``bits=32``): a plain decimal integer (no blanks) in
    range, else a NumberFormatException."""
    if not re.fullmatch(r"[+-]?\d+", text):
        raise number_format_error(text)
    value = int(text)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise number_format_error(text)
    return value


def _boolean(text: str) -> bool:
    """Scala's ``toBoolean``: ``true``/``false`` in any case, else an IllegalArgumentException."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    raise boolean_format_error(text)


def _time_ms(text: str) -> int:
    """A Spark time string (``"15m"``, ``"5s"``; a bare number is milliseconds)."""
    m = re.fullmatch(r"\s*(-?\d+)\s*([a-z]*)\s*", text.lower())
    if m is None or (m.group(2) and m.group(2) not in TIME_SUFFIX_MS):
        raise kafka_time_string_error(m.group(2) if m else text)
    return int(int(m.group(1)) * TIME_SUFFIX_MS[m.group(2) or "ms"])


def parse_assign_json(text: str) -> tuple[TopicPartition, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}``, as Spark's ``JsonUtils.partitions``."""
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError
        out = []
        for topic, parts in value.items():
            if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
                raise ValueError
            out += [(str(topic), int(p)) for p in parts]
        return tuple(out)
    except ValueError:
        raise kafka_assign_json_error(text) from None


def _partition_map(text: str, error: Callable[[str], Exception]) -> dict[TopicPartition, int]:
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError
        out: dict[TopicPartition, int] = {}
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                raise ValueError
            for part, offset in parts.items():
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise ValueError
                out[(str(topic), int(part))] = int(offset)
        return out
    except ValueError:
        raise error(text) from None


def parse_partition_offsets_json(text: str) -> dict[TopicPartition, int]:
    """``{"topicA":{"0":23,"1":-1}}``, as Spark's ``JsonUtils.partitionOffsets`` (also the
    shape of the offsets the source writes)."""
    return _partition_map(text, kafka_offsets_json_error)


def _starting(opts: Mapping[str, str]) -> OffsetRangeLimit:
    """startingTimestamp, else startingOffsetsByTimestamp, else startingOffsets (default
    latest), as Spark prefers them."""
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise kafka_no_match_strategy_error(strategy)
    if "startingtimestamp" in opts:
        raw = opts["startingtimestamp"].strip()
        try:
            return OffsetRangeLimit("timestamp", timestamp=_long(raw), on_no_match=strategy)
        except ValueError:
            raise kafka_single_long_error(raw) from None
    if "startingoffsetsbytimestamp" in opts:
        stamps = _partition_map(opts["startingoffsetsbytimestamp"].strip(), kafka_timestamps_json_error)
        return OffsetRangeLimit("timestamps", offsets=stamps, on_no_match=strategy)
    offsets = opts.get("startingoffsets")
    if offsets is None:
        return OffsetRangeLimit("latest")
    low = offsets.strip().lower()
    if low in ("earliest", "latest"):
        return OffsetRangeLimit(low)
    return OffsetRangeLimit("specific", offsets=parse_partition_offsets_json(offsets.strip()))


def validate_stream_options(options: Mapping[str, Any]) -> None:
    """What Spark checks when a streaming Kafka DataFrame is created (``load()``), in its
    order: ending offsets, the strategy's presence and shape, minPartitions, refused
    ``kafka.*`` options, the bootstrap servers, the per-trigger limits. The JSON and timestamp
    options are only parsed when the query starts (:func:`parse_source_options`)."""
    opts = _lower(options)
    if "endingoffsets" in opts:
        raise kafka_ending_offsets_error()
    if "endingoffsetsbytimestamp" in opts:
        raise kafka_ending_timestamp_error()
    given = [k for k in opts if k in STRATEGY_KEYS]
    if not given:
        raise kafka_no_strategy_error(STRATEGY_KEYS)
    if len(given) > 1:
        raise kafka_several_strategies_error(STRATEGY_KEYS)
    kind = given[0]
    value = opts[kind]
    if kind == ASSIGN and not value.strip().startswith("{"):
        raise kafka_empty_assign_error(value)
    if kind == SUBSCRIBE and not [t for t in value.split(",") if t.strip()]:
        raise kafka_empty_subscribe_error(value)
    if kind == SUBSCRIBE_PATTERN and not value.strip():
        raise kafka_empty_pattern_error(value)
    if "minpartitions" in opts and _long(opts["minpartitions"], bits=32) <= 0:
        raise kafka_min_partitions_error()
    if "kafka.group.id" in opts:
        log.warning(
            "Kafka option 'kafka.group.id' has been set on this query: queries or sources sharing a group id "
            "interfere with each other; use one query per group id"
        )
        if "groupidprefix" in opts:
            log.warning("Option groupIdPrefix will be ignored as option kafka.group.id has been set.")
    if "kafka.auto.offset.reset" in opts:
        raise kafka_auto_offset_reset_error()
    if "kafka.key.deserializer" in opts:
        raise kafka_deserializer_error("key")
    if "kafka.value.deserializer" in opts:
        raise kafka_deserializer_error("value")
    for refused in ("enable.auto.commit", "interceptor.classes"):
        if f"kafka.{refused}" in opts:
            raise kafka_option_not_supported_error(refused)
    if "kafka.bootstrap.servers" not in opts:
        raise kafka_bootstrap_servers_required_error()
    if "minoffsetspertrigger" in opts and "maxoffsetspertrigger" in opts:
        min_per, max_per = _long(opts["minoffsetspertrigger"]), _long(opts["maxoffsetspertrigger"])
        if min_per > max_per:
            raise kafka_min_above_max_offsets_error(min_per, max_per)


def include_headers(options: Mapping[str, Any]) -> bool:
    """``includeHeaders``, which the source's schema depends on (read at ``load()``)."""
    return _boolean(_lower(options).get("includeheaders", "false"))


def parse_source_options(options: Mapping[str, Any]) -> KafkaSourceOptions:
    """Validate (:func:`validate_stream_options`) and parse a streaming Kafka source's options,
    as Spark does when the query starts: the assign JSON, the starting offsets and timestamps,
    and the other options' values, raising Spark's IllegalArgumentException texts."""
    validate_stream_options(options)
    opts = _lower(options)
    kind = next(k for k in opts if k in STRATEGY_KEYS)
    value = opts[kind]
    if kind == ASSIGN:
        strategy = ConsumerStrategy(ASSIGN, partitions=parse_assign_json(value))
    elif kind == SUBSCRIBE:
        strategy = ConsumerStrategy(SUBSCRIBE, topics=tuple(t.strip() for t in value.split(",") if t.strip()))
    else:
        try:
            re.compile(value.strip())
        except re.error as exc:
            raise kafka_subscribe_pattern_error(value.strip(), exc) from None
        strategy = ConsumerStrategy(SUBSCRIBE_PATTERN, pattern=value.strip())
    # kafka.* keep the case of what follows the prefix (Kafka's own names are lower-case)
    kafka_params = {str(k)[6:]: ("" if v is None else str(v)) for k, v in options.items() if str(k).lower().startswith("kafka.")}

    def long_option(key: str, default: int | None) -> int | None:
        return _long(opts[key]) if key in opts else default

    return KafkaSourceOptions(
        strategy=strategy,
        kafka_params=kafka_params,
        starting=_starting(opts),
        fail_on_data_loss=_boolean(opts.get("failondataloss", "true")),
        include_headers=include_headers(options),
        max_offsets_per_trigger=long_option("maxoffsetspertrigger", None),
        min_offsets_per_trigger=long_option("minoffsetspertrigger", None),
        max_trigger_delay_ms=_time_ms(opts.get("maxtriggerdelay", "15m")),
        min_partitions=long_option("minpartitions", None),
        poll_timeout_ms=long_option("kafkaconsumer.polltimeoutms", 120_000) or 120_000,
        fetch_offset_retries=long_option("fetchoffset.numretries", 3) or 0,
        fetch_offset_retry_interval_ms=long_option("fetchoffset.retryintervalms", 1000) or 0,
        group_id_prefix=opts.get("groupidprefix", "spark-kafka-source"),
    )


def redacted_params(params: Mapping[str, str]) -> dict[str, str]:
    """Kafka parameters fit to log or show: a value whose key or value matches Spark's default
    redaction pattern is masked; inside ``sasl.jaas.config`` only the credential options are."""
    out = {}
    for key, value in params.items():
        if key == "sasl.jaas.config":
            out[key] = re.sub(r'(?i)(\w*(?:password|clientsecret)\w*)\s*=\s*"[^"]*"', rf'\1="{REDACTED}"', value)
        elif REDACTION_REGEX.search(key) or REDACTION_REGEX.search(value):
            out[key] = REDACTED
        else:
            out[key] = value
    return out
