"""Physical operators: shared base classes, capability mixins and the metric table.

Spark: ``SparkPlan``, and the traits ``StatefulOperator``, ``StateStoreReader``,
``StateStoreWriter`` and ``WatermarkSupport`` in ``statefulOperators.scala``. Operators are frozen
dataclasses; the planner builds them with per-batch fields left empty and
``plan/incremental.py`` fills those fields in for each batch with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statestream.checkpoint.file_stream_log import qualified_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "PhysicalOperator",
    "StatefulOperatorStateInfo",
    "StatefulOperator",
    "StateStoreWriter",
    "WatermarkSupport",
    "STATE_WRITER_METRICS",
]


@dataclass(frozen=True)
class StatefulOperatorStateInfo:
    """Where a stateful operator keeps its state in this batch (Spark's
    ``StatefulOperatorStateInfo``): the store of batch N is opened at version N."""

    checkpoint_location: str
    query_run_id: str
    operator_id: int
    store_version: int
    num_partitions: int

    def __str__(self) -> str:
        return (
            f"state info [ checkpoint = {qualified_path(self.checkpoint_location)}, runId = {self.query_run_id}, "
            f"opId = {self.operator_id}, ver = {self.store_version}, numPartitions = {self.num_partitions}]"
        )


#: the prefix of the local property that carries a state step's per-batch fields (the operator id
#: follows): ``StateStep.batch_args_property``
BATCH_ARGS_PROPERTY_PREFIX = "spark.statestream.batchArgs.operator"


def batch_args_property(operator_id: int) -> str:
    """The local property of operator ``operator_id``'s per-batch step fields."""
    return f"{BATCH_ARGS_PROPERTY_PREFIX}{int(operator_id)}"


#: The metrics every state-writing operator reports, with Spark's names: name -> (kind, meaning).
STATE_WRITER_METRICS: dict[str, tuple[str, str]] = {
    "numOutputRows": ("sum", "number of output rows"),
    "numRowsDroppedByWatermark": ("sum", "number of rows which are dropped by watermark"),
    "numTotalStateRows": ("sum", "number of total state rows"),
    "numUpdatedStateRows": ("sum", "number of updated state rows"),
    "allUpdatesTimeMs": ("timing", "time to update"),
    "numRemovedStateRows": ("sum", "number of removed state rows"),
    "allRemovalsTimeMs": ("timing", "time to remove"),
    "commitTimeMs": ("timing", "time to commit changes"),
    "stateMemory": ("size", "memory used by state"),
    "numStateStoreInstances": ("sum", "number of state store instances"),
}


@dataclass(frozen=True)
class PhysicalOperator:
    """A node of a batch's physical plan. ``execute`` returns the Spark DataFrame it produces."""

    @property
    def children(self) -> tuple["PhysicalOperator", ...]:
        out = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, PhysicalOperator):
                out.append(v)
            elif f.name == "inputs" and isinstance(v, tuple):
                out.extend(x for x in v if isinstance(x, PhysicalOperator))
        return tuple(out)

    def with_children(self, children: list["PhysicalOperator"]) -> "PhysicalOperator":
        it = iter(children)
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, PhysicalOperator):
                changes[f.name] = next(it)
            elif f.name == "inputs" and isinstance(v, tuple):
                changes[f.name] = tuple(next(it) for _ in v)
        return dataclasses.replace(self, **changes) if changes else self

    def transform_up(self, rule) -> "PhysicalOperator":
        node = self.with_children([c.transform_up(rule) for c in self.children])
        return rule(node)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def execute(self, ctx: "BatchContext") -> "DataFrame":  # pragma: no cover - abstract
        raise NotImplementedError(type(self).__name__)

    def simple_string(self) -> str:
        """One line of ``explain()`` for this node."""
        return type(self).__name__.removesuffix("Exec")

    def verbose_string(self) -> str:
        """The node's line in ``explain(extended=True)`` (Spark's ``verboseString``: the same as
        the simple line except for a few nodes, e.g. an aggregate also lists its output)."""
        return self.simple_string()

    def formatted_name(self) -> str | None:
        """The node's name in the tree of ``explain(mode="formatted")`` when Spark's own plan
        gave it (a join adds its type and build side: ``BroadcastHashJoin Inner BuildRight``);
        ``None``: the head of its line."""
        return None

    def formatted_details(self) -> str | None:
        """The lines under the node's header in ``explain(mode="formatted")`` when they were
        taken from Spark's own plan (``Input [n]: [...]``, ``Condition : ...``); ``None``: the
        formatter writes Spark's default (input or output, then the arguments)."""
        return None

    def supports_codegen(self) -> bool:
        """Whether Spark runs this node inside whole-stage code generation, which ``explain()``
        shows as a ``*(n)`` prefix (n = the codegen stage)."""
        return False


@dataclass(frozen=True)
class ShownAsSpark:
    """A node whose ``explain()`` text was taken from Spark's own plan: its line, verbose line,
    formatted-mode details, output attributes and formatted tree name (``plan/spark_text.py``).
    Mixed in before the operator class it dresses."""

    text: str = ""
    codegen: bool = False
    verbose_text: str = ""
    details: str = ""
    output_text: tuple[str, ...] = ()
    formatted_tree_name: str = ""

    def supports_codegen(self) -> bool:
        return self.codegen

    def simple_string(self) -> str:
        return self.text

    def verbose_string(self) -> str:
        return self.verbose_text or self.text

    def formatted_details(self) -> str | None:
        return self.details or None

    def formatted_name(self) -> str | None:
        return self.formatted_tree_name or None


class ExecutedByParent:
    """Mixin for a node that ``explain()`` shows but whose work runs inside another one (the
    fused state step above it, or Spark's own grouping and shuffle): ``execute`` hands on its
    child's DataFrame unchanged. List it before ``PhysicalOperator`` among the bases."""

    child: "PhysicalOperator | None"

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        return self.child.execute(ctx)


class StatefulOperator:
    """Mixin: the operator has state (Spark: ``StatefulOperator``)."""

    state_info: StatefulOperatorStateInfo | None

    def get_state_info(self) -> StatefulOperatorStateInfo:
        if self.state_info is None:
            msg = f"{type(self).__name__} was not given its state info: IncrementalExecution must run before execution"
            raise RuntimeError(msg)
        return self.state_info


class StateStoreWriter(StatefulOperator):
    """Mixin: the operator writes state and reports ``STATE_WRITER_METRICS`` (Spark:
    ``StateStoreWriter``)."""

    #: operatorName in progress reports and in the operator metadata file
    operator_name: str = "stateStoreWriter"
    #: the state step takes its state partition from its task's id (``StateStep.__call__``);
    #: False when the rows name it (the stream-stream join), which keeps working below the
    #: second input of a union, where task ids continue after the first input's
    partition_from_task_id: bool = True
    #: a batch plan built with this operator may serve later batches (``runtime.batch_plan_reuse``):
    #: its state step takes every field that changes between batches (``StateStep.batch_fields``)
    #: from :meth:`step_batch_args`, and nothing else in its part of the plan changes
    reusable_in_batch_plans: bool = False

    def should_run_another_batch(self, new_input_watermark_ms: int) -> bool:
        return False

    def step_batch_args(self) -> dict[str, Any]:
        """This batch's values of the state step's ``batch_fields``, which a reused plan's step
        takes from its local property: the store's version and, for an operator with a
        watermark, the two watermarks."""
        args: dict[str, Any] = {"version": self.get_state_info().store_version}
        if isinstance(self, WatermarkSupport):
            args["w_late_ms"] = self.event_time_watermark_for_late_events
            args["w_evict_ms"] = self.event_time_watermark_for_eviction
        return args

    def state_schemas(self) -> tuple[dict, dict]:
        """Spark StructType JSON of the state key and value, for the schema file and the restart
        check; the operator's ``info`` holds them unless the operator says otherwise."""
        info = self.info  # type: ignore[attr-defined]
        assert info is not None
        return info.key_schema_json, info.value_schema_json

    def state_step_args(self, ctx: "BatchContext") -> dict[str, Any]:
        """The arguments every state step takes: where its store lives (checkpoint, run,
        operator, the batch's version), the store conf and the query's metrics accumulator."""
        si = self.get_state_info()
        return {
            "state_root": si.checkpoint_location,
            "run_id": si.query_run_id,
            "operator_id": si.operator_id,
            "version": si.store_version,
            "store_conf": getattr(self, "store_conf", None),
            "accumulator": ctx.metrics_accumulator,
            "late_rows": ctx.late_rows_path,
            "operator_name": self.operator_name,
            "batch_args_property": batch_args_property(si.operator_id) if ctx.batch_args_by_property else None,
        }


class WatermarkSupport:
    """Mixin: the operator filters late rows with one watermark and evicts state with another
    (Spark: ``WatermarkSupport``). Both are milliseconds; ``None`` until IncrementalExecution
    fills them in."""

    event_time_watermark_for_late_events: int | None
    event_time_watermark_for_eviction: int | None

    def watermark_passed_eviction(self, new_input_watermark_ms: int) -> bool:
        """Spark's condition for another (no-data) batch: the new watermark is past the one
        this batch evicted with."""
        prev = self.event_time_watermark_for_eviction
        return prev is not None and new_input_watermark_ms > prev


def node_name(node: PhysicalOperator) -> str:
    """The operator's name as Spark's explain lists it (the head of its line)."""
    match = re.match(r"[A-Za-z]+", node.simple_string())
    return match.group(0) if match else type(node).__name__
