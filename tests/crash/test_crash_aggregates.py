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
    job_for,
    recover_and_compare,
    write_inputs,
)


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    rows = spark.read.parquet(str(output)).collect()
    return sorted((r.window.start, tuple(r["values"]), r.p50, None if r.sd is None else round(r.sd, 9)) for r in rows)


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> None:
    input_dir = tmp_path / "input"
    write_inputs(input_dir)
    got = recover_and_compare(
        spark,
        tmp_path,
        kills,
        lambda root, engine: job_for(root, engine, "append", input_dir, query="object_hash"),
        lambda out: sink_rows(spark, out),
    )
    assert got, "the recovered run wrote no rows"


@pytest.mark.covered_by_slow("test_object_hash_aggregate_survives_sigkill_at_every_point")
def test_object_hash_aggregate_sigkill_after_partial_state_commit(spark, tmp_path):
    """Batch 2 dies after state partition 0 committed: the re-run merges from version 2."""
    _gauntlet(spark, tmp_path, [("after_state_commit", 2, 0)])


@pytest.mark.slow
@pytest.mark.soak
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
