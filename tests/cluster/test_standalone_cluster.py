"""statestream on a Spark standalone cluster, with a worker killed in the middle of a query.

``test_cluster.py`` runs on ``local-cluster``, whose master and workers live inside the driver's
JVM. Here the cluster is the one a user starts: a master and two workers, each a process of its
own started with ``bin/spark-class`` of the PySpark package, on loopback only
(``SPARK_LOCAL_IP``), one core each. The driver (``cluster_child.py``, master
``spark://127.0.0.1:<port>``) runs the seed query and a deduplication on Spark's engine and on
statestream over the same files, with the checkpoints on a directory all processes share, and
compares every batch (rows, watermark, event-time statistics, state metrics); statestream
reaches the executors as a zip (``addPyFile``).

Once statestream's seed query has committed its first batch, the second worker is SIGKILLed
with everything it started: its executor JVM and that executor's Python workers, possibly in the
middle of a state task. Spark marks the executor lost and runs its tasks again on the remaining
executor, which then serves every state partition, reloading from the files what the dead one
wrote. The query goes on, and every batch must still equal Spark's engine's; the driver must
end with one executor, so the kill really happened mid-run.

After it, on the same cluster (its remaining worker), an unmodified program is submitted in client
mode with spark-submit, as it is and with ``spark.pyspark.driver.python=statestream-python``, and
the two runs' console output is compared batch by batch.

Slow: five JVMs start on the two cores of the test machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.crash.class_archive import ENV_CHILD_JAVA_OPTIONS, child_java_options
from tests.crash.test_crash_recovery import _kill_session, _session_members

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "cluster_child.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(_spark_class()), *args], env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


#: the driver's whole run (two queries, each with a restart, on both engines) takes 70-100 s
#: alone and a few minutes beside the rest of the suite
DRIVER_TIMEOUT_S = 600


def _dump_stacks(pid: int, log: Path) -> None:
    """A driver that did not finish in time: its JVM's threads (``jstack``), then every Python
    thread's stack (the child's ``faulthandler`` on SIGUSR1), at the end of its log."""
    import shutil

    jvms = [p for p, _, cmd in _session_members(pid) if "SparkSubmit" in cmd]
    jstack = shutil.which("jstack") or str(Path(os.environ.get("JAVA_HOME", "/nonexistent")) / "bin" / "jstack")
    with open(log, "ab") as out:
        for jvm in jvms:
            out.write(f"\n=== jstack {jvm} ===\n".encode())
            out.flush()
            try:
                subprocess.run([jstack, str(jvm)], stdout=out, stderr=subprocess.STDOUT, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                out.write(f"jstack failed: {exc}\n".encode())
        out.write(b"\n=== the driver's Python threads ===\n")
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    time.sleep(2)


def _wait_for(predicate, what: str, timeout: float, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise AssertionError(f"{log.name}: exited ({proc.returncode}) while waiting for {what}:\n{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.5)


def _spark_submit_unchanged(master_url: str, tmp_path: Path, env: dict[str, str]) -> None:
    """An unmodified program (``tests/jobs/windowed_word_count.py``) submitted in client mode to
    the cluster (its remaining worker) with spark-submit, once as it is (Spark's engine) and once
    with ``spark.pyspark.driver.python=statestream-python``: every console batch is the same, and
    the second run was statestream's (its log line of the served session)."""
    from tests.spark.test_run_unchanged import BIN, JOBS, RAN, SERVED, _events, console_batches

    (tmp_path / "unchanged").mkdir()
    events = _events(tmp_path / "unchanged")
    runs = {}
    for engine, extra in (("spark", []), ("statestream", ["--conf", f"spark.pyspark.driver.python={BIN / 'statestream-python'}"])):
        cmd = [str(BIN / "spark-submit"), "--master", master_url, "--deploy-mode", "client",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.sql.session.timeZone=UTC",
               "--conf", "spark.executor.memory=512m", *extra, str(JOBS / "windowed_word_count.py"), str(events)]
        run_env = dict(env, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYSPARK_DRIVER_PYTHON=sys.executable, STATESTREAM_LOG_LEVEL="INFO")
        run_env.pop("PYTHONPATH", None)
        runs[engine] = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)
        assert runs[engine].returncode == 0, f"{engine}: exit {runs[engine].returncode}\n{runs[engine].stdout[-4000:]}\n{runs[engine].stderr[-4000:]}"
    assert SERVED in runs["statestream"].stdout + runs["statestream"].stderr and RAN in runs["statestream"].stdout
    assert SERVED not in runs["spark"].stdout + runs["spark"].stderr and RAN not in runs["spark"].stdout
    expected = console_batches(runs["spark"].stdout)
    assert len(expected) == 6, runs["spark"].stdout[-4000:]
    assert console_batches(runs["statestream"].stdout) == expected


@pytest.mark.slow
def test_standalone_cluster_survives_a_killed_worker(tmp_path):
    from statestream._jvm.java import ensure_java

    ensure_java()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATESTREAM_TEST_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_PUBLIC_DNS="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    # every JVM here (master, workers, the driver and its executors) is short-lived: the test's
    # class-data archive and C1 only (tests/crash/class_archive.py)
    java_options = child_java_options()
    env["SPARK_DAEMON_JAVA_OPTS"] = java_options
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master_log = tmp_path / "master.log"
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        procs.append(_start(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
            master_log, env,
        ))
        logs.append(master_log)
        for i in range(2):
            log = tmp_path / f"worker{i}.log"
            work = tmp_path / f"worker{i}"
            work.mkdir()
            procs.append(_start(
                ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                 "--webui-port", str(_free_port()), "--work-dir", str(work)],
                log, env,
            ))
            logs.append(log)
        _wait_for(
            lambda: all("Successfully registered with master" in log.read_text(errors="replace") for log in logs[1:]),
            "both workers registering", 240, procs, logs,
        )

        workdir = tmp_path / "work"
        workdir.mkdir()
        job = {"master": master_url, "queries": ["seed", "dedup"], "workdir": str(workdir), "result": str(workdir / "result.json"), "py_files": True}
        (workdir / "job.json").write_text(json.dumps(job))
        child_env = dict(env, **{ENV_CHILD_JAVA_OPTIONS: java_options}, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p), PYTHONUNBUFFERED="1")
        child_log = tmp_path / "driver.log"
        with open(child_log, "ab") as out:  # appends, as the stack dumps after it do
            child = subprocess.Popen(
                [sys.executable, str(CHILD), str(workdir / "job.json")],
                env=child_env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        procs.append(child)
        logs.append(child_log)
        first_commit = workdir / "seed" / "statestream" / "checkpoint" / "commits" / "0"
        _wait_for(first_commit.exists, "statestream's first commit", 600, [child], [child_log])
        killed = _kill_session(procs[2].pid)
        assert any("Worker" in cmd for _, _, cmd in killed), killed
        try:
            rc = child.wait(DRIVER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
            _dump_stacks(child.pid, child_log)
        tail = "\n".join(child_log.read_text(errors="replace").splitlines()[-(40 if rc is not None else 800):])
        assert rc == 0, f"the driver failed (exit {rc}):\n{tail}\n{(workdir / 'result.json').read_text() if (workdir / 'result.json').exists() else ''}"
        result = json.loads((workdir / "result.json").read_text())
        assert result["executors"] == 2, result
        assert result["executorsAtEnd"] == 1, f"the killed worker's executor is still registered: {result}"
        for name in job["queries"]:
            assert result["queries"][name]["ok"], result["queries"][name]
        assert not result["driverProviders"], "the driver process must not hold state stores"
        _spark_submit_unchanged(master_url, tmp_path, env)
    finally:
        for proc in reversed(procs):
            if _session_members(proc.pid):
                _kill_session(proc.pid)
            proc.wait()
