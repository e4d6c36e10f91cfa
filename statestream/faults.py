"""Crash points for the crash-recovery tests (test-only; inert unless an env var is set).

The recovery rules (spark-semantics §7.5) only matter if a query can die at any moment, so
``tests/crash`` kills a real query process with SIGKILL at named points of a micro-batch and
restarts it on the same checkpoint. The engine marks those points with :func:`crash_point`; this
module decides whether the current call is the one to die at.

Set ``STATESTREAM_TEST_CRASH_AT="<point>:<batch>"`` (optionally ``"<point>:<batch>:<partition>"``
for points inside a state task) in the environment of the process that starts Spark; Spark's
JVM and its Python workers inherit it. Points:

``before_offsets``
    The sources have admitted batch N's data (the file source logged its new files), but
    ``offsets/<N>`` is not written (driver).
``after_offsets``
    ``offsets/<N>`` is written, the batch has not started (driver).
``after_state_commit``
    A state task of batch N committed its store version N+1 (inside a Python worker); the
    batch's commit log entry is not written.
``sink_files_published``
    The file sink moved batch N's data files into the output directory but has not listed them
    in ``_spark_metadata`` (driver).
``after_sink``
    The sink finished batch N (for the file sink: ``_spark_metadata/<N>`` is written);
    ``commits/<N>`` is not (driver).
``after_commit``
    ``commits/<N>`` is written; the next batch is not planned (driver).
``repartition_after_offsets``
    An offline repartition wrote its batch N's offset entry and nothing else (driver).
``repartition_snapshot_written``
    An offline repartition wrote the snapshot of one new partition of batch N (inside a Python
    worker; with a partition, that partition's); other partitions, the operator metadata and
    ``commits/<N>`` are not written.

Dying means ``SIGKILL`` to the process group named by ``STATESTREAM_TEST_CRASH_PGID`` (the
test's child process starts its own session and sets it to its pid, so the driver and its JVM go
down together), or to the current process alone when that variable is unset. Spark's Python
workers live in a process group of their own (``pyspark.daemon`` calls ``setpgid``), so a kill
from a worker still takes down the driver and the JVM; the workers exit when the JVM's pipe closes.

Zero cost when unset: the variable is read once at import and :func:`crash_point` returns at its
first comparison. A leaf module (like ``errors``), so operators and sinks may import it; no pyspark.

The module also holds the one other test-only hook, :func:`record_state_task`: with
``STATESTREAM_TEST_TASK_LOG=<file>`` set, every state task appends one JSON line to ``<file>``
after its commit (and a stream-stream join's scan after it read a store), saying which process
(and which executor) served which store version and how its provider cache answered. ``tests/cluster`` uses it to show that state tasks ran in executor
processes and that a partition moving between executors reloads from files.

And :data:`ENV_WORKER_LOG`: with ``STATESTREAM_TEST_WORKER_LOG=<file>`` in a process's
environment (a Spark Python worker gets it from ``SparkContext.environment``), statestream's log
records at WARNING and above, and the Python warnings the default filters let through, are
appended to ``<file>``. Why: a worker's stderr reaches the console through the JVM, where no test
can read it; ``tests/spark/test_no_spurious_warnings.py`` checks that a healthy query's state
tasks warn about nothing.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["CRASH_POINTS", "crash_point", "parse_crash_spec", "record_state_task"]

logger = logging.getLogger(__name__)

ENV_CRASH_AT = "STATESTREAM_TEST_CRASH_AT"
ENV_CRASH_PGID = "STATESTREAM_TEST_CRASH_PGID"
ENV_TASK_LOG = "STATESTREAM_TEST_TASK_LOG"
ENV_WORKER_LOG = "STATESTREAM_TEST_WORKER_LOG"

CRASH_POINTS = (
    "before_offsets",
    "after_offsets",
    "after_state_commit",
    "sink_files_published",
    "after_sink",
    "after_commit",
    "repartition_after_offsets",
    "repartition_snapshot_written",
)


def parse_crash_spec(text: str | None) -> tuple[str, int, int | None] | None:
    """``"<point>:<batch>[:<partition>]"`` -> ``(point, batch, partition or None)``; ``None`` for
    an empty value. An unknown point or a malformed value raises ``ValueError`` (a typo must not
    silently turn a crash test into a plain run)."""
    if not text:
        return None
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or parts[0] not in CRASH_POINTS:
        msg = f"{ENV_CRASH_AT} must be '<point>:<batch>[:<partition>]' with point in {CRASH_POINTS}, got {text!r}"
        raise ValueError(msg)
    try:
        batch = int(parts[1])
        partition = int(parts[2]) if len(parts) == 3 else None
    except ValueError as exc:
        msg = f"{ENV_CRASH_AT}: batch and partition must be integers, got {text!r}"
        raise ValueError(msg) from exc
    return parts[0], batch, partition


_SPEC = parse_crash_spec(os.environ.get(ENV_CRASH_AT))


def crash_point(point: str, batch_id: int, partition: int | None = None) -> None:
    """Die here (SIGKILL) if the test asked for this point of this batch; otherwise do nothing."""
    if _SPEC is None:
        return
    want_point, want_batch, want_partition = _SPEC
    if point != want_point or batch_id != want_batch:
        return
    if want_partition is not None and partition != want_partition:
        return
    _die(f"{point}:{batch_id}" + ("" if partition is None else f":{partition}"))


def _die(where: str) -> None:
    pgid = os.environ.get(ENV_CRASH_PGID)
    logger.warning("statestream test crash point %s reached: SIGKILL (pgid %s, pid %d)", where, pgid, os.getpid())
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - we are about to die anyway
            pass
    if pgid:
        os.killpg(int(pgid), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


_TASK_LOG = os.environ.get(ENV_TASK_LOG) or None


def _executor_id() -> str | None:
    """The executor this Python worker serves, as far as its environment tells (Spark's
    standalone workers, local-cluster included, pass the executor's log URLs, which name it);
    ``None`` elsewhere (local mode runs tasks in the driver's JVM)."""
    url = os.environ.get("SPARK_LOG_URL_STDERR", "")
    _, found, rest = url.partition("executorId=")
    return rest.split("&", 1)[0] if found else None


def record_state_task(
    checkpoint_root: str,
    operator_id: int,
    partition: int,
    version: int,
    run_id: str,
    cache_hits: int,
    cache_misses: int,
    store: str = "default",
    read: bool = False,
    mapped: int = 0,
) -> None:
    """Append one JSON line about a committed state task to ``STATESTREAM_TEST_TASK_LOG``;
    nothing when the variable is unset. ``version`` is the version the task opened (it
    committed ``version + 1``); the cache counts are its provider's, after the load. ``store``
    names the store of the partition (a stream-stream join has four); ``read`` marks a task
    that only read ``version`` (the join's scan of stored rows), which loads it as well;
    ``mapped`` counts the provider's cached versions served from local disk."""
    if _TASK_LOG is None:
        return
    import json
    import sys

    mod = sys.modules.get("statestream")
    record = {
        "root": checkpoint_root,
        "op": operator_id,
        "partition": partition,
        "store": store,
        "read": read,
        "version": version,
        "runId": run_id,
        "pid": os.getpid(),
        "executor": _executor_id(),
        "hits": cache_hits,
        "misses": cache_misses,
        "mapped": mapped,
        "module": getattr(mod, "__file__", None),
    }
    # One short line per O_APPEND write: lines from concurrent processes do not interleave.
    fd = os.open(_TASK_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def _capture_warnings_to_file(path: str | None) -> None:
    """Append statestream's WARNING-and-above records and the Python warnings shown by the
    default filters to ``path`` (see :data:`ENV_WORKER_LOG`); nothing when ``path`` is unset."""
    if not path:
        return
    handler = logging.FileHandler(path, mode="a", encoding="utf-8", delay=True)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(process)d %(name)s %(levelname)s: %(message)s"))
    logging.getLogger("statestream").addHandler(handler)
    logging.getLogger("py.warnings").addHandler(handler)
    logging.captureWarnings(True)


_capture_warnings_to_file(os.environ.get(ENV_WORKER_LOG))
