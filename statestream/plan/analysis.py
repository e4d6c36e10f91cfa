"""Analysis-time checks of a streaming query: which operations and output modes are legal.

Spark runs ``UnsupportedOperationChecker.checkForStreaming`` when ``writeStream.start()`` is
called and refuses the query with an ``AnalysisException`` before any batch runs. statestream
runs the same checks, in the same order, over its own logical plan (``plan/logical.py``), so a
user sees the same exception class, error condition and message text as with Spark 4.1
(reference: ``spark-semantics.md`` §7.6, conformance scenario S36).

How the checks are organised (mirroring the order in which Spark finds the *first* problem, since
only the first one is reported):

1. the plan must contain a streaming source;
2. output-mode rules, decided on the *outermost* streaming aggregation (``aggregates_in``);
3. a bottom-up walk (children before parents, inputs left to right) applying per-node rules:
   distinct aggregates, ``dropDuplicatesWithinWatermark`` without an event-time column, union of
   stream and batch, limit in update mode, offset, sort without complete data, sample, non-time
   window functions, ``monotonically_increasing_id()``, joins (which join types a streaming side
   allows, ``plan/joins.py``, and the watermark bound of stream-stream outer and semi joins);
4. the "correctness" check on chained stateful operators (a warning only when
   ``spark.sql.streaming.statefulOperator.checkCorrectness.enabled`` is false).

``spark.sql.streaming.unsupportedOperationCheck=false`` disables everything, as in Spark.

The plan-shape rules are small pure functions over statestream nodes and the event-time marker
metadata of their schemas. Three facts live only in Spark's *analysed* expressions (distinct
aggregate functions, window expressions, ``monotonically_increasing_id``); they are read by an
``ExpressionInspector`` from each node's template (a batch DataFrame analysed on an empty
relation). The default inspector walks the template's analysed JVM plan through py4j; tests of the
pure rules pass a fake one. This module never imports pyspark itself.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Protocol, Sequence

from statestream.errors import StatestreamAnalysisException, analysis_error, finality_output_mode_error
from statestream.operators.aggregate import FINALITY_CONF
from statestream.errors.unsupported_operations import (
    MSG_APPLY_IN_PANDAS_APPEND_AFTER_AGGREGATION,
    MSG_APPLY_IN_PANDAS_EVENT_TIME_TIMEOUT_WITHOUT_WATERMARK,
    MSG_APPLY_IN_PANDAS_UPDATE_WITH_AGGREGATION,
    MSG_CORRECTNESS,
    MSG_DEDUP_WITHIN_WATERMARK,
    MSG_DISTINCT_AGGREGATE,
    MSG_LIMIT_UPDATE,
    MSG_NO_STREAMING_SOURCE,
    MSG_OFFSET,
    MSG_SAMPLE,
    MSG_SORT,
    MSG_UNION_STREAM_BATCH,
    NON_TIME_WINDOW_CONDITION,
    OP_AGGREGATION_WITHOUT_WATERMARK,
    OP_NO_AGGREGATION,
    OP_SESSION_WINDOW,
    SQLSTATE_42KDE,
    legacy_analysis_error,
    non_time_window_message,
    output_mode_error,
    apply_in_pandas_with_state_mode_message,
    stream_stream_bound_message,
    unsupported_expressions_message,
)
from statestream.plan.aggregate_functions import distinct_aggregation_enabled
from statestream.plan.joins import needs_stream_stream_bound, stream_join_refusal
from statestream._jvm.calls import java_dataframe, jvm_plan_nodes, jvm_seq
from statestream.plan.logical import (
    SESSION_WINDOW_KEY,
    WATERMARK_DELAY_KEY,
    Aggregate,
    BatchRelation,
    Deduplicate,
    FlatMapGroupsWithState,
    TransformWithState,
    EventTimeWatermark,
    Join,
    Limit,
    LogicalPlan,
    Sort,
    Stateless,
    StreamingRelation,
    Union,
)
from statestream.plan.stream_joins import condition_terms, has_valid_watermark_range

logger = logging.getLogger(__name__)

__all__ = [
    "check_for_streaming",
    "ExpressionInspector",
    "JvmExpressionInspector",
    "WindowFunctionUse",
    "DistinctAggregateUse",
    "UnsupportedExpressionUse",
    "is_streaming",
    "aggregates_in",
    "has_event_time_key",
    "watermark_in_grouping",
    "is_session_window_aggregate",
    "contains_complete_data",
    "dedup_has_event_time_key",
    "is_stateful_operation",
    "cannot_be_followed_by_stateful_operation",
    "has_correctness_issue",
    "is_union_of_stream_and_batch",
    "to_sql_id",
    "to_sql_stmt",
    "UNSUPPORTED_OPERATION_CHECK_CONF",
    "CHECK_CORRECTNESS_CONF",
    "JoinConditionUse",
    "stream_stream_bound_possible",
    "inputs_from_spark_engine",
    "spark_stream_sources",
]

UNSUPPORTED_OPERATION_CHECK_CONF = "spark.sql.streaming.unsupportedOperationCheck"
CHECK_CORRECTNESS_CONF = "spark.sql.streaming.statefulOperator.checkCorrectness.enabled"

OUTPUT_MODES = ("append", "complete", "update")

# ---------------------------------------------------------------------------------------------
# Facts read from Spark's analysed expressions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowFunctionUse:
    """One analysed ``Window`` operator: its window functions (Spark's ``toString``), the output
    columns they produce (Spark's attribute ``sql``) and their window specifications (``sql``),
    position by position."""

    functions: tuple[str, ...]
    columns: tuple[str, ...]
    specs: tuple[str, ...]


@dataclass(frozen=True)
class DistinctAggregateUse:
    """An analysed ``Aggregate`` operator with at least one ``DISTINCT`` aggregate function."""

    sqls: tuple[str, ...]


@dataclass(frozen=True)
class UnsupportedExpressionUse:
    """An analysed operator using expressions a streaming query cannot have
    (``monotonically_increasing_id()``), as their distinct ``sql`` texts."""

    sqls: tuple[str, ...]


@dataclass(frozen=True)
class JoinConditionUse:
    """What the analysed condition of a ``Join`` says about the watermark bound a stream-stream
    outer or semi join needs: whether an equi-join key is an event-time column, and whether some
    conjunct compares (``<``, ``<=``, ``>``, ``>=``) columns of both sides (the only place a range
    bound on event time can come from)."""

    watermark_in_keys: bool
    has_cross_side_comparison: bool
    #: the condition as the state watermark solver reads it (``plan/stream_joins.py``); empty
    #: when unknown (a fake inspector), then the comparison flag decides
    conjuncts: tuple = ()


ExpressionFact = WindowFunctionUse | DistinctAggregateUse | UnsupportedExpressionUse | JoinConditionUse


class ExpressionInspector(Protocol):
    """Reads the expression-level facts a node *introduces* (those in its template but in none
    of its children's templates), in Spark's bottom-up operator order."""

    def facts(self, node: LogicalPlan) -> Sequence[ExpressionFact]: ...


class JvmExpressionInspector:
    """``ExpressionInspector`` over the templates' analysed JVM plans (py4j).

    A node's template holds the whole lineage analysed on empty relations, so its analysed plan
    contains its children's plans; the facts the node introduces are the multiset difference.
    Attribute ids inside the facts are those of the template, which is why function texts that
    mention columns (``RANK(TS#2)``) may differ in the ``#id`` from Spark's own engine.
    Results are cached per template for the life of the inspector (one check).
    """

    def __init__(self) -> None:
        self._cache: dict[int, list[ExpressionFact]] = {}

    def facts(self, node: LogicalPlan) -> Sequence[ExpressionFact]:
        own = self._template_facts(node)
        if not own:
            return []
        inherited: Counter[ExpressionFact] = Counter()
        for child in node.children:
            inherited.update(self._template_facts(child))
        introduced = []
        for fact in own:
            if inherited[fact] > 0:
                inherited[fact] -= 1
            else:
                introduced.append(fact)
        return introduced

    def _template_facts(self, node: LogicalPlan) -> list[ExpressionFact]:
        key = id(node.template)
        if key not in self._cache:
            self._cache[key] = self._compute(node.template)
        return self._cache[key]

    def _compute(self, template: Any) -> list[ExpressionFact]:
        jdf = getattr(template, "_jdf", None)
        if jdf is None:  # not a classic PySpark DataFrame: nothing we can read
            return []
        try:
            analyzed = jdf.queryExecution().analyzed()
        except Exception:  # a template that cannot be analysed has no facts to offer
            logger.debug("could not read the analysed plan of a template", exc_info=True)
            return []
        facts: list[ExpressionFact] = []
        for operator in _jvm_post_order(analyzed):
            facts.extend(_jvm_operator_facts(operator))
        return facts


def _jvm_post_order(plan: Any) -> Iterator[Any]:
    """Operators of an analysed JVM plan, children first (Spark's ``foreachUp``)."""
    for child in jvm_seq(plan.children()):
        yield from _jvm_post_order(child)
    yield plan


def _jvm_collect(expr: Any, simple_class_name: str) -> list[Any]:
    """Sub-expressions of ``expr`` (itself included, pre-order) of the given JVM class."""
    found = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.getClass().getSimpleName() == simple_class_name:
            found.append(e)
        stack.extend(reversed(jvm_seq(e.children())))
    return found


def _jvm_operator_facts(operator: Any) -> list[ExpressionFact]:
    """The facts of one analysed operator: first what its kind implies (window functions of a
    ``Window``, distinct functions of an ``Aggregate``), then unsupported expressions, which is
    the order in which Spark checks one operator."""
    facts: list[ExpressionFact] = []
    name = operator.nodeName()
    if name == "Window":
        functions, columns, specs = [], [], []
        for named in jvm_seq(operator.windowExpressions()):
            for we in _jvm_collect(named, "WindowExpression"):
                functions.append(str(we.windowFunction().toString()))
                columns.append(str(named.toAttribute().sql()))
                specs.append(str(we.windowSpec().sql()))
        facts.append(WindowFunctionUse(tuple(functions), tuple(columns), tuple(specs)))
    elif name == "Aggregate":
        aggregate_exprs = operator.aggregateExpressions()
        if "distinct" in str(aggregate_exprs.toString()).lower():  # cheap pre-filter
            sqls = [
                str(ae.sql())
                for e in jvm_seq(aggregate_exprs)
                for ae in _jvm_collect(e, "AggregateExpression")
                if ae.isDistinct()
            ]
            if sqls:
                facts.append(DistinctAggregateUse(tuple(sqls)))
    elif name == "Join":
        fact = _jvm_join_condition_use(operator)
        if fact is not None:
            facts.append(fact)
    expressions = operator.expressions()
    if "monotonically_increasing_id" in str(expressions.toString()):  # cheap pre-filter
        sqls = []
        for e in jvm_seq(expressions):
            for m in _jvm_collect(e, "MonotonicallyIncreasingID"):
                text = str(m.sql())
                if text not in sqls:
                    sqls.append(text)
        if sqls:
            facts.append(UnsupportedExpressionUse(tuple(sqls)))
    return facts


_COMPARISONS = ("LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual")


def _jvm_join_condition_use(join: Any) -> JoinConditionUse | None:
    """``JoinConditionUse`` of an analysed ``Join`` (equi-join keys as Spark's planner extracts
    them: conjuncts ``a = b`` or ``a <=> b`` with ``a`` over one side and ``b`` over the other)."""
    condition = join.condition()
    if not condition.isDefined():
        return JoinConditionUse(False, False)
    left = {int(a.exprId().id()) for a in jvm_seq(join.left().output())}
    right = {int(a.exprId().id()) for a in jvm_seq(join.right().output())}

    def refs(e: Any) -> set[int]:
        return {int(a.exprId().id()) for a in jvm_seq(e.references().toSeq())}

    def is_event_time(e: Any) -> bool:
        return e.getClass().getSimpleName() == "AttributeReference" and bool(e.metadata().contains(WATERMARK_DELAY_KEY))

    keys = False
    compares = False
    pending = [condition.get()]
    while pending:
        e = pending.pop()
        kind = e.getClass().getSimpleName()
        if kind == "And":
            pending.extend([e.left(), e.right()])
            continue
        if kind not in ("EqualTo", "EqualNullSafe", *_COMPARISONS):
            continue
        a, b = refs(e.left()), refs(e.right())
        across = bool(a) and bool(b) and ((a <= left and b <= right) or (a <= right and b <= left))
        if kind in _COMPARISONS:
            compares = compares or bool(refs(e) & left and refs(e) & right)
        elif across and (is_event_time(e.left()) or is_event_time(e.right())):
            keys = True

    try:
        terms = condition_terms(condition.get(), sorted(left), sorted(right))
    except Exception:  # py4j / internal API drift: judge by the comparison flag
        logger.debug("cannot read a join condition for the state watermark solver", exc_info=True)
        terms = ()
    return JoinConditionUse(keys, compares, terms)


# ---------------------------------------------------------------------------------------------
# Message formatting helpers (Spark's quoting rules for error parameters)
# ---------------------------------------------------------------------------------------------


def to_sql_stmt(text: str) -> str:
    """Spark renders SQL fragments in error parameters upper-cased."""
    return text.upper()


def _parse_attribute_name(name: str) -> list[str]:
    """Split a (possibly back-quoted) multi-part name into its parts: dots separate parts outside
    back-quotes, and a doubled back-quote inside them stands for one."""
    parts: list[str] = []
    current: list[str] = []
    in_quotes = False
    i = 0
    while i < len(name):
        ch = name[i]
        if in_quotes:
            if ch == "`":
                if i + 1 < len(name) and name[i + 1] == "`":
                    current.append("`")
                    i += 1
                else:
                    in_quotes = False
            else:
                current.append(ch)
        elif ch == "`":
            in_quotes = True
        elif ch == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def to_sql_id(name: str) -> str:
    """Spark renders identifiers in error parameters as back-quoted parts joined by dots."""
    parts = _parse_attribute_name(name)
    if len(parts) > 1 and parts[0] == "__auto_generated_subquery_name":
        parts = parts[1:]
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


# ---------------------------------------------------------------------------------------------
# Pure rules over the logical plan
# ---------------------------------------------------------------------------------------------


def _post_order(plan: LogicalPlan) -> Iterator[LogicalPlan]:
    """Children first, inputs left to right: the order in which Spark meets problems."""
    for child in plan.children:
        yield from _post_order(child)
    yield plan


def is_streaming(plan: LogicalPlan) -> bool:
    """A subtree is streaming iff it reads a streaming source."""
    return any(isinstance(n, StreamingRelation) for n in plan.walk())


def inputs_from_spark_engine(plan: LogicalPlan) -> list[BatchRelation]:
    """The inputs of ``plan`` that are streaming DataFrames of Spark's own engine (made by
    ``spark.readStream`` on a session statestream does not serve), taken in as if they were
    static DataFrames by a join or a union. Spark's engine would refuse to run them as batch
    jobs in the first batch; ``start()`` refuses the query before anything runs."""
    return [n for n in plan.walk() if isinstance(n, BatchRelation) and bool(getattr(n.template, "isStreaming", False))]


def spark_stream_sources(df: Any) -> list[str]:
    """The streaming sources of one of Spark's own streaming DataFrames, each as its source name
    and columns (``rate [timestamp, value]``), read from its logical plan: how the refusal of a
    mixed query names the input to change."""
    out = []
    for node in jvm_plan_nodes(java_dataframe(df).queryExecution().logical()):
        if jvm_seq(node.children()) or not node.isStreaming():
            continue
        try:
            name = str(node.sourceName())
        except Exception:  # noqa: BLE001 - a streaming leaf without a source name: its class
            name = str(node.nodeName())
        columns = ", ".join(str(a.name()) for a in jvm_seq(node.output()))
        out.append(f"{name} [{columns}]")
    return out


def aggregates_in(plan: LogicalPlan) -> list[Aggregate]:
    """Streaming aggregations of ``plan`` in pre-order, so the first one is the outermost: the
    one Spark's output-mode rules look at."""
    return [n for n in plan.walk() if isinstance(n, Aggregate) and is_streaming(n)]


def _metadata(plan: LogicalPlan, column: str) -> Mapping[str, Any]:
    try:
        return plan.schema[column].metadata or {}
    except (KeyError, IndexError, ValueError):
        return {}


def _grouping_metadata(aggregate: Aggregate) -> list[Mapping[str, Any]]:
    return [_metadata(aggregate, name) for name in aggregate.grouping_names]


def has_event_time_key(aggregate: Aggregate) -> bool:
    """Whether a grouping key carries the event-time marker (plain column or window struct):
    only then can an append-mode aggregation ever finalise a group."""
    return any(WATERMARK_DELAY_KEY in md for md in _grouping_metadata(aggregate))


#: the same rule under the name of the check it serves
watermark_in_grouping = has_event_time_key


def is_session_window_aggregate(aggregate: Aggregate) -> bool:
    """Whether a grouping key is a session window (marker ``spark.sessionWindow`` set to true)."""
    return any(md.get(SESSION_WINDOW_KEY) is True for md in _grouping_metadata(aggregate))


def contains_complete_data(subplan: LogicalPlan, output_mode: str) -> bool:
    """Whether ``subplan`` yields its whole result in every batch: a batch subtree, or a subtree
    holding a streaming aggregation when the query runs in complete mode. Sorting is only
    meaningful on such data."""
    if not is_streaming(subplan):
        return True
    return output_mode == "complete" and bool(aggregates_in(subplan))


def dedup_has_event_time_key(dedup: Deduplicate) -> bool:
    """Whether a deduplication key carries the event-time marker (no keys means all columns)."""
    if dedup.child is None:
        return False
    keys = dedup.keys or tuple(dedup.child.schema.names)
    return any(WATERMARK_DELAY_KEY in _metadata(dedup.child, k) for k in keys)


def is_stateful_operation(node: LogicalPlan) -> bool:
    """Operators whose state eviction or late-row filtering depends on the global watermark.
    A deduplication counts only when keyed by event time (or within the watermark)."""
    if not is_streaming(node):
        return False
    if isinstance(node, Aggregate):
        return True
    if isinstance(node, Deduplicate):
        return node.within_watermark or dedup_has_event_time_key(node)
    if isinstance(node, Join):
        return all(is_streaming(c) for c in node.children)  # a stream-stream join keeps state
    if isinstance(node, TransformWithState):
        return True  # its timers and late-row filter read the watermark
    return False


def cannot_be_followed_by_stateful_operation(node: LogicalPlan, output_mode: str) -> bool:
    """Operators that may emit rows already older than the watermark: an aggregation emitting
    updates (complete/update mode) does, since updated groups keep their old event time."""
    return isinstance(node, Aggregate) and is_streaming(node) and output_mode != "append"


def has_correctness_issue(plan: LogicalPlan, output_mode: str) -> bool:
    """A stateful operator downstream of one that can emit rows older than the watermark."""
    for node in plan.walk():
        if is_stateful_operation(node):
            for below in node.walk():
                if below is not node and cannot_be_followed_by_stateful_operation(below, output_mode):
                    return True
    return False


def redefines_watermark(plan: LogicalPlan) -> bool:
    """Whether a ``withWatermark`` sits above another one in the same input chain (a second
    event-time column of one stream, e.g. two ``withWatermark`` before a ``dropDuplicates``).

    Why: Spark's watermark propagation (``allowMultiple=true``, the default) refuses a watermark
    node that receives a watermark from below, whatever lies between them; two streams that each
    have their own watermark and meet in a union are fine. Spark only checks this when it
    simulates the propagation, i.e. for a batch whose watermark is not 0."""
    return any(
        isinstance(n, EventTimeWatermark) and any(isinstance(c, EventTimeWatermark) for c in n.input_plan.walk())
        for n in plan.walk()
    )


def is_union_of_stream_and_batch(node: LogicalPlan) -> bool:
    return isinstance(node, Union) and len({is_streaming(c) for c in node.children}) == 2


def _stateless_op(node: LogicalPlan) -> str | None:
    return node.op if isinstance(node, Stateless) else None


def _node_rule_message(node: LogicalPlan, output_mode: str) -> str | None:
    """The node-kind rules of the bottom-up walk (everything but expression facts)."""
    op = _stateless_op(node)
    child_streaming = any(is_streaming(c) for c in node.children)
    if isinstance(node, Deduplicate) and node.within_watermark and is_streaming(node):
        if node.child is None or not node.child.event_time_columns():
            return MSG_DEDUP_WITHIN_WATERMARK
    elif is_union_of_stream_and_batch(node):
        return MSG_UNION_STREAM_BATCH
    elif isinstance(node, Limit) or op in ("Limit", "GlobalLimit", "LocalLimit"):
        if node.children and all(is_streaming(c) for c in node.children) and output_mode == "update":
            return MSG_LIMIT_UPDATE
    elif op == "Offset":
        return MSG_OFFSET  # Spark refuses an offset anywhere in a streaming query
    elif isinstance(node, Sort) or op == "Sort":
        if not contains_complete_data(node, output_mode):
            return MSG_SORT
    elif op == "Sample" and child_streaming:
        return MSG_SAMPLE
    elif isinstance(node, Join) and node.left is not None and node.right is not None:
        return stream_join_refusal(node.join_type, is_streaming(node.left), is_streaming(node.right), output_mode)
    return None


def apply_in_pandas_with_state_message(node: FlatMapGroupsWithState, plan: LogicalPlan, output_mode: str) -> str | None:
    """Spark's checks of a streaming ``applyInPandasWithState``: the function's output mode
    against the query's and the aggregations in the query, then the watermark an event-time
    timeout needs."""
    if not aggregates_in(plan):
        if node.output_mode in ("update", "append") and node.output_mode != output_mode:
            return apply_in_pandas_with_state_mode_message(node.output_mode, output_mode)
    elif node.output_mode == "update":
        return MSG_APPLY_IN_PANDAS_UPDATE_WITH_AGGREGATION
    elif node.child is not None and aggregates_in(node.child):
        return MSG_APPLY_IN_PANDAS_APPEND_AFTER_AGGREGATION
    if node.timeout_conf == "EventTimeTimeout" and (node.child is None or not node.child.event_time_columns()):
        return MSG_APPLY_IN_PANDAS_EVENT_TIME_TIMEOUT_WITHOUT_WATERMARK
    return None


def stream_stream_bound_possible(node: Join, use: JoinConditionUse) -> bool:
    """Whether a stream-stream join may have the watermark bound Spark requires of it: an
    event-time join key, or a watermark on the side whose event time bounds the other side's
    rows and a comparison across the sides that Spark's solver turns into a bound on that side
    (``has_valid_watermark_range``, solved as Spark's check does with a watermark of 1000000 ms).
    Without the condition's terms (a fake inspector) a comparison across the sides counts."""
    if not needs_stream_stream_bound(node.join_type, True, True) or use.watermark_in_keys:
        return True
    assert node.left is not None and node.right is not None
    if use.conjuncts:
        return has_valid_watermark_range(
            node.join_type, use.conjuncts, bool(node.left.event_time_columns()), bool(node.right.event_time_columns())
        )
    left_wm, right_wm = bool(node.left.event_time_columns()), bool(node.right.event_time_columns())
    if node.join_type in ("LeftOuter", "LeftSemi"):
        return right_wm and use.has_cross_side_comparison
    if node.join_type == "RightOuter":
        return left_wm and use.has_cross_side_comparison
    return (left_wm or right_wm) and use.has_cross_side_comparison


def _fact_error(fact: ExpressionFact, streaming: bool) -> StatestreamAnalysisException | None:
    """The error an expression fact causes. Window functions and distinct aggregates are refused
    only over streaming input; unsupported expressions anywhere in the query."""
    if isinstance(fact, WindowFunctionUse) and streaming:
        window_func = ",".join(to_sql_stmt(f) for f in fact.functions)
        column_name = ",".join(to_sql_id(c) for c in fact.columns)
        window_spec = ",".join(to_sql_stmt(s) for s in fact.specs)
        return analysis_error(
            NON_TIME_WINDOW_CONDITION,
            non_time_window_message(window_func, column_name, window_spec),
            SQLSTATE_42KDE,
            windowFunc=window_func,
            columnName=column_name,
            windowSpec=window_spec,
        )
    if isinstance(fact, DistinctAggregateUse) and streaming:
        return legacy_analysis_error(MSG_DISTINCT_AGGREGATE)
    if isinstance(fact, UnsupportedExpressionUse) and fact.sqls:
        return legacy_analysis_error(unsupported_expressions_message(fact.sqls))
    return None


def _output_mode_violation(plan: LogicalPlan, output_mode: str) -> str | None:
    """The unsupported-operation text for the output mode, judged on the outermost aggregation."""
    aggregates = aggregates_in(plan)
    if output_mode == "append" and aggregates and not has_event_time_key(aggregates[0]):
        return OP_AGGREGATION_WITHOUT_WATERMARK
    if output_mode == "update" and aggregates and is_session_window_aggregate(aggregates[0]):
        return OP_SESSION_WINDOW
    if output_mode == "complete" and not aggregates:
        return OP_NO_AGGREGATION
    return None


def _throw(error: StatestreamAnalysisException | str, node: LogicalPlan) -> None:
    """Raise ``error`` (a legacy text is wrapped in Spark's legacy condition), remembering the
    node it was found on for the API layer's diagnostics."""
    exc = legacy_analysis_error(error) if isinstance(error, str) else error
    exc.statestream_node = node  # type: ignore[attr-defined]
    logger.debug("streaming query refused at %s: %s", node.node_name, exc)
    raise exc


def _conf_enabled(conf: Mapping[str, str] | None, key: str) -> bool:
    """Spark's boolean conf parsing: case-insensitive ``true``/``false``, default true here."""
    if not conf or key not in conf:
        return True
    value = str(conf[key]).strip().lower()
    if value in ("true", "false"):
        return value == "true"
    msg = f"{key} should be boolean, but was {conf[key]}"
    raise ValueError(msg)


def _normalise_output_mode(output_mode: str) -> str:
    mode = str(output_mode).lower()
    if mode not in OUTPUT_MODES:
        msg = f"unknown output mode {output_mode!r}; expected one of {OUTPUT_MODES}"
        raise ValueError(msg)
    return mode


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def check_for_streaming(
    plan: LogicalPlan,
    output_mode: str,
    conf: Mapping[str, str] | None = None,
    *,
    inspector: ExpressionInspector | None = None,
) -> None:
    """Refuse a streaming query Spark 4.1 would refuse at ``writeStream.start()``.

    Raises ``StatestreamAnalysisException`` with Spark's condition and exact message for the
    first problem found in Spark's order. ``conf`` is the session conf (string values);
    ``inspector`` reads expression facts from templates (default: their analysed JVM plans).
    """
    if not _conf_enabled(conf, UNSUPPORTED_OPERATION_CHECK_CONF):
        logger.debug("%s=false: unsupported-operation checks skipped", UNSUPPORTED_OPERATION_CHECK_CONF)
        check_finality(plan, output_mode)
        return
    mode = _normalise_output_mode(output_mode)
    inspector = inspector if inspector is not None else JvmExpressionInspector()

    if not is_streaming(plan):
        _throw(MSG_NO_STREAMING_SOURCE, plan)

    operation = _output_mode_violation(plan, mode)
    if operation is not None:
        _throw(output_mode_error(mode, operation), plan)

    for node in _post_order(plan):
        message = _node_rule_message(node, mode)
        if message is None and isinstance(node, FlatMapGroupsWithState) and is_streaming(node):
            message = apply_in_pandas_with_state_message(node, plan, mode)
        if message is not None:
            _throw(message, node)
        streaming = is_streaming(node)
        for fact in inspector.facts(node):
            if isinstance(fact, JoinConditionUse):
                if (
                    isinstance(node, Join)
                    and all(is_streaming(c) for c in node.children)
                    and not stream_stream_bound_possible(node, fact)
                ):
                    _throw(stream_stream_bound_message(node.join_type), node)
                continue
            if isinstance(fact, DistinctAggregateUse) and conf and distinct_aggregation_enabled(conf.get):
                continue  # statestream's opt-in: exact distinct aggregates (plan/aggregate_functions.py)
            error = _fact_error(fact, streaming)
            if error is not None:
                _throw(error, node)

    if has_correctness_issue(plan, mode):
        if _conf_enabled(conf, CHECK_CORRECTNESS_CONF):
            _throw(MSG_CORRECTNESS, plan)
        logger.warning("%s (%s=false, so the query runs anyway)", MSG_CORRECTNESS, CHECK_CORRECTNESS_CONF)
    check_finality(plan, mode)


def check_finality(plan: LogicalPlan, output_mode: str) -> None:
    """statestream's own rule, after Spark's: an aggregation built with the finality columns
    (``FINALITY_CONF``) runs in update or append mode only.

    >>> check_finality(Aggregate(template=None, finality=True), "update")  # nothing to refuse
    """
    if str(output_mode).lower() != "complete":
        return
    for node in aggregates_in(plan):
        if node.finality:
            _throw(finality_output_mode_error(FINALITY_CONF), node)

