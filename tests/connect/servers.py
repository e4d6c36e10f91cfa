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


def start_endpoint(log: Path) -> tuple[subprocess.Popen, tuple[str, str]]:
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "statestream", "connect-server", "--port", "0", "--master", "local[2]",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=3"],
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


def kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(60)
