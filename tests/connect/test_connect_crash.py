"""The endpoint killed under a running query (its driver and JVM with it), started again, and the
client's query started again on the same checkpoint: the file sink holds what one run without the
kill writes, nothing lost or repeated."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.connect.servers import kill as _kill
from tests.connect.servers import start_endpoint as _start_endpoint
from tests.connect.test_connect_endpoint import JOBS, ROOT, _write_input

pytest.importorskip("grpc")


def _finish(url: str, data: Path, checkpoint: Path) -> dict:
    done = subprocess.run([sys.executable, str(JOBS), url, "file_sink_finish", str(data), str(checkpoint)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_killed_endpoint_restarts_the_query_from_its_checkpoint(tmp_path):
    data = tmp_path / "in"
    _write_input(data)
    checkpoint = tmp_path / "checkpoint"
    server, (url, _) = _start_endpoint(tmp_path / "first.log")
    try:
        client = subprocess.Popen([sys.executable, str(JOBS), url, "file_sink_run", str(data), str(checkpoint)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + 240
        line = ""
        while "READY" not in line and time.monotonic() < deadline and client.poll() is None:
            line = client.stdout.readline()
        assert "READY" in line, f"the query did not run two batches:\n{client.stderr.read()[-3000:] if client.poll() is not None else ''}"
    finally:
        _kill(server)  # the driver, its JVM and the query's workers, mid-query
    _kill(client)
    assert (checkpoint / "progress").is_dir(), "the query did not run on statestream"
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed, "no batch committed before the kill"

    server, (url, spark_url) = _start_endpoint(tmp_path / "second.log")
    try:
        resumed = _finish(url, data, checkpoint)
        reference = _finish(spark_url, data, tmp_path / "reference")  # one run on Spark's engine, no kill
    finally:
        _kill(server)
    assert reference["rows"], "the job wrote nothing: it tests nothing"
    assert resumed == reference
