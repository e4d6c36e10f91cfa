"""Starting and killing `statestream connect-server` for the Connect tests: one process serves
Spark's own Connect server and the endpoint in front of it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_endpoint(log: Path, token: str | None = None) -> tuple[subprocess.Popen, tuple[str, str]]:
    """Start the endpoint (with Spark's ``spark.connect.authenticate.token`` when ``token`` is
    given: then both servers ask for it) and return it with its URL and Spark's server's."""
    confs = ["--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=3"]
    if token is not None:
        confs += ["--conf", f"spark.connect.authenticate.token={token}"]
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "statestream", "connect-server", "--port", "0", "--master", "local[2]", *confs],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and server.poll() is None:
        found = re.search(r"endpoint: (sc://\S+) \(Spark's own Connect server: (sc://[^)]+)\)", log.read_text())
        if found:
            return server, found.groups()
        time.sleep(0.5)
    kill(server)
    raise AssertionError(f"the endpoint did not start:\n{log.read_text()[-3000:]}")


def with_token(url: str, token: str) -> str:
    """A client's URL for a server on loopback that asks for ``token``: PySpark sends a token over
    plain TCP only to ``localhost``."""
    return url.replace("127.0.0.1", "localhost") + f"/;token={token}"


def kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(60)
