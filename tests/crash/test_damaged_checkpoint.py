"""Damaged checkpoints are named, never silently wrong (issue 15, item 2).

For every kind of file a checkpoint of a windowed count into a file sink holds (query metadata,
offsets, commits, the file source's log, state deltas and snapshots, the state schema, the
operator metadata, the sink's log), each of three damages (missing, cut to half, garbled in the
middle) is applied to a copy of one checkpoint, and the query restarted with one more input
file. Either the restart recovers, and the sink holds exactly what an undamaged restart writes
(the damaged file was one a restart rebuilds), or it stops with an error naming the file. The
slow tier runs every cell; the default run a sample.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from statestream import StreamingSession
from tests.spark_confs import session_confs

SCHEMA = "value LONG"
FILES = [[1, 2, 3], [6, 7, 12], [14, 21, 22], [30, 31, 44]]  # the last one arrives after the damage

#: (file, damage) -> what a restart does: "recovers" or "names" (an error naming the file)
EXPECTED: dict[tuple[str, str], str] = {}
for _damage in ("missing", "truncated", "garbled"):
    for _kind in ("offsets", "commits", "sources", "delta", "snapshot", "state_schema", "operator_metadata", "sink_log"):
        EXPECTED[_kind, _damage] = "names"
    EXPECTED["metadata", _damage] = "names"
# a restart rebuilds these, as Spark's does: the last batch's commit (the batch runs again) and
# the query's id file (a new id; offsets and state are the checkpoint's)
EXPECTED["commits", "missing"] = "recovers"
EXPECTED["metadata", "missing"] = "recovers"
# a missing snapshot is rebuilt from the deltas; checkpoints without operator metadata or state
# schema files (written by older Spark versions) start as Spark's do, writing them again
EXPECTED["snapshot", "missing"] = "recovers"
# the last offsets entry of a committed batch: the batch before it runs again from the
# checkpoint's own records (as on Spark), which gives the same output
EXPECTED["offsets", "missing"] = "recovers"
EXPECTED["operator_metadata", "missing"] = "recovers"
EXPECTED["state_schema", "missing"] = "recovers"
# the progress history (for the dashboard) is never read by a run: damage costs history only
for _damage in ("missing", "truncated", "garbled"):
    EXPECTED["progress", _damage] = "recovers"

SAMPLE = [("delta", "garbled"), ("commits", "missing"), ("offsets", "truncated"), ("sink_log", "missing"), ("sources", "missing")]


def _query(ss: Any, root: Path):
    from pyspark.sql import functions as F

    df = ss.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "input"))
    counted = (
        df.withColumn("t", F.timestamp_seconds("value")).withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "10 seconds")).count()
        .select(F.col("window.start").cast("long").alias("start"), "count")
    )
    return (
        counted.writeStream.format("parquet").option("path", str(root / "output"))
        .option("checkpointLocation", str(root / "checkpoint")).outputMode("append").trigger(availableNow=True).start()
    )


def _write_input(root: Path, i: int) -> None:
    d = root / "input"
    d.mkdir(parents=True, exist_ok=True)
    tmp = root / f".in-{i}.tmp"
    tmp.write_text("".join(f'{{"value": {v}}}\n' for v in FILES[i]))
    stamp = time.time() - 3600 + i
    import os

    os.utime(tmp, (stamp, stamp))
    tmp.rename(d / f"part-{i:05d}.json")


def _run(ss: Any, root: Path) -> None:
    q = _query(ss, root)
    assert q.awaitTermination(120), "the query did not finish"


def _sink_rows(spark: Any, root: Path) -> Any:
    """The sink's rows as a reader sees them, or the reader's error text."""
    try:
        return sorted(tuple(r) for r in spark.read.parquet(str(root / "output")).collect())
    except Exception as exc:  # noqa: BLE001 - a sink a reader cannot read is a result too
        return f"unreadable: {str(exc).splitlines()[0][:200]}"


def _last(directory: Path, suffix: str = "") -> Path:
    files = [p for p in directory.iterdir() if p.name.endswith(suffix) and p.name[: len(p.name) - len(suffix)].isdigit()]
    assert files, f"no {suffix or 'numbered'} file in {directory}"
    return max(files, key=lambda p: int(p.name[: len(p.name) - len(suffix)]))


def _target(root: Path, kind: str) -> Path:
    ck = root / "checkpoint"
    state = ck / "state" / "0"
    if kind == "metadata":
        return ck / "metadata"
    if kind in ("offsets", "commits"):
        return _last(ck / kind)
    if kind == "sources":
        return _last(ck / "sources" / "0")
    if kind == "delta":
        # the newest delta of a partition; its snapshots of that version or later go, so that
        # a restart needs the delta
        delta = max((_last(p, ".delta") for p in state.iterdir() if p.name.isdigit()), key=lambda p: p.stat().st_size)
        version = int(delta.name.split(".")[0])
        for snap in delta.parent.glob("*.snapshot"):
            if int(snap.name.split(".")[0]) >= version:
                snap.unlink()
        return delta
    if kind == "snapshot":
        snaps = [s for p in state.iterdir() if p.name.isdigit() for s in p.glob("*.snapshot")]
        assert snaps, "no snapshot was written: the case would prove nothing"
        return max(snaps, key=lambda p: int(p.name.split(".")[0]))
    if kind == "state_schema":
        found = [p for p in state.rglob("*") if p.is_file() and ("_stateSchema" in p.parts or p.name == "schema")]
        assert found, f"no state schema file under {state}"
        return sorted(found)[-1]
    if kind == "operator_metadata":
        return state / "_metadata" / "metadata"
    if kind == "sink_log":
        return _last(root / "output" / "_spark_metadata")
    if kind == "progress":
        return max((ck / "progress").glob("*.json"), key=lambda p: int(p.name.split(".")[0]))
    raise ValueError(kind)


def _damage(path: Path, damage: str) -> None:
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        mid = len(data) // 2
        path.write_bytes(data[:mid] + b"\xff\x00#" * 2 + data[mid + 6:])
    for crc in (path.parent / f".{path.name}.crc", path.parent / f"{path.name}.crc"):
        if crc.exists():
            crc.unlink()


@pytest.fixture(scope="module")
def base(spark, tmp_path_factory) -> tuple[Path, list[tuple]]:
    """A checkpoint after three batches (snapshots every delta), and what an undamaged restart
    with the fourth file writes to the sink."""
    with session_confs(spark, {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"}):
        ss = StreamingSession(spark)
        # every case runs in the same directory (the logs hold absolute paths), from a copy
        work = tmp_path_factory.mktemp("damaged") / "work"
        for i in range(3):
            _write_input(work, i)
        _run(ss, work)
        saved = work.parent / "saved"
        shutil.copytree(work, saved)
        _write_input(work, 3)
        _run(ss, work)
        expected = _sink_rows(spark, work)
        assert isinstance(expected, list) and expected, "the undamaged run wrote nothing: the cases would prove nothing"
        yield saved, expected


def _check(spark: Any, base: tuple[Path, list[tuple]], cells: list[tuple[str, str]]) -> None:
    saved, expected = base
    ss = StreamingSession(spark)
    wrong = []
    case = saved.parent / "work"
    for kind, damage in cells:
        shutil.rmtree(case)
        shutil.copytree(saved, case)
        target = _target(case, kind)
        _damage(target, damage)
        _write_input(case, 3)
        try:
            _run(ss, case)
        except Exception as exc:  # noqa: BLE001 - what the restart said is the result
            text = str(exc)
            if EXPECTED[kind, damage] != "names":
                wrong.append(f"{kind}/{damage}: expected to recover, failed: {text[:300]}")
            elif str(target) not in text and str(target.relative_to(case)) not in text:
                wrong.append(f"{kind}/{damage}: the error does not name {target}: {text[:400]}")
            continue
        got = _sink_rows(spark, case)
        if EXPECTED[kind, damage] == "names":
            wrong.append(f"{kind}/{damage}: expected an error naming {target}; it ran on (sink: {'as expected' if got == expected else got})")
        elif got != expected:
            wrong.append(f"{kind}/{damage}: recovered with wrong sink rows {got} (expected {expected})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.covered_by_slow("test_every_damaged_file_is_named_or_recovered")
def test_damaged_files_sample(spark, base):
    _check(spark, base, SAMPLE)


@pytest.mark.slow
def test_every_damaged_file_is_named_or_recovered(spark, base):
    _check(spark, base, sorted(EXPECTED))
