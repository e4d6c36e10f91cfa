"""Benchmark: the same streaming query on Spark's own engine and on statestream.

One command::

    python bench/run.py [--workload W1|...|W9|all] [--rows N] [--files N] [--engine spark|ours|both|floor|all]

The input is generated once (numpy + pyarrow, no Spark, no per-row Python) into ``bench/data``
and reused by later runs. Each (workload, engine) pair then runs in its own child process with a
fresh ``local[2]`` Spark (``spark.sql.shuffle.partitions=4``, i.e. 4 state partitions): a fresh
JVM per engine is the only way to give each side a fair peak-memory figure, since a JVM never hands
heap back. The query runs in update mode (append for W4), one file per batch (``maxFilesPerTrigger=1``) under an
``availableNow`` trigger, into a ``foreachBatch`` sink that only does ``df.count()`` on both sides,
so the sink's work is identical.

Reported per engine: median batch time of the data batches (progress ``batchDuration``), the
whole run's wall time, and peak RSS of the child's process tree (driver Python + JVM + Python
workers, sampled every 100 ms with psutil, else /proc); then the ratio ours / Spark. A side that
fails (statestream before its engine exists) is reported as failed with its error, and the
ratio is printed only when both sides ran.

Workloads:

* W1: the seed query (20 s watermark, 5 s windows, ``count(value)``) over files of
  (timestamp, value) whose event time moves 10 s per file, with 1 % of rows up to 60 s late.
* W2: ``groupBy("user", window("timestamp", "1 hour"))`` with count, sum, avg and max of
  ``amount`` over (timestamp, user, amount); users drawn from 1,000,000, all files inside one
  hour, so the state grows to about a million keys.
* W3: deduplication as the programming guide writes it,
  ``withWatermark("timestamp", "10 seconds").dropDuplicates(["guid", "timestamp"])`` over
  (guid, timestamp, value) events; event time advances 10 s per file and 10 % of each file's rows
  repeat an event of this file or of the previous one exactly.
* W5: ``groupBy("user", window("timestamp", "1 hour"))`` with stddev, collect_set,
  percentile_approx, approx_count_distinct and max_by of ``amount`` over W2's kind of input
  (1,000,000 users, one hour-aligned window): the buffers Spark keeps as moments, a hash set, a
  quantile digest and HyperLogLog registers.
* W6: a stream-stream join, impressions with clicks (Spark's guide's example): each side
  watermarked, inner join on the ad id with the click within one minute after the impression;
  100,000 ads, 1,000,000 rows a side a batch, event time 10 minutes a file.
* W7: ``transformWithStateInPandas`` with a per-user running-total processor (issue 13): a
  ValueState (total, count), one ListState append per row, and one event-time timer per user,
  moved to a minute after the user's latest row, whose firing emits the user's final total and
  clears its state; 100,000 users, event time one minute a file, 30 s watermark, update mode.
  W7a is the same logic as an ``applyInPandasWithState`` function (the amounts kept in the
  state's array column, an event-time timeout instead of the timer).
* W4: sessions, ``groupBy("user", session_window("timestamp", "5 minutes"))`` with count and
  sum of ``amount``, append mode with a 1 minute watermark, over (timestamp, user, amount);
  100,000 users, each active for two 3-minute files out of four, so sessions grow across
  batches, close by the watermark while their user is idle, and 1 % of rows come late.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
RESULTS = ROOT / "bench" / "results"
BASE_EPOCH_S = 1_704_067_200  # 2024-01-01T00:00:00Z, hour-aligned so W2 stays in one window
NUM_USERS = 1_000_000
NUM_SESSION_USERS = 100_000
WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W7a", "W9")
#: a workload's own input size (rows per file, files) where --rows/--files are not given: W9 is
#: W1's query over 250 tiny batches (issue 17's per-batch overhead)
DEFAULT_SIZES = {"W9": (20, 250)}
NUM_W7_USERS = 100_000
NUM_ADS = 100_000
SCHEMAS = {
    "W1": "timestamp TIMESTAMP, value LONG",
    "W9": "timestamp TIMESTAMP, value LONG",
    "W2": "timestamp TIMESTAMP, user STRING, amount DOUBLE",
    "W3": "guid STRING, timestamp TIMESTAMP, value LONG",
    "W4": "timestamp TIMESTAMP, user STRING, amount DOUBLE",
    "W5": "timestamp TIMESTAMP, user STRING, amount DOUBLE",
    "W6": "adId LONG, impressionTime TIMESTAMP",
    "W6-clicks": "clickAdId LONG, clickTime TIMESTAMP",
    "W7": "timestamp TIMESTAMP, user LONG, amount DOUBLE",
    "W7a": "timestamp TIMESTAMP, user LONG, amount DOUBLE",
}
W3_DUPLICATE_RATE = 0.10
#: Session windows refuse update mode (Spark's analysis), so W4 runs in append mode.
OUTPUT_MODES = {"W4": "append", "W6": "append"}
#: workloads with no batch floor, and why (W7: measured 2026-11-27 with and without the RocksDB
#: provider)
NO_FLOOR = {
    "W7a": "no batch form: Spark refuses applyInPandasWithState in a batch query",
    "W7": "no batch floor: Spark 4.1's batch transformWithStateInPandas fails on this query (CANNOT_LOAD_STATE_STORE)",
}
#: Spark's transformWithState needs its RocksDB state store provider (statestream ignores it)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def data_dir(workload: str, rows: int, files: int) -> Path:
    return DATA / f"{workload}-{rows}x{files}"


def generate(workload: str, rows: int, files: int, seed: int = 42) -> Path:
    """Write the workload's input files unless a complete set is already there.

    Vectorised with numpy and written with pyarrow, so 10 x 1M rows take seconds. A ``_DONE``
    marker makes an interrupted generation start over instead of benchmarking half the data.
    File mtimes are set one second apart because the file source admits files oldest first.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = data_dir(workload, rows, files)
    if (out / "_DONE").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.rglob("*.parquet"):
        old.unlink()
    rng = np.random.default_rng(seed)
    mtime0 = time.time() - 10 * files - 60
    for i in range(files):
        if workload in ("W1", "W9"):
            # Event time advances 10 s per file; 1 % of the rows arrive up to 60 s late.
            t_us = (BASE_EPOCH_S + 10 * i) * 1_000_000 + rng.integers(0, 10_000_000, rows)
            late = rng.random(rows) < 0.01
            t_us[late] -= rng.integers(0, 60_000_000, int(late.sum()))
            table = pa.table(
                {
                    "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                    "value": pa.array(rng.integers(0, 1_000_000, rows), pa.int64()),
                }
            )
        elif workload in ("W2", "W5"):
            # Ten files spread over 50 minutes of one hour-aligned window.
            span_us = 300 * 1_000_000
            t_us = BASE_EPOCH_S * 1_000_000 + i * span_us + rng.integers(0, span_us, rows)
            ids = pa.array(rng.integers(0, NUM_USERS, rows), pa.int64())
            users = pc.binary_join_element_wise("u", pc.utf8_lpad(pc.cast(ids, pa.string()), 7, "0"), "")
            table = pa.table(
                {
                    "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                    "user": users,
                    "amount": pa.array(np.round(rng.gamma(2.0, 20.0, rows), 2), pa.float64()),
                }
            )
        elif workload == "W3":
            table = _w3_file(rng, i, rows)
        elif workload in ("W7", "W7a"):
            # File i spans event time [60 i, 60 i + 60) s; users drawn from 100,000.
            t_us = (BASE_EPOCH_S + 60 * i) * 1_000_000 + rng.integers(0, 60_000_000, rows)
            table = pa.table(
                {
                    "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                    "user": pa.array(rng.integers(0, NUM_W7_USERS, rows), pa.int64()),
                    "amount": pa.array(np.round(rng.gamma(2.0, 20.0, rows), 2), pa.float64()),
                }
            )
        elif workload == "W6":
            impressions, clicks = _w6_files(rng, i, rows)
            for side, side_table in (("impressions", impressions), ("clicks", clicks)):
                (out / side).mkdir(exist_ok=True)
                side_path = out / side / f"part-{i:05d}.parquet"
                pq.write_table(side_table, side_path)
                os.utime(side_path, (mtime0 + i, mtime0 + i))
            continue
        elif workload == "W4":
            # File i spans event time [3 i, 3 i + 3) minutes. User u is active in file i when
            # (u + i) % 4 < 2: two files on, two files (6 minutes, more than the 5 minute gap)
            # off, so its session grows over two batches and is closed by the watermark later.
            span_us = 180 * 1_000_000
            active = np.flatnonzero((np.arange(NUM_SESSION_USERS) + i) % 4 < 2)
            ids = pa.array(active[rng.integers(0, len(active), rows)], pa.int64())
            t_us = (BASE_EPOCH_S + 180 * i) * 1_000_000 + rng.integers(0, span_us, rows)
            late = rng.random(rows) < 0.01
            t_us[late] -= rng.integers(0, 600 * 1_000_000, int(late.sum()))
            users = pc.binary_join_element_wise("u", pc.utf8_lpad(pc.cast(ids, pa.string()), 6, "0"), "")
            table = pa.table(
                {
                    "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                    "user": users,
                    "amount": pa.array(np.round(rng.gamma(2.0, 20.0, rows), 2), pa.float64()),
                }
            )
        else:
            raise ValueError(f"unknown workload {workload!r}")
        path = out / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (mtime0 + i, mtime0 + i))
    (out / "_DONE").write_text(json.dumps({"rows": rows, "files": files, "seed": seed}))
    return out


def _w6_files(rng: Any, i: int, rows: int) -> tuple[Any, Any]:
    """File ``i`` of W6's two inputs: ``rows`` impressions of ads drawn from 100,000, at event
    times in [600 i, 600 i + 600) s, and ``rows`` clicks, each on the ad of a random impression of
    the same file, 0 to 50 s after it. An ad has about ten impressions per file, a minute apart on
    average, so a click falls in the one-minute range of one or two of them."""
    import numpy as np
    import pyarrow as pa

    span_us = 600 * 1_000_000
    ads = rng.integers(0, NUM_ADS, rows)
    t_us = (BASE_EPOCH_S + 600 * i) * 1_000_000 + rng.integers(0, span_us, rows)
    pick = rng.integers(0, rows, rows)
    click_us = t_us[pick] + rng.integers(0, 50_000_000, rows)
    impressions = pa.table({"adId": pa.array(ads, pa.int64()), "impressionTime": pa.array(t_us, pa.timestamp("us", tz="UTC"))})
    clicks = pa.table(
        {"clickAdId": pa.array(ads[pick], pa.int64()), "clickTime": pa.array(np.asarray(click_us), pa.timestamp("us", tz="UTC"))}
    )
    return impressions, clicks


def _w3_file(rng: Any, i: int, rows: int) -> Any:
    """File ``i`` of W3: ``rows`` events, of which 10 % exactly repeat an event (same guid, time
    and value), half of them from this file and half from file ``i - 1`` (the events of a file are
    regenerated from their ids, so no state is kept between files). Event time of file i is in
    [10 i, 10 i + 10) s, so with a 10 s watermark the previous file's events are still in state."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n_dup = int(rows * W3_DUPLICATE_RATE)
    n_new = rows - n_dup

    def events(file_index: int, local_ids: Any) -> tuple[Any, Any, Any]:
        ids = np.asarray(local_ids, dtype=np.int64) + file_index * 10**9
        # a deterministic time and value per event id (a multiplicative hash), so a repeat is exact
        h = (ids * 2654435761) % (2**32)
        t_us = (BASE_EPOCH_S + 10 * file_index) * 1_000_000 + (h % 10_000_000)
        return ids, t_us, (h >> 8) % 1_000_000

    new_ids, new_t, new_v = events(i, np.arange(n_new))
    n_prev = n_dup // 2 if i > 0 else 0
    same = events(i, rng.integers(0, n_new, n_dup - n_prev))
    prev = events(i - 1, rng.integers(0, n_new, n_prev)) if n_prev else (np.empty(0, np.int64),) * 3
    ids = np.concatenate([new_ids, same[0], prev[0]])
    t_us = np.concatenate([new_t, same[1], prev[1]])
    values = np.concatenate([new_v, same[2], prev[2]])
    order = rng.permutation(len(ids))
    guids = pc.binary_join_element_wise("g", pc.utf8_lpad(pc.cast(pa.array(ids[order]), pa.string()), 12, "0"), "")
    return pa.table(
        {
            "guid": guids,
            "timestamp": pa.array(t_us[order], pa.timestamp("us", tz="UTC")),
            "value": pa.array(values[order], pa.int64()),
        }
    )


# --------------------------------------------------------------------------------------------
# Queries (one builder for both engines: the API is the same)
# --------------------------------------------------------------------------------------------


def build_query(workload: str) -> Callable[[Any], Any]:
    from pyspark.sql import functions as F

    if workload in ("W1", "W9"):

        def w1(df: Any) -> Any:
            return (
                df.withWatermark("timestamp", "20 seconds")
                .groupBy(F.window("timestamp", "5 seconds").alias("group"))
                .agg(F.count("value").alias("value_count"))
            )

        return w1

    if workload == "W6":

        def w6(impressions: Any, clicks: Any) -> Any:
            return impressions.withWatermark("impressionTime", "2 minutes").join(
                clicks.withWatermark("clickTime", "3 minutes"),
                F.expr("clickAdId = adId AND clickTime >= impressionTime AND clickTime <= impressionTime + interval 1 minute"),
            )

        return w6

    if workload == "W7":

        def w7(df: Any) -> Any:
            return (
                df.withWatermark("timestamp", "30 seconds")
                .groupBy("user")
                .transformWithStateInPandas(RunningTotal(), "user LONG, total DOUBLE, count LONG, final BOOLEAN", "Update", "EventTime")
            )

        return w7

    if workload == "W7a":

        def w7a(df: Any) -> Any:
            return (
                df.withWatermark("timestamp", "30 seconds")
                .groupBy("user")
                .applyInPandasWithState(
                    running_total,
                    "user LONG, total DOUBLE, count LONG, final BOOLEAN",
                    "total DOUBLE, count LONG, amounts ARRAY<DOUBLE>, last LONG",
                    "Update",
                    "EventTimeTimeout",
                )
            )

        return w7a

    if workload == "W3":

        def w3(df: Any) -> Any:
            return df.withWatermark("timestamp", "10 seconds").dropDuplicates(["guid", "timestamp"])

        return w3
    if workload == "W4":

        def w4(df: Any) -> Any:
            return (
                df.withWatermark("timestamp", "1 minute")
                .groupBy("user", F.session_window("timestamp", "5 minutes"))
                .agg(F.count("*").alias("events"), F.sum("amount").alias("total"))
            )

        return w4

    if workload == "W5":

        def w5(df: Any) -> Any:
            return df.groupBy("user", F.window("timestamp", "1 hour")).agg(
                F.stddev("amount").alias("sd"),
                F.collect_set(F.floor(F.col("amount") / 50)).alias("bands"),
                F.percentile_approx("amount", 0.5).alias("p50"),
                F.approx_count_distinct("amount").alias("distinct_amounts"),
                F.max_by("amount", "timestamp").alias("latest"),
            )

        return w5

    def w2(df: Any) -> Any:
        return df.groupBy("user", F.window("timestamp", "1 hour")).agg(
            F.count("*").alias("n"),
            F.sum("amount").alias("total"),
            F.avg("amount").alias("mean"),
            F.max("amount").alias("largest"),
        )

    return w2


def _stateful_processor_base() -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    return StatefulProcessor


class RunningTotal(_stateful_processor_base()):  # type: ignore[misc]
    """W7's processor: a running total per user, every amount kept, final on inactivity."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.totals = handle.getValueState("totals", "total DOUBLE, count LONG")
        self.amounts = handle.getListState("amounts", "amount DOUBLE")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        import pandas as pd

        total, count = self.totals.get() if self.totals.exists() else (0.0, 0)
        latest = None
        for pdf in rows:
            for amount in pdf["amount"].tolist():
                self.amounts.appendValue((amount,))
            total += float(pdf["amount"].sum())
            count += len(pdf)
            t = pdf["timestamp"].max()
            latest = t if latest is None or t > latest else latest
        self.totals.update((total, count))
        for old in self.handle.listTimers():
            self.handle.deleteTimer(old)
        self.handle.registerTimer(int(latest.timestamp() * 1000) + 60_000)
        yield pd.DataFrame({"user": [key[0]], "total": [total], "count": [count], "final": [False]})

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
        import pandas as pd

        total, count = self.totals.get() if self.totals.exists() else (0.0, 0)
        self.totals.clear()
        self.amounts.clear()
        yield pd.DataFrame({"user": [key[0]], "total": [total], "count": [count], "final": [True]})

    def close(self) -> None:
        pass


def running_total(key: Any, pdfs: Any, state: Any) -> Any:
    """W7a: W7's logic as an applyInPandasWithState function."""
    import pandas as pd

    if state.hasTimedOut:
        total, count, _, _ = state.get
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "total": [total], "count": [count], "final": [True]})
        return
    total, count, amounts, last = state.get if state.exists else (0.0, 0, [], 0)
    amounts = list(amounts)
    for pdf in pdfs:
        amounts.extend(pdf["amount"].tolist())
        total += float(pdf["amount"].sum())
        count += len(pdf)
        last = max(last, int(pdf["timestamp"].max().timestamp() * 1000))
    state.update((total, count, amounts, last))
    state.setTimeoutTimestamp(last + 60_000)
    yield pd.DataFrame({"user": [key[0]], "total": [total], "count": [count], "final": [False]})


# --------------------------------------------------------------------------------------------
# Child: run one engine on one workload, print a JSON result line
# --------------------------------------------------------------------------------------------


def _progress_dict(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    if isinstance(p, str):
        return json.loads(p)
    return json.loads(p.json)


def session_builder(app_name: str) -> Any:
    """The benchmarks' SparkSession builder: local[2], 4 shuffle (state) partitions, UI off, UTC."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        # every batch's progress, not the last 100 (both engines keep this many)
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
    )


def with_bench_confs(builder: Any) -> Any:
    """``builder`` with the extra Spark confs of ``BENCH_CONF`` (both engines), a comma-separated
    list such as ``spark.sql.streaming.maxBatchesToRetainInMemory=1``."""
    for item in filter(None, os.environ.get("BENCH_CONF", "").split(",")):
        key, _, value = item.partition("=")
        builder = builder.config(key.strip(), value.strip())
    return builder


def engine_for(spark: Any, engine_kind: str) -> Any:
    """What a benchmark's query runs on: ``spark`` itself (Spark's engine) or a StreamingSession."""
    if engine_kind == "spark":
        return spark
    from statestream import StreamingSession

    return StreamingSession(spark)


def child_session(app_name: str) -> Any:
    """A child process's SparkSession with the benchmarks' settings (``session_builder`` and
    ``BENCH_CONF``), on statestream's Java, its log at ERROR."""
    from statestream._jvm.java import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = with_bench_confs(session_builder(app_name)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_floor(spark: Any, workload: str, input_dir: Path) -> dict[str, Any]:
    """Spark's batch-only floor: the same query as a batch job over each input file alone.

    No state is read or written and nothing carries over between files, so this is what a
    streaming engine cannot beat on the same input: the scan, the expressions and the
    aggregation (or join, or Python function) of one batch's rows. Each file's result is
    written to Spark's ``noop`` sink, which computes every column (a ``count()`` would let the
    optimizer prune the aggregates away).
    """
    build = build_query(workload)

    def read(schema: str, path: Path) -> Any:
        return spark.read.schema(schema).parquet(str(path))

    if workload == "W6":
        pairs = zip(sorted((input_dir / "impressions").glob("*.parquet")), sorted((input_dir / "clicks").glob("*.parquet")))
        batches = [lambda a=a, b=b: build(read(SCHEMAS["W6"], a), read(SCHEMAS["W6-clicks"], b)) for a, b in pairs]
    else:
        batches = [lambda f=f: build(read(SCHEMAS[workload], f)) for f in sorted(input_dir.glob("*.parquet"))]
    durations = []
    t0 = time.perf_counter()
    for make in batches:
        t = time.perf_counter()
        make().write.format("noop").mode("overwrite").save()
        durations.append(round((time.perf_counter() - t) * 1000))
    return {
        "ok": True,
        "batches": len(durations),
        "data_batches": len(durations),
        "median_batch_ms": statistics.median(durations) if durations else None,
        "batch_ms": durations,
        "total_s": round(time.perf_counter() - t0, 2),
    }


def run_child(workload: str, engine_kind: str, input_dir: Path) -> dict[str, Any]:
    """Run the workload once on one engine inside this process and describe the run."""
    sys.path.insert(0, str(ROOT))
    try:
        from statestream._jvm.java import ensure_java

        ensure_java()
    except Exception:  # noqa: BLE001 - any failure here just means "use the machine's java"
        pass
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        session_builder(f"statestream-bench-{workload}-{engine_kind}")
        .config("spark.driver.memory", os.environ.get("BENCH_DRIVER_MEMORY", "4g"))
        .config("spark.python.worker.reuse", "true")
    )
    if workload == "W7" and engine_kind == "spark":
        builder = builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    builder = with_bench_confs(builder)
    if engine_kind == "floor":
        if workload in NO_FLOOR:
            return {"workload": workload, "engine": engine_kind, "ok": False, "error": NO_FLOOR[workload]}
        # the plan a streaming engine runs, minus the state: no AQE (both engines turn it off
        # for their batches) and no broadcast join (a stream-stream join never broadcasts)
        builder = builder.config("spark.sql.adaptive.enabled", "false").config("spark.sql.autoBroadcastJoinThreshold", "-1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"workload": workload, "engine": engine_kind}
    try:
        result.update(run_floor(spark, workload, input_dir) if engine_kind == "floor" else run_stream(spark, workload, engine_kind, input_dir))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which keeps going
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()][:4]
        result.update(ok=False, error=f"{type(exc).__name__}: {' | '.join(lines)[:600]}")
    finally:
        spark.stop()
    return result


def run_stream(spark: Any, workload: str, engine_kind: str, input_dir: Path) -> dict[str, Any]:
    """Run the workload's streaming query on Spark's engine or statestream; its figures."""
    engine = engine_for(spark, engine_kind)
    counts: dict[int, int] = {}
    wall: dict[int, float] = {}
    last = [time.perf_counter()]

    def sink(df: Any, batch_id: int) -> None:
        counts[int(batch_id)] = df.count()
        now = time.perf_counter()
        wall[int(batch_id)] = now - last[0]
        last[0] = now

    checkpoint = tempfile.mkdtemp(prefix=f"bench-{workload}-{engine_kind}-")
    def read(schema: str, path: Path) -> Any:
        return engine.readStream.format("parquet").schema(schema).option("maxFilesPerTrigger", 1).load(str(path))

    if workload == "W6":
        built = build_query(workload)(read(SCHEMAS["W6"], input_dir / "impressions"), read(SCHEMAS["W6-clicks"], input_dir / "clicks"))
    else:
        built = build_query(workload)(read(SCHEMAS[workload], input_dir))
    t0 = time.perf_counter()
    last[0] = t0
    query = (
        built
        .writeStream.outputMode(OUTPUT_MODES.get(workload, "update"))
        .foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .queryName(f"bench_{workload}_{engine_kind}")
        .start()
    )
    query.awaitTermination()
    total = time.perf_counter() - t0
    progress = [_progress_dict(p) for p in (query.recentProgress or [])]
    # executed batches only: an idle trigger's progress (no addBatch) is in recentProgress too
    progress = [p for p in progress if "addBatch" in (p.get("durationMs") or {})]
    data = [p for p in progress if (p.get("numInputRows") or 0) > 0]
    durations = [int(p["batchDuration"]) for p in data if "batchDuration" in p]
    phases = sorted({k for p in data for k in (p.get("durationMs") or {})})
    phase_ms = {
        k: statistics.median(int((p.get("durationMs") or {}).get(k, 0)) for p in data) for k in phases
    } if data else {}
    last_state = (progress[-1].get("stateOperators") or [{}])[0] if progress else {}
    state_bytes = last_state.get("memoryUsedBytes")
    return dict(
        ok=True,
        batches=len(progress),
        data_batches=len(data),
        input_rows=sum(int(p.get("numInputRows") or 0) for p in progress),
        output_rows=sum(counts.values()),
        median_batch_ms=statistics.median(durations) if durations else None,
        batch_ms=durations,
        phase_median_ms=phase_ms,
        # where the first batch's warm-up goes (the JVM compiles, Python workers start)
        first_batch_phases_ms=dict((data[0].get("durationMs") or {})) if data else {},
        sink_wall_ms=[round(wall[k] * 1000) for k in sorted(wall)],
        total_s=round(total, 2),
        state_rows=last_state.get("numRowsTotal"),
        state_memory_bytes=state_bytes,
    )


# --------------------------------------------------------------------------------------------
# Parent: memory sampling around each child
# --------------------------------------------------------------------------------------------


def _tree_rss(pid: int) -> dict[int, tuple[str, int, int]]:
    """RSS in bytes of ``pid`` and all its descendants, per process as ``{pid: (name, rss,
    file-backed part of rss)}`` (psutil if present, else /proc). The file-backed part (mapped
    files and shared libraries) is what the kernel can drop under memory pressure: statestream's
    state versions kept on local disk are there.

    A child caught between ``vfork``/``posix_spawn`` and ``exec`` (the JVM spawns such helpers
    for Hadoop's local file system calls) still shares its parent's address space and reports
    the parent's full RSS; counting it would double the JVM. Such a child is recognised by
    reporting its parent's virtual size (or RSS) and is left out.
    """
    try:
        import psutil
    except ImportError:
        psutil = None  # type: ignore[assignment]
    if psutil is not None:
        try:
            proc = psutil.Process(pid)
            procs = [proc] + proc.children(recursive=True)
        except psutil.NoSuchProcess:
            return {}
        mem: dict[int, tuple[str, int, int, int, int]] = {}
        for p in procs:
            try:
                m = p.memory_info()
                mem[p.pid] = (p.name(), m.rss, m.vms, p.ppid(), getattr(m, "shared", 0))
            except psutil.NoSuchProcess:
                pass
        return _without_shared_vm(mem)
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, int, int, int, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                head, rest = fh.read().rsplit(")", 1)
            ppid = int(rest.split()[1])
            with open(f"/proc/{entry}/statm") as fh:
                size, resident, shared = (int(x) * page for x in fh.read().split()[:3])
            info[int(entry)] = (head.split("(", 1)[1], resident, size, ppid, shared)
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, stack = {}, [pid]
    while stack:
        p = stack.pop()
        if p in info:
            tree[p] = info[p]
        stack.extend(children.get(p, []))
    return _without_shared_vm(tree)


def _pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (``/proc/<pid>/smaps_rollup``); 0 for a
    process that ended or holds no memory (a zombie's file has no ``Pss`` line).

    Why beside RSS: a page several processes map (the Python workers forked from PySpark's
    daemon share their imported modules; two workers may map the same state file) counts in
    each one's RSS, so a sum of RSS counts it once per process. PSS divides it among them (also
    with processes outside the tree, for shared libraries).

    Reading it walks the process's page tables: about 13 ms per GB of RSS on a 2-core VM, so
    Spark's 8.5 GB JVM would cost half a core at the RSS sampling rate and slow the engine
    measured, the bigger one most. It is therefore read only with ``BENCH_PSS=1``, and at most
    once every ``PSS_INTERVAL_S``: take timings from runs without it."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


#: whether to sample PSS (``BENCH_PSS=1``; see :func:`_pss`) and whether this kernel gives
#: ``smaps_rollup`` (Linux 4.14 and later)
_SAMPLE_PSS = os.environ.get("BENCH_PSS") == "1" and os.path.exists("/proc/self/smaps_rollup")
#: the least time between two PSS samples
PSS_INTERVAL_S = 1.0


def _without_shared_vm(mem: dict[int, tuple[str, int, int, int, int]]) -> dict[int, tuple[str, int, int]]:
    """Drop children that share their parent's address space (see :func:`_tree_rss`)."""
    out = {}
    for pid, (name, rss, vms, ppid, shared) in mem.items():
        parent = mem.get(ppid)
        # Same virtual size, or nearly the same RSS (the two reads are not simultaneous).
        if parent is not None and (parent[2] == vms or abs(parent[1] - rss) <= 0.02 * parent[1]):
            continue
        out[pid] = (name, rss, shared)
    return out


def byte_compile_statestream() -> None:
    """Write the bytecode of statestream's modules, as ``pip install`` does for an installed package.

    A checkout run with ``PYTHONDONTWRITEBYTECODE`` set (as on the machines these figures come
    from) otherwise compiles every statestream module from source in each new process: the
    driver, and the Python daemon that the workers fork from. PySpark, installed, has its
    bytecode; measuring statestream without its own would charge it for its installation, not
    for its engine. Cheap when up to date (``compileall`` compares the sources' times).
    """
    import compileall

    compileall.compile_dir(str(ROOT / "statestream"), quiet=1)


def run_engine(workload: str, engine_kind: str, input_dir: Path) -> dict[str, Any]:
    """Start a child for one engine, sample its process tree's memory, return its result."""
    byte_compile_statestream()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", workload, engine_kind, str(input_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    peak = [0]
    peak_pss = [0]
    pss_sampled = [0.0]
    per_process: dict[str, int] = {}  # peak RSS per process name (java, python3, ...)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            procs = _tree_rss(proc.pid)
            peak[0] = max(peak[0], sum(rss for _, rss, _ in procs.values()))
            if _SAMPLE_PSS and time.monotonic() - pss_sampled[0] >= PSS_INTERVAL_S:
                pss_sampled[0] = time.monotonic()
                peak_pss[0] = max(peak_pss[0], sum(_pss(pid) for pid in procs))
            by_name: dict[str, int] = {}
            for pid, (name, rss, shared) in procs.items():
                # the child itself is the driver's Python; any other Python in the tree is
                # PySpark's worker daemon or one of its workers
                if name.startswith("python"):
                    name = "python (driver)" if pid == proc.pid else "python (workers)"
                    if pid != proc.pid:
                        by_name["python (largest worker)"] = max(by_name.get("python (largest worker)", 0), rss)
                        anon = by_name.get("python (workers, not file-backed)", 0) + rss - shared
                        by_name["python (workers, not file-backed)"] = anon
                by_name[name] = by_name.get(name, 0) + rss
            for name, rss in by_name.items():
                per_process[name] = max(per_process.get(name, 0), rss)
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    stop.set()
    sampler.join()
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    if line is None:
        tail = "\n".join(err.strip().splitlines()[-5:])
        return {"workload": workload, "engine": engine_kind, "ok": False, "error": f"child failed:\n{tail}"}
    res = json.loads(line)
    res["peak_rss_mb"] = round(peak[0] / 2**20)
    res["peak_pss_mb"] = round(peak_pss[0] / 2**20) if peak_pss[0] else None
    res["peak_rss_mb_by_process"] = {k: round(v / 2**20) for k, v in sorted(per_process.items())}
    return res


def _pss_text(res: dict[str, Any]) -> str:
    return f" (PSS {res['peak_pss_mb']} MB)" if res.get("peak_pss_mb") else ""


def _fmt(res: dict[str, Any]) -> str:
    if not res.get("ok"):
        return f"  {res['engine']:<6} FAILED: {res.get('error')}"
    if res["engine"] == "floor":
        return (
            f"  floor  median batch {res['median_batch_ms']} ms | total {res['total_s']} s | "
            f"peak RSS {res['peak_rss_mb']} MB (Spark batch jobs, one per file, no state)\n"
            f"         batch ms {res['batch_ms']}"
        )
    return (
        f"  {res['engine']:<6} median data batch {res['median_batch_ms']} ms | total {res['total_s']} s | "
        f"peak RSS {res['peak_rss_mb']} MB{_pss_text(res)} | batches {res['batches']} ({res['data_batches']} with data) | "
        f"input {res['input_rows']} rows | sink rows {res['output_rows']} | state rows {res['state_rows']}\n"
        f"         batch ms {res['batch_ms']}\n"
        f"         median ms by phase {res.get('phase_median_ms')}\n"
        f"         peak RSS by process (MB) {res.get('peak_rss_mb_by_process')}"
    )


ENGINE_CHOICES = {"spark": ["spark"], "ours": ["ours"], "floor": ["floor"], "both": ["spark", "ours"], "all": ["spark", "ours", "floor"]}


def workload_size(workload: str, rows: int | None = None, files: int | None = None) -> tuple[int, int]:
    """Rows per file and files of a workload: the given ones, else its own default."""
    default_rows, default_files = DEFAULT_SIZES.get(workload, (1_000_000, 10))
    return (default_rows if rows is None else rows, default_files if files is None else files)


def run_workload(workload: str, engines: list[str], rows: int | None = None, files: int | None = None) -> list[dict[str, Any]]:
    """Run one workload on each engine (a child process each), print and return the results."""
    t = time.perf_counter()
    rows, files = workload_size(workload, rows, files)
    input_dir = generate(workload, rows, files)
    print(f"{workload}: {files} files x {rows} rows in {input_dir} (ready in {time.perf_counter() - t:.1f} s)")
    by_engine = {}
    for eng in engines:
        res = run_engine(workload, eng, input_dir)
        res.update(rows_per_file=rows, files=files)
        by_engine[eng] = res
        print(_fmt(res), flush=True)
    s, o, f = by_engine.get("spark"), by_engine.get("ours"), by_engine.get("floor")
    if s and o and s.get("ok") and o.get("ok") and s["median_batch_ms"] and o["median_batch_ms"]:
        print(
            f"  ratio ours/Spark: median batch {o['median_batch_ms'] / s['median_batch_ms']:.2f}x, "
            f"total {o['total_s'] / s['total_s']:.2f}x, peak RSS {o['peak_rss_mb'] / s['peak_rss_mb']:.2f}x"
        )
    elif s and o:
        print("  ratio ours/Spark: n/a (both sides must run)")
    if f and f.get("ok"):
        for name, side in (("ours", o), ("Spark", s)):
            if side and side.get("ok") and f["total_s"]:
                print(f"  {name}/floor: total {side['total_s'] / f['total_s']:.2f}x")
    return list(by_engine.values())


def save_results(results: list[dict[str, Any]], path: Path | None = None, **extra: Any) -> Path:
    """Write a run's results to ``path`` (default ``bench/results/bench-<time>.json``); returns it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = path or RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({**extra, "results": results}, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _, workload, engine_kind, input_dir = argv
        print(json.dumps(run_child(workload, engine_kind, Path(input_dir))), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="all", choices=[*WORKLOADS, "all"])
    ap.add_argument("--rows", type=int, default=None, help="rows per input file (default 1,000,000; W9: 20)")
    ap.add_argument("--files", type=int, default=None, help="input files = data batches (default 10; W9: 250)")
    ap.add_argument(
        "--engine", default="both", choices=list(ENGINE_CHOICES),
        help="both = Spark's engine and statestream; floor = Spark batch jobs without state; all = the three",
    )
    args = ap.parse_args(argv)

    workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    all_results = []
    for wl in workloads:
        all_results.extend(run_workload(wl, ENGINE_CHOICES[args.engine], args.rows, args.files))
    out = save_results(all_results, rows=args.rows, files=args.files)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
