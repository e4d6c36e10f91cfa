"""Spark's state data sources over statestream's checkpoints (issue 16, item 1).

The same batches run on Spark's engine and on statestream; then ``spark.read.format(...)`` over
Spark's checkpoint and ``ss.read.format(...)`` over statestream's must give the same rows:
``statestore`` as of every batch, its change feed over every range, and ``state-metadata``.
One run of each engine per operator, shared by the cases that read it. Rows are compared
sorted (neither reader orders them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import StreamRun, assert_same_as_uninterrupted, assert_same_batches, run_repartitioned, run_restarted, run_stream
from tests.differential.test_stream_joins import INPUT as JOIN_INPUT
from tests.differential.test_stream_joins import SCHEMA as JOIN_SCHEMA
from tests.differential.test_stream_joins import _range_join
from tests.spark_confs import session_confs


def _events(df: DataFrame) -> DataFrame:
    return df.withColumn("t", F.timestamp_seconds("v"))


def windowed_aggregate(df: DataFrame) -> DataFrame:
    return (
        _events(df).withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "5 seconds"), (F.col("v") % 2).alias("odd"))
        .agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.avg("v").alias("a"), F.max("k").alias("m"))
    )


def deduplicate(df: DataFrame) -> DataFrame:
    return _events(df).withWatermark("t", "10 seconds").dropDuplicates(["k", "t"])


def deduplicate_within_watermark(df: DataFrame) -> DataFrame:
    return _events(df).withWatermark("t", "10 seconds").dropDuplicatesWithinWatermark(["k"])


def sessions(df: DataFrame) -> DataFrame:
    return (
        _events(df).withWatermark("t", "10 seconds")
        .groupBy(F.session_window("t", "4 seconds"), (F.col("v") % 2).alias("odd"))
        .agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.max("k").alias("m"))
    )


def limit(df: DataFrame) -> DataFrame:
    return df.limit(5)


#: operator -> (query, output mode); each batch below is one input file
QUERIES: dict[str, tuple[Callable[[DataFrame], DataFrame], str]] = {
    "aggregate": (windowed_aggregate, "update"),
    "dedup": (deduplicate, "append"),
    "dedup_within_watermark": (deduplicate_within_watermark, "append"),
    "limit": (limit, "append"),
    "sessions": (sessions, "append"),
    "join": (_range_join("left"), "append"),
}

BATCHES = [
    [(1, "a"), (2, "b"), (3, "a"), (3, "a")],
    [(6, "b"), (7, "c"), (12, "a"), (2, "b")],
    [(14, "c"), (21, "d"), (22, "a"), (1, "z")],
    [(30, "a"), (31, "e"), (33, "b")],
    [(45, "f")],
]
SCHEMA = "v LONG, k STRING"


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict[str, tuple[StreamRun, StreamRun]]:
    """Each operator's query on both engines, once per module: (Spark's run, statestream's)."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    out = {}
    for name, (build, mode) in QUERIES.items():
        tmp = tmp_path_factory.mktemp(f"state-readers-{name}")
        batches, schema = (JOIN_INPUT, JOIN_SCHEMA) if name == "join" else (BATCHES, SCHEMA)
        expected = run_stream(spark, build, batches, schema, mode, tmp)
        actual = run_stream(ss, build, batches, schema, mode, tmp)
        assert [b.batch_id for b in expected.batches] == [b.batch_id for b in actual.batches], (expected.describe(), actual.describe())
        out[name] = (expected, actual)
    return out


def _rows(df: DataFrame) -> list[str]:
    return sorted(str(r) for r in df.collect())


def _both(spark, runs, name: str, fmt: str, options: dict[str, Any]) -> tuple[DataFrame, DataFrame]:
    from statestream import StreamingSession

    expected, actual = runs[name]
    theirs = spark.read.format(fmt).options(**options).load(expected.checkpoint)
    ours = StreamingSession(spark).read.format(fmt).options(**options).load(actual.checkpoint)
    return theirs, ours


def _assert_same(spark, runs, name: str, fmt: str, options: dict[str, Any]) -> list[str]:
    theirs, ours = _both(spark, runs, name, fmt, options)
    assert ours.schema == theirs.schema, f"{name} {options}:\nSpark: {theirs.schema.simpleString()}\nours:  {ours.schema.simpleString()}"
    expected, got = _rows(theirs), _rows(ours)
    assert got == expected, f"{name} {options}:\nSpark: {expected}\nours:  {got}"
    return expected


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_state_metadata(spark, runs, name):
    rows = _assert_same(spark, runs, name, "state-metadata", {})
    assert rows, "no operator listed"


JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")

#: operator -> the option sets that pick what to read: a join's sides and its four stores
READS = {name: [{}] for name in QUERIES}
READS["join"] = [{"joinSide": "left"}, {"joinSide": "right"}] + [{"storeName": s} for s in JOIN_STORES]


#: (operator, what to read) cases, named like ``join-joinSide=left``
PICKS = [
    pytest.param(name, pick, id=name + "".join(f"-{k}={v}" for k, v in pick.items()))
    for name in sorted(QUERIES) for pick in READS[name]
]


@pytest.mark.parametrize("name, pick", PICKS)
def test_state_as_of_every_batch(spark, runs, name, pick):
    expected, _ = runs[name]
    seen = []
    for batch in [None] + [b.batch_id for b in expected.batches]:
        seen += _assert_same(spark, runs, name, "statestore", dict(pick) if batch is None else dict(pick, batchId=batch))
    assert seen, f"{pick}: the state was empty at every batch: the comparison proves nothing"


@pytest.mark.parametrize("name, pick", PICKS)
def test_a_large_store_is_read_in_slices_through_the_layered_store(spark, runs, name, pick, monkeypatch):
    """Past ``LARGE_STORE_BYTES`` of files a partition is loaded as runs on the task's local disk
    and read a slice at a time (so that a state larger than memory can be read back): the rows
    are Spark's, as of the last batch and of the first."""
    from statestream.tools import state_reader

    monkeypatch.setattr(state_reader, "LARGE_STORE_BYTES", -1)  # every store takes that path
    expected, _ = runs[name]
    seen = []
    for batch in [None, expected.batches[0].batch_id]:
        # the rows (the schema does not depend on the path: test_state_as_of_every_batch)
        theirs, ours = _both(spark, runs, name, "statestore", dict(pick) if batch is None else dict(pick, batchId=batch))
        rows = _rows(theirs)
        assert _rows(ours) == rows, f"{name} {pick} batch {batch}"
        seen += rows
    assert seen, f"{pick}: the state was empty: the comparison proves nothing"


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_change_feed(spark, runs, name):
    expected, _ = runs[name]
    last = expected.batches[-1].batch_id
    for pick in READS[name]:
        if "joinSide" in pick or "storeName" in pick:
            continue  # Spark refuses a side's change feed; the stores': test_join_store_change_feed
        rows = _assert_same(spark, runs, name, "statestore", dict(pick, readChangeFeed="true", changeStartBatchId=0))
        assert any("delete" in r for r in rows) or name == "limit", f"{pick}: no removal in the change feed: evictions went untested"
        for start, end in ((1, 1), (1, last - 1), (last, last)):
            _assert_same(spark, runs, name, "statestore", dict(pick, readChangeFeed="true", changeStartBatchId=start, changeEndBatchId=end))


@pytest.mark.parametrize("store", JOIN_STORES)
def test_join_store_change_feed(spark, runs, store):
    expected, _ = runs["join"]
    last = expected.batches[-1].batch_id
    rows = _assert_same(spark, runs, "join", "statestore", {"storeName": store, "readChangeFeed": "true", "changeStartBatchId": 0})
    assert any("delete" in r for r in rows), f"{store}: no removal in the change feed: evictions went untested"
    for start, end in ((1, 1), (1, last - 1), (last, last)):
        _assert_same(spark, runs, "join", "statestore", {"storeName": store, "readChangeFeed": "true", "changeStartBatchId": start, "changeEndBatchId": end})


#: option sets that Spark refuses, and where: all of them at ``load()``
BAD_OPTIONS = {
    "negative_batch": {"batchId": -1},
    "batch_not_committed": {"batchId": 99},
    "negative_operator": {"operatorId": -2},
    "empty_store": {"storeName": "  "},
    "bad_join_side": {"joinSide": "both"},
    "join_side_and_store": {"joinSide": "left", "storeName": "x"},
    "timers_and_var": {"readRegisteredTimers": "true", "stateVarName": "x"},
    "timers_not_boolean": {"readRegisteredTimers": "maybe"},
    "change_feed_and_batch": {"readChangeFeed": "true", "batchId": 1, "changeStartBatchId": 0},
    "change_feed_without_start": {"readChangeFeed": "true"},
    "change_end_before_start": {"readChangeFeed": "true", "changeStartBatchId": 3, "changeEndBatchId": 1},
    "change_start_negative": {"readChangeFeed": "true", "changeStartBatchId": -1},
    "change_options_without_feed": {"changeStartBatchId": 1},
    "snapshot_partition_alone": {"snapshotPartitionId": 0},
    "snapshot_start_alone": {"snapshotStartBatchId": 0},
    "snapshot_after_batch": {"snapshotStartBatchId": 3, "snapshotPartitionId": 0, "batchId": 1},
    "snapshot_partition_missing": {"snapshotStartBatchId": 0, "snapshotPartitionId": 7},
    "no_such_operator": {"operatorId": 5},
    "no_such_store": {"storeName": "left-keyToNumValues"},
    "batch_not_a_number": {"batchId": "one"},
    "join_side_of_an_aggregate": {"joinSide": "left"},
    "variable_of_an_aggregate": {"stateVarName": "x"},
    "timers_of_an_aggregate": {"readRegisteredTimers": "true"},
}

#: bad option sets on the join's checkpoint
BAD_JOIN_OPTIONS = {
    "join_side_and_change_feed": {"joinSide": "left", "readChangeFeed": "true", "changeStartBatchId": 0},
    "no_such_join_store": {"storeName": "left-nothing"},
}


def _failure(fn: Callable[[], Any]) -> tuple[type, str]:
    """The class and text of what ``fn`` raised (``type(None)`` when it raised nothing)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        java = getattr(exc, "java_exception", None)
        text = str(java.getMessage()) if java is not None else str(exc).split("\n\nJVM stacktrace:")[0]
        return type(exc), text
    return type(None), ""


def _same_failure(ours: tuple[type, str], theirs: tuple[type, str], normalise: Callable[[str], str] = lambda t: t) -> None:
    """statestream raises what PySpark raised, catchable the same way (PySpark's class of that
    name, of which Spark's captured class is a subclass too), with the same text."""
    base = next((c for c in theirs[0].__mro__ if c.__module__ == "pyspark.errors.exceptions.base"), theirs[0])
    assert issubclass(ours[0], base), f"ours {ours[0].__mro__} is not a {base}: {ours[1]}"
    assert normalise(ours[1]) == normalise(theirs[1])


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS) + sorted(BAD_JOIN_OPTIONS))
def test_bad_options_fail_as_on_spark(spark, runs, case, tmp_path):
    import shutil

    from statestream import StreamingSession

    expected, actual = runs["join" if case in BAD_JOIN_OPTIONS else "aggregate"]
    # each case reads copies: Spark's reader leaves empty directories behind for an unknown
    # operator or store, after which its operator metadata reads as absent and a later case
    # would fail differently
    theirs_ck, ours_ck = shutil.copytree(expected.checkpoint, tmp_path / "spark"), shutil.copytree(actual.checkpoint, tmp_path / "ours")
    options = BAD_JOIN_OPTIONS.get(case) or BAD_OPTIONS[case]
    theirs = _failure(lambda: spark.read.format("statestore").options(**options).load(str(theirs_ck)).collect())
    ours = _failure(lambda: StreamingSession(spark).read.format("statestore").options(**options).load(str(ours_ck)).collect())
    assert theirs[0] is not type(None), f"Spark accepted {options}"
    # the checkpoint's own path differs between the runs
    paths = (str(Path(theirs_ck).resolve()), str(Path(ours_ck).resolve()))
    _same_failure(ours, theirs, lambda text: text.replace(paths[0], "<ckpt>").replace(paths[1], "<ckpt>"))


def test_path_is_required(spark):
    from statestream import StreamingSession

    for fmt in ("statestore", "state-metadata"):
        theirs = _failure(lambda: spark.read.format(fmt).load().collect())
        ours = _failure(lambda: StreamingSession(spark).read.format(fmt).load().collect())
        assert theirs[0] is not type(None), fmt
        _same_failure(ours, theirs)


def test_other_formats_are_sparks(spark, tmp_path):
    """``ss.read`` is Spark's reader for every other format (a job keeps its batch code)."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    spark.range(3).write.parquet(str(tmp_path / "p"))
    assert sorted(r.id for r in ss.read.parquet(str(tmp_path / "p")).collect()) == [0, 1, 2]
    assert sorted(r.id for r in ss.read.format("parquet").load(str(tmp_path / "p")).collect()) == [0, 1, 2]
    assert ss.range(2).count() == 2 and ss.createDataFrame([(1,)], "a INT").count() == 1


# -- offline repartition (issue 16, item 2) ----------------------------------------------------------
#
# statestream's run of each query again, from 4 state partitions, repartitioned to 7 after the
# second input file and to 2 after the fourth: the batches it runs (the repartition batches run
# nothing) must equal Spark's uninterrupted run above, batch for batch, and its state at the end
# must read as Spark's does (keys and values; partition ids differ by design).

@pytest.mark.parametrize("name", sorted(QUERIES))
def test_repartition_then_more_batches_equals_spark(spark, runs, name, tmp_path):
    from statestream import StreamingSession

    build, mode = QUERIES[name]
    batches, schema = (JOIN_INPUT, JOIN_SCHEMA) if name == "join" else (BATCHES, SCHEMA)
    expected, _ = runs[name]
    if name == "join":
        # two inputs: a restart forgets each input's maximum event time and keeps only the
        # global watermark (on both engines), so a restart alone changes the join's later
        # watermarks; Spark's run restarted where ours is repartitioned is the reference
        expected = run_restarted(spark, build, batches, schema, mode, tmp_path / "spark")
    got, results = run_repartitioned(spark, build, batches, schema, mode, tmp_path)
    assert_same_as_uninterrupted(expected, got, results)
    if name != "limit":
        assert sum(results[0].rows.values()) > 0, "the first repartition moved no state: the test would prove nothing"
    # the state after the last batch reads as Spark's, from the 2 partitions it now has
    checkpoint = str(tmp_path / "w" / "checkpoint")
    for pick in READS[name]:
        theirs = spark.read.format("statestore").options(**pick).load(expected.checkpoint)
        ours = StreamingSession(spark).read.format("statestore").options(**pick).load(checkpoint)
        assert _rows(ours.drop("partition_id")) == _rows(theirs.drop("partition_id")), pick
        assert {r.partition_id for r in ours.select("partition_id").collect()} <= {0, 1}, pick
    metadata = StreamingSession(spark).read.format("state-metadata").load(checkpoint).collect()
    assert {r.numPartitions for r in metadata} == {2}, metadata
    # a change feed cannot cross a repartition batch (every key rewritten, maybe elsewhere):
    # refused naming the batch; the changes after it read
    from statestream.checkpoint.files import CheckpointFileManager
    from statestream.checkpoint.offsets import OffsetSeqLog, is_repartition_batch

    log = OffsetSeqLog(CheckpointFileManager(checkpoint).child("offsets"))
    last = log.get_latest_batch_id()
    assert last is not None
    moved = [b for b in range(last + 1) if is_repartition_batch(log, b)]
    assert len(moved) == 2, moved
    pick = next(p for p in READS[name] if "joinSide" not in p)  # (Spark refuses a join side's feed)
    feed = dict(pick, readChangeFeed="true", changeStartBatchId=0)
    with pytest.raises(Exception, match=f"cannot span batch {moved[0]}, where the state was repartitioned from 4 to 7"):
        StreamingSession(spark).read.format("statestore").options(**feed).load(checkpoint).collect()
    if moved[-1] < last:
        feed["changeStartBatchId"] = moved[-1] + 1
        StreamingSession(spark).read.format("statestore").options(**feed).load(checkpoint).collect()


# -- rollback (issue 16, item 3) ------------------------------------------------------------------


def test_rollback_then_restart_equals_spark_restarted_there(spark, tmp_path):
    """statestream runs all five files, is rolled back to the batch where Spark's run of the
    first two files stopped, and restarts: what it reprocesses equals Spark's run restarted
    there with the other files present, batch for batch (ids included); the state as of that
    batch reads the same before and after the rollback."""
    import time

    from pyspark.sql.types import StructType

    from statestream import StreamingSession
    from tests.differential.harness import write_input_file

    ss = StreamingSession(spark)
    build, mode = QUERIES["aggregate"]
    ours_dir, spark_dir = tmp_path / "ours", tmp_path / "spark"
    full = run_stream(ss, build, BATCHES, SCHEMA, mode, tmp_path, workdir=ours_dir)
    first = run_stream(spark, build, BATCHES[:2], SCHEMA, mode, tmp_path, workdir=spark_dir)
    to_batch = first.batches[-1].batch_id
    assert [b.batch_id for b in full.batches][: len(first.batches)] == [b.batch_id for b in first.batches]
    assert full.batches[-1].batch_id > to_batch + 2, "nothing after the rollback point: the test would prove nothing"
    as_of = lambda: _rows(ss.read.format("statestore").option("batchId", to_batch).load(full.checkpoint))  # noqa: E731
    before = as_of()

    result = ss.checkpointManager.rollback(full.checkpoint, to_batch)
    assert result.batches_removed == list(range(to_batch + 1, full.batches[-1].batch_id + 1))
    assert result.state_files_removed > 0 and result.source_log_entries_removed == {0: [2, 3, 4]}
    assert as_of() == before
    assert _rows(ss.read.format("statestore").load(full.checkpoint)) == before  # the last committed batch now

    schema = StructType.fromDDL(SCHEMA)
    for i in range(2, len(BATCHES)):  # Spark's remaining files, present before its restart
        write_input_file(spark_dir / "input", i, BATCHES[i], schema, "parquet", time.time() - 3600 + i)
    expected = run_stream(spark, build, [], SCHEMA, mode, tmp_path, workdir=spark_dir)
    again = run_stream(ss, build, [], SCHEMA, mode, tmp_path, workdir=ours_dir)
    assert [b.batch_id for b in again.batches][0] == to_batch + 1
    assert_same_batches(expected, again)


def test_rollback_refusals_name_what_is_wrong(spark, runs, tmp_path):
    """Refused: a batch that is not committed; a running query; and a start after an
    interrupted rollback says how to finish it."""
    import shutil

    from statestream import StreamingSession
    from statestream.errors import CheckpointError
    from statestream.tools.rollback import ROLLBACK_MARKER

    _, actual = runs["dedup"]
    checkpoint = str(tmp_path / "checkpoint")
    shutil.copytree(actual.checkpoint, checkpoint)
    ss = StreamingSession(spark)
    last = actual.batches[-1].batch_id
    with pytest.raises(CheckpointError, match=f"batch {last + 5} is not a committed batch of .*: the committed batches retained are 0..{last}"):
        ss.checkpointManager.rollback(checkpoint, last + 5)
    (Path(checkpoint) / ROLLBACK_MARKER).write_text('{"toBatch": 1}')
    build, mode = QUERIES["dedup"]
    (tmp_path / "in").mkdir()
    query = (
        build(ss.readStream.format("parquet").schema(SCHEMA).load(str(tmp_path / "in")))
        .writeStream.outputMode(mode).foreachBatch(lambda df, b: None).option("checkpointLocation", checkpoint)
    )
    with pytest.raises(CheckpointError, match=r"rollback of the checkpoint .* to batch 1 was interrupted .*--to-batch 1` again"):
        query.start()
    with pytest.raises(CheckpointError, match="to batch 1 was interrupted: finish it first"):
        ss.checkpointManager.rollback(checkpoint, 2)
    ss.checkpointManager.rollback(checkpoint, 1)
    assert not (Path(checkpoint) / ROLLBACK_MARKER).exists()
    assert sorted(int(n) for n in os.listdir(Path(checkpoint) / "commits") if n.isdigit())[-1] == 1


# -- the late-row ledger (issue 16, item 5) ---------------------------------------------------------


def _ledger(path: Path) -> Any:
    import pyarrow.dataset as ds

    return ds.dataset(str(path / "operator=0"), format="parquet", partitioning="hive").to_table()


@pytest.mark.parametrize("name", ["aggregate", "dedup", "join"])
def test_late_row_ledger_holds_what_the_watermark_dropped(spark, runs, name, tmp_path):
    """With the ledger on, each batch's late rows are written once: as many per batch as Spark's
    run counts in ``numRowsDroppedByWatermark``, with the watermark that dropped them; a rollback
    takes the undone batches' rows away and the rerun writes its own, none twice."""
    import collections

    from statestream import StreamingSession
    from statestream.operators.late_rows import LATE_ROWS_CONF

    build, mode = QUERIES[name]
    batches, schema = (JOIN_INPUT, JOIN_SCHEMA) if name == "join" else (BATCHES, SCHEMA)
    expected, _ = runs[name]
    if name == "aggregate":  # its windows close late: a row of a long-closed window (Spark's run too)
        batches = BATCHES + [[(3, "late"), (50, "x")]]
        expected = run_stream(spark, build, batches, schema, mode, tmp_path / "spark")
    drops = {b.batch_id: b.state[0]["numRowsDroppedByWatermark"] for b in expected.batches if b.state[0]["numRowsDroppedByWatermark"]}
    assert drops, f"Spark's run of {name} drops no late row: the test would prove nothing"
    ledger, work = tmp_path / "late", tmp_path / "w"
    ss = StreamingSession(spark)
    with session_confs(spark, {LATE_ROWS_CONF: str(ledger)}):
        run = run_stream(ss, build, batches, schema, mode, tmp_path, workdir=work)
        table = _ledger(ledger)
        assert dict(collections.Counter(table.column("batch").to_pylist())) == drops
        marks = {b.batch_id: b.watermark for b in run.batches}
        for batch, watermark in zip(table.column("batch").to_pylist(), table.column("_watermark").to_pylist()):
            assert watermark.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" == marks[batch]
        if name == "dedup":  # input rows as they came: (1, "z") of the third file, after the watermark passed 1 s
            assert sorted(zip(table.column("v").to_pylist(), table.column("k").to_pylist())) == [(1, "z")]
        to_batch = min(drops) - 1
        result = ss.checkpointManager.rollback(run.checkpoint, to_batch)
        assert result.late_row_batches_removed == len(drops)
        rerun = run_stream(ss, build, [], schema, mode, tmp_path, workdir=work)
    again = collections.Counter(_ledger(ledger).column("batch").to_pylist())
    counted = {b.batch_id: b.state[0]["numRowsDroppedByWatermark"] for b in rerun.batches if b.state[0]["numRowsDroppedByWatermark"]}
    assert dict(again) == counted and sum(counted.values()) == sum(drops.values())


def test_dedup_floating_point_keys_read_as_on_spark(spark, tmp_path):
    """A deduplication keeps floating-point keys as their bits (so that -0.0 and 0.0, NaNs, are
    one key as in Spark's binary comparison); the reader shows them as the query had them."""
    from statestream import StreamingSession

    def build(df: DataFrame) -> DataFrame:
        return df.dropDuplicates(["x", "s"])

    batches = [
        [(1.5, "a"), (-0.0, "a"), (0.0, "a"), (float("nan"), "b")],
        [(float("nan"), "b"), (2.25, "c"), (1.5, "a")],
    ]
    schema = "x DOUBLE, s STRING"
    expected = run_stream(spark, build, batches, schema, "append", tmp_path)
    actual = run_stream(StreamingSession(spark), build, batches, schema, "append", tmp_path)
    assert_same_batches(expected, actual)
    runs = {"floats": (expected, actual)}
    for batch in (0, 1):
        assert _assert_same(spark, runs, "floats", "statestore", {"batchId": batch})
    assert _assert_same(spark, runs, "floats", "statestore", {"readChangeFeed": "true", "changeStartBatchId": 0})


def test_repartition_on_restart_by_conf(spark, runs, tmp_path):
    """Opt-in: a restart whose session asks for another spark.sql.shuffle.partitions first
    repartitions the state to it (one repartition batch, skipped by the batch ids), and the
    batches then equal Spark's uninterrupted run."""
    import dataclasses

    from statestream import StreamingSession
    from statestream.runtime.microbatch import REPARTITION_ON_RESTART_CONF

    build, mode = QUERIES["aggregate"]
    expected, _ = runs["aggregate"]
    ss = StreamingSession(spark)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        first = run_stream(ss, build, BATCHES[:2], SCHEMA, mode, tmp_path, workdir=tmp_path / "w")
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        spark.conf.set(REPARTITION_ON_RESTART_CONF, "true")
        second = run_stream(ss, build, BATCHES[2:], SCHEMA, mode, tmp_path, workdir=tmp_path / "w")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        spark.conf.unset(REPARTITION_ON_RESTART_CONF)
    got = first.batches + second.batches
    skipped = first.batches[-1].batch_id + 1
    assert second.batches[0].batch_id == skipped + 1, [b.batch_id for b in got]
    renumbered = [dataclasses.replace(b, batch_id=i) for i, b in enumerate(got)]
    assert_same_batches(expected, StreamRun("StreamingSession (4 -> 3 at restart)", renumbered))
    metadata = ss.read.format("state-metadata").load(second.checkpoint).collect()
    assert {r.numPartitions for r in metadata} == {3}, metadata
    parts = {r.partition_id for r in ss.read.format("statestore").load(second.checkpoint).select("partition_id").collect()}
    assert parts and parts <= {0, 1, 2}, parts


@pytest.mark.parametrize("name", ["aggregate", "dedup", "dedup_within_watermark", "sessions"])
def test_small_batches_in_one_state_task_or_one_per_partition_match_spark(spark, runs, tmp_path, caplog, name):
    """A batch after a small one runs each operator's state partitions in one task
    (``runtime.small_batches``); with the conf at 0 every batch runs one task per partition.
    Both give Spark's batches, state row counts and state (read back with the state reader)."""
    import logging

    from statestream import StreamingSession
    from statestream.runtime.small_batches import SINGLE_STATE_TASK_MAX_ROWS_CONF

    build, mode = QUERIES[name]
    expected, _ = runs[name]
    ss = StreamingSession(spark)
    got = {}
    try:
        for max_rows in ("0", "1000"):
            spark.conf.set(SINGLE_STATE_TASK_MAX_ROWS_CONF, max_rows)
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="statestream.runtime.microbatch"):
                got[max_rows] = run_stream(ss, build, BATCHES, SCHEMA, mode, tmp_path / max_rows)
            got[max_rows + " single"] = sorted(
                int(r.getMessage().split()[1]) for r in caplog.records if "in one task" in r.getMessage()
            )
    finally:
        spark.conf.unset(SINGLE_STATE_TASK_MAX_ROWS_CONF)
    assert got["0 single"] == []
    assert got["1000 single"] == [b.batch_id for b in got["1000"].batches][1:]  # all but the first of the run
    for max_rows in ("0", "1000"):
        assert_same_batches(expected, got[max_rows])
        theirs = spark.read.format("statestore").load(expected.checkpoint)
        ours = ss.read.format("statestore").load(got[max_rows].checkpoint)
        assert _rows(ours) == _rows(theirs), name


def test_change_feed_of_a_window_updated_and_evicted_in_one_batch(spark, tmp_path):
    """With no-data batches off, a window can take rows and leave the state in the same batch:
    Spark's delta file holds the put and then the removal, so its change feed shows an update
    (the window's last value) before the delete; statestream's delta keeps such a put too
    (``OP_PUT_REMOVED``), and rebuilding the version still removes the window."""
    from statestream import StreamingSession

    # batch 1: row 3 is not late (the late-row watermark is batch 0's, 0) but its window [0, 5)
    # leaves the state (the eviction watermark is 20 - 10 s)
    batches = [[(1, "a"), (20, "b")], [(3, "a"), (30, "c")], [(31, "d"), (60, "e")], [(61, "f")]]
    with session_confs(spark, {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        expected = run_stream(spark, windowed_aggregate, batches, SCHEMA, "update", tmp_path / "spark")
        actual = run_stream(StreamingSession(spark), windowed_aggregate, batches, SCHEMA, "update", tmp_path / "ours")
    assert_same_batches(expected, actual)
    runs = {"one_batch": (expected, actual)}
    rows = _assert_same(spark, runs, "one_batch", "statestore", {"readChangeFeed": "true", "changeStartBatchId": 0})
    window = "window=Row(start=datetime.datetime(1970, 1, 1, 0, 0), end=datetime.datetime(1970, 1, 1, 0, 0, 5)), _groupingexpression=1"
    in_batch_1 = sorted(r.split("change_type='")[1].split("'")[0] for r in rows if "batch_id=1," in r and window in r)
    assert in_batch_1 == ["delete", "update"], rows
    for batch_id in range(len(batches)):  # the state as of every batch still matches
        _assert_same(spark, runs, "one_batch", "statestore", {"batchId": batch_id})
