"""Joins on streams: which ones Spark accepts, and how a stream-static join is planned.

Spark (4.1): the ``Join`` cases of ``UnsupportedOperationChecker.checkForStreaming`` decide which
join types a streaming query may have, given which sides are streaming; a join of a stream with a
static DataFrame keeps no state: each micro-batch's plan joins that batch's rows with the static
side's plan, which is evaluated again in every batch (so a static side that reads files sees the
files its ``DataFrame`` lists; a ``spark.read.parquet(dir)`` keeps the listing it made when it was
created, as Spark's engine shows). statestream does the same: ``StreamStaticJoinExec`` hands the
batch's DataFrame and the static DataFrame to Spark's own batch ``join``, so the join's semantics,
its physical strategy (broadcast hints included) and the static side's evaluation are Spark's.

Joins of two streams (``StreamingSymmetricHashJoinExec`` in Spark) are planned by
``plan/stream_joins.py``; the cases Spark refuses get Spark's error from ``start()``.

The rule helpers (join type names, which combinations are refused and with which message) are
pure; the functions that ask Spark about a join (its physical plan for ``explain()``, the filters
its optimizer puts on the streaming side) work on a *stand-in*: the same join with each streaming
side replaced by an empty RDD-based DataFrame of that side's schema, which Spark cannot see to be
empty and which has the default (unknown, huge) size Spark gives a stream before it starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from statestream.errors import stream_stream_join_not_supported_error
from statestream.errors.unsupported_operations import (
    MSG_STREAM_STATIC_JOIN,
    stream_stream_join_mode_message,
    unsupported_join_type_message,
)
from statestream.operators.join import SparkPlanNodeExec, StreamStaticJoinExec
from statestream.plan import logical as L
from statestream._jvm.calls import expr_ids, java_dataframe, jvm_seq
from statestream.plan.spark_text import (
    IdMap,
    node_texts,
    planning_session,
    shown_output,
    spark_output_ids,
    standin_join,
    unwrap_codegen,
)

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = [
    "JOIN_TYPES",
    "join_type_name",
    "stream_join_refusal",
    "needs_stream_stream_bound",
    "is_stream_stream",
    "check_joins_supported",
    "plan_join",
    "standin_join",
    "stream_side_conjuncts",
    "MirrorNode",
    "spark_join_plan",
    "spark_output_ids",
]

#: PySpark's ``how`` values, lower-cased without underscores, to Spark's join type names
#: (Spark's ``JoinType.apply``; anything else is refused by Spark when the join is built).
JOIN_TYPES: dict[str, str] = {
    "inner": "Inner",
    "cross": "Cross",
    "outer": "FullOuter",
    "full": "FullOuter",
    "fullouter": "FullOuter",
    "leftouter": "LeftOuter",
    "left": "LeftOuter",
    "rightouter": "RightOuter",
    "right": "RightOuter",
    "leftsemi": "LeftSemi",
    "semi": "LeftSemi",
    "leftanti": "LeftAnti",
    "anti": "LeftAnti",
}

#: join types that need a watermark bound when both sides stream (Spark's
#: ``checkForStreamStreamJoinWatermark``)
_BOUNDED_STREAM_STREAM = ("LeftOuter", "LeftSemi", "RightOuter", "FullOuter")

def join_type_name(how: str | None) -> str:
    """Spark's name of the join type PySpark's ``how`` selects (``None`` is an inner join).
    Case and underscores do not matter, as in Spark; an unknown ``how`` is Spark's error, raised
    by the template join before this is asked, so it maps to itself here."""
    if how is None:
        return "Inner"
    return JOIN_TYPES.get(str(how).lower().replace("_", ""), str(how))


def stream_join_refusal(join_type: str, left_streaming: bool, right_streaming: bool, output_mode: str) -> str | None:
    """Spark's message for a join it refuses in a streaming query, or ``None``.

    The rules, in Spark's order: two streams only in append mode; a full outer join never with a
    static side; a left anti join never with a stream on the right; left outer and left semi
    never with only the right side streaming; right outer never with only the left side
    streaming. Stream-stream outer and semi joins also need a watermark bound
    (``needs_stream_stream_bound``), which this pure rule cannot see."""
    if not (left_streaming or right_streaming):
        return None
    both = left_streaming and right_streaming
    if both and output_mode != "append":
        return stream_stream_join_mode_message(output_mode)
    if join_type not in ("Inner", "Cross", "FullOuter", "LeftAnti", "LeftOuter", "LeftSemi", "RightOuter"):
        return unsupported_join_type_message(join_type)
    if join_type == "LeftAnti" and right_streaming:  # with a stream on the left too
        return MSG_STREAM_STATIC_JOIN[("LeftAnti", "right")]
    if both:
        return None
    return MSG_STREAM_STATIC_JOIN.get((join_type, "left" if left_streaming else "right"))


def needs_stream_stream_bound(join_type: str, left_streaming: bool, right_streaming: bool) -> bool:
    """Whether Spark requires a watermark in the join keys, or a watermark on one side and a
    range condition bounding the other, for this join (outer and semi joins of two streams)."""
    return left_streaming and right_streaming and join_type in _BOUNDED_STREAM_STREAM


def _streaming(plan: L.LogicalPlan) -> bool:
    return any(isinstance(n, L.StreamingRelation) for n in plan.walk())


def is_stream_stream(node: L.Join) -> bool:
    """Whether both sides of the join read a stream."""
    return all(_streaming(c) for c in node.children)


def check_joins_supported(plan: L.LogicalPlan) -> None:
    """Refuse, from ``start()``, a query holding a join statestream cannot run. Every join Spark
    accepts runs (stream-stream joins: ``plan/stream_joins.py``); kept as the place for any
    future limitation."""
    del plan


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


def plan_join(
    node: L.Join, plan_child: Callable[[L.LogicalPlan], "PhysicalOperator"], for_explain: bool = False
) -> "PhysicalOperator":
    """A stream-static join: ``StreamStaticJoinExec`` over both planned sides. For ``explain()``
    the join is shown as Spark plans it (``spark_join_plan``): Spark's join node with its keys
    and strategy, the exchanges and sorts it adds on the streaming side, and the static side's
    own physical plan."""
    if is_stream_stream(node):  # pragma: no cover - the planner sends these to plan/stream_joins.py
        raise stream_stream_join_not_supported_error(node.join_type)
    assert node.left is not None and node.right is not None
    left, right = plan_child(node.left), plan_child(node.right)
    join = StreamStaticJoinExec(
        left=left, right=right, join_type=node.join_type, description=node.description, transform=node.transform
    )
    if not for_explain:
        return join
    found = spark_join_plan(node)
    if found is None:
        return join
    mirror, standin_ids = found
    return _with_spark_display(join, mirror, (left, right), standin_ids)


@dataclass
class MirrorNode:
    """One node of a Spark physical plan, as ``explain()`` shows it: its text (with Spark's
    attribute and plan ids; the stand-ins' ids are renamed when the plan is shown), whether it runs in whole-stage codegen, whether it starts a codegen stage
    of its own, and whether it is (or sits above) a streaming side's stand-in."""

    text: str
    codegen: bool = False
    stage_start: bool = False
    children: list["MirrorNode"] = field(default_factory=list)
    standin: int | None = None  # the streaming side this stand-in scan replaces
    #: Spark's verbose line, formatted-mode details and output attributes (``node_texts``)
    verbose: str = ""
    details: str = ""
    output: tuple[str, ...] = ()
    formatted_name: str = ""

    def find_standins(self) -> Iterator["MirrorNode"]:
        if self.standin is not None:
            yield self
        for c in self.children:
            yield from c.find_standins()

    def holds_standin(self) -> bool:
        return next(self.find_standins(), None) is not None


#: Spark's physical nodes on a streaming side's path that belong to the join's physical
#: planning (kept in ``explain()``); optimizer nodes there (filters, projections) are statestream's
_PLANNING_NODES = ("Exchange", "ShuffleExchange", "BroadcastExchange", "Sort")


def _with_spark_display(
    join: "PhysicalOperator", mirror: MirrorNode, planned: tuple["PhysicalOperator", ...], standin_ids: dict[int, list[int]]
) -> "PhysicalOperator":
    """``join`` dressed as Spark's plan ``mirror``: the nodes above Spark's join node wrap it,
    the join shows Spark's text, each streaming side gets Spark's exchange/sort nodes above
    statestream's own planned subtree, and each static side is Spark's plan of it. The
    stand-ins' attribute ids are renamed to those each streaming side shows."""
    import dataclasses

    mapping: dict[int, int] = {}
    for side, ids in standin_ids.items():
        mapping.update(IdMap.between(tuple(ids), shown_output(planned[side])).mapping)
    rename = IdMap(mapping)

    def shown(m: MirrorNode) -> dict[str, Any]:
        return {
            "text": rename(m.text),
            "codegen": m.codegen,
            "verbose_text": rename(m.verbose),
            "details": rename(m.details),
            "output_text": rename.all(m.output),
            "formatted_tree_name": m.formatted_name,
        }

    def convert(m: MirrorNode) -> "PhysicalOperator":
        return SparkPlanNodeExec(stage_start=m.stage_start, inputs=tuple(convert(c) for c in m.children), **shown(m))

    def stream_path(m: MirrorNode, side: int) -> "PhysicalOperator":
        if m.standin is not None:
            return planned[side]
        below = next(c for c in m.children if c.holds_standin())
        inner = stream_path(below, side)
        if m.text.split(" ", 1)[0] in _PLANNING_NODES:
            return SparkPlanNodeExec(stage_start=m.stage_start, inputs=(inner,), **shown(m))
        return inner

    def build(m: MirrorNode, root: bool = False) -> "PhysicalOperator":
        # the top of Spark's join plan starts a codegen stage only there: in the query it
        # continues the stage of the operator above it, if that one is compiled too
        stage_start = m.stage_start and not root
        if len(m.children) == 2 and any(c.holds_standin() for c in m.children):
            sides = []
            for c in m.children:
                standin = next(c.find_standins(), None)
                side = standin.standin if standin is not None else None  # find_standins yields nodes with one
                sides.append(stream_path(c, side) if side is not None else convert(c))
            texts = shown(m)
            # the join's own fields (``join`` is typed as any physical operator)
            fields: dict[str, Any] = {
                "left": sides[0],
                "right": sides[1],
                "spark_text": texts["text"],
                "codegen": m.codegen,
                "stage_start": stage_start,
                "verbose_text": texts["verbose_text"],
                "details": texts["details"],
                "output_text": texts["output_text"],
                "formatted_tree_name": texts["formatted_tree_name"],
            }
            return dataclasses.replace(join, **fields)
        inner = next((c for c in m.children if c.holds_standin()), None)
        if inner is None:  # pragma: no cover - the join's node always holds a stand-in
            return join
        return SparkPlanNodeExec(stage_start=stage_start, inputs=(build(inner),), **shown(m))

    try:
        return build(mirror, root=True)
    except StopIteration:  # pragma: no cover - a plan shape not foreseen: the plain join
        logger.debug("Spark's join plan has an unexpected shape; explain shows statestream's join")
        return join


# ---------------------------------------------------------------------------------------------
# Asking Spark about a join (py4j)
# ---------------------------------------------------------------------------------------------


def spark_join_plan(node: L.Join) -> tuple[MirrorNode, dict[int, list[int]]] | None:
    """Spark's physical plan of the stand-in join (``standin_join``) as a ``MirrorNode`` tree,
    whole-stage codegen markers folded into the nodes, and the stand-ins' attribute ids by side;
    ``None`` when Spark's plan cannot be read (then ``explain()`` shows statestream's own join
    node)."""
    try:
        session = planning_session(node.template)
        joined, ids = standin_join(node, session)
        max_fields = int(session.conf.get("spark.sql.debug.maxToStringFields", "25"))
        plan = java_dataframe(joined).queryExecution().executedPlan()
        by_ids = {tuple(v): k for k, v in ids.items()}
        output_ids = spark_output_ids
        same = IdMap({})

        def visit(p: Any, codegen: bool, stage_start: bool) -> MirrorNode:
            p, codegen, stage_start = unwrap_codegen(p, codegen, stage_start)
            kids = jvm_seq(p.children())
            t = node_texts(p, max_fields, same)
            texts = {
                "verbose": t["verbose_text"],
                "details": t["details"],
                "output": t["output_text"],
                "formatted_name": t["formatted_tree_name"],
            }
            if not kids and output_ids(p) in by_ids:
                return MirrorNode(t["text"], codegen, stage_start, [], by_ids[output_ids(p)], **texts)
            return MirrorNode(t["text"], codegen, stage_start, [visit(k, codegen, False) for k in kids], **texts)

        return visit(plan, False, False), ids
    except Exception:  # py4j / internal API drift: explain shows statestream's node
        logger.debug("cannot read Spark's plan of a stream-static join", exc_info=True)
        return None


def stream_side_conjuncts(node: L.Join) -> dict[int, list[tuple[Any, list[int]]]]:
    """The filters Spark's optimizer puts right above each streaming side of the join (inferred
    from the join keys, ``isnotnull(k)``, or from the static side's constraints, and the parts of
    the condition that read that side only), by side: each a JVM expression over the stand-in's
    attributes, with the stand-in's attribute ids in output order (for renaming them).

    Why: Spark's optimizer moves these filters on below ``withWatermark`` or a streaming
    aggregation, so the rows they drop never reach the event-time statistics or the state
    (``plan/optimizer.py`` does the same with them). Empty when the plan cannot be read."""
    out: dict[int, list[tuple[Any, list[int]]]] = {}
    try:
        joined, ids = standin_join(node)
        if not ids:
            return out
        optimized = java_dataframe(joined).queryExecution().optimizedPlan()
        join_op = _find_join(optimized)
        if join_op is None:
            return out
        for side, side_ids in ids.items():
            conjuncts: list[Any] = []
            p = join_op.children().apply(side)
            wanted = set(side_ids)
            while p.children().size() == 1 and str(p.nodeName()) in ("Filter", "Project"):
                if str(p.nodeName()) == "Filter":
                    for c in _split_and(p.condition()):
                        refs = c.references().toSeq()
                        if set(expr_ids(refs)) <= wanted:
                            conjuncts.append(c)
                p = p.children().apply(0)
            out[side] = [(c, side_ids) for c in conjuncts]
    except Exception:  # py4j / internal API drift: no inferred filter is moved
        logger.debug("cannot read the filters Spark infers for a stream-static join", exc_info=True)
        return {}
    return out


def _find_join(plan: Any) -> Any | None:
    """The first ``Join`` of an optimized plan, top down through single-child operators."""
    p = plan
    for _ in range(1000):
        if str(p.nodeName()) == "Join":
            return p
        if p.children().size() != 1:
            return None
        p = p.children().apply(0)
    return None


def _split_and(e: Any) -> Sequence[Any]:
    if e.getClass().getSimpleName() == "And":
        return [*_split_and(e.left()), *_split_and(e.right())]
    return [e]
