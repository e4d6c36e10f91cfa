"""``writeStream.format("kafka")`` (Spark: ``KafkaStreamingWrite`` / ``KafkaWriteTask``): each
batch's rows are produced to Kafka from inside Spark tasks, one producer per task.

Columns, matched by exact name as Spark matches them: ``value`` (string or binary, required),
``key`` (string or binary), ``topic`` (string; required unless the ``topic`` option is set, which
then wins for every row), ``partition`` (int; null lets the producer choose) and ``headers``
(``array<struct<key:string,value:binary>>``). Other columns are ignored.

At least once, as Spark's: a batch that runs again after a crash produces its rows again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from statestream.errors import (
    kafka_missing_bootstrap_servers_error,
    kafka_null_topic_error,
    kafka_output_topic_required_error,
    kafka_output_type_error,
    kafka_output_value_required_error,
    kafka_serializer_error,
)
from statestream.sinks.base import Sink
from statestream.sources.kafka.client import ClientErrors, producer_config, require_client

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from statestream.plan.logical import LogicalPlan

__all__ = ["KafkaSink", "producer_params", "validate_kafka_output"]

log = logging.getLogger(__name__)

def producer_params(options: Mapping[str, Any]) -> dict[str, str]:
    """The ``kafka.*`` options for the producer; Spark refuses serializers (it writes bytes)."""
    lowered = {str(k).lower() for k in options}
    if "kafka.key.serializer" in lowered:
        raise kafka_serializer_error("key")
    if "kafka.value.serializer" in lowered:
        raise kafka_serializer_error("value")
    return {str(k)[6:]: str(v) for k, v in options.items() if str(k).lower().startswith("kafka.") and v is not None}


def validate_kafka_output(schema: "StructType", topic: str | None) -> None:
    """Spark's ``KafkaWriter.validateQuery``: the columns the sink uses, and their types."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    by_name = {f.name: f.dataType for f in schema.fields}

    def check(name: str, allowed: tuple[type, ...], words: str) -> None:
        if name in by_name and not isinstance(by_name[name], allowed):
            raise kafka_output_type_error(name, by_name[name].simpleString(), words)

    if topic is None and "topic" not in by_name:
        raise kafka_output_topic_required_error()
    if topic is None:
        check("topic", (StringType,), "string")
    check("key", (StringType, BinaryType), "string or binary")
    if "value" not in by_name:
        raise kafka_output_value_required_error()
    check("value", (StringType, BinaryType), "string or binary")
    if "headers" in by_name:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        expected = ArrayType(header)
        got = by_name["headers"]
        fits = isinstance(got, ArrayType) and isinstance(got.elementType, StructType) and [
            (f.name, type(f.dataType)) for f in got.elementType.fields
        ] == [(f.name, type(f.dataType)) for f in header.fields]
        if not fits:
            raise kafka_output_type_error("headers", got.simpleString(), expected.simpleString())
    check("partition", (IntegerType,), "int")


@dataclass(frozen=True)
class KafkaWriteTask:
    """The ``mapInArrow`` function that produces one task's rows; yields the count it sent."""

    params: Mapping[str, str] = field(repr=False)  # may hold credentials
    topic: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import Producer

        producer = None
        sent = 0
        errors: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None and not errors:
                errors.append(err)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            if producer is None:  # created at the first row: an empty task never connects
                if "bootstrap.servers" not in self.params:
                    raise kafka_missing_bootstrap_servers_error()
                client_errors = ClientErrors()
                producer = Producer(client_errors.attach(producer_config(self.params)))
            cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
            n = batch.num_rows
            topics = [self.topic] * n if self.topic is not None else cols["topic"]
            keys = cols.get("key", [None] * n)
            values = cols["value"]
            partitions = cols.get("partition", [None] * n)
            headers = cols.get("headers", [None] * n)
            for i in range(n):
                if topics[i] is None:
                    raise kafka_null_topic_error()
                kwargs: dict[str, Any] = {"key": keys[i], "value": values[i], "on_delivery": delivered}
                if partitions[i] is not None:
                    kwargs["partition"] = partitions[i]
                if headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                while True:
                    try:
                        producer.produce(topics[i], **kwargs)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.1)
                sent += 1
            producer.poll(0)
        if producer is not None:
            import time

            deadline = time.monotonic() + 120
            while (left := producer.flush(1)) and time.monotonic() < deadline:
                if client_errors.fatal:  # a refused login or TLS handshake: waiting mends nothing
                    raise RuntimeError(f"Kafka: the brokers refused this task's producer: {client_errors.fatal}")
            if errors:
                raise RuntimeError(f"Kafka: a record of this task was not delivered: {errors[0]}")
            if left:
                raise RuntimeError(f"Kafka: {left} records of this task were still undelivered after 120 s")
        yield pa.record_batch([pa.array([sent], pa.int64())], names=["sent"])


class KafkaSink(Sink):
    """Produces each batch's rows to Kafka (see the module docstring)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        lowered = {str(k).lower(): v for k, v in options.items()}
        topic = lowered.get("topic")
        self.topic = None if topic is None else str(topic).strip()
        self.params = producer_params(options)
        self._last_rows = -1
        require_client('writeStream.format("kafka")')

    def on_query_start(self, checkpoint_location: str, plan: "LogicalPlan") -> None:
        validate_kafka_output(plan.schema, self.topic)

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        wanted = [c for c in ("topic", "key", "value", "partition", "headers") if c in df.columns]
        if self.topic is not None and "topic" in wanted:
            wanted.remove("topic")
        counts = df.select(*wanted).mapInArrow(KafkaWriteTask(self.params, self.topic), "sent LONG").collect()
        self._last_rows = int(sum(r["sent"] for r in counts))
        log.info("batch %d: %d records produced to Kafka", batch_id, self._last_rows)

    def num_output_rows(self) -> int:
        return self._last_rows

    def description(self) -> str:
        return f"org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@{id(self) & 0xFFFFFFF:x}"
