"""State rows per side of a stream-stream join whose inputs run at very different speeds, over
100 batches, on Spark's engine and on statestream (issue 12, "Beyond Spark": measured, not
changed; neither engine bounds the state by more than the watermark).

One input stream carries both sides (``side`` 'L' or 'R'), one file per batch:

* the fast side (left): 1,000 rows a file, its event time advancing 10 s a file;
* the slow side (right): 100 rows a file, its event time advancing 1 s a file.

The query: ``left.withWatermark("lts", "10 seconds")`` joined with
``right.withWatermark("rts", "10 seconds")`` on ``k = rk AND rts BETWEEN lts AND lts + 5 s``
(inner), append mode, the default ``min`` watermark policy. The global watermark follows the slow
side, so the fast side's state keeps every row newer than the slow side's watermark: it grows
with the speed difference, on both engines.

    python3 bench/join_state_growth.py [--batches 100] [--engine both|spark|ours]

Prints, every 10 batches, the state rows of each side on both engines, and whether they agree;
per-side counts come from each engine's checkpoint (Spark's ``statestore`` reader with
``joinSide``; statestream's state files read through its state store provider).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCHEMA = "side STRING, k LONG, ts TIMESTAMP, v LONG"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)
FAST_ROWS, SLOW_ROWS, KEYS = 1000, 100, 200


def write_inputs(directory: Path, batches: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    for i in range(batches):
        sides, ks, ts, vs = [], [], [], []
        for j in range(FAST_ROWS):
            sides.append("L")
            ks.append(j % KEYS)
            ts.append(T0 + dt.timedelta(seconds=10 * i, milliseconds=j * 10000 // FAST_ROWS))
            vs.append(i * 10_000 + j)
        for j in range(SLOW_ROWS):
            sides.append("R")
            ks.append(j % KEYS)
            ts.append(T0 + dt.timedelta(seconds=i, milliseconds=j * 1000 // SLOW_ROWS))
            vs.append(-(i * 10_000 + j))
        table = pa.table({"side": sides, "k": pa.array(ks, pa.int64()), "ts": pa.array(ts, pa.timestamp("us")), "v": pa.array(vs, pa.int64())})
        pq.write_table(table, directory / f"part-{i:05d}.parquet")
        os.utime(directory / f"part-{i:05d}.parquet", (1_700_000_000 + i, 1_700_000_000 + i))


def build(df: Any) -> Any:
    from pyspark.sql import functions as F

    left = df.filter("side = 'L'").select("k", F.col("ts").alias("lts"), F.col("v").alias("lv")).withWatermark("lts", "10 seconds")
    right = df.filter("side = 'R'").select(F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("v").alias("rv")).withWatermark("rts", "10 seconds")
    cond = (left.k == right.rk) & (right.rts >= left.lts) & (right.rts <= left.lts + F.expr("INTERVAL 5 SECONDS"))
    return left.join(right, cond)


def run(engine: Any, spark: Any, input_dir: Path, checkpoint: Path) -> tuple[list[dict], float]:
    df = engine.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    q = (
        build(df).writeStream.format("noop").outputMode("append")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    t0 = time.perf_counter()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    return [json.loads(p.json) if hasattr(p, "json") else p for p in q.recentProgress], wall


def spark_side_rows(spark: Any, checkpoint: Path, batch_id: int) -> tuple[int, int]:
    out = []
    for side in ("left", "right"):
        df = spark.read.format("statestore").option("path", str(checkpoint)).option("joinSide", side).option("batchId", batch_id).load()
        out.append(df.count())
    return out[0], out[1]


def ours_side_rows(checkpoint: Path, batch_id: int) -> tuple[int, int]:
    """Rows of each side's ``keyWithIndexToValue`` stores at the version batch ``batch_id``
    committed (its id + 1), read through statestream's state store provider."""
    import pyarrow as pa

    from statestream.state.provider import StateStoreProvider
    from statestream.state.store import StateStoreId

    root = str(checkpoint / "state")
    counts = []
    for side in ("left", "right"):
        name = f"{side}-keyWithIndexToValue"
        total = 0
        for part in sorted((checkpoint / "state" / "0").iterdir()):
            if not part.name.isdigit():
                continue
            sid = StateStoreId(root, 0, int(part.name), name)
            files = sorted(p for p in (Path(root) / sid.relative_dir).iterdir() if p.suffix in (".delta", ".snapshot"))
            with pa.ipc.open_stream(files[0].read_bytes()) as reader:
                schema = reader.schema
            nk = int(schema.metadata[b"statestream.state.numKeyColumns"])
            fields = [f for f in schema if f.name != "__op"]
            provider = StateStoreProvider(sid, pa.schema(fields[:nk]), pa.schema(fields[nk:]))
            total += provider.get_read_store(batch_id + 1).table().num_rows
        counts.append(total)
    return counts[0], counts[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--engine", default="both", choices=["spark", "ours", "both"])
    args = ap.parse_args()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
        # every batch's progress kept (Spark keeps the last 100 by default)
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="join-growth-"))
    write_inputs(work / "input", args.batches)
    results: dict[str, list[tuple[int, int]]] = {}
    for name in ("spark", "ours"):
        if args.engine not in (name, "both"):
            continue
        if name == "spark":
            engine = spark
        else:
            from statestream import StreamingSession

            engine = StreamingSession(spark)
        ckpt = work / f"ckpt-{name}"
        progress, wall = run(engine, spark, work / "input", ckpt)
        data = [p for p in progress if p.get("numInputRows")]
        ids = [int(p["batchId"]) for p in data]
        rows = [spark_side_rows(spark, ckpt, b) if name == "spark" else ours_side_rows(ckpt, b) for b in ids]
        totals = [int(p["stateOperators"][0]["numRowsTotal"]) for p in data]
        results[name] = list(zip(ids, rows))
        print(f"{name}: {len(ids)} data batches in {wall:.1f} s; state rows total (progress) at the end {totals[-1]}")
        if any(sum(r) != t for r, t in zip(rows, totals)):
            print(f"  warning: per-side rows do not add up to the progress total on {name}")
    print("batch | " + " | ".join(f"{n} left, right" for n in results))
    n = min(len(v) for v in results.values())
    for i in range(n):
        if i % 10 == 9 or i == 0 or i == n - 1:
            batch_id = next(iter(results.values()))[i][0]
            print(f"{batch_id:5d} | " + " | ".join(f"{v[i][1][0]:8d}, {v[i][1][1]:6d}" for v in results.values()))
    if len(results) == 2:
        same = results["spark"][:n] == results["ours"][:n]
        print("per-side state rows equal on both engines at every batch:", same)


if __name__ == "__main__":
    main()
