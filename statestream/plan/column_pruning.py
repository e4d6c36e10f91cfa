"""Aggregate columns no operator above reads: not computed, as Spark's ``ColumnPruning`` drops them.

Spark's optimizer runs on each micro-batch's plan, and its ``ColumnPruning`` removes from an
aggregation every aggregate expression whose output no operator above it reads: a ``select``
after ``agg`` that leaves a column out, or a second aggregation (a chained window aggregation
reads only the first one's ``window``). Spark's plan then shows the aggregation with fewer
functions (``functions=[]`` when none is left). For a streaming query this is visible:

* the function is never evaluated, so a ``sum`` that would overflow under ANSI mode does not
  fail the query (scenario of fuzz seed 37);
* its buffer is not in the state: the state's value schema has no field for it.

``prune_unread_aggregates`` works out which aggregate columns of each ``Aggregate`` node Spark
would drop and records their positions in ``Aggregate.unread``. The planner leaves their calls out
of the aggregation and its state; the aggregation's rows carry a typed null under their names,
so the stateless steps statestream replays above it (which do not read them, or Spark would have
kept them) still run unchanged.

The rule is pure: :func:`unread_aggregate_outputs` walks a tree of :class:`Operator` shapes
(attribute ids in, attribute ids out) from the query's output down, as Spark propagates the
columns each operator needs. :func:`jvm_operator` reads the shapes from Spark's analysed plan of
the query's template (each node's template is built on its child's, so an aggregation keeps its
attribute ids up to the top). Where the shapes cannot be read, or an aggregation is not found in
them, nothing is pruned: the query computes every column, as before.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from dataclasses import dataclass
from typing import Any

from statestream._jvm.calls import expr_ids, java_dataframe, jvm_seq
from statestream.plan.logical import Aggregate, LogicalPlan
from statestream.plan.optimizer import contains_aggregate

logger = logging.getLogger(__name__)

__all__ = ["Named", "Operator", "unread_aggregate_outputs", "jvm_operator", "prune_unread_aggregates"]

#: operators whose output is their children's attributes (same ids): the columns needed below
#: them are those needed above them plus those their own expressions read
_INHERITING = frozenset(
    {
        "Filter",
        "Sort",
        "SubqueryAlias",
        "EventTimeWatermark",
        "UpdateEventTimeWatermarkColumn",
        "Deduplicate",
        "DeduplicateWithinWatermark",
        "Join",
        "RepartitionByExpression",
        "Repartition",
        "RebalancePartitions",
        "ResolvedHint",
        "GlobalLimit",
        "LocalLimit",
        "Sample",
        "CollectMetrics",
    }
)


@dataclass(frozen=True)
class Named:
    """One expression of a projection or an aggregation: the id of its output attribute, the ids
    it reads, and whether it holds an aggregate function (only those are ever pruned)."""

    id: int
    reads: frozenset[int] = frozenset()
    aggregate: bool = False


@dataclass(frozen=True)
class Operator:
    """The shape of one analysed operator: its kind (Spark's node name), output attribute ids and
    children, and what it reads. ``named``: a ``Project``'s or ``Aggregate``'s expressions;
    ``grouping``: the ids an ``Aggregate``'s grouping expressions read; ``columns``: per output
    position of an ``Expand``, the ids its projections read there; ``reads``: the ids any other
    operator's expressions read.

    >>> scan = Operator("LocalRelation", (1, 2))
    >>> Operator("Aggregate", (1, 3), (scan,), named=(Named(1, frozenset({1})), Named(3, frozenset({2}), True)),
    ...          grouping=frozenset({1})).kind
    'Aggregate'
    """

    kind: str
    output: tuple[int, ...]
    children: tuple["Operator", ...] = ()
    named: tuple[Named, ...] = ()
    grouping: frozenset[int] = frozenset()
    columns: tuple[frozenset[int], ...] = ()
    reads: frozenset[int] = frozenset()


def _reads(named: "tuple[Named, ...] | list[Named]") -> frozenset[int]:
    return frozenset().union(*(n.reads for n in named)) if named else frozenset()


def unread_aggregate_outputs(root: Operator) -> dict[tuple[int, ...], frozenset[int]]:
    """For each aggregation of the tree (keyed by its output ids), the output ids of its aggregate
    expressions that no operator above reads, as Spark's ``ColumnPruning`` finds them: the
    query's output is all needed; a projection needs what its needed expressions read; an
    aggregation needs its grouping and what its needed (or non-aggregate) expressions read; an
    ``Expand`` what its needed positions read; a union, position by position, what it needs
    itself; an operator passing its children's attributes on, what is needed above it plus what
    it reads. Any other operator needs all of its children's columns. An aggregation reached along
    several paths keeps what any of them needs; one without grouping keys is never pruned.

    >>> scan = Operator("LocalRelation", (1, 2, 3))
    >>> first = Operator("Aggregate", (1, 4, 5), (scan,),
    ...                  named=(Named(1, frozenset({1})), Named(4, frozenset({2}), True), Named(5, frozenset({3}), True)),
    ...                  grouping=frozenset({1}))
    >>> second = Operator("Aggregate", (6, 7), (first,),
    ...                   named=(Named(6, frozenset({1})), Named(7, aggregate=True)), grouping=frozenset({1}))
    >>> unread_aggregate_outputs(second)
    {(6, 7): frozenset(), (1, 4, 5): frozenset({4, 5})}
    >>> unread_aggregate_outputs(Operator("Project", (1, 5), (first,), named=(Named(1, frozenset({1})), Named(5, frozenset({5})))))
    {(1, 4, 5): frozenset({4})}
    """
    needed: dict[tuple[int, ...], set[int]] = {}
    aggregates: dict[tuple[int, ...], Operator] = {}
    stack: list[tuple[Operator, frozenset[int]]] = [(root, frozenset(root.output))]
    while stack:
        op, required = stack.pop()
        kids = op.children
        if op.kind == "Project" and len(kids) == 1:
            stack.append((kids[0], _reads([n for n in op.named if n.id in required])))
        elif op.kind == "Aggregate" and len(kids) == 1:
            aggregates[op.output] = op
            needed.setdefault(op.output, set()).update(required if op.grouping else op.output)
            kept = [n for n in op.named if n.id in required or not n.aggregate or not op.grouping]
            stack.append((kids[0], op.grouping | _reads(kept)))
        elif op.kind == "Expand" and len(kids) == 1 and len(op.columns) == len(op.output):
            at = [cols for o, cols in zip(op.output, op.columns) if o in required]
            stack.append((kids[0], frozenset().union(*at) if at else frozenset()))
        elif op.kind == "Union" and all(len(k.output) == len(op.output) for k in kids):
            for k in kids:
                stack.append((k, frozenset(c for o, c in zip(op.output, k.output) if o in required)))
        elif op.kind in _INHERITING:
            wanted = required | op.reads
            for k in kids:
                stack.append((k, wanted & frozenset(k.output)))
        else:
            for k in kids:
                stack.append((k, frozenset(k.output)))
    return {
        out: frozenset(n.id for n in aggregates[out].named if n.aggregate and n.id not in req)
        for out, req in needed.items()
    }


# ---------------------------------------------------------------------------------------------
# Shapes from Spark's analysed plan (py4j)
# ---------------------------------------------------------------------------------------------


def _ids(attribute_seq: Any) -> tuple[int, ...]:
    return tuple(expr_ids(attribute_seq))


def _expression_reads(expression: Any) -> frozenset[int]:
    return frozenset(_ids(expression.references().toSeq()))


def jvm_operator(plan: Any) -> Operator:
    """The shape of one of Spark's analysed plans (a py4j ``LogicalPlan``) and its children."""
    kind = str(plan.nodeName())
    output = _ids(plan.output())
    children = tuple(jvm_operator(c) for c in jvm_seq(plan.children()))
    if kind == "Project":
        named = tuple(Named(int(ne.exprId().id()), _expression_reads(ne)) for ne in jvm_seq(plan.projectList()))
        return Operator(kind, output, children, named=named)
    if kind == "Aggregate":
        named = tuple(
            Named(int(ne.exprId().id()), _expression_reads(ne), contains_aggregate(ne)) for ne in jvm_seq(plan.aggregateExpressions())
        )
        grouping = frozenset().union(*(_expression_reads(g) for g in jvm_seq(plan.groupingExpressions())))
        return Operator(kind, output, children, named=named, grouping=grouping)
    if kind == "Expand":
        columns = [set[int]() for _ in output]
        for projection in jvm_seq(plan.projections()):
            for i, e in enumerate(jvm_seq(projection)):
                if i < len(columns):
                    columns[i] |= _expression_reads(e)
        return Operator(kind, output, children, columns=tuple(frozenset(c) for c in columns))
    return Operator(kind, output, children, reads=frozenset(_ids(plan.references().toSeq())))


# ---------------------------------------------------------------------------------------------
# The rewrite of statestream's logical plan
# ---------------------------------------------------------------------------------------------

#: each query's plan with its unread aggregate columns marked, kept while the plan lives (the
#: query plans it several times; the same marked nodes keep the planner's per-node caches warm)
_PRUNED: "weakref.WeakKeyDictionary[LogicalPlan, LogicalPlan | None]" = weakref.WeakKeyDictionary()


def _prunable(node: LogicalPlan, root: LogicalPlan) -> bool:
    """An aggregation Spark may prune: below the query's output, with grouping keys, not a
    session window (whose aggregation statestream plans on its own path) nor one whose rows
    carry ``revision``/``is_final``."""
    return (
        isinstance(node, Aggregate)
        and node is not root
        and bool(node.grouping)
        and not node.finality
        and not node.is_session_window()
    )


def _candidates(plan: LogicalPlan) -> list[Aggregate]:
    """The aggregations whose unread columns the template's analysed plan shows faithfully:
    reached once (an aggregation used twice, as in a self-union, has its second use's attributes
    renamed by Spark's analyser, so the plan cannot say what that use reads), and not below a
    node whose template is its input's own (a stand-in that does not show what the node reads,
    such as ``dropDuplicatesWithinWatermark`` keyed by a map)."""
    seen: dict[int, int] = {}
    hidden: set[int] = set()
    for node in plan.walk():
        seen[id(node)] = seen.get(id(node), 0) + 1
        if any(c.template is node.template for c in node.children):
            hidden.update(id(n) for c in node.children for n in c.walk())
    return [
        n for n in plan.walk()
        if isinstance(n, Aggregate) and _prunable(n, plan) and seen[id(n)] == 1 and id(n) not in hidden
    ]


def _aggregate_ids(node: Aggregate) -> tuple[int, ...]:
    return _ids(java_dataframe(node.template).queryExecution().analyzed().output())


def prune_unread_aggregates(plan: LogicalPlan) -> LogicalPlan:
    """``plan`` with each ``Aggregate`` marked with the positions of its aggregate columns that
    Spark's optimizer would drop (``Aggregate.unread``); the plan itself when there are none."""
    if plan in _PRUNED:
        return _PRUNED[plan] or plan
    out = plan
    candidates = _candidates(plan)
    if candidates:
        try:
            out = _marked(plan, candidates)
        except Exception:  # pruning only follows Spark's optimizer; never block a query on it
            logger.warning("could not read which aggregate columns are unread; every column is computed", exc_info=True)
    # the plan itself is kept as None: a value holding its own weak key would never be freed
    _PRUNED[plan] = out if out is not plan else None
    return out


def _marked(plan: LogicalPlan, candidates: list[Aggregate]) -> LogicalPlan:
    unread = unread_aggregate_outputs(jvm_operator(java_dataframe(plan.template).queryExecution().analyzed()))
    positions: dict[int, frozenset[int]] = {}
    for node in candidates:
        ids = _aggregate_ids(node)
        dropped = unread.get(ids)
        if not dropped or len(ids) != len(node.grouping_names) + len(node.aggregates):
            # nothing unread, or columns not laid out as grouping then aggregates
            # (spark.sql.retainGroupColumns=false): positions would not line up
            continue
        aggregate_ids = ids[len(node.grouping_names) :]
        positions[id(node)] = frozenset(i for i, a in enumerate(aggregate_ids) if a in dropped)
        logger.debug("aggregate columns no operator reads, not computed: %s", [node.aggregate_names[i] for i in sorted(positions[id(node)])])
    if not positions:
        return plan
    memo: dict[int, LogicalPlan] = {}

    def rebuild(node: LogicalPlan) -> LogicalPlan:
        if id(node) in memo:
            return memo[id(node)]
        children = tuple(rebuild(c) for c in node.children)
        out = node
        if any(a is not b for a, b in zip(children, node.children)):
            out = node.with_new_children(children)
        if id(node) in positions and isinstance(out, Aggregate):
            out = dataclasses.replace(out, unread=positions[id(node)])
        memo[id(node)] = out
        return out

    return rebuild(plan)
