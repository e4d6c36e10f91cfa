"""statestream and Spark Connect: a Connect server started from the PySpark package, on loopback.

statestream plans each micro-batch through the driver's JVM (py4j), which a Connect client does
not have, so ``StreamingSession`` over a session from ``SparkSession.builder.remote(...)`` must
fail at once with an error that says so and what to do (README, "Spark Connect"), not with an
``AttributeError`` somewhere in the planner. The server is PySpark's own
``org.apache.spark.sql.connect.service.SparkConnectServer`` (its jar ships in ``pyspark/jars``),
started through ``bin/spark-submit``; the client runs in a child process, since a process with
a classic SparkSession cannot also hold a Connect one. The child also shows that the server
really serves: a batch query and Spark's own streaming engine (a rate source into the memory
sink) answer over the same channel, so the refusal is statestream's, not a broken server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.crash.test_crash_recovery import _kill_session

ROOT = Path(__file__).resolve().parents[2]

CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    out = {"count": spark.range(5).count()}
    q = spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream.format("memory").queryName("r").start()
    deadline = time.time() + 120
    while time.time() < deadline and not spark.sql("select count(*) c from r").collect()[0].c:
        time.sleep(0.5)
    out["spark_streaming_rows"] = spark.sql("select count(*) c from r").collect()[0].c
    q.stop()
    from statestream import StreamingSession
    try:
        StreamingSession(spark)
        out["error"] = None
    except Exception as exc:
        out["error"] = [type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc)]
    print("RESULT " + json.dumps(out), flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the Connect server exited ({proc.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"the Connect server did not listen on {port} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    pytest.importorskip("grpc", reason="the test extras install grpcio (pyspark's Connect client needs it)")
    import pyspark

    from statestream._jvm.java import ensure_java

    ensure_java()
    work = tmp_path_factory.mktemp("connect")
    port = _free_port()
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    log = work / "server.log"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(submit),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", "local[2]",
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", f"spark.sql.streaming.checkpointLocation={work / 'ckpt'}",
                "spark-internal",
            ],
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        _wait_for_port(port, proc, log)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _kill_session(proc.pid)
        proc.wait()


@pytest.mark.slow
def test_streaming_session_over_spark_connect_says_why_not(connect_server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_CONNECT", "SPARK_REMOTE"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    run = subprocess.run(
        [sys.executable, "-c", CLIENT, connect_server], env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, f"the Connect client failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["count"] == 5
    assert out["spark_streaming_rows"] > 0, "Spark's own streaming over Connect produced nothing"
    assert out["error"] is not None, "StreamingSession accepted a Connect session"
    name, mro, text = out["error"]
    assert name == "NotSupportedYetError" and "NotImplementedError" in mro, out["error"]
    assert "Spark Connect session" in text and "classic SparkSession" in text and "py4j" in text, text
    assert "statestream connect-server" in text, text
