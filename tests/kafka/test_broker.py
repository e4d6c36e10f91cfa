"""The test broker itself: topics with several partitions, records with keys, headers and
timestamps produced and read back, and the offsets the Kafka source will plan from."""

from __future__ import annotations

import uuid

from tests.kafka.conftest import producer_conf


def test_broker_serves_partitioned_topics(kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
        future.result(10)
    producer = Producer(producer_conf(kafka_bootstrap))
    for i in range(12):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 3,
                         timestamp=1_700_000_000_000 + i, headers=[("h", str(i).encode())])
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "smoke", "enable.auto.commit": False})
    try:
        assert sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1, 2]
        for p in range(3):
            assert consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) == (0, 4)
        consumer.assign([TopicPartition(topic, 1, 2)])
        records = []
        while len(records) < 2:
            batch = consumer.consume(10, timeout=5)
            assert batch, "no record arrived"
            records += [m for m in batch if m.error() is None]
        got = [(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers()) for m in records]
        assert got == [
            (1, 2, b"7", b"v7", 1_700_000_000_007, [("h", b"7")]),
            (1, 3, b"10", b"v10", 1_700_000_000_010, [("h", b"10")]),
        ]
    finally:
        consumer.close()
