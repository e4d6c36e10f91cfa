"""Operating a large state: the state reader's throughput on both engines, and statestream's
offline repartition (issue 16).

    python3 bench/state_ops.py                   # 10,000,000 keys, 8 -> 16 partitions
    python3 bench/state_ops.py --keys 1000000    # a quicker run

One Parquet file of ``--keys`` distinct keys (a long ``k``, a value ``v``) goes through
``groupBy("k").agg(count, sum(v))`` once on each engine (one batch, ``--partitions`` state
partitions, update mode, availableNow), each in its own child process. Then, in the same
children:

* **reader**: ``read.format("statestore").load(checkpoint)`` (Spark's reader over Spark's
  checkpoint, statestream's over its own), every row consumed (``count`` and a sum of
  ``hash(key, value)``): wall time and rows per second;
* **repartition** (statestream only; Spark 4.1 has none for its default store): the state
  rewritten from ``--partitions`` to ``--to`` partitions, wall time and the peak RSS of the
  child's process tree (driver, JVM, Python workers) while it runs (its results are checked by
  the tests; here the state metadata shows the new count).

Results go to stdout as a table and to ``bench/results/state-ops-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _input(keys: int) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = ROOT / "bench" / "data" / f"state-ops-{keys}"
    f = d / "part-0.parquet"
    if not f.exists():
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(7)
        table = pa.table({"k": np.arange(keys, dtype=np.int64), "v": rng.integers(0, 1000, keys)})
        pq.write_table(table, f)
    return d


def _peak_rss_during(fn: Any) -> tuple[Any, int]:
    """Run ``fn()``; (its result, the peak RSS in MB of this process tree meanwhile)."""
    from run import _tree_rss  # bench/run.py's sampler

    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], sum(rss for _, rss, _ in _tree_rss(os.getpid()).values()))
            stop.wait(0.1)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        return fn(), round(peak[0] / 2**20)
    finally:
        stop.set()
        t.join()


def child(engine: str, keys: int, partitions: int, to: int, work: Path) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(partitions)).config("spark.driver.memory", os.environ.get("BENCH_DRIVER_MEMORY", "8g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    session: Any = spark
    if engine == "ours":
        from statestream import StreamingSession

        session = StreamingSession(spark)
    input_dir = _input(keys)
    checkpoint = work / engine / "checkpoint"
    t0 = time.perf_counter()
    query = (
        session.readStream.format("parquet").schema("k LONG, v LONG").load(str(input_dir))
        .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        .writeStream.outputMode("update").foreachBatch(lambda df, _id: df.count())  # Spark 4.1 fails a batch whose state tasks did not all run
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    build_s = time.perf_counter() - t0
    reader = session.read if engine == "ours" else spark.read

    def read_all() -> tuple[int, int]:
        row = reader.format("statestore").load(str(checkpoint)).agg(F.count("*").alias("c"), F.sum(F.hash("key", "value")).alias("h")).first()
        return int(row["c"]), int(row["h"] or 0)

    t0 = time.perf_counter()
    (rows, _checksum), reader_peak = _peak_rss_during(read_all)
    reader_s = time.perf_counter() - t0
    out: dict[str, Any] = {
        "engine": engine, "keys": keys, "build_s": round(build_s, 1), "reader_s": round(reader_s, 1), "reader_rows": rows,
        "reader_rows_per_s": round(rows / reader_s), "reader_peak_rss_mb": reader_peak,
    }
    if engine == "ours":
        t0 = time.perf_counter()
        result, peak = _peak_rss_during(lambda: session.checkpointManager.repartition(str(checkpoint), to))
        out.update(repartition_s=round(time.perf_counter() - t0, 1), repartition_peak_rss_mb=peak,
                   repartition_rows=sum(result.rows.values()), repartition=f"{result.old_partitions} -> {result.new_partitions}")
        meta = session.read.format("state-metadata").load(str(checkpoint)).collect()
        out["partitions_after"] = sorted({r.numPartitions for r in meta})
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--to", type=int, default=16)
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "WORKDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.keys, args.partitions, args.to, Path(args.child[1]))))
        return
    import tempfile

    _input(args.keys)
    results = []
    with tempfile.TemporaryDirectory(prefix="state-ops-") as work:
        for engine in ("spark", "ours"):
            cmd = [sys.executable, __file__, "--keys", str(args.keys), "--partitions", str(args.partitions), "--to", str(args.to), "--child", engine, work]
            run = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
            line = next((ln for ln in reversed(run.stdout.splitlines()) if ln.startswith("{")), None)
            if line is None:
                print(f"{engine} failed:\n{run.stderr[-3000:]}", file=sys.stderr)
                sys.exit(1)
            results.append(json.loads(line))
    spark_r, ours_r = results
    print(f"state of {args.keys:,} keys, {args.partitions} partitions")
    print(f"  build (one batch):  spark {spark_r['build_s']} s, ours {ours_r['build_s']} s")
    print(f"  statestore reader:  spark {spark_r['reader_s']} s ({spark_r['reader_rows_per_s']:,} rows/s), "
          f"ours {ours_r['reader_s']} s ({ours_r['reader_rows_per_s']:,} rows/s); ratio ours/spark {ours_r['reader_s'] / spark_r['reader_s']:.2f}")
    print(f"  repartition {ours_r['repartition']}: {ours_r['repartition_s']} s, peak RSS {ours_r['repartition_peak_rss_mb']} MB, "
          f"{ours_r['repartition_rows']:,} rows moved; partitions after: {ours_r['partitions_after']}")
    out = ROOT / "bench" / "results" / f"state-ops-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
