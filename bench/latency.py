"""End-to-end latency at a steady rate (issue 51, item 2), both engines: files to ``foreachBatch``.

    python3 bench/latency.py [--query count|join|both] [--rate 1000] [--seconds 45] [--engine both|spark|ours]

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
        now = dt.datetime.now()
        name = f"part-{i:06d}.json"
        if query == "count":
            rows = [{"t": now.isoformat(sep=" "), "k": rng.randrange(100)} for _ in range(per_file)]
            written[str(dirs[0] / name)] = (_write(dirs[0], name, _rows_json(rows)), len(rows))
        else:
            half = max(1, per_file // 2)
            ads = [rng.randrange(10_000) for _ in range(half)]
            imps = [{"adId": a, "impressionTime": now.isoformat(sep=" ")} for a in ads]
            clicks = [{"clickAdId": a, "clickTime": (now + dt.timedelta(seconds=rng.random() * 2)).isoformat(sep=" ")} for a in ads]
            written[str(dirs[0] / name)] = (_write(dirs[0], name, _rows_json(imps)), len(imps))
            written[str(dirs[1] / name)] = (_write(dirs[1], name, _rows_json(clicks)), len(clicks))
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


def child(engine_kind: str, query_kind: str, rate: int, period: float, seconds: float, warmup: float) -> dict[str, Any]:
    from pyspark.sql import functions as F
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

    if query_kind == "count":
        events = engine.readStream.format("json").schema("t TIMESTAMP, k INT").load(str(dirs[0]))
        result = events.withWatermark("t", "5 seconds").groupBy(F.window("t", "5 seconds"), "k").count()
        mode = "update"
    else:
        imps = engine.readStream.format("json").schema("adId INT, impressionTime TIMESTAMP").load(str(dirs[0]))
        clicks = engine.readStream.format("json").schema("clickAdId INT, clickTime TIMESTAMP").load(str(dirs[1]))
        result = imps.withWatermark("impressionTime", "10 seconds").join(
            clicks.withWatermark("clickTime", "10 seconds"),
            F.expr("clickAdId = adId AND clickTime >= impressionTime AND clickTime <= impressionTime + interval 30 seconds"),
        )
        mode = "append"
    written: dict[str, tuple[float, int]] = {}
    stop = threading.Event()
    q = result.writeStream.outputMode(mode).foreachBatch(sink).option("checkpointLocation", str(work / "ck")).start()
    feeder = threading.Thread(target=_feed, args=(dirs, query_kind, rate, period, stop, written), daemon=True)
    t0 = time.time()
    feeder.start()
    try:
        time.sleep(warmup + seconds)
    finally:
        stop.set()
        feeder.join()
        stopped = time.time()
        time.sleep(3)  # the batches reading the last files
        q.stop()
        error = q.exception()
        spark.stop()
    read = {}
    for source in range(2 if query_kind == "join" else 1):
        read.update(_files_by_batch(work / "ck", source))
    latencies: list[float] = []
    rows = missed = 0
    for path, (at, n) in written.items():
        if at < t0 + warmup:
            continue
        batch = read.get(path)
        if batch is None or batch not in visible or visible[batch] > stopped + 3:
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
    }


def run_latency(engines: list[str], queries: list[str], rate: int = 1000, period: float = 0.1, seconds: float = 45, warmup: float = 15) -> list[dict[str, Any]]:
    """Each query on each engine (a child process each); print and return the results."""
    from run import byte_compile_statestream

    byte_compile_statestream()
    results = []
    for query in queries:
        by_engine = {}
        for e in engines:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", e, "--query", query, "--rate", str(rate),
                   "--period", str(period), "--seconds", str(seconds), "--warmup", str(warmup)]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
            line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
            if line is None:
                print(f"{query} {e}: failed\n" + "\n".join(out.stderr.strip().splitlines()[-5:]))
                continue
            r = json.loads(line)
            by_engine[e] = r
            results.append(r)
            print(f"{query:<5} {e:<6} p50 {r['p50_ms']} ms | p99 {r['p99_ms']} ms | max {r['max_ms']} ms | "
                  f"{r['rows']} rows timed ({r['missed_rows']} not read in time) | {r['batches']} batches", flush=True)
        s, o = by_engine.get("spark"), by_engine.get("ours")
        if s and o and s.get("p50_ms") and o.get("p50_ms"):
            print(f"{query:<5} ratio ours/Spark: p50 {o['p50_ms'] / s['p50_ms']:.2f}x, p99 {o['p99_ms'] / s['p99_ms']:.2f}x, "
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
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.query, args.rate, args.period, args.seconds, args.warmup)), flush=True)
        return
    queries = ["count", "join"] if args.query == "both" else [args.query]
    run_latency(["spark", "ours"] if args.engine == "both" else [args.engine], queries, args.rate, args.period, args.seconds, args.warmup)


if __name__ == "__main__":
    main()
