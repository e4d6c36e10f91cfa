"""Filter pushdown on the streaming logical plan: the part of Spark's optimizer that changes what a
streaming query computes.

Spark optimizes each micro-batch's plan with its batch optimizer. Its ``PushDownPredicates``
(``PushPredicateThroughNonJoin`` together with ``CombineFilters``) moves every conjunct of a
filter down as far as it can go:

* through a projection whose expressions are all deterministic, with the projection's aliases
  substituted into the conjunct (a non-deterministic conjunct passes projections too);
* through another filter whose condition is deterministic, and through sorts, ``Expand``,
  generators and the like, when the conjunct is deterministic and uses only their input columns;
* into every input of a union, column by column, when deterministic;
* below an aggregation with grouping keys whose expressions are all deterministic, when the
  conjunct is deterministic, uses at least one column, and after substituting the aggregation's
  non-aggregate aliases uses only the aggregation's input columns (so: only grouping keys);
* below ``EventTimeWatermark`` when it is deterministic and does not use the event-time column.

For a batch query this only saves work, but two of those moves change a streaming query's
results. Rows removed below ``EventTimeWatermark`` never reach the event-time statistics, so the
watermark and the progress report's min/max/avg ignore them (reference §3.1, scenario S38). Keys
removed below a streaming aggregation never reach the state store, so state row counts and late
row counts ignore them. Checked on Spark 4.1.4 by reading each streaming batch's optimized plan.

statestream replays the user's operations on each batch in the order written, its
``EventTimeWatermarkExec`` observes rows where ``withWatermark`` stands, and its aggregation keeps
every key it is fed. So ``push_down_filters`` works out where Spark's optimizer would leave each
conjunct and puts a copy of it right below the *lowest* watermark or aggregation the conjunct
would move past (filtering there removes the rows from everything above; a deterministic filter
applied twice keeps the same rows, so the original filter may stay). A user filter all of whose
conjuncts got such a copy is dropped, as Spark's would be.

Where a conjunct would stop *inside* an aggregation node, between Spark's ``Aggregate`` and the
operators ``window()`` or ``cube()`` put below it (an ``Expand``), the copy becomes a *key filter*
of the aggregation: applied to the grouped rows before they meet the state, which keeps and drops
exactly the keys Spark's pushed filter does, since such a conjunct only reads grouping keys.
Session-window aggregations get no key filter (their keys change when sessions merge).

The rule is pure: the facts it needs (Spark's analysed operators of every node, the conjuncts, the
attributes they use, alias maps) come from a ``PlanInspector``. ``JvmPlanInspector`` reads them
from the nodes' templates through py4j; unit tests pass a fake one.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

from statestream._jvm.calls import java_column, jvm_seq, jvm_view
from statestream.plan.joins import stream_side_conjuncts
from statestream.plan.logical import (
    Aggregate,
    AggregationFinality,
    EventTimeWatermark,
    Join,
    LogicalPlan,
    Stateless,
    Union,
    UnaryNode,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Expr",
    "ProjectStep",
    "FilterStep",
    "PassThroughStep",
    "WatermarkStep",
    "AggregateStep",
    "OpaqueStep",
    "JoinStep",
    "join_pushable_sides",
    "NodeFacts",
    "PlanInspector",
    "Placement",
    "KeyFilter",
    "find_pushdowns",
    "push_down_filters",
    "JvmPlanInspector",
]


class Expr(Protocol):
    """An analysed expression, as far as pushdown needs it. Attributes are identified by id
    (Spark's ``exprId``)."""

    @property
    def references(self) -> frozenset[int]: ...

    @property
    def deterministic(self) -> bool: ...

    @property
    def key(self) -> Any:
        """A hashable identity of the expression (two equal conjuncts have equal keys)."""
        ...

    def substitute(self, mapping: Mapping[int, "Expr"]) -> "Expr":
        """The expression with each attribute whose id is in ``mapping`` replaced by its value."""
        ...


# ---------------------------------------------------------------------------------------------
# Facts: Spark's analysed operators of one node, from its output down to its input(s)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectStep:
    """A projection; ``aliases`` maps each aliased output attribute to its expression. Also used
    for pure renamings (one attribute to another) at node boundaries."""

    aliases: Mapping[int, Expr] = field(default_factory=dict)
    deterministic: bool = True


@dataclass(frozen=True)
class FilterStep:
    """A filter: its condition split on ``AND``, each conjunct over the filter's input.
    ``inferred``: Spark's optimizer adds it (a join's ``isnotnull(k)``), so no node of the plan
    holds it; it is written where Spark's ends up, however far that is."""

    conjuncts: tuple[Expr, ...] = ()
    deterministic: bool = True
    inferred: bool = False


@dataclass(frozen=True)
class PassThroughStep:
    """An operator a deterministic conjunct passes when it only uses the operator's input columns
    (Spark's ``canPushThrough``: Sort, Expand, Generate, Python evaluation, repartitioning...)."""

    child_output: frozenset[int] = frozenset()
    deterministic: bool = True
    name: str = ""


@dataclass(frozen=True)
class WatermarkStep:
    """``EventTimeWatermark`` on the attribute ``event_time`` (its id at the node's output)."""

    event_time: int


@dataclass(frozen=True)
class AggregateStep:
    """An aggregation. ``aliases``: its non-aggregate aliases; ``child_output``: its input
    attributes; ``grouping_output``: the output attributes of its grouping keys."""

    aliases: Mapping[int, Expr] = field(default_factory=dict)
    child_output: frozenset[int] = frozenset()
    grouping_output: frozenset[int] = frozenset()
    deterministic: bool = True
    has_grouping: bool = True


@dataclass(frozen=True)
class JoinStep:
    """Into one side of a join: a deterministic conjunct over that side's columns only passes
    when the join type lets Spark push a filter above the join into that side
    (``PushPredicateThroughJoin``); ``side_output``: that side's output attributes."""

    side_output: frozenset[int] = frozenset()
    pushable: bool = False


def join_pushable_sides(join_type: str) -> tuple[int, ...]:
    """The sides (0 left, 1 right) into which Spark pushes a filter standing above a join of this
    type: both for inner and cross joins, the left side for left outer, semi and anti joins (the
    side whose rows are kept), the right side for right outer joins, none for full outer joins."""
    if join_type in ("Inner", "Cross"):
        return (0, 1)
    if join_type in ("LeftOuter", "LeftSemi", "LeftAnti"):
        return (0,)
    if join_type == "RightOuter":
        return (1,)
    return ()


@dataclass(frozen=True)
class OpaqueStep:
    """An operator no conjunct passes (deduplication, limit, sample, anything unknown)."""

    name: str = ""


Step = ProjectStep | FilterStep | PassThroughStep | WatermarkStep | AggregateStep | JoinStep | OpaqueStep


@dataclass(frozen=True)
class NodeFacts:
    """The analysed operators of one logical node, output side first, one list per child (a
    union or a join has several). Each list ends where the child's own output begins: attributes
    are the child's from there on (a renaming ``ProjectStep`` bridges differing ids). A join's
    lists hold a ``JoinStep`` into their side, then the filters Spark's optimizer puts on that
    side (inferred from the join) as a ``FilterStep``."""

    branches: tuple[tuple[Step, ...], ...]


class PlanInspector(Protocol):
    def facts(self, node: LogicalPlan) -> NodeFacts | None:
        """The node's facts, or ``None`` when they cannot be read (the node stops every conjunct)."""
        ...

    def to_column(self, expr: Expr, output: LogicalPlan | Sequence[str]) -> Any | None:
        """An executable predicate (a PySpark ``Column``) for ``expr`` over the output of
        ``output`` (a node, or a list of column names), or ``None`` if it cannot be written
        there (for example two columns share a name)."""
        ...


# ---------------------------------------------------------------------------------------------
# Where each conjunct ends up
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Put ``predicate`` (over ``node.children[child_index]``'s output) between ``node`` and
    that child."""

    node: LogicalPlan
    child_index: int
    predicate: Expr


@dataclass(frozen=True)
class KeyFilter:
    """Filter the grouped rows of ``node`` with ``predicate`` (over its grouping outputs) before
    they meet the state."""

    node: Aggregate
    predicate: Expr


Target = Placement | KeyFilter


@dataclass(frozen=True)
class _Source:
    """A filter of the plan: the node holding it and where in its facts it sits."""

    node: LogicalPlan
    branch: int
    step: int
    conjuncts: tuple[Expr, ...]
    inferred: bool = False


def _sources(plan: LogicalPlan, inspector: PlanInspector) -> list[_Source]:
    found = []
    seen: set[int] = set()
    for node in plan.walk():
        if id(node) in seen:
            continue
        seen.add(id(node))
        facts = inspector.facts(node)
        if facts is None:
            continue
        for b, steps in enumerate(facts.branches):
            for i, s in enumerate(steps):
                if isinstance(s, FilterStep) and s.conjuncts:
                    found.append(_Source(node, b, i, s.conjuncts, s.inferred))
    return found


def _key_filters_allowed(node: LogicalPlan) -> bool:
    return isinstance(node, Aggregate) and not node.is_session_window()


def _sink(
    expr: Expr,
    node: LogicalPlan,
    branch: int,
    start: int,
    inspector: PlanInspector,
    best: Target | None,
    lowest: bool = False,
) -> list[Target | None]:
    """Move ``expr`` (over the input of step ``start`` of ``node``'s branch) down as Spark would.
    Returns, for every path it can take, the copy to make (``None``: it crosses no watermark or
    aggregation on that path, so the filter where it stands already does what Spark's would).
    With ``lowest`` (an inferred filter, which stands nowhere yet) the copy goes where the
    conjunct stops on each path, whatever it crossed."""
    facts = inspector.facts(node)
    if facts is None or branch >= len(facts.branches):
        return [best]
    crossed = False
    for step in facts.branches[branch][start:]:
        if isinstance(step, ProjectStep):
            if not step.deterministic:
                return [best]
            expr = expr.substitute(step.aliases)
        elif isinstance(step, FilterStep):
            if not (step.deterministic and expr.deterministic):
                return [best]
        elif isinstance(step, PassThroughStep):
            if not (step.deterministic and expr.deterministic and expr.references <= step.child_output):
                return [best]
        elif isinstance(step, JoinStep):
            if not (step.pushable and expr.deterministic and expr.references <= step.side_output):
                return [best]
        elif isinstance(step, WatermarkStep):
            if not expr.deterministic or step.event_time in expr.references:
                return [best]
            crossed = True
        elif isinstance(step, AggregateStep):
            replaced = expr.substitute(step.aliases)
            if not (
                step.deterministic
                and step.has_grouping
                and expr.deterministic
                and expr.references
                and replaced.references <= step.child_output
            ):
                return [best]
            if _key_filters_allowed(node) and expr.references <= step.grouping_output:
                best = KeyFilter(node, expr)  # type: ignore[arg-type]
            expr = replaced
            crossed = True
        else:  # OpaqueStep or unknown
            return [best]
    children = node.children
    if branch >= len(children):
        return [best]
    if crossed or lowest:
        best = Placement(node, branch, expr)
    child = children[branch]
    child_facts = inspector.facts(child)
    if child_facts is None or not child.children:
        return [best]
    out: list[Target | None] = []
    for b in range(len(child_facts.branches)):
        out.extend(_sink(expr, child, b, 0, inspector, best, lowest))
    return out


def find_pushdowns(plan: LogicalPlan, inspector: PlanInspector) -> tuple[list[Target], set[int]]:
    """Every copy to make, de-duplicated, and the ids of the user filters (``Stateless`` nodes
    that are one ``Filter``) all of whose conjuncts got a copy on every path."""
    targets: list[Target] = []
    seen: set[tuple] = set()
    removable: set[int] = set()
    for src in _sources(plan, inspector):
        all_placed = True
        for conjunct in src.conjuncts:
            for t in _sink(conjunct, src.node, src.branch, src.step + 1, inspector, None, src.inferred):
                if t is None:
                    all_placed = False
                    continue
                k = (type(t).__name__, id(t.node), getattr(t, "child_index", -1), t.predicate.key)
                if k not in seen:
                    seen.add(k)
                    targets.append(t)
        facts = inspector.facts(src.node)
        if (
            all_placed
            and isinstance(src.node, Stateless)
            and src.node.op == "Filter"
            and facts is not None
            and len(facts.branches) == 1
            and all(isinstance(s, ProjectStep) for s in facts.branches[0][1:])
            and src.step == 0
        ):
            removable.add(id(src.node))
    return targets, removable


# ---------------------------------------------------------------------------------------------
# Rewriting the plan
# ---------------------------------------------------------------------------------------------


def _filter_node(child: LogicalPlan, columns: list[Any], description: str) -> Stateless:
    cond = columns[0]
    for c in columns[1:]:
        cond = cond & c

    def transform(df: Any, _cond: Any = cond) -> Any:
        return df.filter(_cond)

    return Stateless(
        template=transform(child.template), child=child, op="Filter", description=description, transform=transform, columns=(cond,)
    )


def _describe(columns: Iterable[Any]) -> str:
    parts = []
    for c in columns:
        try:
            parts.append(str(java_column(c).node().sql()))
        except Exception:  # noqa: BLE001 - description only
            parts.append(str(c))
    return " AND ".join(parts)


def _spark_text(expr: Expr) -> str | None:
    """A pushed conjunct as Spark's plan prints it (``isnotnull(k)``), attribute ids removed;
    ``None`` for an expression that is not Spark's."""
    import re

    j = getattr(expr, "j", None)
    if j is None:
        return None
    try:
        return re.sub(r"#\d+L?", "", str(j.toString()))
    except Exception:  # noqa: BLE001 - description only
        return None


def _and_text(texts: Sequence[str | None]) -> str:
    """Conjuncts joined as Spark prints an ``And`` (``(a AND b)``, nested from the left)."""
    out = str(texts[0])
    for t in texts[1:]:
        out = f"({out} AND {t})"
    return out


def _untangle(plan: LogicalPlan) -> LogicalPlan:
    """The plan as a tree: an inner node reached along two paths (a DataFrame used twice, as in
    ``w.union(w.select(...))``) is copied, so that a copy placed below it on one path does not
    show up on the other, as in Spark where the analyser gives each use its own operators.
    Leaves keep their identity."""
    seen: set[int] = set()

    def go(node: LogicalPlan) -> LogicalPlan:
        if not node.children:
            return node
        if isinstance(node, (Union, Join)):
            out: LogicalPlan = dataclasses.replace(node)  # a copy, even if no child changes
            out = out.with_new_children(tuple(go(c) for c in node.children))
        elif isinstance(node, UnaryNode) and node.child is not None:
            out = dataclasses.replace(node, child=go(node.child))
        else:
            return node
        if id(node) not in seen:
            seen.add(id(node))
            if all(a is b for a, b in zip(out.children, node.children)):
                return node
        return out

    shared = False
    counts: dict[int, int] = {}
    for n in plan.walk():
        if n.children:
            counts[id(n)] = counts.get(id(n), 0) + 1
            shared = shared or counts[id(n)] > 1
    return go(plan) if shared else plan


def push_down_filters(plan: LogicalPlan, inspector: PlanInspector | None = None) -> LogicalPlan:
    """``plan`` with copies of filters put where Spark's optimizer would move them, as far as
    that changes streaming results (see the module docstring). Leaves (sources) keep their
    identity, since the query maps them to offset-log positions by object."""
    inspector = inspector if inspector is not None else JvmPlanInspector()
    plan = _untangle(plan)
    try:
        targets, removable = find_pushdowns(plan, inspector)
    except Exception:  # pushdown only refines statistics; never block a query on it
        logger.warning("filter pushdown analysis failed; filters stay where they were written", exc_info=True)
        return plan
    if not targets and not removable:
        return plan

    below: dict[tuple[int, int], list[Any]] = {}
    shown: dict[tuple[int, int], list[str | None]] = {}
    keys: dict[int, list[Any]] = {}
    placed_everything = True
    for t in targets:
        if isinstance(t, KeyFilter):
            col = inspector.to_column(t.predicate, t.node.grouping_names)
            if col is None:
                placed_everything = False
                continue
            keys.setdefault(id(t.node), []).append(col)
        else:
            col = inspector.to_column(t.predicate, t.node.children[t.child_index])
            if col is None:
                placed_everything = False
                continue
            below.setdefault((id(t.node), t.child_index), []).append(col)
            shown.setdefault((id(t.node), t.child_index), []).append(_spark_text(t.predicate))
    if not placed_everything:
        removable = set()  # a copy could not be written: keep every filter where it was
    logger.debug("filter pushdown: %d copies below nodes, %d key filters, %d filters dropped", len(below), len(keys), len(removable))

    memo: dict[int, LogicalPlan] = {}

    def rebuild(node: LogicalPlan) -> LogicalPlan:
        if id(node) in memo:
            return memo[id(node)]
        new_children = []
        for i, c in enumerate(node.children):
            nc = rebuild(c)
            cols = below.get((id(node), i))
            if cols:
                texts = shown.get((id(node), i), [])
                described = _and_text(texts) if texts and all(texts) else _describe(cols)
                nc = _filter_node(nc, cols, described)
            new_children.append(nc)
        out = node
        if id(node) in removable and isinstance(node, UnaryNode):
            out = new_children[0]
        elif isinstance(node, (Union, Join)):
            out = node.with_new_children(tuple(new_children))
        elif isinstance(node, UnaryNode) and node.child is not None:
            if new_children[0] is not node.child:
                out = dataclasses.replace(node, child=new_children[0])
        if isinstance(out, Aggregate) and id(node) in keys:
            out = dataclasses.replace(out, key_filters=tuple(out.key_filters) + tuple(keys[id(node)]))
        memo[id(node)] = out
        return out

    return rebuild(plan)


# ---------------------------------------------------------------------------------------------
# Facts from Spark's analysed plans (py4j)
# ---------------------------------------------------------------------------------------------

#: Spark's ``canPushThrough`` operators, plus ``SubqueryAlias`` (removed before pushdown runs).
_PASS_THROUGH = frozenset(
    {
        "AppendColumns",
        "Distinct",
        "Generate",
        "Pivot",
        "RepartitionByExpression",
        "Repartition",
        "RebalancePartitions",
        "ScriptTransformation",
        "Sort",
        "BatchEvalPython",
        "ArrowEvalPython",
        "Expand",
        "SubqueryAlias",
        "ResolvedHint",
    }
)


def rebuild_expression(e: Any, fn: Any, seq: Any) -> Any:
    """A JVM (Catalyst) expression tree with every node for which ``fn`` returns a replacement
    replaced (top down; a replaced node's children are not visited); ``seq`` makes a Scala Seq of
    new children. Unchanged subtrees are kept as they are."""
    replaced = fn(e)
    if replaced is not None:
        return replaced
    kids = jvm_seq(e.children())
    if not kids:
        return e
    new = [rebuild_expression(k, fn, seq) for k in kids]
    if all(n is k for n, k in zip(new, kids)):
        return e
    return e.withNewChildren(seq(new))


def _jclass(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def _attr_id(attr: Any) -> int:
    return int(attr.exprId().id())


class JvmExpr:
    """``Expr`` over a Spark ``Expression`` reached through py4j."""

    __slots__ = ("j", "_jvm", "_refs", "_key")

    def __init__(self, j: Any, jvm: Any) -> None:
        self.j = j
        self._jvm = jvm
        self._refs: frozenset[int] | None = None
        self._key: str | None = None

    @property
    def references(self) -> frozenset[int]:
        if self._refs is None:
            self._refs = frozenset(_attr_id(a) for a in jvm_seq(self.j.references().toSeq()))
        return self._refs

    @property
    def deterministic(self) -> bool:
        return bool(self.j.deterministic())

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = str(self.j.canonicalized().toString())
        return self._key

    def _seq(self, items: list[Any]) -> Any:
        conv = self._jvm.scala.jdk.javaapi.CollectionConverters
        return conv.asScala(self._jvm.java.util.ArrayList(items)).toSeq()

    def _rebuild(self, e: Any, fn: Any) -> Any:
        return rebuild_expression(e, fn, self._seq)

    def substitute(self, mapping: Mapping[int, Expr]) -> "JvmExpr":
        if not mapping or not (self.references & mapping.keys()):
            return self

        def fn(e: Any) -> Any:
            if _jclass(e) == "AttributeReference":
                target = mapping.get(_attr_id(e))
                if target is not None:
                    return target.j  # type: ignore[attr-defined]
                return e
            return None

        return JvmExpr(self._rebuild(self.j, fn), self._jvm)

    def unresolved(self) -> Any:
        """The expression with attributes replaced by names (resolved again against whatever
        DataFrame it is applied to) and inner aliases removed."""
        jvm = self._jvm

        def fn(e: Any) -> Any:
            kind = _jclass(e)
            if kind == "AttributeReference":
                return jvm.org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute.quoted(e.name())
            if kind == "Alias":
                return self._rebuild(e.child(), fn)
            return None

        return self._rebuild(self.j, fn)

    def attribute_names(self) -> list[str]:
        return [str(a.name()) for a in jvm_seq(self.j.references().toSeq())]


def _split_conjuncts(e: Any) -> list[Any]:
    if _jclass(e) == "And":
        return _split_conjuncts(e.left()) + _split_conjuncts(e.right())
    return [e]


def contains_aggregate(e: Any) -> bool:
    """Whether one of Spark's analysed expressions (a py4j proxy) holds an aggregate function
    (an ``AggregateExpression``, a Python UDAF or a grouped-aggregate pandas UDF)."""
    stack = [e]
    while stack:
        x = stack.pop()
        kind = _jclass(x)
        if kind in ("AggregateExpression", "PythonUDAF"):
            return True
        if kind == "PythonUDF" and int(x.evalType()) == 200:  # grouped-aggregate pandas UDF
            return True
        stack.extend(jvm_seq(x.children()))
    return False


class JvmPlanInspector:
    """``PlanInspector`` reading Spark's analysed plans of the nodes' templates.

    A node's template holds its whole lineage analysed on empty relations; the operators the
    node adds are those above its child's analysed plan (found by identity, else by
    ``sameResult``). Results are cached per node for the life of the inspector.
    """

    def __init__(self) -> None:
        self._cache: dict[int, NodeFacts | None] = {}
        self._analyzed: dict[int, Any] = {}
        self._jvm: Any = None

    # -- helpers
    def _an(self, node: LogicalPlan) -> Any:
        key = id(node.template)
        if key not in self._analyzed:
            jdf = getattr(node.template, "_jdf", None)
            self._analyzed[key] = jdf.queryExecution().analyzed() if jdf is not None else None
            if self._jvm is None and jdf is not None:
                self._jvm = jvm_view(node.template.sparkSession)
        return self._analyzed[key]

    def _expr(self, j: Any) -> JvmExpr:
        return JvmExpr(j, self._jvm)

    def _remap(self, from_attrs: list[Any], to_attrs: list[Any]) -> ProjectStep | None:
        if len(from_attrs) != len(to_attrs):
            return None
        aliases = {}
        for f, t in zip(from_attrs, to_attrs):
            if _attr_id(f) != _attr_id(t):
                aliases[_attr_id(f)] = self._expr(t)
        return ProjectStep(aliases=aliases)

    def _step(self, op: Any) -> Step:
        name = str(op.nodeName())
        if name == "Project":
            aliases = {}
            det = True
            for ne in jvm_seq(op.projectList()):
                det = det and bool(ne.deterministic())
                if _jclass(ne) == "Alias":
                    aliases[_attr_id(ne.toAttribute())] = self._expr(ne.child())
            return ProjectStep(aliases=aliases, deterministic=det)
        if name == "Filter":
            cond = op.condition()
            return FilterStep(
                conjuncts=tuple(self._expr(c) for c in _split_conjuncts(cond)), deterministic=bool(cond.deterministic())
            )
        if name == "Aggregate":
            aliases = {}
            det = True
            for ne in jvm_seq(op.aggregateExpressions()):
                det = det and bool(ne.deterministic())
                if _jclass(ne) == "Alias" and not contains_aggregate(ne.child()):
                    aliases[_attr_id(ne.toAttribute())] = self._expr(ne.child())
            return AggregateStep(
                aliases=aliases,
                child_output=frozenset(_attr_id(a) for a in jvm_seq(op.child().output())),
                deterministic=det,
                has_grouping=op.groupingExpressions().size() > 0,
            )
        if name in _PASS_THROUGH:
            det = all(bool(e.deterministic()) for e in jvm_seq(op.expressions()))
            return PassThroughStep(
                child_output=frozenset(_attr_id(a) for a in jvm_seq(op.child().output())), deterministic=det, name=name
            )
        return OpaqueStep(name)

    def _chain(self, top: Any, target: Any) -> list[Step] | None:
        """Steps from ``top`` down to ``target`` (exclusive), then the renaming onto it."""
        steps: list[Step] = []
        op = top
        for _ in range(1000):
            if op.equals(target) or op.sameResult(target):
                remap = self._remap(jvm_seq(op.output()), jvm_seq(target.output()))
                if remap is None:
                    return None
                if remap.aliases:
                    steps.append(remap)
                return steps
            kids = jvm_seq(op.children())
            if len(kids) != 1:
                return None
            steps.append(self._step(op))
            op = kids[0]
        return None

    # -- PlanInspector
    def facts(self, node: LogicalPlan) -> NodeFacts | None:
        if id(node) not in self._cache:
            try:
                self._cache[id(node)] = self._compute(node)
            except Exception:  # unreadable facts make the node a wall, nothing worse
                logger.debug("could not read the analysed operators of %s", node.node_name, exc_info=True)
                self._cache[id(node)] = None
        return self._cache[id(node)]

    def _compute(self, node: LogicalPlan) -> NodeFacts | None:
        children = node.children
        if not children:
            return NodeFacts(branches=())
        top = self._an(node)
        targets = [self._an(c) for c in children]
        if top is None or any(t is None for t in targets):
            return None
        if isinstance(node, Join):
            return self._join_facts(node, top, targets)
        if isinstance(node, AggregationFinality):
            # its template's literals are no values of the rows: a conjunct reading them stays
            # above, one over the aggregation's own columns passes
            child_output = frozenset(_attr_id(a) for a in jvm_seq(targets[0].output()))
            return NodeFacts(branches=((PassThroughStep(child_output=child_output, name="AggregationFinality"),),))
        if isinstance(node, Union):
            if str(top.nodeName()) != "Union":
                return NodeFacts(branches=tuple((OpaqueStep("Union"),) for _ in children))
            kids = jvm_seq(top.children())
            if len(kids) != len(children):
                return None
            out = jvm_seq(top.output())
            branches: list[tuple[Step, ...]] = []
            for k, t in zip(kids, targets):
                into = self._remap(out, jvm_seq(k.output()))
                chain = self._chain(k, t)
                if into is None or chain is None:
                    branches.append((OpaqueStep("Union"),))
                else:
                    branches.append(tuple([into, *chain]))
            return NodeFacts(branches=tuple(branches))
        chain = self._chain(top, targets[0])
        if chain is None:
            return NodeFacts(branches=((OpaqueStep(node.node_name),),))
        if isinstance(node, EventTimeWatermark):
            et = [a for a in jvm_seq(top.output()) if str(a.name()) == node.column]
            if len(et) != 1:
                return NodeFacts(branches=((OpaqueStep("EventTimeWatermark"),),))
            chain = [WatermarkStep(_attr_id(et[0])), *chain]
        elif isinstance(node, Aggregate):
            n = len(node.grouping)
            grouping_ids = frozenset(_attr_id(a) for a in jvm_seq(top.output())[:n])
            chain = [dataclasses.replace(s, grouping_output=grouping_ids) if isinstance(s, AggregateStep) else s for s in chain]
        return NodeFacts(branches=(tuple(chain),))

    def _join_facts(self, node: Join, top: Any, targets: list[Any]) -> NodeFacts:
        """A join's facts: from its output down to Spark's ``Join`` operator (a projection for
        ``on=`` column names), then per side a ``JoinStep``, the filters Spark's optimizer puts
        right above that side (``plan/joins.py``, renamed onto this template's attributes) and
        the operators down to the side's own template."""
        opaque = NodeFacts(branches=tuple((OpaqueStep("Join"),) for _ in targets))
        join_op = top
        while str(join_op.nodeName()) != "Join":
            kids = jvm_seq(join_op.children())
            if len(kids) != 1:
                return opaque
            join_op = kids[0]
        above = self._chain(top, join_op)
        kids = jvm_seq(join_op.children())
        if above is None or len(kids) != len(targets):
            return opaque
        inferred = stream_side_conjuncts(node)
        pushable = join_pushable_sides(node.join_type)
        branches = []
        for side, (kid, target) in enumerate(zip(kids, targets)):
            output = jvm_seq(kid.output())
            steps: list[Step] = [*above, JoinStep(frozenset(_attr_id(a) for a in output), side in pushable)]
            found = inferred.get(side, [])
            if found:
                conjuncts = []
                for jexpr, standin_ids in found:
                    if len(standin_ids) != len(output):
                        continue
                    renaming = {i: self._expr(a) for i, a in zip(standin_ids, output)}
                    conjuncts.append(self._expr(jexpr).substitute(renaming))
                if conjuncts:
                    steps.append(FilterStep(conjuncts=tuple(conjuncts), inferred=True))
            chain = self._chain(kid, target)
            branches.append(tuple([*steps, *chain]) if chain is not None else (OpaqueStep("Join"),))
        return NodeFacts(branches=tuple(branches))

    def to_column(self, expr: Expr, output: LogicalPlan | Sequence[str]) -> Any | None:
        if not isinstance(expr, JvmExpr) or self._jvm is None:
            return None
        names = list(output.schema.names) if isinstance(output, LogicalPlan) else list(output)
        lowered = [n.lower() for n in names]
        for n in expr.attribute_names():
            if lowered.count(n.lower()) != 1:
                logger.debug("pushed filter not written: column %r is missing or ambiguous among %s", n, names)
                return None
        from pyspark.sql import Column

        jvm = self._jvm
        node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(expr.unresolved())
        col = Column(jvm.org.apache.spark.sql.Column(node))
        if isinstance(output, LogicalPlan):
            try:
                output.template.filter(col).schema  # noqa: B018 - analyse once, at start()
            except Exception:  # keep the filter where it was rather than fail the query
                logger.debug("pushed filter does not analyse over %s", output.node_name, exc_info=True)
                return None
        return col
