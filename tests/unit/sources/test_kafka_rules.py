"""The Kafka source's pure rules: option validation with Spark's texts, the offset JSON and
initial-offsets file, maxOffsetsPerTrigger's split, ranges with the data-loss checks, and the
minPartitions split. No broker, no Spark."""

from __future__ import annotations

import logging

import pytest

from statestream.errors import CheckpointError
from statestream.sources.kafka.offsets import (
    KafkaDataLossError,
    OffsetRange,
    decode_initial_offsets_file,
    encode_initial_offsets_file,
    offset_json,
    offsets_from_json,
    plan_ranges,
    rate_limited_offsets,
    split_ranges,
)
from statestream.sources.kafka.options import ConsumerStrategy, parse_source_options, redacted_params

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def refused(options) -> str:
    with pytest.raises(ValueError) as info:  # noqa: PT011 - IllegalArgumentException and NumberFormatException, texts compared by the callers
        parse_source_options(options)
    return str(info.value)


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"kafka.bootstrap.servers": "x"}, "One of the following options must be specified for Kafka source: subscribe, subscribepattern, assign. See the docs for more details."),
        ({**BASE, "assign": '{"t":[0]}'}, "Only one of the following options can be specified for Kafka source: subscribe, subscribepattern, assign. See the docs for more details."),
        ({**BASE, "subscribe": " , "}, "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
        ({"kafka.bootstrap.servers": "x", "subscribePattern": "  "}, "Pattern to subscribe is empty as specified value for option 'subscribePattern' is '  '"),
        ({"kafka.bootstrap.servers": "x", "assign": "t-0"}, "No topicpartitions to assign as specified value for option 'assign' is 't-0'"),
        ({"kafka.bootstrap.servers": "x", "assign": "{t}"}, 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got {t}'),
        ({**BASE, "endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
        ({**BASE, "endingOffsetsByTimestamp": "{}"}, "ending timestamp not valid in streaming queries"),
        ({**BASE, "minPartitions": "0"}, "minPartitions must be positive"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "Kafka option 'enable.auto.commit' is not supported"),
        ({**BASE, "kafka.interceptor.classes": "x"}, "Kafka option 'interceptor.classes' is not supported"),
        ({"subscribe": "t"}, "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"),
        ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "The value of minOffsetPerTrigger(10) is higher than the maxOffsetsPerTrigger(5)."),
        ({**BASE, "startingOffsets": "{bad"}, 'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {bad'),
        ({**BASE, "startingTimestamp": "soon"}, "Expected a single long value, got soon"),
    ],
)
def test_options_refused_with_sparks_text(options, text):
    assert refused(options) == text


def test_load_checks_shapes_only_the_query_start_parses():
    from statestream.sources.kafka.options import validate_stream_options

    # the assign JSON is parsed at query start: at load() the missing servers come first
    with pytest.raises(ValueError, match="Option 'kafka.bootstrap.servers' must be specified"):
        validate_stream_options({"assign": "{bad"})
    validate_stream_options({**BASE, "startingOffsets": "{bad", "failOnDataLoss": "maybe"})
    with pytest.raises(ValueError, match="For input string"):  # minPartitions is an int
        validate_stream_options({**BASE, "minPartitions": str(2**31)})


def test_refused_deserializers_and_offset_reset():
    assert "keys are deserialized as byte arrays with ByteArrayDeserializer" in refused({**BASE, "kafka.key.deserializer": "x"})
    assert "values are deserialized as byte arrays" in refused({**BASE, "kafka.value.deserializer": "x"})
    text = refused({**BASE, "KAFKA.auto.offset.reset": "earliest"})  # option names in any case
    assert text.startswith("\nKafka option 'auto.offset.reset' is not supported.\nInstead set the source option 'startingoffsets'")


def test_options_parsed():
    opts = parse_source_options(
        {**BASE, "subscribe": " a, ,b ", "STARTINGOFFSETS": "Earliest", "maxOffsetsPerTrigger": "7", "failOnDataLoss": "FALSE",
         "kafka.security.protocol": "SASL_SSL", "includeHeaders": "true", "maxTriggerDelay": "5s"}
    )
    assert opts.strategy == ConsumerStrategy("subscribe", topics=("a", "b"))
    assert str(opts.strategy) == "Subscribe[a, b]"
    assert opts.starting.kind == "earliest" and opts.max_offsets_per_trigger == 7 and not opts.fail_on_data_loss
    assert opts.include_headers and opts.max_trigger_delay_ms == 5000
    assert opts.kafka_params == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL"}
    assert parse_source_options(BASE).starting.kind == "latest"  # a stream's default
    specific = parse_source_options({**BASE, "startingOffsets": '{"t":{"0":23,"1":-2}}'}).starting
    assert specific.kind == "specific" and dict(specific.offsets) == {("t", 0): 23, ("t", 1): -2}
    # startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets
    both = parse_source_options({**BASE, "startingTimestamp": "100", "startingOffsets": "earliest"}).starting
    assert (both.kind, both.timestamp) == ("timestamp", 100)
    assign = parse_source_options({"kafka.bootstrap.servers": "x", "assign": '{"t":[1,0],"u":[2]}'}).strategy
    assert str(assign) == "Assign[t-1, t-0, u-2]"


def test_group_id_warns(caplog):
    with caplog.at_level(logging.WARNING):
        parse_source_options({**BASE, "kafka.group.id": "g", "groupIdPrefix": "p"})
    assert "kafka.group.id" in caplog.text and "groupIdPrefix will be ignored" in caplog.text


def test_strategies_pick_partitions():
    cluster = {"orders": 2, "orders-eu": 1, "users": 1}
    assert ConsumerStrategy("subscribe", topics=("users", "gone")).assigned(cluster) == [("users", 0)]
    # a pattern found anywhere in the name, as Spark's Admin-based reader matches it
    assert ConsumerStrategy("subscribepattern", pattern="der").assigned(cluster) == [("orders", 0), ("orders", 1), ("orders-eu", 0)]
    assert ConsumerStrategy("assign", partitions=(("orders", 1), ("orders", 5))).assigned(cluster) == [("orders", 1)]


def test_credentials_are_redacted():
    shown = redacted_params(
        {"bootstrap.servers": "b:1", "ssl.truststore.password": "p", "sasl.jaas.config": 'x required username="u" password="secret";'}
    )
    assert shown["bootstrap.servers"] == "b:1"
    assert shown["ssl.truststore.password"] == "*********(redacted)"
    assert shown["sasl.jaas.config"] == 'x required username="u" password="*********(redacted)";'


def test_offset_json_and_initial_file():
    offsets = {("t", 10): 5, ("t", 2): 7, ("a", 0): 1}
    assert offset_json(offsets) == {"a": {"0": 1}, "t": {"2": 7, "10": 5}}
    assert offsets_from_json(offset_json(offsets)) == offsets
    assert offsets_from_json('{"t":{"2":7}}') == {("t", 2): 7}
    data = encode_initial_offsets_file(offsets)
    assert data.startswith(b"\x00v1\n")
    assert decode_initial_offsets_file(data, "f") == offsets
    assert decode_initial_offsets_file(b"\x00" + b'{"t":{"0":3}}', "f") == {("t", 0): 3}  # Spark 2.1.0's layout
    with pytest.raises(CheckpointError, match="newer version"):
        decode_initial_offsets_file(b"\x00v9\n{}", "f")
    with pytest.raises(CheckpointError, match="initial offsets file /x/sources/0/0 is corrupt"):
        decode_initial_offsets_file(b"\x00v1\n{trunc", "/x/sources/0/0")


def test_max_offsets_per_trigger_split_as_spark():
    tps = [("t", 0), ("t", 1), ("t", 2)]
    start = dict.fromkeys(tps, 0)
    # Spark's own examples: backlogs 101, 11, 1 with a limit of 10 -> 8, 1, 1 (a share below one
    # record rounds up); 21, 11, 1 with 20 -> 12, 6, 1
    assert list(rate_limited_offsets(start, dict(zip(tps, [101, 11, 1])), 10).values()) == [8, 1, 1]
    assert list(rate_limited_offsets(start, dict(zip(tps, [21, 11, 1])), 20).values()) == [12, 6, 1]
    # nothing new anywhere: latest as is; a partition without backlog keeps its latest
    assert rate_limited_offsets(start, start, 10) == start
    assert rate_limited_offsets({("t", 0): 5, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 100}, 10) == {("t", 0): 5, ("t", 1): 10}


def test_ranges_and_data_loss():
    a0, a1, a2 = ("a", 0), ("a", 1), ("a", 2)
    ranges = plan_ranges({a0: 3}, {a0: 9, a1: 4}, {a1: 0}, True)
    assert ranges == [OffsetRange("a", 0, 3, 9), OffsetRange("a", 1, 0, 4)]
    with pytest.raises(KafkaDataLossError) as info:
        plan_ranges({a0: 3, a1: 2}, {a0: 9}, {}, True)
    assert info.value.getCondition() == "KAFKA_DATA_LOSS.PARTITIONS_DELETED"
    assert str(info.value).endswith("Reason: Partitions Set(a-1) have been deleted.")
    assert str(info.value).startswith("Some data may have been lost because they are not available in Kafka any more;\n")
    with pytest.raises(KafkaDataLossError, match="Added partition a-2 starts from 5 instead of 0."):
        plan_ranges({a0: 3}, {a0: 3, a2: 9}, {a2: 5}, True)
    with pytest.raises(KafkaDataLossError, match="Partition a-0 offset was changed from 8 to 2."):
        plan_ranges({a0: 8}, {a0: 2}, {}, True)
    with pytest.raises(KafkaDataLossError, match=r"Cannot find initial offsets for partitions Set\(a-2\)"):
        plan_ranges({a0: 3}, {a0: 3, a2: 9}, {}, True)
    warnings: list[str] = []
    ranges = plan_ranges({a0: 8, a1: 1}, {a0: 2, a2: 9}, {a2: 5}, False, report=warnings.append)
    assert ranges == [OffsetRange("a", 2, 5, 9)]  # what is lost is left out, with a warning each
    assert len(warnings) == 3


def test_min_partitions_split():
    big, small = OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)
    assert split_ranges([big, small, OffsetRange("t", 2, 5, 5)], None) == [big, small]
    assert split_ranges([big, small], 2) == [big, small]
    parts = split_ranges([big, small], 5)
    assert [r for r in parts if r.partition == 1] == [small]
    pieces = [(r.from_offset, r.until_offset) for r in parts if r.partition == 0]
    assert pieces == [(0, 25), (25, 50), (50, 75), (75, 100)]
    # halves round up, as Scala's math.round: two ranges of 50 for 5 tasks are cut 3 and 3
    halves = split_ranges([OffsetRange("t", 0, 0, 50), OffsetRange("t", 1, 0, 50)], 5)
    assert len(halves) == 6


class FakeCluster:
    """The offset reader's answers, set by the test."""

    def __init__(self, latest, earliest=None):
        self.latest_offsets = dict(latest)
        self.earliest_offsets = dict(earliest or dict.fromkeys(latest, 0))

    def latest(self, known=None):
        return dict(self.latest_offsets)

    def earliest(self, tps=None):
        return {tp: self.earliest_offsets[tp] for tp in (tps if tps is not None else self.earliest_offsets)}

    def initial_offsets(self, starting):
        return self.earliest() if starting.kind == "earliest" else self.latest()

    def close(self):
        pass


def stream(tmp_path, cluster, clock=None, **options):
    from statestream.sources.kafka.stream import KafkaMicroBatchStream

    src = KafkaMicroBatchStream({**BASE, **options}, metadata_dir=str(tmp_path / "sources" / "0"), clock=clock)
    src._reader = cluster
    return src


def test_stream_offsets_first_trigger_limits_and_restart(tmp_path):
    from statestream.sources.base import ReadLimit

    t0, t1 = ("t", 0), ("t", 1)
    cluster = FakeCluster({t0: 0, t1: 0})
    src = stream(tmp_path, cluster, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    limit = src.default_read_limit()
    assert src.latest_offset(None, limit) is None  # an empty topic: no batch
    cluster.latest_offsets = {t0: 6, t1: 2}
    first = src.latest_offset(None, limit)
    assert first == {"t": {"0": 3, "1": 1}}  # 4 of 8 shared in proportion: 3 and 1
    assert src.metrics(first) == {"avgOffsetsBehindLatest": "2.0", "maxOffsetsBehindLatest": "3", "minOffsetsBehindLatest": "1"}
    assert src.reported_latest_offset() == {"t": {"0": 6, "1": 2}}
    assert src.latest_offset(first, ReadLimit.ALL_AVAILABLE) == {"t": {"0": 6, "1": 2}}  # Trigger.Once takes all
    assert (tmp_path / "sources" / "0" / "0").read_bytes() == b'\x00v1\n{"t":{"0":0,"1":0}}'
    # a restart reads the recorded initial offsets, whatever the cluster says now
    again = stream(tmp_path, FakeCluster({t0: 9, t1: 9}), startingOffsets="latest")
    assert again.initial_offsets() == {t0: 0, t1: 0}
    # a partition added meanwhile joins at its earliest offset
    cluster.latest_offsets = {t0: 6, t1: 2, ("t", 2): 3}
    cluster.earliest_offsets[("t", 2)] = 0
    assert src.latest_offset({"t": {"0": 6, "1": 2}}, ReadLimit.ALL_AVAILABLE) == {"t": {"0": 6, "1": 2, "2": 3}}


def test_min_offsets_per_trigger_waits_for_the_delay(tmp_path):
    now = [1_000_000.0]
    t0 = ("t", 0)
    cluster = FakeCluster({t0: 5})
    src = stream(tmp_path, cluster, clock=lambda: now[0], startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="1m")
    limit = src.default_read_limit()
    first = src.latest_offset(None, limit)
    assert first == {"t": {"0": 5}}  # the run's first trigger always runs
    cluster.latest_offsets = {t0: 9}
    now[0] += 30_000
    assert src.latest_offset(first, limit) == first  # 4 new records < 10, 30 s < 1 min: held back
    cluster.latest_offsets = {t0: 15}
    assert src.latest_offset(first, limit) == {"t": {"0": 15}}  # 10 reached
    cluster.latest_offsets = {t0: 16}
    now[0] += 61_000
    assert src.latest_offset({"t": {"0": 15}}, limit) == {"t": {"0": 16}}  # the delay passed
    # a quiet spell longer than the delay restarts it: a single record then waits again
    now[0] += 61_000
    assert src.latest_offset({"t": {"0": 16}}, limit) == {"t": {"0": 16}}
    cluster.latest_offsets = {t0: 17}
    now[0] += 1_000
    assert src.latest_offset({"t": {"0": 16}}, limit) == {"t": {"0": 16}}


def test_available_now_fixes_the_end_at_the_first_trigger(tmp_path):
    t0 = ("t", 0)
    cluster = FakeCluster({t0: 10})
    src = stream(tmp_path, cluster, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    src.prepare_for_trigger_available_now()
    limit = src.default_read_limit()
    ends = [src.latest_offset(None, limit)]
    cluster.latest_offsets = {t0: 100}  # written after the run began: not read in this run
    while True:
        nxt = src.latest_offset(ends[-1], limit)
        if nxt == ends[-1]:
            break
        ends.append(nxt)
    assert [e["t"]["0"] for e in ends] == [4, 8, 10]


def test_kafka_sink_checks_columns_like_spark():
    from pyspark.sql import types as T

    from statestream.sinks.kafka import producer_params, validate_kafka_output

    names = {"STRING": T.StringType(), "BINARY": T.BinaryType(), "INT": T.IntegerType(), "LONG": T.LongType(),
             "ARRAY<STRING>": T.ArrayType(T.StringType())}

    def schema(ddl):  # "name TYPE, ..." without a JVM
        return T.StructType([T.StructField(n, names[t]) for n, t in (f.strip().split(" ", 1) for f in ddl.split(", "))])

    def text(ddl, topic=None):
        with pytest.raises(Exception) as info:  # noqa: PT011 - AnalysisException, compared by text
            validate_kafka_output(schema(ddl), topic)
        return str(info.value)

    validate_kafka_output(schema("value STRING, topic STRING, other INT"), None)
    validate_kafka_output(schema("value BINARY, key STRING, partition INT"), "t")
    assert text("value STRING") == "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
    assert text("key STRING", "t") == "Required attribute 'value' not found"
    assert text("value INT", "t") == "value attribute unsupported type int. value must be a(n) string or binary"
    assert text("value STRING, topic INT") == "topic attribute unsupported type int. topic must be a(n) string"
    assert text("value STRING, partition LONG", "t") == "partition attribute unsupported type bigint. partition must be a(n) int"
    assert text("value STRING, headers ARRAY<STRING>", "t").startswith("headers attribute unsupported type array<string>.")
    with pytest.raises(ValueError, match="Kafka option 'value.serializer' is not supported as value are serialized"):
        producer_params({"kafka.value.serializer": "x"})
    assert producer_params({"kafka.bootstrap.servers": "b", "topic": "t"}) == {"bootstrap.servers": "b"}


class FakeMessage:
    def __init__(self, offset, err=None):
        self._offset, self._err = offset, err

    def error(self):
        return self._err

    def offset(self):
        return self._offset

    def key(self):
        return None

    def value(self):
        return str(self._offset).encode()

    def timestamp(self):
        return (1, 1_700_000_000_000 + self._offset)

    def headers(self):
        return None


class FakeError:
    def __init__(self, code, retriable=False):
        self._code, self._retriable = code, retriable

    def code(self):
        return self._code

    def retriable(self):
        return self._retriable

    def fatal(self):
        return False


class FakeConsumer:
    """A partition whose log holds records at ``present`` offsets, begins at ``low`` and ends
    at ``high`` (offsets between without a record are markers or compacted away, which the
    consumer's position moves past, as librdkafka's does); ``events`` are error events handed
    out first."""

    def __init__(self, present, low, high, events=()):
        self.present, self.low, self.high = sorted(present), low, high
        self.events = list(events)
        self.position_ = 0
        self.polls = 0

    def assign(self, tps):
        self.position_ = tps[0].offset

    def unassign(self):
        pass

    def consume(self, n, timeout):
        self.polls += 1
        if self.events:
            return [FakeMessage(-1, self.events.pop(0))]
        if self.position_ < self.low:
            from confluent_kafka import KafkaError

            return [FakeMessage(-1, FakeError(KafkaError._AUTO_OFFSET_RESET))]
        out = [FakeMessage(o) for o in self.present if o >= self.position_][:n]
        if out:
            self.position_ = out[-1].offset() + 1
        if not [o for o in self.present if o >= self.position_] and self.position_ < self.high:
            self.position_ = self.high  # only markers left: the position moves past them
        return out

    def position(self, tps):
        class At:
            offset = self.position_

        return [At()]

    def get_watermark_offsets(self, tp, timeout, cached):
        return self.low, self.high


def read_range(consumer, r, fail_on_data_loss):
    import pyarrow as pa

    from statestream.sources.kafka.partition_reader import KafkaRangeReader, arrow_schema

    reader = KafkaRangeReader((r,), {}, "g", fail_on_data_loss=fail_on_data_loss, poll_timeout_ms=1000)
    return pa.Table.from_batches(list(reader.read(consumer, r)), schema=arrow_schema(False)).column("offset").to_pylist()


def test_task_skips_gaps_but_reports_lost_records():
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import KafkaError

    r = OffsetRange("t", 0, 2, 9)
    # offsets 4 and 5 compacted away while the log still begins at 0: skipped silently
    assert read_range(FakeConsumer([0, 1, 2, 3, 6, 7, 8, 9], 0, 10), r, True) == [2, 3, 6, 7, 8]
    # the range ends on a transaction marker (offset 8): done, without waiting out a timeout
    marker = FakeConsumer([0, 1, 2, 3, 4, 5, 6, 7], 0, 9)
    assert read_range(marker, r, True) == [2, 3, 4, 5, 6, 7]
    assert marker.polls <= 2
    # the log now begins at 5: [2, 5) aged out
    with pytest.raises(KafkaDataLossError) as info:
        read_range(FakeConsumer([5, 6, 7, 8, 9], 5, 10), r, True)
    assert info.value.getCondition() == "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE"
    assert "Could not read records in offset [2, 5) for topic partition t-0\nwith consumer group g-executor." in str(info.value)
    assert read_range(FakeConsumer([5, 6, 7, 8, 9], 5, 10), r, False) == [5, 6, 7, 8]
    assert read_range(FakeConsumer([12], 12, 13), r, False) == []  # all of the range aged out
    # the log was cut below the range's end (a recreated topic): lost, not quietly short
    with pytest.raises(KafkaDataLossError, match=r"offset \[4, 9\)"):
        read_range(FakeConsumer([0, 1, 2, 3], 0, 4), r, True)
    assert read_range(FakeConsumer([0, 1, 2, 3], 0, 4), r, False) == [2, 3]
    # a broker hiccup is waited out; an error about the partition fails the task
    hiccup = FakeConsumer(range(10), 0, 10, events=[FakeError(KafkaError._TRANSPORT, retriable=True)])
    assert read_range(hiccup, r, True) == [2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(RuntimeError, match="reading t-0 at offset 2 failed"):
        read_range(FakeConsumer(range(10), 0, 10, events=[FakeError(KafkaError.TOPIC_AUTHORIZATION_FAILED)]), r, True)


def test_task_times_out_when_the_position_does_not_move():
    pytest.importorskip("confluent_kafka")

    class Stuck(FakeConsumer):
        def consume(self, n, timeout):
            return []

    with pytest.raises(Exception, match="Cannot fetch record for offset 2 in 1000 milliseconds"):
        read_range(Stuck(range(10), 0, 10), OffsetRange("t", 0, 2, 9), True)


# -- the client's settings: Java's names in librdkafka's terms ------------------------------------


def test_jaas_and_pem_trust_store_become_librdkafka_settings(tmp_path):
    from statestream.sources.kafka.client import client_config

    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    conf = client_config({
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p w";',
        "ssl.truststore.location": str(pem),  # no type given: read off the file
        "ssl.truststore.password": "unused", "ssl.endpoint.identification.algorithm": "",
    })
    conf.pop("logger")
    assert conf == {
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u", "sasl.password": "p w", "ssl.ca.location": str(pem),
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_key_stores_and_kerberos_login_translate(tmp_path):
    from statestream.sources.kafka.client import client_config

    p12 = tmp_path / "client.p12"
    p12.write_bytes(b"\x30\x82\x09\x00rest")
    conf = client_config({"ssl.keystore.location": str(p12), "ssl.keystore.password": "k", "ssl.key.password": "kk"})
    assert (conf["ssl.keystore.location"], conf["ssl.keystore.password"], conf["ssl.key.password"]) == (str(p12), "k", "kk")
    conf = client_config({"ssl.keystore.location": "/x/client.pem", "ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY"})
    assert (conf["ssl.certificate.location"], conf["ssl.key.location"], conf["ssl.key.pem"]) == ("/x/client.pem", "/x/client.pem", "KEY")
    conf = client_config({"sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k.tab" principal="a@R";'})
    assert (conf["sasl.kerberos.keytab"], conf["sasl.kerberos.principal"]) == ("/k.tab", "a@R")


def test_a_jks_store_is_refused_saying_what_to_give(tmp_path):
    from statestream.errors import StatestreamError
    from statestream.sources.kafka.client import client_config

    jks = tmp_path / "trust.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(StatestreamError, match=r"'kafka.ssl.truststore.location' names a JKS trust store.*PEM"):
        client_config({"ssl.truststore.location": str(jks)})
    with pytest.raises(StatestreamError, match=r"'kafka.ssl.keystore.location' names a JKS key store.*PKCS12"):
        client_config({"ssl.keystore.location": str(jks)})
    # a file the driver cannot read, with no type: Java's default (JKS) is assumed and refused
    with pytest.raises(StatestreamError, match="JKS trust store"):
        client_config({"ssl.truststore.location": str(tmp_path / "absent")})


def test_client_errors_keep_the_telling_cause_and_mask_secrets():
    from statestream.sources.kafka.client import ClientErrors

    class Err:
        def __init__(self, name, text):
            self._name, self._text = name, text

        def name(self):
            return self._name

        def str(self):
            return self._text

    errors = ClientErrors()
    conf = errors.attach({"sasl.password": "hunter2"})
    assert conf["error_cb"] is errors
    errors(Err("_TRANSPORT", "connection reset"))
    errors(Err("_ALL_BROKERS_DOWN", "1/1 brokers are down"))
    assert (errors.last, errors.fatal) == ("connection reset", None)
    errors(Err("_AUTHENTICATION", "SASL authentication error for password hunter2"))
    assert errors.fatal == errors.last == "SASL authentication error for password *********(redacted)"
