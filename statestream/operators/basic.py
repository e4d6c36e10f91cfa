"""Stateless physical operators: the scan of a source's batch, replayed projections/filters, the
sort of a complete-mode result, and union."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from statestream._jvm.calls import java_dataframe, java_session, jvm_view
from statestream.operators.base import PhysicalOperator, ShownAsSpark, StateStoreWriter
from statestream.operators.local_checkpoint import local_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = ["StreamingRelationExec", "BatchRelationExec", "StatelessExec", "SparkStatelessExec", "SortExec", "UnionExec", "in_session"]


@dataclass(frozen=True)
class StreamingRelationExec(PhysicalOperator):
    """This batch's rows of one source (Spark's ``MicroBatchScanExec`` / the scan that replaces
    ``StreamingExecutionRelation`` in each batch)."""

    source_index: int = 0
    source_name: str = "source"
    output: tuple[str, ...] = ()
    #: the columns as ``explain()`` shows them, with Spark's attribute ids (``value#1L``); set
    #: by the planner for explain only (``plan/spark_text.py``)
    display_output: tuple[str, ...] = ()

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        return ctx.source_batches[self.source_index]

    def simple_string(self) -> str:
        return f"StreamingRelation {self.source_name}, [{', '.join(self.display_output or self.output)}]"


def in_session(df: "DataFrame", session: Any) -> "DataFrame":
    """``df``'s analysed plan as a DataFrame of ``session``.

    Why: a static DataFrame belongs to the user's session; joined or unioned there, the result
    would run with that session's confs (adaptive execution on, the session's number of shuffle
    partitions) instead of the query's, and a stateful operator above needs the query's exact
    partitioning. The analysed plan is the same object, so the static side reads what its
    DataFrame reads (a file listing made when it was created stays that listing, as in Spark's
    engine) and a cached DataFrame is still found in Spark's cache."""
    from pyspark.sql import DataFrame

    if df.sparkSession is session:
        return df
    jvm = jvm_view(session)
    plan = java_dataframe(df).queryExecution().analyzed()
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(java_session(session), plan), session)


@dataclass(frozen=True)
class BatchRelationExec(PhysicalOperator):
    """A batch (static) DataFrame inside a streaming query, evaluated again in every micro-batch,
    in the batch's session: the static side of a stream-static join, or (only with
    ``spark.sql.streaming.unsupportedOperationCheck=false``, otherwise the analysis refuses the
    query) the batch input of a union, where Spark's engine does the same."""

    df: Any = field(default=None, repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        return in_session(self.df, ctx.spark)

    def leaf_count(self) -> int:
        """How many leaves (scans) the static DataFrame's plan has, for matching a batch's
        executed plan to its sources (``operators/limit.py``); 1 if the plan cannot be read."""
        try:
            return int(java_dataframe(self.df).queryExecution().optimizedPlan().collectLeaves().size())
        except Exception:  # noqa: BLE001 - not a classic DataFrame
            return 1

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


@dataclass(frozen=True)
class SparkStatelessExec(ShownAsSpark, StatelessExec):
    """A node of Spark's own plan of a chain of stateless steps, shown by ``explain()`` as
    Spark shows it (``Project [timestamp#0, (value#1L * 2) AS x#2L]``; ``plan/spark_text.py``).
    A ``StatelessExec`` so that planning decisions that look through stateless steps (is the
    input one partition? sorted?) see the same plan as a run does. Explain only: it hands on
    its input if executed, the steps themselves run as the user's operations."""

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        return self.child.execute(ctx)


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


def _partitions_by_task_id(op: PhysicalOperator) -> bool:
    return any(isinstance(n, StateStoreWriter) and n.partition_from_task_id for n in op.walk())


@dataclass(frozen=True)
class UnionExec(PhysicalOperator):
    inputs: tuple[PhysicalOperator, ...] = ()
    by_name: bool = False
    options: Any = None  # unionByName's allowMissingColumns

    def materialises_inputs(self) -> bool:
        """Whether a batch runs some input of this union on its own while the batch is built
        (see ``execute``)."""
        return any(_partitions_by_task_id(i) for i in self.inputs[1:])

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        dfs = [i.execute(ctx) for i in self.inputs]
        # Spark runs a union's inputs as one stage, the tasks of the second input numbered after
        # the first's: a state step there would take a wrong partition from its task id, so such
        # an input runs first, on its own (materialised; its state commits then, as it would in
        # the sink's job)
        dfs[1:] = [local_checkpoint(d) if _partitions_by_task_id(i) else d for i, d in zip(self.inputs[1:], dfs[1:])]
        out = dfs[0]
        for d in dfs[1:]:
            out = out.unionByName(d, allowMissingColumns=bool(self.options)) if self.by_name else out.union(d)
        return out

    def simple_string(self) -> str:
        return "Union"
