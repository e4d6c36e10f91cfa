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
the source's columns. A streaming aggregation is asked of Spark the same way: Spark's batch plan
of the aggregation over a stand-in gives the text of its partial and final steps, its exchange
and its keys (``aggregate_region``, ``aggregate_text``); the merge steps and the state store
nodes are written from those, in the shape of Spark's streaming plan. Each region's stand-in ids
are then renamed to the ids its input shows (``IdMap``), so that an attribute keeps one id from
the source up, as in Spark's plan, and ``dress_with_ids`` gives the nodes statestream writes
itself (watermark, deduplication, exchanges) the same ids and Spark's plan ids.

Explain only: a running query's batches replay the same operations on each batch's rows.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from statestream.operators.aggregate import AggregateExplainText, ShuffleExchangeExec, StreamingAggregateExec
from statestream.operators.base import node_name
from statestream.operators.basic import SparkStatelessExec, StreamingRelationExec, UnionExec, in_session
from statestream.operators.dedup import StatefulShuffleExchangeExec, StreamingDeduplicateExec
from statestream.operators.join import SparkPlanNodeExec
from statestream.operators.limit import SinglePartitionExchangeExec
from statestream.operators.watermark import EventTimeWatermarkExec
from statestream.plan import logical as L
from statestream._jvm.calls import clone_session, expr_ids, java_dataframe, java_session, jvm_seq, jvm_view
from statestream.plan.dedup import analysed_key_names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = [
    "planning_session",
    "same_active_session",
    "spark_output_ids",
    "standin_join",
    "IdMap",
    "unwrap_codegen",
    "shown_output",
    "aggregate_region",
    "aggregate_text",
    "dress_with_ids",
    "SparkRegion",
    "spark_region",
    "stateless_chain",
    "connect_inputs",
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
    #: the stand-in's ids renamed to those of the input the region reads (set once known)
    ids: "IdMap" = field(default_factory=lambda: IdMap({}))
    #: a union's other inputs' stand-ins (ids, their text), after the first one above
    more_standins: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = ()

    @property
    def standins(self) -> tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]:
        """Each stand-in's attribute ids and their text (one per input of a union)."""
        return ((self.standin_ids, self.output_text), *self.more_standins)


_ID = re.compile(r"#(\d+)")
_DELAY = re.compile(r"-T\d+ms$")


@dataclass(frozen=True)
class IdMap:
    """Renames attribute ids in Spark's text (``value#12L`` -> ``value#1L``)."""

    mapping: dict[int, int]

    def __call__(self, text: str) -> str:
        if not self.mapping:
            return text
        return _ID.sub(lambda m: "#" + str(self.mapping.get(int(m.group(1)), int(m.group(1)))), text)

    def all(self, texts: Any) -> tuple[str, ...]:
        return tuple(self(str(t)) for t in texts)

    @staticmethod
    def between(standin_ids: tuple[int, ...], shown: tuple[str, ...] | None) -> "IdMap":
        """Stand-in ids to the ids of the attributes ``shown`` (by position); no renaming when
        the input's attributes are not known or do not line up."""
        if not shown or len(shown) != len(standin_ids):
            return IdMap({})
        mapping = {}
        for sid, text in zip(standin_ids, shown):
            found = _ID.findall(text)
            if found:
                mapping[sid] = int(found[-1])
        return IdMap(mapping)


def attribute_name(text: str) -> str:
    """The name in an attribute's text (``value#1L`` -> ``value``)."""
    return text.rsplit("#", 1)[0]


def with_delay(text: str, delay_ms: int | None) -> str:
    """An attribute's text with Spark's event-time marker (``-T<delay>ms``), or without it."""
    bare = _DELAY.sub("", text)
    return f"{bare}-T{delay_ms}ms" if delay_ms is not None else bare


#: nodes whose output is their input (by the name ``explain()`` shows)
_PASS_THROUGH = frozenset(
    (
        "Exchange",
        "Sort",
        "StateStoreRestore",
        "StateStoreSave",
        "SessionWindowStateStoreRestore",
        "SessionWindowStateStoreSave",
        "StreamingDeduplicate",
        "StreamingDeduplicateWithinWatermark",
        "LocalLimit",
        "GlobalLimit",
        "CollectLimit",
        "StreamingLocalLimit",
        "StreamingGlobalLimit",
        "CollectMetrics",
        "AdaptiveSparkPlan",
    )
)


def shown_output(op: "PhysicalOperator | None") -> tuple[str, ...] | None:
    """The attributes (with ids) ``explain()`` shows as ``op``'s output, or ``None`` when the
    node does not know them (statestream's own rendering below it)."""
    if op is None:
        return None
    known = getattr(op, "output_text", None)
    if known:
        return tuple(known)
    if isinstance(op, StreamingRelationExec):
        return tuple(op.display_output) or None
    if node_name(op) == "LocalTableScan":  # limit(0): the attributes of what it replaced
        shown = tuple(getattr(op, "output", ()))
        return shown if shown and all("#" in t for t in shown) else None
    if isinstance(op, EventTimeWatermarkExec):
        below = shown_output(op.child)
        if below is None:
            return None
        return tuple(with_delay(t, op.delay_ms if attribute_name(t) == op.column else None) for t in below)
    if isinstance(op, StreamingAggregateExec) and op.info is not None and op.info.spark_text is not None:
        return op.info.spark_text.output if op.mode == "Final" else op.info.spark_text.buffer_output
    session_info = getattr(op, "info", None)
    session_text = getattr(getattr(session_info, "agg", None), "spark_text", None)
    if session_text is not None and node_name(op) in _AGGREGATE_NODES + ("MergingSessions",):
        return session_text.buffer_output  # a session window's partial and merging steps
    kids = op.children
    if len(kids) == 1 and node_name(op) in _PASS_THROUGH:
        return shown_output(kids[0])
    return None


def planning_session(template: "DataFrame") -> Any:
    """A clone of the template's session with adaptive execution off, as in a micro-batch (the
    plan Spark shows before a stateful query starts is not adaptive either)."""
    user = template.sparkSession
    session = clone_session(user)
    session.conf.set("spark.sql.adaptive.enabled", "false")
    return session


def spark_output_ids(p: Any) -> tuple[int, ...]:
    """The expression ids of a Spark physical plan node's output (how a stand-in leaf is found
    again in the plan Spark built over it)."""
    return tuple(expr_ids(p.output()))


@contextmanager
def same_active_session(session: Any) -> Iterator[None]:
    """PySpark's ``createDataFrame`` makes its session the active one (in PySpark and in the
    JVM thread); a stand-in must not change which session the user's code sees as active."""
    from pyspark.sql import SparkSession

    jvm = jvm_view(session)
    previous_jvm = jvm.SparkSession.getActiveSession()
    previous = SparkSession._activeSession  # noqa: SLF001
    try:
        yield
    finally:
        SparkSession._activeSession = previous  # noqa: SLF001
        if previous_jvm.isDefined():
            jvm.SparkSession.setActiveSession(previous_jvm.get())
        else:
            jvm.SparkSession.clearActiveSession()


def standin_join(node: L.Join, session: Any = None) -> tuple["DataFrame", dict[int, list[int]]]:
    """The join with each streaming side replaced by a stand-in (see the module docstring), and
    the stand-ins' attribute ids by side. The active session stays what it was."""
    session = session or node.template.sparkSession
    with same_active_session(session):
        return _standin_join(node, session)


def _standin_join(node: L.Join, session: Any) -> tuple["DataFrame", dict[int, list[int]]]:
    assert node.transform is not None
    sides: list[Any] = []
    ids: dict[int, list[int]] = {}
    for i, child in enumerate(node.children):
        if any(isinstance(n, L.StreamingRelation) for n in child.walk()):
            standin = session.createDataFrame(session.sparkContext.emptyRDD(), child.schema)
            qualifier = _common_qualifier(child.template)
            if qualifier is not None:
                # the side's alias (df.alias("a")): a condition may name its columns as a.k
                standin = standin.alias(qualifier)
            output = java_dataframe(standin).queryExecution().analyzed().output()
            ids[i] = expr_ids(output)
            sides.append(standin)
        else:
            sides.append(in_session(child.template, session))
    return node.transform(sides[0], sides[1]), ids


def _common_qualifier(template: "DataFrame") -> str | None:
    """The alias every output column of ``template`` is qualified by (``df.alias("a")`` above
    it, maybe under a watermark or a filter), or None."""
    qualifiers = {tuple(jvm_seq(a.qualifier())) for a in jvm_seq(java_dataframe(template).queryExecution().analyzed().output())}
    if len(qualifiers) != 1:
        return None
    (qualifier,) = qualifiers
    return str(qualifier[-1]) if qualifier else None


def stateless_chain(node: L.LogicalPlan) -> tuple[list[L.Stateless], L.LogicalPlan]:
    """The maximal chain of ``Stateless`` nodes from ``node`` down, top first, and the node
    below it (a source, or the operator the chain reads from)."""
    chain: list[L.Stateless] = []
    while isinstance(node, L.Stateless) and node.child is not None and node.transform is not None:
        chain.append(node)
        node = node.child
    return chain, node


def spark_region(
    chain: list[L.Stateless], bottom: L.LogicalPlan, top: "Callable[[DataFrame], DataFrame] | None" = None
) -> SparkRegion | None:
    """Spark's plans of ``chain`` replayed on a stand-in for ``bottom`` (then ``top``, when
    given); ``None`` when Spark's plan cannot be read (``explain()`` then shows statestream's
    own nodes)."""
    try:
        session = planning_session(bottom.template)
        with same_active_session(session):
            # a union's inputs each get a stand-in, so that Spark pushes the chain into each
            # branch as it does over the streams
            inputs = bottom.inputs if isinstance(bottom, L.Union) else (bottom,)
            standins = []
            df: "DataFrame | None" = None
            for item in inputs:
                standin = session.createDataFrame(session.sparkContext.emptyRDD(), item.schema)
                output = java_dataframe(standin).queryExecution().analyzed().output()
                ids = tuple(expr_ids(output))
                text = tuple(str(a.toString()) for a in jvm_seq(output))
                standins.append((ids, text))
                if df is None:
                    df = standin
                elif isinstance(bottom, L.Union) and bottom.by_name:
                    df = df.unionByName(standin, allowMissingColumns=bottom.allow_missing)
                else:
                    df = df.union(standin)
            assert df is not None
            for node in reversed(chain):
                assert node.transform is not None
                df = node.transform(df)
            if top is not None:
                df = top(df)
            qe = java_dataframe(df).queryExecution()
            max_fields = int(session.conf.get("spark.sql.debug.maxToStringFields", "25"))
            (ids, text), *more = standins
            return SparkRegion(ids, text, qe.executedPlan(), qe, max_fields, more_standins=tuple(more))
    except Exception:  # py4j / internal API drift / a transform Spark refuses here
        logger.debug("cannot read Spark's plan of a stateless region; explain shows statestream's nodes", exc_info=True)
        return None


def connect_inputs(region: SparkRegion, bottom: L.LogicalPlan, below: "PhysicalOperator") -> dict[tuple[int, ...], "PhysicalOperator"]:
    """What each of the region's stand-ins stands for: statestream's plan of the input (one per
    input of a union). A source's scan shows its stand-in's attributes; any other input keeps
    the ids it shows, and the region's text takes them (``region.ids``)."""
    import dataclasses

    parts: tuple["PhysicalOperator", ...] = (below,)
    if isinstance(bottom, L.Union) and isinstance(below, UnionExec):
        parts = below.inputs
    if len(parts) != len(region.standins):
        msg = f"the region has {len(region.standins)} stand-ins for {len(parts)} inputs"
        raise ValueError(msg)
    mapping: dict[int, int] = {}
    out = {}
    for (ids, text), part in zip(region.standins, parts):
        if isinstance(part, StreamingRelationExec):
            part = dataclasses.replace(part, display_output=text)
        else:
            mapping.update(IdMap.between(ids, shown_output(part)).mapping)
        out[ids] = part
    region.ids = IdMap(mapping)
    return out


def physical_region(
    region: SparkRegion, belows: dict[tuple[int, ...], "PhysicalOperator"], start: Any = None, codegen: bool = False
) -> "PhysicalOperator":
    """Spark's physical plan of the region (from ``start``, a node of it inside a codegen stage
    when ``codegen``) as explain nodes, each stand-in's scan replaced by what it stands for
    (``connect_inputs``). Whole-stage codegen wrappers are folded into the nodes' codegen flags,
    as for a join's plan (``plan/joins.py``)."""
    output_ids = spark_output_ids
    def visit(p: Any, codegen: bool, stage_start: bool) -> "PhysicalOperator":
        p, codegen, stage_start = unwrap_codegen(p, codegen, stage_start)
        name = str(p.nodeName())
        kids = jvm_seq(p.children())
        if not kids and output_ids(p) in belows:
            return belows[output_ids(p)]
        if not kids:
            msg = f"the region's plan has a leaf other than the stand-in: {name}"
            raise ValueError(msg)
        texts = node_texts(p, region.max_fields, region.ids)
        if name == "Union":
            inputs = tuple(visit(k, codegen, False) for k in kids)
            return SparkPlanNodeExec(inputs=inputs, codegen=codegen, **texts)
        if len(kids) != 1:
            msg = f"the region's plan has a node with {len(kids)} inputs: {name}"
            raise ValueError(msg)
        return SparkStatelessExec(child=visit(kids[0], codegen, False), op=name, codegen=codegen, **texts)

    return visit(region.executed if start is None else start, codegen, False)


def node_texts(p: Any, max_fields: int, ids: IdMap) -> dict[str, Any]:
    """A Spark plan node's lines for ``explain()``, ids renamed: the simple and verbose lines,
    the formatted mode's details (its ``verboseStringWithOperatorId`` without the header, which
    the formatter numbers itself) and its output attributes."""
    details = str(p.verboseStringWithOperatorId()).strip("\n").split("\n", 1)
    return {
        "text": ids(str(p.simpleString(max_fields))),
        "verbose_text": ids(str(p.verboseString(max_fields))),
        "details": ids(details[1].strip("\n")) if len(details) > 1 else "",
        "output_text": ids.all(_output_texts(p)),
        "formatted_tree_name": re.sub(r" \((?:unknown|\d+)\)$", "", str(p.simpleStringWithNodeId())),
    }


def _output_texts(p: Any) -> list[str]:
    out = p.output()
    return [str(a.toString()) for a in jvm_seq(out)]


# ---------------------------------------------------------------------------------------------
# A streaming aggregation's text, from Spark's batch plan of the same aggregation
# ---------------------------------------------------------------------------------------------

_AGGREGATE_NODES = ("HashAggregate", "ObjectHashAggregate", "SortAggregate")


def aggregate_region(node: L.Aggregate, chain: list[L.Stateless], bottom: L.LogicalPlan) -> SparkRegion | None:
    """Spark's plans of the aggregation ``node`` (over ``chain`` over a stand-in for ``bottom``)
    as a batch query: ``groupBy``/``cube``/``rollup`` with the user's columns, then the filters
    on its keys that statestream applies before the state (Spark's optimizer pushes them below
    the aggregation, where its streaming plan has them too)."""

    def aggregate(df: "DataFrame") -> "DataFrame":
        grouped = {"cube": df.cube, "rollup": df.rollup}[node.grouping_sets] if node.grouping_sets else df.groupBy
        out = grouped(*node.grouping).agg(*node.aggregates)
        for cond in node.key_filters:
            out = out.filter(cond)
        return out

    if not node.aggregates:
        return None
    return spark_region(chain, bottom, aggregate)


def unwrap_codegen(p: Any, codegen: bool = False, stage_start: bool = False) -> tuple[Any, bool, bool]:
    """``p`` without Spark's whole-stage codegen wrappers, whether it runs in codegen and
    whether it starts a codegen stage (``WholeStageCodegen`` starts one, ``InputAdapter`` ends
    the one above): ``explain()`` folds the wrappers into the nodes' ``*(n)`` markers."""
    while True:
        name = str(p.nodeName())
        if name.startswith("WholeStageCodegen"):
            p, codegen, stage_start = p.children().apply(0), True, True
        elif name == "InputAdapter":
            p, codegen, stage_start = p.children().apply(0), False, False
        else:
            return p, codegen, stage_start


def _unwrap(p: Any, codegen: bool) -> tuple[Any, bool]:
    node, codegen, _ = unwrap_codegen(p, codegen)
    return node, codegen


def _only_child(p: Any) -> Any:
    kids = p.children()
    if kids.size() != 1:
        msg = f"{p.nodeName()} has {kids.size()} inputs"
        raise ValueError(msg)
    return kids.apply(0)


def aggregate_text(
    region: SparkRegion, bottom: L.LogicalPlan, below: "PhysicalOperator", num_partitions: int
) -> "tuple[AggregateExplainText, PhysicalOperator] | None":
    """Spark's text of a streaming aggregation's steps, from its batch plan ``region`` (final
    step, exchange, partial step, with a sort above each for a sort-based aggregate), and the
    explain nodes of what the partial step reads (Spark's plan of the stateless steps, over
    ``below``). The merge steps are the partial step with ``merge_`` functions, as Spark's
    streaming plan shows them; the exchange is the stateful one, into the query's state
    partitions. ``None`` when Spark's plan has another shape."""
    try:
        belows = connect_inputs(region, bottom, below)
        ids, max_fields = region.ids, region.max_fields
        final, _ = _unwrap(region.executed, False)
        if str(final.nodeName()) not in _AGGREGATE_NODES:
            return None
        above: list[Any] = []  # between the final step and the exchange (sorts, MergingSessions)
        node, _ = _unwrap(_only_child(final), False)
        while str(node.nodeName()) != "Exchange":
            above.append(node)
            if len(above) > 3:
                return None
            node, _ = _unwrap(_only_child(node), False)
        exchange_text = _stateful_exchange(ids(str(node.simpleString(max_fields))), num_partitions)
        partial, codegen = _unwrap(_only_child(node), False)
        if str(partial.nodeName()) != str(final.nodeName()):
            return None
        rest, rest_codegen = _unwrap(_only_child(partial), codegen)
        sort = ""
        if str(final.nodeName()) == "SortAggregate" and str(rest.nodeName()) == "Sort":
            sort = ids(str(rest.simpleString(max_fields)))
            rest, rest_codegen = _unwrap(_only_child(rest), rest_codegen)
        names = [str(n.nodeName()) for n in above]
        merging = above[names.index("MergingSessions")] if "MergingSessions" in names else None
        if merging is None and names not in ([], ["Sort"]):
            return None
        if names and names[0] == "Sort" and merging is None:
            sort = ids(str(above[0].simpleString(max_fields)))
        session = _session_texts(merging, above, ids, max_fields, num_partitions) if merging is not None else {}

        def seq(s: Any) -> list[str]:
            return [ids(str(e.toString())) for e in jvm_seq(s)]

        partial_functions = ", ".join(seq(partial.aggregateExpressions()))
        merge_functions = ", ".join("merge_" + f for f in seq(final.aggregateExpressions()))
        buffers = tuple(ids.all(_output_texts(partial)))

        def as_merge(text: str) -> str:
            return text.replace(f"functions=[{partial_functions}]", f"functions=[{merge_functions}]", 1)

        final_texts = node_texts(final, max_fields, ids)
        partial_texts = node_texts(partial, max_fields, ids)
        # the streaming plan's steps all list the final results as their aggregate attributes
        results = next((line for line in final_texts["details"].splitlines() if line.startswith("Aggregate Attributes [")), None)
        partial_details, merge_details = [], []
        for line in partial_texts["details"].splitlines():
            if line.startswith("Aggregate Attributes [") and results is not None:
                line = results
            partial_details.append(line)
            if line.startswith("Input ["):
                line = f"Input [{len(buffers)}]: [{', '.join(buffers)}]"
            elif line.startswith("Functions ["):
                line = line.replace(f"[{partial_functions}]", f"[{merge_functions}]", 1)
            merge_details.append(line)
        text = AggregateExplainText(
            lines={"Partial": partial_texts["text"], "PartialMerge": as_merge(partial_texts["text"]), "Final": final_texts["text"]},
            verbose={
                "Partial": partial_texts["verbose_text"],
                "PartialMerge": as_merge(partial_texts["verbose_text"]),
                "Final": final_texts["verbose_text"],
            },
            details={"Partial": "\n".join(partial_details), "PartialMerge": "\n".join(merge_details), "Final": final_texts["details"]},
            keys=", ".join(seq(final.groupingExpressions())),
            exchange=exchange_text,
            sort=sort,
            buffer_output=buffers,
            output=final_texts["output_text"],
            session=session,
        )
        return text, physical_region(region, belows, start=rest, codegen=rest_codegen)
    except Exception:  # py4j / internal API drift / an unforeseen plan shape
        logger.debug("cannot read Spark's text of a streaming aggregation", exc_info=True)
        return None


_BATCH_MERGING = re.compile(r"^MergingSessions (?P<required>(?:List|Vector)\(.*?\), )?false, ")


def _session_texts(merging: Any, above: list[Any], ids: IdMap, max_fields: int, num_partitions: int) -> dict[str, str]:
    """A session-window aggregation's lines from Spark's batch ``MergingSessions`` (and the sort
    below it): as the streaming plan prints it, the node is streaming and knows the number of
    state partitions; the local merge has no required distribution."""
    text = ids(str(merging.simpleString(max_fields)))
    m = _BATCH_MERGING.match(text)
    if m is None:
        msg = f"unexpected MergingSessions line: {text}"
        raise ValueError(msg)
    required = m.group("required") or ""
    tail = text[m.end() :]
    session_attr = with_delay(ids(str(merging.sessionExpression().toString())), None)
    grouping = merging.groupingExpressions()
    keys = [ids(str(g.toString())) for g in jvm_seq(grouping)]
    position = above.index(merging)
    sort = above[position + 1] if position + 1 < len(above) and str(above[position + 1].nodeName()) == "Sort" else None
    return {
        "keys": ", ".join(k for k in keys if with_delay(k, None) != session_attr),
        "session": session_attr,
        "merging": f"MergingSessions {required}true, {num_partitions}, {tail}",
        "merging_local": f"MergingSessions true, {num_partitions}, {tail}",
        "merging_details": node_texts(merging, max_fields, ids)["details"],
        "sort": ids(str(sort.simpleString(max_fields))) if sort is not None else "",
    }


_BATCH_EXCHANGE = re.compile(r"^Exchange (?P<part>.*?)(?:, (?P<n>\d+)\))?, ENSURE_REQUIREMENTS(?P<rest>.*)$")


def _stateful_exchange(text: str, num_partitions: int) -> str:
    """The batch plan's exchange (``ENSURE_REQUIREMENTS``, the session's shuffle partitions) as
    the stateful one of Spark's streaming plan (``REQUIRED_BY_STATEFUL_OPERATOR``, the query's
    state partitions)."""
    m = _BATCH_EXCHANGE.match(text)
    if m is None:
        msg = f"unexpected exchange line: {text}"
        raise ValueError(msg)
    if not m.group("n"):  # SinglePartition: Spark's streaming plan keeps the batch requirement
        return text
    return f"Exchange {m.group('part')}, {num_partitions}), REQUIRED_BY_STATEFUL_OPERATOR{m.group('rest')}"


# ---------------------------------------------------------------------------------------------
# ids for the nodes statestream writes itself
# ---------------------------------------------------------------------------------------------


def dress_with_ids(plan: "PhysicalOperator") -> "PhysicalOperator":
    """The explain plan with the attribute ids its inputs show on the nodes statestream writes
    itself (the watermark's column, deduplication keys, a stateful exchange's keys) and Spark's
    plan ids on exchanges. Nodes whose input does not show ids are left as they are."""
    import dataclasses

    def by_name(below: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...] | None:
        found = {attribute_name(t): t for t in reversed(below)}
        out = tuple(found.get(n) for n in names)
        return None if any(t is None for t in out) else out  # type: ignore[return-value]

    def rule(op: "PhysicalOperator") -> "PhysicalOperator":
        kids = op.children
        below = shown_output(kids[0]) if len(kids) == 1 else None
        if isinstance(op, EventTimeWatermarkExec) and below is not None:
            column = by_name(below, (op.column,))
            if column is not None:
                return dataclasses.replace(op, column_text=with_delay(column[0], None))
        if isinstance(op, StreamingDeduplicateExec) and below is not None and op.info is not None:
            if max(op.info.key_indices, default=-1) < len(below):
                return dataclasses.replace(op, keys_text=", ".join(below[i] for i in op.info.key_indices))
        if isinstance(op, StatefulShuffleExchangeExec) and not op.spark_text and op.info is not None:
            keys = tuple(below[i] for i in op.info.key_indices) if below and max(op.info.key_indices, default=-1) < len(below) else None
            if keys is not None:
                text = f"Exchange hashpartitioning({', '.join(keys)}, {op.num_partitions}), REQUIRED_BY_STATEFUL_OPERATOR"
                return dataclasses.replace(op, spark_text=f"{text}, [plan_id={_new_plan_id()}]")
        elif isinstance(op, ShuffleExchangeExec) and not op.spark_text and below is not None:
            keys = by_name(below, op.keys) if op.keys else ()
            if keys is not None:
                return dataclasses.replace(op, spark_text=f"{op.simple_string() if not keys else _hash_exchange(keys, op.num_partitions)}, [plan_id={_new_plan_id()}]")
        if isinstance(op, SinglePartitionExchangeExec) and op.plan_id is None:
            return dataclasses.replace(op, plan_id=_new_plan_id())
        return op

    return plan.transform_up(rule)


def _hash_exchange(keys: tuple[str, ...], num_partitions: int | None) -> str:
    return f"Exchange hashpartitioning({', '.join(keys)}, {num_partitions}), REQUIRED_BY_STATEFUL_OPERATOR"


_plan_ids = iter(range(1 << 30))


def _new_plan_id() -> int:
    """A plan id from Spark's own counter (``SparkPlan.newPlanId``), so that the ids in one
    explain never repeat the ones Spark drew for the nodes taken from its plans; a local
    counter when the JVM cannot be reached."""
    try:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context  # noqa: SLF001
        assert sc is not None
        module = getattr(getattr(jvm_view(sc).org.apache.spark.sql.execution, "SparkPlan$"), "MODULE$")
        return int(module.newPlanId())
    except Exception:  # noqa: BLE001 - no JVM: a local counter
        return next(_plan_ids)


def logical_relation_text(source: L.StreamingRelation, columns: tuple[str, ...]) -> str:
    """The streaming source's node as Spark's logical plans show it: ``StreamingRelationV2
    <provider>@<hash>, <name>, <table>@<hash>, [<options>], [<columns>]`` for the built-in V2
    sources (the hashes are this spec's, not Spark's objects'), else ``StreamingRelation <name>,
    [<columns>]``."""
    spec = source.source_spec
    name = str(getattr(spec, "short_name", None) or getattr(spec, "format", "source"))
    cols = ", ".join(columns)
    provider = _V2_SOURCES.get(name)
    if provider is None and name.startswith("FileSource["):
        described = _file_data_source(source)
        if described:
            return f"~StreamingRelation {described}, {name}, [{cols}]"
    if provider is None:
        return f"~StreamingRelation {name}, [{cols}]"
    options = getattr(spec, "options", None) or {}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(dict(options).items()) if k.lower() != "path")
    h = f"{id(spec) & 0xFFFFFFF:x}"
    return f"~StreamingRelationV2 {_SOURCES_PACKAGE}{provider}@{h}, {name}, {_SOURCES_PACKAGE}{_V2_TABLES[name]}@{h}, [{shown}], [{cols}]"


def _file_data_source(source: L.StreamingRelation) -> str:
    """A file source's ``DataSource(...)`` as Spark's logical plans print it: the session, the
    format, no partition columns, the user's schema (``None`` when inferred), no bucketing, the
    options with the path, no catalog table. ``""`` when it cannot be written."""
    spec = source.source_spec
    try:
        jsession = java_session(source.template.sparkSession)
        session = f"{jsession.getClass().getName()}@{int(jsession.hashCode()) & 0xFFFFFFFF:x}"
        schema = "None"
        if getattr(spec, "schema", None) is not None:
            user = spec.schema
            json = user.json() if hasattr(user, "json") else None
            if json is None:  # a DDL string
                json = source.template.sparkSession.createDataFrame([], user).schema.json()
            jvm = jvm_view(source.template.sparkSession)
            schema = f"Some({jvm.org.apache.spark.sql.types.DataType.fromJson(json).toString()})"
        options = {k: v for k, v in dict(getattr(spec, "options", None) or {}).items() if v is not None}
        if getattr(spec, "path", None):
            options["path"] = spec.path
        shown = ", ".join(f"{k} -> {v}" for k, v in options.items())
        return f"DataSource({session},{spec.format},List(),{schema},List(),None,Map({shown}),None)"
    except Exception:  # py4j / internal API drift
        logger.debug("cannot describe the file source as Spark's DataSource", exc_info=True)
        return ""


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


def logical_sections(plan: L.LogicalPlan, optimized_plan: L.LogicalPlan | None = None) -> dict[str, str] | None:
    """Spark's parsed, analysed and optimised logical plans of a streaming DataFrame (and the
    optimised one with statistics, ``cost``), composed region by region (``logical_text``);
    ``None`` when a part of the plan cannot be shown so (explain then shows statestream's
    logical outline). A section that cannot be composed (``cost`` over a limit, whose
    statistics Spark derives across the whole plan) is left out and shows the outline.
    ``optimized_plan``: the plan as statestream's optimizer leaves it (``planner.optimized_plan``)."""
    try:
        # the parsed and analysed plans are the user's operations; the optimised ones are
        # composed from the plan as statestream's optimizer leaves it (filters pushed below an
        # aggregation or a watermark, projections below a limit), as Spark's optimizer does
        written = logical_text(plan)
        optimized = logical_text(optimized_plan) if optimized_plan is not None else written
    except Exception:  # py4j / internal API drift / an unforeseen plan shape
        logger.debug("cannot compose Spark's logical plans", exc_info=True)
        return None
    out = {}
    for key, text in (("parsed", written), ("analyzed", written), ("optimized", optimized), ("cost", optimized)):
        lines = text.trees.get(key) if text is not None else None
        if lines is not None:
            out[key] = "\n".join(lines)
    return out or None


#: the logical plan sections, and which section of a node's input each one shows below it
#: (Spark's parsed plan holds its inputs already analysed: each DataFrame operation is built
#: over the analysed plan of the one before)
_SECTIONS = {"parsed": "analyzed", "analyzed": "analyzed", "optimized": "optimized", "cost": "cost"}
_STATS = re.compile(r", (Statistics\(.*\))$")


@dataclass
class LogicalText:
    """Spark's logical trees of a part of the plan, line by line per section (``None``: that
    section cannot be shown), and the attributes it outputs (with ids)."""

    trees: dict[str, list[str] | None]
    output: tuple[str, ...]

    def stats(self) -> str:
        """The root's statistics in the ``cost`` section (``Statistics(sizeInBytes=8.0 EiB)``)."""
        cost = self.trees.get("cost")
        m = _STATS.search(cost[0]) if cost else None
        return m.group(1) if m else ""


def logical_text(node: L.LogicalPlan) -> LogicalText | None:
    """Spark's logical trees of ``node`` and what is below it. A chain of stateless steps (with
    the aggregation above it, if any) or a stream-static join is Spark's plan of it over
    stand-ins, each stand-in's leaf replaced by the trees of what it stands for and its ids
    renamed to theirs; the nodes Spark's batch plans do not keep (watermark, deduplication,
    limit, union) are written in Spark's words."""
    if isinstance(node, L.EventTimeWatermark):
        child = _child_text(node.child)
        if child is None:
            return None
        column = next((t for t in child.output if attribute_name(t) == node.column), node.column)
        kind = node.schema[node.column].dataType.simpleString() if node.column in node.schema.names else ""
        line = f"~EventTimeWatermark {node.node_id}, {with_delay(column, None)}: {kind}, {node.delay_text}"
        output = tuple(with_delay(t, node.delay_ms if attribute_name(t) == node.column else None) for t in child.output)
        return _unary(line, child, output)
    if isinstance(node, L.Deduplicate):
        child = _child_text(node.child)
        if child is None:
            return None

        names = analysed_key_names(node.template) or node.keys or tuple(attribute_name(t) for t in child.output)
        by_name = {attribute_name(t).lower(): t for t in child.output}
        keys = [by_name[n.lower()] for n in names if n.lower() in by_name]
        name = "DeduplicateWithinWatermark" if node.within_watermark else "Deduplicate"
        return _unary(f"~{name} [{', '.join(keys)}]", child, child.output)
    if isinstance(node, L.Limit):
        child = _child_text(node.child)
        if child is None:
            return None
        inner = _unary(f"~LocalLimit {node.n}", child, child.output, cost=False)
        text = _unary(f"~GlobalLimit {node.n}", inner, child.output, cost=False)
        if node.n == 0:  # Spark's optimizer replaces limit(0) and its input with an empty relation
            text.trees["optimized"] = [f"~LocalRelation <empty>, [{', '.join(child.output)}]"]
        return text
    if isinstance(node, L.Union):
        kids = [_child_text(i) for i in node.inputs]
        if any(k is None for k in kids):
            return None
        return _nary(f"~Union {str(node.by_name).lower()}, {str(node.allow_missing).lower()}", kids)  # type: ignore[arg-type]
    if isinstance(node, L.Join):
        return _join_text(node)
    if isinstance(node, (L.Stateless, L.Aggregate, L.StreamingRelation)):
        return _region_text(node)
    return None


def _child_text(node: L.LogicalPlan | None) -> LogicalText | None:
    return logical_text(node) if node is not None else None


def _prefixed(lines: list[str], last: bool) -> list[str]:
    """A subtree's lines under a parent: ``+- `` (the last input) or ``:- `` before its root."""
    head, rest = ("+- ", "   ") if last else (":- ", ":  ")
    return [head + lines[0], *(rest + line for line in lines[1:])]


def _unary(line: str, child: LogicalText, output: tuple[str, ...], cost: bool = True) -> LogicalText:
    """A node written in Spark's words over ``child``; in the ``cost`` section it takes its
    input's statistics (Spark's estimate of a node that keeps its input's columns)."""
    trees: dict[str, list[str] | None] = {}
    for key, below in _SECTIONS.items():
        lines = child.trees.get(below)
        if lines is None or (key == "cost" and (not cost or not child.stats())):
            trees[key] = None
            continue
        head = f"{line}, {child.stats()}" if key == "cost" else line
        trees[key] = [head, *_prefixed(lines, True)]
    return LogicalText(trees, output)


def _nary(line: str, kids: list[LogicalText]) -> LogicalText:
    """A union in Spark's words (its statistics: the inputs' sizes added up, which needs them
    all to be in bytes of one unit, so the ``cost`` section is left out otherwise)."""
    trees: dict[str, list[str] | None] = {}
    for key, below in _SECTIONS.items():
        parts = [k.trees.get(below) for k in kids]
        if any(p is None for p in parts) or key == "cost":
            trees[key] = None
            continue
        lines = [line]
        for i, p in enumerate(parts):
            lines.extend(_prefixed(p, i == len(parts) - 1))  # type: ignore[arg-type]
        trees[key] = lines
    return LogicalText(trees, kids[0].output)


def _region_text(node: L.LogicalPlan) -> LogicalText | None:
    """A chain of stateless steps, with the aggregation above it when ``node`` is one."""
    if isinstance(node, L.Aggregate):
        assert node.child is not None
        chain, bottom = stateless_chain(node.child)
        region = aggregate_region(node, chain, bottom)
    else:
        chain, bottom = stateless_chain(node)
        region = spark_region(chain, bottom)
    if region is None:
        return None
    inputs = bottom.inputs if isinstance(bottom, L.Union) else (bottom,)
    if isinstance(bottom, L.StreamingRelation):
        leaf = logical_relation_text(bottom, region.output_text)
        below = {region.standin_ids: LogicalText(dict.fromkeys(_SECTIONS, [leaf]), region.output_text)}
    else:
        kids = [logical_text(i) for i in inputs]
        if any(k is None for k in kids) or len(kids) != len(region.standins):
            return None
        below = {ids: k for (ids, _), k in zip(region.standins, kids)}  # type: ignore[misc]
        mapping: dict[int, int] = {}
        for ids, k in below.items():
            mapping.update(IdMap.between(ids, k.output).mapping)
        region.ids = IdMap(mapping)
    return _composed(region.query_execution, region.ids, below)


def _join_text(node: L.Join) -> LogicalText | None:
    """A stream-static join: Spark's plan of it over stand-ins for its streaming sides."""
    session = planning_session(node.template)
    joined, ids = standin_join(node, session)
    below = {}
    mapping: dict[int, int] = {}
    for side, side_ids in ids.items():
        child = logical_text(node.children[side])
        if child is None:
            return None
        below[tuple(side_ids)] = child
        mapping.update(IdMap.between(tuple(side_ids), child.output).mapping)
    # Spark's optimizer pushes filters to the streaming sides of the stand-in join; statestream's
    # optimizer has put the same filters into each streaming side's plan, so the optimised
    # trees show them there, once
    return _composed(java_dataframe(joined).queryExecution(), IdMap(mapping), below, collapse=True)


def _collapse_above_standins(parsed: list[tuple[str, str]], below: dict[tuple[int, ...], LogicalText]) -> list[tuple[str, str]]:
    """The tree without the chains of single-input nodes directly above each stand-in leaf
    (each such chain is a run of consecutive lines, the leaf last); the leaf takes the place of
    the chain's top."""
    depth = [len(p) // 3 for p, _ in parsed]

    def single_input(k: int) -> bool:
        kids = [j for j in range(k + 1, len(parsed)) if depth[j] == depth[k] + 1 and all(depth[m] > depth[k] for m in range(k + 1, j + 1))]
        return len(kids) == 1

    drop: set[int] = set()
    moved: dict[int, str] = {}
    for i, (_, body) in enumerate(parsed):
        rdd = _LOGICAL_RDD.match(body)
        if not rdd or tuple(int(x) for x in re.findall(r"#(\d+)", rdd.group("cols"))) not in below:
            continue
        top = i
        while top > 0 and depth[top - 1] == depth[top] - 1 and single_input(top - 1) and depth[top - 1] > 0:
            top -= 1
        if top != i:
            drop.update(range(top, i))
            moved[i] = parsed[top][0]
    return [(moved.get(i, p), b) for i, (p, b) in enumerate(parsed) if i not in drop]


_TREE_LINE = re.compile(r"^(?P<prefix>[ :|+-]*)(?P<body>.*)$")


def _composed(qe: Any, ids: IdMap, below: dict[tuple[int, ...], LogicalText], collapse: bool = False) -> LogicalText:
    """Spark's trees of ``qe`` with each stand-in leaf replaced by the trees of what it stands
    for, ids renamed, ``~`` before each resolved node that reads a stream. ``collapse``: in the
    optimised trees, the single-input nodes Spark put right above a stand-in are left out."""
    trees = {
        "parsed": str(qe.logical().treeString()),
        "analyzed": str(qe.analyzed().treeString()),
        "optimized": str(qe.optimizedPlan().treeString()),
        "cost": _optimized_with_stats(qe),
    }
    out: dict[str, list[str] | None] = {}
    for key, text in trees.items():
        lines = text.rstrip("\n").splitlines()
        section = _SECTIONS[key] if key != "parsed" else "analyzed"
        out[key] = _replace_leaves(lines, ids, below, section, collapse and key in ("optimized", "cost"))
    output = qe.analyzed().output()
    shown = ids.all(str(a.toString()) for a in jvm_seq(output))
    return LogicalText(out, shown)


def _replace_leaves(
    lines: list[str], ids: IdMap, below: dict[tuple[int, ...], LogicalText], section: str, collapse: bool = False
) -> list[str] | None:
    parsed = []
    for line in lines:
        m = _TREE_LINE.match(line)
        assert m is not None
        parsed.append((m.group("prefix"), m.group("body")))
    if collapse:
        parsed = _collapse_above_standins(parsed, below)
    depth = [len(p) // 3 for p, _ in parsed]
    leaves: dict[int, LogicalText] = {}
    suffixes: dict[int, str] = {}
    for i, (_, body) in enumerate(parsed):
        rdd = _LOGICAL_RDD.match(body)
        if rdd:
            found = tuple(int(x) for x in re.findall(r"#(\d+)", rdd.group("cols")))
            if found in below:
                leaves[i] = below[found]
                suffixes[i] = rdd.group("suffix") or ""
    streaming = [False] * len(parsed)
    for i in range(len(parsed)):
        j = i + 1
        while j < len(parsed) and depth[j] > depth[i]:
            j += 1
        streaming[i] = any(k in leaves for k in range(i, j))
    out: list[str] = []
    for i, (prefix, body) in enumerate(parsed):
        if i in leaves:
            sub = leaves[i].trees.get(section)
            if sub is None:
                return None
            indent = prefix[:-3] + ("   " if prefix.endswith("+- ") else ":  ") if prefix else ""
            head = sub[0]
            if suffixes[i] and not _STATS.search(head):  # a source's scan: the stand-in's size
                head += suffixes[i]
            stats = _STATS.search(head)
            if section == "cost" and (stats is None or f", {stats.group(1)}" != suffixes[i]):
                # Spark estimated the nodes above the stand-in from the stand-in's size (a
                # stream's default); another size below would change their statistics
                return None
            out.append(prefix + head)
            out.extend(indent + line for line in sub[1:])
            continue
        if streaming[i] and not body.startswith(("'", "~")):
            body = "~" + body
        out.append(prefix + ids(body))
    return out


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
    region = spark_region(chain, bottom)
    if region is None:
        return None
    try:
        return physical_region(region, connect_inputs(region, bottom, plan_bottom(bottom)))
    except Exception:  # an unforeseen plan shape
        logger.debug("Spark's plan of a stateless region has an unexpected shape", exc_info=True)
        return None
