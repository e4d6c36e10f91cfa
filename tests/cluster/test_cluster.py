"""statestream on a real Spark cluster: ``local-cluster[2,1,1024]``, state tasks in executor processes.

``local-cluster`` starts a standalone master and two workers inside the driver's JVM, and each
worker launches its executor as a separate JVM (``bin/spark-class`` of pip's pyspark), with its
own Python daemon and workers. So this is the cluster case in small: the driver process never
runs a task, every state step runs in some executor's Python worker, and a partition's task goes
to whichever executor is free, so consecutive versions of one state partition are written by
different processes. The checkpoint is a ``file://`` URI on storage all processes share.

One child process (``cluster_child.py``; one SparkSession per process) runs the seed query, a
deduplication, a session-window aggregation and a stream-stream join on Spark's engine and on
statestream over the same files, each started twice on its checkpoint (first start, then a restart), and compares
every batch (rows, watermark, event-time statistics, state metrics). statestream reaches the
executors as a zip shipped with ``addPyFile`` (what ``--py-files`` does). CI runs the seed query
and the join (:data:`SAMPLE_QUERIES`); the soak tier runs all four.

With ``STATESTREAM_TEST_TASK_LOG`` set, every state task logs which process and executor served
which store version and how its provider cache answered (``statestream.faults.record_state_task``;
the join's scan tasks log the store versions they read too).
From that log the test demands: no state task in the driver process, both executors used, the
shipped zip imported, every version of every store served exactly once, partitions moving between
executors, and, the point of the exercise, a worker that comes back to a partition after the other
executor wrote newer versions loads them (a cache miss: from another worker's mapped file of that version or from the
checkpoint's files) instead of reusing its cached table, while a worker serving the next version of its own commit reuses it (a hit).

Slow: the cluster alone takes about 40 s to start on the shared test machine.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash.class_archive import ENV_CHILD_JAVA_OPTIONS, child_java_options
from tests.crash.test_crash_recovery import _kill_session, _session_members

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "cluster_child.py"
CHILD_TIMEOUT_S = float(os.environ.get("STATESTREAM_CLUSTER_CHILD_TIMEOUT", "1500"))
QUERIES = ["seed", "dedup", "session", "stream_join"]
#: CI's sample: one query with a single store per partition, and the join's four stores
SAMPLE_QUERIES = ["seed", "stream_join"]


def run_child(workdir: Path, queries: list[str]) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]], str]:
    """Run the child to the end; (exit code, result, task log records, tail of its output)."""
    job = {
        "master": "local-cluster[2,1,1024]",
        "queries": queries,
        "workdir": str(workdir),
        "result": str(workdir / "result.json"),
        "py_files": True,
    }
    job_path = workdir / "job.json"
    job_path.write_text(json.dumps(job))
    task_log = workdir / "tasks.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATESTREAM_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["STATESTREAM_TEST_TASK_LOG"] = str(task_log)
    env[ENV_CHILD_JAVA_OPTIONS] = child_java_options()
    out_path = workdir / "child.log"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(job_path)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            rc = proc.wait(CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = -1
        finally:
            # Executors and Python workers exit when the driver's JVM goes; kill what lingers.
            deadline = time.monotonic() + 20
            while _session_members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            _kill_session(proc.pid)
            proc.wait()
    tail = "\n".join(out_path.read_text(errors="replace").splitlines()[-40:])
    result_path = Path(job["result"])
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    records = [json.loads(line) for line in task_log.read_text().splitlines()] if task_log.exists() else []
    return rc, result, records, tail


def cache_history(records: list[dict[str, Any]]) -> dict[str, int]:
    """Walk each store's tasks in the order they ran and classify them (see the module docstring).

    A store is one partition's store of one operator (a stream-stream join has four per
    partition, and its scan tasks read two of them, ``*-keyWithIndexToValue``, before each state
    step: a read loads the version into the reading worker's cache as a commit does). Fails on
    a version committed twice or missing, on a return to a store that did not reload, and on a
    task of a worker that holds the version it needs (it committed it, or read it) that did not
    reuse its cache. The log's lines are in the order the tasks ran: the jobs of a query run one
    after the other, and each line is one append.
    """
    by_store: dict[tuple, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        by_store[(r["root"], r["op"], r["partition"], r.get("store", "default"))].append(r)
    counts = collections.Counter()
    for store, recs in by_store.items():
        commits = sorted((r for r in recs if not r.get("read")), key=lambda r: r["version"])
        versions = [r["version"] for r in commits]
        assert versions == list(range(len(commits))), f"{store}: versions served {versions}"
        for prev, r in zip(commits, commits[1:]):
            if prev["pid"] != r["pid"]:
                counts["moved"] += 1
        last_by_worker: dict[tuple, dict[str, Any]] = {}
        for r in recs:
            worker = (r["pid"], r["runId"])
            before = last_by_worker.get(worker)
            last_by_worker[worker] = r
            if before is None:
                continue
            what = f"{store} v{r['version']}{' (read)' if r.get('read') else ''}: worker {worker}"
            if r["version"] == 0:  # the empty version 0 is never loaded, cached or counted
                assert (r["hits"], r["misses"]) == (before["hits"], before["misses"]), f"{what}: {before} -> {r}"
                continue
            holds = before["version"] if before.get("read") else before["version"] + 1
            if r["version"] == holds:
                assert (r["hits"], r["misses"]) == (before["hits"] + 1, before["misses"]), (
                    f"{what} committed or read this version itself, yet its cache did not serve it: {before} -> {r}"
                )
                counts["reused"] += 1
            else:
                assert r["misses"] == before["misses"] + 1 and r["hits"] == before["hits"], (
                    f"{what} last served v{holds}, another process wrote the versions in between, yet it "
                    f"did not reload from the files: {before} -> {r}"
                )
                counts["returned"] += 1
    counts["stores"] = len(by_store)
    return dict(counts)


@pytest.mark.slow
@pytest.mark.covered_by_slow("test_local_cluster_two_executors_all_queries")
def test_local_cluster_two_executors(tmp_path):
    """CI's sample: the seed query and the stream-stream join on the cluster."""
    _run_on_the_cluster(tmp_path, SAMPLE_QUERIES)


@pytest.mark.slow
@pytest.mark.soak
def test_local_cluster_two_executors_all_queries(tmp_path):
    """The four queries (the seed query, deduplication, session windows kept in memory, the join)."""
    _run_on_the_cluster(tmp_path, QUERIES)


def _run_on_the_cluster(tmp_path: Path, queries: list[str]) -> None:
    t0 = time.monotonic()
    rc, result, records, tail = run_child(tmp_path, queries)
    elapsed = time.monotonic() - t0
    assert result is not None, f"child exited {rc} without a result\n{tail}"
    failures = {n: q["error"] + "\n" + q.get("trace", "") for n, q in result["queries"].items() if not q["ok"]}
    assert not failures, "\n\n".join(f"{n}: {e}" for n, e in failures.items())
    assert rc == 0, tail
    assert sorted(result["queries"]) == sorted(queries)
    for name, q in result["queries"].items():
        assert len(q["starts"]) == 2 and all(s["batches"] for s in q["starts"]), (name, q)
        assert q["starts"][1]["batches"][0] == q["starts"][0]["batches"][-1] + 1, (name, q)

    # Where the state tasks ran.
    assert result["executors"] == result["executorsAtEnd"] == 2, result
    assert result["driverProviders"] == [], "the driver process opened state stores"
    assert records, "no state task logged (STATESTREAM_TEST_TASK_LOG did not reach the executors?)"
    assert all(r["pid"] != result["driverPid"] for r in records)
    assert {r["executor"] for r in records} == {"0", "1"}, collections.Counter(r["executor"] for r in records)
    assert len({r["pid"] for r in records}) >= 2
    assert all("statestream.zip" in (r["module"] or "") for r in records), {r["module"] for r in records}
    roots = {r["root"] for r in records}
    for name in queries:
        query_records = [r for r in records if f"/{name}/statestream/" in r["root"]]
        assert len({r["runId"] for r in query_records}) == 2, f"{name}: expected a first start and a restart"
        assert {r["partition"] for r in query_records} == {0, 1, 2, 3}, name
    # the session windows ran with their versions in memory (CONFS in cluster_child.py), the
    # other queries with them on the executors' local disks (the default)
    mapped = collections.Counter(("/session/statestream/" in r["root"], r["mapped"] > 0) for r in records if not r["read"])
    assert mapped[(False, True)] > 0 and mapped[(True, True)] == 0, mapped
    if "session" in queries:
        assert mapped[(True, False)] > 0, mapped
    join_stores = {(r["store"], r["read"]) for r in records if "/stream_join/statestream/" in r["root"]}
    # the join matches in its state tasks (its condition has an Arrow form): the four stores are
    # opened for writing only, no read-only scan of the stored rows
    assert join_stores == {(f"{side}-{kind}", False) for side in ("left", "right") for kind in ("keyToNumValues", "keyWithIndexToValue")}, join_stores
    assert len(roots) == len(queries), roots

    counts = cache_history(records)
    log.info("cluster test: %.0f s (child %.0f s, cluster start %.0f s); %s", elapsed, result["seconds"],
             result["startupSeconds"], counts)
    assert counts.get("moved", 0) > 0, counts
    assert counts.get("returned", 0) > 0, counts
    assert counts.get("reused", 0) > 0, counts
