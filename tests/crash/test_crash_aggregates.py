"""SIGKILL crash recovery of an aggregation whose buffers Spark keeps as objects
(``collect_list`` and ``percentile_approx``, with ``stddev``; ObjectHashAggregate in Spark).

The same machinery as ``test_crash_recovery.py``: a child process per start, killed at a named
point of a micro-batch, restarted on the same checkpoint; the seed query's input, append mode into
the file sink. A re-executed batch must merge each window's stored values exactly once: a list
holding a batch's values twice, or missing them, changes the sink's rows. After the kills and a
final restart the sink must equal Spark's own engine's and an uninterrupted statestream run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_recovery import (
    assert_same_batches_as_oracle,
    job_for,
    kill_then_restart,
    run_in_process,
    write_inputs,
)


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    rows = spark.read.parquet(str(output)).collect()
    return sorted((r.window.start, tuple(r["values"]), r.p50, None if r.sd is None else round(r.sd, 9)) for r in rows)


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> None:
    from statestream import StreamingSession

    input_dir = tmp_path / "input"
    write_inputs(input_dir)
    job = job_for(tmp_path / "statestream", "statestream", "append", input_dir, query="object_hash")
    kill_then_restart(tmp_path, job, kills)

    oracle = job_for(tmp_path / "spark", "spark", "append", input_dir, query="object_hash")
    run_in_process(spark, oracle)
    clean = job_for(tmp_path / "uninterrupted", "statestream", "append", input_dir, query="object_hash")
    run_in_process(StreamingSession(spark), clean)
    got = sink_rows(spark, Path(job["output"]))
    assert got, "the recovered run wrote no rows"
    assert got == sink_rows(spark, Path(oracle["output"])), "recovered output differs from Spark's engine"
    assert got == sink_rows(spark, Path(clean["output"])), "recovered output differs from an uninterrupted run"
    assert_same_batches_as_oracle(job, oracle)


def test_object_hash_aggregate_sigkill_after_partial_state_commit(spark, tmp_path):
    """Batch 2 dies after state partition 0 committed: the re-run merges from version 2."""
    _gauntlet(spark, tmp_path, [("after_state_commit", 2, 0)])


@pytest.mark.slow
def test_object_hash_aggregate_survives_sigkill_at_every_point(spark, tmp_path):
    _gauntlet(
        spark,
        tmp_path,
        [
            ("after_offsets", 1, None),
            ("after_state_commit", 1, 0),
            ("sink_files_published", 2, None),
            ("after_sink", 3, None),
            ("after_commit", 3, None),
        ],
    )
