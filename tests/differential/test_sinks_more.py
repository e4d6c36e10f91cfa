"""Differential tests of the sinks besides ``foreachBatch``: ``noop``, ``foreach``, ``toTable``, the
file sinks with ``partitionBy``, the memory sink on restart, and the failures of user sink code.

The harness's ``run_stream`` always writes through ``foreachBatch``; here :func:`_run` drives the
same input files (one per micro-batch, ``processAllAvailable()`` after each) into a sink the test
chooses, on Spark's engine and on statestream, and the test compares what the sink left behind:
files, tables, the calls a ``foreach`` writer saw, progress, error texts.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from tests.differential.harness import _wait_idle, engine_name, error_text, write_input_file
from tests.spark_confs import session_confs

KV = "k STRING, v LONG"
INPUT = [
    [("a", 1), ("b", 2), ("a", 3)],
    [("c", 4), ("a", 5)],
    [],  # an empty file: a data batch with no rows
    [("b", 6), (None, 7)],
]


# -- driving a query ------------------------------------------------------------------------------


def _run(
    engine: Any,
    root: Path,
    build: Callable[[DataFrame], DataFrame],
    batches: list[list[tuple]],
    start: Callable[[Any], Any],
    *,
    mode: str = "append",
    schema: str = KV,
    checkpoint: bool = True,
    timeout: float = 180,
    fails: bool = False,
) -> Any:
    """Start ``start(writer)`` over ``build`` of the files of ``root/input``, add ``batches`` one
    file at a time (each followed by ``processAllAvailable()``), stop, return the stopped query.
    Calling it again with the same ``root`` restarts the query on its checkpoint. With ``fails``
    the query is expected to fail: the first failure ends the run (see :func:`_failure`)."""
    spark_schema = StructType.fromDDL(schema)
    input_dir = root / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    first = len(list(input_dir.iterdir()))
    base = time.time() - 3600 + first
    df = build(engine.readStream.format("parquet").schema(schema).option("maxFilesPerTrigger", 1).load(str(input_dir)))
    writer = df.writeStream.outputMode(mode)
    if checkpoint:
        writer = writer.option("checkpointLocation", str(root / "checkpoint"))
    query = start(writer)
    name = engine_name(engine)
    try:
        _wait_idle(query, timeout, name)
        for i, rows in enumerate(batches, start=first):
            write_input_file(input_dir, i, rows, spark_schema, "parquet", base + i)
            _wait_idle(query, timeout, name)
    except Exception:
        if not fails:
            raise
        return query
    finally:
        query.stop()
    return query


def _progress(query: Any) -> list[dict[str, Any]]:
    """The progress of the executed batches, as plain dicts, in order."""
    out = []
    for p in query.recentProgress or []:
        d = json.loads(p.json) if hasattr(p, "json") else json.loads(json.dumps(p, default=str))
        if "addBatch" in (d.get("durationMs") or {}):
            out.append(d)
    return out


def _sink_brief(query: Any) -> list[tuple[int, int | None, str, int]]:
    """(batch id, input rows, sink description with identity hashes blanked, sink rows) per batch."""
    return [
        (p["batchId"], p.get("numInputRows"), _blank_hashes(p["sink"]["description"]), p["sink"]["numOutputRows"])
        for p in _progress(query)
    ]


def _blank_hashes(text: str) -> str:
    text = re.sub(r"\$\$\$Lambda[^@]*@", "$$$Lambda@", text)
    return re.sub(r"@[0-9a-f]+", "@H", text)


def _failure(query: Any) -> tuple[str, str | None, str, str]:
    """The query's failure as ``awaitTermination()`` raises it (type, condition, text) and as
    ``query.exception()`` shows it (text), with ids, traceback frames and the query report
    left out."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(120)
    except StreamingQueryException as exc:
        raised = exc
    else:
        raise AssertionError("the query did not fail")
    shown = query.exception()
    assert shown is not None
    cond = raised.getCondition() if hasattr(raised, "getCondition") else None
    return ("StreamingQueryException", cond, _normalise(str(raised)), _normalise(str(shown)))


def _normalise(text: str) -> str:
    text = text.split("\n=== Streaming Query ===", 1)[0].split("\n\nJVM stacktrace:", 1)[0]
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", text)
    # a traceback's frames name each engine's own code; its first and last lines are compared
    return re.sub(r"Traceback \(most recent call last\):\n(?:[ \t]+.*\n)*", "Traceback (most recent call last):\n", text)


def _kv_count(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


# -- noop -----------------------------------------------------------------------------------------


def _windowed_count(df: DataFrame) -> DataFrame:
    """Event time from ``v`` (seconds): the watermark moves, so no-data batches run and evict."""
    return (
        df.withColumn("t", F.timestamp_seconds("v"))
        .withWatermark("t", "1 second")
        .groupBy(F.window("t", "2 seconds"))
        .agg(F.count("*").alias("n"))
    )


@pytest.mark.parametrize("mode", ["append", "update", "complete", "append_watermark"])
def test_noop_sink_runs_batches_and_reports_like_spark(spark, ours, tmp_path, mode):
    build = {"append": lambda df: df.withColumn("v2", F.col("v") * 2), "append_watermark": _windowed_count}.get(mode, _kv_count)
    got = []
    for engine in (spark, ours()):
        root = tmp_path / f"noop-{engine_name(engine)}"
        q = _run(engine, root, build, INPUT, lambda w: w.format("noop").start(), mode=mode.split("_")[0])
        got.append((_sink_brief(q), [[s.get("numRowsTotal") for s in p.get("stateOperators", [])] for p in _progress(q)]))
    assert got[0][0][0][2] == "NoopTable"
    if mode == "append_watermark":  # no-data batches ran (more batches than files)
        assert len(got[0][0]) > len(INPUT)
    assert got[1] == got[0]


# -- foreachBatch: the partitions of a small batch -------------------------------------------------


def _sessions(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("t", F.timestamp_seconds("v"))
        .withWatermark("t", "1 second")
        .groupBy("k", F.session_window("t", "2 seconds"))
        .agg(F.count("*").alias("n"))
    )


def _projected_count(df: DataFrame) -> DataFrame:
    """A projection of the user's above the aggregation, which reads each row's partition: the
    rows must be in their partitions inside the batch's job."""
    return _kv_count(df).select("k", (F.col("n") * 2).alias("n2"), F.spark_partition_id().alias("in_job"))


SMALL_BATCH_QUERIES: dict[str, tuple[Callable[[DataFrame], DataFrame], str, bool, bool]] = {
    # name: (query, output mode, whether the rows take their partitions after the batch's job,
    # whether Spark's engine puts a batch's rows in more than one partition for INPUT)
    "aggregation": (_kv_count, "update", True, True),
    "windowed": (_windowed_count, "append", True, False),
    "sessions": (_sessions, "append", True, False),
    "deduplication": (lambda df: df.dropDuplicates(["k"]), "append", True, True),
    "projection above": (_projected_count, "update", False, True),
    # Spark evaluates the expression around the call in the state partition (its Final step)
    "partition in the output": (lambda df: df.groupBy("k").agg((F.count("*") * 10 + F.spark_partition_id()).alias("x")), "update", False, True),
    # two stateful operators: the split would reach the deduplication's step too
    "deduplication then aggregation": (lambda df: _kv_count(df.dropDuplicates(["k", "v"])), "update", False, True),
}


def _partitions_recorder(out_dir: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that writes, per batch, how many partitions the DataFrame has
    and each partition's rows (sorted within it: the order of a state store's rows is its own)."""

    def record(df: DataFrame, batch_id: int) -> None:
        parts: dict[int, list[str]] = {}
        for row in df.withColumn("__partition", F.spark_partition_id()).collect():
            values = row.asDict()
            parts.setdefault(values.pop("__partition"), []).append(json.dumps(values, sort_keys=True, default=str))
        seen = {"partitions": df.rdd.getNumPartitions(), "rows": {str(p): sorted(r) for p, r in sorted(parts.items())}}
        with open(os.path.join(out_dir, f"{batch_id}.json"), "w") as fh:
            json.dump(seen, fh)

    return record


@pytest.mark.parametrize("name", sorted(SMALL_BATCH_QUERIES))
def test_foreach_batch_of_a_one_task_batch_has_sparks_partitions(spark, ours, tmp_path, caplog, name):
    """From its second batch on, a small batch runs its state partitions in one task
    (``runtime.small_batches``); the DataFrame a ``foreachBatch`` function gets still has
    Spark's partitions, each with the rows Spark's has there, whether the rows take them after
    the batch's job (``state_step.split_routed_rows``) or inside it (a projection above reads
    them)."""
    import logging

    build, mode, after_job, spread = SMALL_BATCH_QUERIES[name]
    got = []
    for engine in (spark, ours()):
        out = tmp_path / f"parts-{engine_name(engine)}"
        out.mkdir()
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="statestream.runtime.microbatch"):
            _run(engine, tmp_path / f"fb-{engine_name(engine)}", build, INPUT, lambda w: w.foreachBatch(_partitions_recorder(str(out))).start(), mode=mode)
        got.append({int(os.path.basename(p)[:-5]): json.load(open(p)) for p in glob.glob(str(out / "*.json"))})
    one_task = [r for r in caplog.records if "in one task" in r.getMessage()]
    split = [r for r in caplog.records if "take their partitions after the batch's job" in r.getMessage()]
    assert one_task, "no batch ran its state partitions in one task"
    assert len(split) == (len(one_task) if after_job else 0), (len(split), len(one_task))
    assert {b["partitions"] for b in got[0].values()} == {2}
    if spread:  # else a split that put every row in partition 0 would go unseen
        assert any(len(b["rows"]) > 1 for b in got[0].values()), "every batch had its rows in one partition"
    assert sum(len(rows) for b in got[0].values() for rows in b["rows"].values()) > 0
    assert got[1] == got[0]


# -- foreach --------------------------------------------------------------------------------------


def _recording_writer(out_dir: str, skip_partition: int | None = None) -> Any:
    """A ForeachWriter that leaves one JSON file per task: its open() arguments, the rows it
    processed and the error close() got. Defined in a function, so it is pickled by value into
    the Python workers."""

    class Recorder:
        def __init__(self) -> None:
            self.calls: dict[str, Any] = {}

        def open(self, partition_id: int, epoch_id: int) -> bool:
            self.calls = {"open": [partition_id, epoch_id], "rows": []}
            return partition_id != skip_partition

        def process(self, row: Any) -> None:
            self.calls["rows"].append(row.asDict())

        def close(self, error: BaseException | None) -> None:
            self.calls["close"] = repr(error)
            with open(os.path.join(out_dir, f"{uuid.uuid4().hex}.json"), "w") as fh:
                json.dump(self.calls, fh)

    return Recorder()


def _recorded(out_dir: str) -> list[Any]:
    calls = []
    for path in glob.glob(os.path.join(out_dir, "*.json")):
        with open(path) as fh:
            c = json.load(fh)
        c["rows"] = sorted(c["rows"], key=lambda r: json.dumps(r, sort_keys=True))
        calls.append(c)
    return sorted(calls, key=lambda c: (c["open"][1], c["open"][0], json.dumps(c["rows"])))


@pytest.mark.parametrize("skip_partition", [None, 0])
def test_foreach_writer_open_process_close_per_partition(spark, ours, tmp_path, skip_partition):
    got = []
    for engine in (spark, ours()):
        out = tmp_path / f"calls-{engine_name(engine)}"
        out.mkdir()
        writer = _recording_writer(str(out), skip_partition)
        q = _run(engine, tmp_path / f"fe-{engine_name(engine)}", _kv_count, INPUT, lambda w: w.foreach(writer).start(), mode="update")
        got.append((_recorded(str(out)), _sink_brief(q)))
    calls, brief = got[0]
    # Spark's side as the brief describes it: every partition of every batch opened with the
    # batch id as epoch, closed with no error; process skipped where open() said no
    assert {tuple(c["open"]) for c in calls} == {(p, e) for p in (0, 1) for e in range(len(INPUT))}
    assert all(c["close"] == "None" for c in calls)
    if skip_partition is not None:
        assert not any(c["rows"] for c in calls if c["open"][0] == skip_partition)
    assert sum(len(c["rows"]) for c in calls) > 0
    assert brief[0][2].startswith("ForeachWriterTable(org.apache.spark.sql.execution.python.streaming.PythonForeachWriter@H")
    assert got[1] == got[0]


def _row_logger(out_dir: str) -> Callable[[Any], None]:
    def log_row(row: Any) -> None:
        with open(os.path.join(out_dir, f"{uuid.uuid4().hex}.json"), "w") as fh:
            json.dump(row.asDict(), fh)

    return log_row


def test_foreach_plain_function_gets_every_row(spark, ours, tmp_path):
    got = []
    for engine in (spark, ours()):
        out = tmp_path / f"rows-{engine_name(engine)}"
        out.mkdir()
        fn = _row_logger(str(out))
        q = _run(engine, tmp_path / f"fef-{engine_name(engine)}", lambda df: df.filter("v > 1"), INPUT, lambda w: w.foreach(fn).start())
        rows = sorted(json.dumps(json.load(open(p)), sort_keys=True) for p in glob.glob(str(out / "*.json")))
        got.append((rows, _sink_brief(q)))
    assert len(got[0][0]) == 6
    assert got[1] == got[0]


def _failing_writer(where: str) -> Any:
    class Failing:
        def open(self, partition_id: int, epoch_id: int) -> bool:
            if where == "open":
                raise RuntimeError("open failed")
            return True

        def process(self, row: Any) -> None:
            if where == "process":
                raise ValueError(f"bad row {row.k}")

        def close(self, error: BaseException | None) -> None:
            if where == "close":
                raise KeyError("close failed")

    return Failing()


@pytest.mark.parametrize("where", ["open", "process", "close"])
def test_foreach_failure_is_spark_foreach_user_function_error(spark, ours, tmp_path, where):
    got = []
    for engine in (spark, ours()):
        root = tmp_path / f"fefail-{engine_name(engine)}"
        writer = _failing_writer(where)
        # a single key, so one task fails and the reason is one traceback on both engines
        q = _run(engine, root, lambda df: df.filter("k = 'c'"), [INPUT[1]], lambda w: w.foreach(writer).start(), fails=True)
        got.append(_failure(q))
    assert got[0][1] == "STREAM_FAILED"
    assert "[FOREACH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach sink. Reason: Traceback" in got[0][2]
    assert got[1] == got[0]


def test_foreach_refuses_writer_without_process(spark, ours):
    from pyspark.errors import PySparkAttributeError

    texts = []
    for engine in (spark, ours()):
        df = engine.readStream.format("rate").load()
        for bad in (object(), type("P", (), {"process": 1})(), type("O", (), {"process": lambda s, r: None, "open": 3})()):
            with pytest.raises(PySparkAttributeError) as err:
                df.writeStream.foreach(bad)
            texts.append((err.value.getCondition(), str(err.value)))
    assert texts[:3] == texts[3:]
    assert texts[0] == ("ATTRIBUTE_NOT_CALLABLE", "[ATTRIBUTE_NOT_CALLABLE] Attribute `process` in provided object `f` is not callable.")


@pytest.mark.parametrize("sink", ["memory", "foreach", "foreachBatch"])
def test_partition_by_refused_like_spark(spark, ours, tmp_path, sink):
    from pyspark.errors import AnalysisException

    texts = []
    for engine in (spark, ours()):
        w = engine.readStream.format("rate").load().writeStream.partitionBy("value").queryName(f"pb_{uuid.uuid4().hex[:6]}")
        w = {"memory": lambda: w.format("memory"), "foreach": lambda: w.foreach(lambda r: None), "foreachBatch": lambda: w.foreachBatch(lambda d, i: None)}[sink]()
        with pytest.raises(AnalysisException) as err:
            w.option("checkpointLocation", str(tmp_path / f"pb-{engine_name(engine)}")).start().stop()
        texts.append((err.value.getCondition(), error_text(err.value)))
    assert texts[0][1] == f"'{sink}' does not support partitioning."
    assert texts[1] == texts[0]


# -- foreachBatch failures ------------------------------------------------------------------------


def _raise_in_batch(df: DataFrame, batch_id: int) -> None:
    if df.count() > 0:
        raise ValueError(f"boom in batch {batch_id}")


def test_foreach_batch_failure_is_spark_foreach_batch_user_function_error(spark, ours, tmp_path):
    got = []
    for engine in (spark, ours()):
        q = _run(engine, tmp_path / f"fbfail-{engine_name(engine)}", lambda df: df, INPUT[:1], lambda w: w.foreachBatch(_raise_in_batch).start(), fails=True)
        got.append(_failure(q))
    kind, cond, raised, shown = got[0]
    assert cond == "STREAM_FAILED"
    assert raised == (
        "[STREAM_FAILED] Query [id = <id>, runId = <id>] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
        "An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the "
        "Python Proxy. Return Message: Traceback (most recent call last):\nValueError: boom in batch 0\n SQLSTATE: 39000 "
        "SQLSTATE: XXKST"
    )
    assert shown == (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        "ValueError: boom in batch 0\n"
    )
    assert got[1] == got[0]


# -- memory sink ----------------------------------------------------------------------------------


def _view(spark: Any, name: str) -> tuple[bool, list[tuple], str | None]:
    if not spark.catalog.tableExists(name):
        return (False, [], None)
    t = spark.table(name)
    return (True, sorted(tuple(r) for r in t.collect()), t.schema.simpleString())


def test_memory_sink_complete_restart_without_new_data_registers_the_view(spark, ours, tmp_path):
    got = []
    for engine in (spark, ours()):
        name = f"mem_restart_{engine_name(engine).lower()}"
        root = tmp_path / f"mem-{engine_name(engine)}"
        start = lambda w: w.format("memory").queryName(name).start()  # noqa: E731
        _run(engine, root, _kv_count, INPUT[:2], start, mode="complete")
        first = _view(spark, name)
        spark.catalog.dropTempView(name)
        q = _run(engine, root, _kv_count, [], start, mode="complete")
        got.append((first, _view(spark, name), [p["batchId"] for p in _progress(q)]))
    assert got[0][0][0] and got[0][0][1]
    assert got[0][1] == (True, [], "struct<k:string,n:bigint,s:bigint>")
    assert got[1] == got[0]


@pytest.mark.parametrize("mode", ["append", "update"])
def test_memory_sink_refuses_append_or_update_restart(spark, ours, tmp_path, mode):
    from pyspark.errors import AnalysisException

    got = []
    for engine in (spark, ours()):
        name = f"mem_norestart_{engine_name(engine).lower()}_{mode}"
        root = tmp_path / f"memn-{engine_name(engine)}"
        build = (lambda df: df) if mode == "append" else _kv_count
        start = lambda w: w.format("memory").queryName(name).start()  # noqa: E731
        _run(engine, root, build, INPUT[:1], start, mode=mode)
        before = _view(spark, name)
        with pytest.raises(AnalysisException) as err:
            _run(engine, root, build, [], start, mode=mode)
        text = error_text(err.value).replace(str(root), "<root>")
        got.append((err.value.getCondition(), text, before == _view(spark, name)))
    assert got[0][1] == "This query does not support recovering from checkpoint location. Delete <root>/checkpoint/offsets to start over."
    assert got[0][2]  # the earlier run's view is left as it was
    assert got[1] == got[0]


# -- toTable --------------------------------------------------------------------------------------


@pytest.fixture
def db(spark, tmp_path):
    """A database located under ``tmp_path``, so managed tables stay out of the working
    directory's ``spark-warehouse``; dropped with its tables afterwards."""
    name = f"ss_sinks_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    yield name
    spark.sql(f"DROP DATABASE {name} CASCADE")


def _table_info(spark: Any, name: str, root: Path | None = None) -> dict[str, Any]:
    info = json.loads(spark.sql(f"DESCRIBE TABLE EXTENDED {name} AS JSON").collect()[0][0])
    keep = {k: info.get(k) for k in ("type", "provider", "partition_columns", "columns")}
    loc = info["location"]
    keep["location"] = loc.replace(f"file:{root}", "<root>") if root is not None else loc.rsplit("/", 1)[-1] == name.split(".")[-1]
    return keep


def _table_rows(spark: Any, name: str) -> list[tuple]:
    return sorted((tuple(r) for r in spark.table(name).collect()), key=repr)


@pytest.mark.parametrize(
    "variant",
    ["default", "json_partitioned_external", "csv_format_arg"],
)
def test_to_table_creates_and_appends_like_spark(spark, ours, tmp_path, db, variant):
    got = []
    for engine in (spark, ours()):
        tag = engine_name(engine).lower()
        name = f"{db}.tt_{variant}_{tag}"
        root = tmp_path / f"tt-{tag}"
        ext = root / "external"

        def start(w: Any) -> Any:
            if variant == "default":
                return w.toTable(name)
            if variant == "json_partitioned_external":
                return w.format("json").partitionBy("k").option("path", str(ext)).toTable(name)
            return w.toTable(name, format="csv", outputMode="append")

        q = _run(engine, root, lambda df: df.withColumn("v2", F.col("v") + 1), INPUT, start)
        rows = _table_rows(spark, name)
        info = _table_info(spark, name, root if variant == "json_partitioned_external" else None)
        desc = _sink_brief(q)
        # a second query (its own checkpoint) on the now existing table: its batch 0 is one the
        # table's _spark_metadata log already holds, so Spark's file sink skips it
        _run(engine, tmp_path / f"tt2-{tag}", lambda df: df.withColumn("v2", F.col("v") + 1), INPUT[:1], start)
        got.append((rows, info, [(b, n, d.replace(str(root), "<root>").replace(str(tmp_path), "<tmp>").replace(name.split(".")[-1], "<t>"), r) for b, n, d, r in desc], _table_rows(spark, name)))
    rows, info, desc, rows2 = got[0]
    assert len(rows) == 7 and rows2 == rows
    assert desc[0][2] == {
        "default": "FileSink[file:<tmp>/warehouse/<t>]",
        "json_partitioned_external": "FileSink[file:<root>/external]",
        "csv_format_arg": "FileSink[file:<tmp>/warehouse/<t>]",
    }[variant]
    assert got[1] == got[0]


@pytest.mark.parametrize("case", ["temp_view", "view", "other_provider", "no_checkpoint", "update_mode"])
def test_to_table_refusals_like_spark(spark, ours, tmp_path, db, case):
    from pyspark.errors import AnalysisException

    got = []
    for engine in (spark, ours()):
        tag = engine_name(engine).lower()
        name = f"ttr_{case}_{tag}" if case == "temp_view" else f"{db}.ttr_{case}_{tag}"
        if case == "temp_view":
            spark.range(1).createOrReplaceTempView(name)
        elif case == "view":
            spark.sql(f"CREATE VIEW {name} AS SELECT 1 AS a")
        elif case == "other_provider":
            spark.sql(f"CREATE TABLE {name} (k STRING, v BIGINT) USING json")
        (tmp_path / "empty-input").mkdir(exist_ok=True)
        df = engine.readStream.format("parquet").schema(KV).load(str(tmp_path / "empty-input"))
        if case == "update_mode":
            df = _kv_count(df)
        w = df.writeStream.outputMode("update" if case == "update_mode" else "append")
        if case != "no_checkpoint":
            w = w.option("checkpointLocation", str(tmp_path / f"ttr-{tag}"))
        with pytest.raises(AnalysisException) as err:
            w.toTable(name).stop()
        exists = spark.catalog.tableExists(name)
        got.append((err.value.getCondition(), error_text(err.value).replace(name, "<t>"), exists))
        if case == "temp_view":
            spark.catalog.dropTempView(name)
    assert got[1] == got[0]


def test_to_table_with_console_format_refused_like_spark(spark, ours, tmp_path, db):
    """``format("console")`` is not a table provider: Spark refuses to create the table (an
    explicit format is told apart from no format, which is ``spark.sql.sources.default``)."""
    got = []
    for engine in (spark, ours()):
        name = f"{db}.tt_console_{engine_name(engine).lower()}"
        w = engine.readStream.format("rate").load().writeStream.format("console")
        try:
            w.option("checkpointLocation", str(tmp_path / f"cons-{engine_name(engine)}")).toTable(name).stop()
        except Exception as exc:  # noqa: BLE001 - compared by condition
            got.append(exc.getCondition() if hasattr(exc, "getCondition") else type(exc).__name__)
        else:
            got.append(None)
    assert got[0] == "CANNOT_CREATE_DATA_SOURCE_TABLE.EXTERNAL_METADATA_UNSUPPORTED"
    assert got[1] == got[0]


def test_to_table_cluster_by_like_spark(spark, ours, tmp_path, db):
    """``clusterBy`` with ``toTable``: a new table is created clustered by those columns (the
    stream's spelling), with Spark's table properties; an unknown column, or ``partitionBy`` as
    well, is refused with Spark's errors and no table is created."""
    from pyspark.errors import AnalysisException

    got = []
    for engine in (spark, ours()):
        tag = engine_name(engine).lower()
        name = f"{db}.tt_cluster_{tag}"
        q = _run(engine, tmp_path / f"cl-{tag}", lambda df: df, INPUT[:2], lambda w: w.clusterBy("K", "v").toTable(name))
        info = json.loads(spark.sql(f"DESCRIBE TABLE EXTENDED {name} AS JSON").collect()[0][0])
        kept = {k: info.get(k) for k in ("provider", "clustering_columns", "partition_columns", "table_properties", "columns")}
        refusals = []
        for setup in (lambda w: w.clusterBy("nope"), lambda w: w.clusterBy("k").partitionBy("v")):
            bad = f"{db}.tt_cluster_bad_{tag}"
            w = engine.readStream.format("parquet").schema(KV).load(str(tmp_path / f"cl-{tag}" / "input")).writeStream
            with pytest.raises(AnalysisException) as err:
                setup(w.option("checkpointLocation", str(tmp_path / f"cl-bad-{tag}"))).toTable(bad).stop()
            refusals.append((err.value.getCondition(), error_text(err.value), spark.catalog.tableExists(bad)))
        got.append((kept, _table_rows(spark, name), _sink_brief(q)[0][3], refusals))
    assert got[0][0]["clustering_columns"] == ["k", "v"]
    assert got[1] == got[0]


@pytest.mark.parametrize("sink", ["parquet", "noop", "memory", "foreachBatch"])
def test_cluster_by_with_a_sink_like_spark(spark, ours, tmp_path, sink):
    """``clusterBy`` and ``start()``: every sink refuses it together with ``partitionBy``; a file
    sink checks the column names (and writes the same files as without), the others ignore them."""
    from pyspark.errors import AnalysisException

    got = []
    for engine in (spark, ours()):
        tag = engine_name(engine)

        def writer(w: Any, n: int) -> Any:
            if sink == "foreachBatch":
                return w.foreachBatch(lambda df, batch_id: None)
            w = w.format(sink).queryName(f"cluster_{sink}_{tag}_{n}")
            return w.option("path", str(tmp_path / f"out-{tag}-{n}")) if sink == "parquet" else w

        outcomes = []
        for n, setup in enumerate((lambda w: w.clusterBy("nope"), lambda w: w.clusterBy("k").partitionBy("k"), lambda w: w.clusterBy(["K"]))):
            try:
                q = _run(engine, tmp_path / f"{sink}-{tag}-{n}", lambda df: df, INPUT[:1], lambda w: setup(writer(w, n)).start())
            except AnalysisException as exc:
                outcomes.append((exc.getCondition(), error_text(exc)))
            else:
                outcomes.append([(b, r) for b, _, _, r in _sink_brief(q)])
        if sink == "parquet":
            outcomes.append(_files_as_rows(spark, tmp_path / f"out-{tag}-2", "parquet", "v BIGINT")["batches"])
        got.append(outcomes)
    assert got[1] == got[0]


def test_writer_without_format_is_spark_sql_sources_default(spark, ours, tmp_path):
    """A writer whose format was never set writes with ``spark.sql.sources.default`` (parquet), as
    Spark's does: without a path ``start()`` fails as a file sink does, with one it writes the
    same files; the conf is read when the query starts."""
    from pyspark.errors import IllegalArgumentException

    refused = []
    for engine in (spark, ours()):
        w = engine.readStream.format("rate").load().writeStream
        with pytest.raises(IllegalArgumentException) as err:
            w.option("checkpointLocation", str(tmp_path / f"nopath-{engine_name(engine)}")).start().stop()
        refused.append((err.value.getCondition(), error_text(err.value)))
    assert refused[0] == ("_LEGACY_ERROR_TEMP_2047", "'path' is not specified.")
    assert refused[1] == refused[0]
    got = []
    with session_confs(spark, {"spark.sql.sources.default": "json"}):
        for engine in (spark, ours()):
            out = tmp_path / f"default-{engine_name(engine)}" / "out"
            _run(engine, tmp_path / f"default-{engine_name(engine)}", lambda df: df, INPUT, lambda w: w.start(str(out)))
            got.append(_files_as_rows(spark, out, "json", "v BIGINT")["batches"])
    assert got[0][0]["files"][0].endswith(".json")
    assert got[1] == got[0]


def test_writer_option_set_to_none_is_null_like_pyspark(spark, ours, tmp_path):
    """PySpark hands ``option(k, None)`` to Spark as null, not the text ``"None"``: a null
    ``checkpointLocation`` fails ``start()`` with Hadoop's error, and a console sink option
    (a V2 sink's) set to None takes its default."""
    from pyspark.errors import IllegalArgumentException

    refused, ran = [], []
    for engine in (spark, ours()):
        w = engine.readStream.format("rate").load().writeStream.format("noop")
        with pytest.raises(IllegalArgumentException) as err:
            w.option("checkpointLocation", None).start().stop()
        refused.append((err.value.getCondition(), error_text(err.value)))
        q = _run(engine, tmp_path / f"console-{engine_name(engine)}", lambda df: df, INPUT[:1], lambda w: w.format("console").options(numRows=None, truncate=None).start())
        ran.append([(b, r) for b, _, _, r in _sink_brief(q)])
    assert refused[0] == (None, "Can not create a Path from a null string")
    assert refused[1] == refused[0]
    assert ran[1] == ran[0] == [(0, 3)]


def test_memory_sink_without_query_name_refused_like_spark(spark, ours):
    from pyspark.errors import AnalysisException

    got = []
    for engine in (spark, ours()):
        with pytest.raises(AnalysisException) as err:
            engine.readStream.format("rate").load().writeStream.format("memory").start().stop()
        got.append((err.value.getCondition(), error_text(err.value)))
    assert got[0] == ("_LEGACY_ERROR_TEMP_1194", "queryName must be specified for memory sink.")
    assert got[1] == got[0]


# -- file sinks with partitionBy ------------------------------------------------------------------

FILE_INPUT = [
    [("a", 1), ("b", 2), ("a", 3)],
    [("x y", 4), ("p/q:r", 5), (None, 6)],  # partition values that need escaping, and null
    [],
    [("a", 7), ("\u00fc&=,", 8)],  # a non-ASCII letter, and characters URIs keep or Hive escapes
]


def _files_as_rows(spark: Any, out: Path, fmt: str, data_schema: str) -> dict[str, Any]:
    """What the sink committed, batch by batch: the metadata log's files (uuids blanked) and
    the rows read back from each batch's files, with the partition column from the directory."""
    meta = out / "_spark_metadata"
    log_names = sorted((n for n in os.listdir(meta) if re.fullmatch(r"\d+(\.compact)?", n)), key=lambda n: int(n.split(".")[0]))
    batches = []
    for name in log_names:
        lines = (meta / name).read_text().split("\n")
        assert lines[0] == "v1"
        entries = [json.loads(x) for x in lines[1:] if x]
        keys = {tuple(e) for e in entries}
        files = sorted(re.sub(r"part-\d{5}-[0-9a-f-]{36}", "part-N-UUID", e["path"].split(str(out), 1)[1]) for e in entries)
        paths = [unquote(e["path"][len("file://") :]) for e in entries]
        assert all(e["path"].startswith("file:///") for e in entries)
        rows: list[str] = []
        if paths and not name.endswith(".compact"):
            reader = spark.read.format(fmt).option("basePath", str(out)).schema(data_schema + ", k STRING")
            if fmt == "csv":
                reader = reader.option("header", "true")
            rows = sorted(json.dumps(r.asDict(), sort_keys=True) for r in reader.load(paths).collect())
        batches.append({"log": name, "keys": sorted(keys), "files": files, "rows": rows, "actions": sorted({e["action"] for e in entries})})
    return {"batches": batches, "dirs": sorted(p for p in os.listdir(out) if not p.startswith((".", "_")))}


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv", "orc", "text"])
def test_file_sink_partition_by_writes_the_same_files_as_spark(spark, ours, tmp_path, fmt):
    if fmt == "text":
        build = lambda df: df.select(F.concat_ws("|", F.col("v").cast("string"), F.lit("t")).alias("value"), "k")  # noqa: E731
        data_schema = "value STRING"
    else:
        build = lambda df: df.select((F.col("v") * 10).alias("v10"), "k")  # noqa: E731
        data_schema = "v10 BIGINT"
    # batch 2 is compacted
    with session_confs(spark, {"spark.sql.streaming.fileSink.log.compactInterval": "3"}):
        got = []
        for engine in (spark, ours()):
            root = tmp_path / f"fs-{engine_name(engine)}"
            out = root / "out"

            def start(w: Any) -> Any:
                w = w.format(fmt).partitionBy("k").option("path", str(out))
                return (w.option("header", "true") if fmt == "csv" else w).start()

            q = _run(engine, root, build, FILE_INPUT, start)
            got.append((_files_as_rows(spark, out, fmt, data_schema), [(b, n, d.replace(str(out), "<out>"), r) for b, n, d, r in _sink_brief(q)]))
    files, brief = got[0]
    assert [b["log"] for b in files["batches"]] == ["0", "1", "2.compact", "3"]
    assert files["dirs"] == ["k=__HIVE_DEFAULT_PARTITION__", "k=a", "k=b", "k=p%2Fq%3Ar", "k=x y", "k=\u00fc&%3D,"]
    assert brief[0][2] == "FileSink[file:<out>]"
    assert got[1][0] == got[0][0]
    assert got[1][1] == got[0][1]


def _frames(text: str) -> list[str]:
    """``file name:function`` of each traceback frame quoted in an error text."""
    return [f"{os.path.basename(m.group(1))}:{m.group(2)}" for m in re.finditer(r'File "([^"]+)", line \d+, in (\S+)', text)]


def test_foreach_batch_failure_traceback_frames_like_spark(spark, ours, tmp_path):
    """Declared in ``tests/known_gaps.py``: the frames quoted in the reason are each engine's own."""
    got = []
    for engine in (spark, ours()):
        q = _run(engine, tmp_path / f"fbframes-{engine_name(engine)}", lambda df: df, INPUT[:1], lambda w: w.foreachBatch(_raise_in_batch).start(), fails=True)
        try:
            q.awaitTermination(120)
        except Exception as exc:  # noqa: BLE001 - the text is what is compared
            got.append(_frames(str(exc).split("\n=== Streaming Query ===")[0]))
    assert got[0][-1] == "test_sinks_more.py:_raise_in_batch"
    assert got[1] == got[0]
