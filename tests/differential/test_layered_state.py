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


import pytest

from tests.differential.harness import assert_same_batches
from tests.differential.test_plan_reuse import QUERIES, _watermarks_and_state_rows
from tests.differential.test_restart import _delete_commit, _starts, vals
from tests.differential.test_sources_more import assert_same, both
from tests.differential.test_state_on_local_disk import files_per_batch
from tests.spark_confs import session_confs

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
#: the queries whose operator takes the layered store: aggregations outside complete mode and
#: deduplication (plan/planner.py, table_store_conf)
LAYERED = {"window count update", "window count append", "dedup by key and time", "dedup within watermark", "dedup without watermark"}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_layered_store_gives_sparks_batches(spark, ours, tmp_path, name):
    seen: list[int] = []  # the run files of the query on local disk after each batch
    with session_confs(spark, {PROVIDER: ROCKSDB}):
        expected, actual = both(spark, ours, tmp_path, files_per_batch(spark, name, seen, "run-*.arrow"))
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
