"""Planning of ``limit(n)`` on a stream: Spark's ``StreamingGlobalLimitStrategy`` plus the few
optimizer rules that decide how many limits a query really has.

Spark (4.1): ``StreamingGlobalLimitStrategy`` in ``SparkStrategies.scala``; the optimizer rules
``EliminateLimits``, ``CombineLimits``, ``PushProjectionThroughLimit`` and ``OptimizeLimitZero``.

* A limit whose child can never hold more than ``n`` rows (``max_rows``) disappears.
* Limits separated only by projections merge into one limit of the smallest ``n`` (Spark pushes
  the projections below the limit, then combines the adjacent limits). A filter between two
  limits keeps them apart: the query then has two ``globalLimit`` state operators.
* ``limit(0)`` becomes an empty relation: nothing below it is read or run.
* The limit is stateful (``StreamingGlobalLimitExec`` over ``StreamingLocalLimitExec`` and a
  single-partition exchange) when its input is made of appends: the query runs in append mode,
  or in complete mode with no streaming aggregation below the limit. Otherwise (complete mode
  over an aggregation) it is a per-batch limit of the complete result: ``TakeOrderedAndProject``
  right over a sort, ``CollectLimit`` elsewhere. Update mode never gets here: analysis refuses a
  limit in update mode.

The rule helpers are pure functions over logical nodes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from statestream.operators.basic import SortExec, StatelessExec
from statestream.operators.limit import (
    CollectLimitExec,
    LocalTableScanExec,
    SinglePartitionExchangeExec,
    StreamingGlobalLimitExec,
    StreamingLocalLimitExec,
    TakeOrderedAndProjectExec,
)
from statestream.operators.watermark import EventTimeWatermarkExec
from statestream.plan import logical as L
from statestream.plan.spark_text import shown_output

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

__all__ = [
    "max_rows",
    "push_projections_below_limits",
    "combine_limits",
    "generates_streaming_appends",
    "plan_limit",
    "single_partition_output",
]

#: Stateless operations that never change the number of rows, only what each row holds. Spark
#: moves these below a limit (``PushProjectionThroughLimit``; deterministic projections assumed).
_PROJECTIONS = ("Project", "SubqueryAlias")
#: Stateless operations whose output has at most as many rows as their input (Spark's
#: ``maxRows`` passes through them).
_ROW_BOUNDED = ("Project", "Filter", "SubqueryAlias")


def _is_streaming(node: L.LogicalPlan) -> bool:
    return any(isinstance(n, L.StreamingRelation) for n in node.walk())


def max_rows(node: L.LogicalPlan) -> int | None:
    """An upper bound of the rows ``node`` yields per batch, when the plan shape gives one
    (Spark's ``LogicalPlan.maxRows``): a limit, and what is above it through projections,
    filters, sorts and grouped aggregations; one row for an aggregation without keys."""
    if isinstance(node, L.Limit):
        inner = max_rows(node.child) if node.child is not None else None
        return node.n if inner is None else min(node.n, inner)
    if isinstance(node, L.Aggregate) and not node.grouping:
        return 1
    if isinstance(node, L.Aggregate) or isinstance(node, L.Sort):
        return max_rows(node.child) if node.child is not None else None
    if isinstance(node, L.Stateless) and node.op in _ROW_BOUNDED:
        return max_rows(node.child) if node.child is not None else None
    if isinstance(node, L.Union):
        bounds = [max_rows(c) for c in node.children]
        return None if any(b is None for b in bounds) else sum(b for b in bounds if b is not None)
    if isinstance(node, L.Join) and node.join_type in ("LeftSemi", "LeftAnti") and node.left is not None:
        return max_rows(node.left)  # a semi or anti join keeps some of its left rows
    return None


def push_projections_below_limits(node: L.LogicalPlan) -> L.LogicalPlan:
    """``node`` with every projection that sits right on a limit moved below it (Spark's
    ``PushProjectionThroughLimit``): the rows are the same, and the plan has Spark's shape, with
    adjacent limits that ``combine_limits`` then merges. Nodes are rebuilt only where something
    changed, so sources and every other node keep their identity."""
    children = node.children
    if not children:
        return node
    node = node.with_new_children(tuple(push_projections_below_limits(c) for c in children))
    if (
        isinstance(node, L.Stateless)
        and node.op == "Project"
        and isinstance(node.child, L.Limit)
        and node.child.child is not None
    ):
        below = push_projections_below_limits(dataclasses.replace(node, child=node.child.child))
        return L.Limit(template=node.template, child=below, n=node.child.n)
    return node


def combine_limits(node: L.Limit) -> tuple[int, L.LogicalPlan]:
    """The one limit Spark's optimizer makes of ``node`` and the limits below it that only
    projections separate: ``(n, child)`` where ``child`` is the limits' input with the
    projections re-applied on top of it."""
    assert node.child is not None
    n = node.n
    child = node.child
    while True:
        projections: list[L.Stateless] = []
        below = child
        while isinstance(below, L.Stateless) and below.op in _PROJECTIONS and below.child is not None:
            projections.append(below)
            below = below.child
        if not isinstance(below, L.Limit) or below.child is None:
            return n, child
        n = min(n, below.n)
        rebuilt = below.child
        for p in reversed(projections):
            rebuilt = dataclasses.replace(p, child=rebuilt)
        child = rebuilt


def generates_streaming_appends(child: L.LogicalPlan, output_mode: str) -> bool:
    """Whether a limit over ``child`` needs the stateful limit: its input is streaming and made
    of appends (Spark's ``generatesStreamingAppends``)."""
    if not _is_streaming(child):
        return False
    if output_mode == "append":
        return True
    has_streaming_agg = any(isinstance(n, L.Aggregate) and _is_streaming(n) for n in child.walk())
    return output_mode == "complete" and not has_streaming_agg


def single_partition_output(op: "PhysicalOperator") -> bool:
    """Whether ``op``'s output is already one partition: the output of a limit, through
    operators that keep the partitioning. A global limit above then needs no exchange; an
    aggregation above must partition by its keys itself."""
    while isinstance(op, (StatelessExec, EventTimeWatermarkExec)):
        assert op.child is not None
        op = op.child
    return isinstance(op, (StreamingGlobalLimitExec, CollectLimitExec, TakeOrderedAndProjectExec))


def _sorted_below(op: "PhysicalOperator") -> bool:
    """Whether a sort runs below ``op`` in the same stage (through stateless steps): the sort
    reads its whole input, and its order must survive the limit."""
    while isinstance(op, StatelessExec):
        assert op.child is not None
        op = op.child
    return isinstance(op, SortExec)


def plan_limit(
    node: L.Limit,
    plan_child: Callable[[L.LogicalPlan], "PhysicalOperator"],
    output_mode: str,
    store_conf: Any = None,
    root: bool = False,
    for_explain: bool = False,
) -> "PhysicalOperator":
    """Plan ``node`` (see the module docstring); ``plan_child`` plans a logical subtree.
    ``for_explain``: the plan is only shown (an empty relation then shows the attribute ids of
    what it replaces, as Spark's does)."""
    assert node.child is not None
    bound = max_rows(node.child)
    if bound is not None and bound <= node.n:
        return plan_child(node.child)
    n, child = combine_limits(node)
    if n == 0:
        shown = None
        if for_explain:
            shown = shown_output(plan_child(child))
        return LocalTableScanExec(schema=node.schema, output=shown or tuple(node.schema.names))
    if generates_streaming_appends(child, output_mode):
        planned = plan_child(child)
        local: PhysicalOperator = StreamingLocalLimitExec(child=planned, n=n)
        if not single_partition_output(planned):
            local = SinglePartitionExchangeExec(child=local)
        return StreamingGlobalLimitExec(child=local, n=n, store_conf=store_conf)
    if isinstance(child, L.Sort) and child.child is not None:
        return TakeOrderedAndProjectExec(
            child=plan_child(child.child),
            n=n,
            description=child.description,
            output=tuple(child.schema.names),
            transform=child.transform,
        )
    planned = plan_child(child)
    return CollectLimitExec(child=planned, n=n, root=root, drain=not _sorted_below(planned))
