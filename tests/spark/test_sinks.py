"""Built-in sinks: console, memory, file (Spark-readable, exactly-once), foreachBatch."""

from __future__ import annotations

import json
import os

import pytest
from pyspark.errors import AnalysisException, IllegalArgumentException

from statestream.sinks import create_sink
from statestream.sinks.console import ConsoleSink
from statestream.sinks.files import FileStreamSink
from statestream.sinks.foreach_batch import ForeachBatchSink
from statestream.sinks.memory import MemorySink
from statestream.sources.base import ReadLimit
from statestream.sources.files import FileStreamSource


def _df(spark, rows, schema="a INT, b STRING"):
    return spark.createDataFrame(rows, schema)


# -- console --------------------------------------------------------------------------------------


def test_console_sink_prints_like_spark(spark, capsys):
    sink = create_sink("console", {}, None, spark)
    assert isinstance(sink, ConsoleSink)
    sink.add_batch(3, _df(spark, [(1, "a"), (2, "b")]), "append")
    out = capsys.readouterr().out
    assert out == (
        "-------------------------------------------\n"
        "Batch: 3\n"
        "-------------------------------------------\n"
        "+---+---+\n"
        "|  a|  b|\n"
        "+---+---+\n"
        "|  1|  a|\n"
        "|  2|  b|\n"
        "+---+---+\n"
        "\n"
    )
    assert sink.num_output_rows() == 2
    assert sink.description().startswith("org.apache.spark.sql.execution.streaming.ConsoleTable$@")


def test_console_sink_options(spark, capsys):
    sink = create_sink("console", {"numRows": "1", "truncate": "false"}, None, spark)
    sink.add_batch(0, _df(spark, [(1, "x" * 30), (2, "y")]), "append")
    out = capsys.readouterr().out
    assert "x" * 30 in out
    assert "only showing top 1 row" in out


# -- memory ---------------------------------------------------------------------------------------


def test_memory_sink_requires_query_name(spark):
    with pytest.raises(AnalysisException, match="^queryName must be specified for memory sink.$"):
        create_sink("memory", {}, None, spark)


def test_memory_sink_append_idempotent_and_view(spark):
    sink = create_sink("memory", {}, "ss_mem_append", spark)
    assert isinstance(sink, MemorySink)
    sink.add_batch(0, _df(spark, [(1, "a")]), "append")
    sink.add_batch(1, _df(spark, [(2, "b"), (3, "c")]), "append")
    assert sink.num_output_rows() == 2
    sink.add_batch(1, _df(spark, [(99, "dup")]), "append")  # redelivered after a crash: skipped
    sink.add_batch(0, _df(spark, [(98, "dup")]), "append")
    assert [tuple(r) for r in sink.all_rows()] == [(1, "a"), (2, "b"), (3, "c")]
    assert [tuple(r) for r in sink.latest_batch_rows()] == [(2, "b"), (3, "c")]
    got = spark.sql("select * from ss_mem_append order by a").collect()
    assert [tuple(r) for r in got] == [(1, "a"), (2, "b"), (3, "c")]
    assert spark.table("ss_mem_append").count() == 3
    sink.add_batch(2, _df(spark, [(4, "d")]), "update")  # update appends too
    assert spark.table("ss_mem_append").count() == 4
    assert sink.description() == "MemorySink"


def test_memory_sink_complete_replaces(spark):
    sink = create_sink("memory", {}, "ss_mem_complete", spark)
    sink.add_batch(0, _df(spark, [(1, "a"), (2, "b")]), "complete")
    sink.add_batch(1, _df(spark, [(1, "a2"), (2, "b2"), (3, "c2")]), "complete")
    assert sorted(tuple(r) for r in spark.table("ss_mem_complete").collect()) == [(1, "a2"), (2, "b2"), (3, "c2")]
    assert len(sink.all_rows()) == 3


def test_memory_sink_view_exists_before_first_batch_when_schema_known(spark):
    df = _df(spark, [])
    create_sink("memory", {}, "ss_mem_empty", spark, schema=df.schema)
    assert spark.table("ss_mem_empty").count() == 0
    assert spark.table("ss_mem_empty").schema == df.schema


# -- file sink ------------------------------------------------------------------------------------


def test_file_sink_only_append(spark, tmp_path):
    for mode in ("update", "complete"):
        with pytest.raises(AnalysisException) as err:
            create_sink("parquet", {"path": str(tmp_path / "o")}, None, spark, output_mode=mode)
        assert str(err.value) == (
            f"[STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE] Invalid streaming output mode: {mode}. "
            "This output mode is not supported in Data Source parquet. SQLSTATE: 42KDE"
        )
        assert err.value.getCondition() == "STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE"
    with pytest.raises(IllegalArgumentException, match="^'path' is not specified.$"):
        create_sink("json", {}, None, spark, output_mode="append")
    sink = create_sink("csv", {"path": str(tmp_path / "o2")}, None, spark, output_mode="append")
    with pytest.raises(AnalysisException, match="Data Source csv"):
        sink.add_batch(0, _df(spark, [(1, "a")]), "update")


def test_file_sink_log_format_idempotency_and_spark_reader(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = create_sink("parquet", {}, None, spark, path=out, output_mode="append")
    assert isinstance(sink, FileStreamSink)
    assert sink.description() == f"FileSink[file:{out}]"
    assert os.path.isdir(os.path.join(out, "_spark_metadata"))
    sink.add_batch(0, _df(spark, [(1, "a"), (2, "b")]).repartition(2), "append")
    sink.add_batch(1, _df(spark, [(3, "c")]), "append")
    files_before = sorted(os.listdir(out))
    sink.add_batch(1, _df(spark, [(99, "dup")]), "append")  # already committed: nothing written
    assert sorted(os.listdir(out)) == files_before
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == [(1, "a"), (2, "b"), (3, "c")]

    lines = open(os.path.join(out, "_spark_metadata", "0")).read().split("\n")
    assert lines[0] == "v1"
    entries = [json.loads(x) for x in lines[1:]]
    assert entries and all(
        list(e) == ["path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action"] for e in entries
    )
    for e in entries:
        assert e["path"].startswith("file://" + out + "/part-")
        assert e["path"].endswith(".snappy.parquet")
        assert e["size"] == os.path.getsize(e["path"][len("file://") :])
        assert (e["isDir"], e["blockReplication"], e["blockSize"], e["action"]) == (False, 1, 33554432, "add")
    assert not [n for n in os.listdir(out) if n.startswith(".statestream-staging-")]


def test_file_sink_readers_see_only_committed_files(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = FileStreamSink(spark, out, "parquet")
    sink.add_batch(0, _df(spark, [(1, "a")]), "append")
    # A crashed attempt of batch 1 left a data file behind but never wrote the log entry.
    _df(spark, [(666, "orphan")]).coalesce(1).write.parquet(str(tmp_path / "orphan"))
    orphan = [n for n in os.listdir(tmp_path / "orphan") if n.endswith(".parquet")][0]
    os.rename(tmp_path / "orphan" / orphan, os.path.join(out, "part-00000-orphan.snappy.parquet"))
    assert [tuple(r) for r in spark.read.parquet(out).collect()] == [(1, "a")]
    # the retried batch 1 commits normally
    sink.add_batch(1, _df(spark, [(2, "b")]), "append")
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == [(1, "a"), (2, "b")]


def test_file_sink_compaction_is_readable_by_spark(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = FileStreamSink(spark, out, "json")
    for b in range(12):
        sink.add_batch(b, _df(spark, [(b, str(b))]).coalesce(1), "append")
    names = os.listdir(os.path.join(out, "_spark_metadata"))
    assert "9.compact" in names and "10" in names and "11" in names
    compact = open(os.path.join(out, "_spark_metadata", "9.compact")).read().split("\n")
    assert compact[0] == "v1" and len(compact) == 11  # every file of batches 0..9
    got = spark.read.schema("a INT, b STRING").json(out).collect()
    assert sorted(r.a for r in got) == list(range(12))
    # a new sink object on the same path continues after the last committed batch
    again = FileStreamSink(spark, out, "json")
    again.add_batch(11, _df(spark, [(99, "dup")]), "append")
    again.add_batch(12, _df(spark, [(12, "12")]), "append")
    assert sorted(r.a for r in spark.read.schema("a INT, b STRING").json(out).collect()) == list(range(13))


def test_file_sink_csv_options_and_partition_by(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = create_sink("csv", {"path": out, "header": "true", "sep": ";"}, None, spark, partition_by=["b"], output_mode="append")
    sink.add_batch(0, _df(spark, [(1, "x"), (2, "y")]), "append")
    got = spark.read.option("header", "true").option("sep", ";").schema("a INT, b STRING").csv(out).collect()
    assert sorted(tuple(r) for r in got) == [(1, "x"), (2, "y")]
    assert os.path.isdir(os.path.join(out, "b=x"))
    some = [n for n in os.listdir(os.path.join(out, "b=x")) if n.endswith(".csv")][0]
    assert open(os.path.join(out, "b=x", some)).read().startswith("a\n")


def test_file_source_reads_file_sink_output_through_its_log(spark, tmp_path):
    out = str(tmp_path / "out")
    sink = FileStreamSink(spark, out, "parquet")
    sink.add_batch(0, _df(spark, [(1, "a")]), "append")
    with open(os.path.join(out, "part-99999-not-committed.snappy.parquet"), "wb") as fh:
        fh.write(b"garbage")
    src = FileStreamSource(spark, out, "parquet", "a INT, b STRING", {}, metadata_dir=str(tmp_path / "md"))
    end = src.latest_offset(None, ReadLimit.ALL_AVAILABLE)
    assert [tuple(r) for r in src.get_batch(spark, None, end).collect()] == [(1, "a")]


# -- foreachBatch ---------------------------------------------------------------------------------


def test_foreach_batch_sink(spark):
    calls = []
    sink = create_sink("foreachBatch", {}, None, spark, foreach_batch=lambda df, bid: calls.append((bid, df.count())))
    assert isinstance(sink, ForeachBatchSink)
    sink.add_batch(0, _df(spark, [(1, "a")]), "append")
    sink.add_batch(0, _df(spark, [(1, "a"), (2, "b")]), "append")  # re-executed batch: called again
    assert calls == [(0, 1), (0, 2)]
    assert sink.description() == "ForeachBatchSink"
    assert sink.num_output_rows() == -1


# -- noop, foreach --------------------------------------------------------------------------------


def test_noop_sink_counts_and_describes_like_spark(spark):
    from statestream.sinks.noop import NoopSink

    sink = create_sink("noop", {}, None, spark)
    assert isinstance(sink, NoopSink)
    sink.add_batch(0, _df(spark, [(1, "a"), (2, "b")]), "complete")
    assert (sink.description(), sink.num_output_rows()) == ("NoopTable", 2)


def test_foreach_task_calls_open_process_close_as_pyspark_does():
    from statestream.sinks.foreach import partition_task

    class W:
        def __init__(self, answer):
            self.answer, self.calls = answer, []

        def open(self, pid, epoch):
            self.calls.append(("open", pid, epoch))
            return self.answer

        def process(self, row):
            if row == "bad":
                raise ValueError("bad")
            self.calls.append(("process", row))

        def close(self, error):
            self.calls.append(("close", repr(error)))

    for answer, expected in ((True, [("process", 1), ("process", 2)]), (False, []), (None, [])):
        w = W(answer)
        assert partition_task(w)(3, 7, [1, 2]) == (2, None)  # rows handed to the sink are counted either way
        assert w.calls == [("open", 3, 7), *expected, ("close", "None")]
    w = W(True)
    n, text = partition_task(w)(0, 0, [1, "bad", 2])
    assert n == 2 and text.startswith("Traceback (most recent call last):\n") and text.endswith("ValueError: bad\n")
    assert w.calls[-1] == ("close", "ValueError('bad')")
    seen = []
    assert partition_task(seen.append)(0, 0, ["x", "y"]) == (2, None)
    assert seen == ["x", "y"]


# -- paths ----------------------------------------------------------------------------------------


def test_sink_log_paths_are_encoded_as_hadoop_path_to_uri():
    from statestream.checkpoint.file_stream_log import path_to_uri, uri_to_path

    p = "/out/k=a b/k2=p%2Fq/x=\u00fc&,;$+@:/part-0.parquet"
    uri = path_to_uri(p)
    assert uri == "file:///out/k=a%20b/k2=p%252Fq/x=\u00fc&,;$+@:/part-0.parquet"
    assert uri_to_path(uri) == p
    assert path_to_uri("s3://bucket/k=1/a b") == "s3://bucket/k=1/a%20b"


def test_checkpoint_file_manager_reads_hadoop_file_uris_as_local_paths(tmp_path):
    from statestream.checkpoint.files import CheckpointFileManager

    for root in (f"file:{tmp_path}/c", f"file://{tmp_path}/c", f"{tmp_path}/c"):
        assert CheckpointFileManager(root).path("offsets") == f"{tmp_path}/c/offsets"
