"""What statestream's Connect endpoint costs a Spark Connect client, against Spark's own Connect
server in the same driver (issue 52).

    python3 bench/connect_overhead.py [--calls 50] [--rounds 2]

One `statestream connect-server` process serves both: Spark's Connect server (behind the
endpoint, its streaming on Spark's engine) and the endpoint. A client process (as a Connect
client is) times, against each address:

- a batch query (`spark.range(100).collect()`): the endpoint only forwards it;
- a streaming query's progress calls (`lastProgress`, `status`, `isActive`) on a running rate
  query with a memory sink: answered by Spark's server for Spark's engine, by the endpoint for
  statestream.

Each figure is the median of `--calls` calls after 5 warm-up calls, in milliseconds, from the last
of `--rounds` rounds (the first warms the driver's JVM for both).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CLIENT = r"""
import json, statistics, sys, tempfile, time
from pyspark.sql import SparkSession

url, calls = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.remote(url).getOrCreate()

def median_ms(fn):
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2)

out = {"batch collect": median_ms(lambda: spark.range(100).collect())}
query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
         .writeStream.format("memory").queryName("overhead")
         .option("checkpointLocation", tempfile.mkdtemp()).start())
deadline = time.monotonic() + 120
while query.lastProgress is None and time.monotonic() < deadline:
    time.sleep(0.2)
out["lastProgress"] = median_ms(lambda: query.lastProgress)
out["status"] = median_ms(lambda: query.status)
out["isActive"] = median_ms(lambda: query.isActive)
query.stop()
print("RESULT " + json.dumps(out))
"""


def _client(url: str, calls: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CLIENT, url, str(calls)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the client failed against {url}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="timed calls of each kind (default 50)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both clients; the last is reported (default 2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with open(log, "w") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", "statestream", "connect-server", "--port", "0", "--master", "local[2]",
                 "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4"],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            )
        try:
            urls = None
            deadline = time.monotonic() + 180
            while urls is None and time.monotonic() < deadline and server.poll() is None:
                found = re.search(r"endpoint: (sc://\S+) \(Spark's own Connect server: (sc://[^)]+)\)", log.read_text())
                urls = found.groups() if found else None
                time.sleep(0.5)
            if urls is None:
                raise RuntimeError(f"the endpoint did not start:\n{log.read_text()[-3000:]}")
            # the first round warms the driver's JVM (code generation, class loading) for both
            for _ in range(args.rounds):
                spark = _client(urls[1], args.calls)
                ours = _client(urls[0], args.calls)
        finally:
            server.terminate()
            server.wait(60)
    print(f"{'call (median ms)':<20} {'Spark Connect':>14} {'endpoint':>10} {'ratio':>7}")
    for key in spark:
        ratio = ours[key] / spark[key] if spark[key] else float("nan")
        print(f"{key:<20} {spark[key]:>14.2f} {ours[key]:>10.2f} {ratio:>7.2f}")
    print("(batch collect: forwarded by the endpoint; the progress calls: Spark's engine's query on Spark's server,")
    print(" statestream's query on the endpoint)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
