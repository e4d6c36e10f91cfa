"""SIGKILL crash recovery of a streaming limit (``limit(7)``, file sink, append mode).

The same machinery as ``test_crash_recovery.py``: a child process per start, killed at a named
point of a micro-batch, restarted on the same checkpoint. Five files of 3, 3, 3, 3 and 1 rows:
the limit lets 3, 3 and 1 rows through in batches 0-2 and nothing after. A batch re-executed
after a kill opens the limit's count at the version it started from, so it emits the same rows
again, neither more (the sink would hold more than 7 rows) nor fewer (a re-run that read the
count its killed attempt had already committed would emit nothing). After the kills and a final
restart, the sink must equal Spark's own engine's and an uninterrupted statestream run's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_recovery import (
    job_for,
    recover_and_compare,
)

FILES: list[list[int]] = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13]]


def write_limit_inputs(directory: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for i, values in enumerate(FILES):
        table = pa.table(
            {
                "ts": pa.array([v * 1_000_000 for v in values], pa.timestamp("us", tz="UTC")),
                "value": pa.array(values, pa.int64()),
            }
        )
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + i, base + i))


def limit_job(root: Path, engine: str, input_dir: Path) -> dict[str, Any]:
    return dict(job_for(root, engine, "append", input_dir), query="limit")


def sink_values(spark: Any, output: Path) -> list[int]:
    return sorted(r.value for r in spark.read.parquet(str(output)).select("value").collect())


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> None:
    input_dir = tmp_path / "input"
    write_limit_inputs(input_dir)
    got = recover_and_compare(
        spark, tmp_path, kills, lambda root, engine: limit_job(root, engine, input_dir), lambda out: sink_values(spark, out)
    )
    assert got == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.covered_by_slow("test_limit_survives_sigkill_at_every_point")
def test_limit_sigkill_after_its_state_commit_then_restart(spark, tmp_path):
    """Batch 2 dies right after the limit committed count 7 (version 3): the re-run opens
    version 2 (count 6) and emits the 7th row again."""
    _gauntlet(spark, tmp_path, [("after_state_commit", 2, 0)])


@pytest.mark.slow
@pytest.mark.soak
def test_limit_survives_sigkill_at_every_point(spark, tmp_path):
    _gauntlet(
        spark,
        tmp_path,
        [
            ("after_offsets", 1, None),
            ("after_state_commit", 1, 0),  # while re-executing batch 1
            ("sink_files_published", 2, None),
            ("after_sink", 2, None),  # while re-executing batch 2
            ("after_commit", 3, None),
        ],
    )
