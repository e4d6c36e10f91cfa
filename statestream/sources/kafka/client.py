"""The Kafka client configuration shared by the driver's offset reader and the tasks' readers:
the user's ``kafka.*`` options in librdkafka's terms (confluent-kafka's client), with what
Spark forces on its consumers (no auto commit, its own group id), and the Java-only
settings translated or named when dropped (never silently)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from statestream.errors import kafka_client_missing_error, kafka_key_store_type_error, kafka_trust_store_type_error

__all__ = ["ClientErrors", "client_config", "consumer_config", "producer_config", "require_client"]

log = logging.getLogger(__name__)

#: Java client settings with no librdkafka equivalent: they do not apply to this client
_JAVA_ONLY = {
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "ssl.truststore.password",
    "default.api.timeout.ms",
    "request.timeout.ms",
    "retry.backoff.ms",
    "max.poll.records",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
}


def require_client(what: str) -> None:
    """Fail early, naming the missing package, when confluent-kafka is not installed (Spark's
    own connector is a separate package too)."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise kafka_client_missing_error(what) from None


def _jaas_credentials(jaas: str) -> dict[str, str]:
    """The options of a ``sasl.jaas.config`` as librdkafka's settings: username/password of a
    PLAIN or SCRAM login, keytab/principal of a Kerberos one."""
    found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', jaas))
    names = {"username": "sasl.username", "password": "sasl.password", "keyTab": "sasl.kerberos.keytab", "principal": "sasl.kerberos.principal"}
    return {names[k]: v for k, v in found.items() if k in names}


#: the first bytes of a Java KeyStore (JKS) file, a format only Java reads
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


def _store_type(params: Mapping[str, str], kind: str) -> str:
    """The format of the ``ssl.<kind>store.location`` file: the ``ssl.<kind>store.type`` given,
    else read off the file (PEM text, a JKS magic number, or PKCS12), else Java's default, JKS."""
    given = params.get(f"ssl.{kind}store.type")
    if given:
        return given.upper()
    try:
        with open(params[f"ssl.{kind}store.location"], "rb") as f:
            head = f.read(64)
    except OSError:
        return "JKS"
    if head.lstrip().startswith(b"-----BEGIN"):
        return "PEM"
    return "JKS" if head.startswith(_JKS_MAGIC) else "PKCS12"


def _tls_stores(params: Mapping[str, str]) -> dict[str, str]:
    """The Java client's trust and key stores in librdkafka's terms, or an error that says
    what to give instead: librdkafka reads PEM certificates and PKCS12 key stores, never JKS.

    A PEM trust store is ``ssl.ca.location``; a PKCS12 key store keeps its name; a PEM key store
    holds the certificate and the key (``ssl.certificate.location``/``ssl.key.location``). Kafka's
    inline PEM settings become librdkafka's ``*.pem`` ones."""
    out: dict[str, str] = {}
    if "ssl.truststore.location" in params:
        kind = _store_type(params, "trust")
        if kind != "PEM":
            raise kafka_trust_store_type_error(kind)
        out["ssl.ca.location"] = params["ssl.truststore.location"]
    if "ssl.keystore.location" in params:
        kind = _store_type(params, "key")
        location = params["ssl.keystore.location"]
        if kind == "PEM":
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
        elif kind == "PKCS12":
            out["ssl.keystore.location"] = location
            if "ssl.keystore.password" in params:
                out["ssl.keystore.password"] = params["ssl.keystore.password"]
        else:
            raise kafka_key_store_type_error(kind)
    if "ssl.key.password" in params:
        out["ssl.key.password"] = params["ssl.key.password"]
    inline = {"ssl.truststore.certificates": "ssl.ca.pem", "ssl.keystore.certificate.chain": "ssl.certificate.pem", "ssl.keystore.key": "ssl.key.pem"}
    out.update({inline[k]: v for k, v in params.items() if k in inline})
    if params.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java's empty value turns the check off
    return out


_TLS_KEYS = frozenset({
    "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.location", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.endpoint.identification.algorithm",
})


class ClientErrors:
    """What librdkafka reports through its error callback, kept for the error a caller raises:
    a failed login or TLS handshake shows up there only, while the request that needed the
    connection just times out. Messages are kept with the client's secrets masked."""

    #: librdkafka's error names that no retry can mend: the settings are wrong
    FATAL = ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED", "_INVALID_ARG")

    def __init__(self, secrets: "list[str] | None" = None) -> None:
        self.last: str | None = None
        self.fatal: str | None = None
        self._secrets = [s for s in (secrets or []) if s]

    def __call__(self, err: Any) -> None:
        text = str(err.str() if hasattr(err, "str") else err)
        for secret in self._secrets:
            text = text.replace(secret, "*********(redacted)")
        name = err.name() if hasattr(err, "name") else ""
        if name != "_ALL_BROKERS_DOWN" or self.last is None:  # keep the more telling cause
            self.last = text
        if name in self.FATAL:
            self.fatal = text

    def attach(self, conf: dict[str, Any]) -> dict[str, Any]:
        """``conf`` with this collector as its error callback."""
        self._secrets += [str(v) for k, v in conf.items() if "password" in k or k.endswith(".pem") and "key" in k]
        conf["error_cb"] = self
        return conf


def client_config(params: Mapping[str, str]) -> dict[str, Any]:
    """The user's ``kafka.*`` parameters in librdkafka's terms, for a consumer or a producer:
    ``sasl.jaas.config`` becomes ``sasl.username``/``sasl.password``, the Java trust and key
    stores librdkafka's settings (a JKS store is an error that says what to give instead), the
    Java client's own settings are left out (named in the log), and librdkafka's log lines go
    to Python logging."""
    conf: dict[str, Any] = {}
    dropped = []
    for key, value in params.items():
        if key == "sasl.jaas.config":
            conf.update(_jaas_credentials(value))
        elif key in _JAVA_ONLY or key == "partitioner.class":
            dropped.append(key)
        elif key not in _TLS_KEYS:
            conf[key] = value
    conf.update(_tls_stores(params))
    if dropped:
        log.info("Kafka options for the Java client that this client has no use for: %s", ", ".join(sorted(dropped)))
    conf["logger"] = logging.getLogger("statestream.kafka.librdkafka")
    return conf


def consumer_config(params: Mapping[str, str], group_id: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A confluent-kafka consumer's configuration from the source's ``kafka.*`` parameters.

    ``group.id`` is the user's ``kafka.group.id`` or ``group_id``; offsets are never committed
    to Kafka (the checkpoint keeps them, as Spark's source does). The Java client's defaults
    where librdkafka's differ: uncommitted transactional records are read (librdkafka reads
    committed ones only by default)."""
    conf = client_config(params)
    conf.setdefault("group.id", group_id)
    conf.setdefault("isolation.level", "read_uncommitted")
    conf["enable.auto.commit"] = False
    conf["enable.auto.offset.store"] = False
    conf.update(extra or {})
    return conf


def producer_config(params: Mapping[str, str]) -> dict[str, Any]:
    """A confluent-kafka producer's configuration from the sink's ``kafka.*`` parameters, with
    the Java client's partitioner (murmur2 of the key; librdkafka's default is CRC32), so keyed
    records land in the partitions Spark's sink would choose."""
    conf = client_config(params)
    conf.setdefault("partitioner", "murmur2_random")
    return conf
