"""Lateness measured and advised (issue 50, items 1 and 2), checked against Spark's engine.

A stream with known lateness (rows behind the stream's front by exponential delays) runs on
statestream with a 2 s watermark; each batch's history entry must carry a lateness histogram
whose rows at least the delay late are exactly the rows the deduplication dropped. Then the
advisor's delay for 99% of the rows runs on Spark's engine over the same batches: it must keep
exactly the rows the histogram says (at least 99%), and one bucket less must keep fewer than 99%
(the advice is the least bucket edge that keeps them).

No-data batches are off in every run: the reference a row's lateness is measured from is the
input's largest event time when the previous batch was planned, and a no-data batch between two
data batches (which a longer delay may not run) would change it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from tests.differential.harness import write_input_file
from tests.spark_confs import session_confs

SCHEMA = StructType([StructField("id", LongType()), StructField("ms", LongType())])
BATCHES = 8
ROWS = 300
BASE_MS = 1_700_000_000_000


def _batches(seed: int = 7) -> list[list[tuple[int, int]]]:
    """Batch i's rows: event times in the 10 s before the batch's front, each later by an
    exponential delay (mean 6 s)."""
    rng = random.Random(seed)
    out, next_id = [], 0
    for i in range(BATCHES):
        front = BASE_MS + 10_000 * (i + 1)
        rows = []
        for _ in range(ROWS):
            rows.append((next_id, front - rng.randrange(10_000) - int(rng.expovariate(1 / 6000))))
            next_id += 1
        out.append(rows)
    return out


def _write(directory: Path, batches: range = range(BATCHES)) -> None:
    for i, rows in enumerate(_batches()):
        if i in batches:
            write_input_file(directory, i, rows, SCHEMA, "parquet", 1_700_000_000 + i)


def _run(session, directory: Path, checkpoint: Path, delay: str) -> list[int]:
    """Each batch's deduplicated (kept) rows, through foreachBatch."""
    kept: list[int] = []
    query = (
        session.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(directory))
        .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", delay).dropDuplicates(["id", "t"])
        .writeStream.foreachBatch(lambda df, _id: kept.append(df.count()))
        .option("checkpointLocation", str(checkpoint)).start()
    )
    query.processAllAvailable()
    query.stop()
    return kept


@pytest.fixture
def no_data_batches_off(spark):
    """Lateness measured (statestream's opt-in), no-data batches off (both engines)."""
    with session_confs(spark, {"spark.sql.streaming.noDataMicroBatches.enabled": "false", "spark.statestream.lateness.enabled": "true"}):
        yield


def _history(checkpoint: Path) -> list[dict]:
    from statestream.checkpoint.files import CheckpointFileManager
    from statestream.checkpoint.progress_log import ProgressLog

    return ProgressLog(CheckpointFileManager(str(checkpoint)).child("progress")).read()


@pytest.mark.parametrize("reuse", ["true", "false"])
def test_the_histogram_counts_exactly_the_rows_the_watermark_drops(spark, tmp_path, no_data_batches_off, reuse, caplog):
    from statestream import StreamingSession

    _write(tmp_path / "in")
    spark.conf.set("spark.statestream.planReuse.enabled", reuse)
    try:
        kept = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ck", "2 seconds")
    finally:
        spark.conf.unset("spark.statestream.planReuse.enabled")
    history = _history(tmp_path / "ck")
    assert [e["batchId"] for e in history] == list(range(BATCHES))
    assert "could not be reused" not in caplog.text  # the batches after the first swapped their reference in
    late_somewhere = 0
    for entry, rows_kept in zip(history, kept):
        [record] = entry["lateness"].values()
        assert list(entry["lateness"]) == ["t"]
        dropped = entry["stateOperators"][0]["numRowsDroppedByWatermark"]
        assert record["column"] == "t" and record["delayMs"] == 2000
        assert record["rows"] == entry["numInputRows"] == ROWS
        assert record["ahead"] + sum(n for _, n in record["buckets"]) == ROWS
        assert record["beyondDelay"] == dropped == ROWS - rows_kept, entry["batchId"]
        late_somewhere += dropped
    # the first two batches have no reference (no row can be late yet)
    assert [e["lateness"] and next(iter(e["lateness"].values()))["referenceMs"] for e in history[:2]] == [None, None]
    assert late_somewhere > 0
    # Spark's progress (lastProgress, listeners) has no such field: only the history does
    assert "lateness" not in json.loads(json.dumps(history[0]["sources"]))


def test_after_a_restart_the_front_is_the_watermark_plus_the_delay(spark, tmp_path, no_data_batches_off):
    """A restart forgets each input's largest event time (Spark keeps only the query's
    watermark): the first batches after it take their front from the watermark, which for one
    input is the same figure, so the rows counted late are still exactly those dropped."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    _write(tmp_path / "in", range(0, 4))
    kept = _run(ss, tmp_path / "in", tmp_path / "ck", "2 seconds")
    _write(tmp_path / "in", range(4, BATCHES))
    kept += _run(ss, tmp_path / "in", tmp_path / "ck", "2 seconds")
    history = _history(tmp_path / "ck")
    assert [e["batchId"] for e in history] == list(range(BATCHES)) and len({e["runId"] for e in history}) == 2
    fronts = [e["lateness"]["t"]["referenceMs"] for e in history]
    watermarks = [json.loads((tmp_path / "ck" / "offsets" / str(b)).read_text().splitlines()[1])["batchWatermarkMs"] for b in range(BATCHES)]
    assert fronts[4] == watermarks[3] + 2000 and fronts[5] == watermarks[4] + 2000  # the batches after the restart
    for entry, rows_kept in zip(history, kept):
        assert entry["lateness"]["t"]["beyondDelay"] == entry["stateOperators"][0]["numRowsDroppedByWatermark"] == ROWS - rows_kept


def test_the_advised_delay_keeps_what_it_promises_on_sparks_engine(spark, tmp_path, no_data_batches_off, capsys):
    from statestream import StreamingSession
    from statestream.commands.cli import main
    from statestream.operators.lateness import bucket_delay_ms, bucket_of
    from statestream.tools.lateness_advisor import advise

    _write(tmp_path / "in")
    _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ck", "2 seconds")
    [advice] = advise(str(tmp_path / "ck"), completeness=0.99)
    total = BATCHES * ROWS
    assert advice.rows == total and advice.delay_ms == 2000 and advice.kept_rows < total
    assert advice.advised_kept_rows >= 0.99 * total > advice.kept_rows

    def kept_on_spark(delay_ms: int, name: str) -> int:
        return sum(_run(spark, tmp_path / "in", tmp_path / name, f"{delay_ms} milliseconds"))

    # the truth: Spark's engine with the advised delay keeps what the histogram says it does
    assert kept_on_spark(advice.advised_delay_ms, "spark-advised") == advice.advised_kept_rows
    smaller = bucket_delay_ms(bucket_of(advice.advised_delay_ms - 1) - 1)
    assert kept_on_spark(smaller, "spark-smaller") < 0.99 * total

    assert main(["watermark", "advise", str(tmp_path / "ck"), "--completeness", "99"]) == 0
    text = capsys.readouterr().out
    assert "advised delay" in text and "windows close" in text
    assert main(["watermark", "advise", str(tmp_path / "ck"), "--json"]) == 0
    [as_json] = json.loads(capsys.readouterr().out)
    assert as_json["completeness"] == 0.999 and as_json["advisedKeptRows"] >= 0.999 * total


def test_each_watermark_input_has_its_own_record(spark, tmp_path, no_data_batches_off):
    """A union of two inputs, each with its watermark on a column of the same name: two records,
    ``t`` and ``t (2)`` in plan order, and advice for each."""
    from statestream import StreamingSession
    from statestream.tools.lateness_advisor import advise

    ss = StreamingSession(spark)
    for side in ("a", "b"):
        _write(tmp_path / side, range(0, 4))

    def side(name: str):
        return (
            ss.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(tmp_path / name))
            .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", "2 seconds")
        )

    query = (
        side("a").unionByName(side("b")).dropDuplicates(["id", "t"]).writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    )
    query.processAllAvailable()
    query.stop()
    history = _history(tmp_path / "ck")
    assert all(sorted(e["lateness"]) == ["t", "t (2)"] for e in history)
    assert [e["numInputRows"] for e in history] == [sum(r["rows"] for r in e["lateness"].values()) for e in history]
    assert sorted(a.node_id for a in advise(str(tmp_path / "ck"), completeness=0.9)) == ["t", "t (2)"]


def dedup_query(ss):
    """The replay tests' query (``MODULE:FUNCTION`` for ``statestream watermark replay``)."""
    return (
        ss.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(os.environ["STATESTREAM_TEST_REPLAY_INPUT"])
        .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", "2 seconds").dropDuplicates(["id", "t"])
    )


def test_a_replay_with_another_delay_is_what_sparks_engine_gives_with_it(spark, tmp_path, no_data_batches_off, capsys, monkeypatch):
    """``statestream watermark replay`` runs the recorded batches again with a 5 s delay: per
    data batch it keeps and drops what Spark's engine does with 5 s over the same batches, and
    the recorded checkpoint is left as it was."""
    from statestream import StreamingSession
    from statestream.commands.cli import main
    from statestream.tools.watermark_replay import replay

    _write(tmp_path / "in")
    monkeypatch.setenv("STATESTREAM_TEST_REPLAY_INPUT", str(tmp_path / "in"))
    _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ck", "2 seconds")
    before = sorted((p.relative_to(tmp_path / "ck"), p.stat().st_mtime_ns) for p in (tmp_path / "ck").rglob("*") if p.is_file())

    report = replay(StreamingSession(spark), str(tmp_path / "ck"), dedup_query, "5 seconds", to=str(tmp_path / "what-if"))
    truth = _run(spark, tmp_path / "in", tmp_path / "spark-5s", "5 seconds")
    assert [b.output_rows for b in report.replayed] == truth
    assert [b.dropped_rows for b in report.replayed] == [ROWS - kept for kept in truth]
    assert [b.input_rows for b in report.replayed] == [b.input_rows for b in report.recorded] == [ROWS] * BATCHES
    assert report.totals("replayed")["dropped_rows"] < report.totals("recorded")["dropped_rows"]
    assert spark.read.parquet(str(tmp_path / "what-if" / "output")).count() == sum(truth)
    after = sorted((p.relative_to(tmp_path / "ck"), p.stat().st_mtime_ns) for p in (tmp_path / "ck").rglob("*") if p.is_file())
    assert after == before

    module = "tests.spark.test_lateness:dedup_query"
    capsys.readouterr()
    assert main(["watermark", "replay", str(tmp_path / "ck"), "--query", module, "--delay", "5 seconds", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["replayed"]["totals"] == report.totals("replayed") and as_json["delay"] == "5 seconds"
    assert main(["watermark", "replay", str(tmp_path / "ck"), "--query", module, "--delay", "5 seconds"]) == 0
    assert "rows dropped as late" in capsys.readouterr().out


def _windowed(session, delay: str):
    return (
        session.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1)
        .load(os.environ["STATESTREAM_TEST_REPLAY_INPUT"])
        .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", delay).groupBy(F.window("t", "10 seconds")).count()
    )


def windowed_query(ss):
    """A windowed count over the replay input, 2 s delay (``MODULE:FUNCTION``)."""
    return _windowed(ss, "2 seconds")


def test_a_replay_gives_each_windows_closing_batch_in_both_runs(spark, tmp_path, no_data_batches_off, monkeypatch):
    """A window closes (leaves the state, and in append mode comes out) after the data batch
    the replay reports, for the recorded 2 s and the replayed 12 s: the batches in which Spark's
    engine emits each window with those delays."""
    from statestream import StreamingSession
    from statestream.tools.watermark_replay import replay

    _write(tmp_path / "in")
    monkeypatch.setenv("STATESTREAM_TEST_REPLAY_INPUT", str(tmp_path / "in"))
    query = windowed_query(StreamingSession(spark)).writeStream.outputMode("append").format("noop")
    running = query.option("checkpointLocation", str(tmp_path / "ck")).start()
    running.processAllAvailable()
    running.stop()
    report = replay(StreamingSession(spark), str(tmp_path / "ck"), windowed_query, "12 seconds")

    def emitted_on_spark(delay: str, name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        q = (
            _windowed(spark, delay).writeStream.outputMode("append")
            .foreachBatch(lambda d, b: out.update({str(r.window.start.replace(tzinfo=None)): b + 1 for r in d.collect()}))
            .option("checkpointLocation", str(tmp_path / name)).start()
        )
        q.processAllAvailable()
        q.stop()
        return out

    def starts(run: str) -> dict[str, int]:
        return {
            json.loads(w["key"])["window"]["start"].split("+")[0]: w[run] for w in report.windows if w[run] is not None
        }

    assert report.windows and report.window_shifts()["later"] > 0
    assert starts("recorded") == emitted_on_spark("2 seconds", "spark-2s")
    assert starts("replayed") == emitted_on_spark("12 seconds", "spark-12s")


def _aggregated(session, delay: str):
    return (
        session.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1)
        .load(os.environ["STATESTREAM_TEST_REPLAY_INPUT"])
        .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", delay).groupBy(F.window("t", "10 seconds"))
        .agg(F.count("*").alias("n"), F.sum("id").alias("s"), F.avg("id").alias("a"), F.max("id").alias("mx"), F.stddev("ms").alias("sd"))
    )


def aggregated_query(ss):
    """Count, sum, avg, max and stddev by 10 s window, 2 s delay (``MODULE:FUNCTION``)."""
    return _aggregated(ss, "2 seconds")


@pytest.mark.parametrize("mode", ["update", "append"])
def test_a_restated_window_is_what_a_longer_delay_emits(spark, tmp_path, no_data_batches_off, monkeypatch, mode):
    """The late rows of a 2 s run (in the ledger) restate its windows: each restated window has
    the values Spark's engine emits for it with a delay no row exceeds (10 minutes), and the
    windows restated are the ones whose rows came late."""
    from statestream import StreamingSession
    from statestream.tools.restate import restate

    _write(tmp_path / "in")
    monkeypatch.setenv("STATESTREAM_TEST_REPLAY_INPUT", str(tmp_path / "in"))
    with session_confs(spark, {"spark.statestream.lateRows.path": str(tmp_path / "ledger")}):
        q = aggregated_query(StreamingSession(spark)).writeStream.outputMode(mode).format("noop")
        q = q.option("checkpointLocation", str(tmp_path / "ck")).start()
        q.processAllAvailable()
        q.stop()
    restated = {r.window.start: r.asDict() for r in restate(StreamingSession(spark), str(tmp_path / "ck"), aggregated_query, str(tmp_path / "ledger")).collect()}

    final: dict = {}
    truth = (
        _aggregated(spark, "10 minutes").writeStream.outputMode("update")
        .foreachBatch(lambda d, b: final.update({r.window.start: r.asDict() for r in d.collect()}))
        .option("checkpointLocation", str(tmp_path / "spark-long")).start()
    )
    truth.processAllAvailable()
    truth.stop()
    assert restated and set(restated) <= set(final)
    for start, row in restated.items():
        expected = final[start]
        assert (row["n"], row["s"], row["mx"]) == (expected["n"], expected["s"], expected["mx"]), start
        assert row["a"] == pytest.approx(expected["a"]) and row["sd"] == pytest.approx(expected["sd"]), start
        assert row["revision"] >= 1
    assert any(r["emitted_batch"] is not None and r["revision"] >= 2 for r in restated.values())
    if mode == "update":  # the command line gives the same rows
        from statestream.commands.cli import main

        assert main(["restate", str(tmp_path / "ck"), "--ledger", str(tmp_path / "ledger"), "--query",
                     "tests.spark.test_lateness:aggregated_query", "--to", str(tmp_path / "restated")]) == 0
        assert spark.read.parquet(str(tmp_path / "restated")).count() == len(restated)


def test_restate_refuses_an_aggregate_whose_merge_depends_on_the_order(spark, tmp_path, no_data_batches_off, monkeypatch):
    """``first`` keeps the first row it met: late rows cannot be added to it after the fact."""
    from statestream import StreamingSession
    from statestream.errors import CheckpointError
    from statestream.tools.restate import restate

    _write(tmp_path / "in", range(0, 4))
    monkeypatch.setenv("STATESTREAM_TEST_REPLAY_INPUT", str(tmp_path / "in"))

    def with_first(ss):
        return (
            ss.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(tmp_path / "in"))
            .withColumn("t", F.timestamp_millis("ms")).withWatermark("t", "2 seconds").groupBy(F.window("t", "10 seconds"))
            .agg(F.count("*").alias("n"), F.first("id").alias("f"))
        )

    with session_confs(spark, {"spark.statestream.lateRows.path": str(tmp_path / "ledger")}):
        q = with_first(StreamingSession(spark)).writeStream.outputMode("update").format("noop")
        q = q.option("checkpointLocation", str(tmp_path / "ck")).start()
        q.processAllAvailable()
        q.stop()
    with pytest.raises(CheckpointError, match="cannot restate the aggregate f"):
        restate(StreamingSession(spark), str(tmp_path / "ck"), with_first, str(tmp_path / "ledger"))


def test_a_restatement_follows_the_finality_revisions(spark, tmp_path, no_data_batches_off, monkeypatch):
    """With the finality columns on, a window's emissions include the final row emitted when the
    watermark closed it: its restatement's revision is one more than the last revision emitted."""
    from statestream import StreamingSession
    from statestream.tools.restate import restate

    _write(tmp_path / "in")
    monkeypatch.setenv("STATESTREAM_TEST_REPLAY_INPUT", str(tmp_path / "in"))
    emitted: dict = {}

    def collect(df, _batch_id):
        for r in df.collect():
            emitted[r.window.start] = max(emitted.get(r.window.start, 0), r.revision)

    confs = {"spark.statestream.lateRows.path": str(tmp_path / "ledger"), "spark.statestream.aggregation.finality.enabled": "true"}
    with session_confs(spark, confs):
        q = aggregated_query(StreamingSession(spark)).writeStream.outputMode("update").foreachBatch(collect)
        q = q.option("checkpointLocation", str(tmp_path / "ck")).start()
        q.processAllAvailable()
        q.stop()
        restated = restate(StreamingSession(spark), str(tmp_path / "ck"), aggregated_query, str(tmp_path / "ledger")).collect()
    assert restated
    for row in restated:
        if row.emitted_batch is not None:
            assert row.revision == emitted[row.window.start] + 1, row
    assert any(r.emitted_batch is not None and emitted[r.window.start] >= 2 for r in restated)
