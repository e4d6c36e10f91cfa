"""Small batches on a processing-time trigger with a trickle of input (issue 17, item 1), both engines.

    python3 bench/trickle.py [--batches 60] [--interval 1] [--rows 20] [--engine both|spark|ours]

A feeder thread writes one JSON file of ``--rows`` rows (event time advancing 10 s a file, as
W1/W9) every ``--interval`` seconds into the input directory; the query is W1's windowed count
with a 20 s watermark, ``maxFilesPerTrigger=1``, ``trigger(processingTime=interval)``, into a
``foreachBatch`` sink that counts its rows. The run stops after ``--batches`` batches that read a
file. Each engine runs in its own child process (a fresh JVM); the parent prints the p50 and p95
of ``batchDuration`` over the batches with input (the first five left out: JVM warm-up), and the
ratios ours/Spark.

This is what a user of a small stream sees per batch: unlike W9 (availableNow, back-to-back
batches), the engine is idle between triggers, so a batch's duration is its whole latency added to
the trigger's.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
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

WARMUP_BATCHES = 5
BASE = dt.datetime(2026, 1, 1)


def _percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank: a figure that was measured."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def _feed(directory: Path, rows: int, interval: float, stop: threading.Event) -> None:
    """One file a trigger interval, written aside and renamed in (a reader never sees half a file)."""
    i = 0
    while not stop.is_set():
        lines = [
            json.dumps({"timestamp": (BASE + dt.timedelta(seconds=i * 10 + k * 10 / rows)).isoformat(sep=" "), "value": k})
            for k in range(rows)
        ]
        tmp = directory.parent / f".part-{i:05d}.json"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, directory / f"part-{i:05d}.json")
        i += 1
        stop.wait(interval)


def child(engine_kind: str, batches: int, interval: float, rows: int) -> dict[str, Any]:
    from run import _progress_dict, build_query, child_session, engine_for

    spark = child_session(f"statestream-trickle-{engine_kind}")
    work = Path(tempfile.mkdtemp(prefix=f"trickle-{engine_kind}-"))
    (work / "in").mkdir()
    engine = engine_for(spark, engine_kind)
    counts: dict[int, int] = {}

    def sink(df: Any, batch_id: int) -> None:
        counts[int(batch_id)] = df.count()

    source = engine.readStream.format("json").schema("timestamp TIMESTAMP, value LONG").option("maxFilesPerTrigger", 1).load(str(work / "in"))
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(work / "in", rows, interval, stop), daemon=True)
    feeder.start()
    query = (
        build_query("W9")(source)
        .writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(work / "ck"))
        .trigger(processingTime=f"{interval} seconds")
        .start()
    )
    seen: dict[int, dict] = {}
    try:
        while True:
            for p in query.recentProgress or []:
                d = _progress_dict(p)
                if (d.get("numInputRows") or 0) > 0:
                    seen[int(d["batchId"])] = d
            if len(seen) >= batches or query.exception() is not None:
                break
            time.sleep(interval / 2)
    finally:
        stop.set()
        query.stop()
        spark.stop()
    data = [seen[b] for b in sorted(seen)][WARMUP_BATCHES:batches]
    durations = [float(d["batchDuration"]) for d in data]
    return {
        "engine": engine_kind,
        "batches": len(data),
        "p50_ms": _percentile(durations, 0.50) if durations else None,
        "p95_ms": _percentile(durations, 0.95) if durations else None,
        "mean_ms": round(statistics.mean(durations), 1) if durations else None,
        "input_rows": sum(int(d["numInputRows"]) for d in data),
        "sink_rows": sum(counts.get(int(d["batchId"]), 0) for d in data),
    }


def run_trickle(engines: list[str], batches: int = 60, interval: float = 1.0, rows: int = 20) -> dict[str, dict[str, Any]]:
    """Run the trickle on each engine (a child process each); print and return their results."""
    from run import byte_compile_statestream  # bench/run.py, beside this file

    byte_compile_statestream()
    results: dict[str, dict[str, Any]] = {}
    for e in engines:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", e, "--batches", str(batches), "--interval", str(interval), "--rows", str(rows)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
        line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            print(f"{e}: failed\n" + "\n".join(out.stderr.strip().splitlines()[-5:]))
            continue
        results[e] = json.loads(line)
        r = results[e]
        if not r.get("p50_ms"):
            print(f"{e}: no batch with input: {r}")
            continue
        print(f"{e:<6} p50 {r['p50_ms']:.0f} ms | p95 {r['p95_ms']:.0f} ms | mean {r['mean_ms']} ms | {r['batches']} batches | input {r['input_rows']} rows | sink rows {r['sink_rows']}")
    if len(results) == 2 and all(r.get("p50_ms") and r.get("p95_ms") for r in results.values()):
        s, o = results["spark"], results["ours"]
        print(f"ratio ours/Spark: p50 {o['p50_ms'] / s['p50_ms']:.2f}x, p95 {o['p95_ms'] / s['p95_ms']:.2f}x")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--interval", type=float, default=1.0, help="trigger interval and file period, seconds")
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--engine", default="both", choices=["spark", "ours", "both"])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batches + WARMUP_BATCHES, args.interval, args.rows)), flush=True)
        return
    run_trickle(["spark", "ours"] if args.engine == "both" else [args.engine], args.batches, args.interval, args.rows)


if __name__ == "__main__":
    main()
