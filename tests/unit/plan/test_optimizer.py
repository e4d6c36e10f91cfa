"""Pure tests of the filter pushdown rule (``statestream/plan/optimizer.py``), no Spark session.

Expressions are small trees over attribute ids; each node's facts (Spark's analysed operators)
come from a fake inspector. The rules mirrored are Spark 4.1's ``PushPredicateThroughNonJoin``
and ``CombineFilters`` as observed on streaming batches (see the differential tests in
``tests/differential/test_semantics_gaps.py`` for the same shapes against Spark's engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pyspark.sql.types import LongType, StructField, StructType

from statestream.plan import optimizer as O
from statestream.plan.logical import (
    SESSION_WINDOW_KEY,
    WATERMARK_DELAY_KEY,
    Aggregate,
    Deduplicate,
    EventTimeWatermark,
    LogicalPlan,
    Stateless,
    StreamingRelation,
    Union,
)

# ------------------------------------------------------------------------------ fakes


@dataclass(frozen=True)
class E:
    """A fake analysed expression: an attribute (``ref``), a literal, or a call."""

    op: str
    args: tuple["E", ...] = ()
    attr: int = 0
    det: bool = True

    @property
    def references(self) -> frozenset[int]:
        if self.op == "ref":
            return frozenset({self.attr})
        out: frozenset[int] = frozenset()
        for a in self.args:
            out |= a.references
        return out

    @property
    def deterministic(self) -> bool:
        return self.det and all(a.deterministic for a in self.args)

    @property
    def key(self) -> "E":
        return self

    def substitute(self, mapping: Mapping[int, Any]) -> "E":
        if self.op == "ref":
            return mapping.get(self.attr, self)
        return E(self.op, tuple(a.substitute(mapping) for a in self.args), self.attr, self.det)


def ref(i: int) -> E:
    return E("ref", attr=i)


def lit(v: int) -> E:
    return E(f"lit{v}")


def gt(a: E, b: E) -> E:
    return E(">", (a, b))


def rand() -> E:
    return E("rand", det=False)


@dataclass
class FakeTemplate:
    schema: StructType
    filters: list = field(default_factory=list)

    def filter(self, cond: Any) -> "FakeTemplate":
        return FakeTemplate(self.schema, self.filters + [cond])


def tpl(*names: str, md: dict[str, dict] | None = None) -> FakeTemplate:
    md = md or {}
    return FakeTemplate(StructType([StructField(n, LongType(), True, md.get(n, {})) for n in names]))


class FakeInspector:
    def __init__(self) -> None:
        self.by_node: dict[int, O.NodeFacts] = {}

    def add(self, node: LogicalPlan, *branches: tuple) -> None:
        self.by_node[id(node)] = O.NodeFacts(branches=tuple(tuple(b) for b in branches))

    def facts(self, node: LogicalPlan) -> O.NodeFacts | None:
        if not node.children:
            return O.NodeFacts(branches=())
        return self.by_node.get(id(node))

    def to_column(self, expr: Any, output: Any) -> Any:
        names = tuple(output.schema.names) if isinstance(output, LogicalPlan) else tuple(output)
        return ("col", expr, names)


# attribute ids: 1 ts, 2 k, 3 x at the source; 11 ts, 12 k, 13 x after withWatermark (marked)
def source() -> StreamingRelation:
    return StreamingRelation(template=tpl("ts", "k", "x"))


def watermark(child: LogicalPlan, insp: FakeInspector) -> EventTimeWatermark:
    w = EventTimeWatermark(template=tpl("ts", "k", "x", md={"ts": {WATERMARK_DELAY_KEY: 10}}), child=child, column="ts")
    insp.add(w, [O.WatermarkStep(11), O.ProjectStep({11: ref(1), 12: ref(2), 13: ref(3)})])
    return w


def filt(child: LogicalPlan, insp: FakeInspector, *conjuncts: E, det: bool = True) -> Stateless:
    f = Stateless(template=child.template, child=child, op="Filter")
    insp.add(f, [O.FilterStep(tuple(conjuncts), deterministic=det and all(c.deterministic for c in conjuncts))])
    return f


def project(child: LogicalPlan, insp: FakeInspector, aliases: dict[int, E], names: tuple[str, ...], det: bool = True) -> Stateless:
    p = Stateless(template=tpl(*names), child=child, op="Project")
    insp.add(p, [O.ProjectStep(aliases, deterministic=det)])
    return p


def targets(plan: LogicalPlan, insp: FakeInspector) -> list:
    return O.find_pushdowns(plan, insp)[0]


# ------------------------------------------------------------------------------ watermark


def test_filter_not_on_event_time_goes_below_the_watermark_and_the_original_is_dropped():
    insp = FakeInspector()
    src = source()
    w = watermark(src, insp)
    f = filt(w, insp, gt(ref(13), lit(0)))
    (t,) = targets(f, insp)
    assert isinstance(t, O.Placement) and t.node is w and t.child_index == 0
    assert t.predicate == gt(ref(3), lit(0))  # over the source's attributes
    out = O.push_down_filters(f, insp)
    assert isinstance(out, EventTimeWatermark)
    pushed = out.child
    assert isinstance(pushed, Stateless) and pushed.op == "Filter" and pushed.child is src
    assert pushed.columns == (("col", gt(ref(3), lit(0)), ("ts", "k", "x")),)


def test_filter_on_event_time_stays_above():
    insp = FakeInspector()
    f = filt(watermark(source(), insp), insp, gt(ref(11), lit(5)))
    assert targets(f, insp) == []
    assert O.push_down_filters(f, insp) is f


def test_mixed_conjuncts_are_split_and_the_filter_stays():
    insp = FakeInspector()
    w = watermark(source(), insp)
    f = filt(w, insp, gt(ref(13), lit(0)), gt(ref(11), lit(5)))
    (t,) = targets(f, insp)
    assert t.predicate == gt(ref(3), lit(0))
    out = O.push_down_filters(f, insp)
    assert isinstance(out, Stateless) and out.op == "Filter"  # still applies the event-time conjunct
    assert isinstance(out.child, EventTimeWatermark) and isinstance(out.child.child, Stateless)


def test_non_deterministic_conjuncts_never_cross_the_watermark():
    insp = FakeInspector()
    f = filt(watermark(source(), insp), insp, E("and?", (rand(), ref(13))))
    assert targets(f, insp) == []
    f2 = filt(watermark(source(), insp), insp, gt(rand(), lit(0)), gt(ref(12), lit(1)))
    (t,) = targets(f2, insp)
    assert t.predicate == gt(ref(2), lit(1))


def test_aliases_of_projections_are_substituted():
    insp = FakeInspector()
    w = watermark(source(), insp)
    p = project(w, insp, {14: E("*", (ref(13), lit(2)))}, ("ts", "k", "x", "y"))
    f = filt(p, insp, gt(ref(14), lit(0)))
    (t,) = targets(f, insp)
    assert t.node is w and t.predicate == gt(E("*", (ref(3), lit(2))), lit(0))


def test_a_copy_of_the_event_time_column_is_still_the_event_time():
    insp = FakeInspector()
    w = watermark(source(), insp)
    p = project(w, insp, {14: ref(11)}, ("ts", "k", "x", "t2"))
    assert targets(filt(p, insp, gt(ref(14), lit(0))), insp) == []


def test_non_deterministic_projection_blocks():
    insp = FakeInspector()
    w = watermark(source(), insp)
    p = project(w, insp, {14: rand()}, ("ts", "k", "x", "r"), det=False)
    assert targets(filt(p, insp, gt(ref(13), lit(0))), insp) == []


def test_filters_in_between_pass_only_when_deterministic():
    insp = FakeInspector()
    w = watermark(source(), insp)
    lower = filt(w, insp, gt(ref(11), lit(0)))  # stays above the watermark itself
    upper = filt(lower, insp, gt(ref(13), lit(1)))
    (t,) = targets(upper, insp)
    assert t.node is w
    insp2 = FakeInspector()
    w2 = watermark(source(), insp2)
    nd = filt(w2, insp2, gt(rand(), lit(0)))
    assert targets(filt(nd, insp2, gt(ref(13), lit(1))), insp2) == []


def test_opaque_operators_stop_conjuncts():
    insp = FakeInspector()
    w = watermark(source(), insp)
    d = Deduplicate(template=w.template, child=w, keys=("k",))
    insp.add(d, [O.OpaqueStep("Deduplicate")])
    assert targets(filt(d, insp, gt(ref(12), lit(0))), insp) == []


def test_no_copy_without_a_barrier():
    insp = FakeInspector()
    p = project(source(), insp, {4: E("*", (ref(3), lit(2)))}, ("ts", "k", "x", "y"))
    f = filt(p, insp, gt(ref(4), lit(0)))
    assert targets(f, insp) == []
    assert O.push_down_filters(f, insp) is f


# ------------------------------------------------------------------------------ aggregation


def aggregate(child: LogicalPlan, insp: FakeInspector, internal: list | None = None, session: bool = False) -> Aggregate:
    """groupBy(k) (or a window key 20 when ``internal`` adds window operators) with count 22."""
    md = {"w": {SESSION_WINDOW_KEY: True}} if session else {}
    a = Aggregate(template=tpl("w", "k", "count", md=md), child=child, grouping=(object(), object()), aggregates=(object(),))
    steps = [O.AggregateStep({21: ref(20), 23: ref(12)}, frozenset({20, 11, 12, 13}), frozenset({21, 23}))]
    insp.add(a, steps + list(internal or []))
    return a


def test_conjunct_on_a_grouping_key_goes_below_the_aggregation_and_the_watermark():
    insp = FakeInspector()
    w = watermark(source(), insp)
    a = aggregate(w, insp, internal=[O.ProjectStep({20: E("window", (ref(11),))})])
    f = filt(a, insp, gt(ref(23), lit(0)))
    (t,) = targets(f, insp)
    assert t.node is w and t.predicate == gt(ref(2), lit(0))  # the lowest barrier wins


def test_conjunct_on_the_window_key_stays_above_the_watermark_but_below_the_aggregation():
    insp = FakeInspector()
    w = watermark(source(), insp)
    a = aggregate(w, insp, internal=[O.ProjectStep({20: E("window", (ref(11),))})])
    f = filt(a, insp, gt(ref(21), lit(0)))
    (t,) = targets(f, insp)
    assert isinstance(t, O.Placement) and t.node is a and t.predicate == gt(E("window", (ref(11),)), lit(0))
    out = O.push_down_filters(f, insp)
    assert isinstance(out, Aggregate) and isinstance(out.child, Stateless) and out.child.child is w


def test_conjunct_stopping_inside_the_aggregation_becomes_a_key_filter():
    insp = FakeInspector()
    w = watermark(source(), insp)
    expand = O.PassThroughStep(frozenset({11, 12, 13}), name="Expand")  # produces the window 20
    a = aggregate(w, insp, internal=[expand])
    f = filt(a, insp, gt(ref(21), lit(0)))
    (t,) = targets(f, insp)
    assert isinstance(t, O.KeyFilter) and t.node is a and t.predicate == gt(ref(21), lit(0))
    out = O.push_down_filters(f, insp)
    assert isinstance(out, Aggregate) and out.child is w
    assert out.key_filters == (("col", gt(ref(21), lit(0)), ("w", "k")),)


def test_session_window_aggregation_gets_no_key_filter():
    insp = FakeInspector()
    w = watermark(source(), insp)
    a = aggregate(w, insp, internal=[O.PassThroughStep(frozenset({11, 12, 13}), name="Expand")], session=True)
    assert targets(filt(a, insp, gt(ref(21), lit(0))), insp) == []


def test_aggregate_outputs_and_reference_free_conjuncts_stay_above():
    insp = FakeInspector()
    a = aggregate(watermark(source(), insp), insp)
    assert targets(filt(a, insp, gt(ref(22), lit(1))), insp) == []  # count
    assert targets(filt(a, insp, gt(lit(1), lit(0))), insp) == []  # no column at all


def test_global_aggregation_stops_conjuncts():
    insp = FakeInspector()
    w = watermark(source(), insp)
    a = Aggregate(template=tpl("count"), child=w, grouping=(), aggregates=(object(),))
    insp.add(a, [O.AggregateStep({}, frozenset({11, 12, 13}), frozenset(), has_grouping=False)])
    assert targets(filt(a, insp, gt(lit(1), lit(0))), insp) == []


# ------------------------------------------------------------------------------ union and sharing


def test_union_pushes_into_every_input_column_by_column():
    insp = FakeInspector()
    w1 = watermark(source(), insp)
    src2 = source()
    w2 = EventTimeWatermark(template=w1.template, child=src2, column="ts")
    insp.add(w2, [O.WatermarkStep(31), O.ProjectStep({31: ref(1), 32: ref(2), 33: ref(3)})])
    u = Union(template=w1.template, inputs=(w1, w2))
    insp.add(u, [O.ProjectStep({})], [O.ProjectStep({11: ref(31), 12: ref(32), 13: ref(33)})])
    f = filt(u, insp, gt(ref(13), lit(0)))
    ts = targets(f, insp)
    assert [(t.node, t.predicate) for t in ts] == [(w1, gt(ref(3), lit(0))), (w2, gt(ref(3), lit(0)))]
    out = O.push_down_filters(f, insp)
    assert isinstance(out, Union)
    assert all(isinstance(i.child, Stateless) for i in out.inputs)
    assert out.inputs[0].child.child is w1.child and out.inputs[1].child.child is src2


def test_filter_kept_when_one_union_input_has_no_barrier():
    insp = FakeInspector()
    w1 = watermark(source(), insp)
    src2 = source()
    u = Union(template=w1.template, inputs=(w1, src2))
    insp.add(u, [O.ProjectStep({})], [O.ProjectStep({11: ref(1), 12: ref(2), 13: ref(3)})])
    f = filt(u, insp, gt(ref(13), lit(0)))
    (t,) = targets(f, insp)
    assert t.node is w1
    out = O.push_down_filters(f, insp)
    assert isinstance(out, Stateless) and out.op == "Filter"


def test_a_node_used_twice_gets_its_own_copy_per_path():
    insp = FakeInspector()
    src = source()
    w = watermark(src, insp)
    p = project(w, insp, {14: E("+", (ref(13), lit(100)))}, ("ts", "k", "x"))
    # p's output x (14) is the union's second input; the union's output uses w's ids
    u = Union(template=w.template, inputs=(w, p))
    insp.add(u, [O.ProjectStep({})], [O.ProjectStep({13: ref(14)})])
    f = filt(u, insp, gt(ref(13), lit(0)))

    class Untangled(FakeInspector):
        """Copies made by the rule carry the facts of their original."""

        def facts(self, node):  # type: ignore[override]
            found = super().facts(node)
            if found is None:
                for orig in (w, p, u, f):
                    if type(orig) is type(node) and orig.template is node.template and orig.children and node.children:
                        return super().facts(orig)
            return found

    insp2 = Untangled()
    insp2.by_node = insp.by_node
    out = O.push_down_filters(f, insp2)
    assert isinstance(out, Union)
    first, second = out.inputs
    assert isinstance(first, EventTimeWatermark) and isinstance(second.child, EventTimeWatermark)
    assert first is not second.child  # the shared watermark was copied
    assert first.child.columns[0][1] == gt(ref(3), lit(0))
    assert second.child.child.columns[0][1] == gt(E("+", (ref(3), lit(100))), lit(0))
    assert first.child.child is src and second.child.child.child is src  # sources keep identity


def test_unreadable_facts_make_a_wall():
    insp = FakeInspector()
    w = watermark(source(), insp)
    mystery = Stateless(template=w.template, child=w, op="Mystery")  # no facts registered
    assert targets(filt(mystery, insp, gt(ref(13), lit(0))), insp) == []

