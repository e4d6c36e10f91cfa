"""A Kafka word count program (``tests/jobs/kafka_word_count.py``, which imports nothing of
statestream) run unchanged with ``statestream run`` against the test broker. Spark's Kafka
connector is not in the PySpark wheel, so Spark's engine cannot run the program here; the
oracle is Spark's engine over the same records written as files, batch for batch (the
program's ``maxOffsetsPerTrigger`` of 4 on one partition: four records a batch)."""

from __future__ import annotations

import subprocess

from pyspark.sql import functions as F

from tests.differential.harness import run_stream
from tests.kafka.test_kafka_source import Topic
from tests.spark.test_run_unchanged import BIN, CONFS, JOBS, RAN, _env, console_batches, rows_of

LINES = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps", "a fox runs",
         "over and over", "the end", "quick quick", "dog"]


def test_kafka_word_count_runs_unchanged(spark, kafka_bootstrap, tmp_path):
    topic = Topic(kafka_bootstrap, partitions=1)
    rows = topic.produce([(0, None, line.encode(), 1_700_000_000_000 + i) for i, line in enumerate(LINES)])
    env = _env()
    env["STATESTREAM_LOG_LEVEL"] = "INFO"
    env["PYSPARK_SUBMIT_ARGS"] = " ".join([*(a for k, v in CONFS.items() for a in ("--conf", f"{k}={v}")), "pyspark-shell"])
    run = subprocess.run([str(BIN / "statestream"), "run", str(JOBS / "kafka_word_count.py"), kafka_bootstrap, "subscribe", topic.name],
                         env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    assert RAN in run.stderr, run.stderr[-3000:]  # statestream's loop ran the batches
    ours = console_batches(run.stdout)

    def word_count(df):
        lines = df.selectExpr("CAST(value AS STRING)")
        return lines.select(F.explode(F.split(lines.value, " ")).alias("word")).groupBy("word").count().orderBy("word")

    batches = [rows[i : i + 4] for i in range(0, len(rows), 4)]
    ddl = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, timestampType INT"
    expected = run_stream(spark, word_count, batches, ddl, "complete", tmp_path, style="all_at_once")
    assert sorted(ours) == list(range(len(batches))) == [b.batch_id for b in expected.batches]
    for batch_id, table in ours.items():
        got = [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows_of(table)]
        assert got == [(r["word"], str(r["count"])) for r in expected.rows(batch_id)], batch_id
    assert f"batches: {len(batches)}" in run.stdout
