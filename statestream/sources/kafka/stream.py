"""``readStream.format("kafka")`` (Spark: ``KafkaMicroBatchStream``): offsets planned on the
driver, records read inside Spark tasks.

* The initial offsets (``startingOffsets`` and friends, resolved to numbers) are written once,
  to ``<checkpoint>/sources/<i>/0`` in Spark's layout; a restart resumes from the offset log.
* Each trigger fetches the latest offsets, shares ``maxOffsetsPerTrigger`` out over the
  partitions' backlogs, and holds a batch back while ``minOffsetsPerTrigger`` is not reached
  and ``maxTriggerDelay`` has not passed (the first trigger of a run always runs).
* ``availableNow`` fixes the latest offsets once, at the run's first trigger.
* A batch's ranges are checked for data loss on the driver (deleted or recreated partitions,
  added ones not starting at 0) and in the tasks (records aged out), per ``failOnDataLoss``.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import (
    kafka_available_now_offsets_behind_error,
    kafka_available_now_partitions_changed_error,
    kafka_available_now_partitions_lost_error,
)
from statestream.sources.base import ReadLimit, Source, empty_batch
from statestream.sources.kafka.client import require_client
from statestream.sources.kafka.offset_reader import KafkaOffsetReader
from statestream.sources.kafka.offsets import (
    decode_initial_offsets_file,
    encode_initial_offsets_file,
    offset_json,
    offsets_from_json,
    plan_ranges,
    rate_limited_offsets,
    set_text,
    split_ranges,
)
from statestream.sources.kafka.options import (
    KafkaSourceOptions,
    TopicPartition,
    include_headers,
    parse_source_options,
    redacted_params,
    validate_stream_options,
)
from statestream.sources.kafka.partition_reader import KafkaRangeReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["KafkaMicroBatchStream", "kafka_schema"]

log = logging.getLogger(__name__)


def kafka_schema(include_headers: bool) -> "StructType":
    """Spark's Kafka source schema, every field nullable."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def _scala_double(x: float) -> str:
    """A double as Scala's ``toString`` writes it (``3.0``, ``1.0E7``)."""
    if x != 0 and (abs(x) >= 1e7 or abs(x) < 1e-3):
        mantissa, exp = f"{x:.16E}".split("E")
        mantissa = repr(float(mantissa))
        return f"{mantissa}E{int(exp)}"
    return repr(float(x))


def _map_text(offsets: Mapping[TopicPartition, int]) -> str:
    """An offset map as Spark's messages show it, ``Map(t-0 -> 5, ...)``."""
    return "Map(" + ", ".join(f"{t}-{p} -> {o}" for (t, p), o in sorted(offsets.items())) + ")"


class KafkaMicroBatchStream(Source):
    """The Kafka source of one streaming query.

    Parameters
    ----------
    options:
        The reader's options (validated at once, with Spark's texts).
    metadata_dir:
        ``<checkpoint>/sources/<i>``: where the initial offsets are kept; None when only the
        schema is wanted.
    clock:
        Epoch milliseconds, for ``maxTriggerDelay`` (tests replace it).
    """

    admission_controlled = True

    short_name = "kafka"

    def __init__(self, options: Mapping[str, Any], metadata_dir: str | None = None, clock: Callable[[], float] | None = None) -> None:
        validate_stream_options(options)  # what Spark checks at load(); the rest at query start
        self._include_headers = include_headers(options)

        require_client('readStream.format("kafka")')
        self._raw_options = dict(options)
        self._options: KafkaSourceOptions | None = None
        self.metadata_dir = metadata_dir
        self._clock = clock or (lambda: time.time() * 1000)
        self._group_id: str | None = None
        self._reader = None
        self._initial: dict[TopicPartition, int] | None = None
        self._available_now = False
        self._available_now_end: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = 0.0
        self._latest: dict[TopicPartition, int] | None = None

    @property
    def options(self) -> KafkaSourceOptions:
        """The parsed options: the JSON and timestamp ones are read when the query starts, as
        in Spark (a bad one fails the query, not ``load()``)."""
        if self._options is None:
            self._options = parse_source_options(self._raw_options)

            log.info("Kafka source %s, client settings %s", self.options.strategy, redacted_params(self._options.kafka_params))
        return self._options

    @property
    def group_id(self) -> str:
        """The user's ``kafka.group.id``, or one of the query's own: the prefix, a random UUID
        and a hash of the source's checkpoint directory."""
        if self._group_id is None:
            given = self.options.kafka_params.get("group.id")
            suffix = zlib.crc32((self.metadata_dir or "").encode())
            self._group_id = given or f"{self.options.group_id_prefix}-{uuid.uuid4()}-{suffix}"
        return self._group_id

    # -- the cluster ------------------------------------------------------------------------------

    @property
    def reader(self):
        if self._reader is None:
            # the Java client's bound on a metadata or offset request, if the user set one
            timeout_ms = int(self.options.kafka_params.get("default.api.timeout.ms") or 30_000)
            self._reader = KafkaOffsetReader(self.options, self.group_id + "-driver", timeout_ms=timeout_ms)
        return self._reader

    def initial_offsets(self) -> dict[TopicPartition, int]:
        """The offsets a new query starts from, resolved and recorded on its first trigger (a
        restart reads the record, so ``latest`` means the latest at the first start)."""
        if self._initial is not None:
            return self._initial
        files = None
        if self.metadata_dir is not None:
            files = CheckpointFileManager(self.metadata_dir)
            if files.exists("0"):
                self._initial = decode_initial_offsets_file(files.read_bytes("0"), files.display("0"))
                return self._initial
        offsets = self.reader.initial_offsets(self.options.starting)
        if files is not None:
            try:
                files.write_atomic("0", encode_initial_offsets_file(offsets), overwrite=False)
            except FileExistsError:  # another writer won: its offsets are the query's
                offsets = decode_initial_offsets_file(files.read_bytes("0"), files.display("0"))
        log.info("Kafka source initial offsets: %s", offset_json(offsets))
        self._initial = offsets
        return offsets

    # -- Source contract --------------------------------------------------------------------------

    @property
    def schema(self) -> "StructType":
        return kafka_schema(self._include_headers)

    def default_read_limit(self) -> ReadLimit:
        return ReadLimit(max_rows=self.options.max_offsets_per_trigger)

    def prepare_for_trigger_available_now(self) -> None:
        self._available_now = True

    def latest_offset(self, start: Any, limit: ReadLimit) -> Any:
        begin = self.initial_offsets() if start is None else offsets_from_json(start)
        if self._available_now:
            if self._available_now_end is None:
                self._available_now_end = self.reader.latest(begin)
            latest = dict(self._available_now_end)
        else:
            latest = self.reader.latest(begin)
        self._latest = latest
        if not latest:  # no partition at all (every topic gone or not there yet): no batch, as Spark
            return start
        if self._held_back(begin, latest, limit):
            return start
        if limit.max_rows is None:
            end = latest
        else:  # the split needs each new partition's backlog, from its earliest offset
            new = [tp for tp in latest if tp not in begin]
            base = {**begin, **(self.reader.earliest(new) if new else {})}
            end = rate_limited_offsets(base, latest, limit.max_rows)
        if self._available_now:
            self._check_available_now_end(end)
        if end == begin:
            return start
        return offset_json(end)

    def _check_available_now_end(self, end: Mapping[TopicPartition, int]) -> None:
        """Spark's checks of an availableNow batch's end against the offsets fixed at the run's
        start and the brokers' latest ones (raised as Spark raises them, whatever
        ``failOnDataLoss`` says)."""
        fixed = self._available_now_end or {}
        if set(end) != set(fixed):
            raise kafka_available_now_partitions_changed_error(set_text(set(fixed)), set_text(set(end)))
        now = self.reader.latest()
        if not set(end) <= set(now):
            raise kafka_available_now_partitions_lost_error(set_text(set(now)), set_text(set(end)))
        if any(end[tp] > now[tp] for tp in end):
            raise kafka_available_now_offsets_behind_error(_map_text(now), _map_text(end))

    def _held_back(self, base: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: ReadLimit) -> bool:
        """``minOffsetsPerTrigger``: too few new records and ``maxTriggerDelay`` not yet passed
        since the last batch (never on a run's first trigger, nor with all available)."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None or limit is ReadLimit.ALL_AVAILABLE or self._available_now:
            return False
        now = self._clock()
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now  # Spark restarts the delay whenever it lets a trigger through
            return False
        backlog = sum(end - base.get(tp, 0) for tp, end in latest.items())
        if backlog < wanted:
            return True
        self._last_trigger_ms = now
        return False

    def get_batch(self, spark: "SparkSession", start: Any, end: Any) -> "DataFrame":
        """The records ``[start, end)`` of every partition, read by one Spark task per range."""
        begin = self.initial_offsets() if start is None else offsets_from_json(start)
        stop = offsets_from_json(end)
        new = [tp for tp in stop if tp not in begin]
        earliest = self.reader.earliest(new) if new else {}
        ranges = plan_ranges(
            begin, stop, earliest, self.options.fail_on_data_loss, group_id_set="group.id" in self.options.kafka_params
        )
        tasks = split_ranges(ranges, self.options.min_partitions)
        if not tasks:
            return empty_batch(spark, self.schema)
        reader = KafkaRangeReader(
            tuple(tasks),
            dict(self.options.kafka_params),
            self.group_id,
            include_headers=self.options.include_headers,
            fail_on_data_loss=self.options.fail_on_data_loss,
            poll_timeout_ms=self.options.poll_timeout_ms,
        )
        return spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(reader, self.schema)

    def metrics(self, end: Any) -> dict[str, str]:
        """Spark's source metrics: how far the batch's end is behind the latest offsets."""
        if end is None or not self._latest:
            return {}
        stop = offsets_from_json(end)
        behind = [latest - stop.get(tp, latest) for tp, latest in self._latest.items()]
        if not behind:
            return {}
        return {
            "avgOffsetsBehindLatest": _scala_double(sum(behind) / len(behind)),
            "maxOffsetsBehindLatest": str(max(behind)),
            "minOffsetsBehindLatest": str(min(behind)),
        }

    def reported_latest_offset(self) -> Any:
        return offset_json(self._latest) if self._latest else None  # Spark: null for no partitions

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def description(self) -> str:
        return f"KafkaV2[{self.options.strategy}]"
