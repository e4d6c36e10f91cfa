"""SIGKILL crash recovery of a stream-stream join (``StreamingSymmetricHashJoinExec``).

The query (``crash_child.stream_join_query``) is a left outer join of two file sources, each with
a 10 s watermark delay, on equal keys with the right row's time in ``[lts, lts + 5 s]``, written
to the file sink in append mode; both sources admit one file a batch. The input (:data:`LEFT`,
:data:`RIGHT`) makes pairs inside one batch, pairs of a new row with a row the other side
stored in an earlier batch (right rows arriving after their left row and before it), a key
with two rows on both sides, a pair at the range's upper bound, late rows on both sides, and
left rows that never match and come out padded with nulls when the watermark evicts them, in
a data batch (one of them in the batch it arrived in) and in the trailing no-data batch.

The machinery is ``test_crash_recovery.py``'s: a child process per start, killed by SIGKILL at
a named point of a batch and restarted on the same checkpoint; after the kills and a final
restart the sink must equal Spark's own engine's and an uninterrupted statestream run's (both
run once for the module), hold no row twice, and ``commits/`` and the sink's log must hold
Spark's batch ids. A re-run batch reads the join's four stores (``left-``/``right-``
``keyToNumValues`` and ``keyWithIndexToValue``) at the version its first run started from, so it
neither pairs a new row with itself stored by the killed run nor loses the ``matched`` flags
that decide which evicted rows come out padded.

Not killed: after ``commits/4``, the last data batch. A restarted query runs a no-data batch
only after a batch of its own run asked for one, so the restart ends without batch 5 and
without k=15's padded row, on Spark's engine as on statestream, and the sink rightly differs
from the uninterrupted runs' (``test_restart_after_the_last_data_batch_runs_no_batch_as_spark``
checks both engines, restarted on their checkpoints taken back to that state).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_crash_recovery import (
    assert_same_batches_as_oracle,
    batch_files,
    job_for,
    kill_then_restart,
    run_in_process,
)
from tests.crash.crash_child import executed_batch_ids

#: per batch: left rows (lts seconds, k, lv)
LEFT: list[list[tuple[int, int, int]]] = [
    [(10, 1, 100), (11, 2, 101), (12, 3, 102)],
    [(20, 4, 103), (25, 5, 104), (15, 8, 105)],  # k=8 never matches: padded in batch 3
    # lts 3 is past the eviction watermark (12 - 5 s) but not late (batch 1's watermark, 2 s):
    # stored and evicted in the same batch, padded at once
    [(40, 6, 106), (42, 6, 107), (3, 7, 108), (30, 9, 109)],
    # k=12 padded in batch 4; k=16 meets a stored right row; lts 8 is late (<= 12 s)
    [(60, 10, 110), (34, 12, 111), (44, 16, 114), (8, 17, 115)],
    [(70, 13, 112), (52, 15, 113)],  # k=15 padded in the no-data batch 5
]
#: per batch: right rows (rts seconds, rk, rv)
RIGHT: list[list[tuple[int, int, int]]] = [
    [(12, 1, 200), (20, 2, 201)],  # k=1 pairs inside the batch; 20 is past k=2's range
    [(14, 3, 202), (22, 4, 203), (13, 2, 204)],  # k=3, k=2 meet stored left rows
    [(41, 6, 205), (43, 6, 206), (26, 5, 207), (5, 1, 208), (45, 16, 212)],  # rts 5 dropped at once
    [(62, 11, 209), (35, 9, 210), (9, 17, 213)],  # 35 = 30 + 5: the range's upper bound; rts 9 is late
    [(71, 13, 211)],
]


def write_join_inputs(directory: Path) -> None:
    """``<directory>/left`` and ``<directory>/right``, one parquet file per batch each, with
    increasing modification times (the file source's order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = time.time() - 3600
    for side, files, names in (("left", LEFT, ("lts", "k", "lv")), ("right", RIGHT, ("rts", "rk", "rv"))):
        d = directory / side
        d.mkdir(parents=True, exist_ok=True)
        for i, rows in enumerate(files):
            table = pa.table(
                {
                    names[0]: pa.array([t * 1_000_000 for t, _, _ in rows], pa.timestamp("us", tz="UTC")),
                    names[1]: pa.array([k for _, k, _ in rows], pa.int64()),
                    names[2]: pa.array([v for _, _, v in rows], pa.int64()),
                }
            )
            path = d / f"part-{i:05d}.parquet"
            pq.write_table(table, path)
            os.utime(path, (base + i, base + i))


def sink_rows(spark: Any, output: Path) -> list[tuple]:
    df = spark.read.parquet(str(output))
    rows = [tuple(r) for r in df.select(df.lts.cast("long"), "k", "lv", df.rts.cast("long"), "rk", "rv").collect()]
    return sorted(rows, key=lambda r: [(v is None, v or 0) for v in r])


#: the rows the input must produce (Spark's engine is the judge; this pins the input's intent)
EXPECTED = sorted(
    [
        (10, 1, 100, 12, 1, 200),  # inside batch 0
        (11, 2, 101, 13, 2, 204),  # new right, stored left
        (12, 3, 102, 14, 3, 202),
        (20, 4, 103, 22, 4, 203),  # inside batch 1
        (25, 5, 104, 26, 5, 207),  # across batches
        (40, 6, 106, 41, 6, 205),  # two rows a side
        (40, 6, 106, 43, 6, 206),
        (42, 6, 107, 43, 6, 206),
        (30, 9, 109, 35, 9, 210),  # upper bound
        (44, 16, 114, 45, 16, 212),  # new left, stored right
        (70, 13, 112, 71, 13, 211),
        (3, 7, 108, None, None, None),  # padded
        (15, 8, 105, None, None, None),
        (34, 12, 111, None, None, None),
        (52, 15, 113, None, None, None),
    ],
    key=lambda r: [(v is None, v or 0) for v in r],
)


def join_job(root: Path, engine: str, input_dir: Path) -> dict[str, Any]:
    return dict(job_for(root, engine, "append", input_dir), query="stream_join")


@pytest.fixture(scope="module")
def references(spark: Any, tmp_path_factory: Any) -> dict[str, Any]:
    """Spark's engine and an uninterrupted statestream run over the input, once for the module
    (the input and its batches are the same for every gauntlet): the oracle's job and both
    sinks' rows."""
    from statestream import StreamingSession

    root = tmp_path_factory.mktemp("stream-join-references")
    input_dir = root / "input"
    write_join_inputs(input_dir)
    oracle = join_job(root / "spark", "spark", input_dir)
    run_in_process(spark, oracle)
    clean = join_job(root / "uninterrupted", "statestream", input_dir)
    run_in_process(StreamingSession(spark), clean)
    spark_rows = sink_rows(spark, Path(oracle["output"]))
    assert spark_rows == EXPECTED, "Spark's engine no longer gives the rows the input was written for"
    assert batch_files(Path(oracle["checkpoint"]) / "commits") == list(range(6))
    return {"oracle": oracle, "clean": clean, "spark": spark_rows, "uninterrupted": sink_rows(spark, Path(clean["output"]))}


def _gauntlet(spark: Any, tmp_path: Path, references: dict[str, Any], kills: list[tuple[str, int, int | None]]) -> None:
    input_dir = tmp_path / "input"
    write_join_inputs(input_dir)
    job = join_job(tmp_path / "statestream", "statestream", input_dir)
    kill_then_restart(tmp_path, job, kills)
    got = sink_rows(spark, Path(job["output"]))
    assert len(got) == len(set(got)), "a row reached the sink twice"
    assert got == references["spark"], "recovered output differs from Spark's engine"
    assert got == references["uninterrupted"], "recovered output differs from an uninterrupted run"
    assert_same_batches_as_oracle(job, references["oracle"])


@pytest.mark.slow
def test_stream_join_sigkill_around_the_sink(spark, tmp_path, references):
    """Batch 3 (pairs with stored rows of both sides, late rows, k=8 evicted and padded) dies
    after its files were moved into the output directory, then again, re-run, after its sink
    log entry: the re-runs must pad k=8 again from state version 3, and the sink hold it once."""
    _gauntlet(spark, tmp_path, references, [("sink_files_published", 3, None), ("after_sink", 3, None)])


@pytest.mark.slow
def test_stream_join_sigkill_mid_state_commit(spark, tmp_path, references):
    """Killed after ``offsets/1``; then in batch 3 after partition 0 committed the first of its
    four stores (``local[1]``: before its other stores and partition 1); then after the re-run's
    ``commits/3``."""
    _gauntlet(spark, tmp_path, references, [("after_offsets", 1, None), ("after_state_commit", 3, 0), ("after_commit", 3, None)])


@pytest.mark.slow
def test_restart_after_the_last_data_batch_runs_no_batch_as_spark(spark, tmp_path, references):
    """What a kill right after ``commits/4`` leaves, made from copies of the reference runs'
    checkpoints and sinks (batch 5's offsets, commit, state version 6 and sink log entry
    removed): restarted, neither engine runs the no-data batch 5 that would pad k=15."""
    import shutil

    from statestream import StreamingSession

    for name, engine in (("oracle", spark), ("clean", StreamingSession(spark))):
        ref = references[name]
        job = dict(ref, checkpoint=str(tmp_path / name / "checkpoint"), output=str(tmp_path / name / "output"))
        shutil.copytree(ref["checkpoint"], job["checkpoint"])
        shutil.copytree(ref["output"], job["output"])
        for entry in (Path(job["output"]) / "_spark_metadata").iterdir():  # the sink log lists its files' paths
            if entry.name.endswith(".crc"):  # Hadoop's checksums of the entries rewritten below
                entry.unlink()
            else:
                entry.write_text(entry.read_text().replace(str(Path(ref["output"])), str(Path(job["output"]))))
        ckpt = Path(job["checkpoint"])
        doomed = [ckpt / "offsets" / "5", ckpt / "commits" / "5", Path(job["output"]) / "_spark_metadata" / "5"]
        assert len(list((ckpt / "state" / "0").glob("*/*/6.delta"))) == 2 * 4  # four stores in each partition
        doomed += list((ckpt / "state" / "0").glob("*/*/6.*"))  # Spark also writes 6.delta.crc
        for path in doomed:
            path.unlink()
        query = run_in_process(engine, job)
        assert executed_batch_ids(query) == [], name
        assert batch_files(ckpt / "commits") == [0, 1, 2, 3, 4], name
        assert sink_rows(spark, Path(job["output"])) == [r for r in EXPECTED if r[1] != 15], name
