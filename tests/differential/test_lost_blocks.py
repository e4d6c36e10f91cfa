"""A batch that loses a block of its local checkpoints (their executor died) runs again and gives
Spark's batches.

Spark's engine recomputes a lost partition from its lineage, stateful steps included, so a query
survives a lost executor. statestream materialises a batch's output, and a stream-stream join's
intermediates, as local checkpoints, which have no lineage: the loop runs the whole batch again
(``MicroBatchExecution._run_batch_surviving_lost_blocks``). Here the loss is made certain by
dropping the blocks (what a dead executor leaves behind) at the moment the batch would read them,
on statestream only; Spark's engine runs the same input undisturbed, and every batch's rows,
watermark and state rows must match.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_stream
from tests.differential.test_stream_joins import INPUT as JOIN_INPUT
from tests.differential.test_stream_joins import SCHEMA as JOIN_SCHEMA
from tests.differential.test_stream_joins import _range_join
from tests.spark_confs import session_confs

T0 = dt.datetime(2024, 5, 1, 12, 0, 0)
SCHEMA = "k STRING, ts TIMESTAMP"
#: a windowed count with a 10 s watermark: state kept, updated, evicted; late rows dropped
INPUT = [
    [("a", T0), ("b", T0 + dt.timedelta(seconds=3))],
    [("a", T0 + dt.timedelta(seconds=12)), ("c", T0 + dt.timedelta(seconds=14))],
    [("a", T0 + dt.timedelta(seconds=31)), ("b", T0 + dt.timedelta(seconds=2))],  # b: late
    [("d", T0 + dt.timedelta(seconds=45)), ("a", T0 + dt.timedelta(seconds=33))],
    [("e", T0 + dt.timedelta(seconds=70))],
]


def _windowed_count(df: DataFrame) -> DataFrame:
    return df.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "10 seconds"), "k").count()


def _drop_blocks(df: DataFrame) -> None:
    """Remove the blocks of the local checkpoint ``df`` reads, and wait until they are gone: the
    persisted RDDs in the lineage of its relations (the checkpoint itself, or, for a one-task
    batch's rows split into their partitions after the job, the RDD under that split)."""
    from statestream._jvm.calls import jvm_seq

    logical = df._jdf.queryExecution().logical()
    leaves = [leaf for leaf in jvm_seq(logical.collectLeaves()) if leaf.getClass().getSimpleName() == "LogicalRDD"]
    assert leaves, logical.getClass().getName()
    pending = [leaf.rdd() for leaf in leaves]
    persisted = []
    while pending:
        rdd = pending.pop()
        level = rdd.getStorageLevel()
        if level.useMemory() or level.useDisk():
            persisted.append(rdd)
            continue
        pending.extend(dep.rdd() for dep in jvm_seq(rdd.dependencies()))
    assert persisted, "no local checkpoint under the batch's output"
    for rdd in persisted:
        rdd.unpersist(True)


def test_a_batch_whose_output_lost_its_blocks_runs_again(spark, ours, tmp_path, monkeypatch):
    """The sink finds the batch's output gone, in batch 2 once and in batch 3 twice in a row."""
    from statestream.sinks.foreach_batch import ForeachBatchSink

    losses = {2: 1, 3: 2}  # batch id -> how many of its attempts lose their blocks
    calls: list[int] = []
    add_batch = ForeachBatchSink.add_batch

    def losing(self: Any, batch_id: int, df: DataFrame, output_mode: str) -> None:
        calls.append(batch_id)
        if losses.get(batch_id, 0) > 0:
            losses[batch_id] -= 1
            _drop_blocks(df)
        add_batch(self, batch_id, df, output_mode)

    expected = run_stream(spark, _windowed_count, INPUT, SCHEMA, "update", tmp_path)
    monkeypatch.setattr(ForeachBatchSink, "add_batch", losing)
    actual = run_stream(ours(), _windowed_count, INPUT, SCHEMA, "update", tmp_path)
    assert_same_batches(expected, actual)
    assert any(b.state and b.state[0]["numRowsRemoved"] for b in actual.batches), "the input must evict state"
    # each lost attempt was followed by a whole new one, with the same batch id
    assert calls.count(2) == 2 and calls.count(3) == 3, calls
    assert losses == {2: 0, 3: 0}


@pytest.mark.slow
def test_a_join_whose_intermediate_lost_its_blocks_runs_the_batch_again(spark, ours, tmp_path, monkeypatch):
    """A stream-stream join's new rows, materialised mid-batch, are gone when the join reads
    them (in the fourth file's batch). Only the join's general path, matching with a Spark join,
    materialises them."""
    import statestream.operators.stream_join as stream_join
    from statestream.plan.stream_joins import MATCH_IN_TASKS_CONF

    armed: list[bool] = []
    lost: list[int] = []
    checkpoint = stream_join.local_checkpoint

    def losing(df: DataFrame) -> DataFrame:
        out = checkpoint(df)
        if armed and armed.pop():
            _drop_blocks(out)
            lost.append(1)
        return out

    def before_file(i: int) -> None:
        if i == 3:
            armed.append(True)

    build = _range_join("left")
    expected = run_stream(spark, build, JOIN_INPUT, JOIN_SCHEMA, "append", tmp_path)
    monkeypatch.setattr(stream_join, "local_checkpoint", losing)
    with session_confs(spark, {MATCH_IN_TASKS_CONF: "false"}):
        actual = run_stream(ours(), build, JOIN_INPUT, JOIN_SCHEMA, "append", tmp_path, before_file=before_file)
    assert lost == [1]
    assert_same_batches(expected, actual)
