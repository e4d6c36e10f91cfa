"""Spark's own text for the stateless parts of a streaming plan, for ``explain()``.

Spark's ``explain()`` of a streaming DataFrame shows resolved, optimised expressions with
attribute ids (``Project [timestamp#0, (value#1L * 2) AS x#2L]``, ``Filter (isnotnull(value#1L)
AND ...)``), projections collapsed and filters pushed through them. statestream records the
user's operations, not Spark's resolved plan, so the text is asked of Spark: a *region* (a chain
of stateless operations, from a streaming source or from the operator below it) is replayed on a
*stand-in*, an empty RDD-based DataFrame with the schema of what the region reads (Spark cannot
see it is empty, so it folds nothing away, and its default size is the one Spark gives a stream).
Spark's analysed, optimised and physical plans of that DataFrame are then shown with the
stand-in's leaf written as the streaming relation Spark's engine shows, and its attribute ids on
the source's columns. statestream's own stateful operators are planned and shown as before.

Explain only: a running query's batches replay the same operations on each batch's rows.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from statestream.plan import logical as L

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = [
    "SparkRegion",
    "spark_region",
    "stateless_chain",
    "relation_with_ids",
    "region_plan",
    "logical_region_text",
    "logical_relation_text",
    "logical_sections",
]

#: the stand-in's leaf in a logical tree (``LogicalRDD [cols], false``, statistics in cost mode)
_LOGICAL_RDD = re.compile(r"^LogicalRDD \[(?P<cols>.*)\], (?:false|true)(?P<suffix>, Statistics\(.*\))?$")

#: Spark's provider and table classes of the built-in sources it reads as ``StreamingRelationV2``
#: (the class names are facts of Spark's engine; the objects' hash codes are not reproducible)
_V2_SOURCES = {
    "rate": "RateStreamProvider",
    "rate-micro-batch": "RatePerMicroBatchProvider",
    "socket": "TextSocketSourceProvider",
}
_V2_TABLES = {"rate": "RateStreamTable", "rate-micro-batch": "RatePerMicroBatchTable", "socket": "TextSocketTable"}
_SOURCES_PACKAGE = "org.apache.spark.sql.execution.streaming.sources."


@dataclass
class SparkRegion:
    """Spark's plans of one stand-in region: the stand-in's attribute ids and their text
    (``value#1L``), Spark's executed plan and its ``QueryExecution`` (for the logical plans)."""

    standin_ids: tuple[int, ...]
    output_text: tuple[str, ...]
    executed: Any = field(repr=False)
    query_execution: Any = field(repr=False)
    #: ``spark.sql.debug.maxToStringFields``: how many fields Spark prints in a node's line
    max_fields: int = 25


def stateless_chain(node: L.LogicalPlan) -> tuple[list[L.Stateless], L.LogicalPlan]:
    """The maximal chain of ``Stateless`` nodes from ``node`` down, top first, and the node
    below it (a source, or the operator the chain reads from)."""
    chain: list[L.Stateless] = []
    while isinstance(node, L.Stateless) and node.child is not None and node.transform is not None:
        chain.append(node)
        node = node.child
    return chain, node


def spark_region(chain: list[L.Stateless], bottom: L.LogicalPlan) -> SparkRegion | None:
    """Spark's plans of ``chain`` replayed on a stand-in for ``bottom``; ``None`` when Spark's
    plan cannot be read (``explain()`` then shows statestream's own nodes)."""
    from statestream.plan.joins import _planning_session, _same_active_session

    try:
        session = _planning_session(bottom.template)
        with _same_active_session(session):
            df: "DataFrame" = session.createDataFrame(session.sparkContext.emptyRDD(), bottom.schema)
            output = df._jdf.queryExecution().analyzed().output()  # noqa: SLF001
            ids = tuple(int(output.apply(j).exprId().id()) for j in range(output.size()))
            text = tuple(str(output.apply(j).toString()) for j in range(output.size()))
            for node in reversed(chain):
                assert node.transform is not None
                df = node.transform(df)
            qe = df._jdf.queryExecution()  # noqa: SLF001
            max_fields = int(session.conf.get("spark.sql.debug.maxToStringFields", "25"))
            return SparkRegion(ids, text, qe.executedPlan(), qe, max_fields)
    except Exception:  # noqa: BLE001 - py4j / internal API drift / a transform Spark refuses here
        logger.debug("cannot read Spark's plan of a stateless region; explain shows statestream's nodes", exc_info=True)
        return None


def relation_with_ids(relation: "PhysicalOperator", region: SparkRegion) -> "PhysicalOperator":
    """The source's scan showing the stand-in's attributes (``timestamp#0, value#1L``)."""
    import dataclasses

    return dataclasses.replace(relation, display_output=region.output_text)


def physical_region(region: SparkRegion, below: "PhysicalOperator") -> "PhysicalOperator":
    """Spark's physical plan of the region as explain nodes, the stand-in's scan replaced by
    ``below`` (statestream's plan of what the region reads). Whole-stage codegen wrappers are
    folded into the nodes' codegen flags, as for a join's plan (``plan/joins.py``)."""
    from statestream.operators.basic import SparkStatelessExec

    from statestream.plan.joins import spark_output_ids as output_ids

    max_fields = region.max_fields

    def visit(p: Any, codegen: bool, stage_start: bool) -> "PhysicalOperator":
        name = str(p.nodeName())
        kids = [p.children().apply(j) for j in range(p.children().size())]
        if name.startswith("WholeStageCodegen"):
            return visit(kids[0], True, True)
        if name == "InputAdapter":
            return visit(kids[0], False, False)
        if not kids and output_ids(p) == region.standin_ids:
            return below
        if not kids:
            msg = f"the region's plan has a leaf other than the stand-in: {name}"
            raise ValueError(msg)
        if len(kids) != 1:
            msg = f"the region's plan has a node with {len(kids)} inputs: {name}"
            raise ValueError(msg)
        text = str(p.simpleString(max_fields))
        return SparkStatelessExec(child=visit(kids[0], codegen, False), op=name, text=text, codegen=codegen)

    return visit(region.executed, False, False)


def logical_relation_text(source: L.StreamingRelation, columns: tuple[str, ...]) -> str:
    """The streaming source's node as Spark's logical plans show it: ``StreamingRelationV2
    <provider>@<hash>, <name>, <table>@<hash>, [<options>], [<columns>]`` for the built-in V2
    sources (the hashes are this spec's, not Spark's objects'), else ``StreamingRelation <name>,
    [<columns>]``."""
    spec = source.source_spec
    name = str(getattr(spec, "short_name", None) or getattr(spec, "format", "source"))
    cols = ", ".join(columns)
    provider = _V2_SOURCES.get(name)
    if provider is None:
        return f"~StreamingRelation {name}, [{cols}]"
    options = getattr(spec, "options", None) or {}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(dict(options).items()) if k.lower() != "path")
    h = f"{id(spec) & 0xFFFFFFF:x}"
    return f"~StreamingRelationV2 {_SOURCES_PACKAGE}{provider}@{h}, {name}, {_SOURCES_PACKAGE}{_V2_TABLES[name]}@{h}, [{shown}], [{cols}]"


def logical_region_text(region: SparkRegion, relation_text: str) -> dict[str, str]:
    """Spark's parsed, analysed and optimised logical plans of the region (and the optimised
    one with statistics, for the ``cost`` mode), with ``~`` before each resolved node over the
    stream (Spark marks streaming nodes so) and the stand-in's leaf written as ``relation_text``
    (the streaming relation, attribute ids included)."""
    qe = region.query_execution
    optimized = qe.optimizedPlan()
    trees = {
        "parsed": qe.logical().treeString(),
        "analyzed": qe.analyzed().treeString(),
        "optimized": optimized.treeString(),
        # Spark's cost mode: each node with its statistics (the stand-in's size is a stream's)
        "cost": _optimized_with_stats(qe),
    }
    return {key: _streaming_tree(str(text).rstrip("\n"), relation_text) for key, text in trees.items()}


def _optimized_with_stats(qe: Any) -> str:
    """The optimised plan with each node's statistics, as Spark's ``cost`` mode prints it (the
    first section of ``QueryExecution.stringWithStats``)."""
    text = str(qe.stringWithStats())
    _, _, rest = text.partition("== Optimized Logical Plan ==\n")
    return rest.split("\n\n== Physical Plan ==", 1)[0] if rest else text


def logical_sections(plan: L.LogicalPlan) -> dict[str, str] | None:
    """Spark's logical plans of a streaming DataFrame that is a chain of stateless operations
    over one source (``logical_region_text``); ``None`` for any other plan (explain then shows
    statestream's logical tree)."""
    chain, bottom = stateless_chain(plan)
    if not isinstance(bottom, L.StreamingRelation):
        return None
    region = spark_region(chain, bottom)
    if region is None:
        return None
    try:
        return logical_region_text(region, logical_relation_text(bottom, region.output_text))
    except Exception:  # noqa: BLE001 - py4j / internal API drift
        logger.debug("cannot read Spark's logical plans of a stateless region", exc_info=True)
        return None


def _streaming_tree(text: str, relation_text: str) -> str:
    """A logical tree over the stand-in as Spark prints it over the stream: every node is
    streaming (the region is a chain over the source), so resolved nodes get ``~``."""
    lines = []
    for line in text.splitlines():
        match = re.match(r"^([ :|+-]*)(.*)$", line)
        assert match is not None
        prefix, body = match.groups()
        rdd = _LOGICAL_RDD.match(body)
        if rdd:
            body = relation_text + (rdd.group("suffix") or "")
        elif not body.startswith(("'", "~")):
            body = "~" + body
        lines.append(prefix + body)
    return "\n".join(lines)


def region_plan(
    chain: list[L.Stateless], bottom: L.LogicalPlan, plan_bottom: Callable[[L.LogicalPlan], "PhysicalOperator"]
) -> "PhysicalOperator | None":
    """The region's explain nodes over ``plan_bottom(bottom)``, or ``None`` (Spark's plan
    unreadable: the caller plans statestream's own nodes)."""
    from statestream.operators.basic import StreamingRelationExec

    region = spark_region(chain, bottom)
    if region is None:
        return None
    below = plan_bottom(bottom)
    if isinstance(below, StreamingRelationExec):
        below = relation_with_ids(below, region)
    try:
        return physical_region(region, below)
    except Exception:  # noqa: BLE001 - an unforeseen plan shape
        logger.debug("Spark's plan of a stateless region has an unexpected shape", exc_info=True)
        return None
