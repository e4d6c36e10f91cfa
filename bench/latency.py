"""End-to-end latency at a steady rate (issue 51, item 2), both engines: files to ``foreachBatch``.

    python3 bench/latency.py [--query count|join|both] [--rate 1000] [--seconds 45] [--engine both|spark|ours]
                             [--source files|kafka]

A feeder thread writes one JSON file every ``--period`` seconds (0.1: ten files a second), with
``rate x period`` rows whose event time is the moment they are written, into the input directory
(two directories for the join). The latency of a row is the time from its file appearing under
its final name to the end of the ``foreachBatch`` call of the batch that read it: its result is
then in the sink. Which batch read which file comes from the query's own file source log
(``<checkpoint>/sources/<i>/``, whose entries carry their batch id on both engines), so no row is
timed twice and none is left out. Rows written in the first ``--warmup`` seconds are left out
(the JVM's warm-up and the first batches), and so are files read after the feeder stopped.

The queries, each on the default trigger (the next batch as soon as the last one ends: the
lowest latency either engine's micro-batches have; Spark's real-time mode does not run
stateful queries in 4.1):

* ``count``: ``withWatermark("t", "5 seconds").groupBy(window("t", "5 seconds"), "k").count()``
  in update mode, 100 keys;
* ``join``: impressions and clicks (a click 0 to 2 s after its impression, on the same ad), each
  side with a 10 s watermark, joined on the ad and ``clickTime BETWEEN impressionTime AND
  impressionTime + 30 seconds``, append mode. Half of the rate goes to each side.

With ``--source kafka`` the same queries read Kafka and write their results to Kafka, on the
test broker (Tansu, started on loopback as ``bench/kafka_w8.py`` does). A producer sends each
row as it is made, one record a request (the broker's high watermark is exact so), at the same
rate; a consumer of the output topic notes when each result record arrives. The latency of a
row is from its send to the arrival of the last result record of the batch that read it (the
batch of each offset from the query's offset log, each batch's result records from its
progress, ``sink.numOutputRows``; the output topic has one partition, so they arrive in batch
order). A batch that wrote no result leaves its rows untimed (counted). Spark's Kafka connector
is not in the PySpark wheel and cannot be fetched on this machine, so only statestream runs
this source.

Each engine runs in its own child process (a fresh JVM), one after the other; the parent prints
p50, p99 and the maximum per engine and the ratios ours/Spark.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from trickle import _percentile  # noqa: E402 - bench/ is not a package


def _rows_json(rows: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _write(directory: Path, name: str, text: str) -> float:
    """Write a file aside, rename it in (a reader never sees half a file); the time it appeared."""
    tmp = directory.parent / f".{directory.name}-{name}"
    tmp.write_text(text)
    os.replace(tmp, directory / name)
    return time.time()


def _feed(dirs: list[Path], query: str, rate: int, period: float, stop: threading.Event, written: dict[str, tuple[float, int]]) -> None:
    """Write a file (a pair for the join) every ``period`` seconds until ``stop``; ``written`` maps
    each file's path to (time it appeared, its rows)."""
    rng = random.Random(7)
    per_file = max(1, int(rate * period))
    i = 0
    next_at = time.time()
    while not stop.is_set():
        name = f"part-{i:06d}.json"
        for directory, rows in zip(dirs, _rows(query, rng, per_file)):
            written[str(directory / name)] = (_write(directory, name, _rows_json(rows)), len(rows))
        i += 1
        next_at += period
        stop.wait(max(0.0, next_at - time.time()))


def _files_by_batch(checkpoint: Path, source: int) -> dict[str, int]:
    """Each file a source read and the batch that read it, from the file source log (its
    compacted files included)."""
    out: dict[str, int] = {}
    d = checkpoint / "sources" / str(source)
    for f in sorted(d.iterdir()) if d.exists() else []:
        if f.name.startswith("."):
            continue
        for line in f.read_text().splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                out[entry["path"].removeprefix("file://")] = int(entry["batchId"])
    return out


SCHEMAS = {"count": ["t TIMESTAMP, k INT"], "join": ["adId INT, impressionTime TIMESTAMP", "clickAdId INT, clickTime TIMESTAMP"]}


def _query(query_kind: str, read: Any) -> tuple[Any, str]:
    """The query over its inputs (``read(i, schema)``: input i as a streaming DataFrame of
    ``SCHEMAS[query_kind][i]``) and its output mode."""
    from pyspark.sql import functions as F

    if query_kind == "count":
        events = read(0, SCHEMAS["count"][0])
        return events.withWatermark("t", "5 seconds").groupBy(F.window("t", "5 seconds"), "k").count(), "update"
    imps, clicks = read(0, SCHEMAS["join"][0]), read(1, SCHEMAS["join"][1])
    joined = imps.withWatermark("impressionTime", "10 seconds").join(
        clicks.withWatermark("clickTime", "10 seconds"),
        F.expr("clickAdId = adId AND clickTime >= impressionTime AND clickTime <= impressionTime + interval 30 seconds"),
    )
    return joined, "append"


def _rows(query: str, rng: random.Random, n: int) -> list[list[dict[str, Any]]]:
    """``n`` rows of each input (the join: ``n // 2`` impressions and their clicks), their
    event time now."""
    now = dt.datetime.now()
    if query == "count":
        return [[{"t": now.isoformat(sep=" "), "k": rng.randrange(100)} for _ in range(n)]]
    ads = [rng.randrange(10_000) for _ in range(max(1, n // 2))]
    return [
        [{"adId": a, "impressionTime": now.isoformat(sep=" ")} for a in ads],
        [{"clickAdId": a, "clickTime": (now + dt.timedelta(seconds=rng.random() * 2)).isoformat(sep=" ")} for a in ads],
    ]


def child(engine_kind: str, query_kind: str, rate: int, period: float, seconds: float, warmup: float) -> dict[str, Any]:
    from run import child_session, engine_for

    spark = child_session(f"statestream-latency-{engine_kind}")
    work = Path(tempfile.mkdtemp(prefix=f"latency-{engine_kind}-"))
    dirs = [work / "in0", work / "in1"]
    for d in dirs:
        d.mkdir()
    engine = engine_for(spark, engine_kind)
    visible: dict[int, float] = {}

    def sink(df: Any, batch_id: int) -> None:
        df.count()
        visible[int(batch_id)] = time.time()

    result, mode = _query(query_kind, lambda i, schema: engine.readStream.format("json").schema(schema).load(str(dirs[i])))
    written: dict[str, tuple[float, int]] = {}
    stop = threading.Event()
    q = result.writeStream.outputMode(mode).foreachBatch(sink).option("checkpointLocation", str(work / "ck")).start()
    feeder = threading.Thread(target=_feed, args=(dirs, query_kind, rate, period, stop, written), daemon=True)
    t0, stopped, error, progress = _run_for(q, feeder, stop, warmup + seconds)
    spark.stop()
    read = {}
    for source in range(2 if query_kind == "join" else 1):
        read.update(_files_by_batch(work / "ck", source))
    return _summary(engine_kind, query_kind, written, read, visible, t0 + warmup, stopped + 3, error)


def _run_for(q: Any, feeder: threading.Thread, stop: threading.Event, seconds: float) -> tuple[float, float, Any, list[dict[str, Any]]]:
    """Start ``feeder``, let the query run ``seconds``, stop the feeder (``stop``), give the
    batches reading its last rows 3 s, stop the query. Returns when the feeder started and
    stopped, the query's exception and its progress."""
    t0 = time.time()
    feeder.start()
    try:
        time.sleep(seconds)
    finally:
        stop.set()
        feeder.join()
        stopped = time.time()
        time.sleep(3)
        q.stop()
    return t0, stopped, q.exception(), list(q.recentProgress)


def _summary(
    engine_kind: str, query_kind: str, written: dict[Any, tuple[float, int]], read: dict[Any, int], visible: dict[int, float],
    timed_from: float, deadline: float, error: Any, progress: list[dict[str, Any]],
) -> dict[str, Any]:
    """p50, p99 and max latency of the rows written from ``timed_from`` on: ``written`` maps a
    unit of input (a file, a record) to (when it was written, its rows), ``read`` to the batch
    that read it, ``visible`` a batch to when its result was in the sink (a result after
    ``deadline``, or none, leaves the rows untimed: ``missed_rows``). With the median of each
    phase of the batches that read rows (``durationMs``), where the time goes."""
    latencies: list[float] = []
    rows = missed = 0
    for unit, (at, n) in written.items():
        if at < timed_from:
            continue
        batch = read.get(unit)
        if batch is None or batch not in visible or visible[batch] > deadline:
            missed += n
            continue
        latencies.extend([(visible[batch] - at) * 1000] * n)
        rows += n
    return {
        "engine": engine_kind,
        "query": query_kind,
        "rows": rows,
        "missed_rows": missed,
        "batches": len(visible),
        "p50_ms": round(_percentile(latencies, 0.50), 1) if latencies else None,
        "p99_ms": round(_percentile(latencies, 0.99), 1) if latencies else None,
        "max_ms": round(max(latencies), 1) if latencies else None,
        "error": str(error) if error else None,
        "median_phase_ms": _median_phases(progress),
    }


def _median_phases(progress: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each ``durationMs`` phase over the batches that read rows."""
    data = [p["durationMs"] for p in progress if p.get("numInputRows")]
    phases = sorted({k for d in data for k in d})
    return {k: _percentile([float(d.get(k, 0)) for d in data], 0.5) for k in phases} if data else {}


def _produce(bootstrap: str, topics: list[str], query: str, rate: int, period: float, stop: threading.Event,
             written: dict[tuple[str, int, int], tuple[float, int]]) -> None:
    """Send ``rate x period`` rows every ``period`` seconds until ``stop``, one record a request;
    ``written`` maps each record's (topic, partition, offset) to (when it was sent, 1)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0})
    rng = random.Random(7)
    per_round = max(1, int(rate * period))
    next_at = time.time()
    while not stop.is_set():
        for topic, rows in zip(topics, _rows(query, rng, per_round)):
            for row in rows:
                sent = time.time()

                def acked(err: Any, msg: Any, sent: float = sent) -> None:
                    if err is None:
                        written[(msg.topic(), msg.partition(), msg.offset())] = (sent, 1)

                producer.produce(topic, value=json.dumps(row).encode(), on_delivery=acked)
        producer.poll(0)
        next_at += period
        stop.wait(max(0.0, next_at - time.time()))
    producer.flush(30)


def _consume(bootstrap: str, topic: str, stop: threading.Event, arrived: list[float]) -> None:
    """Note when each record of ``topic`` (one partition, from its start) arrives, until ``stop``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                arrived.append(time.time())
    finally:
        consumer.close()


def _offsets_by_batch(checkpoint: Path) -> dict[int, dict[tuple[str, int], int]]:
    """Each batch's end offsets (topic, partition) -> offset, from the query's offset log."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    for f in (checkpoint / "offsets").iterdir():
        if not f.name.isdigit():
            continue
        ends: dict[tuple[str, int], int] = {}
        for line in f.read_text().splitlines()[2:]:
            if line.strip() and line.strip() != "-":
                for topic, parts in json.loads(line).items():
                    ends.update({(topic, int(p)): int(o) for p, o in parts.items()})
        out[int(f.name)] = ends
    return out


def child_kafka(engine_kind: str, query_kind: str, rate: int, period: float, seconds: float, warmup: float, bootstrap: str) -> dict[str, Any]:
    """:func:`child` from Kafka to Kafka."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F
    from run import child_session, engine_for

    spark = child_session(f"statestream-latency-kafka-{engine_kind}")
    work = Path(tempfile.mkdtemp(prefix=f"latency-kafka-{engine_kind}-"))
    tag = uuid.uuid4().hex[:6]
    inputs = [f"in{i}-{tag}" for i in range(len(SCHEMAS[query_kind]))]
    output = f"out-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in [*inputs, output]]).values():
        f.result(10)
    engine = engine_for(spark, engine_kind)

    def read(i: int, schema: str) -> Any:
        raw = (engine.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", inputs[i])
               .option("startingOffsets", "earliest").load())
        return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("j")).select("j.*")

    result, mode = _query(query_kind, read)
    written: dict[tuple[str, int, int], tuple[float, int]] = {}
    arrived: list[float] = []
    stop, stop_consumer = threading.Event(), threading.Event()
    q = (result.selectExpr("to_json(struct(*)) AS value").writeStream.format("kafka").outputMode(mode)
         .option("kafka.bootstrap.servers", bootstrap).option("topic", output).option("checkpointLocation", str(work / "ck")).start())
    consumer = threading.Thread(target=_consume, args=(bootstrap, output, stop_consumer, arrived), daemon=True)
    producer = threading.Thread(target=_produce, args=(bootstrap, inputs, query_kind, rate, period, stop, written), daemon=True)
    consumer.start()
    try:
        t0, stopped, error, progress_list = _run_for(q, producer, stop, warmup + seconds)
    finally:
        stop_consumer.set()
        consumer.join()
        spark.stop()
    progress = {int(p["batchId"]): int(p["sink"]["numOutputRows"]) for p in progress_list}
    ends = _offsets_by_batch(work / "ck")
    read_by: dict[tuple[str, int, int], int] = {}
    for unit in written:
        topic, partition, offset = unit
        batch = next((b for b in sorted(ends) if ends[b].get((topic, partition), 0) > offset), None)
        if batch is not None:
            read_by[unit] = batch
    visible: dict[int, float] = {}
    total = 0
    for b in sorted(progress):
        total += max(0, progress[b])
        if progress[b] > 0 and total <= len(arrived):
            visible[b] = arrived[total - 1]
    return _summary(engine_kind, query_kind, written, read_by, visible, t0 + warmup, stopped + 3, error, progress_list)


def run_latency(
    engines: list[str], queries: list[str], rate: int = 1000, period: float = 0.1, seconds: float = 45, warmup: float = 15,
    source: str = "files",
) -> list[dict[str, Any]]:
    """Each query on each engine (a child process each); print and return the results."""
    from run import byte_compile_statestream

    byte_compile_statestream()
    broker, bootstrap = None, ""
    if source == "kafka":
        from kafka_w8 import start_broker

        broker, bootstrap = start_broker()
        if "spark" in engines:
            print("kafka: Spark's engine has no Kafka connector here (not in the PySpark wheel); statestream only", flush=True)
            engines = [e for e in engines if e != "spark"]
    try:
        return _run_children(engines, queries, rate, period, seconds, warmup, source, bootstrap)
    finally:
        if broker is not None:
            broker.terminate()


def _run_children(
    engines: list[str], queries: list[str], rate: int, period: float, seconds: float, warmup: float, source: str, bootstrap: str,
) -> list[dict[str, Any]]:
    results = []
    for query in queries:
        by_engine = {}
        for e in engines:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", e, "--query", query, "--rate", str(rate),
                   "--period", str(period), "--seconds", str(seconds), "--warmup", str(warmup), "--source", source,
                   "--bootstrap", bootstrap]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
            line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
            if line is None:
                print(f"{query} {e}: failed\n" + "\n".join(out.stderr.strip().splitlines()[-5:]))
                continue
            r = json.loads(line)
            by_engine[e] = r
            results.append(r)
            print(f"{source:<5} {query:<5} {e:<6} p50 {r['p50_ms']} ms | p99 {r['p99_ms']} ms | max {r['max_ms']} ms | "
                  f"{r['rows']} rows timed ({r['missed_rows']} not read in time) | {r['batches']} batches", flush=True)
            print(f"{'':<17}median phases (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in r["median_phase_ms"].items()), flush=True)
        s, o = by_engine.get("spark"), by_engine.get("ours")
        if s and o and s.get("p50_ms") and o.get("p50_ms"):
            print(f"{source:<5} {query:<5} ratio ours/Spark: p50 {o['p50_ms'] / s['p50_ms']:.2f}x, p99 {o['p99_ms'] / s['p99_ms']:.2f}x, "
                  f"max {o['max_ms'] / s['max_ms']:.2f}x", flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--query", default="both", choices=["count", "join", "both"])
    ap.add_argument("--rate", type=int, default=1000, help="rows a second (the join: both sides together)")
    ap.add_argument("--period", type=float, default=0.1, help="seconds between files")
    ap.add_argument("--seconds", type=float, default=45, help="seconds timed, after the warm-up")
    ap.add_argument("--warmup", type=float, default=15, help="seconds of rows left out at the start")
    ap.add_argument("--engine", default="both", choices=["spark", "ours", "both"])
    ap.add_argument("--source", default="files", choices=["files", "kafka"], help="files to foreachBatch, or Kafka to Kafka")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.source == "kafka":
            r = child_kafka(args.child, args.query, args.rate, args.period, args.seconds, args.warmup, args.bootstrap)
        else:
            r = child(args.child, args.query, args.rate, args.period, args.seconds, args.warmup)
        print(json.dumps(r), flush=True)
        return
    queries = ["count", "join"] if args.query == "both" else [args.query]
    run_latency(["spark", "ours"] if args.engine == "both" else [args.engine], queries, args.rate, args.period, args.seconds, args.warmup,
                args.source)


if __name__ == "__main__":
    main()
