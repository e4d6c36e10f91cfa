"""applyInPandasWithState: the same running-total function on Spark's engine and on statestream.

    python3 bench/apply_in_pandas_with_state.py [rows per batch] [keys]     # default 100000 10000

Four files of random (k, v) rows, one per batch, into a noop sink, update mode, local[2] with two
state partitions, both engines in one process (Spark's first). Prints each engine's
triggerExecution per data batch and the ratio of the medians of the batches after the first.
A quick figure, not W7 of issue 13 (which wants 1,000,000 rows and 100,000 keys per batch).
"""
import os
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["PYSPARK_PYTHON"] = sys.executable
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from statestream import StreamingSession

spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
KEYS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
BATCHES = 4
def running(key, pdfs, state):
    n = 0
    s = 0
    for p in pdfs:
        n += len(p)
        s += int(p["v"].sum())
    c, t = state.get if state.exists else (0, 0)
    state.update((c + n, t + s))
    yield pd.DataFrame({"k": [key[0]], "count": [c + n], "total": [t + s]})
def run(engine, label):
    d = tempfile.mkdtemp()
    os.makedirs(d + "/in")
    df = engine.readStream.schema("k LONG, v LONG").option("maxFilesPerTrigger", 1).parquet(d + "/in")
    q = (df.groupBy("k").applyInPandasWithState(running, "k LONG, count LONG, total LONG", "count LONG, total LONG", "Update", "NoTimeout")
         .writeStream.outputMode("update").format("noop").option("checkpointLocation", d + "/cp").start())
    rng = np.random.default_rng(1)
    for i in range(BATCHES):
        t = pa.table({"k": rng.integers(0, KEYS, ROWS), "v": rng.integers(0, 100, ROWS)})
        pq.write_table(t, f"{d}/in/.f{i}")
        os.rename(f"{d}/in/.f{i}", f"{d}/in/f{i}.parquet")
        q.processAllAvailable()
    ps = [p for p in q.recentProgress if p["numInputRows"]]
    q.stop()
    ms = [p["durationMs"]["triggerExecution"] for p in ps]
    print(label, ms, "median", sorted(ms)[len(ms)//2], flush=True)
    return sorted(ms[1:])[len(ms[1:])//2]
a = run(spark, "spark")
b = run(StreamingSession(spark), "ours")
print("ratio ours/spark (median, batches after the first):", round(b / a, 3))
