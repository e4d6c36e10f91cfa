"""The join of a stream with a static DataFrame, and the nodes ``explain()`` borrows from Spark's
plan of it.

Spark: a stream-static join has no operator of its own; each micro-batch's plan holds Spark's
batch join (``BroadcastHashJoinExec``, ``SortMergeJoinExec``, ``BroadcastNestedLoopJoinExec``...)
between that batch's rows and the static side's plan. ``StreamStaticJoinExec`` is that join: it
runs Spark's ``DataFrame.join`` on the two sides' DataFrames, so Spark picks the strategy (and
honours broadcast hints) for each batch, and keeps no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from statestream.operators.base import PhysicalOperator, ShownAsSpark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.context import BatchContext

__all__ = ["StreamStaticJoinExec", "SparkPlanNodeExec"]


@dataclass(frozen=True)
class StreamStaticJoinExec(PhysicalOperator):
    """One batch of a stream joined with a static DataFrame (either side may be the stream).

    ``transform(left_df, right_df)`` is the user's join on this batch's DataFrames; for
    ``explain()`` the planner fills ``spark_text`` (Spark's line for its join node, e.g.
    ``BroadcastHashJoin [k], [k], Inner, BuildRight, false``) and the codegen flags."""

    left: PhysicalOperator | None = None
    right: PhysicalOperator | None = None
    join_type: str = "Inner"
    description: str = ""
    transform: Callable[["DataFrame", "DataFrame"], "DataFrame"] | None = field(default=None, repr=False, compare=False)
    spark_text: str = ""
    codegen: bool = False
    stage_start: bool = False
    #: explain only: Spark's verbose line, formatted-mode details and output attributes
    verbose_text: str = ""
    details: str = ""
    output_text: tuple[str, ...] = ()
    formatted_tree_name: str = ""

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.left is not None and self.right is not None and self.transform is not None
        return self.transform(self.left.execute(ctx), self.right.execute(ctx))

    def supports_codegen(self) -> bool:
        return self.codegen

    def starts_codegen_stage(self) -> bool:
        return self.stage_start

    def simple_string(self) -> str:
        return self.spark_text or f"StreamStaticJoin {self.join_type}, {self.description}".rstrip(", ")

    def verbose_string(self) -> str:
        return self.verbose_text or self.simple_string()

    def formatted_details(self) -> str | None:
        return self.details or None

    def formatted_name(self) -> str | None:
        return self.formatted_tree_name or None


@dataclass(frozen=True)
class SparkPlanNodeExec(ShownAsSpark, PhysicalOperator):
    """A node of Spark's own physical plan, shown by ``explain()`` as Spark shows it: the
    exchange or sort Spark's join planning puts above a streaming side (which hands on its input
    when executed), or a node of a static side's plan (explain only: the static side runs as the
    user's DataFrame)."""

    stage_start: bool = False
    inputs: tuple[PhysicalOperator, ...] = ()

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        if len(self.inputs) != 1:
            msg = f"{self.text.split(' ', 1)[0]} is shown by explain() only; it does not run"
            raise RuntimeError(msg)
        return self.inputs[0].execute(ctx)

    def starts_codegen_stage(self) -> bool:
        return self.stage_start
