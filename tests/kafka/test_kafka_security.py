"""Kafka over TLS with a SASL login, as a Spark user configures it (``kafka.security.protocol``,
``kafka.sasl.jaas.config``, a PEM trust store), against a broker that refuses anything else; the
password never shows in logs, progress, the checkpoint or an error; a wrong password or an
unreachable broker fails the query saying so."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import run_stream
from tests.kafka.test_kafka_source import KAFKA_DDL, Topic, events, read_topic, windowed_count


@pytest.fixture
def ours(spark):
    from statestream import StreamingSession

    return StreamingSession(spark)


def _reader(session, options: dict[str, str], topic: str):
    reader = session.readStream.format("kafka").option("subscribe", topic).option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _files_under(path) -> list[bytes]:
    out = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out.append(f.read())
    return out


def test_sasl_ssl_source_and_sink_equal_spark_and_keep_the_password(spark, ours, secure_kafka, tmp_path, caplog):
    """A windowed count read over SASL_SSL and written back over SASL_SSL: the records written
    are what Spark's engine computes from the same input; the password is nowhere in the
    driver's logs (librdkafka's included), the progress or the checkpoint's files."""
    caplog.set_level(logging.DEBUG, logger="statestream")
    secret = secure_kafka.password
    source = Topic(secure_kafka.bootstrap, 2, conf=secure_kafka.client_conf())
    sink = Topic(secure_kafka.bootstrap, 1, conf=secure_kafka.client_conf())
    rows = [source.produce(events(b, 8, 2)) for b in range(3)]

    def build(df):
        return windowed_count(df).select(F.col("k").alias("key"), F.to_json(F.struct("window", "k", "c", "s")).alias("value"))

    writer = build(_reader(ours, secure_kafka.spark_options(), source.name)).writeStream.format("kafka")
    for k, v in secure_kafka.spark_options().items():
        writer = writer.option(k, v)
    query = (
        writer.option("topic", sink.name).option("checkpointLocation", str(tmp_path / "ck"))
        .outputMode("append").trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    reference = run_stream(spark, build, rows, KAFKA_DDL, "append", tmp_path)
    expected = sorted((r["key"], r["value"]) for b in reference.batches for r in b.rows)
    assert expected, "the reference emitted nothing: the test would prove nothing"
    written = read_topic(secure_kafka.bootstrap, sink.name, len(expected), conf=secure_kafka.client_conf())
    assert sorted((m.key().decode(), m.value().decode()) for m in written) == expected
    assert secure_kafka.front.failed_logins == 0

    assert any("Kafka source" in r.getMessage() for r in caplog.records), "the client settings were not logged: nothing checked"
    assert secret not in caplog.text
    assert secret not in json.dumps(query.recentProgress, default=str)
    assert not [b for b in _files_under(tmp_path / "ck") if secret.encode() in b]


def test_the_front_refuses_a_client_without_the_login(secure_kafka):
    """The check above would prove nothing if the broker let anyone in: a client that speaks
    TLS but does not log in gets no metadata."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = {k: v for k, v in secure_kafka.client_conf().items() if not k.startswith("sasl.")}
    conf.update({"security.protocol": "SSL", "logger": logging.getLogger("tests.kafka.client")})
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=3)


def test_a_wrong_password_fails_the_query_naming_the_login(ours, secure_kafka, tmp_path):
    """The login refused: the query stops within seconds (not at the request timeout) with an
    error that names the refusal and the options to check, without the password tried."""
    from pyspark.errors import StreamingQueryException

    wrong = "wrong-" + secure_kafka.password[::-1]
    topic = Topic(secure_kafka.bootstrap, 1, conf=secure_kafka.client_conf())
    before = secure_kafka.front.failed_logins
    df = _reader(ours, secure_kafka.spark_options(password=wrong), topic.name)
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    t0 = time.monotonic()
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(60)
    assert time.monotonic() - t0 < 20
    text = str(info.value)
    assert "refused the connection" in text and "Authentication failed: Invalid username or password" in text
    assert "'kafka.sasl.*'" in text and wrong not in text
    assert secure_kafka.front.failed_logins > before


def test_an_unreachable_broker_fails_the_query_naming_the_servers(ours, tmp_path):
    """Nothing listens at the address: the query stops after the request timeout the user set
    (the Java client's ``default.api.timeout.ms``), naming the servers and the option."""
    import socket

    from pyspark.errors import StreamingQueryException

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there
    df = _reader(ours, {"kafka.bootstrap.servers": address, "kafka.default.api.timeout.ms": "2000"}, "t")
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(StreamingQueryException, match=rf"no answer from the brokers at '{address}' \(option 'kafka.bootstrap.servers'\)"):
        query.awaitTermination(60)
