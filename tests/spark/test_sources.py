"""Built-in sources: rate (against Spark's own rate source), files, MemoryStream."""

from __future__ import annotations

import json
import os
import time

import pytest
from pyspark.errors import IllegalArgumentException, UnsupportedOperationException
from pyspark.sql import functions as F

from statestream.errors import schema_required_error
from statestream.sources import create_source
from statestream.sources.base import ReadLimit
from statestream.sources.files import FileStreamSource
from statestream.sources.memory import MemoryStream
from statestream.sources.rate import RateSource, parse_time_string_as_seconds, value_at_second


class ManualClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


T0 = 1_700_000_000_000


# -- rate ---------------------------------------------------------------------------------------


def test_value_at_second_with_ramp_up():
    assert [value_at_second(s, 10, 4) for s in range(7)] == [0, 2, 6, 12, 20, 30, 40]
    assert [value_at_second(s, 3, 0) for s in range(4)] == [0, 3, 6, 9]


def test_time_strings():
    assert parse_time_string_as_seconds("5s") == 5
    assert parse_time_string_as_seconds("2m") == 120
    assert parse_time_string_as_seconds("1500ms") == 1
    assert parse_time_string_as_seconds("7") == 7
    with pytest.raises(ValueError, match="parsecs"):
        parse_time_string_as_seconds("5 parsecs")


def test_rate_offsets_follow_the_manual_clock(spark):
    clock = ManualClock(T0)
    src = RateSource(spark, {"rowsPerSecond": "5"}, clock=clock)
    assert src.latest_offset(None, ReadLimit.ALL_AVAILABLE) == 0
    clock.advance(999)
    assert src.latest_offset(0, ReadLimit.ALL_AVAILABLE) == 0
    clock.advance(1)
    assert src.latest_offset(0, ReadLimit.ALL_AVAILABLE) == 1
    clock.advance(2500)
    assert src.latest_offset(1, ReadLimit.ALL_AVAILABLE) == 3
    clock.ms = T0  # a clock going backwards never moves the offset back
    assert src.latest_offset(3, ReadLimit.ALL_AVAILABLE) == 3
    assert json.loads(json.dumps(src.latest_offset(3, ReadLimit.ALL_AVAILABLE))) == 3


def test_rate_rows_values_timestamps_and_layout(spark):
    clock = ManualClock(T0)
    src = RateSource(spark, {"ROWSPERSECOND": "5", "numPartitions": "3"}, clock=clock)
    assert src.get_batch(spark, None, 0).count() == 0
    df = src.get_batch(spark, None, 2)
    assert df.schema.simpleString() == "struct<timestamp:timestamp,value:bigint>"
    rows = df.select(F.unix_millis("timestamp").alias("ms"), "value", F.spark_partition_id().alias("p")).collect()
    assert sorted(r.value for r in rows) == list(range(10))
    for r in rows:
        assert r.ms == T0 + r.value * 200
        assert r.p == r.value % 3
    # within a partition, values come in Spark's order: p, p+3, p+6, ...
    by_part = {}
    for r in rows:
        by_part.setdefault(r.p, []).append(r.value)
    assert by_part == {0: [0, 3, 6, 9], 1: [1, 4, 7], 2: [2, 5, 8]}
    nxt = src.get_batch(spark, 2, 3).collect()
    assert [r.value for r in sorted(nxt, key=lambda r: r.value)] == [10, 11, 12, 13, 14]


def test_rate_ramp_up_rows(spark):
    src = RateSource(spark, {"rowsPerSecond": "10", "rampUpTime": "4s", "numPartitions": "2"}, clock=ManualClock(T0))
    assert src.get_batch(spark, 2, 3).count() == 6
    assert src.get_batch(spark, None, 6).count() == 40


def test_rate_start_time_survives_restart(spark, tmp_path):
    md = str(tmp_path / "sources" / "0")
    first = RateSource(spark, {"rowsPerSecond": "2"}, metadata_dir=md, clock=ManualClock(T0))
    assert open(os.path.join(md, "0")).read() == f"v1\n{T0}"
    later = RateSource(spark, {"rowsPerSecond": "2"}, metadata_dir=md, clock=ManualClock(T0 + 7_300))
    assert later.creation_time_ms == T0 == first.creation_time_ms
    assert later.latest_offset(None, ReadLimit.ALL_AVAILABLE) == 7
    # replaying an old batch gives the same rows as before the restart
    assert sorted(first.get_batch(spark, 1, 3).collect()) == sorted(later.get_batch(spark, 1, 3).collect())


def test_rate_options_validation_and_description(spark):
    with pytest.raises(IllegalArgumentException, match="^Invalid value '0'. The option 'rowsPerSecond' must be positive$"):
        RateSource(spark, {"rowsPerSecond": "0"})
    with pytest.raises(IllegalArgumentException, match="The option 'rampUpTime' must not be negative"):
        RateSource(spark, {"rampUpTime": "-1s"})
    with pytest.raises(IllegalArgumentException, match="The option 'numPartitions' must be positive"):
        RateSource(spark, {"numPartitions": "0"})
    with pytest.raises(UnsupportedOperationException, match="does not support user-specified schema"):
        create_source("rate", {}, "a INT", None, None, spark)
    src = create_source("rate", {}, None, None, None, spark)
    assert src.num_partitions == spark.sparkContext.defaultParallelism
    assert src.description() == "RateStreamV2[rowsPerSecond=1, rampUpTimeSeconds=0, numPartitions=default"
    assert RateSource(spark, {"numPartitions": "3", "rampUpTime": "1m"}).description() == (
        "RateStreamV2[rowsPerSecond=1, rampUpTimeSeconds=60, numPartitions=3"
    )


def test_rate_rows_equal_spark_rate_source(spark, tmp_path):
    """Oracle: Spark's own rate source, run for a few seconds; our source, pointed at the start
    time Spark recorded, must produce the same rows for each of Spark's batches."""
    ck = str(tmp_path / "ck")
    seen: dict[int, list] = {}

    def collect(df, batch_id):
        seen[batch_id] = sorted(tuple(r) for r in df.collect())

    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 7)
        .option("rampUpTime", "2s")
        .option("numPartitions", 3)
        .load()
    )
    q = stream.writeStream.foreachBatch(collect).option("checkpointLocation", ck).start()
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            ends = [int(open(os.path.join(ck, "offsets", b)).read().split("\n")[-1]) for b in _batches(ck, "commits")]
            if ends and max(ends) >= 4:
                break
            time.sleep(0.2)
    finally:
        q.stop()
    ours = RateSource(
        spark,
        {"rowsPerSecond": "7", "rampUpTime": "2s", "numPartitions": "3"},
        metadata_dir=os.path.join(ck, "sources", "0"),
        clock=ManualClock(0),
    )
    committed = _batches(ck, "commits")
    assert committed, "Spark ran no batch"
    total = 0
    for b in committed:
        end = int(open(os.path.join(ck, "offsets", b)).read().split("\n")[-1])
        start = None if b == "0" else int(open(os.path.join(ck, "offsets", str(int(b) - 1))).read().split("\n")[-1])
        mine = sorted(tuple(r) for r in ours.get_batch(spark, start, end).collect())
        assert mine == seen[int(b)], f"batch {b}: ({start}, {end}]"
        total += len(mine)
    assert total > 7


def _batches(ck: str, kind: str) -> list[str]:
    d = os.path.join(ck, kind)
    if not os.path.isdir(d):
        return []
    return sorted((n for n in os.listdir(d) if n.isdigit()), key=int)


# -- files ----------------------------------------------------------------------------------------


def _write(path, text: str, mtime_ms: int | None = None) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    if mtime_ms is not None:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return path


def test_file_source_requires_schema(spark, tmp_path):
    with pytest.raises(IllegalArgumentException) as err:
        create_source("json", {}, None, str(tmp_path), None, spark)
    assert str(err.value) == str(schema_required_error())
    assert str(err.value).startswith("Schema must be specified when creating a streaming source DataFrame. ")
    with pytest.raises(IllegalArgumentException, match="^'path' is not specified.$"):
        create_source("json", {}, "a INT", None, None, spark)
    # source options are checked when the query starts (a metadata directory), as Spark does
    create_source("json", {"maxFilesPerTrigger": "0"}, "a INT", str(tmp_path), None, spark).stop()
    with pytest.raises(IllegalArgumentException, match="Invalid value '0' for option 'maxFilesPerTrigger', must be a positive integer"):
        create_source("json", {"maxFilesPerTrigger": "0"}, "a INT", str(tmp_path), str(tmp_path / "md"), spark)


def test_file_source_order_limit_hidden_and_log(spark, tmp_path):
    src_dir = tmp_path / "in"
    md = str(tmp_path / "ck" / "sources" / "0")
    _write(str(src_dir / "c.json"), '{"a": 3}\n', T0)
    _write(str(src_dir / "b.json"), '{"a": 2}\n', T0 + 1000)
    _write(str(src_dir / "a.json"), '{"a": 1}\n', T0 + 1000)  # same time as b: path order
    _write(str(src_dir / "_tmp.json"), '{"a": 99}\n', T0)
    _write(str(src_dir / ".hidden.json"), '{"a": 99}\n', T0)
    _write(str(src_dir / "_temporary" / "x.json"), '{"a": 99}\n', T0)
    src = create_source("json", {"maxFilesPerTrigger": "2"}, "a INT", str(src_dir), md, spark)
    assert isinstance(src, FileStreamSource)
    limit = src.default_read_limit()
    assert limit.max_files == 2
    assert src.latest_offset(None, limit) == {"logOffset": 0}
    assert src.latest_offset({"logOffset": 0}, limit) == {"logOffset": 1}
    assert src.latest_offset({"logOffset": 1}, limit) == {"logOffset": 1}
    assert sorted(r.a for r in src.get_batch(spark, None, {"logOffset": 0}).collect()) == [1, 3]
    assert src.files_between(None, {"logOffset": 0}) == ["file://" + str(src_dir / n) for n in ("c.json", "a.json")]
    assert [r.a for r in src.get_batch(spark, {"logOffset": 0}, {"logOffset": 1}).collect()] == [2]
    assert sorted(r.a for r in src.get_batch(spark, None, {"logOffset": 1}).collect()) == [1, 2, 3]
    log0 = open(os.path.join(md, "0")).read().split("\n")
    assert log0[0] == "v1"
    first = json.loads(log0[1])
    assert list(first) == ["path", "timestamp", "batchId"]
    assert first == {"path": "file://" + str(src_dir / "c.json"), "timestamp": T0, "batchId": 0}
    assert src.description() == f"FileStreamSource[file:{src_dir}]"


def test_file_source_restart_does_not_reread(spark, tmp_path):
    src_dir = tmp_path / "in"
    md = str(tmp_path / "md")
    _write(str(src_dir / "1.json"), '{"a": 1}\n', T0)
    _write(str(src_dir / "2.json"), '{"a": 2}\n', T0 + 1)
    src = FileStreamSource(spark, str(src_dir), "json", "a INT", {}, metadata_dir=md)
    assert src.latest_offset(None, ReadLimit.ALL_AVAILABLE) == {"logOffset": 0}
    src.stop()
    again = FileStreamSource(spark, str(src_dir), "json", "a INT", {}, metadata_dir=md)
    assert again.latest_offset({"logOffset": 0}, ReadLimit.ALL_AVAILABLE) == {"logOffset": 0}
    _write(str(src_dir / "3.json"), '{"a": 3}\n', T0 + 2)
    assert again.latest_offset({"logOffset": 0}, ReadLimit.ALL_AVAILABLE) == {"logOffset": 1}
    assert [r.a for r in again.get_batch(spark, {"logOffset": 0}, {"logOffset": 1}).collect()] == [3]
    # the pre-restart batch is still replayable from the log
    assert sorted(r.a for r in again.get_batch(spark, None, {"logOffset": 0}).collect()) == [1, 2]


def test_file_source_empty_relation_reads_no_files_as_a_batch_does(spark, tmp_path):
    """What a batch without new files swaps into a kept batch plan: the source's reader over no
    files, a file relation with the batch's schema (Spark's optimizer would fold an empty local
    relation, and the state tasks above it with it), which schedules no scan task."""
    src_dir = tmp_path / "in"
    _write(str(src_dir / "1.json"), '{"a": 1}\n', T0)
    src = FileStreamSource(spark, str(src_dir), "json", "a INT", {}, metadata_dir=str(tmp_path / "md"))
    empty = src.empty_relation(spark)
    batch = src.get_batch(spark, None, src.latest_offset(None, ReadLimit.ALL_AVAILABLE))
    assert empty._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LogicalRelation"
    assert empty.schema == batch.schema
    assert empty.rdd.getNumPartitions() == 0
    assert empty.groupBy("a").count().collect() == []
    assert [r.a for r in batch.collect()] == [1]


def test_file_source_log_compaction_and_restart(spark, tmp_path):
    src_dir = tmp_path / "in"
    md = str(tmp_path / "md")
    for i in range(12):
        _write(str(src_dir / f"f{i:02d}.json"), json.dumps({"a": i}) + "\n", T0 + i)
    src = FileStreamSource(spark, str(src_dir), "json", "a INT", {"maxFilesPerTrigger": 1}, metadata_dir=md)
    for i in range(12):
        assert src.latest_offset(None, src.default_read_limit()) == {"logOffset": i}
    assert "9.compact" in os.listdir(md)
    again = FileStreamSource(spark, str(src_dir), "json", "a INT", {"maxFilesPerTrigger": 1}, metadata_dir=md)
    assert again.latest_offset(None, again.default_read_limit()) == {"logOffset": 11}
    assert [r.a for r in again.get_batch(spark, {"logOffset": 2}, {"logOffset": 3}).collect()] == [3]
    assert sorted(r.a for r in again.get_batch(spark, {"logOffset": 8}, {"logOffset": 10}).collect()) == [9, 10]


def test_file_source_csv_options_pass_through(spark, tmp_path):
    src_dir = tmp_path / "in"
    _write(str(src_dir / "x.csv"), "a;b\n1;x\n2;y\n", T0)
    src = create_source("csv", {"header": "true", "sep": ";"}, "a INT, b STRING", str(src_dir), str(tmp_path / "md"), spark)
    end = src.latest_offset(None, ReadLimit.ALL_AVAILABLE)
    assert sorted(tuple(r) for r in src.get_batch(spark, None, end).collect()) == [(1, "x"), (2, "y")]


def test_file_source_available_now_fixes_the_file_set(spark, tmp_path):
    src_dir = tmp_path / "in"
    _write(str(src_dir / "1.json"), '{"a": 1}\n', T0)
    src = FileStreamSource(spark, str(src_dir), "json", "a INT", {}, metadata_dir=str(tmp_path / "md"))
    src.prepare_for_trigger_available_now()
    _write(str(src_dir / "2.json"), '{"a": 2}\n', T0 + 1)
    assert src.latest_offset(None, ReadLimit.ALL_AVAILABLE) == {"logOffset": 0}
    assert src.latest_offset({"logOffset": 0}, ReadLimit.ALL_AVAILABLE) == {"logOffset": 0}
    assert [r.a for r in src.get_batch(spark, None, {"logOffset": 0}).collect()] == [1]


def test_file_source_partitioned_dirs_and_odd_names(spark, tmp_path):
    src_dir = tmp_path / "in"
    _write(str(src_dir / "k=1" / "a b[1].json"), '{"a": 1}\n', T0)
    src = FileStreamSource(spark, str(src_dir), "json", "a INT, k INT", {}, metadata_dir=str(tmp_path / "md"))
    end = src.latest_offset(None, ReadLimit.ALL_AVAILABLE)
    assert [tuple(r) for r in src.get_batch(spark, None, end).collect()] == [(1, 1)]


def test_file_source_without_data_yields_no_offset(spark, tmp_path):
    # a started source (its metadata directory given) whose directory is gone: no offset, as in
    # Spark (load() refuses a missing directory, a running source does not check again)
    src = FileStreamSource(spark, str(tmp_path / "missing"), "parquet", "a INT", {}, metadata_dir=str(tmp_path / "md"))
    assert src.latest_offset(None, ReadLimit.ALL_AVAILABLE) is None
    assert src.get_batch(spark, None, {"logOffset": -1}).count() == 0
    src.stop()


# -- MemoryStream ---------------------------------------------------------------------------------


def test_memory_stream(spark):
    ms = MemoryStream(spark, "k STRING, v INT")
    assert ms.to_df is None
    assert ms.latest_offset(None, ReadLimit.ALL_AVAILABLE) is None
    assert ms.add_data([("a", 1), ("b", 2)]) == 0
    assert ms.add_data([("c", 3)]) == 1
    assert ms.latest_offset(None, ReadLimit.ALL_AVAILABLE) == 1
    assert [tuple(r) for r in ms.get_batch(spark, None, 0).collect()] == [("a", 1), ("b", 2)]
    assert [tuple(r) for r in ms.get_batch(spark, 0, 1).collect()] == [("c", 3)]
    assert ms.get_batch(spark, 1, 1).count() == 0
    assert ms.get_batch(spark, None, 1).schema.simpleString() == "struct<k:string,v:int>"
    single = MemoryStream(spark, "value INT")
    single.add_data([1, 2, 3])
    assert [r.value for r in single.get_batch(spark, None, 0).collect()] == [1, 2, 3]
    assert single.description() == "MemoryStream[value]"
