"""Stateless physical operators: the scan of a source's batch, replayed projections/filters, the
sort of a complete-mode result, and union."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from statestream.operators.base import PhysicalOperator

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = ["StreamingRelationExec", "BatchRelationExec", "StatelessExec", "SortExec", "UnionExec"]


@dataclass(frozen=True)
class StreamingRelationExec(PhysicalOperator):
    """This batch's rows of one source (Spark's ``MicroBatchScanExec`` / the scan that replaces
    ``StreamingExecutionRelation`` in each batch)."""

    source_index: int = 0
    source_name: str = "source"
    output: tuple[str, ...] = ()

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        return ctx.source_batches[self.source_index]

    def simple_string(self) -> str:
        return f"StreamingRelation {self.source_name}, [{', '.join(self.output)}]"


@dataclass(frozen=True)
class BatchRelationExec(PhysicalOperator):
    """A batch DataFrame inside a streaming query, read whole in every micro-batch. Only reachable
    with ``spark.sql.streaming.unsupportedOperationCheck=false`` (otherwise the analysis refuses
    the query), where Spark's engine does the same."""

    df: Any = field(default=None, repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        return self.df

    def simple_string(self) -> str:
        return f"Scan [{', '.join(self.df.columns)}]" if self.df is not None else "Scan"


@dataclass(frozen=True)
class StatelessExec(PhysicalOperator):
    """A stateless step (``Project``, ``Filter``, ...) replayed with PySpark on the batch."""

    child: PhysicalOperator | None = None
    op: str = "Project"
    description: str = ""
    transform: Callable[["DataFrame"], "DataFrame"] | None = field(default=None, repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None and self.transform is not None
        return self.transform(self.child.execute(ctx))

    def supports_codegen(self) -> bool:
        return self.op in ("Project", "Filter")

    def simple_string(self) -> str:
        return f"{self.op} {self.description}".rstrip()


#: ``BatchContext.extra`` key of the batch's ``(name, Observation)`` pairs
OBSERVED_METRICS = "observed_metrics"


@dataclass(frozen=True)
class CollectMetricsExec(PhysicalOperator):
    """``observe(name, *exprs)``: each batch's rows pass through unchanged while Spark computes
    the named metrics over them (an ``Observation`` per batch, read once the batch ran, for the
    progress' ``observedMetrics``)."""

    child: PhysicalOperator | None = None
    name: str = ""
    exprs: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import Observation

        assert self.child is not None
        observation = Observation(self.name)
        ctx.extra.setdefault(OBSERVED_METRICS, []).append((self.name, observation))
        return self.child.execute(ctx).observe(observation, *self.exprs)

    def simple_string(self) -> str:
        return f"CollectMetrics {self.name}"


@dataclass(frozen=True)
class SortExec(PhysicalOperator):
    """Sort of a complete-mode aggregation result (Spark's ``Sort`` over the final aggregate)."""

    child: PhysicalOperator | None = None
    description: str = ""
    transform: Callable[["DataFrame"], "DataFrame"] | None = field(default=None, repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None and self.transform is not None
        return self.transform(self.child.execute(ctx))

    def supports_codegen(self) -> bool:
        return True

    def simple_string(self) -> str:
        return f"Sort {self.description}, true"


@dataclass(frozen=True)
class UnionExec(PhysicalOperator):
    inputs: tuple[PhysicalOperator, ...] = ()
    by_name: bool = False
    options: Any = None  # unionByName's allowMissingColumns

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        dfs = [i.execute(ctx) for i in self.inputs]
        out = dfs[0]
        for d in dfs[1:]:
            out = out.unionByName(d, allowMissingColumns=bool(self.options)) if self.by_name else out.union(d)
        return out

    def simple_string(self) -> str:
        return "Union"
