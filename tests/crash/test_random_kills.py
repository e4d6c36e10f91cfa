"""Random-kill torture: every operator family, SIGKILLed at random moments, restarted each time.

The named crash points of ``test_crash_recovery.py`` show that each step of a batch recovers.
This tier asks the complementary question: whatever instruction a process dies at, does the
restarted query go on to the answer of a run that never died? A child process
(``crash_child.run_many``) runs one query of each family at once, each on its own input,
checkpoint and file sink:

========================  =====================================================================
``seed``                  windowed count (aggregation)
``session``               session windows
``dedup``                 ``dropDuplicates`` with a watermark
``limit``                 the streaming limit
``stream_join``           a stream-stream left outer join
``apply_in_pandas``       ``applyInPandasWithState`` sessions with event-time timeouts
``transform_with_state``  ``transformWithStateInPandas`` sessions with event-time timers
========================  =====================================================================

Each input has 21 files, one per batch. Once the child's queries have started, the test waits a
random time (seeded) and SIGKILLs the child's whole session: driver, JVM and Python workers. The
kill counts for each query that had not finished, and where it landed is read from the query's
checkpoint (planning, a partial state commit, a committed state before the sink, a sink before
its commit, between batches, where snapshots, maintenance and log compaction run: snapshots
every 2 deltas, 4 batches retained and the logs compacted every 3 batches and cleaned at once
make those frequent). Then the child starts again on the same checkpoints. When the kills
reach the round's share, the child runs to the end; if the queries finished first, a new round
begins on fresh checkpoints. At the end of each round, for each family: the query id is the
first start's, ``offsets/`` and ``commits/`` hold every batch once, and the sink (read through
its ``_spark_metadata``) and every state store at the last batch equal those of an
uninterrupted statestream run over the same input (and, with ``STATESTREAM_TORTURE_SPARK=1``,
the sink equals Spark's own engine's).

The inputs make the answer independent of how batches are split, which a kill may change:
a kill after the file source logged a batch's file and before ``offsets/N`` makes the restart
admit that file and the next in one batch (Spark does the same). So every row is either on time
under any split or late under any split, a key of the Python state queries never gets rows
after its session went quiet, and the last three files hold only late rows (the batch that saw
the last new event time is never the last one, so no closing no-data batch can be lost to a
kill after it: Spark does not run that batch after a restart either).

The soak tier (``scripts/soak.sh``) runs 200 kills, and 15 with the checkpoints on S3; every
run (CI's too) a sample of 6 kills, and the slow tier 2 on S3 (fixed seeds). A failure prints
the seed and the kill count; ``STATESTREAM_TORTURE_SEED`` and ``STATESTREAM_TORTURE_KILLS``
replay it.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.class_archive import ENV_CHILD_JAVA_OPTIONS, child_java_options
from tests.crash.crash_child import start_query
from tests.crash.test_crash_recovery import (
    CHILD,
    ROOT,
    _kill_session,
    _session_members,
    batch_files,
    query_id,
    sink_log_batches,
    source_log_batches,
    state_versions,
)

log = logging.getLogger(__name__)

FAMILIES = ("seed", "session", "dedup", "limit", "stream_join", "apply_in_pandas", "transform_with_state")
#: on-time files, then files of late rows only
ON_TIME_FILES = 18
LATE_FILES = 3
#: a kill comes this long (uniform, seconds) after the child's queries started
KILL_WINDOW_S = (0.0, 8.0)
#: the confs of every start: frequent snapshots, retention, log compaction and log cleanup, so
#: that kills land in them too
CONFS = {
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    "spark.sql.streaming.minBatchesToRetain": "4",
    "spark.sql.streaming.fileSink.log.compactInterval": "3",
    "spark.sql.streaming.fileSource.log.compactInterval": "3",
    "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
    "spark.sql.streaming.fileSource.log.cleanupDelay": "0",
}


# ------------------------------------------------------------------------------------------
# Input
# ------------------------------------------------------------------------------------------


def _events() -> list[list[tuple[int, int]]]:
    """Per file, rows (ts seconds, value) of the single-input families.

    File i's on-time rows have ts in [10i, 10i + 9]: later than any watermark the batch can run
    with (20 s behind the newest time of the files before it). Its late rows have ts at most
    10(i - 7): behind the watermark of the batch before any batch holding file i (late rows go
    by that one), with up to four files in a batch.
    Value k (the key of the Python state queries; 8 is active throughout) gets one row in every file of its active span
    and none after: its session timer (10 s after its last row) cannot fire while it is active.
    File 0 is the largest, so that the limit's first batch takes its rows first.
    """
    rng = random.Random(20261126)
    spans = {k: (rng.randrange(0, 8), rng.randrange(8, ON_TIME_FILES)) for k in range(8)}
    spans[8] = (0, ON_TIME_FILES - 1)  # every on-time file has a row: the newest time grows each file
    # (the extra rows of file 0 go to keys active from file 0: a key whose span starts later would
    # get rows after its file-0 session went quiet, and a merge of two files decides whether its
    # timer fires before them; ``test_python_state_sessions_do_not_depend_on_the_split`` checks)
    from_start = sorted(k for k, (first, _) in spans.items() if first == 0)
    files: list[list[tuple[int, int]]] = []
    for i in range(ON_TIME_FILES + LATE_FILES):
        rows: list[tuple[int, int]] = []
        if i < ON_TIME_FILES:
            for k, (first, last) in spans.items():
                if first <= i <= last:
                    rows.append((10 * i + rng.randrange(10), k))
            if i == 0:  # 16 more rows, shared by the keys active from file 0
                rows += [(rng.randrange(10), from_start[j // 4 % len(from_start)]) for j in range(16)]
            if i > 0:  # an exact duplicate of a row of the file before (dedup), same key span
                ts, k = files[i - 1][0]
                if spans[k][1] >= i:
                    rows.append((ts, k))
        if i >= 5:
            rows += [(10 * (i - 7) - rng.randrange(30), rng.randrange(8)) for _ in range(2)]
        files.append(rows)
    return files


def timer_sessions(files: list[list[tuple[int, int]]], split: list[int], late_at_watermark: bool, fires_at_watermark: bool) -> list[tuple]:
    """The sessions the Python state queries emit (key, rows, first ts, last ts) when the files
    run in batches of ``split`` consecutive files each: a model of ``crash_child._value_sessions``
    in whole seconds. A batch's watermark is 20 s behind the newest time of the batches before
    it (0 at first); a row before the *previous* batch's watermark (or also at it, with
    ``late_at_watermark``) is late and dropped, as Spark drops late rows by the watermark the
    batch before ran with; a key's rows update its session and set its timer 10 s after its
    last row (at least just past the batch's watermark); then the timers before the watermark
    (or also at it) fire. A no-data batch closes the run."""
    sessions: dict[int, list[int]] = {}
    timers: dict[int, float] = {}
    out: list[tuple] = []
    newest = float("-inf")
    wm = 0.0
    batches = []
    start = 0
    for n in split:
        batches.append([row for f in files[start : start + n] for row in f])
        start += n
    assert start == len(files)
    batches.append([])  # the closing no-data batch
    for rows in batches:
        late_wm, wm = wm, max(wm, newest - 20)
        on_time = [(ts, k) for ts, k in sorted(rows) if not (ts < late_wm or (late_at_watermark and ts == late_wm))]
        for ts, k in on_time:
            cnt, first, last = sessions.get(k, (0, ts, ts))
            sessions[k] = [cnt + 1, min(first, ts), max(last, ts)]
        for k in {k for _, k in on_time}:
            timers[k] = max(sessions[k][2] + 10, wm + 0.001)
        for k, t in sorted(timers.items()):
            if t < wm or (fires_at_watermark and t == wm):
                out.append((k, *sessions.pop(k)))
                del timers[k]
        newest = max([newest, *(ts for ts, _ in rows)])
    return sorted(out)


def late_rows(files: list[list[tuple[int, int]]], split: list[int], late_at_watermark: bool) -> list[tuple[int, int, int]]:
    """The rows (file, ts, value) that arrive behind the watermark of the batch before theirs
    when the files run in batches of ``split`` files: the rows every family drops as late."""
    late, newest, wm, start = [], float("-inf"), 0.0, 0
    for n in split:
        late_wm, wm = wm, max(wm, newest - 20)
        for i in range(start, start + n):
            late += [(i, ts, k) for ts, k in files[i] if ts < late_wm or (late_at_watermark and ts == late_wm)]
            newest = max([newest, *(ts for ts, _ in files[i])])
        start += n
    return sorted(late)


def test_python_state_sessions_do_not_depend_on_the_split():
    """A kill may merge a file into the next one's batch (see the module's docstring), so the
    answers must not depend on it: under every split of the events with one run of two to four
    files in a batch, or two runs of two, the late rows are the same rows, and the sessions of
    the Python state queries (in a model of their processor, with either boundary rule of late
    rows and timers) are those of one file per batch. (Before 2026-11-28 a key's extra rows in
    file 0 went quiet and the key came back in file 5, so a merge of files 3 and 4, or 4 and 5,
    kept its two sessions in one, as a CI run found; and late rows at 10(i - 5) were on time in
    a batch of three files.)"""
    files = _events()
    n = len(files)
    splits = [[1] * i + [m] + [1] * (n - i - m) for m in (2, 3, 4) for i in range(n - m + 1)]
    splits += [[1] * i + [2] + [1] * (j - i - 2) + [2] + [1] * (n - j - 2) for i in range(n - 1) for j in range(i + 2, n - 1)]
    for late_rule in (False, True):
        # the late rows are the same rows however the files are split (every family drops them)
        late = late_rows(files, [1] * n, late_rule)
        assert len(late) == 2 * (len(files) - 5) and all(i >= 5 for i, _, _ in late), late
        for split in splits:
            assert late_rows(files, split, late_rule) == late, split
        for timer_rule in (False, True):
            single = timer_sessions(files, [1] * n, late_rule, timer_rule)
            assert len(single) >= 4, single
            for split in splits:
                assert timer_sessions(files, split, late_rule, timer_rule) == single, split


def _join_sides() -> tuple[list[list[tuple[int, int, int]]], list[list[tuple[int, int, int]]]]:
    """Per file, left rows (lts, k, lv) and right rows (rts, rk, rv). Left key 100i + j: j=0 is
    matched in the same file, j=1 in the next file, j=2 never (padded with nulls once evicted,
    two or more batches later under any split). Late rows on both sides from file 5 on."""
    left: list[list[tuple[int, int, int]]] = []
    right: list[list[tuple[int, int, int]]] = []
    for i in range(ON_TIME_FILES + LATE_FILES):
        lrows: list[tuple[int, int, int]] = []
        rrows: list[tuple[int, int, int]] = []
        if i < ON_TIME_FILES:
            lrows = [(10 * i + j, 100 * i + j, i * 10 + j) for j in range(3)]
            rrows.append((10 * i + 1, 100 * i, 1000 + i))
            if i > 0:
                rrows.append((10 * (i - 1) + 1 + 4, 100 * (i - 1) + 1, 2000 + i))
        if i >= 5:
            lrows.append((10 * (i - 5) - 20, 7, 7))
            rrows.append((10 * (i - 5) - 20, 7, 7))
        left.append(lrows)
        right.append(rrows)
    return left, right


def _write_files(directory: Path, files: list[list[tuple]], columns: list[tuple[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    base = (time.time() // 86400) * 86400 - 86400
    for i, rows in enumerate(files):
        arrays = []
        for c, (name, typ) in enumerate(columns):
            values = [r[c] for r in rows]
            if name.endswith("ts"):
                arrays.append(pa.array([v * 1_000_000 for v in values], pa.timestamp("us", tz="UTC")))
            else:
                arrays.append(pa.array(values, typ))
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(pa.table(arrays, names=[n for n, _ in columns]), path)
        os.utime(path, (base + i, base + i))


def write_torture_inputs(root: Path) -> dict[str, str]:
    """The inputs, once per test session: ``events`` and ``join/{left,right}``."""
    import pyarrow as pa

    if not (root / "events").exists():
        _write_files(root / "events", _events(), [("ts", None), ("value", pa.int64())])
        left, right = _join_sides()
        _write_files(root / "join" / "left", left, [("lts", None), ("k", pa.int64()), ("lv", pa.int64())])
        _write_files(root / "join" / "right", right, [("rts", None), ("rk", pa.int64()), ("rv", pa.int64())])
    return {"events": str(root / "events"), "join": str(root / "join")}


def family_jobs(
    root: Path, inputs: dict[str, str], engine: str = "statestream", families: tuple[str, ...] = FAMILIES, checkpoint_root: str | None = None
) -> list[dict[str, Any]]:
    """One job per family under ``root``; the checkpoints under ``checkpoint_root`` when given
    (an ``s3://bucket/prefix?<query>`` URI: ``<family>`` is added to the path)."""
    jobs = []
    for family in families:
        d = root / family
        d.mkdir(parents=True, exist_ok=True)
        if checkpoint_root is None:
            checkpoint = str(d / "checkpoint")
        else:
            base, _, query = checkpoint_root.partition("?")
            checkpoint = f"{base}/{family}" + (f"?{query}" if query else "")
        jobs.append(
            {
                "engine": engine,
                "query": family,
                "mode": "append",
                "input": inputs["join" if family == "stream_join" else "events"],
                "checkpoint": checkpoint,
                "output": str(d / "output"),
                "calls": str(d / "calls.log"),
                "done": str(d / "done.json"),
            }
        )
    return jobs


# ------------------------------------------------------------------------------------------
# What a round compares
# ------------------------------------------------------------------------------------------


def sink_rows(spark: Any, output: str) -> list[tuple]:
    return sorted((tuple(r) for r in spark.read.parquet(output).collect()), key=repr)


def state_rows(checkpoint: str) -> dict[tuple[int, str], list]:
    """Every store of every operator at the last committed batch, rows in a canonical order."""
    from statestream.tools.state_tables import StateTables

    tables = StateTables(checkpoint)
    return {
        (op, store): sorted((tuple(r.values()) for r in tables.read(store, op).to_pylist()), key=repr)
        for op, stores in tables.operators().items()
        for store in stores
    }


#: Spark's transformWithState needs the RocksDB provider (recorded in each query's offset log)
SPARK_CONFS = {"spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}


def run_in_process_together(engine: Any, jobs: list[dict[str, Any]], confs: dict[str, str], timeout: float = 900) -> None:
    """Run ``jobs`` to the end at once on ``engine`` in this process (the reference runs), with
    ``confs`` set for their start."""
    saved = {k: engine_conf_get(engine, k) for k in confs}
    for k, v in confs.items():
        engine_conf_set(engine, k, v)
    try:
        queries = [start_query(engine, job) for job in jobs]
        for job, query in zip(jobs, queries):
            assert query.awaitTermination(timeout), f"{job['query']}: still running after {timeout} s"
            assert query.exception() is None, f"{job['query']}: {query.exception()}"
    finally:
        for k, v in saved.items():
            if v is None:
                engine_conf_unset(engine, k)
            else:
                engine_conf_set(engine, k, v)


def _conf(engine: Any) -> Any:
    return getattr(engine, "sparkSession", engine).conf


def engine_conf_get(engine: Any, key: str) -> str | None:
    return _conf(engine).get(key, None)


def engine_conf_set(engine: Any, key: str, value: str) -> None:
    _conf(engine).set(key, value)


def engine_conf_unset(engine: Any, key: str) -> None:
    _conf(engine).unset(key)


_REFERENCES: dict[str, dict[str, Any]] = {}


def reference(spark: Any, tmp_root: Path, inputs: dict[str, str], engine: str) -> dict[str, Any]:
    """The uninterrupted run of every family on ``engine`` (once per test session): sink rows
    and, for statestream, state rows per family."""
    if engine not in _REFERENCES:
        from statestream import StreamingSession

        jobs = family_jobs(tmp_root / f"reference-{engine}", inputs, engine)
        if engine == "statestream":
            run_in_process_together(StreamingSession(spark), jobs, CONFS)
        else:
            run_in_process_together(spark, jobs, {**CONFS, **SPARK_CONFS})
        _REFERENCES[engine] = {
            job["query"]: {
                "sink": sink_rows(spark, job["output"]),
                "state": state_rows(job["checkpoint"]) if engine == "statestream" else None,
                "batches": batch_files(Path(job["checkpoint"]) / "commits"),
            }
            for job in jobs
        }
    return _REFERENCES[engine]


# ------------------------------------------------------------------------------------------
# The torture
# ------------------------------------------------------------------------------------------


def _is_local(checkpoint: str) -> bool:
    return "://" not in checkpoint


def log_batches(checkpoint: str, log: str) -> list[int]:
    """Batch ids of ``<checkpoint>/<log>`` (``offsets``, ``commits``), on any file system."""
    if _is_local(checkpoint):
        return batch_files(Path(checkpoint) / log)
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(checkpoint)
    infos = fs.get_file_info(pafs.FileSelector(f"{path}/{log}", allow_not_found=True))
    return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())


def checkpoint_query_id(checkpoint: str) -> str | None:
    """The query id in ``<checkpoint>/metadata``, or None before it is written."""
    if _is_local(checkpoint):
        return query_id(Path(checkpoint)) if Path(checkpoint, "metadata").exists() else None
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(checkpoint)
    if fs.get_file_info(f"{path}/metadata").type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(f"{path}/metadata") as fh:
        return json.loads(fh.read().decode())["id"]


def landed(job: dict[str, Any]) -> str:
    """Where in its batch a kill left the query, read from its checkpoint and sink."""
    if not _is_local(job["checkpoint"]):
        return "on an object store (not classified)"
    ckpt, out = Path(job["checkpoint"]), Path(job["output"])
    offsets, commits = batch_files(ckpt / "offsets"), batch_files(ckpt / "commits")
    if not offsets:
        return "starting: no batch planned"
    n = offsets[-1]
    if commits and commits[-1] == n:
        sources = [source_log_batches(ckpt)] if job["query"] != "stream_join" else []
        if sources and sources[0] and sources[0][-1] > n:
            return "planning: source logged, offsets not written"
        return "between batches: committed, next not planned"
    versions = state_versions(ckpt)
    written = [store for store, vs in versions.items() if n + 1 in vs]
    if not written:
        return "executing: planned, no state committed"
    if len(written) < len(versions):
        return "state commit: some stores committed"
    if n in sink_log_batches(out):
        return "sink written, commit missing"
    return "state committed, sink not written"


class Torture:
    """One torture run: rounds of a child process killed and restarted until the kills reach
    ``kills``; ``rng`` decides when each kill comes."""

    def __init__(
        self, spark: Any, tmp_path: Path, inputs: dict[str, str], seed: int, kills: int, with_spark: bool,
        families: tuple[str, ...] = FAMILIES, checkpoint_root: str | None = None,
    ) -> None:
        self.families = families
        self.checkpoint_root = checkpoint_root
        self.spark = spark
        self.tmp_path = tmp_path
        self.inputs = inputs
        self.seed = seed
        self.target = kills
        self.with_spark = with_spark
        self.rng = random.Random(seed)
        self.counted = 0
        self.process_kills = 0
        self.starts = 0
        self.landings: collections.Counter[str] = collections.Counter()
        self.by_family: collections.Counter[str] = collections.Counter()

    def where(self) -> str:
        return f"seed {self.seed}, after {self.counted} kills (replay: STATESTREAM_TORTURE_SEED={self.seed} STATESTREAM_TORTURE_KILLS={self.target})"

    def run(self) -> None:
        rnd = 0
        while self.counted < self.target:
            self.round(rnd)
            rnd += 1

    def _start(self, job_path: Path, log_path: Path) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STATESTREAM_TEST_CRASH")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env[ENV_CHILD_JAVA_OPTIONS] = child_java_options()
        self.starts += 1
        with open(log_path, "ab") as out:
            return subprocess.Popen(
                [sys.executable, str(CHILD), str(job_path)],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def round(self, rnd: int) -> None:
        root = self.tmp_path / f"round{rnd}"
        ck_root = None if self.checkpoint_root is None else self.checkpoint_root.replace("?", f"/round{rnd}?", 1)
        jobs = family_jobs(root, self.inputs, families=self.families, checkpoint_root=ck_root)
        started = root / "started"
        job_path, log_path = root / "job.json", root / "child.log"
        job_path.write_text(
            json.dumps({"jobs": jobs, "started": str(started), "result": str(root / "result.json"), "confs": CONFS, "timeout": 900, "engine": "statestream"})
        )
        first_ids: dict[str, str] = {}
        while True:
            started.unlink(missing_ok=True)
            kill = self.counted < self.target
            t0 = time.monotonic()
            proc = self._start(job_path, log_path)
            if not kill:
                code = proc.wait(900)
                assert code == 0, f"{self.where()}: the final start failed (exit {code})\n{_tail(log_path)}"
                break
            delay = self.rng.uniform(*KILL_WINDOW_S)
            while not started.exists() and proc.poll() is None:
                time.sleep(0.02)
            log.info("round %d start %d: queries started after %.1f s; kill in %.1f s", rnd, self.starts, time.monotonic() - t0, delay)
            if proc.poll() is None:
                time.sleep(delay)
            if proc.poll() is not None:
                # ended before the kill: every query finished (or the child failed)
                assert proc.returncode == 0, f"{self.where()}: the child failed (exit {proc.returncode})\n{_tail(log_path)}"
                break
            running = [job for job in jobs if not Path(job["done"]).exists()]
            _kill_session(proc.pid)
            proc.wait()
            self._no_survivors(proc.pid)
            self.process_kills += 1
            for job in running:
                self.counted += 1
                self.by_family[job["query"]] += 1
                self.landings[landed(job)] += 1
            for job in jobs:
                qid = checkpoint_query_id(job["checkpoint"])
                if qid is not None:
                    assert first_ids.setdefault(job["query"], qid) == qid, f"{self.where()}: {job['query']} changed its query id"
        t0 = time.monotonic()
        self.check_round(jobs, first_ids)
        log.info("round %d checked in %.1f s", rnd, time.monotonic() - t0)

    def _no_survivors(self, sid: int) -> None:
        deadline = time.monotonic() + 20
        members = _session_members(sid)
        while members and time.monotonic() < deadline:
            time.sleep(0.1)
            members = _session_members(sid)
        assert not members, f"{self.where()}: processes outlived the kill: {members}"

    def check_round(self, jobs: list[dict[str, Any]], first_ids: dict[str, str]) -> None:
        ours = reference(self.spark, self.tmp_path.parent / "torture-references", self.inputs, "statestream")
        for job in jobs:
            family = job["query"]
            ckpt = job["checkpoint"]
            qid = checkpoint_query_id(ckpt)
            assert first_ids.get(family, qid) == qid, f"{self.where()}: {family} changed its query id"
            commits, offsets = log_batches(ckpt, "commits"), log_batches(ckpt, "offsets")
            # (retention keeps the last minBatchesToRetain entries of each log)
            contiguous = commits == list(range(commits[0], commits[0] + len(commits))) if commits else False
            assert contiguous and commits == offsets, f"{self.where()}: {family}: offsets {offsets} commits {commits}"
            got = sink_rows(self.spark, job["output"])
            assert got, f"{self.where()}: {family}: the sink is empty"
            assert got == ours[family]["sink"], f"{self.where()}: {family}: the sink differs from an uninterrupted run"
            assert state_rows(job["checkpoint"]) == ours[family]["state"], f"{self.where()}: {family}: the state differs from an uninterrupted run"
        if self.with_spark:
            spark_ref = reference(self.spark, self.tmp_path.parent / "torture-references", self.inputs, "spark")
            for job in jobs:
                got = sink_rows(self.spark, job["output"])
                assert got == spark_ref[job["query"]]["sink"], f"{self.where()}: {job['query']}: the sink differs from Spark's engine"

    def report(self) -> str:
        return (
            f"{self.counted} query kills in {self.process_kills} process kills ({self.starts} starts); "
            f"by family {dict(self.by_family)}; landed {dict(self.landings)}"
        )


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def torture_inputs(tmp_path_factory):
    return write_torture_inputs(tmp_path_factory.mktemp("torture-input"))


def _torture(spark, tmp_path, inputs, seed: int, kills: int, with_spark: bool, **kw: Any) -> Torture:
    seed = int(os.environ.get("STATESTREAM_TORTURE_SEED", seed))
    kills = int(os.environ.get("STATESTREAM_TORTURE_KILLS", kills))
    torture = Torture(spark, tmp_path, inputs, seed, kills, with_spark, **kw)
    torture.run()
    log.warning("random-kill torture: %s", torture.report())
    print(f"\nrandom-kill torture: {torture.report()}")
    return torture


@pytest.mark.covered_by_slow("test_random_kill_torture")
def test_random_kill_sample(spark, tmp_path, torture_inputs):
    """CI's sample: 6 kills with a fixed seed (the soak tier runs 200)."""
    torture = _torture(spark, tmp_path, torture_inputs, seed=7, kills=6, with_spark=False)
    assert torture.counted >= torture.target


@pytest.mark.slow
@pytest.mark.soak
def test_random_kill_torture(spark, tmp_path, torture_inputs):
    """200 kills across the families. With ``STATESTREAM_TORTURE_SPARK=1`` each round's sinks are
    also compared with Spark's engine run on the same input (two more minutes; the uninterrupted
    statestream run they are compared with by default is itself Spark's answer on these inputs,
    which that option shows)."""
    torture = _torture(spark, tmp_path, torture_inputs, seed=2026, kills=200, with_spark=bool(os.environ.get("STATESTREAM_TORTURE_SPARK")))
    assert torture.counted >= torture.target
    # the kills must have landed both before and after a batch's state commit, or the timing is
    # degenerate. (The rarer landings, a partial state commit and between batches, depend on
    # timing: 3 and 1 of 203 in one run, 4 and 0 in another. The crash tests kill at each of those
    # points deliberately.)
    assert torture.landings["executing: planned, no state committed"] > 0, torture.report()
    assert torture.landings["state committed, sink not written"] > 0, torture.report()


#: the families of the object-store torture: one per kind of state layout (a single store, a
#: join's four stores, transformWithState's variables and timers)
S3_FAMILIES = ("seed", "stream_join", "transform_with_state")


@pytest.mark.slow
@pytest.mark.covered_by_slow("test_random_kills_with_checkpoints_on_s3")
def test_random_kill_sample_on_s3(spark, tmp_path, torture_inputs, s3_endpoint):
    """CI's sample of the object-store torture: 2 kills with a fixed seed, over the same families."""
    torture = _s3_torture(spark, tmp_path, torture_inputs, s3_endpoint, seed=11, kills=2)
    assert torture.counted >= torture.target


def _s3_torture(spark, tmp_path, inputs, s3_endpoint: str, seed: int, kills: int) -> Torture:
    import uuid

    root = f"s3://checkpoints/torture-{uuid.uuid4().hex[:8]}?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    return _torture(spark, tmp_path, inputs, seed=seed, kills=kills, with_spark=False, families=S3_FAMILIES, checkpoint_root=root)


@pytest.mark.slow
@pytest.mark.soak
def test_random_kills_with_checkpoints_on_s3(spark, tmp_path, torture_inputs, s3_endpoint):
    """The torture with every checkpoint on an S3-compatible server (moto's, on loopback), where
    nothing is renamed atomically: a file is visible whole or not at all once its upload
    completes, and a kill in the middle of one leaves nothing. Fewer kills than the local
    torture (each object-store batch is slower); the same comparisons, the references being the
    local uninterrupted runs over the same input."""
    torture = _s3_torture(spark, tmp_path, torture_inputs, s3_endpoint, seed=15, kills=15)
    assert torture.counted >= torture.target
