"""PySpark's Python Data Source API on a stream: sources and sinks written here in Python,
registered with ``spark.dataSource.register``, run by Spark's engine and by statestream (a
session served by ``statestream.enable``), and compared batch by batch.

The sources count: record ``i`` is ``(i, "k<i % 3>", <2026-01-01 + i s>)``, and the latest offset
is whatever a small JSON file next to the test says (``{"end": n}``), so the test decides what
each trigger finds, for both engines alike. Every call the driver makes of ``commit`` is appended to
a file, so that the calls can be compared too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)

import statestream
from tests.differential.harness import assert_same_batches, engine_name, run_stream

T0 = dt.datetime(2026, 1, 1)

# the classes below go to Spark's Python workers by value: this test module is not importable there
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _record(i: int) -> tuple:
    return (i, f"k{i % 3}", T0 + dt.timedelta(seconds=i))


def _set_end(control: Path, end: int) -> None:
    """Move the source's end; atomically, as the query's thread may be reading the file."""
    part = control.with_suffix(".part")
    part.write_text(json.dumps({"end": end}))
    os.replace(part, control)


def _available(options: Any) -> int:
    with open(options["path"], encoding="utf-8") as f:
        return int(json.load(f)["end"])


def _log_call(options: Any, call: str, value: Any) -> None:
    with open(options["path"] + ".calls", "a", encoding="utf-8") as f:
        f.write(json.dumps([call, value], sort_keys=True) + "\n")


class RangePartition(InputPartition):
    def __init__(self, low: int, high: int) -> None:
        super().__init__((low, high))
        self.low, self.high = low, high


class CountingReader(DataSourceStreamReader):
    def __init__(self, options: Any) -> None:
        self.options = options
        self.splits = int(options.get("partitions", "2"))

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self) -> dict:
        return {"offset": _available(self.options)}

    def partitions(self, start: dict, end: dict) -> list:
        low, high = start["offset"], end["offset"]
        step = max(1, -(-(high - low) // self.splits))
        return [RangePartition(a, min(a + step, high)) for a in range(low, high, step)]

    def read(self, partition: RangePartition) -> Iterator[tuple]:
        for i in range(partition.low, partition.high):
            yield _record(i)

    def commit(self, end: dict) -> None:
        _log_call(self.options, "commit", end)


class SimpleCountingReader(SimpleDataSourceStreamReader):
    """Reads on the driver: at most three records a trigger."""

    def __init__(self, options: Any) -> None:
        self.options = options

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        end = min(start["offset"] + 3, _available(self.options))
        return iter([_record(i) for i in range(start["offset"], end)]), {"offset": end}

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        return iter([_record(i) for i in range(start["offset"], end["offset"])])

    def commit(self, end: dict) -> None:
        _log_call(self.options, "commit", end)


class CountingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statestream_counting"

    def schema(self) -> str:
        return "id LONG, key STRING, ts TIMESTAMP"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return CountingReader(self.options)


class SimpleCountingSource(CountingSource):
    @classmethod
    def name(cls) -> str:
        return "statestream_simple_counting"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        from pyspark.errors import PySparkNotImplementedError

        raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})

    def simpleStreamReader(self, schema: Any) -> SimpleDataSourceStreamReader:
        return SimpleCountingReader(self.options)


class BatchOnlySource(DataSource):
    """A data source with no stream reader."""

    @classmethod
    def name(cls) -> str:
        return "statestream_batch_only"

    def schema(self) -> str:
        return "x INT"


class BrokenReader(CountingReader):
    def read(self, partition: RangePartition) -> Iterator[tuple]:
        raise ValueError(f"cannot read records {partition.low} to {partition.high}")


class BrokenSource(CountingSource):
    @classmethod
    def name(cls) -> str:
        return "statestream_broken"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BrokenReader(self.options)


class FilesMessage(WriterCommitMessage):
    def __init__(self, rows: list) -> None:
        self.rows = rows


class JsonLinesWriter(DataSourceStreamWriter):
    """Each task returns its rows in its commit message; ``commit`` writes a batch's rows, in
    task order, with the batch id and the number of messages, to one file a batch."""

    def __init__(self, options: Any, schema: Any, overwrite: bool) -> None:
        self.target, self.overwrite, self.columns = options["path"], overwrite, schema.fieldNames()

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return FilesMessage([[str(v) for v in row] for row in iterator])

    def commit(self, messages: list, batchId: int) -> None:
        rows = sorted(r for m in messages for r in m.rows)
        record = {"batch": batchId, "overwrite": self.overwrite, "columns": self.columns, "rows": rows, "messages": len(messages)}
        with open(os.path.join(self.target, f"batch-{batchId}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f)

    def abort(self, messages: list, batchId: int) -> None:
        open(os.path.join(self.target, f"aborted-{batchId}"), "w").close()


class JsonLinesSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statestream_json_lines"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return JsonLinesWriter(self.options, schema, overwrite)


class HalfFailingWriter(JsonLinesWriter):
    """The task of the records from 2 on fails once the other task has finished writing;
    ``abort`` records the messages it was given (a message: its rows; None: no message)."""

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        import time

        rows = [[str(v) for v in row] for row in iterator]
        done = os.path.join(self.target, "first-task-done")
        if any(int(r[0]) >= 2 for r in rows):
            deadline = time.monotonic() + 60
            while not os.path.exists(done) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # the other task's result reaches the driver first
            raise ValueError("cannot write records from 2 on")
        open(done, "w").close()
        return FilesMessage(rows)

    def abort(self, messages: list, batchId: int) -> None:
        given = [None if m is None else sorted(m.rows) for m in messages]
        with open(os.path.join(self.target, f"aborted-{batchId}.json"), "w", encoding="utf-8") as f:
            json.dump(given, f)


class HalfFailingSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statestream_half_failing"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return HalfFailingWriter(self.options, schema, overwrite)


@pytest.fixture
def served(spark):
    """Registers the sources (once) and gives a context in which the shared session is served by
    statestream: each test runs Spark's engine on the session first, then statestream inside
    the context (``statestream.enable`` for the run, ``disable`` after it)."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    for cls in (CountingSource, SimpleCountingSource, JsonLinesSink, BatchOnlySource, BrokenSource, HalfFailingSink):
        if not manager.dataSourceExists(cls.name()):
            spark.dataSource.register(cls)

    @contextlib.contextmanager
    def on_statestream() -> Iterator[Any]:
        try:
            yield statestream.enable(spark)
        finally:
            statestream.disable(spark)

    return on_statestream


def _windowed(df):
    return (
        df.withWatermark("ts", "4 seconds")
        .groupBy(F.window("ts", "5 seconds"), "key")
        .agg(F.count("*").alias("n"), F.sum("id").alias("s"))
    )


def _run(engine, name: str, ends: list[int], tmp_path: Path, tag: str, build=_windowed, mode: str = "append", workdir: Path | None = None):
    """Run ``build`` over the source ``name`` on ``engine``; before each wait the source's end
    moves to the next of ``ends``. Returns the run and the driver's calls."""
    control = tmp_path / f"{tag}.json"
    if not control.exists():
        control.write_text(json.dumps({"end": 0}))

    def feed(i: int, _batch: Any) -> None:
        _set_end(control, ends[i])

    def source(s):
        return s.readStream.format(name).option("path", str(control)).option("partitions", "3").load()

    assert engine_name(engine) == ("spark" if tag == "spark" else "statestream")
    run = run_stream(engine, build, [[]] * len(ends), "id LONG", mode, tmp_path, source=source, feed=feed, workdir=workdir)
    calls_file = Path(str(control) + ".calls")
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []
    return run, calls


def _offsets(run) -> list[tuple]:
    return [(b.batch_id, b.progress["sources"][0]["startOffset"], b.progress["sources"][0]["endOffset"]) for b in run.batches if b.progress]


@pytest.mark.parametrize("name", ["statestream_counting", "statestream_simple_counting"])
def test_stream_reader_batch_by_batch(spark, served, tmp_path, name):
    """Rows, watermarks, state and event-time statistics of every batch; each batch's start and
    end offsets in progress; every ``commit`` call the driver made."""
    ends = [4, 9, 9, 17, 30]
    expected, spark_calls = _run(spark, name, ends, tmp_path, "spark")
    with served() as ours:
        actual, our_calls = _run(ours, name, ends, tmp_path, "ours")
    assert_same_batches(expected, actual)
    assert sum(len(b.rows) for b in expected.batches) >= 5
    assert _offsets(actual) == _offsets(expected)
    assert our_calls == spark_calls and spark_calls


def test_restart_resumes_exactly_once(spark, served, tmp_path):
    """Stopped after two ends and started again on its checkpoint: the batches of both starts
    are Spark's, and no record is read twice or lost (the sums of ids cover each id once)."""
    runs = {}
    for tag in ("spark", "ours"):
        workdir = tmp_path / f"work-{tag}"
        with served() if tag == "ours" else contextlib.nullcontext(spark) as engine:
            first, _ = _run(engine, "statestream_counting", [5, 11], tmp_path, tag, workdir=workdir, build=_counted, mode="update")
            second, calls = _run(engine, "statestream_counting", [16, 20], tmp_path, tag, workdir=workdir, build=_counted, mode="update")
        runs[tag] = (first, second, calls)
    for i in (0, 1):
        assert_same_batches(runs["spark"][i], runs["ours"][i])
    assert runs["ours"][2] == runs["spark"][2]
    last = max(runs["ours"][1].batches, key=lambda b: b.batch_id).rows
    assert {r["key"]: r["s"] for r in last} == {f"k{k}": sum(i for i in range(20) if i % 3 == k) for k in range(3)}


def _counted(df):
    return df.groupBy("key").agg(F.sum("id").alias("s"), F.count("*").alias("n"))


@pytest.mark.parametrize("mode", ["append", "complete"])
def test_stream_writer_batch_by_batch(spark, served, tmp_path, mode):
    """A Python ``DataSourceStreamWriter``: the rows each batch committed, its batch ids, the
    ``overwrite`` flag (complete mode) and the output columns are Spark's, and nothing aborted."""
    written = {}
    for tag in ("spark", "ours"):
        with served() if tag == "ours" else contextlib.nullcontext(spark) as engine:
            written[tag] = _write(engine, tag, mode, tmp_path)
    assert written["ours"] == written["spark"]
    assert any(batch["rows"] for batch in written["spark"].values())
    assert all(batch["overwrite"] == (mode == "complete") for batch in written["ours"].values())


def _write(engine, tag: str, mode: str, tmp_path: Path) -> dict:
    """One run of the source into the Python sink; what the sink committed, file by file."""
    assert engine_name(engine) == ("spark" if tag == "spark" else "statestream")
    control = tmp_path / f"sink-{tag}.json"
    control.write_text(json.dumps({"end": 0}))
    target = tmp_path / f"out-{tag}"
    target.mkdir()
    df = engine.readStream.format("statestream_counting").option("path", str(control)).load()
    if mode == "complete":
        df = df.groupBy("key").agg(F.count("*").alias("n"))
    query = (df.writeStream.format("statestream_json_lines").outputMode(mode).option("path", str(target))
             .option("checkpointLocation", str(tmp_path / f"cp-{tag}")).start())
    try:
        for end in (3, 8, 8, 12):
            _set_end(control, end)
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    return {p.name: json.loads(p.read_text()) for p in sorted(target.iterdir())}


@pytest.mark.parametrize(
    ("name", "condition", "cause"),
    [
        ("statestream_batch_only", "[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source initialize source", "[NOT_IMPLEMENTED] streamReader is not implemented."),
        ("statestream_broken", None, "ValueError: cannot read records "),  # whichever task fails first
    ],
)
def test_a_failing_source_fails_the_query_as_on_spark(spark, served, tmp_path, name, condition, cause):
    """No stream reader, or a reader whose ``read`` raises: ``load()`` works, the query fails
    with ``STREAM_FAILED``, Spark's condition where it names one, and the Python error."""
    errors = {}
    for tag in ("spark", "ours"):
        control = tmp_path / f"{tag}.json"
        control.write_text(json.dumps({"end": 2}))
        with served() if tag == "ours" else contextlib.nullcontext(spark) as engine:
            df = engine.readStream.format(name).option("path", str(control)).option("partitions", "2").load()
            query = df.writeStream.format("noop").start()
            with pytest.raises(Exception) as raised:  # noqa: PT011 - compared below, engine by engine
                query.processAllAvailable()
            query.stop()
        errors[tag] = raised.value
    for tag, error in errors.items():
        text = str(error)
        assert error.getCondition() == "STREAM_FAILED", tag
        assert condition is None or condition in text, (tag, text[:2000])
        assert cause in text, (tag, text[:2000])


def test_stream_writer_refuses_update_mode(spark, served, tmp_path):
    """Spark's Python writer truncates but does not take updates: update mode fails the query
    (``requirement failed: ... does not support Update mode.``) on both engines."""
    texts = {}
    for tag in ("spark", "ours"):
        control = tmp_path / f"{tag}.json"
        control.write_text(json.dumps({"end": 3}))
        (tmp_path / f"out-{tag}").mkdir()
        with served() if tag == "ours" else contextlib.nullcontext(spark) as engine:
            df = engine.readStream.format("statestream_counting").option("path", str(control)).load().groupBy("key").count()
            query = (df.writeStream.format("statestream_json_lines").outputMode("update").option("path", str(tmp_path / f"out-{tag}"))
                     .option("checkpointLocation", str(tmp_path / f"cp-{tag}")).start())
            with pytest.raises(Exception) as raised:  # noqa: PT011 - compared below
                query.processAllAvailable()
            query.stop()
        texts[tag] = str(raised.value)
        assert raised.value.getCondition() == "STREAM_FAILED", tag
        assert "requirement failed: statestream_json_lines does not support Update mode." in texts[tag], (tag, texts[tag][:1500])
        assert list((tmp_path / f"out-{tag}").iterdir()) == [], tag


def test_abort_gets_the_messages_of_the_tasks_that_finished(spark, served, tmp_path):
    """A batch whose second write task fails: ``abort`` gets the first task's commit message
    and None for the failed one, on both engines, and the query fails with the task's error."""
    aborted = {}
    for tag in ("spark", "ours"):
        control = tmp_path / f"{tag}.json"
        control.write_text(json.dumps({"end": 4}))
        target = tmp_path / f"out-{tag}"
        target.mkdir()
        with served() if tag == "ours" else contextlib.nullcontext(spark) as engine:
            df = engine.readStream.format("statestream_counting").option("path", str(control)).option("partitions", "2").load()
            query = (df.writeStream.format("statestream_half_failing").option("path", str(target))
                     .option("checkpointLocation", str(tmp_path / f"cp-{tag}")).start())
            with pytest.raises(Exception) as raised:  # noqa: PT011 - compared below
                query.processAllAvailable()
            query.stop()
        assert "ValueError: cannot write records from 2 on" in str(raised.value), (tag, str(raised.value)[:1500])
        aborted[tag] = json.loads((target / "aborted-0.json").read_text())
    assert aborted["ours"] == aborted["spark"]
    assert aborted["spark"] == [[["0", "k0", "2026-01-01 00:00:00"], ["1", "k1", "2026-01-01 00:00:01"]], None]
