"""What one micro-batch's execution needs to know: the Spark session it runs on, the source
batches, and where event-time statistics and state metrics are collected.

Spark: the pieces of ``IncrementalExecution`` that operators read while executing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from pyspark.accumulators import AccumulatorParam

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BatchContext", "ListAccumulatorParam", "latest_task_reports", "SKIP_NONE", "SKIP_SOURCE_FED", "SKIP_ALL"]

#: What a batch asks of its aggregations' partial step (``BatchContext.skip_partial``, decided by
#: ``runtime.partial_aggregation``; ``operators.aggregate.skips_partial`` applies it): keep it
#: everywhere; skip it where the aggregation reads one source's rows; skip it wherever it can be
SKIP_NONE = "keep-all"
SKIP_SOURCE_FED = "skip-source-fed"
SKIP_ALL = "skip-all"


class ListAccumulatorParam(AccumulatorParam):
    """Gathers one metrics dict per state task on the driver.

    It lives here, beside the context that carries the accumulator, because the state steps
    pickle the accumulator and so this class: a worker unpickling a step imports this module,
    and importing the micro-batch runtime instead cost each new Python worker 0.4 s."""

    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:  # noqa: N802 - PySpark's name
        a.extend(b)
        return a


def latest_task_reports(reports: "Iterable[Mapping[str, Any]]") -> "dict[tuple[Any, Any], Mapping[str, Any]]":
    """The reports ``ListAccumulatorParam`` gathered, one per state task: the last of each
    operator's partition (``operatorId``, ``partition``), since a retried task reports again."""
    last: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for m in reports:
        last[(m.get("operatorId"), m.get("partition"))] = m
    return last


@dataclass
class BatchContext:
    spark: "SparkSession"
    batch_id: int
    #: source index -> this batch's rows of that source (an empty DataFrame for no new data)
    source_batches: dict[int, "DataFrame"]
    output_mode: str
    #: watermark node id -> pyspark Observation gathering its event-time stats
    observations: dict[str, Any] = field(default_factory=dict)
    #: accumulator receiving one metrics dict per (operator, partition) task
    metrics_accumulator: Any = None
    #: operator id -> number of rows the operator saw per source (for progress)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the late-row ledger's root (``spark.statestream.lateRows.path``), None when off
    late_rows_path: str | None = None
    #: run each state operator's partitions in one task (a small batch: ``runtime.small_batches``)
    single_state_task: bool = False
    #: which aggregations run without their partial step in this batch (``operators.aggregate.
    #: SKIP_*``, decided by ``runtime.partial_aggregation``)
    skip_partial: str = SKIP_NONE
    #: the state steps take their per-batch fields from a local property set for each batch's
    #: job (``StateStep.batch_args_property``), so the plan can serve later batches
    #: (``runtime.batch_plan_reuse``)
    batch_args_by_property: bool = False
    #: a one-task batch leaves its state step's rows in that task, each with its partition's
    #: route (``state_step.ROUTE_COLUMN``), and the batch's materialisation gives the sink
    #: Spark's partitions (``state_step.split_routed_rows``): set when the plan's one state
    #: step is the batch's result but for a row-wise Final step (``runtime.small_batches.
    #: routes_at_materialisation``); it reaches every state step the batch builds
    route_at_materialisation: bool = False

    @property
    def plan_shape(self) -> tuple[bool, str]:
        """What tells apart the plans this query's batches can have (``runtime.batch_plan_reuse``
        keeps one template per shape): their state tasks and their aggregations' partial steps."""
        return (self.single_state_task, self.skip_partial)
