"""SIGKILL crash recovery of a deduplication query (``dropDuplicates`` with a watermark).

The same machinery as ``test_crash_recovery.py`` (a child process per start, killed at a named
point of a micro-batch, restarted on the same checkpoint), with the query
``withWatermark("ts", "20 seconds").dropDuplicates(["value", "ts"])`` writing to the file sink in
append mode, over files holding duplicates inside a file, across files, of keys already evicted,
and late rows. After the kills and a final restart the sink must equal Spark's own engine's and an
uninterrupted statestream run's: a re-executed batch must neither emit a row twice nor treat its
own rows as duplicates of a partial commit.
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

#: (event time in seconds, value) per file; see the module docstring.
FILES: list[list[tuple[int, int]]] = [
    [(10, 1), (10, 1), (11, 2), (12, 3)],
    [(10, 1), (31, 4), (31, 4), (8, 5)],
    [(40, 6), (11, 2), (5, 7), (31, 4)],
    [(55, 8), (12, 3), (40, 6), (23, 9), (23, 9)],
    [(60, 10), (61, 11), (40, 6), (44, 12)],
]


def write_dedup_inputs(directory: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for i, rows in enumerate(FILES):
        table = pa.table(
            {
                "ts": pa.array([t * 1_000_000 for t, _ in rows], pa.timestamp("us", tz="UTC")),
                "value": pa.array([v for _, v in rows], pa.int64()),
            }
        )
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + i, base + i))


def dedup_job(root: Path, engine: str, input_dir: Path) -> dict[str, Any]:
    return dict(job_for(root, engine, "append", input_dir), query="dedup")


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    df = spark.read.parquet(str(output))
    return sorted(tuple(r) for r in df.select(df.ts.cast("long"), "value").collect())


def _gauntlet(spark: Any, tmp_path: Path, kills: list[tuple[str, int, int | None]]) -> None:
    input_dir = tmp_path / "input"
    write_dedup_inputs(input_dir)
    got = recover_and_compare(
        spark, tmp_path, kills, lambda root, engine: dedup_job(root, engine, input_dir), lambda out: sink_rows(spark, out)
    )
    # every input key exactly once, minus the late rows Spark drops
    assert len(got) == len(set(got))


#: batch 1 dies after partition 0 committed its dedup state (partition 0 runs first)
PARTIAL_STATE_COMMIT = ("after_state_commit", 1, 0)


@pytest.mark.covered_by_slow("test_dedup_survives_sigkill_at_every_point")
def test_dedup_sigkill_after_partial_state_commit_then_restart(spark, tmp_path):
    """Batch 1 dies after partition 0 committed its dedup state: the re-run must still emit
    partition 0's new rows (its state version 2 is rewritten from version 1)."""
    _gauntlet(spark, tmp_path, [PARTIAL_STATE_COMMIT])


@pytest.mark.slow
@pytest.mark.soak
def test_dedup_survives_sigkill_at_every_point(spark, tmp_path):
    _gauntlet(
        spark,
        tmp_path,
        [
            ("after_offsets", 1, None),
            PARTIAL_STATE_COMMIT,  # the commit is partial
            ("sink_files_published", 2, None),
            ("after_sink", 3, None),
            ("after_commit", 3, None),
        ],
    )
