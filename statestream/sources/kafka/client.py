"""The Kafka client configuration shared by the driver's offset reader and the tasks' readers:
the user's ``kafka.*`` options in librdkafka's terms (confluent-kafka's client), with what
Spark forces on its consumers (no auto commit, its own group id), and the Java-only
settings translated or named when dropped (never silently)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["client_config", "consumer_config", "producer_config", "require_client"]

log = logging.getLogger(__name__)

#: Java client settings with no librdkafka equivalent: they do not apply to this client
_JAVA_ONLY = {
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
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
        from statestream.errors import StatestreamError

        raise StatestreamError(
            f"{what} needs the confluent-kafka package, which is not installed: pip install 'statestream[kafka]' "
            "(on a cluster, on every executor too)"
        ) from None


def _jaas_credentials(jaas: str) -> dict[str, str]:
    """username/password of a PLAIN or SCRAM ``sasl.jaas.config``, as librdkafka's settings."""
    found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', jaas))
    out = {}
    if "username" in found:
        out["sasl.username"] = found["username"]
    if "password" in found:
        out["sasl.password"] = found["password"]
    return out


def client_config(params: Mapping[str, str]) -> dict[str, Any]:
    """The user's ``kafka.*`` parameters in librdkafka's terms, for a consumer or a producer:
    ``sasl.jaas.config`` becomes ``sasl.username``/``sasl.password``, the Java client's own
    settings are left out (named in the log), and librdkafka's log lines go to Python logging."""
    conf: dict[str, Any] = {}
    dropped = []
    for key, value in params.items():
        if key == "sasl.jaas.config":
            conf.update(_jaas_credentials(value))
        elif key in _JAVA_ONLY or key == "partitioner.class":
            dropped.append(key)
        else:
            conf[key] = value
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
