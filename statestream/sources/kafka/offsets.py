"""The Kafka source's offsets and the rules that plan a batch from them, as pure functions:
the offset JSON, the initial-offsets file, ``maxOffsetsPerTrigger``'s split of a backlog,
turning a batch's (start, end) into per-partition ranges with the data-loss checks, and
splitting ranges into Spark tasks for ``minPartitions``. Facts in ``docs/kafka-facts.md``
(sections 3 and 4).

An offset maps each partition to the *next* offset to read; a range is ``[from, until)``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from statestream.errors import CheckpointError, KafkaDataLossError, kafka_initial_offsets_corrupt_error, newer_log_version_error
from statestream.sources.kafka.options import TopicPartition, parse_partition_offsets_json, tp_text

__all__ = [
    "KafkaDataLossError",
    "OffsetRange",
    "decode_initial_offsets_file",
    "encode_initial_offsets_file",
    "offset_json",
    "offsets_from_json",
    "plan_ranges",
    "rate_limited_offsets",
    "split_ranges",
]

log = logging.getLogger(__name__)

_LONG_MAX = 2**63 - 1
INITIAL_OFFSETS_VERSION = 1

_DATA_LOSS_ADVICE = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was aged out "
    "by Kafka or the topic may have been deleted before all the data in the topic was processed. If you want your "
    'streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)

_GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' has been set on this query, it is\n"
    "not recommended to set this option. This option is unsafe to use since multiple concurrent\n"
    "queries or sources using the same group id will interfere with each other as they are part\n"
    "of the same consumer group. Restarted queries may also suffer interference from the\n"
    "previous run having the same group id. The user should have only one query per group id,\n"
    "and/or set the option 'kafka.session.timeout.ms' to be very small so that the Kafka\n"
    "consumers from the previous query are marked dead by the Kafka group coordinator before the\n"
    "restarted query starts running."
)


def set_text(tps: "list[TopicPartition] | set[TopicPartition]") -> str:
    """A Scala Set of TopicPartitions as Spark's messages show it."""
    return "Set(" + ", ".join(tp_text(tp) for tp in sorted(tps)) + ")"


def offset_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The offset as the offset log holds it: ``{"topic": {"partition": offset}}``, partitions
    in ascending order (Spark's order is its hash map's; readers treat it as a map)."""
    out: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def offsets_from_json(value: "Mapping[str, Mapping[str, int]] | str") -> dict[TopicPartition, int]:
    """The inverse of :func:`offset_json`, from the parsed JSON or its text."""
    if isinstance(value, str):
        return parse_partition_offsets_json(value)
    return {(str(t), int(p)): int(o) for t, parts in value.items() for p, o in parts.items()}


def encode_initial_offsets_file(offsets: Mapping[TopicPartition, int]) -> bytes:
    """``<checkpoint>/sources/<i>/0``: a zero byte (Spark 2.1.0's layout needed it), ``v1``, a
    newline and the offset JSON."""
    text = json.dumps(offset_json(offsets), separators=(",", ":"))
    return b"\x00" + f"v{INITIAL_OFFSETS_VERSION}\n{text}".encode()


def decode_initial_offsets_file(data: bytes, where: str) -> dict[TopicPartition, int]:
    """Read :func:`encode_initial_offsets_file`'s bytes (or Spark 2.1.0's, JSON without a
    version line); a damaged file names itself."""
    try:
        text = data[1:].decode("utf-8")
        if text.startswith("v"):
            head, _, body = text.partition("\n")
            version = int(head[1:])
            if version > INITIAL_OFFSETS_VERSION:
                raise newer_log_version_error(INITIAL_OFFSETS_VERSION, version, where)
            text = body
        return offsets_from_json(json.loads(text))
    except CheckpointError:
        raise
    except (UnicodeDecodeError, ValueError, AttributeError, TypeError) as exc:
        raise kafka_initial_offsets_corrupt_error(where, exc) from exc


def rate_limited_offsets(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """The end offsets of a batch admitting about ``limit`` records of the backlog
    ``start .. latest`` (``start`` holds every partition of ``latest``, a new partition at its
    earliest offset), shared out in proportion to each partition's backlog: a share below one
    record rounds up, others round down, so a batch may hold a little more or less than
    ``limit`` (Spark's ``maxOffsetsPerTrigger``)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        share = limit * (size / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, min(_LONG_MAX, start[tp] + take))
    return out


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest_of_new: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
    group_id_set: bool = False,
    report: Callable[[str], None] | None = None,
) -> list[OffsetRange]:
    """The ranges of a batch from its start and end offsets, with Spark's data-loss checks:

    * a partition in ``end`` but not ``start`` is new: it starts at its earliest offset
      (``earliest_of_new``; missing: it was deleted meanwhile), which should be 0;
    * a partition in ``start`` but not ``end`` was deleted;
    * an end below the start means the partition's offsets went back (a recreated topic).

    With ``failOnDataLoss`` each is a :class:`KafkaDataLossError`; without, a warning
    (``report``), and the batch goes on without what is lost.
    """
    warn = report or (lambda text: log.warning("%s. %s", text, _DATA_LOSS_ADVICE))

    def lost(sub: str, reason: str) -> None:
        if fail_on_data_loss:
            raise KafkaDataLossError(sub, reason)
        warn(reason)

    froms = dict(start)
    new = [tp for tp in end if tp not in start]
    missing_new = [tp for tp in new if tp not in earliest_of_new]
    if missing_new:
        lost("INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS", f"Cannot find initial offsets for partitions {set_text(missing_new)}. They may have been deleted.")
    for tp in new:
        if tp in earliest_of_new:
            first = earliest_of_new[tp]
            if first != 0:
                lost("ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO", f"Added partition {tp_text(tp)} starts from {first} instead of 0.")
            froms[tp] = first
    deleted = [tp for tp in start if tp not in end]
    if deleted:
        if group_id_set:
            lost(
                "PARTITIONS_DELETED_AND_GROUP_ID_CONFIG_PRESENT",
                f"Partitions {set_text(deleted)} have been deleted.\n" + _GROUP_ID_WARNING,
            )
        else:
            lost("PARTITIONS_DELETED", f"Partitions {set_text(deleted)} have been deleted.")
    ranges = []
    for tp in sorted(end):
        if tp not in froms:
            continue  # a new partition whose beginning is unknown (failOnDataLoss=false)
        lo, hi = froms[tp], end[tp]
        if hi < lo:
            lost(
                "PARTITION_OFFSET_CHANGED",
                f"Partition {tp_text(tp)} offset was changed from {lo} to {hi}.\nThis could either be a user error that the start "
                "offset is set too high and this is the first batch, or the kafka topic-partition is broken, and some data may "
                "have been missed.",
            )
            continue
        ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
    return ranges


def _round_half_up(x: float) -> int:
    """Scala's ``math.round`` (halves go up; Python's ``round`` takes them to even)."""
    return math.floor(x + 0.5)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """The Spark tasks of a batch: one per non-empty range, or, when ``minPartitions`` asks for
    more, large ranges cut in parts in proportion to their size (Spark's
    ``KafkaOffsetRangeCalculator``)."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    parts = {id(r): max(1, _round_half_up(r.size / total * min_partitions)) for r in ranges}
    whole = [r for r in ranges if parts[id(r)] == 1]
    large = [r for r in ranges if parts[id(r)] > 1]
    left = max(1, min_partitions - len(whole))
    large_total = sum(r.size for r in large)
    out = []
    for r in ranges:
        if parts[id(r)] == 1:
            out.append(r)
            continue
        k = max(1, _round_half_up(r.size / large_total * left))
        lo, remaining = r.from_offset, r.size
        for i in range(k):
            step = remaining // (k - i)
            out.append(OffsetRange(r.topic, r.partition, lo, lo + step))
            lo, remaining = lo + step, remaining - step
    return out
