"""Python workers started while the first batch is being planned, and how they start.

A query's first batch used to start its Python workers only when its state stage began: the
daemon started and forked, and each worker imported pyarrow, pandas and statestream's state
modules (about 1.5 s in all on a busy machine) while everything else waited. Here a background
thread runs one tiny job at the query's start (one task per state partition, on at most half
the task slots: ``warm_up_tasks``) while the query thread lists its sources, writes its offsets
and plans the batch, and the first scan runs beside it; the state tasks then find warm workers.

Spark keeps an idle Python worker for a minute (``PythonWorkerFactory``), so a query started
within that time of the last warm-up, or of the last batch that ran state tasks in this
SparkContext (``note_python_workers_used``), finds them warm and runs none; a warm-up that failed
or was cancelled counts for nothing. With ``spark.python.worker.reuse=false`` every task starts its own
worker, and there is nothing to warm. The job carries the query's tag (a stop cancels it; a stop
before it was submitted skips it) and its failure only costs the time it meant to save.

Two choices of a local-mode context are made here too, on its own SparkConf, which the
executor in the same JVM reads: Python workers talk to the JVM over Unix domain sockets
(``use_unix_domain_sockets``), and they are forked from ``runtime.python_daemon``, which
imports the state modules before it forks (``use_preloading_daemon``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from statestream._jvm.calls import jvm_view
from statestream.operators.python_worker import forget_zip_importers
from statestream.runtime import python_daemon
from statestream.runtime.python_daemon import MODULE, preload

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "note_python_workers_used",
    "start_worker_warm_up",
    "use_preloading_daemon",
    "use_unix_domain_sockets",
    "warm_up_tasks",
    "UNIX_SOCKETS_CONF",
    "PRELOAD_CONF",
    "WARM_FOR_S",
]

logger = logging.getLogger(__name__)

#: set on a SparkContext to the monotonic time its Python workers were last known warm: the
#: last finished warm-up (or the one running), or the last batch that ran state tasks
_WARMED_ATTR = "_statestream_python_workers_warmed_at"
#: how long warmed workers are taken to stay up: under Spark's one minute for an idle worker
WARM_FOR_S = 50.0


#: statestream's conf: talk to local-mode Python workers over Unix domain sockets (default true)
UNIX_SOCKETS_CONF = "spark.statestream.pythonUnixSockets.enabled"
SPARK_UNIX_SOCKET_CONF = "spark.python.unix.domain.socket.enabled"
SPARK_UNIX_SOCKET_DIR_CONF = "spark.python.unix.domain.socket.dir"
#: the longest socket path Linux and macOS take (108 and 104 bytes with the terminating zero)
_MAX_SOCKET_PATH = 103
#: what Spark appends to the socket directory: "/." + a UUID + ".sock"
_SOCKET_NAME_LEN = 43


def use_unix_domain_sockets(spark: "SparkSession") -> bool:
    """Have this local-mode SparkContext's Python workers talk to the JVM over Unix domain
    sockets (Spark's ``spark.python.unix.domain.socket.enabled``) unless the user set that conf;
    returns whether they will.

    Over loopback TCP every Python task of this machine waited about 45 ms before its first
    Arrow batch arrived, with both processes idle (py-spy: the worker blocked opening the Arrow
    stream, the JVM task at 13-16 ms of CPU in 63-70 ms of run time; a delayed acknowledgement
    behind a small write, by every sign). An identity ``mapInArrow`` task over 5 rows took 69-88 ms
    over TCP and 21-41 ms over a Unix socket; a small batch runs one such task per state step.
    Spark reads the conf when it creates a worker factory, a socket server or an accumulator
    connection, so it is set on the context's own SparkConf before the query's first Python
    task (workers already started keep their TCP connection). Only in local mode, where the
    executor is this JVM (a cluster's executors took their conf when they started), only on
    POSIX, and only when the socket path Spark makes in its directory fits the system's limit.
    ``spark.statestream.pythonUnixSockets.enabled=false`` leaves the conf alone."""
    import socket

    sc = spark.sparkContext
    conf = sc._conf  # noqa: SLF001 - PySpark's view of the context's own SparkConf, which the executor reads
    chosen = conf.get(SPARK_UNIX_SOCKET_CONF, None)
    if chosen is not None:
        return str(chosen).strip().lower() == "true"
    if str(spark.conf.get(UNIX_SOCKETS_CONF, "true")).strip().lower() != "true":
        return False
    master = str(sc.master)
    if not (master == "local" or master.startswith("local[")) or not hasattr(socket, "AF_UNIX"):
        return False
    directory = conf.get(SPARK_UNIX_SOCKET_DIR_CONF, None) or jvm_view(sc).java.lang.System.getProperty("java.io.tmpdir")
    if not directory or len(str(directory).rstrip("/").encode()) + _SOCKET_NAME_LEN > _MAX_SOCKET_PATH:
        return False
    conf.set(SPARK_UNIX_SOCKET_CONF, "true")
    logger.debug("Python workers of %s talk to the JVM over Unix domain sockets in %s", master, directory)
    return True


#: statestream's conf: run local-mode Python workers under ``runtime.python_daemon`` (default true)
PRELOAD_CONF = "spark.statestream.pythonDaemon.preload.enabled"
SPARK_DAEMON_MODULE_CONF = "spark.python.daemon.module"
#: PySpark's own daemon module, what Spark runs when the conf is unset
PYSPARK_DAEMON = "pyspark.daemon"
#: Spark's per-worker memory limit (an address-space limit on the worker)
_PYSPARK_MEMORY_CONF = "spark.executor.pyspark.memory"
#: set on a SparkContext by ``use_preloading_daemon``: True once it set the conf, False once it
#: decided not to (a cluster, a Python that would not import this statestream)
_PRELOAD_ATTR = "_statestream_preloading_daemon"
_PRELOAD_LOCK = threading.Lock()


def use_preloading_daemon(spark: "SparkSession") -> bool:
    """Have this local-mode SparkContext start its Python workers from
    ``statestream.runtime.python_daemon`` (Spark's ``spark.python.daemon.module``), which imports
    what a state step needs before it forks them; returns whether the context's daemon is that one.

    Set, like the Unix socket conf, on the context's own SparkConf, before the warm-up's job
    (which comes before the first batch's state tasks; a Python task of the query that comes
    earlier starts PySpark's daemon, and the tasks after the change a second one), only in
    local mode (a cluster's executors took their conf when they started), only when the user
    set no daemon module, ``spark.statestream.pythonDaemon.preload.enabled``
    is not false and no per-worker memory limit is set (``spark.executor.pyspark.memory`` limits
    a worker's address space, which the preloaded libraries take more of), and only once the
    workers' Python has been seen to import the daemon module, this driver's own, as Spark
    would start it (:func:`_workers_import_this_daemon`): Spark runs the daemon as ``python -m``
    before any file a job ships is on its path, and a daemon that fails to start fails every
    Python task of the context. The opt-out turned on later puts PySpark's daemon back. A
    context that already runs Python workers keeps them: Spark starts a second daemon for the
    tasks that come after a change (a few seconds of CPU once)."""
    sc = spark.sparkContext
    conf = sc._conf  # noqa: SLF001 - PySpark's view of the context's own SparkConf, which the executor reads
    enabled = str(spark.conf.get(PRELOAD_CONF, "true")).strip().lower() == "true"
    with _PRELOAD_LOCK:
        ours = getattr(sc, _PRELOAD_ATTR, None)
        chosen = conf.get(SPARK_DAEMON_MODULE_CONF, None)
        if ours is True:
            if chosen != MODULE:  # changed since: the user's now
                setattr(sc, _PRELOAD_ATTR, False)
                return False
            if not enabled:
                conf.set(SPARK_DAEMON_MODULE_CONF, PYSPARK_DAEMON)
                setattr(sc, _PRELOAD_ATTR, False)
                return False
            return True
        if chosen is not None:
            return str(chosen).strip() == MODULE
        if ours is False or not enabled:
            return False
        master = str(sc.master)
        local = master == "local" or master.startswith("local[")
        ok = local and conf.get(_PYSPARK_MEMORY_CONF, None) is None and _workers_import_this_daemon(sc)
        setattr(sc, _PRELOAD_ATTR, ok)
        if ok:
            conf.set(SPARK_DAEMON_MODULE_CONF, MODULE)
            logger.debug("Python workers of %s start from %s", master, MODULE)
        return ok


def _workers_import_this_daemon(sc: object) -> bool:
    """Whether the workers' Python, started as Spark starts its daemon (the context's
    ``pythonExec``, the JVM's working directory, the environment with the context's
    ``spark.executorEnv`` values, Spark's Python path), imports ``statestream.runtime.python_daemon``
    from this driver's own file. The import runs what ``python -m`` runs before the daemon's own
    code (the package and the module, which import nothing of PySpark: the daemon chooses where
    PySpark comes from, and falls back to Spark's zips itself); a Python start, once per
    context."""
    try:
        jvm = jvm_view(sc)  # type: ignore[arg-type]
        cwd = str(jvm.java.lang.System.getProperty("user.dir"))
        spark_path = str(jvm.org.apache.spark.api.python.PythonUtils.sparkPythonPath())
        python = str(sc.pythonExec)  # type: ignore[attr-defined]
        executor_env = dict(getattr(sc, "environment", None) or {})
    except Exception:  # a context without them: leave PySpark's daemon alone
        logger.debug("cannot tell what the Python workers import", exc_info=True)
        return False
    env = {**os.environ, **executor_env}
    user_paths = [p for p in (executor_env.get("PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")) if p]
    probe = f"import sys, {python_daemon.MODULE} as d; sys.stdout.write(d.__file__)"
    # the path as Spark gives it to its daemon: its zips first
    env["PYTHONPATH"] = os.pathsep.join([spark_path, *user_paths])
    try:
        done = subprocess.run([python, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        logger.info("Python workers keep PySpark's daemon: cannot run their interpreter %s", python, exc_info=True)
        return False
    found = done.stdout.strip()
    ours = os.path.realpath(python_daemon.__file__)
    if done.returncode != 0 or not found or os.path.realpath(os.path.join(cwd, found)) != ours:
        reason = done.stderr.strip().splitlines()[-1:] if done.returncode != 0 else [f"it imports {found or 'nothing'}"]
        logger.info("Python workers keep PySpark's daemon: their Python %s does not import %s from %s (%s)",
                    python, python_daemon.MODULE, ours, reason[0] if reason else "")
        return False
    return True


def start_worker_warm_up(
    spark: "SparkSession",
    job_tag: str,
    num_partitions: int,
    stopped: threading.Event | None = None,
    before: "Callable[[], object] | None" = None,
) -> threading.Thread | None:
    """Start the warm-up job in a daemon thread, which first calls ``before`` (what must happen
    before the context's first Python task, off the caller's thread); returns the thread, or
    None when none is needed (a recent warm-up of this SparkContext, or no worker reuse), in
    which case ``before`` is not called."""
    sc = spark.sparkContext
    warmed_at = getattr(sc, _WARMED_ATTR, None)
    if warmed_at is not None and time.monotonic() - warmed_at < WARM_FOR_S:
        return None
    if str(sc.getConf().get("spark.python.worker.reuse", "true")).lower() != "true":
        return None
    started = time.monotonic()
    setattr(sc, _WARMED_ATTR, started)
    n = warm_up_tasks(int(sc.defaultParallelism), int(num_partitions))

    def forget() -> None:
        # only this warm-up's own stamp: a batch may have noted warm workers since
        if getattr(sc, _WARMED_ATTR, None) == started:
            setattr(sc, _WARMED_ATTR, None)

    def run() -> None:
        try:
            if before is not None:
                before()
            sc.addJobTag(job_tag)
            sc.setJobDescription("statestream: start the Python workers")
            if stopped is not None and stopped.is_set():
                forget()
                return
            spark.range(0, n, 1, n).mapInArrow(warm_up, "ok INT").collect()
            note_python_workers_used(sc)
        except Exception:  # a stopped query or session; the batches start them anyway
            forget()
            logger.debug("Python worker warm-up did not finish", exc_info=True)
        finally:
            try:
                sc.removeJobTag(job_tag)
                sc.setJobDescription(None)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - the context was stopped
                pass

    thread = threading.Thread(target=run, name="statestream-worker-warm-up", daemon=True)
    thread.start()
    return thread


def warm_up_tasks(task_slots: int, num_partitions: int) -> int:
    """How many workers the warm-up starts: one per state partition, on at most half the task
    slots (at least one). The first batch's scan is ready to run about a second after the query
    starts, while a worker takes a few seconds to start on a busy machine; a warm-up on every
    slot made the scan wait for it. Measured on W1 (``local[2]``, 1M rows a file, three runs
    each): the first three batches took 11.4 s on average with two warm-up tasks, 10.3 s with
    one, 10.5 s with none; the worker the warm-up leaves cold starts beside the scan, forked
    from a daemon that is already up."""
    return max(1, min(task_slots // 2, num_partitions))


def note_python_workers_used(sc: object) -> None:
    """Record that a batch of ``sc`` just ran state tasks: its Python workers are warm now, so a
    query started within ``WARM_FOR_S`` needs no warm-up job (in a process that runs query after
    query, such as a test suite, it would only fork workers beside busy ones)."""
    setattr(sc, _WARMED_ATTR, time.monotonic())


def warm_up(batches: "Iterable[pa.RecordBatch]") -> "Iterator[pa.RecordBatch]":
    """The warm-up's ``mapInArrow`` function: it only imports what a state step needs (already
    imported when the daemon is ``runtime.python_daemon``)."""
    preload()

    for _ in batches:
        pass
    forget_zip_importers()
    yield from ()
