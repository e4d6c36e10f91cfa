"""When a batch runs each stateful operator's partitions in one task instead of one task each.

A task of a state step costs tens of milliseconds before it does any work (a Python worker's
task set-up, the shuffle read, the Arrow stream both ways), and a batch of a few rows pays it
once per state partition. Spark's engine pays the same per task, in the JVM, where it is
cheaper. So when the last batch showed that both its input and every operator's state were
small, the next batch coalesces each operator's exchanged rows into one task that runs every
partition in turn (``operators.state_step.AllStatePartitions``): the same stores, files, metrics
and answers, fewer tasks.

"Input" is the rows the last batch read, or, for a query whose every stateful operator is a
streaming aggregation with buffers of a fixed size (:func:`measures_shuffled_rows`), the rows
its shuffles wrote into the state stage (:func:`shuffled_rows`, read from the executed plan's
metrics) when those were fewer and the next batch keeps its partial step (one that skips it
shuffles every row it reads): the partial aggregation before the exchange leaves one row per
key and map task, and a batch of a million rows over a handful of keys (W1) then brings the
state tasks a few dozen rows. On W1 (10 files of 1M rows, five keys, three runs each) the
median batch went from 551-581 ms to 427-525 ms and the total from 9.8-10.3 s to 8.7-9.8 s.
The rows read stay the measure elsewhere: where a buffer keeps the key's values (``collect_list``,
a percentile, a Python aggregate function), a few shuffled rows may carry every row's value;
other operators' state steps read the rows themselves (a join's sides, a deduplication's rows,
a session window's events); and a plan that runs part of itself in a job of its own (a union
input materialised first, a join's matches) has exchanges the batch's result does not show.

The decision looks one batch back, as the batch's own size is known only once it has run: a
burst after a trickle runs its first batch in one task, slower than it could but correctly,
and the batches after it run with one task per partition again. "Back" is the last batch that
read rows (a no-data batch says nothing of the next batch's input). Until a batch of the run
has read rows, each batch runs one task per partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from statestream._jvm.calls import java_dataframe, jvm_plan_nodes
from statestream.operators.aggregate import StreamingAggregateExec
from statestream.operators.basic import UnionExec
from statestream.operators.context import latest_task_reports
from statestream.operators.dedup import StreamingDeduplicateExec
from statestream.operators.session_window import SessionWindowStateStoreSaveExec
from statestream.operators.state_step import ROUTE_COLUMN
from statestream.operators.stateful import StateStoreSaveExec
from statestream.plan.incremental import state_writers

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

__all__ = [
    "SINGLE_STATE_TASK_MAX_ROWS_CONF",
    "DEFAULT_SINGLE_STATE_TASK_MAX_ROWS",
    "single_state_task",
    "single_state_task_max_rows",
    "shuffled_rows",
    "fixed_size_buffers",
    "measures_shuffled_rows",
    "FIXED_SIZE_MERGE_RULES",
    "routes_at_materialisation",
    "rows_emitted",
]

#: statestream's conf: the most input rows (or rows shuffled into the state stage, see the
#: module docstring), and state rows of any stateful operator, that the last batch may have had
#: for the next one to run its state partitions in one task; 0: never
SINGLE_STATE_TASK_MAX_ROWS_CONF = "spark.statestream.stateTasks.singleTaskMaxRows"
DEFAULT_SINGLE_STATE_TASK_MAX_ROWS = 10_000


def single_state_task_max_rows(conf_get: Callable[[str, Any], Any]) -> int:
    """:data:`SINGLE_STATE_TASK_MAX_ROWS_CONF` from a session conf's ``get``; a value that is
    not a whole number of rows is refused, naming the conf."""
    value = conf_get(SINGLE_STATE_TASK_MAX_ROWS_CONF, None)
    if value is None:
        return DEFAULT_SINGLE_STATE_TASK_MAX_ROWS
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{SINGLE_STATE_TASK_MAX_ROWS_CONF} must be a whole number of rows, got {value!r}") from None
    if n < 0:
        raise ValueError(f"{SINGLE_STATE_TASK_MAX_ROWS_CONF} must be >= 0 (0 turns it off), got {n}")
    return n


def single_state_task(
    last_with_input: Mapping[str, Any] | None,
    last_progress: Mapping[str, Any] | None,
    max_rows: int,
    shuffled: int | None = None,
) -> bool:
    """Whether the next batch runs each stateful operator's partitions in one task: the last
    batch that read rows (``last_with_input``, its progress as a dict) read at most ``max_rows``
    input rows, or its shuffles wrote at most that many (``shuffled``; None: not a measure for
    this query, see the module docstring), and every stateful operator held at most
    ``max_rows`` state rows both then and in the newest progress (``last_progress``).

    The input side looks past the batches that read nothing (a no-data batch that only moved
    the watermark, an idle trigger): they say nothing of the next batch's size, and a large
    batch, then a no-data batch, then another large batch would otherwise run the third in one
    task. The state side takes the larger of the two, as a batch that read nothing may still
    have changed the state (timers, eviction). Until a batch of this run has read rows, every
    batch runs one task per partition."""
    if max_rows <= 0 or not last_with_input:
        return False
    operators = last_with_input.get("stateOperators") or []
    if not operators:
        return False
    if int(last_with_input.get("numInputRows") or 0) > max_rows and (shuffled is None or shuffled > max_rows):
        return False
    if last_progress is not None and last_progress is not last_with_input:
        operators = [*operators, *(last_progress.get("stateOperators") or [])]
    return all(int(op.get("numRowsTotal") or 0) <= max_rows for op in operators)


#: the aggregation buffers' merge rules (``operators.aggregate_merge``) whose buffer is one value
#: (or a few) per key, whatever the rows: not ``concat``/``union``, which keep the values
FIXED_SIZE_MERGE_RULES = frozenset({
    "sum0", "sum", "min", "max", "moments", "covariance", "first", "last", "max_by", "min_by",
    "bit_and", "bit_or", "bit_xor", "try_sum", "decimal_sum", "try_decimal_sum", "product",
})


def fixed_size_buffers(calls: Iterable[Any]) -> bool:
    """Whether every aggregate call's buffers (its ``merge_groups``: ``(rule, columns)``) merge
    by a rule of :data:`FIXED_SIZE_MERGE_RULES`; a rule that is not a name (HyperLogLog's
    registers, whose partial step collects the values' hashes) does not."""
    return all(isinstance(rule, str) and rule in FIXED_SIZE_MERGE_RULES for c in calls for rule, _ in c.merge_groups)


def measures_shuffled_rows(plan: "PhysicalOperator") -> bool:
    """Whether the rows a batch of ``plan`` shuffled measure its state tasks' input: every
    stateful operator is an aggregation whose buffers have a fixed size
    (:func:`fixed_size_buffers`), and no union input runs in a job of its own before the batch's
    result (``UnionExec.materialises_inputs``: its exchanges are not in the result's plan)."""
    writers = state_writers(plan)
    return (
        bool(writers)
        and all(isinstance(w, StateStoreSaveExec) and w.info is not None and fixed_size_buffers(w.info.calls) for w in writers)
        and not any(isinstance(n, UnionExec) and n.materialises_inputs() for n in plan.walk())
    )


def routes_at_materialisation(plan: "PhysicalOperator", num_partitions: int) -> bool:
    """Whether a one-task batch of ``plan`` may leave its state step's rows in that task and give
    them their partitions only once the batch is materialised (``BatchContext.
    route_at_materialisation``, ``state_step.split_routed_rows``): the plan has one stateful
    operator (the flag reaches every state step of the batch), and its output is the batch's
    result but for the Final step of its aggregation, or the deduplication is the plan's root.
    The Final step must compute each output row from its own buffers and nothing else: no call
    recomputed by an aggregation of its own (it shuffles), no output expression around the
    calls (``final_over``: it may read the row's partition, ``spark_partition_id()``, or draw
    from a seeded ``rand()``, which Spark evaluates in the state partition). Anything else above
    (a projection of the user's, a join, another stateful operator) may depend on the rows'
    partitions, and keeps the exchange by route inside the batch's job."""
    if num_partitions <= 1 or len(state_writers(plan)) != 1:
        return False
    if isinstance(plan, StreamingDeduplicateExec):
        return True
    if not (isinstance(plan, StreamingAggregateExec) and plan.mode == "Final" and plan.info is not None):
        return False
    info = plan.info
    if not info.key_columns:
        return False
    if any(getattr(c.spec, "recompute", False) or hasattr(c, "final_over") for c in info.calls):
        return False
    return isinstance(plan.child, (StateStoreSaveExec, SessionWindowStateStoreSaveExec))


def rows_emitted(task_metrics: Iterable[Mapping[str, Any]]) -> int | None:
    """The rows the state tasks of a batch emitted (``numOutputRows``, the last report of each
    operator's partition: a retried task reports again), None when a report lacks it."""
    rows = [m.get("numOutputRows") for m in latest_task_reports(task_metrics).values()]
    counts = [n for n in rows if isinstance(n, int)]
    if len(counts) != len(rows):
        return None
    return sum(counts)


#: the metric of Spark's shuffle exchange that counts the rows its map tasks wrote
_SHUFFLE_RECORDS_WRITTEN = "shuffleRecordsWritten"


def shuffled_rows(result: Any) -> int | None:
    """The rows the shuffle exchanges of ``result``'s executed plan wrote (their
    ``shuffleRecordsWritten`` metrics, summed), once ``result`` has run, but for the exchange
    that takes a one-task batch's output rows back to their partitions (partitioned by
    ``state_step.ROUTE_COLUMN``: the state stage's output, not its input); None when the plan
    cannot be read or has no other exchange."""
    try:
        total: int | None = None
        for node in jvm_plan_nodes(java_dataframe(result).queryExecution().executedPlan()):
            metric = node.metrics().get(_SHUFFLE_RECORDS_WRITTEN)
            if metric.isDefined() and ROUTE_COLUMN not in str(node.outputPartitioning().toString()):
                total = (total or 0) + int(metric.get().value())
        return total
    except Exception:  # noqa: BLE001 - not a classic DataFrame: the rows read stay the measure
        return None
