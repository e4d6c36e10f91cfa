"""SIGKILL crash recovery of an ``applyInPandasWithState`` query (event-time timeout, sessions
per ``value`` emitted when the watermark passes them, file sink in append mode), over
the deduplication test's input files. After the kills and a final restart the sink must equal
Spark's own engine's and an uninterrupted statestream run's: a re-run batch reads the state of
its own start version again.

Not covered: a kill between two partitions' state commits (``after_state_commit``): both state
tasks run at once on the two cores and both committed before the kill landed when tried, so the
partial state the crash checker expects is not produced reliably."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_dedup import write_dedup_inputs
from tests.crash.test_crash_recovery import job_for, recover_and_compare


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(str(output)).select("k", "n", "first", "last").collect())


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> list[tuple]:
    input_dir = tmp_path / "input"
    write_dedup_inputs(input_dir)
    return recover_and_compare(
        spark, tmp_path, kills,
        lambda root, engine: dict(job_for(root, engine, "append", input_dir), query="apply_in_pandas"),
        lambda out: sink_rows(spark, out),
    )


@pytest.mark.slow  # about 45 s: three engines' runs and a killed child
@pytest.mark.covered_by_slow("test_apply_in_pandas_survives_sigkill_at_every_point")
def test_apply_in_pandas_sigkill_after_sink_then_restart(spark, tmp_path):
    """Batch 2 dies after its sink write, before its commit: the re-run must rebuild the same
    sessions from state version 2 and the sink must not hold them twice."""
    got = _gauntlet(spark, tmp_path, [("after_sink", 2, None)])
    assert got  # sessions closed


@pytest.mark.slow
@pytest.mark.soak
def test_apply_in_pandas_survives_sigkill_at_every_point(spark, tmp_path):
    _gauntlet(
        spark, tmp_path,
        [("after_offsets", 1, None), ("sink_files_published", 2, None), ("after_sink", 3, None), ("after_commit", 3, None)],
    )
