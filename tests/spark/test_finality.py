"""Finality on output rows (issue 50, item 5), checked against Spark's engine.

With ``spark.statestream.aggregation.finality.enabled`` on, an aggregation's rows carry
``revision`` and ``is_final``. The truth each is checked against is a run of Spark's engine over
the same batches:

* without the two columns, and without the extra final rows of keys the watermark evicted with no
  update, statestream's update-mode rows are Spark's update-mode rows, batch for batch;
* the rows marked final are exactly Spark's append-mode rows of the same query, batch for batch
  (append mode emits a window once, when the watermark passes it);
* ``revision`` counts a key's emissions: 1, 2, 3, ... across batches (and across a restart),
  and a key's final row is its last.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from tests.differential.harness import write_input_file
from tests.spark_confs import session_confs

SCHEMA = StructType([StructField("k", LongType()), StructField("ms", LongType()), StructField("v", LongType())])
BATCHES = 8
BASE_MS = 1_700_000_000_000
FINALITY = "spark.statestream.aggregation.finality.enabled"


def _batches(seed: int = 11) -> list[list[tuple[int, int, int]]]:
    """Batch i: 30 rows of three keys around a front 7 s later each batch, some up to 12 s late."""
    rng = random.Random(seed)
    out = []
    for i in range(BATCHES):
        front = BASE_MS + 7_000 * (i + 1)
        out.append([(rng.randrange(3), front - int(rng.expovariate(1 / 3000)), rng.randrange(100)) for _ in range(30)])
    return out


def _write(directory: Path, batches: range = range(BATCHES)) -> None:
    for i, rows in enumerate(_batches()):
        if i in batches:
            write_input_file(directory, i, rows, SCHEMA, "parquet", 1_700_000_000 + i)


def _aggregates():
    return F.count("*").alias("n"), F.sum("v").alias("total"), F.max("t").alias("last")


def _sketches():
    """Aggregates finished outside the plain merge: a sketch finished by the state step
    (HyperLogLog++) and a function recomputed over kept values (``percentile_approx``)."""
    return F.approx_count_distinct("v").alias("n"), F.percentile_approx("v", 0.5).alias("total"), F.max("t").alias("last")


def _query(session, directory: Path, windowed: bool = True, aggregates=_aggregates):
    events = session.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(directory))
    events = events.withColumn("t", F.timestamp_millis("ms")).withWatermark("t", "4 seconds")
    keys = [F.window("t", "10 seconds"), "k"] if windowed else ["k"]
    return events.groupBy(*keys).agg(*aggregates())


def _run(session, directory: Path, checkpoint: Path, mode: str, windowed: bool = True, aggregates=_aggregates) -> dict[int, list[dict]]:
    """Each batch's rows (by batch id), the window as its start."""
    out: dict[int, list[dict]] = {}

    def collect(df, batch_id):
        rows = []
        for r in df.collect():
            d = r.asDict()
            if "window" in d:
                d["window"] = d["window"]["start"]
            rows.append(d)
        out[batch_id] = rows

    query = (
        _query(session, directory, windowed, aggregates)
        .writeStream.outputMode(mode)
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    return out


def _without_finality(rows: list[dict]) -> set[tuple]:
    return {tuple(sorted((k, v) for k, v in r.items() if k not in ("revision", "is_final"))) for r in rows}


def _key(row: dict) -> tuple:
    return (row.get("window"), row["k"])


def _check_revisions(ours: dict[int, list[dict]]) -> dict[tuple, list[tuple[int, int, bool]]]:
    """Each key's (batch, revision, is_final) in order: revisions 1, 2, 3, ..., at most one
    final row, and that one last."""
    by_key: dict[tuple, list[tuple[int, int, bool]]] = defaultdict(list)
    for batch_id in sorted(ours):
        seen = set()
        for r in ours[batch_id]:
            assert _key(r) not in seen, f"a key emitted twice in batch {batch_id}: {r}"
            seen.add(_key(r))
            by_key[_key(r)].append((batch_id, r["revision"], r["is_final"]))
    for key, emissions in by_key.items():
        assert [rev for _, rev, _ in emissions] == list(range(1, len(emissions) + 1)), key
        finals = [i for i, (_, _, final) in enumerate(emissions) if final]
        assert finals in ([], [len(emissions) - 1]), (key, emissions)
    return by_key


@pytest.fixture
def finality_on(spark):
    with session_confs(spark, {FINALITY: "true"}):
        yield


@pytest.mark.parametrize("aggregates", [_aggregates, _sketches], ids=["merged", "finished"])
def test_update_mode_rows_are_sparks_and_the_final_rows_are_its_append_output(spark, tmp_path, finality_on, aggregates):
    from statestream import StreamingSession

    _write(tmp_path / "in")
    ours = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update", aggregates=aggregates)
    with session_confs(spark, {FINALITY: "false"}):
        update = _run(spark, tmp_path / "in", tmp_path / "spark-update", "update", aggregates=aggregates)
        append = _run(spark, tmp_path / "in", tmp_path / "spark-append", "append", aggregates=aggregates)
    assert sorted(ours) == sorted(update) == sorted(append)  # the same batches, no-data ones included
    by_key = _check_revisions(ours)
    re_emitted = 0
    for batch_id in sorted(ours):
        rows = ours[batch_id]
        assert all(set(r) == {"window", "k", "n", "total", "last", "revision", "is_final"} for r in rows)
        spark_update = _without_finality(update[batch_id])
        extra = [r for r in rows if next(iter(_without_finality([r]))) not in spark_update]
        # Spark's update rows, and besides them only final rows of keys evicted without an update
        assert _without_finality(rows) - _without_finality(extra) == spark_update, batch_id
        assert all(r["is_final"] for r in extra), batch_id
        re_emitted += len(extra)
        # the final rows are Spark's append-mode output of this batch
        assert _without_finality([r for r in rows if r["is_final"]]) == _without_finality(append[batch_id]), batch_id
    assert re_emitted > 0  # the stream has windows closed by a later batch's watermark
    assert any(len(e) > 2 for e in by_key.values())  # and windows updated more than once
    assert sum(1 for e in by_key.values() if e[-1][2]) == sum(len(rows) for rows in append.values())


def test_append_mode_rows_are_final_and_first(spark, tmp_path, finality_on):
    from statestream import StreamingSession

    _write(tmp_path / "in")
    ours = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "append")
    with session_confs(spark, {FINALITY: "false"}):
        append = _run(spark, tmp_path / "in", tmp_path / "spark-append", "append")
    assert sorted(ours) == sorted(append)
    emitted = 0
    for batch_id, rows in ours.items():
        assert all(r["revision"] == 1 and r["is_final"] is True for r in rows)
        assert _without_finality(rows) == _without_finality(append[batch_id]), batch_id
        emitted += len(rows)
    assert emitted > 0


def test_revisions_go_on_across_a_restart(spark, tmp_path, finality_on):
    """The counts are in the state: a run stopped after four batches and restarted emits what
    one run does (no-data batches off, so that both runs number their batches alike)."""
    from statestream import StreamingSession

    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        _restart_matches_one_run(spark, tmp_path, StreamingSession)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")


def _restart_matches_one_run(spark, tmp_path, StreamingSession) -> None:
    _write(tmp_path / "in", range(4))
    first = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update")
    _write(tmp_path / "in", range(4, BATCHES))
    second = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update")
    _write(tmp_path / "whole")
    whole = _run(StreamingSession(spark), tmp_path / "whole", tmp_path / "ours-whole", "update")
    assert not set(first) & set(second)
    assert {b: sorted(map(sorted, map(dict.items, rows))) for b, rows in {**first, **second}.items()} == {
        b: sorted(map(sorted, map(dict.items, rows))) for b, rows in whole.items()
    }
    _check_revisions({**first, **second})


def test_without_event_time_no_row_is_final(spark, tmp_path, finality_on):
    from statestream import StreamingSession

    _write(tmp_path / "in")
    ours = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update", windowed=False)
    with session_confs(spark, {FINALITY: "false"}):
        update = _run(spark, tmp_path / "in", tmp_path / "spark-update", "update", windowed=False)
    for batch_id, rows in update.items():
        assert _without_finality(ours.get(batch_id, [])) == _without_finality(rows), batch_id
    by_key = _check_revisions(ours)
    assert sorted(by_key) == [(None, 0), (None, 1), (None, 2)]
    assert not any(final for emissions in by_key.values() for _, _, final in emissions)
    assert [len(e) for e in by_key.values()] == [sum(1 for rows in update.values() for r in rows if r["k"] == k) for k in range(3)]


def test_the_columns_are_in_the_schema_and_selectable(spark, tmp_path, finality_on):
    from statestream import StreamingSession

    _write(tmp_path / "in", range(3))
    agg = _query(StreamingSession(spark), tmp_path / "in")
    assert agg.columns == ["window", "k", "n", "total", "last", "revision", "is_final"]
    assert agg.schema["revision"].dataType == LongType() and not agg.schema["is_final"].nullable
    out: list = []
    query = (
        agg.filter("is_final").select("k", "revision")
        .writeStream.outputMode("update")
        .foreachBatch(lambda df, _id: out.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    assert out and all(set(r.asDict()) == {"k", "revision"} for r in out)


def test_refusals_say_what_to_do(spark, tmp_path, finality_on):
    from statestream import StreamingSession
    from statestream.errors import StatestreamAnalysisException

    _write(tmp_path / "in", range(1))
    ss = StreamingSession(spark)
    with pytest.raises(StatestreamAnalysisException, match="complete mode emits every key"):
        _query(ss, tmp_path / "in").writeStream.outputMode("complete").format("memory").queryName("fin_c").start()
    events = ss.readStream.format("parquet").schema(SCHEMA).load(str(tmp_path / "in")).withColumn("t", F.timestamp_millis("ms"))
    with pytest.raises(StatestreamAnalysisException, match="already has a column named `revision`"):
        events.groupBy("k").agg(F.count("*").alias("revision"))
    with pytest.raises(StatestreamAnalysisException, match="already has a column named `Is_Final`"):
        events.groupBy("k").agg(F.count("*").alias("Is_Final"))  # names are case-insensitive, as in Spark
    with pytest.raises(StatestreamAnalysisException, match="session-window aggregations"):
        events.withWatermark("t", "1 second").groupBy(F.session_window("t", "5 seconds"), "k").count()
    with session_confs(spark, {FINALITY: "false"}):  # off (the default): Spark's columns
        assert events.groupBy("k").count().columns == ["k", "count"]


def test_turning_it_off_on_a_checkpoint_that_counts_is_refused(spark, tmp_path, finality_on):
    """The setting shapes the state (the counter is a value field): a restart with it changed
    fails on Spark's state schema check, which names the counter."""
    from statestream import StreamingSession

    _write(tmp_path / "in", range(2))
    _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update")
    # the state reader shows the counter after the buffers
    state = StreamingSession(spark).read.format("statestore").load(str(tmp_path / "ours")).collect()
    assert state and all(r["value"]["__statestream_revision"] >= 1 for r in state)
    _write(tmp_path / "in", range(2, 3))
    with session_confs(spark, {FINALITY: "false"}), pytest.raises(Exception, match="STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE") as failure:
        _run(StreamingSession(spark), tmp_path / "in", tmp_path / "ours", "update")
    assert "__statestream_revision" in str(failure.value)


def test_a_filter_reading_the_columns_stays_above_the_aggregation(spark, tmp_path, finality_on):
    """A conjunct that mixes ``is_final`` with a key must not move below the aggregation as if
    the schema's stand-in values were the rows' (it would drop the keys' rows before the state):
    the filtered query's rows are the unfiltered query's rows, filtered."""
    from statestream import StreamingSession

    _write(tmp_path / "in")
    everything = _run(StreamingSession(spark), tmp_path / "in", tmp_path / "all", "update")
    kept: dict[int, list[dict]] = {}

    def collect(df, batch_id):
        kept[batch_id] = [{**r.asDict(), "window": r["window"]["start"]} for r in df.collect()]

    query = (
        _query(StreamingSession(spark), tmp_path / "in").filter("(NOT is_final) OR k > 0")
        .writeStream.outputMode("update").foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "filtered")).start()
    )
    query.processAllAvailable()
    query.stop()
    expected = {b: [r for r in rows if not r["is_final"] or r["k"] > 0] for b, rows in everything.items()}
    def as_sets(by_batch):
        return {b: {tuple(sorted(r.items())) for r in rows} for b, rows in by_batch.items() if rows}

    assert as_sets(kept) == as_sets(expected)
    assert any(r["is_final"] and r["k"] == 0 for rows in everything.values() for r in rows)
