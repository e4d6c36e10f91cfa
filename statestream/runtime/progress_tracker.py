"""ProgressTracker: times each phase of a trigger and turns a finished batch into a progress
record shaped like Spark's ``StreamingQueryProgress`` (Spark: ``ProgressReporter``)."""

from __future__ import annotations

import collections
import datetime as _dt
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from statestream.operators.context import latest_task_reports
from statestream.operators.stateful import RESTORE_HIT_METRIC
from statestream.plan import logical as L
from statestream.plan.incremental import state_writers

if TYPE_CHECKING:
    from statestream.sinks.base import Sink
    from statestream.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = ["ProgressTracker", "TrackedExecution", "format_timestamp_ms", "aggregate_operator_metrics"]

_SUMMED = ("numOutputRows", "numRowsDroppedByWatermark", "numTotalStateRows", "numUpdatedStateRows",
           "numRemovedStateRows", "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "stateMemory")


def format_timestamp_ms(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, as Spark prints progress times."""
    t = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=int(ms))
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _round1(x: float) -> float:
    """Spark 4.1 renders progress rates with one decimal, half-up."""
    from decimal import ROUND_HALF_UP, Decimal

    return float(Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def aggregate_operator_metrics(op_id: int, name: str, tasks: list[dict], num_partitions: int) -> dict:
    """One ``stateOperators`` entry from the metrics of the operator's tasks (one per
    partition): sums, like Spark's SQL metrics, plus per-partition custom metrics."""
    by_part = {part: t for (op, part), t in latest_task_reports(tasks).items() if op == op_id}
    s = {k: sum(int(t.get(k, 0)) for t in by_part.values()) for k in _SUMMED}
    custom: dict[str, int] = {}
    for t in by_part.values():
        for k, v in (t.get("customMetrics") or {}).items():
            custom[k] = custom.get(k, 0) + int(v)

    if any(RESTORE_HIT_METRIC in t for t in by_part.values()):  # only the aggregation reports it
        custom[RESTORE_HIT_METRIC] = sum(int(t.get(RESTORE_HIT_METRIC, 0)) for t in by_part.values())
    entry = {
        "operatorName": name,
        "numRowsTotal": s["numTotalStateRows"],
        "numRowsUpdated": s["numUpdatedStateRows"],
        "allUpdatesTimeMs": s["allUpdatesTimeMs"],
        "numRowsRemoved": s["numRemovedStateRows"],
        "allRemovalsTimeMs": s["allRemovalsTimeMs"],
        "commitTimeMs": s["commitTimeMs"],
        "memoryUsedBytes": s["stateMemory"],
        "numRowsDroppedByWatermark": s["numRowsDroppedByWatermark"],
        "numShufflePartitions": num_partitions,
        # one instance per task, unless the operator says otherwise (Spark's session save in
        # complete mode never reports its instances)
        "numStateStoreInstances": sum(int(t.get("numStateStoreInstances", 1)) for t in by_part.values()),
    }
    if custom:
        entry["customMetrics"] = dict(sorted(custom.items()))
    entry["_numOutputRows"] = s["numOutputRows"]
    return entry


class TrackedExecution(Protocol):
    """What the tracker reads of the query it reports on: ``MicroBatchExecution``, which creates
    the tracker (a protocol, so that this module does not import microbatch.py, which imports it)."""

    query_id: str
    run_id: str
    query_name: str | None
    #: the query's logical plan
    plan: "L.LogicalPlan"
    #: the following three are set once the query's run has started
    sources: "list[Source]"
    num_partitions: int
    has_watermark: bool
    sink: "Sink"
    @property
    def listeners(self) -> Any:
        """The StreamingQueryListener bus of the query's manager (a property of the query)."""


class ProgressTracker:
    """Spark's ``ProgressReporter``: the progress of every executed batch and, while the query
    waits for data, an idle-trigger progress at most every ``noDataProgressEventInterval``.

    Both kinds go into ``recentProgress``, which keeps ``numRecentProgressUpdates - 1`` entries
    (Spark drops the oldest once the buffer reaches the conf's value).
    """

    def __init__(self, ex: TrackedExecution, keep: int = 100, no_data_interval_ms: int = 10_000) -> None:
        self.ex = ex
        self._recent: collections.deque[dict] = collections.deque(maxlen=max(keep - 1, 0))
        self.no_data_interval_ms = no_data_interval_ms
        #: when the last progress (of a batch or an idle trigger) was recorded; None = never
        self._last_no_execution_report: float | None = None
        self._lock = threading.Lock()
        #: the progress of the last batch that read rows, whatever ``keep`` is: what the next
        #: batch's shape is decided from (``runtime.partial_aggregation``), past the no-data
        #: batches and idle triggers in between
        self._last_with_input: dict | None = None
        #: the rows that batch's shuffles wrote into its state stage, when measured
        #: (``runtime.small_batches.shuffled_rows``)
        self._last_shuffled_rows: int | None = None
        self._durations: dict[str, int] = {}
        self._trigger_start_wall = 0
        self._trigger_start = 0.0
        self._prev_trigger_start_wall: int | None = None
        self._pending: dict[str, Any] = {}
        self._last_ops: list[dict] = []
        self._last_watermark: int | None = None
        self._executed = False  # a batch of this run recorded its progress
        self._last_sink_rows_reported = False

    # -- timing
    def start_trigger(self) -> None:
        self._durations = {}
        self._trigger_start = time.perf_counter()
        self._trigger_start_wall = int(time.time() * 1000)

    def record_duration(self, phase: str, started: float) -> None:
        self._durations[phase] = self._durations.get(phase, 0) + int((time.perf_counter() - started) * 1000)

    def durations(self) -> dict[str, int]:
        """The phases' times recorded so far in this trigger (a copy, for :meth:`restore_durations`)."""
        return dict(self._durations)

    def restore_durations(self, durations: dict[str, int]) -> None:
        """Go back to ``durations`` (what :meth:`durations` gave): a batch attempt that failed
        and runs again leaves only its whole time, added to one phase by the caller."""
        self._durations = dict(durations)

    # -- records
    def record_batch(
        self,
        record,
        plan,
        task_metrics: list[dict],
        stats: dict,
        num_input: list[int],
        result,
        observed: dict | None = None,
        shuffled_rows: int | None = None,
        lateness: dict | None = None,
    ) -> None:
        """Keep what the batch's progress is made of until :meth:`finish_batch` (``lateness``:
        each watermark input's lateness record, for the progress history only)."""
        ops = []
        for i, w in enumerate(state_writers(plan)):
            ops.append(aggregate_operator_metrics(i, w.operator_name, task_metrics, self.ex.num_partitions))
        self._pending = {
            "record": record, "ops": ops, "stats": stats, "num_input": num_input, "observed": observed or {},
            "shuffled_rows": shuffled_rows, "lateness": lateness,
        }

    def finish_batch(self, record) -> None:
        p = self._pending
        self._pending = {}
        self._durations["triggerExecution"] = int((time.perf_counter() - self._trigger_start) * 1000)
        duration = self._durations["triggerExecution"]
        num_input = sum(p.get("num_input", []))
        elapsed_s = None
        if self._prev_trigger_start_wall is not None:
            elapsed_s = (self._trigger_start_wall - self._prev_trigger_start_wall) / 1000.0
        self._prev_trigger_start_wall = self._trigger_start_wall
        sources = []
        for i, s in enumerate(self.ex.sources):
            n = p["num_input"][i] if p.get("num_input") else 0
            latest = s.reported_latest_offset()
            src = {
                "description": s.description(),
                "startOffset": record.start[i],
                "endOffset": record.end[i],
                "latestOffset": record.end[i] if latest is None and not s.admission_controlled else latest,
                "numInputRows": n,
            }
            if elapsed_s:
                src["inputRowsPerSecond"] = _round1(n / elapsed_s)
            else:
                src["inputRowsPerSecond"] = 0.0
            src["processedRowsPerSecond"] = _round1(n / (max(duration, 1) / 1000.0))
            metrics = s.metrics(record.end[i])
            if metrics:
                src["metrics"] = dict(sorted(metrics.items()))
            sources.append(src)
        prog: dict[str, Any] = {
            "id": self.ex.query_id,
            "runId": self.ex.run_id,
            "name": self.ex.query_name,
            "timestamp": format_timestamp_ms(self._trigger_start_wall),
            "batchId": record.batch_id,
            "batchDuration": duration,
            "numInputRows": num_input,
            "inputRowsPerSecond": _round1(num_input / elapsed_s) if elapsed_s else 0.0,
            "processedRowsPerSecond": _round1(num_input / (max(duration, 1) / 1000.0)),
            "durationMs": dict(sorted(self._durations.items())),
        }
        # PySpark's progress objects always carry eventTime (empty without a watermark)
        et: dict[str, str] = {}
        if self.ex.has_watermark:
            stats = p.get("stats") or {}
            first = self._first_stats(stats)
            if first is not None and num_input > 0:
                mn, mx, avg, _count = first
                et["avg"] = format_timestamp_ms(int(avg))
                et["max"] = format_timestamp_ms(mx)
                et["min"] = format_timestamp_ms(mn)
            et["watermark"] = format_timestamp_ms(record.watermark_ms)
        prog["eventTime"] = et
        ops = []
        for o in p.get("ops", []):
            o = dict(o)
            o.pop("_numOutputRows", None)
            ops.append(o)
        prog["stateOperators"] = ops
        prog["sources"] = sources
        prog["sink"] = {"description": self.ex.sink.description(), "numOutputRows": self.ex.sink.num_output_rows()}
        if p.get("observed"):
            prog["observedMetrics"] = {name: _metrics_row(values) for name, values in sorted(p["observed"].items())}
        self._last_ops = ops
        self._last_watermark = record.watermark_ms
        with self._lock:
            self._recent.append(prog)
            if prog.get("numInputRows"):
                self._last_with_input = prog
                self._last_shuffled_rows = p.get("shuffled_rows")
        self.ex.listeners.post_progress(prog)
        history = getattr(self.ex, "progress_log", None)
        if history is not None:
            # statestream's own record of the batch (not in Spark's progress): the lateness
            history.add({**prog, "lateness": p["lateness"]} if p.get("lateness") else prog)
        self._last_no_execution_report = time.monotonic()
        self._last_sink_rows_reported = prog["sink"]["numOutputRows"] != -1
        self._executed = True
        logger.info("progress: batch %s of query %s: %s input rows, %s ms", record.batch_id, self.ex.query_id, num_input, duration)

    def _first_stats(self, stats: dict):
        """Spark reports the statistics of the first watermark node (in plan order) that saw rows."""
        for n in self.ex.plan.find(L.EventTimeWatermark):
            if n.node_id in stats:
                return stats[n.node_id]
        return None

    def idle(self, next_batch_id: int, committed: list) -> None:
        """An idle trigger (no batch ran). Like Spark, its progress is recorded when
        ``noDataProgressEventInterval`` passed since the last recorded progress, or at once if
        the query has recorded none yet. It repeats the last batch's snapshot figures (state
        rows, watermark) with the batch-bound ones at 0, and the committed offsets."""
        now = time.monotonic()
        last = self._last_no_execution_report
        if last is not None and (now - last) * 1000 < self.no_data_interval_ms:
            return
        self._last_no_execution_report = now
        self._durations["triggerExecution"] = int((time.perf_counter() - self._trigger_start) * 1000)
        prog: dict[str, Any] = {
            "id": self.ex.query_id,
            "runId": self.ex.run_id,
            "name": self.ex.query_name,
            "timestamp": format_timestamp_ms(self._trigger_start_wall),
            "batchId": next_batch_id,
            "batchDuration": self._durations["triggerExecution"],
            "numInputRows": 0,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.0,
            "durationMs": dict(sorted(self._durations.items())),
        }
        executed = self._executed
        et: dict[str, str] = {}
        if executed and self.ex.has_watermark and self._last_watermark is not None:
            et["watermark"] = format_timestamp_ms(self._last_watermark)
        prog["eventTime"] = et
        prog["stateOperators"] = [dict(o, numRowsUpdated=0, numRowsDroppedByWatermark=0) for o in self._last_ops]
        prog["sources"] = [self._idle_source(s, committed[i]) for i, s in enumerate(self.ex.sources)]
        # Spark: 0 if the last batch's sink reported its rows, else -1 as for that batch
        reported = executed and self._last_sink_rows_reported
        prog["sink"] = {"description": self.ex.sink.description(), "numOutputRows": 0 if reported else -1}
        with self._lock:
            self._recent.append(prog)
        self.ex.listeners.post_idle(self.ex.query_id, self.ex.run_id, prog["timestamp"])

    @staticmethod
    def _idle_source(source, committed) -> dict[str, Any]:
        """An idle trigger's source progress. As in Spark, the latest offset a source fetched in
        this trigger and its metrics against the committed end (a Kafka source's offsets behind
        the latest) are reported though no batch ran."""
        src: dict[str, Any] = {
            "description": source.description(),
            "startOffset": committed,
            "endOffset": committed,
            "latestOffset": source.reported_latest_offset(),
            "numInputRows": 0,
            "inputRowsPerSecond": 0.0,
            "processedRowsPerSecond": 0.0,
        }
        metrics = source.metrics(committed)
        if metrics:
            src["metrics"] = dict(sorted(metrics.items()))
        return src

    def last(self) -> dict | None:
        with self._lock:
            return self._recent[-1] if self._recent else None

    def last_with_input(self) -> dict | None:
        """The progress of the last batch of this run that read rows, or None."""
        with self._lock:
            return self._last_with_input

    def last_shuffled_rows(self) -> int | None:
        """The rows the shuffles of that batch (:meth:`last_with_input`) wrote into its state
        stage, when they were measured; None otherwise."""
        with self._lock:
            return self._last_shuffled_rows

    def recent(self) -> list[dict]:
        with self._lock:
            return list(self._recent)


def _metrics_row(values: Any) -> dict[str, Any]:
    """An observation's values (a ``Row`` or a dict) as the JSON object Spark's progress shows:
    numbers as numbers, timestamps and dates as strings, other values as their text."""
    import datetime as _datetime
    import decimal

    row = values.asDict(recursive=True) if hasattr(values, "asDict") else dict(values)

    def plain(v: Any) -> Any:
        if isinstance(v, decimal.Decimal):
            return float(v)
        if isinstance(v, (_datetime.datetime, _datetime.date)):
            return v.isoformat(sep=" ") if isinstance(v, _datetime.datetime) else v.isoformat()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)

    return {k: plain(v) for k, v in row.items()}
