"""Exactly-once output from a Kafka source through SIGKILLs: the seed query reads a topic with
``maxOffsetsPerTrigger``, writes through the file sink (idempotent per batch id), and is killed
at the crash points of a batch and restarted. The recovered sink must equal an uninterrupted
statestream run's and Spark's engine reading the same records from files split as the Kafka
batches were (Spark's connector is not in the PySpark wheel)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_recovery import job_for, recover_and_compare, sink_rows
from tests.kafka.conftest import producer_conf, wait_for_high_watermarks

#: event times in seconds, in topic order; the same values as the file crash tests' input
SECONDS = [10, 11, 12, 13, 14, 15, 31, 32, 8, 40, 41, 5, 17, 55, 12, 23, 60, 61, 38, 44]
PER_BATCH = 3


def split_files(directory: Path) -> None:
    """The records as parquet files of ``PER_BATCH`` rows, in topic order: Spark's batches."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    base = (time.time() // 86400) * 86400 - 86400
    for i in range(0, len(SECONDS), PER_BATCH):
        chunk = list(enumerate(SECONDS))[i : i + PER_BATCH]
        table = pa.table(
            {
                "ts": pa.array([s * 1_000_000 for _, s in chunk], pa.timestamp("us", tz="UTC")),
                "value": pa.array([v for v, _ in chunk], pa.int64()),
            }
        )
        path = directory / f"part-{i // PER_BATCH:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + i, base + i))


@pytest.fixture
def kafka_topic(kafka_bootstrap: str) -> str:
    import uuid

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"crash-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)]).values():
        future.result(10)
    producer = Producer(producer_conf(kafka_bootstrap))
    for value, secs in enumerate(SECONDS):
        producer.produce(name, value=json.dumps({"ts": secs, "value": value}).encode(), partition=0)
    assert producer.flush(10) == 0
    wait_for_high_watermarks(kafka_bootstrap, name, [len(SECONDS)])
    return name


def _gauntlet(spark: Any, tmp_path: Path, bootstrap: str, topic: str, kills: list[tuple[str, int, int | None]]) -> None:
    input_dir = tmp_path / "input"
    split_files(input_dir)
    kafka = {"bootstrap": bootstrap, "topic": topic, "maxOffsetsPerTrigger": PER_BATCH}

    def make_job(root: Path, engine: str) -> dict[str, Any]:
        return dict(job_for(root, engine, "append", input_dir), kafka=kafka)

    got = recover_and_compare(spark, tmp_path, kills, make_job, lambda out: sink_rows(spark, out, "append"))
    assert got, "the recovered sink is empty"


@pytest.mark.covered_by_slow("test_kafka_source_survives_sigkill_at_every_point")
def test_kafka_source_sigkill_mid_state_commit_then_restart(spark, tmp_path, kafka_bootstrap, kafka_topic):
    _gauntlet(spark, tmp_path, kafka_bootstrap, kafka_topic, [("after_state_commit", 2, 0)])


@pytest.mark.slow
@pytest.mark.soak
def test_kafka_source_survives_sigkill_at_every_point(spark, tmp_path, kafka_bootstrap, kafka_topic):
    _gauntlet(
        spark,
        tmp_path,
        kafka_bootstrap,
        kafka_topic,
        [
            ("after_offsets", 1, None),
            ("after_state_commit", 2, 0),
            ("sink_files_published", 2, None),
            ("after_sink", 3, None),
            ("after_commit", 4, None),
        ],
    )
