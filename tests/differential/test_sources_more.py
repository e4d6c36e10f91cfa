"""Sources against Spark's own: file formats and file-source options, rate-micro-batch, socket,
readStream.table and statestream.testing.MemoryStream.

Each test drives the same query on Spark's engine (the oracle) and on statestream with the same
input, and compares every micro-batch: its rows, output columns and ``numInputRows``. The input is
changed between batches by *steps* (write a file, append to a table, send lines), each followed by
``processAllAvailable()``, or written up front and read with ``availableNow``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import (
    _wait_idle,
    engine_name,
    error_text,
    normalise_progress,
    rows_match,
    run_stream,
)
from tests.spark_confs import session_confs

T0 = time.time() - 7200  # input files are dated in the past, one second apart


# ------------------------------------------------------------------------------------------------
# driving a query
# ------------------------------------------------------------------------------------------------


class Run:
    """What one engine produced: rows, columns and numInputRows per batch id, plus snapshots
    taken after each step."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.rows: dict[int, list[dict[str, Any]]] = {}
        self.columns: dict[int, list[tuple[str, str]]] = {}
        self.input_rows: dict[int, int | None] = {}
        self.snapshots: list[Any] = []
        self.schema: str | None = None  # the streaming DataFrame's schema
        self.descriptions: set[str] = set()  # the progress' source descriptions (work dir as <work>)
        self.progress: dict[int, dict[str, Any]] = {}  # each executed batch's progress, normalised

    def describe(self) -> str:
        lines = [f"{self.engine}: schema {self.schema}"]
        for b in sorted(self.rows):
            lines.append(f"  b{b}: in={self.input_rows.get(b)} rows={sorted(map(str, self.rows[b]))[:20]}")
        if self.snapshots:
            lines.append(f"  snapshots={self.snapshots}")
        return "\n".join(lines)


def drive(
    engine: Any,
    make_df: Callable[[Any], Any],
    tmp: Path,
    steps: Sequence[Callable[[], Any]] = (),
    *,
    mode: str = "append",
    trigger: dict[str, Any] | None = None,
    snapshot: Callable[[], Any] | None = None,
    settle: float = 0.0,
    until_batches: int | None = None,
    on_batch: Callable[[int], Any] | None = None,
) -> Run:
    """Start ``make_df(engine.readStream)`` into a collecting ``foreachBatch`` sink, run each step
    followed by ``processAllAvailable()`` (and ``snapshot()``), stop, and return the batches.

    ``trigger={"availableNow": True}`` waits for the query to end instead; ``until_batches`` waits
    until that many batches ran (for sources that always have data).
    """
    run = Run(engine_name(engine))
    ck = tmp / f"ck-{run.engine}-{uuid.uuid4().hex[:6]}"

    def sink(df: Any, batch_id: int) -> None:
        run.rows[int(batch_id)] = [r.asDict(recursive=True) for r in df.collect()]
        run.columns[int(batch_id)] = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
        if on_batch is not None:
            on_batch(int(batch_id))

    df = make_df(engine.readStream)
    run.schema = df.schema.simpleString()
    writer = df.writeStream.outputMode(mode).foreachBatch(sink).option("checkpointLocation", str(ck))
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    try:
        if trigger and (trigger.get("availableNow") or trigger.get("once")):
            assert query.awaitTermination(180), f"{run.engine}: availableNow/once run did not end"
        elif until_batches is not None:
            deadline = time.time() + 120
            while len(run.rows) <= until_batches and time.time() < deadline:  # one more: its progress is final
                time.sleep(0.1)
        else:
            _wait_idle(query, 180, run.engine)
            for step in steps:
                step()
                if settle:
                    time.sleep(settle)
                _wait_idle(query, 180, run.engine)
                if snapshot is not None:
                    run.snapshots.append(snapshot())
    finally:
        query.stop()
    exc = query.exception()
    assert exc is None, f"{run.engine}: query failed: {exc}"
    for p in query.recentProgress or []:
        p = normalise_progress(p)
        durations = p.get("durationMs") or {}
        if "addBatch" in durations or "walCommit" in durations:
            run.input_rows[int(p["batchId"])] = p.get("numInputRows")
            run.progress[int(p["batchId"])] = p
            for src in p.get("sources") or []:
                text = str(src.get("description")).replace(str(tmp.resolve()), "<work>").replace(str(tmp), "<work>")
                run.descriptions.add(re.sub(r"port: \d+", "port: <port>", text))
    return run


def assert_same(expected: Run, actual: Run, *, batches: int | None = None, ordered: bool = False) -> None:
    """Same batch ids (the first ``batches`` only if given), rows, columns, numInputRows and
    snapshots."""
    exp_ids = sorted(expected.rows)[:batches] if batches else sorted(expected.rows)
    act_ids = sorted(actual.rows)[:batches] if batches else sorted(actual.rows)
    problems = []
    if exp_ids != act_ids:
        problems.append(f"batch ids {exp_ids} vs {act_ids}")
    for b in exp_ids:
        if b not in actual.rows:
            continue
        if not rows_match(expected.rows[b], actual.rows[b], ordered=ordered):
            problems.append(f"batch {b}: rows")
        if expected.columns[b] != actual.columns[b]:
            problems.append(f"batch {b}: columns {expected.columns[b]} vs {actual.columns[b]}")
        if expected.input_rows.get(b) != actual.input_rows.get(b):
            problems.append(f"batch {b}: numInputRows {expected.input_rows.get(b)} vs {actual.input_rows.get(b)}")
    if expected.descriptions != actual.descriptions:
        problems.append(f"source descriptions {expected.descriptions} vs {actual.descriptions}")
    if expected.schema != actual.schema:
        problems.append(f"stream schema {expected.schema} vs {actual.schema}")
    if expected.snapshots != actual.snapshots:
        problems.append(f"snapshots {expected.snapshots} vs {actual.snapshots}")
    assert not problems, "; ".join(problems) + "\n" + expected.describe() + "\n" + actual.describe()


def start_failure(engine: Any, make_df: Callable[[Any], Any], tmp: Path) -> tuple[str, str] | None:
    """The error of building, starting or running the query's first trigger, as
    ``(type name, text)``; a query failure gives its cause's text (after Spark's
    ``terminated with exception:`` prefix)."""
    from pyspark.errors import AnalysisException

    ck = tmp / f"ck-fail-{engine_name(engine)}-{uuid.uuid4().hex[:6]}"
    try:
        query = make_df(engine.readStream).writeStream.foreachBatch(lambda d, i: None).option("checkpointLocation", str(ck)).start()
    except AnalysisException as exc:
        return ("AnalysisException", error_text(exc))
    except Exception as exc:  # noqa: BLE001
        return (type(exc).__name__.replace("Statestream", ""), error_text(exc))
    try:
        _wait_idle(query, 60, engine_name(engine))
    except Exception as exc:  # noqa: BLE001
        text = error_text(exc)
        if "terminated with exception: " in text:
            text = text.split("terminated with exception: ", 1)[1].rsplit(" SQLSTATE: XXKST", 1)[0]
        return ("StreamingQueryException", text)
    finally:
        query.stop()
    return None


def write_file(path: Path, content: str | bytes, mtime: float) -> Path:
    """Write ``path`` atomically (staged next to its directory tree) with modification time ``mtime``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".staging-{uuid.uuid4().hex[:6]}"
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(staging, mode) as fh:
        fh.write(content)
    os.utime(staging, (mtime, mtime))
    os.replace(staging, path)
    return path


def orc_bytes(rows: list[dict[str, Any]], schema: Any) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.orc as po

    buf = io.BytesIO()
    po.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    return buf.getvalue()


def both(spark: Any, ours: Callable[[], Any], tmp_path: Path, scenario: Callable[[Any, Path], Run]) -> tuple[Run, Run]:
    """Run ``scenario(engine, workdir)`` on Spark, then on statestream, each in its own directory."""
    expected = scenario(spark, tmp_path / "spark")
    actual = scenario(ours(), tmp_path / "ours")
    return expected, actual


# ------------------------------------------------------------------------------------------------
# file formats
# ------------------------------------------------------------------------------------------------

_FORMAT_INPUT = [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d"), (5, "e"), (6, "f")]]


def _format_file(fmt: str, rows: list[tuple[int, str]]) -> str | bytes:
    if fmt == "csv":
        return "k,s\n" + "".join(f"{k},{s}\n" for k, s in rows)
    if fmt == "json":
        return "".join(json.dumps({"k": k, "s": s}) + "\n" for k, s in rows)
    if fmt == "text":
        return "".join(f"{k}:{s}\n" for k, s in rows)
    if fmt == "xml":
        return "<rows>" + "".join(f"<row><k>{k}</k><s>{s}</s></row>" for k, s in rows) + "</rows>\n"
    if fmt == "orc":
        import pyarrow as pa

        return orc_bytes([{"k": k, "s": s} for k, s in rows], pa.schema([("k", pa.int32()), ("s", pa.string())]))
    raise ValueError(fmt)


def _format_reader(fmt: str, path: str) -> Callable[[Any], Any]:
    def make(rs: Any) -> Any:
        if fmt == "csv":
            return rs.schema("k INT, s STRING").option("header", "true").csv(path)
        if fmt == "json":
            return rs.schema("k INT, s STRING").json(path)
        if fmt == "text":
            return rs.text(path)  # no schema: value STRING
        if fmt == "xml":
            return rs.xml(path, rowTag="row", schema="k INT, s STRING")
        if fmt == "orc":
            return rs.schema("k INT, s STRING").orc(path)
        raise ValueError(fmt)

    return make


@pytest.mark.parametrize("fmt", ["csv", "orc", "text", "xml"])
def test_file_formats(spark, ours, tmp_path, fmt):
    """One file per batch in each format; the query adds a column so the batch is really read."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        src.mkdir(parents=True)
        steps = [
            (lambda i=i, rows=rows: write_file(src / f"part-{i}.{fmt}", _format_file(fmt, rows), T0 + i))
            for i, rows in enumerate(_FORMAT_INPUT)
        ]
        make = _format_reader(fmt, str(src))
        return drive(engine, lambda rs: make(rs).withColumn("n", F.lit(1)), work, steps)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert len(expected.rows) == 3
    assert_same(expected, actual)


# ------------------------------------------------------------------------------------------------
# file-source options
# ------------------------------------------------------------------------------------------------


def _layout(src: Path) -> None:
    """Partition directories, files of several sizes, names the glob filter keeps or drops, a
    hidden file; all written before the query starts (read with availableNow)."""
    files = [
        ("k=1/a.json", [1, 2]),
        ("k=1/b.json", [3] * 40),  # a big file
        ("k=2/c.json", [4]),
        ("k=2/skip.txt", [99]),  # dropped by pathGlobFilter
        ("k=2/d.json", [5, 6, 7]),
        ("k=3/_hidden.json", [98]),
        ("k=3/e.json", [8]),
        ("k=3/f.json", [9, 10]),
    ]
    for i, (name, values) in enumerate(files):
        write_file(src / name, "".join(json.dumps({"v": v}) + "\n" for v in values), T0 + i)


@pytest.mark.parametrize(
    "options",
    [
        {"maxBytesPerTrigger": "60", "pathGlobFilter": "*.json"},
        {"maxBytesPerTrigger": "1", "recursiveFileLookup": "true"},
        {"maxFilesPerTrigger": "2", "latestFirst": "true", "pathGlobFilter": "[a-c].json"},
    ],
    ids=["maxBytes-glob-partitions", "maxBytes1-recursive", "latestFirst-maxFiles"],
)
def test_file_source_options(spark, ours, tmp_path, options):
    """Partition columns (``k``), pathGlobFilter, maxBytesPerTrigger (the first file always, then
    files while the total fits), recursiveFileLookup (no partition values), latestFirst, and
    one availableNow run over the same layout."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        _layout(src)

        def make(rs: Any) -> Any:
            return rs.schema("v INT, k INT").options(**options).json(str(src)).withColumn("f", F.input_file_name())

        run = drive(engine, make, work, trigger={"availableNow": True})
        for rows in run.rows.values():  # compare file names, not the engines' directories
            for r in rows:
                r["f"] = r["f"].rsplit("/", 1)[-1]
        return run

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert len(expected.rows) >= 2
    assert_same(expected, actual)


def test_file_source_max_file_age_and_file_name_only(spark, ours, tmp_path):
    """maxFileAge: a file older than (newest seen - maxFileAge) is skipped; fileNameOnly: a file
    whose name was seen (and not purged yet) under another directory is skipped."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        src.mkdir(parents=True)
        body = lambda v: json.dumps({"v": v}) + "\n"  # noqa: E731
        steps = [
            lambda: write_file(src / "k=1" / "a.json", body(1), T0),
            lambda: write_file(src / "k=1" / "b.json", body(2), T0 + 3 * 3600),  # purges a.json
            lambda: write_file(src / "k=1" / "late.json", body(3), T0 + 600),  # older than newest - 1h
            lambda: write_file(src / "k=2" / "b.json", body(4), T0 + 3 * 3600 + 10),  # b.json was seen
            lambda: write_file(src / "k=2" / "a.json", body(5), T0 + 4 * 3600),  # a.json was purged
        ]
        make = lambda rs: rs.schema("v INT, k INT").option("maxFileAge", "1h").option("fileNameOnly", "true").json(str(src))  # noqa: E731
        return drive(engine, make, work, steps)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert sorted(r["v"] for rows in expected.rows.values() for r in rows) == [1, 2, 5]
    assert_same(expected, actual)


def test_file_source_partition_columns(spark, ours, tmp_path):
    """A given schema without the partition columns: those of the directories there when the
    query starts are added to it (typed by inference); partition directories that appear later
    fail the query (Spark's assertion on the batch)."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        write_file(src / "k=1" / "a.json", json.dumps({"v": 1}) + "\n", T0)
        steps = [lambda: write_file(src / "k=2" / "b.json", json.dumps({"v": 2}) + "\n", T0 + 1)]
        return drive(engine, lambda rs: rs.schema("v INT").json(str(src)), work, steps)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert expected.schema == "struct<v:int,k:int>"
    assert_same(expected, actual)

    def appearing(engine: Any) -> Any:
        src = tmp_path / f"later-{engine_name(engine)}"
        src.mkdir()
        write_file(src / "a.json", json.dumps({"v": 1}) + "\n", T0)

        def build(rs: Any) -> Any:
            df = rs.schema("v INT").json(str(src))  # the schema is fixed here, without k
            write_file(src / "k=1" / "b.json", json.dumps({"v": 2}) + "\n", T0 + 1)
            return df

        failure = start_failure(engine, build, tmp_path)
        return None if failure is None else (failure[0], re.sub(r"#\d+", "", failure[1]))

    failures = [appearing(spark), appearing(ours())]
    assert failures[0] is not None and "Invalid batch" in failures[0][1], failures
    assert failures[0] == failures[1]


@pytest.mark.parametrize("recursive", [False, True])
def test_file_source_subdirectories(spark, ours, tmp_path, recursive):
    """Files below a directory that is not a partition directory are not read, unless
    recursiveFileLookup is set."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        src.mkdir(parents=True)
        body = lambda v: json.dumps({"v": v}) + "\n"  # noqa: E731
        steps = [
            lambda: write_file(src / "a.json", body(1), T0),
            lambda: write_file(src / "sub" / "b.json", body(2), T0 + 1),
            lambda: write_file(src / "sub" / "deeper" / "c.json", body(3), T0 + 2),
            lambda: write_file(src / "d.json", body(4), T0 + 3),
        ]
        make = lambda rs: rs.schema("v INT").option("recursiveFileLookup", recursive).json(str(src))  # noqa: E731
        return drive(engine, make, work, steps)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert sorted(r["v"] for rows in expected.rows.values() for r in rows) == ([1, 2, 3, 4] if recursive else [1, 4])
    assert_same(expected, actual)


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_clean_source(spark, ours, tmp_path, mode):
    """cleanSource: after each batch, which files are left in the source directory and which are
    in the archive (below the archive directory at their full path). Spark cleans a batch's
    files when it plans the next batch, so the last batch's file stays."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        archive = work / "archive"
        src.mkdir(parents=True)

        def listing() -> Any:
            left = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
            moved_root = Path(str(archive) + str(src))
            moved = sorted(str(p.relative_to(moved_root)) for p in moved_root.rglob("*") if p.is_file()) if moved_root.exists() else []
            return {"left": left, "archived": moved}

        steps = [
            (lambda i=i: write_file(src / f"k={i % 2}" / f"f{i}.json", json.dumps({"v": i}) + "\n", T0 + i))
            for i in range(3)
        ]

        def make(rs: Any) -> Any:
            rs = rs.schema("v INT, k INT").option("cleanSource", mode)
            if mode == "archive":
                rs = rs.option("sourceArchiveDir", str(archive))
            return rs.json(str(src))

        return drive(engine, make, work, steps, snapshot=listing)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert expected.snapshots[-1]["left"] == ["k=0/f2.json"]
    assert_same(expected, actual)


@pytest.mark.parametrize(
    "options",
    [
        {"cleanSource": "bogus"},
        {"cleanSource": "archive"},
        {"cleanSource": "ARCHIVE", "sourceArchiveDir": "{src}/archive"},
        {"maxBytesPerTrigger": "0"},
        {"maxBytesPerTrigger": "lots"},
        {"maxFilesPerTrigger": "3", "maxBytesPerTrigger": "1"},
        {"maxFilesPerTrigger": "0"},
        {"latestFirst": "maybe"},
        {"fileNameOnly": "x"},
        {"maxFileAge": "abc"},
    ],
    ids=[
        "bad-mode", "archive-without-dir", "archive-inside-source", "max-bytes-zero", "max-bytes-text",
        "max-files-and-bytes", "max-files-zero", "latest-first-not-bool", "file-name-only-not-bool", "max-file-age-text",
    ],
)
def test_file_source_option_errors(spark, ours, tmp_path, options):
    """Invalid file-source options fail the query when it starts (not at load()), with Spark's texts."""
    results = []
    for engine in (spark, ours()):
        src = tmp_path / engine_name(engine) / "in"
        src.mkdir(parents=True)
        opts = {k: v.replace("{src}", str(src)) for k, v in options.items()}
        results.append(start_failure(engine, lambda rs: rs.schema("v INT").options(**opts).json(str(src)), tmp_path))
    assert results[0] is not None
    assert results[0] == results[1]


def test_schema_inference(spark, ours, tmp_path):
    """spark.sql.streaming.schemaInference=true: the schema comes from the files already there
    (partition columns too); with nothing to infer from, Spark's error; without the conf, Spark's
    'Schema must be specified' error."""
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = [start_failure(e, lambda rs: rs.json(str(empty)), tmp_path) for e in (spark, ours())]
    assert refused[0] is not None and refused[0] == refused[1]

    with session_confs(spark, {"spark.sql.streaming.schemaInference": "true"}):
        unable = [start_failure(e, lambda rs: rs.json(str(empty)), tmp_path) for e in (spark, ours())]
        assert unable[0] is not None and "UNABLE_TO_INFER_SCHEMA" in unable[0][1]
        assert unable[0] == unable[1]

        def scenario(engine: Any, work: Path) -> Run:
            src = work / "in"
            write_file(src / "k=1" / "a.json", json.dumps({"a": 1, "b": "x"}) + "\n", T0)
            steps = [lambda: write_file(src / "k=2" / "b.json", json.dumps({"a": 2, "b": "y", "c": 1.5}) + "\n", T0 + 1)]
            return drive(engine, lambda rs: rs.json(str(src)), work, steps)

        expected, actual = both(spark, ours, tmp_path, scenario)
    assert expected.columns[0] == [("a", "bigint"), ("b", "string"), ("k", "int")]
    assert_same(expected, actual)


@pytest.mark.parametrize(
    "options",
    [{"maxFilesPerTrigger": None}, {"latestFirst": None}, {"maxFileAge": None}, {"cleanSource": None}],
    ids=["max-files", "latest-first", "max-file-age", "clean-source"],
)
def test_file_source_option_set_to_none(spark, ours, tmp_path, options):
    """PySpark hands ``option(k, None)`` to Spark as null (not the text ``"None"``): the file
    source's own options read it as ``null``, and the query fails (or not) as Spark's does."""
    results = []
    for engine in (spark, ours()):
        src = tmp_path / engine_name(engine) / "in"
        write_file(src / "a.json", json.dumps({"v": 1}) + "\n", T0)
        results.append(start_failure(engine, lambda rs: rs.schema("v INT").options(**options).json(str(src)), tmp_path))
    assert results[0] == results[1]


def test_format_option_set_to_none_reaches_spark_as_null(spark, ours, tmp_path):
    """An option of the file format set to None goes to Spark's reader as null: CSV's ``header``
    then reads as its default (no header line), CSV's ``sep`` fails the query with Spark's
    error, as under Spark's engine. An argument of ``csv(...)`` given as None is left unset, as
    PySpark leaves it."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        src.mkdir(parents=True)
        steps = [lambda: write_file(src / "a.csv", "k,s\n1,a\n2,b\n", T0)]
        return drive(engine, lambda rs: rs.schema("k STRING, s STRING").option("header", None).csv(str(src), sep=None), work, steps)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    failures = []
    for engine in (spark, ours()):
        src = tmp_path / f"sep-{engine_name(engine)}" / "in"
        write_file(src / "a.csv", "1,a\n", T0)
        failures.append(start_failure(engine, lambda rs: rs.schema("k STRING, s STRING").options(sep=None).csv(str(src)), tmp_path))
    assert failures[0] is not None and "INVALID_DELIMITER_VALUE.NULL_VALUE" in failures[0][1]
    assert failures[1] == failures[0]


# ------------------------------------------------------------------------------------------------
# rate-micro-batch
# ------------------------------------------------------------------------------------------------


def _rate_micro_batch(options: dict[str, Any]) -> Callable[[Any], Any]:
    def make(rs: Any) -> Any:
        return rs.format("rate-micro-batch").options(**options).load()

    return make


def test_rate_micro_batch(spark, ours, tmp_path):
    """Values and timestamps per batch, and an event-time window aggregation over them."""
    opts = {"rowsPerBatch": 7, "numPartitions": 3, "startTimestamp": 1_000_000, "advanceMillisPerBatch": 700}

    def windowed(rs: Any) -> Any:
        df = _rate_micro_batch(opts)(rs).withColumn("p", F.spark_partition_id())
        return df.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second")).agg(
            F.count("*").alias("n"), F.sum("value").alias("s"), F.collect_list(F.struct("value", "p")).alias("vp")
        )

    for make, mode in ((lambda rs: _rate_micro_batch(opts)(rs).withColumn("p", F.spark_partition_id()), "append"), (windowed, "append")):
        expected = drive(spark, make, tmp_path, mode=mode, trigger={"processingTime": "100 milliseconds"}, until_batches=5)
        actual = drive(ours(), make, tmp_path, mode=mode, trigger={"processingTime": "100 milliseconds"}, until_batches=5)
        for run in (expected, actual):  # collect_list order within a window is not part of the contract
            for rows in run.rows.values():
                for r in rows:
                    if "vp" in r:
                        r["vp"] = sorted((x["value"], x["p"]) for x in r["vp"])
        assert_same(expected, actual, batches=5)
    assert any(expected.rows[b] for b in range(5))


def test_rate_micro_batch_available_now_and_defaults(spark, ours, tmp_path):
    """availableNow admits one batch of rowsPerBatch; default numPartitions/startTimestamp/advance."""
    make = _rate_micro_batch({"rowsPerBatch": 5})

    def with_partition(rs: Any) -> Any:
        return make(rs).withColumn("p", F.spark_partition_id())

    expected = drive(spark, with_partition, tmp_path, trigger={"availableNow": True})
    actual = drive(ours(), with_partition, tmp_path, trigger={"availableNow": True})
    assert len(expected.rows) == 1
    assert_same(expected, actual)


def test_trigger_once_admits_everything_whatever_the_source_limit(spark, ours, tmp_path):
    """Trigger.Once reads all available files in its one batch, maxFilesPerTrigger
    notwithstanding (Spark asks the sources for everything available then)."""
    src = tmp_path / "in"
    for i in range(3):
        spark.createDataFrame([(i, f"r{i}")], "id LONG, s STRING").write.mode("append").parquet(str(src))

    def make(rs: Any) -> Any:
        return rs.schema("id LONG, s STRING").option("maxFilesPerTrigger", 1).parquet(str(src))

    expected = drive(spark, make, tmp_path, trigger={"once": True})
    actual = drive(ours(), make, tmp_path, trigger={"once": True})
    assert [sorted(r["id"] for r in rows) for rows in expected.rows.values()] == [[0, 1, 2]]
    assert_same(expected, actual)


def test_aggregation_over_a_source_read_by_one_task(spark, ours, tmp_path):
    """A source batch read by a single task (rate-micro-batch with one partition: Spark reports
    it as SinglePartition, which its batch groupBy takes as already distributed) still reaches
    the state partitions by key: the stateful exchange asks for the keys' partitioning itself."""

    def counted(rs: Any) -> Any:
        df = _rate_micro_batch({"rowsPerBatch": 10, "numPartitions": 1})(rs)
        return df.groupBy((F.col("value") % 5).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s"))

    expected = drive(spark, counted, tmp_path, mode="update", trigger={"availableNow": True})
    actual = drive(ours(), counted, tmp_path, mode="update", trigger={"availableNow": True})
    assert [len(r) for r in expected.rows.values()] == [5]
    assert_same(expected, actual)


def test_rate_micro_batch_option_set_to_none_takes_its_default(spark, ours, tmp_path):
    """A V2 source reads an option set to None (null) as absent, so it takes its default."""

    def make(rs: Any) -> Any:
        return rs.format("rate-micro-batch").option("rowsPerBatch", 5).option("numPartitions", None).options(startTimestamp=None).load().withColumn("p", F.spark_partition_id())

    expected = drive(spark, make, tmp_path, trigger={"availableNow": True})
    actual = drive(ours(), make, tmp_path, trigger={"availableNow": True})
    assert len(expected.rows) == 1
    assert_same(expected, actual)


@pytest.mark.parametrize(
    "options",
    [{}, {"rowsPerBatch": 0}, {"rowsPerBatch": 1, "numPartitions": 0}, {"rowsPerBatch": 1, "startTimestamp": -1},
     {"rowsPerBatch": 1, "advanceMillisPerBatch": -1}, {"rowsPerBatch": "x"}, {"schema": "a INT", "rowsPerBatch": 1}],
    ids=["no-rows", "zero-rows", "zero-partitions", "negative-start", "negative-advance", "not-a-number", "user-schema"],
)
def test_rate_micro_batch_option_errors(spark, ours, options):
    results = []
    for engine in (spark, ours()):
        opts = dict(options)
        rs = engine.readStream.format("rate-micro-batch")
        if "schema" in opts:
            rs = rs.schema(opts.pop("schema"))
        try:
            rs.options(**opts).load()
            results.append(None)
        except Exception as exc:  # noqa: BLE001
            results.append((type(exc).__name__.replace("Statestream", ""), error_text(exc)))
    assert results[0] is not None
    assert results[0] == results[1]


# ------------------------------------------------------------------------------------------------
# socket
# ------------------------------------------------------------------------------------------------


class LineServer:
    """A TCP server on 127.0.0.1 that accepts one client and sends it lines on request."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.conn: socket.socket | None = None
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            self.conn, _ = self.sock.accept()
            self.accepted.set()
        except OSError:
            pass

    def send(self, lines: Sequence[str]) -> None:
        assert self.accepted.wait(60), "the engine never connected"
        assert self.conn is not None
        self.conn.sendall("".join(line + "\n" for line in lines).encode("utf-8"))

    def close(self) -> None:
        for s in (self.conn, self.sock):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


_SOCKET_GROUPS = [["a b", "c"], ["a", "é ü"], ["b", "b", "a"]]


@pytest.mark.parametrize("include_timestamp", [False, True])
def test_socket(spark, ours, tmp_path, include_timestamp):
    """Lines sent in three groups (each followed by a wait) make three batches; a running word
    count over them in complete mode, and the raw lines with their receive timestamps."""
    started = time.time()

    def scenario(engine: Any, work: Path, raw: bool) -> Run:
        server = LineServer()
        try:
            def make(rs: Any) -> Any:
                df = rs.format("socket").option("host", "127.0.0.1").option("port", server.port)
                df = df.option("includeTimestamp", include_timestamp).load()
                if raw:
                    return df
                return df.select(F.explode(F.split("value", " ")).alias("w")).groupBy("w").count()

            steps = [(lambda g=g: server.send(g)) for g in _SOCKET_GROUPS]
            return drive(engine, make, work, steps, mode="append" if raw else "complete", settle=1.0)
        finally:
            server.close()

    for raw in (False, True):
        expected = scenario(spark, tmp_path / f"spark-{raw}", raw)
        actual = scenario(ours(), tmp_path / f"ours-{raw}", raw)
        if raw and include_timestamp:
            for run in (expected, actual):
                for rows in run.rows.values():
                    for r in rows:
                        ts = r.pop("timestamp")
                        assert started - 5 <= ts.timestamp() <= time.time() + 5, (run.engine, ts)
                for cols in run.columns.values():
                    assert cols == [("value", "string"), ("timestamp", "timestamp")]
                    cols.pop()
        assert len(expected.rows) == 4, expected.describe()  # an empty batch 0, then one per group
        assert_same(expected, actual)


@pytest.mark.parametrize(
    "options",
    [{}, {"host": "127.0.0.1"}, {"host": "127.0.0.1", "port": "x"}, {"host": "127.0.0.1", "port": 9, "includeTimestamp": "maybe"},
     {"host": "127.0.0.1", "port": 9, "schema": "a INT"}],
    ids=["no-host", "no-port", "bad-port", "bad-include-timestamp", "user-schema"],
)
def test_socket_option_errors(spark, ours, options):
    results = []
    for engine in (spark, ours()):
        opts = dict(options)
        rs = engine.readStream.format("socket")
        if "schema" in opts:
            rs = rs.schema(opts.pop("schema"))
        try:
            rs.options(**opts).load()
            results.append(None)
        except Exception as exc:  # noqa: BLE001
            results.append((type(exc).__name__.replace("Statestream", ""), error_text(exc)))
    assert results[0] is not None
    assert results[0] == results[1]


# ------------------------------------------------------------------------------------------------
# readStream.table
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_read_stream_table(spark, ours, tmp_path, fmt):
    """A partitioned file-based table made with saveAsTable: the files there form the first
    batch, each append the next one."""

    def scenario(engine: Any, work: Path) -> Run:
        name = f"stream_source_{fmt}"  # the same for both engines (dropped after each run)
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.range(4).selectExpr("id", "CAST(id % 2 AS INT) AS k").write.partitionBy("k").format(fmt).saveAsTable(name)
        try:
            # each append writes one file (one partition, one task): a listing that runs while the
            # append's job commit moves files into place could otherwise see half of them, on
            # either engine
            steps = [
                lambda: spark.range(4, 7).where("id % 2 = 0").selectExpr("id", "CAST(id % 2 AS INT) AS k").coalesce(1).write.insertInto(name),
                lambda: spark.range(7, 8).selectExpr("id", "CAST(id % 2 AS INT) AS k").coalesce(1).write.insertInto(name),
            ]
            return drive(engine, lambda rs: rs.table(name), work, steps)
        finally:
            spark.sql(f"DROP TABLE IF EXISTS {name}")

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert len(expected.rows) == 3
    assert_same(expected, actual)


def test_read_stream_table_errors(spark, ours, tmp_path):
    """An unknown table, a batch temporary view: Spark's errors."""
    missing = [start_failure(e, lambda rs: rs.table("no_such_table_here"), tmp_path) for e in (spark, ours())]
    assert missing[0] is not None and missing[0] == missing[1]
    spark.sql("CREATE OR REPLACE TEMP VIEW batch_view_for_streams AS SELECT 1 AS x")
    try:
        view = [start_failure(e, lambda rs: rs.table("batch_view_for_streams"), tmp_path) for e in (spark, ours())]
    finally:
        spark.catalog.dropTempView("batch_view_for_streams")
    assert view[0] is not None and "not a temp view of streaming logical plan" in view[0][1]
    assert view[0] == view[1]


# ------------------------------------------------------------------------------------------------
# statestream.testing.MemoryStream
# ------------------------------------------------------------------------------------------------


def test_memory_stream_matches_a_file_stream(spark, ours, tmp_path):
    """The same rows, one addData per batch, give the batches Spark's engine gives for one file
    per batch: a windowed count with a watermark (so no-data batches run in between)."""
    from statestream.testing import MemoryStream

    batches = [[("a", 1), ("b", 2)], [("a", 15)], [("c", 40)]]
    schema = "k STRING, t INT"

    def build(df: Any) -> Any:
        return (
            df.withColumn("ts", F.timestamp_seconds("t"))
            .withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds"), "k")
            .count()
        )

    expected = run_stream(spark, build, batches, schema, "append", tmp_path)
    engine = ours()
    if engine is spark:  # harness self-check mode: nothing of ours to run
        return
    stream = MemoryStream(engine, schema)
    got: dict[int, list[dict[str, Any]]] = {}
    query = (
        build(stream.toDF())
        .writeStream.outputMode("append")
        .foreachBatch(lambda d, i: got.__setitem__(i, [r.asDict(recursive=True) for r in d.collect()]))
        .start()
    )
    offsets = []
    try:
        _wait_idle(query, 120, "ours")
        for b in batches:
            offsets.append(stream.addData(b))
            _wait_idle(query, 120, "ours")
    finally:
        query.stop()
    assert offsets == [0, 1, 2]
    assert sorted(got) == [b.batch_id for b in expected.batches]
    for b in expected.batches:
        assert rows_match(b.rows, got[b.batch_id]), (b.batch_id, b.rows, got[b.batch_id])
    assert stream.add_data([("z", 0)]) == 3


def test_read_stream_table_of_a_streaming_view(spark, ours, tmp_path):
    """readStream.table over a streaming temporary view gives the view's stream."""

    def scenario(engine: Any, work: Path) -> Run:
        name = f"stream_view_{engine_name(engine).lower()}"
        engine.readStream.format("rate-micro-batch").option("rowsPerBatch", 4).load().createOrReplaceTempView(name)
        try:
            return drive(engine, lambda rs: rs.table(name).where("value % 2 = 0"), work, trigger={"availableNow": True})
        finally:
            spark.catalog.dropTempView(name)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert len(expected.rows) == 1
    assert_same(expected, actual)


@pytest.mark.parametrize(
    "options",
    [{"maxFilesPerTrigger": "2"}, {"maxFilesPerTrigger": "2", "maxCachedFiles": "0"}, {"maxBytesPerTrigger": "20"}],
    ids=["files", "cache-off", "bytes"],
)
def test_file_source_unread_file_cache(spark, ours, tmp_path, options):
    """With a trigger limit, the files listed but not taken are kept for the next batches (while
    enough of them are left) instead of listing again: a file that appears meanwhile, even an
    older one, waits until they are used up."""

    def scenario(engine: Any, work: Path) -> Run:
        src = work / "in"
        for i in range(1, 7):
            write_file(src / f"f{i}.json", json.dumps({"v": i}) + "\n", T0 + i)

        def arrive(batch_id: int) -> None:
            if batch_id == 0:  # while batch 0 runs: an older file
                write_file(src / "f0.json", json.dumps({"v": 0}) + "\n", T0)

        make = lambda rs: rs.schema("v INT").options(**options).json(str(src))  # noqa: E731
        return drive(engine, make, work, on_batch=arrive)

    expected, actual = both(spark, ours, tmp_path, scenario)
    assert sorted(r["v"] for rows in expected.rows.values() for r in rows) == list(range(7))
    assert_same(expected, actual)
