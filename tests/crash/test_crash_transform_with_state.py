"""SIGKILL crash recovery of a ``transformWithStateInPandas`` query (sessions per ``value`` in a
ValueState, closed by an event-time timer, file sink in append mode), over the deduplication
test's input files. After the kills and a final restart the sink must equal Spark's own engine's
(with its RocksDB provider, which Spark's operator needs) and an uninterrupted statestream run's:
a re-run batch reads its variables and timers at its own start version again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_dedup import write_dedup_inputs
from tests.crash.test_crash_recovery import job_for, recover_and_compare
from tests.spark_confs import session_confs

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(str(output)).select("k", "n", "first", "last").collect())


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> list[tuple]:
    input_dir = tmp_path / "input"
    write_dedup_inputs(input_dir)
    with session_confs(spark, {PROVIDER: ROCKSDB}):  # for the oracle run; statestream ignores it
        return recover_and_compare(
            spark, tmp_path, kills,
            lambda root, engine: dict(job_for(root, engine, "append", input_dir), query="transform_with_state"),
            lambda out: sink_rows(spark, out),
        )


@pytest.mark.slow
@pytest.mark.covered_by_slow("test_transform_with_state_survives_sigkill_at_every_point")
def test_transform_with_state_sigkill_mid_state_commit_then_restart(spark, tmp_path):
    """CI's sample: batch 3 dies after state partition 0 committed (its variables and timers):
    the re-run opens the previous version everywhere and the sessions come out once each."""
    assert _gauntlet(spark, tmp_path, [("after_state_commit", 3, 0)])


@pytest.mark.slow  # about a minute: three engines' runs and killed children
@pytest.mark.soak
def test_transform_with_state_survives_sigkill_at_every_point(spark, tmp_path):
    """Killed after the offsets, after the sink write, mid state commit and after the commit,
    restarted each time: the sessions come out once each, as on Spark's engine."""
    got = _gauntlet(
        spark, tmp_path,
        [("after_offsets", 1, None), ("after_sink", 2, None), ("after_state_commit", 3, 0), ("after_commit", 3, None)],
    )
    assert got  # sessions closed
