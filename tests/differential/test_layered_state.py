"""The layered store (``statestream/state/layered.py``) against Spark's engine on its RocksDB
provider.

A query that asks for Spark's RocksDB provider (``spark.sql.streaming.stateStore.providerClass``)
runs on statestream's layered store: each version a stack of runs sorted by key hash, on local
disk. The rows must not change: each test feeds both engines the same files and compares every
batch's rows, watermark, state rows and rows dropped as late, and checks that the Python workers
did keep runs (their files are there while the query runs), or, for an operator that reads its
whole state every batch, kept the table store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.differential.harness import assert_same_batches
from tests.differential.test_plan_reuse import QUERIES, _steps, _watermarks_and_state_rows
from tests.differential.test_restart import _delete_commit, _starts, vals
from tests.differential.test_sources_more import assert_same, both, drive
from tests.spark_confs import session_confs

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
#: the queries whose operator takes the layered store: aggregations outside complete mode and
#: deduplication (plan/planner.py, table_store_conf)
LAYERED = {"window count update", "window count append", "dedup by key and time", "dedup within watermark", "dedup without watermark"}


def _run_files(spark: Any) -> list[Path]:
    """The run files the Python workers keep under the block manager's directories."""
    env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
    dirs = [Path(str(d.getPath())) for d in env.blockManager().diskBlockManager().localDirs()]
    return [f for d in dirs for f in d.glob("statestream-state-*/*/*/*/run-*.arrow")]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_layered_store_gives_sparks_batches(spark, ours, tmp_path, name):
    build, mode = QUERIES[name]
    seen: list[int] = []

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        # runs of earlier queries stay while their versions are cached: count this one's
        earlier = set(_run_files(spark))
        on_batch = (lambda b: seen.append(len(set(_run_files(spark)) - earlier))) if engine is not spark else None
        return drive(engine, lambda rs: build(rs, src), work, _steps(src), mode=mode, on_batch=on_batch)

    with session_confs(spark, {PROVIDER: ROCKSDB}):
        expected, actual = both(spark, ours, tmp_path, scenario)
    assert_same(expected, actual)
    assert _watermarks_and_state_rows(expected) == _watermarks_and_state_rows(actual)
    if name in LAYERED:  # from the second batch on, the state of the first is held in runs
        assert seen and max(seen[1:]) > 0, seen
    else:  # an operator that reads its whole state every batch keeps the table store
        assert seen and max(seen) == 0, seen


@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_restart_reloads_the_runs_from_the_checkpoint(spark, ours, tmp_path, mode):
    """Stopped, with its last commit deleted, and started again: the layered store rebuilds its
    runs from the checkpoint's snapshot and deltas and gives Spark's batches at every start."""
    plan = [
        ([vals(10, 11, 12), vals(25), vals(26, 13)], None),
        ([], _delete_commit(3)),  # the last batch runs again, on the version before it
        ([vals(40), vals(41, 27)], None),
    ]
    with session_confs(spark, {PROVIDER: ROCKSDB, "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"}):
        expected = _starts(spark, mode, tmp_path, plan)
        actual = _starts(ours(), mode, tmp_path, plan)
    for e, a in zip(expected, actual):
        assert_same_batches(e, a)
