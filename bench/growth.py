"""Bounded growth over many batches (issue 15, item 6), both engines side by side.

    python3 bench/growth.py [--batches 1000] [--every 100] [--engine both|spark|ours] [--cleanup-delay 10m]

One tiny JSON file per batch (20 rows, event time advancing 10 s a file) feeds a windowed count
with a 20 s watermark into a parquet file sink, ``maxFilesPerTrigger=1`` and
``trigger(availableNow=True)``: so every batch adds an offsets and a commit entry, a file
source log entry, a state version per partition and a sink log entry. Retention and compaction
are each engine's defaults (``minBatchesToRetain`` 100, snapshots every 10 deltas, the file
logs compacted every 10 batches, their old entries deleted 10 minutes after they were written:
``--cleanup-delay`` shortens that delay on both engines, so a short run shows it).

Every ``--every`` batches, from a listener on the query's progress: the checkpoint's file count
and bytes, the sink log's file count, the driver JVM's heap in use after a full GC, and the RSS
of the whole process tree (driver Python, JVM,
Python workers). Each engine runs in its own child process (a fresh JVM). The parent prints both
engines' figures side by side.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _dir_stats(path: Path) -> tuple[int, int]:
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            files += 1
            try:
                size += os.path.getsize(os.path.join(root, n))
            except OSError:
                pass
    return files, size


def _live_heap_mb(spark: Any) -> int:
    """The driver JVM's heap in use right after a full collection: what it really holds, where
    RSS also counts heap the JVM took and has not given back."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    jvm.java.lang.System.gc()
    return int(jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed()) // 2**20


def child(engine_kind: str, batches: int, every: int, cleanup_delay: str) -> None:
    from run import _tree_rss  # the process-tree sampler of bench/run.py

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    work = Path(tempfile.mkdtemp(prefix=f"growth-{engine_kind}-"))
    inp = work / "in"
    inp.mkdir()
    t0 = dt.datetime(2024, 1, 1)
    base = time.time() - 10 * batches
    for i in range(batches):
        p = inp / f"f{i:05d}.json"
        p.write_text("".join(
            json.dumps({"k": j % 5, "ts": (t0 + dt.timedelta(seconds=10 * i + j / 2)).isoformat()}) + "\n" for j in range(20)
        ))
        os.utime(p, (base + i, base + i))
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.fileSource.log.cleanupDelay", cleanup_delay)
        .config("spark.sql.streaming.fileSink.log.cleanupDelay", cleanup_delay).getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    engine: Any = spark
    if engine_kind == "ours":
        from statestream import StreamingSession

        engine = StreamingSession(spark)
    samples: list[dict[str, Any]] = []

    class Sampler(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            b = event.progress.batchId
            if (b + 1) % every == 0:
                files, size = _dir_stats(work / "ck")
                sink_files, _ = _dir_stats(work / "out" / "_spark_metadata")
                tree = _tree_rss(os.getpid())
                rss = sum(r for _name, r, _file in tree.values())
                by_name: dict[str, int] = {}
                for pid, (name, r, _file) in tree.items():
                    key = "driver python" if pid == os.getpid() else name
                    by_name[key] = by_name.get(key, 0) + r // 2**20
                samples.append({"batch": b, "files": files, "bytes": size, "sink_log_files": sink_files, "rss_mb": rss // 2**20,
                                "rss_mb_by_process": by_name, "heap_live_mb": _live_heap_mb(spark)})

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    engine.streams.addListener(Sampler())
    df = engine.readStream.schema("k INT, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(str(inp))
    counted = df.withWatermark("ts", "20 seconds").groupBy(F.window("ts", "10 seconds"), "k").count()
    t = time.time()
    q = (
        counted.select("window.start", "k", "count").writeStream.format("parquet").option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "ck")).outputMode("append").trigger(availableNow=True).start()
    )
    q.awaitTermination()
    wall = time.time() - t
    time.sleep(1)  # the listener bus delivers the last progress events
    print(json.dumps({"engine": engine_kind, "wall_s": round(wall, 1), "samples": samples}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--engine", default="both", choices=["both", "spark", "ours"])
    ap.add_argument("--cleanup-delay", default="10m")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.batches, args.every, args.cleanup_delay)
        return
    results = {}
    for kind in (["spark", "ours"] if args.engine == "both" else [args.engine]):
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--batches", str(args.batches), "--every", str(args.every),
             "--cleanup-delay", args.cleanup_delay],
            capture_output=True, text=True, cwd=str(ROOT), env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        line = [x for x in out.stdout.splitlines() if x.startswith("{")]
        if not line:
            print(out.stderr[-3000:])
            raise SystemExit(f"{kind} failed")
        results[kind] = json.loads(line[-1])
        print(f"{kind}: {args.batches} batches in {results[kind]['wall_s']} s")
    for kind, result in results.items():
        first, last = result["samples"][0], result["samples"][-1]
        print(f"{kind}: RSS by process, batch {first['batch']} -> {last['batch']}: "
              + ", ".join(f"{k} {first['rss_mb_by_process'].get(k, 0)} -> {v} MB" for k, v in sorted(last["rss_mb_by_process"].items())))
    kinds = list(results)
    head = "| batch | " + " | ".join(f"{k} files | {k} MB on disk | {k} sink log files | {k} RSS MB | {k} live heap MB" for k in kinds) + " |"
    print(head)
    print("|" + "---|" * (1 + 5 * len(kinds)))
    rows = zip(*(results[k]["samples"] for k in kinds))
    for row in rows:
        cells = [str(row[0]["batch"])]
        for s in row:
            cells += [str(s["files"]), f"{s['bytes'] / 2**20:.2f}", str(s["sink_log_files"]), str(s["rss_mb"]), str(s.get("heap_live_mb", ""))]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
