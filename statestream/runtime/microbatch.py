"""MicroBatchExecution: the micro-batch loop.

Spark: ``MicroBatchExecution`` / ``StreamExecution``. Each trigger:

1. *construct the next batch*: ask every source for its latest offset; a batch runs if some
   source has new data, or (no-data batches enabled) if a stateful operator of the previous
   batch says the moved watermark gives it work (``should_run_another_batch``). The batch's
   offsets, watermark and timestamp go to ``offsets/<N>`` *before* it runs.
2. *run the batch*: sources give their rows for ``(start, end]`` as batch DataFrames (empty for
   sources without new data); the planned query, with this batch's state info and watermarks, is
   executed by Spark; the result is materialised once, then handed to the sink.
3. *finish*: the watermark advances from the event-time statistics of this batch; ``commits/<N>``
   records it; progress is reported.

Restart (``populate_start_offsets``): with ``L`` the newest offsets entry and ``C`` the newest
commit, ``C == L`` continues at ``L+1``; otherwise batch ``L`` is run again with exactly the
offsets, watermark and timestamp recorded for it, and its state version is rewritten.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.metadata import StreamMetadata
from statestream.checkpoint.offsets import (
    PINNED_CONF_KEYS,
    PINNED_CONF_SESSION_DEFAULTS,
    SHUFFLE_PARTITIONS,
    STATE_STORE_PROVIDER_CLASS,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    plan_recovery_from_logs,
    restore_pinned_confs,
)
from statestream.checkpoint.progress_log import DEFAULT_RETAIN, ProgressLog
from statestream.checkpoint.query_record import record_query
from statestream.checkpoint.rollback_marker import check_no_interrupted_rollback
from statestream.checkpoint.writer_lock import DEFAULT_LEASE_MS, CheckpointWriterLock
from statestream.errors import (
    ALLOW_MULTIPLE_CONF,
    CheckpointLockedError,
    StatestreamAnalysisException,
    StatestreamStreamingQueryException,
    checkpoint_in_use_error,
    concurrent_stream_log_update_error,
    redefined_watermark_error,
    source_count_changed_error,
    stream_failed_error,
)
from statestream.faults import crash_point
from statestream._jvm.calls import clone_session, java_session
from statestream.operators.aggregate import StreamingAggregateExec
from statestream.operators.basic import OBSERVED_METRICS, StreamingRelationExec
from statestream.operators.context import SKIP_NONE, BatchContext, ListAccumulatorParam
from statestream.operators.late_rows import LATE_ROWS_CONF
from statestream.operators.lateness import LATENESS_CONF, reference_max_ms
from statestream.operators.limit import LocalLimitExec, input_rows_by_source
from statestream.operators.local_checkpoint import (
    LOST_BLOCK_ERROR_CLASS,
    batch_local_checkpoints,
    local_checkpoint,
    lost_block_rdd_ids,
    lost_local_checkpoint_block,
    release_local_checkpoint,
)
from statestream.operators.state_step import split_routed_rows
from statestream.operators.watermark import (
    EventTimeWatermarkExec,
    lateness_records,
    observed_values,
    sources_counted_by_watermark,
    stats_from_observation,
)
from statestream.plan import logical as L
from statestream.plan.analysis import redefines_watermark
from statestream.plan.current_time import with_batch_timestamp
from statestream.plan.explain import as_spark_explains
from statestream.plan.incremental import IncrementalExecution, _state_identity, input_watermarks, state_writers
from statestream.plan.joins import check_joins_supported
from statestream.plan.planner import aggregation_info, plan_streaming_query
from statestream.runtime.arrow_exchange import arrow_exchange_confs
from statestream.runtime.failure_summary import failure_summary
from statestream.runtime.batch_plan_reuse import (
    PLAN_REUSE_CONF,
    PlanReuse,
    clear_batch_args,
    observed_by_name,
    pinned_threads,
    reusable_plan,
    set_batch_args,
)
from statestream.runtime.intervals import parse_time_conf_ms
from statestream.runtime.partial_aggregation import skip_partial_aggregation, skip_partial_setting
from statestream.runtime.progress import format_timestamp_ms
from statestream.runtime.progress_tracker import ProgressTracker
from statestream.runtime.replay import REPLAY_CONF, RecordedBatches
from statestream.runtime.small_batches import (
    measures_shuffled_rows,
    routes_at_materialisation,
    rows_emitted,
    shuffled_rows,
    single_state_task,
    single_state_task_max_rows,
)
from statestream.runtime.state_checks import check_restart_compatible, check_state_on_first_batch, schema_check_enabled
from statestream.runtime.state_repartition import (
    OfflineStateRepartitionRunner,
    is_repartition_batch,
    partitions_of_batch,
)
from statestream.runtime.trigger_executor import time_to_next_trigger
from statestream.runtime.watermark import WatermarkTracker, parse_policy
from statestream.runtime.worker_warmup import (
    note_python_workers_used,
    start_worker_warm_up,
    use_preloading_daemon,
    use_unix_domain_sockets,
)
from statestream.sources.base import ReadLimit, empty_batch
from statestream.state.layered import LAYERED_PROVIDER_CLASSES
from statestream.state.local_disk import ON_LOCAL_DISK_CONF, ON_LOCAL_DISK_DEFAULT
from statestream.state.store import StateStoreConf, on_local_disk_from_conf, versions_in_memory_from_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql import SparkSession
    from pyspark.sql.conf import RuntimeConfig

    from statestream.operators.base import PhysicalOperator
    from statestream.runtime.interfaces import StreamingSessionLike
    from statestream.sinks.base import Sink
    from statestream.sources.base import Source

logger = logging.getLogger(__name__)

#: how long the writer lease of a checkpoint on an object store may stand still before its
#: holder counts as dead (``checkpoint.writer_lock``)
WRITER_LEASE_CONF = "spark.statestream.checkpoint.writerLeaseTimeout"

__all__ = ["MicroBatchExecution", "Trigger", "plan_for_explain"]

#: keep each batch's progress in ``<checkpoint>/progress`` (default true), and for how many batches
PROGRESS_HISTORY_CONF = "spark.statestream.progress.history"
PROGRESS_RETAIN_CONF = "spark.statestream.progress.retainBatches"
#: idle inputs: a watermark input without rows for this long no longer holds the watermark back
#: opt-in: a restart repartitions the state into the session's ``spark.sql.shuffle.partitions``
#: when it differs from the checkpoint's pinned count (statestream's; Spark has no such conf)
REPARTITION_ON_RESTART_CONF = "spark.statestream.stateRepartition.onRestart"
IDLE_TIMEOUT_CONF = "spark.statestream.watermark.idleTimeout"
#: serve the dashboard of a running query on this loopback port (0: any free port)
UI_PORT_CONF = "spark.statestream.ui.port"
#: Spark's conf: how long ``stop()`` waits for the query thread, in ms (0: no limit)
STOP_TIMEOUT_CONF = "spark.sql.streaming.stopTimeout"


def stop_timeout_message(name: str | None, query_id: str, run_id: str, timeout_ms: int) -> str:
    """Spark's text when the query thread outlives ``spark.sql.streaming.stopTimeout``."""
    pretty = f"{name + ' ' if name else ''}[id = {query_id}, runId = {run_id}]"
    return (
        f"Stream Execution thread for stream {pretty} failed to stop within {timeout_ms} milliseconds "
        f"(specified by {STOP_TIMEOUT_CONF}). See the cause on what was being executed in the streaming query thread."
    )


@dataclass(frozen=True)
class Trigger:
    """``processingTime`` (ms, 0 = as fast as possible), ``once`` or ``availableNow``."""

    kind: str = "processingTime"
    interval_ms: int = 0


#: The clock the batch timestamps (``batchTimestampMs``: processing time, processing-time
#: timeouts, ``current_timestamp()``) are read from; tests replace it with ``set_batch_clock``.
_batch_clock: Any = None


def set_batch_clock(clock: Any) -> Any:
    """Make new batches read their timestamp (ms) from ``clock()`` (``None``: the wall clock);
    returns the previous clock. Process-wide; meant for tests."""
    global _batch_clock
    previous, _batch_clock = _batch_clock, clock
    return previous


def _now_ms() -> int:
    if _batch_clock is not None:
        return int(_batch_clock())
    return int(time.time() * 1000)


_LONG_MIN = -(2**63)


def _conf(conf: RuntimeConfig, key: str, default: str | None = None) -> str:
    """The session's value of ``key`` (``default`` when unset; without one, Spark's default):
    ``conf.get`` as the string it returns, which PySpark types as optional even with a default."""
    value = conf.get(key) if default is None else conf.get(key, default)
    if value is None:  # not reached: Spark answers a string, or raises for an unknown key
        raise KeyError(key)
    return value


def plan_for_explain(logical: L.LogicalPlan, spark: "SparkSession", output_mode: str) -> "PhysicalOperator":
    """The physical plan a streaming DataFrame's logical plan would run with, before any batch
    (Spark's explain of a streaming DataFrame shows state info with an unknown checkpoint);
    ``spark`` is the DataFrame's session."""
    n = int(_conf(spark.conf, SHUFFLE_PARTITIONS))
    relations = logical.find(L.StreamingRelation)
    indexes = {id(r): i for i, r in enumerate(relations)}

    plan = plan_streaming_query(logical, n, indexes, output_mode=output_mode, for_explain=True)
    # Before a query starts Spark shows both watermarks as Long.MinValue.
    inc = IncrementalExecution("<unknown>", str(uuid.uuid4()), 0, n, output_mode, _LONG_MIN, _LONG_MIN)
    return as_spark_explains(inc.apply(plan))


@dataclass
class _BatchRecord:
    batch_id: int
    start: list[Any]
    end: list[Any]
    watermark_ms: int
    timestamp_ms: int


@dataclass
class _StreamCursor:
    """Where the query thread is between batches: the next batch's id and start offsets, the
    watermark the last batch ran with (its late-row threshold), the watermark recovered at the
    start, and a logged batch still to run (``pending``: the one a restart runs again)."""

    batch_id: int
    start: list[Any]
    prev_wm: int
    watermark_ms: int
    pending: _BatchRecord | None = None

    def advance_past(self, record: _BatchRecord) -> None:
        """After ``record`` committed: the next batch starts at its end."""
        self.prev_wm = record.watermark_ms
        self.start = list(record.end)
        self.batch_id = record.batch_id + 1


@dataclass
class MicroBatchExecution:
    """Runs one streaming query in a background thread (see the module docstring)."""

    #: the StreamingSession that started the query (its SparkSession, and its query manager,
    #: told when the run ends)
    session: "StreamingSessionLike"
    #: the query's logical plan (the streaming DataFrame's)
    plan: L.LogicalPlan
    sink: "Sink"
    output_mode: str
    trigger: Trigger
    checkpoint_location: str
    query_name: str | None
    query_id: str = ""
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sink_factory: Any = None
    #: the checkpoint is a temporary directory made by start(): removed when the query stops
    #: without an error (Spark: deleteCheckpointOnStop), kept for inspection after a failure
    delete_checkpoint_on_stop: bool = False

    def __post_init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        #: set when the run ended (waited on instead of Thread.join: a join interrupted by
        #: Ctrl-C can report a running thread as finished)
        self._done = threading.Event()
        self._lock = threading.Condition()
        self._exception: BaseException | None = None
        self._active = False
        #: triggers started so far, and the last one that found nothing new to run
        #: (``process_all_available`` waits for one started after its call)
        self._trigger_generation = 0
        self._idle_generation = 0
        self._processed_marker = 0
        self._status = {"message": "Initializing sources", "isDataAvailable": False, "isTriggerActive": False}

        conf = self.session.sparkSession.conf
        self.progress = ProgressTracker(
            self,
            keep=int(_conf(conf, "spark.sql.streaming.numRecentProgressUpdates", "100")),
            no_data_interval_ms=parse_time_conf_ms(_conf(conf, "spark.sql.streaming.noDataProgressEventInterval", "10000ms")),
        )
        #: how long stop() waits for the query thread (0: no limit)
        self._stop_timeout_ms = max(0, parse_time_conf_ms(_conf(conf, STOP_TIMEOUT_CONF, "0")))
        #: measure each watermark input's lateness (read here, in the thread that starts the query)
        self._lateness_on = _conf(conf, LATENESS_CONF, "false").strip().lower() == "true"
        #: a what-if replay: the recorded batches this query runs again (``runtime.replay``)
        replay_from = conf.get(REPLAY_CONF, None)
        self._replay = RecordedBatches.load(replay_from) if replay_from else None
        self._last_plan: "PhysicalOperator" | None = None
        #: the batch plans this run reuses (``runtime.batch_plan_reuse``), None when it builds
        #: every batch
        self._plan_reuse: Any = None
        #: the last batch's per-batch planning (state info, watermarks), for ``explain()``
        self._last_execution: IncrementalExecution | None = None
        self._source_indexes: dict[int, int] = {}
        self._physical: "PhysicalOperator" | None = None
        #: whether the plan has state writers, i.e. every batch runs Python state tasks
        self._runs_state_tasks = False
        self.fm = CheckpointFileManager(self.checkpoint_location)
        self.writer_lock = CheckpointWriterLock(
            self.fm, lease_ms=parse_time_conf_ms(_conf(conf, WRITER_LEASE_CONF, f"{DEFAULT_LEASE_MS}ms"))
        )
        #: the dashboard served while this run lasts (given by the writer; has ``stop()``)
        self.dashboard: Any = None
        #: the late-row ledger (``operators.late_rows``), None when off
        ledger = conf.get(LATE_ROWS_CONF, None)
        self.late_rows_path: str | None = None if not ledger else (ledger if "://" in ledger else os.path.abspath(ledger))
        #: each batch's progress, kept in the checkpoint (``checkpoint.progress_log``)
        self.progress_log: ProgressLog | None = None
        if _conf(conf, PROGRESS_HISTORY_CONF, "true").lower() == "true":
            self.progress_log = ProgressLog(self.fm.child("progress"), int(_conf(conf, PROGRESS_RETAIN_CONF, str(DEFAULT_RETAIN))))

    # ------------------------------------------------------------------ lifecycle
    @property
    def listeners(self) -> Any:
        """The StreamingQueryListener bus of the manager that started the query."""
        return self.session.streams._listeners  # noqa: SLF001

    def explained_plan(self) -> "PhysicalOperator | None":
        """The last batch's plan as ``StreamingQuery.explain()`` shows it: planned for explain
        (Spark's text, attribute ids) with that batch's state info and watermarks; before the
        first batch, the plan as a DataFrame's explain shows it."""
        inc = self._last_execution
        if inc is None:
            return self._physical
        shown = plan_streaming_query(
            self.plan, self.num_partitions, self._source_indexes, self.store_conf, output_mode=self.output_mode, for_explain=True
        )
        return inc.apply(shown)

    def prepare(self) -> None:
        """What ``start()`` does before the query manager's checks: joins and aggregates are checked
        (a join or an aggregate statestream cannot run fails here, not later in the query's thread), and
        the checkpoint's metadata is read or written, which gives the query its id (the
        manager refuses a second active run of the same id, as Spark does). Nothing runs yet."""
        check_joins_supported(self.plan)
        # statestream's own confs of a run, refused from start() when they make no sense (the
        # run reads them again as it starts)
        user_conf = self.session.sparkSession.conf.get
        single_state_task_max_rows(user_conf)
        skip_partial_setting(user_conf)
        for node in self.plan.find(L.Aggregate):
            try:
                aggregation_info(node)
            except StatestreamAnalysisException:
                pass  # what Spark's planner refuses, it refuses while planning the first batch

        self.fm.check_root_is_directory()

        check_no_interrupted_rollback(self.fm)  # from start(), with what to run to finish it
        meta = StreamMetadata.read(self.fm)
        if meta is None:
            meta = StreamMetadata(id=self.query_id or str(uuid.uuid4()))
            meta.write(self.fm)
        self.query_id = meta.id

    def lock_checkpoint(self) -> None:
        """Take the checkpoint's writer lock (see ``checkpoint.writer_lock``), once the manager
        has stopped an earlier run of this query in this process: a run in another process that
        holds it is refused here, before anything of this run writes."""
        try:
            self.writer_lock.acquire(self.query_id, self.run_id)
        except CheckpointLockedError as exc:
            raise checkpoint_in_use_error(self.query_id, str(exc)) from None

        file_sink = getattr(self.sink, "path", None) if type(self.sink).__name__ == "FileStreamSink" else None
        record_query(
            self.fm, self.output_mode, [(n.column, n.delay_text) for n in self.plan.find(L.EventTimeWatermark)],
            self.late_rows_path, file_sink,
        )

    def start(self) -> None:
        """Start the run, once ``prepare()`` is done and the manager accepted the query: the sink
        is told (a memory sink registers its view only now, so a refused query leaves the view
        of the query it clashed with alone), listeners hear ``onQueryStarted`` before this
        returns (as Spark documents), then the query thread starts."""
        # active from here, as Spark's query is from its initialisation: a listener's
        # onQueryStarted (which runs before start() returns) finds it active
        self._active = True
        try:
            self.sink.on_query_start(self.checkpoint_location, self.plan)
            self.listeners.post_started(self.query_id, self.run_id, self.query_name, format_timestamp_ms(int(time.time() * 1000)))
        except BaseException:
            self._active = False
            raise
        self._thread = threading.Thread(target=self._run, name=f"statestream-{self.query_name or self.query_id}", daemon=True)
        self._thread.start()

    def discard(self) -> None:
        """A query the manager refused: nothing ran; a temporary checkpoint made for it goes."""
        self.writer_lock.release()
        if self.delete_checkpoint_on_stop:
            import shutil

            shutil.rmtree(self.checkpoint_location, ignore_errors=True)

    @property
    def job_tag(self) -> str:
        return f"statestream-{self.run_id}"

    def stop(self) -> None:
        """Spark's ``stop()``: the batch in flight has its Spark jobs cancelled (it runs again
        from the checkpoint at the next start), then the query thread is waited for, at most
        ``spark.sql.streaming.stopTimeout`` (0, the default: as long as it takes), and its jobs
        are cancelled once more (the thread may have started one meanwhile). A thread still
        running after the timeout (user code in ``foreachBatch`` that no cancellation reaches)
        raises ``TimeoutError`` with Spark's message; the query still stops when that code
        returns. A stop from the query's own thread (a ``foreachBatch`` function) only asks.
        Either way the query is no longer active from here on (Spark's state is TERMINATED as
        the stop begins), while ``spark.streams.active`` lists it until its thread ends."""
        self._stop.set()
        self._active = False  # also when called from a listener's onQueryStarted, before the thread
        with self._lock:
            self._lock.notify_all()
        if self._thread is None or self._thread is threading.current_thread() or self._done.is_set():
            return
        self._cancel_jobs()
        if not self._done.wait(self._stop_timeout_ms / 1000.0 if self._stop_timeout_ms > 0 else None):
            raise TimeoutError(stop_timeout_message(self.query_name, self.query_id, self.run_id, self._stop_timeout_ms))
        self._cancel_jobs()

    def _cancel_jobs(self) -> None:
        try:
            self.session.sparkSession.sparkContext.cancelJobsWithTag(self.job_tag)
        except Exception:  # the context may be going down already
            logger.debug("cannot cancel the jobs of %s", self.job_tag, exc_info=True)

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def exception(self) -> BaseException | None:
        return self._exception

    @property
    def status(self) -> dict:
        return dict(self._status)

    def await_termination(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        # short waits: a Ctrl-C (KeyboardInterrupt) reaches the waiting thread at once
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.is_set():
            left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if left <= 0:
                break
            self._done.wait(left)
        if self._exception is not None:
            raise self._exception
        return self._done.is_set()

    def process_all_available(self) -> None:
        """Block until every piece of data available now has been processed (Spark's
        ``processAllAvailable``): wait for a trigger, started after this call, that found
        nothing to run."""
        with self._lock:
            # a trigger that *started* after this call: one that listed the sources before it
            # may report "nothing new" although data arrived since (a file written just now)
            wanted = self._trigger_generation + 1
            while self._idle_generation < wanted and self._active and self._exception is None:
                self._lock.wait(0.05)
        if self._exception is not None:
            raise self._exception

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            self._run_stream()
        except BaseException as exc:  # noqa: BLE001 - the query terminates with it
            if not self._stop.is_set() and _cancelled_by_interrupt(exc):
                # Ctrl-C: PySpark's SIGINT handler cancels every job of the context before the
                # KeyboardInterrupt reaches the thread waiting on the queries, which then stops
                # them; this batch's job may fail first, so wait for that stop to arrive
                self._stop.wait(SIGINT_STOP_GRACE_S)
            if self._stop.is_set() and _is_cancellation(exc):
                # stop() (or Ctrl-C) interrupted a batch: the query stopped, it did not fail
                logger.info("query %s stopped during a batch (%s)", self.query_id, type(exc).__name__)
            else:
                # one line, the user's code first; the whole traceback is the exception's, which
                # the query raises (awaitTermination, exception()), and the log's at DEBUG
                logger.error("query %s failed: %s", self.query_id, failure_summary(exc))
                logger.debug("query %s failed: %s", self.query_id, "".join(traceback.format_exception(exc)))
                self._exception = self._wrap(exc)
        finally:
            self._active = False
            self._status = {"message": "Stopped", "isDataAvailable": False, "isTriggerActive": False}
            for s in getattr(self, "sources", []):
                try:
                    s.stop()
                except Exception:
                    logger.warning("failed to stop source %s", s, exc_info=True)
            self.writer_lock.release()
            if self.dashboard is not None:
                self.dashboard.stop()
            self._delete_temporary_checkpoint()
            try:
                self.listeners.post_terminated(self.query_id, self.run_id, self._exception)
                with self._lock:
                    self._lock.notify_all()
                self.session.streams._notify_terminated(self)  # noqa: SLF001
            finally:
                self._done.set()

    def _delete_temporary_checkpoint(self) -> None:
        if not self.delete_checkpoint_on_stop:
            return
        force = str(self.session.sparkSession.conf.get("spark.sql.streaming.forceDeleteTempCheckpointLocation", "false"))
        if self._exception is not None and force.lower() != "true":
            logger.info("query failed: keeping its temporary checkpoint %s", self.checkpoint_location)
            return
        import shutil

        shutil.rmtree(self.checkpoint_location, ignore_errors=True)

    def _wrap(self, exc: BaseException) -> BaseException:
        if isinstance(exc, StatestreamStreamingQueryException):
            return exc
        return stream_failed_error(self.query_id, self.run_id, exc)

    def _check_sources_unchanged(self, recovery: Any) -> None:
        """A restart must read as many sources as the checkpoint's offsets record; checked
        before anything changes the checkpoint (a repartition on restart)."""
        recorded = recovery.end_offsets if recovery.action == "rerun" else recovery.start_offsets
        if recorded is not None and len(recorded.offsets) != len(self.sources):
            raise source_count_changed_error(len(recorded.offsets), len(self.sources))

    def _finish_interrupted_repartition(self, recovery: Any) -> Any:
        """A last batch that is an uncommitted repartition batch (an offline repartition that
        was interrupted) is finished here, before anything runs: its state is rewritten from
        the untouched old partitions, and the query resumes after it with the new count."""
        if recovery.action != "rerun" or not is_repartition_batch(self.offset_log, recovery.batch_id):
            return recovery
        count = partitions_of_batch(self.offset_log.get(recovery.batch_id))
        assert count is not None
        logger.warning(
            "the last batch %d of %s is an interrupted repartition to %d partitions: finishing it before the query starts",
            recovery.batch_id, self.fm.display(), count,
        )
        OfflineStateRepartitionRunner(self.session.sparkSession, self.fm.uri()).run(count, enforce_exactly_once_sink=False, lock=False)
        return plan_recovery_from_logs(self.offset_log, self.commit_log)

    def _repartition_on_restart(self, recovery: Any) -> Any:
        """Opt-in (:data:`REPARTITION_ON_RESTART_CONF`): a restart whose session sets another
        ``spark.sql.shuffle.partitions`` than the checkpoint pinned first rewrites the state
        into that count (the offline repartition), then runs with it. Without it, as on Spark,
        the pinned count wins and the session's is ignored."""
        user = self.session.sparkSession
        if str(user.conf.get(REPARTITION_ON_RESTART_CONF, "false")).strip().lower() != "true" or recovery.action == "fresh":
            return recovery
        wanted = int(_conf(user.conf, SHUFFLE_PARTITIONS))
        last = recovery.batch_id if recovery.action == "rerun" else recovery.batch_id - 1
        pinned = partitions_of_batch(self.offset_log.get(last))
        if pinned is None or pinned == wanted:
            return recovery
        if recovery.action == "rerun":
            logger.warning(
                "%s=true asks for %d state partitions, but the last batch %d of %s is not committed: it runs again with "
                "its pinned %d partitions; the state is repartitioned at a restart after a committed batch",
                REPARTITION_ON_RESTART_CONF, wanted, last, self.fm.display(), pinned,
            )
            return recovery

        # a restart the first batch would refuse (another operator, an incompatible state
        # schema) is refused now, before the repartition rewrites the state and the logs
        relations = self.plan.find(L.StreamingRelation)
        physical = plan_streaming_query(
            self.plan, pinned, {id(r): i for i, r in enumerate(relations)}, StateStoreConf(), output_mode=self.output_mode
        )
        check_restart_compatible(self.fm.child("state").root, physical, schema_check_enabled(user.conf.get))
        logger.warning("repartitioning the state of %s from %d to %d partitions before the query starts (%s=true)",
                       self.fm.display(), pinned, wanted, REPARTITION_ON_RESTART_CONF)
        OfflineStateRepartitionRunner(user, self.fm.uri()).run(wanted, lock=False)
        return plan_recovery_from_logs(self.offset_log, self.commit_log)

    def _setup_session(self, num_partitions: int, conf: dict[str, str]) -> "SparkSession":
        """A clone of the user's session for this query's batches: AQE off (it could change the
        number of partitions of the stateful exchange), the pinned number of shuffle
        partitions, and no byte limit on the Arrow batches sent to the state steps unless the
        user set one (``runtime.arrow_exchange``)."""
        user = self.session.sparkSession
        try:
            spark = clone_session(user)
        except Exception:  # noqa: BLE001 - fall back to a new session with the same runtime confs
            spark = user.newSession()
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.cbo.joinReorder.enabled", "false")
        spark.conf.set(SHUFFLE_PARTITIONS, str(num_partitions))
        user_conf = java_session(user).conf()
        for k, v in arrow_exchange_confs(lambda key: bool(user_conf.contains(key))).items():
            spark.conf.set(k, v)
        for k, v in conf.items():
            if k != SHUFFLE_PARTITIONS and v is not None:
                try:
                    spark.conf.set(k, v)
                except Exception:  # noqa: BLE001 - a pinned conf this Spark does not know
                    logger.debug("cannot set pinned conf %s", k)
        return spark

    def _run_stream(self) -> None:
        """The query thread's life, in Spark's phases: open the sources, find where the last run
        stopped (``populateStartOffsets``), plan the query, then per trigger construct the next
        batch (``constructNextBatch``), run it (``runBatch``) and commit it."""
        user = self.session.sparkSession
        self._open_sources(user)
        cursor, conf = self._populate_start_offsets(user)
        self._prepare_execution(user, conf, cursor.watermark_ms)
        no_data_enabled = _conf(user.conf, "spark.sql.streaming.noDataMicroBatches.enabled", "true").lower() == "true"
        first_batch_of_run = True
        self._status = {"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False}
        while not self._stop.is_set():
            trigger_start = time.monotonic()
            with self._lock:
                self._trigger_generation += 1
                generation = self._trigger_generation
            self.progress.start_trigger()
            self._status = {"message": "Processing new data", "isDataAvailable": False, "isTriggerActive": True}
            record, cursor.pending = cursor.pending, None
            if record is None:
                record = self._construct_next_batch(cursor, conf, no_data_enabled)
            if record is None:
                self._status = {"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False}
                self.progress.idle(cursor.batch_id, list(cursor.start))
                self._tell_waiters_idle(generation)
                if self.trigger.kind in ("once", "availableNow"):
                    break
                self._sleep_until_next(trigger_start, ran_batch=False)
                continue
            self._status = {"message": "Processing new data", "isDataAvailable": True, "isTriggerActive": True}
            crash_point("after_offsets", record.batch_id)
            self._run_batch_surviving_lost_blocks(record, cursor.prev_wm, first_batch_of_run)
            first_batch_of_run = False
            self._commit_batch(record, generation)
            cursor.advance_past(record)
            if self.trigger.kind == "once":
                break
            self._sleep_until_next(trigger_start, ran_batch=True)
        self._status = {"message": "Stopped", "isDataAvailable": False, "isTriggerActive": False}

    def _open_sources(self, user: "SparkSession") -> None:
        """The checkpoint's logs and one source per streaming relation of the plan."""
        self.offset_log = OffsetSeqLog(self.fm.child("offsets"))
        self.commit_log = CommitLog(self.fm.child("commits"))
        relations = self.plan.find(L.StreamingRelation)
        self.relations = relations
        self.sources: list[Source] = [
            r.source_spec.create(user, self.fm.uri(f"sources/{i}")) for i, r in enumerate(relations)
        ]
        self._source_indexes = {id(r): i for i, r in enumerate(relations)}
        if self.trigger.kind == "availableNow":
            for s in self.sources:
                s.prepare_for_trigger_available_now()

    def _populate_start_offsets(self, user: "SparkSession") -> "tuple[_StreamCursor, dict[str, str]]":
        """Spark's ``populateStartOffsets``: where the logs say the last run stopped (a fresh
        start, a batch to run again, or the batch after the last committed one), and the
        confs the query keeps from its first run; each source learns the last end offset logged."""
        candidates: dict[str, str | None] = {}
        for k in _pinned_keys():
            v = user.conf.get(k, None)
            candidates[k] = v if v is not None else PINNED_CONF_SESSION_DEFAULTS.get(k)
        session_conf = {k: v for k, v in candidates.items() if v is not None}
        recovery = plan_recovery_from_logs(self.offset_log, self.commit_log)
        self._check_sources_unchanged(recovery)
        recovery = self._finish_interrupted_repartition(recovery)
        recovery = self._repartition_on_restart(recovery)
        if recovery.action == "fresh":
            conf = dict(session_conf)
        else:
            conf, _warnings = restore_pinned_confs(recovery.conf, session_conf)
        start: list[Any] = list(recovery.start_offsets.offsets) if recovery.start_offsets else [None] * len(self.sources)
        # the previous batch's recorded watermark filters late rows of the next batch (W_late)
        prev_wm = recovery.start_offsets.metadata.batch_watermark_ms if recovery.start_offsets and recovery.start_offsets.metadata else 0
        cursor = _StreamCursor(recovery.batch_id, start, prev_wm, recovery.watermark_ms)
        if recovery.action == "rerun":
            entry = recovery.end_offsets
            assert entry is not None and entry.metadata is not None
            cursor.pending = _BatchRecord(
                cursor.batch_id, start, list(entry.offsets), entry.metadata.batch_watermark_ms, entry.metadata.batch_timestamp_ms
            )
        # Spark's setLatestSeenOffset: the last logged end offset of each source, before any batch
        latest_seen = cursor.pending.end if cursor.pending is not None else start
        for source, seen in zip(self.sources, latest_seen):
            if seen is not None:
                source.set_latest_seen_offset(seen)
        return cursor, conf

    def _prepare_execution(self, user: "SparkSession", conf: dict[str, str], watermark_ms: int) -> None:
        """The query's session (with its pinned confs), watermark tracker, store settings and
        physical plan, and the Python workers' start-up optimisations."""
        self.conf = conf
        self.num_partitions = int(conf[SHUFFLE_PARTITIONS])
        self.spark = self._setup_session(self.num_partitions, conf)
        self.spark.sparkContext.addJobTag(self.job_tag)  # every job of this thread: interrupt() cancels them
        idle = user.conf.get(IDLE_TIMEOUT_CONF, None)
        self.tracker = WatermarkTracker(
            parse_policy(conf.get("spark.sql.streaming.multipleWatermarkPolicy") or "min"),
            idle_timeout_ms=parse_time_conf_ms(idle) if idle else None,
        )
        self.tracker.set_watermark(watermark_ms)
        self.accumulator = user.sparkContext.accumulator([], ListAccumulatorParam())
        self.store_conf = StateStoreConf(
            min_deltas_for_snapshot=int(_conf(user.conf, "spark.sql.streaming.stateStore.minDeltasForSnapshot", "10")),
            min_batches_to_retain=int(_conf(user.conf, "spark.sql.streaming.minBatchesToRetain", "100")),
            max_versions_in_memory=versions_in_memory_from_conf(
                user.conf.get("spark.sql.streaming.maxBatchesToRetainInMemory", "2")
            ),
            on_local_disk=on_local_disk_from_conf(user.conf.get(ON_LOCAL_DISK_CONF, str(ON_LOCAL_DISK_DEFAULT))),
            # the provider the checkpoint records: a query that asked for RocksDB gets the
            # layered store, statestream's store for a state far larger than a batch
            layered=conf.get(STATE_STORE_PROVIDER_CLASS, "") in LAYERED_PROVIDER_CLASSES,
        )
        self._physical = plan_streaming_query(
            self.plan, self.num_partitions, self._source_indexes, self.store_conf, output_mode=self.output_mode
        )
        writers = state_writers(self._physical)
        self._runs_state_tasks = bool(writers)
        self._single_task_max_rows = single_state_task_max_rows(user.conf.get)
        self._skip_partial = skip_partial_setting(user.conf.get)
        self._measures_shuffled_rows = measures_shuffled_rows(self._physical)
        self._route_at_materialisation = routes_at_materialisation(self._physical, self.num_partitions)
        #: source index -> its empty relation (``_with_empty_relations``), None when it has none
        self._empty_relations: dict[int, Any] = {}
        #: source index -> the DataFrame of a batch in which it has nothing new
        self._empty_batches: dict[int, Any] = {}
        self._partial_skippable = {
            n.info.partial_skippable for n in self._physical.walk() if isinstance(n, StreamingAggregateExec) and n.info is not None
        }
        reuse_on = str(user.conf.get(PLAN_REUSE_CONF, "true")).strip().lower() == "true"
        self._plan_reuse = PlanReuse() if reuse_on and pinned_threads(user.sparkContext) and reusable_plan(self._physical) else None
        self._speed_up_python_workers(user)
        self.has_watermark = bool(self.plan.find(L.EventTimeWatermark))
        # the lateness measure goes into the progress history: nothing to measure without it
        self._measure_lateness = self.has_watermark and self.progress_log is not None and self._lateness_on
        #: batch id -> the watermark inputs' largest event times when that batch was planned
        self._max_event_times_at: dict[int, dict] = {}
        # Spark's PropagateWatermarkSimulator (allowMultiple=true) refuses a watermark above
        # another one, once it has a watermark other than 0 to propagate
        self._redefined_watermark = (
            _conf(user.conf, ALLOW_MULTIPLE_CONF, "true").lower() == "true" and redefines_watermark(self.plan)
        )

    def _speed_up_python_workers(self, user: "SparkSession") -> None:
        """Unix domain sockets, the preloading daemon and a warm-up job for a query with state
        tasks: each only an optimisation, so a failure leaves PySpark's defaults."""
        try:
            use_unix_domain_sockets(user)
        except Exception:  # only an optimisation: the workers then use loopback TCP
            logger.debug("Python workers stay on loopback TCP", exc_info=True)

        def preloading_daemon() -> None:
            try:
                use_preloading_daemon(user)
            except Exception:  # only an optimisation: the workers then import on their own
                logger.debug("Python workers stay on PySpark's daemon", exc_info=True)

        if not self._runs_state_tasks:
            return
        warm_up = None
        try:
            # the daemon is chosen in the warm-up's thread, before its job (its check starts a
            # Python process: not on the query thread's way to the first batch)
            warm_up = start_worker_warm_up(user, self.job_tag, self.num_partitions, self._stop, before=preloading_daemon)
        except Exception:  # only an optimisation: the batches start the workers
            logger.debug("Python worker warm-up not started", exc_info=True)
        if warm_up is None:  # no warm-up (recently warm, no worker reuse): here, before the first batch
            preloading_daemon()

    def _construct_next_batch(self, cursor: "_StreamCursor", conf: dict[str, str], no_data_enabled: bool) -> "_BatchRecord | None":
        """Spark's ``constructNextBatch``: ask each source for its latest offset; when there is
        new data, or the last plan wants a batch for the new watermark, log the batch's offsets
        (the write-ahead log) and tell the sources the previous batch is done. None: no batch."""
        start, batch_id = cursor.start, cursor.batch_id
        t = time.perf_counter()
        ends = []
        recorded = self._replay.next_batch(list(start)) if self._replay is not None else None
        if self._replay is not None:
            ends = list(recorded[0]) if recorded is not None else list(start)
        for s, st in zip(self.sources if self._replay is None else [], start):
            # Spark: Trigger.Once admits everything available, whatever the source's limits
            limit = ReadLimit.ALL_AVAILABLE if self.trigger.kind == "once" else s.default_read_limit()
            ends.append(s.latest_offset(st, limit))
        self.progress.record_duration("latestOffset", t)
        has_data = any(s.has_new_data(st, e) for s, e, st in zip(self.sources, ends, start))
        if no_data_enabled and self._last_plan is not None:
            # Spark asks the last batch's plan whether the new watermark needs another
            # batch (and simulates its propagation) before it looks at new data
            self._check_watermark_propagation(self.tracker.current_watermark)
        wants_nd = (
            no_data_enabled
            and self.trigger.kind != "once"
            and self._last_plan is not None
            and self._another_batch_wanted(self._last_plan, self.tracker.current_watermark)
        )
        if not (has_data or wants_nd):
            return None
        logger.debug(
            "batch %d: %s (watermark %d ms)", batch_id, "new data" if has_data else "no data, for the new watermark", self.tracker.current_watermark
        )
        record = _BatchRecord(
            batch_id, list(start), [e if e is not None else st for e, st in zip(ends, start)], self.tracker.current_watermark,
            recorded[1] if recorded is not None else _now_ms(),
        )
        crash_point("before_offsets", batch_id)
        t = time.perf_counter()
        meta = OffsetSeqMetadata(record.watermark_ms, record.timestamp_ms, dict(conf))
        self.writer_lock.check_held()
        if not self.offset_log.add(batch_id, OffsetSeq(list(record.end), meta)):
            raise concurrent_stream_log_update_error(batch_id, self.offset_log.path_of(batch_id))
        self.progress.record_duration("walCommit", t)
        # Spark tells the sources that the previous batch is done only now, once the
        # next batch's offsets are logged (a file source's cleanSource acts then)
        if batch_id > 0 and self._replay is None:  # a replay leaves the recorded input alone
            for s, e in zip(self.sources, start):
                if e is not None:
                    s.commit(e)
        return record

    def _commit_batch(self, record: "_BatchRecord", generation: int) -> None:
        """After a batch ran: its commit log entry (with the watermark for the next batch), its
        progress, and the purge of what the logs no longer need."""
        t = time.perf_counter()
        self.writer_lock.check_held()
        if not self.commit_log.add(record.batch_id, CommitMetadata(self.tracker.current_watermark)):
            # Spark fails here too (CONCURRENT_STREAM_LOG_UPDATE); statestream does not, as a
            # batch whose commit is already there was run again from a checkpoint that lost
            # a later offsets entry (the rerun gives the same output). A second writer is
            # stopped where it matters, before it runs a batch: at the offsets entry above.
            logger.warning("commit log entry %s was already there; kept", self.commit_log.path_of(record.batch_id))
        self.progress.record_duration("commitOffsets", t)
        crash_point("after_commit", record.batch_id)
        self.progress.finish_batch(record)
        if record.start == record.end and self._last_plan is not None and any(
            getattr(w, "runs_batches_on_processing_time", lambda: False)() for w in state_writers(self._last_plan)
        ):
            # a processing-time timeout wants a batch on every trigger, so the query is never
            # idle; a batch without new data then means everything available was processed
            self._tell_waiters_idle(generation)
        self._purge(record.batch_id)

    def _tell_waiters_idle(self, generation: int) -> None:
        """``processAllAvailable``'s waiters: trigger ``generation`` found nothing more to do."""
        with self._lock:
            self._idle_generation = generation
            self._lock.notify_all()

    @staticmethod
    def _another_batch_wanted(plan: "PhysicalOperator", watermark_ms: int) -> bool:
        """Spark asks every state writer of the last batch with its own new *input* watermark
        (the global one, or what a join below it passes on)."""
        inputs = input_watermarks(plan, watermark_ms)
        for w in state_writers(plan):
            wm = inputs.get(_state_identity(w))
            if w.should_run_another_batch(watermark_ms if wm is None else wm):
                return True
        return False

    def _check_watermark_propagation(self, *watermarks_ms: int) -> None:
        """Spark simulates the watermark propagation only for a watermark other than 0; a
        redefined watermark fails the query there."""
        if self._redefined_watermark and any(w != 0 for w in watermarks_ms):
            raise redefined_watermark_error()

    def _sleep_until_next(self, trigger_start: float, ran_batch: bool) -> None:
        """Wait for the next trigger: the rest of a processing-time interval; without an
        interval, Spark's polling delay (10 ms) after a trigger that found no new data, and no
        wait at all after one that ran a batch (Spark starts the next at once)."""
        wait = time_to_next_trigger(self.trigger.interval_ms, time.monotonic() - trigger_start, ran_batch)
        if wait > 0:
            with self._lock:
                self._lock.wait(wait)

    def _purge(self, batch_id: int) -> None:
        """Drop the offsets and commits below the last ``minBatchesToRetain`` batches (the conf
        is read once per run, into ``store_conf``, as Spark reads its query session's conf)."""
        keep = self.store_conf.min_batches_to_retain
        threshold = batch_id + 1 - keep
        if threshold > 0:
            self.offset_log.purge(threshold)
            self.commit_log.purge(threshold)

    def _with_empty_relations(self, raw: dict, read: set[int]) -> dict:
        """``raw`` (the sources with new rows) and, for each other source the plan reads, its
        empty relation (``Source.empty_relation``, made once per run), so that a batch plan kept
        from a batch with rows serves a batch without: W1's last batch, a no-data batch that
        evicts, was built in about 150 ms where a reused plan takes about 20. ``raw`` alone
        when a source has no such relation (that batch is built)."""
        missing = [i for i in read if i not in raw]
        if not missing:
            return raw
        out = dict(raw)
        for i in missing:
            if i not in self._empty_relations:
                try:
                    self._empty_relations[i] = self.sources[i].empty_relation(self.spark)
                except Exception:  # only an optimisation: such batches are built
                    logger.debug("source %d has no empty relation: its batches without new rows are built", i, exc_info=True)
                    self._empty_relations[i] = None
            empty = self._empty_relations[i]
            if empty is None:
                return raw
            out[i] = empty
        return out

    def _source_batch(
        self, i: int, source: "Source", start: Any, end: Any, observations: dict | None, raw: dict
    ) -> "SparkDataFrame":
        """The source's rows for this batch; with new data and ``observations``, an observation
        (put there) counts the rows read while the batch runs (``numInputRows``). The rows as
        the source gave them, without the observation, go to ``raw``."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if not source.has_new_data(start, end):
            # made once per run and source: it reads nothing, and a plan may read it again
            # (about 15 ms of Py4J calls a batch otherwise)
            empty = self._empty_batches.get(i)
            if empty is None:
                empty = self._empty_batches[i] = empty_batch(self.spark, source.schema)
            return empty
        df = source.get_batch(self.spark, start, end)
        raw[i] = df
        if observations is None:  # counted elsewhere, or not read by the plan
            return df
        obs = Observation(f"__statestream_input_{i}_{uuid.uuid4().hex}")
        observations[i] = obs
        return df.observe(obs, F.count(F.lit(1)).alias("count"))

    def _run_batch_surviving_lost_blocks(self, record: _BatchRecord, prev_wm: int, first_batch_of_run: bool) -> None:
        """Run the batch; run it again, whole, when a block of one of its local checkpoints was
        lost with its executor (at most ``MAX_BATCH_RERUNS_ON_LOST_BLOCKS`` times). The
        batch's local checkpoints are dropped when it is done, whether it succeeded or not.

        Why: Spark's engine survives a lost executor by computing the lost partitions again
        from their lineage, state steps included (they load the previous version and commit
        this one again). A local checkpoint has no lineage, so a sink that reads a block of
        the batch's output from a dead executor fails the job. Running the batch again is what
        a restart would do: the same offsets, the state steps rewriting this version from the
        previous one, the sink given the whole batch again under its id. The file and memory
        sinks write a batch once whatever happens; ``foreachBatch`` functions, ``foreach``
        writers, the console and Kafka see the batch again (at least once, as after a restart,
        where Spark's recompute repeats only the lost partitions' tasks)."""
        for attempt in range(MAX_BATCH_RERUNS_ON_LOST_BLOCKS + 1):
            t = time.perf_counter()
            durations = self.progress.durations()
            with batch_local_checkpoints() as made:
                try:
                    self._run_batch(record, prev_wm, first_batch_of_run)
                    return
                except Exception as exc:
                    if not lost_local_checkpoint_block(exc, made):
                        raise
                    if self._stop.is_set():
                        raise _StoppedDuringBatch(f"batch {record.batch_id} lost a block while the query was stopping") from exc
                    if attempt == MAX_BATCH_RERUNS_ON_LOST_BLOCKS:
                        raise
                    # the failed attempt's whole time shows where Spark's recompute would: in
                    # adding the batch (not also in the phases it had reached)
                    self.progress.restore_durations(durations)
                    self.progress.record_duration("addBatch", t)
                    logger.warning(
                        "batch %d lost block(s) of its materialised rows (RDD %s; %s): running the batch again (%d of %d)",
                        record.batch_id,
                        ", ".join(str(i) for i in sorted(lost_block_rdd_ids(exc))),
                        LOST_BLOCK_ERROR_CLASS,
                        attempt + 1,
                        MAX_BATCH_RERUNS_ON_LOST_BLOCKS,
                    )
                finally:
                    for df in made:
                        release_local_checkpoint(df)

    def _run_batch(self, record: _BatchRecord, prev_wm: int, first_batch_of_run: bool) -> None:
        """Spark's ``runBatch``: read each source's rows between the logged offsets
        (``getBatch``), plan the batch with its watermarks (``queryPlanning``), run it into the
        sink (``addBatch``), then record its progress and the watermark for the next batch."""
        assert self._physical is not None
        # Spark sums the rows of every scan of a source (a self-union reads it twice); a source
        # the plan does not read (below a limit(0)) reports no input rows
        scans = Counter(n.source_index for n in self._physical.walk() if isinstance(n, StreamingRelationExec))
        read = set(scans)
        # a source whose rows go straight into a watermark is counted by that node's observation
        counted = sources_counted_by_watermark(self._physical, scans)
        if first_batch_of_run:
            logger.info("query %s: planning batch %d, the run's first", self.query_id, record.batch_id)
        t = time.perf_counter()
        input_obs: dict[int, Any] = {}
        raw: dict[int, Any] = {}
        batches = {
            i: self._source_batch(i, s, st, e, input_obs if i in read and i not in counted else None, raw)
            for i, (s, st, e) in enumerate(zip(self.sources, record.start, record.end))
        }
        self.progress.record_duration("getBatch", t)
        t = time.perf_counter()
        reuse = self._plan_reuse if self._plan_reuse is not None and not self._plan_reuse.disabled else None
        inc, plan, ctx = self._plan_batch(record, prev_wm, first_batch_of_run, batches, reuse is not None)
        sc = self.spark.sparkContext
        # every job this thread runs for the batch gives its state steps this batch's fields
        batch_args: list[str] = []
        try:
            if reuse is not None:
                set_batch_args(sc, plan, batch_args)
            result, template = self._batch_dataframe(record, plan, ctx, reuse, raw, read, input_obs)
            self.progress.record_duration("queryPlanning", t)
            if first_batch_of_run:  # the run's first batch takes seconds (the workers start): say so
                logger.info("query %s: batch %d planned in %.1f s; running its jobs", self.query_id, record.batch_id, time.perf_counter() - t)
            t = time.perf_counter()
            materialized = self._materialise(record, result, ctx)
        finally:
            clear_batch_args(sc, batch_args)
        if template is not None:
            input_obs = self._observations_of_the_reused_plan(record, result, template, ctx)
        if self._runs_state_tasks:
            # the state tasks have just run: their workers stay warm for a while (not after the
            # sink, which may take long)
            note_python_workers_used(self.spark.sparkContext)
        num_input = self._input_rows(record, plan, result, ctx, input_obs, scans, counted, raw)
        # only a batch that read more rows than a single task takes needs the plan read
        many = self._measures_shuffled_rows and sum(num_input) > self._single_task_max_rows > 0
        shuffled_now = shuffled_rows(result) if many else None
        self.sink.add_batch(record.batch_id, materialized, self.output_mode)
        crash_point("after_sink", record.batch_id)
        self.progress.record_duration("addBatch", t)
        self._record_batch(record, plan, ctx, num_input, materialized, shuffled_now)
        self._last_plan = plan
        self._last_execution = inc

    def _plan_batch(
        self, record: _BatchRecord, prev_wm: int, first_batch_of_run: bool, batches: dict[int, Any], reuses_plans: bool
    ) -> "tuple[IncrementalExecution, PhysicalOperator, BatchContext]":
        """The batch's ``IncrementalExecution`` (its watermarks, version and timestamp filled
        into the operators), the plan it gives, and the ``BatchContext`` it runs in
        (``reuses_plans``: its state steps take their batch fields from a local property)."""
        # planning simulates the propagation of the previous batch's and this batch's watermark
        self._check_watermark_propagation(prev_wm if record.batch_id > 0 else 0, record.watermark_ms)
        inc = IncrementalExecution(
            state_root=self.fm.uri("state"),
            run_id=self.run_id,
            batch_id=record.batch_id,
            num_partitions=self.num_partitions,
            output_mode=self.output_mode,
            late_watermark_ms=prev_wm if record.batch_id > 0 else 0,
            eviction_watermark_ms=record.watermark_ms,
            batch_timestamp_ms=record.timestamp_ms,
            lateness_references=self._lateness_references(record.batch_id, prev_wm if record.batch_id > 0 else 0),
        )
        assert self._physical is not None
        plan = inc.apply(self._physical)
        if first_batch_of_run:
            check_state_on_first_batch(self, plan, record.batch_id)
        self.accumulator.value = []
        skip_partial = skip_partial_aggregation(self.progress.last_with_input(), self._skip_partial, self._partial_skippable)
        # a batch that skips the partial step shuffles every row it reads: the last batch's
        # shuffled rows say nothing of it
        shuffled = self.progress.last_shuffled_rows() if skip_partial == SKIP_NONE else None
        ctx = BatchContext(
            spark=self.spark,
            batch_id=record.batch_id,
            source_batches=batches,
            output_mode=self.output_mode,
            metrics_accumulator=self.accumulator,
            late_rows_path=self.late_rows_path,
            single_state_task=single_state_task(
                self.progress.last_with_input(), self.progress.last(), self._single_task_max_rows, shuffled
            ),
            skip_partial=skip_partial,
            batch_args_by_property=reuses_plans,
            route_at_materialisation=self._route_at_materialisation,
        )
        if ctx.single_state_task:
            logger.debug("batch %d runs each stateful operator's state partitions in one task (a small batch)", record.batch_id)
        if ctx.skip_partial != SKIP_NONE:
            logger.debug("batch %d: aggregations skip their partial step (%s)", record.batch_id, ctx.skip_partial)
        return inc, plan, ctx

    def _batch_dataframe(
        self, record: _BatchRecord, plan: "PhysicalOperator", ctx: BatchContext, reuse: PlanReuse | None,
        raw: dict[int, Any], read: set[int], input_obs: dict[int, Any],
    ) -> tuple[Any, Any]:
        """The batch's DataFrame (with its timestamp), built from the plan or instantiated from
        an earlier batch's reusable plan; and that plan's template (None when built)."""
        reused = reuse.instantiate(self.spark, self._with_empty_relations(raw, read), ctx.plan_shape, _lateness_references_of(plan)) if reuse is not None else None
        template = None
        if reused is None:
            built = plan.execute(ctx)
            if reuse is not None:
                reuse.capture(built, raw, read, input_obs, ctx.observations, ctx.plan_shape, ctx.extra)
        else:
            built, template = reused
            logger.debug("batch %d runs on the reused plan of an earlier batch", record.batch_id)
        return with_batch_timestamp(built, record.timestamp_ms), template

    def _materialise(self, record: _BatchRecord, result: Any, ctx: BatchContext) -> Any:
        """Run the batch's job: its rows checkpointed locally (the state tasks run here), in
        Spark's partitions."""
        sc = self.spark.sparkContext
        sc.setJobDescription(f"statestream query {self.query_name or self.query_id} batch {record.batch_id}")
        sc.addJobTag(self.job_tag)  # interrupt() cancels the batch's jobs by it
        materialized = local_checkpoint(result)
        if ctx.single_state_task and self._route_at_materialisation:
            logger.debug("batch %d: the state task's rows take their partitions after the batch's job", record.batch_id)
            materialized = split_routed_rows(materialized, self.num_partitions, rows_emitted(self.accumulator.value))
        return materialized

    def _lateness_references(self, batch_id: int, late_watermark_ms: int) -> dict[str, int | None] | None:
        """Each watermark input's lateness reference for batch ``batch_id`` (its largest event
        time when the previous batch, whose watermark filters this batch's late rows, was
        planned), or None when lateness is not measured (``operators.lateness``)."""
        if not self._measure_lateness:
            return None
        self._max_event_times_at[batch_id] = {str(k): v for k, v in self.tracker.node_max_event_times.items()}
        for old in [b for b in self._max_event_times_at if b < batch_id - 1]:
            del self._max_event_times_at[old]
        snapshot = self._max_event_times_at.get(batch_id - 1)
        return {n.node_id: reference_max_ms(snapshot, n.node_id, n.delay_ms, late_watermark_ms) for n in self.plan.find(L.EventTimeWatermark)}

    @staticmethod
    def _observations_of_the_reused_plan(record: _BatchRecord, result: Any, template: Any, ctx: BatchContext) -> dict[int, Any]:
        """A reused plan's observations, read by name from this batch's executed plan: the
        sources' input counts (returned) and the watermarks' statistics (into ``ctx``)."""
        names = [*template.input_names.values(), *template.watermark_names.values()]
        values = observed_by_name(result, names)
        for name in (n for n in names if values[n] is None):
            logger.warning("batch %d: observation %s of the reused plan did not run", record.batch_id, name)
        ctx.observations.update({node: values[n] for node, n in template.watermark_names.items()})
        return {i: values[n] for i, n in template.input_names.items()}

    def _input_rows(
        self, record: _BatchRecord, plan: "PhysicalOperator", result: Any, ctx: BatchContext, input_obs: dict[int, Any],
        scans: Counter, counted: dict[int, Any], raw: dict[int, Any],
    ) -> list[int]:
        """Each source's ``numInputRows``, counted as Spark counts them."""
        num_input = [_observed_count(input_obs.get(i)) * scans.get(i, 0) for i in range(len(self.sources))]
        for i, node_id in counted.items():
            if i in raw:  # the source had new data
                num_input[i] = _observed_count(ctx.observations.get(node_id))
        if any(isinstance(n, LocalLimitExec) for n in plan.walk()):
            # a local limit may stop a scan early: count what the scans read, as Spark does
            scanned = input_rows_by_source(plan, result)
            if scanned is not None:
                num_input = [scanned.get(i, 0) for i in range(len(self.sources))]
            else:
                logger.debug("batch %s: scans do not match the plan's sources; input rows observed", record.batch_id)
        return num_input

    def _record_batch(
        self, record: _BatchRecord, plan: "PhysicalOperator", ctx: BatchContext, num_input: list[int],
        materialized: Any, shuffled_now: Any,
    ) -> None:
        """The batch's progress (its event-time statistics, observed metrics and the state
        tasks' metrics) and the watermark its statistics give the next batch."""
        stats = {}
        for node_id, obs in ctx.observations.items():
            s = stats_from_observation(obs)
            if s is not None:
                stats[node_id] = s
        delays = {n.node_id: n.delay_ms for n in self.plan.find(L.EventTimeWatermark)}
        lateness = lateness_records(plan, ctx.observations) if self._measure_lateness else None
        observed = {}
        for name, obs in ctx.extra.get(OBSERVED_METRICS, []):
            metrics = observed_values(obs)
            if metrics is not None:
                observed[name] = metrics
        self.progress.record_batch(
            record, plan, list(self.accumulator.value), stats, num_input, materialized, observed, shuffled_rows=shuffled_now,
            lateness=lateness,
        )
        self.tracker.update_watermark_from(stats, delays, record.timestamp_ms)


#: how many times a batch runs again after losing a block of its local checkpoints (Spark's
#: ``spark.stage.maxConsecutiveAttempts`` allows a stage four attempts)
MAX_BATCH_RERUNS_ON_LOST_BLOCKS = 3

#: how long a batch cancelled by PySpark's Ctrl-C handler waits for the stop that follows it
SIGINT_STOP_GRACE_S = 10.0


def _cancelled_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a job cancelled by ``SparkContext.cancelAllJobs``, which PySpark's
    SIGINT handler calls on Ctrl-C (a query's own stop cancels its jobs by their tag)."""
    return "cancellation of all jobs" in str(exc)


class _StoppedDuringBatch(Exception):
    """A batch that lost a block of its materialised rows while the query was stopping: not run
    again, and the query stopped rather than failed (``stop()`` may be what took the block)."""


def _is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is what a cancelled Spark job (or an interrupted thread) raises, as opposed
    to a real failure of the batch."""
    if isinstance(exc, _StoppedDuringBatch):
        return True
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("cancelled", "canceled", "InterruptedException", "SparkContext was shut down", "KeyboardInterrupt"))


def _lateness_references_of(plan: "PhysicalOperator") -> dict[str, int | None]:
    """The lateness references the batch's ``plan`` gives its watermark nodes, by node id."""
    return {n.node_id: n.lateness_reference_ms for n in plan.walk() if isinstance(n, EventTimeWatermarkExec) and n.measure_lateness}


def _observed_count(obs: Any) -> int:
    if obs is None:
        return 0
    values = observed_values(obs)
    if values is None:
        logger.warning("input row count of a source was not observed; reporting 0")
        return 0
    return int(values.get("count") or 0)


def _pinned_keys() -> list[str]:
    return list(PINNED_CONF_KEYS)
