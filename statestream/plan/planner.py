"""The streaming planner: logical plan to physical operators.

Spark: ``IncrementalExecution``'s planner with its extra strategies (``StatefulAggregationStrategy``
with ``AggUtils.planStreamingAggregation``, ``StreamingGlobalLimitStrategy`` in ``plan/limits.py``,
``StreamingDeduplicationStrategy`` in ``plan/dedup.py``; joins in ``plan/joins.py``).
The planner knows nothing about batches: per-batch fields (state info, watermarks, output mode)
are filled in by ``plan/incremental.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from statestream.errors import global_session_aggregation_error, grouping_column_error, grouping_id_columns_error
from statestream.operators.aggregate import (
    GROUPING_ID_NAME,
    REVISION_STATE_FIELD,
    AggregateExplainText,
    HASH_AGGREGATE,
    OBJECT_HASH_AGGREGATE,
    PARTIAL_KEPT,
    PARTIAL_SKIPPABLE,
    PARTIAL_SKIPPABLE_FED_BY_SOURCE,
    SORT_AGGREGATE,
    AggregationInfo,
    ShuffleExchangeExec,
    StreamingAggregateExec,
    sorted_for_aggregate,
)
from statestream.operators.basic import BatchRelationExec, CollectMetricsExec, SortExec, StatelessExec, StreamingRelationExec, UnionExec
from statestream.operators.session_window import (
    MERGE_SESSIONS_IN_LOCAL_PARTITION_CONF,
    MergingSessionsExec,
    SessionWindowInfo,
    SessionWindowPartialAggregateExec,
    SessionWindowSortExec,
    SessionWindowStateStoreRestoreExec,
    SessionWindowStateStoreSaveExec,
)
from statestream.plan.dedup import plan_streaming_deduplication
from statestream.plan.flat_map_groups_with_state import plan_flat_map_groups_with_state
from statestream._jvm.calls import jvm_seq, jvm_view
from statestream.plan.column_pruning import prune_unread_aggregates
from statestream.plan.optimizer import push_down_filters
from statestream.plan.spark_text import aggregate_region, aggregate_text, dress_with_ids, region_plan, stateless_chain
from statestream.plan.transform_with_state import plan_transform_with_state
from statestream.operators.stateful import StateStoreRestoreExec, StateStoreSaveExec
from statestream.operators.watermark import EventTimeWatermarkExec
from statestream.plan import logical as L
from statestream.plan.aggregate_buffers import jvm_aggregate, share_equal_calls, spark_buffers
from statestream.plan.aggregate_expressions import decompose_output
from statestream.plan.aggregates import AggregateCall, column_node
from statestream.plan.joins import is_stream_stream, plan_join
from statestream.plan.stream_joins import plan_stream_stream_join
from statestream.plan.limits import plan_limit, push_projections_below_limits

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, GroupedData

    from statestream.operators.base import PhysicalOperator

__all__ = [
    "plan_streaming_query",
    "optimized_plan",
    "plan_streaming_aggregation",
    "plan_streaming_aggregation_for_session",
    "aggregation_info",
    "session_window_info",
    "spark_aggregate_node",
]


def optimized_plan(plan: L.LogicalPlan) -> L.LogicalPlan:
    """The logical plan as statestream's optimizer rewrites it before planning, as Spark's
    does: aggregate columns no operator reads left out, filters pushed down (below a watermark,
    into an aggregation's keys), projections below limits."""
    return push_projections_below_limits(push_down_filters(prune_unread_aggregates(plan)))


def table_store_conf(store_conf: Any) -> Any:
    """The store conf of an operator that reads its whole state in every batch (session windows,
    the Python state operators, stream-stream joins, a limit, an aggregation in complete mode):
    the table store, even where the
    query asked for the layered one (``state/layered.py``). Such a batch costs the whole state on
    either store, and the table store holds it ready where the layered one would merge its runs
    to build it. Aggregations and deduplication, whose batches touch only their keys, keep what
    the query asked for.

    >>> from statestream.state.store import StateStoreConf
    >>> table_store_conf(StateStoreConf(layered=True)).layered, table_store_conf(None)
    (False, None)
    """
    if store_conf is None or not getattr(store_conf, "layered", False):
        return store_conf
    return dataclasses.replace(store_conf, layered=False)


def plan_streaming_query(
    plan: L.LogicalPlan,
    num_partitions: int,
    source_indexes: dict[int, int],
    store_conf=None,
    output_mode: str = "append",
    for_explain: bool = False,
) -> "PhysicalOperator":
    """Plan ``plan``; ``source_indexes`` maps ``id(StreamingRelation)`` to the source's index in
    the offset log. ``output_mode`` decides how a limit is planned (``plan/limits.py``);
    ``for_explain`` asks for the nodes only ``explain()`` shows (Spark's own plan of a join's
    static side, ``plan/joins.py``)."""

    whole_state_conf = table_store_conf(store_conf)
    # complete mode emits every row of the aggregation's state in every batch
    aggregation_conf = whole_state_conf if output_mode == "complete" else store_conf

    def go(node: L.LogicalPlan) -> "PhysicalOperator":
        if for_explain and isinstance(node, (L.Stateless, L.StreamingRelation)):
            shown = _spark_region(node)
            if shown is not None:
                return shown
        if for_explain and isinstance(node, L.Aggregate):
            shown = _spark_aggregate(node)
            if shown is not None:
                return shown
        return plan_node(node)

    def _spark_aggregate(node: L.Aggregate) -> "PhysicalOperator | None":
        """For ``explain()``: the aggregation's steps with Spark's text (attribute ids), over
        Spark's plan of the stateless steps below it (``plan/spark_text.py``)."""
        assert node.child is not None
        chain, bottom = stateless_chain(node.child)
        region = aggregate_region(node, chain, bottom)
        if region is None:
            return None
        parts = aggregate_text(region, bottom, go(bottom), num_partitions)
        if parts is None:
            return None
        text, child = parts
        if node.is_session_window():
            if not text.session:
                return None
            return plan_streaming_aggregation_for_session(node, child, num_partitions, whole_state_conf, spark_text=text)
        if text.session:
            return None
        return plan_streaming_aggregation(node, child, num_partitions, aggregation_conf, spark_text=text)

    def _spark_region(node: L.LogicalPlan) -> "PhysicalOperator | None":
        """For ``explain()``: a chain of stateless operations (or a bare source) as Spark
        plans it, with attribute ids (``plan/spark_text.py``)."""
        chain, bottom = stateless_chain(node)
        if not chain and not isinstance(bottom, L.StreamingRelation):
            return None
        return region_plan(chain, bottom, plan_node if not chain else go)

    def plan_node(node: L.LogicalPlan) -> "PhysicalOperator":
        if isinstance(node, L.StreamingRelation):
            spec = node.source_spec
            name = getattr(spec, "short_name", None) or getattr(spec, "format", "source")
            return StreamingRelationExec(
                source_index=source_indexes[id(node)], source_name=str(name), output=tuple(node.schema.names)
            )
        if isinstance(node, L.EventTimeWatermark):
            return EventTimeWatermarkExec(
                child=go(node.input_plan),
                column=node.column,
                delay_ms=node.delay_ms,
                delay_text=node.delay_text,
                node_id=node.node_id,
                column_type=node.schema[node.column].dataType.simpleString() if node.column in node.schema.names else "",
            )
        if isinstance(node, L.Aggregate) and node.is_session_window():
            return plan_streaming_aggregation_for_session(node, go(node.input_plan), num_partitions, whole_state_conf)
        if isinstance(node, L.Aggregate):
            return plan_streaming_aggregation(node, go(node.input_plan), num_partitions, aggregation_conf)
        if isinstance(node, L.Deduplicate):
            return plan_streaming_deduplication(node, go(node.input_plan), num_partitions, store_conf, root=top)
        if isinstance(node, L.FlatMapGroupsWithState):
            return plan_flat_map_groups_with_state(node, go(node.input_plan), num_partitions, whole_state_conf)
        if isinstance(node, L.TransformWithState):
            return plan_transform_with_state(node, go(node.input_plan), num_partitions, whole_state_conf)
        if isinstance(node, L.Limit):
            return plan_limit(node, go, output_mode, whole_state_conf, root=node is top, for_explain=for_explain)
        if isinstance(node, L.Sort):
            return SortExec(child=go(node.input_plan), description=node.description, transform=node.transform)
        if isinstance(node, L.AggregationFinality):
            return go(node.input_plan)  # the aggregation's rows carry the two columns
        if isinstance(node, L.Stateless):
            return StatelessExec(child=go(node.input_plan), op=node.op, description=node.description, transform=node.transform)
        if isinstance(node, L.CollectMetrics):
            return CollectMetricsExec(child=go(node.input_plan), name=node.name, exprs=node.exprs)
        if isinstance(node, L.Union):
            return UnionExec(inputs=tuple(go(i) for i in node.inputs), by_name=node.by_name, options=node.allow_missing)
        if isinstance(node, L.BatchRelation):
            return BatchRelationExec(df=node.template)
        if isinstance(node, L.Join) and is_stream_stream(node):
            return plan_stream_stream_join(node, go, num_partitions, whole_state_conf, root=top)
        if isinstance(node, L.Join):
            return plan_join(node, go, for_explain=for_explain)
        msg = f"statestream cannot plan {node.node_name} yet"
        raise NotImplementedError(msg)

    top = optimized_plan(plan)
    if not for_explain:
        return go(top)

    return dress_with_ids(go(top))


#: each ``Aggregate`` node's decomposition, kept while the node lives: ``start()`` checks it
#: (``MicroBatchExecution.prepare``) and the query's thread plans with it, about 60 ms of Py4J
#: calls each time; the node's DataFrame has its analysis fixed, as Spark's Dataset does
_AGGREGATION_INFOS: "weakref.WeakKeyDictionary[L.Aggregate, AggregationInfo]" = weakref.WeakKeyDictionary()


def aggregation_info(node: L.Aggregate) -> AggregationInfo:
    """Decompose an ``Aggregate`` node into keys, buffers and the event-time key (once per node:
    ``_AGGREGATION_INFOS``)."""
    info = _AGGREGATION_INFOS.get(node)
    if info is None:
        info = _decompose_aggregate(node)
        _AGGREGATION_INFOS[node] = info
    return info


def _decompose_aggregate(node: L.Aggregate) -> AggregationInfo:
    from pyspark.sql.types import LongType, StructField, StructType

    names = node.grouping_names
    # cube/rollup: Spark's grouping id is one more key (state key field ``spark_grouping_id``)
    keys = tuple(f"__k{i}" for i in range(len(names) + (1 if node.grouping_sets else 0)))
    calls = tuple(
        call
        for i, (c, n) in enumerate(zip(node.aggregates, node.aggregate_names))
        if i not in node.unread
        for call in _output_calls(c, i, n, node, keys)
    )
    # calls Spark's planner merges into one (first(s) and any_value(s), ...) share its buffers
    buffers = spark_buffers(node.input_plan.template, calls)
    calls = share_equal_calls(calls, buffers)
    et_name = node.event_time_key()
    et_key = None
    et_struct = False
    if et_name is not None:
        et_key = keys[names.index(et_name)]
        et_struct = isinstance(node.schema[et_name].dataType, StructType)
    key_json, value_json = _state_schema_json(node, calls, buffers)
    if node.finality:  # the emission counter, after the buffers
        value_json = {**value_json, "fields": [*value_json["fields"], StructField(REVISION_STATE_FIELD, LongType(), False).jsonValue()]}
    aggregate_node, aggregate_codegen = spark_aggregate_node(node.template)
    if not all(c.spark_function for c in calls):
        # a Python aggregate function: Spark has no plan for it on a stream; its batch side is a
        # collect_list, which Spark's planner puts in an ObjectHashAggregate
        aggregate_node, aggregate_codegen = OBJECT_HASH_AGGREGATE, False
    # cube/rollup: Spark groups by Expand's outputs and the grouping id; all keys are hashed
    partition_keys = None if node.grouping_sets or not keys else spark_partition_key_indexes(node.template, len(keys))
    return AggregationInfo(
        aggregate_node=aggregate_node,
        aggregate_codegen=aggregate_codegen,
        partition_key_indexes=partition_keys,
        partial_skippable=partial_step_skippable(node, keys, partition_keys),
        key_schema_json=key_json,
        value_schema_json=value_json,
        grouping=tuple(node.grouping),
        grouping_names=tuple(names),
        key_columns=keys,
        calls=calls,
        output_schema=node.schema,
        event_time_key=et_key,
        event_time_is_struct=et_struct,
        key_filters=tuple(node.key_filters),
        grouping_sets=node.grouping_sets,
        finality=node.finality,
        unread=tuple(sorted(node.unread)),
    )


def _output_calls(col, index: int, output_name: str, node: L.Aggregate, keys: tuple[str, ...]) -> list:
    """The calls one output column of the aggregation needs (``decompose_output``), or its
    ``GroupingCall`` under cube/rollup."""
    grouping = _grouping_call(col, output_name, node, keys)
    return [grouping] if grouping is not None else decompose_output(col, index, output_name, node.input_plan.template)


@dataclass(frozen=True)
class GroupingCall(AggregateCall):
    """``grouping_id()`` or ``grouping(col)`` under ``cube``/``rollup``: no buffer of its own, its
    value is read from the grouping-id key (Spark: ``spark_grouping_id``; ``grouping(c)`` is the
    bit of ``c``, highest bit for the first grouping column)."""

    gid_column: str = ""
    shift: int | None = None  # None: the whole grouping id

    def partial_columns(self) -> list:
        return []

    def final_column(self):
        from pyspark.sql import functions as F

        gid = F.col(self.gid_column)
        if self.shift is None:
            return gid
        return F.shiftright(gid, self.shift).bitwiseAND(F.lit(1)).cast("byte")


def _grouping_call(col, output_name: str, node: L.Aggregate, keys: tuple[str, ...]) -> GroupingCall | None:
    """A ``GroupingCall`` if ``col`` is ``grouping_id()``/``grouping(c)`` of a cube/rollup, else
    ``None`` (then it is an aggregate function)."""
    if not node.grouping_sets:
        return None
    try:
        fn = column_node(col)
        while fn.getClass().getSimpleName() == "Alias":
            fn = fn.child()
    except Exception:  # noqa: BLE001 - not a classic column: let the decomposition say what is wrong
        return None
    if fn.getClass().getSimpleName() != "UnresolvedFunction":
        return None
    name = str(fn.functionName()).lower()
    if name not in ("grouping", "grouping_id"):
        return None
    n = len(node.grouping)
    args = [str(a.sql()).replace("`", "") for a in jvm_seq(fn.arguments())]
    grouping_sql = []
    for g, out in zip(node.grouping, node.grouping_names):
        try:
            text = str(column_node(g).sql()).replace("`", "")
        except Exception:  # noqa: BLE001
            text = out
        grouping_sql.append({text, out})
    common: dict[str, Any] = dict(function=name, args=(), is_distinct=False, output_name=output_name, buffers=(), sql=str(fn.sql()), gid_column=keys[n])
    if name == "grouping_id":
        if args and (len(args) != n or any(a not in g for a, g in zip(args, grouping_sql))):
            raise grouping_id_columns_error()
        return GroupingCall(**common)
    matches = [i for i, g in enumerate(grouping_sql) if len(args) == 1 and args[0] in g]
    if len(matches) != 1:
        raise grouping_column_error(args, node.grouping_names)
    return GroupingCall(**common, shift=n - 1 - matches[0])


def _state_schema_json(node: L.Aggregate, calls, spark: dict | None = None) -> tuple[dict, dict]:
    """Key and value schemas of the aggregation's state as Spark writes them (format v2: the
    value holds only the buffers), from a batch analysis of the partial aggregation; a field's
    nullability is that of Spark's buffer attribute where ``spark`` (``spark_buffers``) has the
    call's buffer with the same field names."""
    from pyspark.sql.types import LongType, StructField, StructType

    partials = [p for c in calls for p in c.partial_columns()]
    t = node.input_plan.template
    groupings: dict[str | None, Callable[..., GroupedData]] = {None: t.groupBy, "cube": t.cube, "rollup": t.rollup}
    group = groupings[node.grouping_sets]
    buffers = group(*node.grouping).agg(*partials).schema if partials else None
    key_json = spark_grouping_key_schema(node.template)  # cube/rollup: ends with spark_grouping_id
    if key_json is None:
        key = StructType([StructField(f.name, f.dataType, f.nullable) for f in node.schema.fields[: len(node.grouping)]])
        if node.grouping_sets:
            key.add(StructField(GROUPING_ID_NAME, LongType(), False))
        key_json = key.jsonValue()
    if spark is None:
        spark = spark_buffers(t, calls)
    value_fields = []
    for c in calls:
        own = {f.name: f for f in c.state_fields()}
        declared = spark.get(id(c))
        names = [b.spark_name for b in c.buffers]
        nullable = [n for _, n in declared.fields] if declared and [f for f, _ in declared.fields] == names else None
        for j, b in enumerate(c.buffers):
            f = own.get(b.column) or buffers[b.column]  # type: ignore[index]  # a buffer not in `own` is a partial column: buffers is set
            value_fields.append(StructField(b.spark_name, f.dataType, nullable[j] if nullable else f.nullable))
    return key_json, StructType(value_fields).jsonValue()


#: Spark's optimizer rules that shape an aggregation's grouping keys, in the optimizer's order.
_GROUPING_RULES = (
    "RemoveLiteralFromGroupExpressions",
    "RemoveRepetitionFromGroupExpressions",
    "PullOutGroupingExpressions",
)


def spark_partition_key_indexes(agg_df, num_keys: int) -> tuple[int, ...] | None:
    """Which grouping keys (by position) the aggregation's exchange hashes, as Spark's optimizer
    leaves them: literals dropped, a repeated deterministic key kept once (its first occurrence).
    ``()``: every key is a literal, and Spark groups (and hashes) by the int literal ``0`` instead.

    Why: the exchange below the state step is Spark's (the batch ``groupBy``), and it hashes these
    keys only; a state partition id computed from all the keys would send the rows of state
    partition p to another task. Spark's own streaming aggregation places its state by the same
    reduced keys, so this also keeps each key in the state partition where Spark keeps it.
    ``None`` when the JVM plan cannot be inspected or does not line up with the ``num_keys``
    grouping columns (the caller then hashes all keys).
    """
    try:
        current = jvm_aggregate(agg_df, ())
        if current is None:
            return None
        grouping = current.groupingExpressions()
        if grouping.length() != num_keys:
            return None
        kept: list[int] = []
        seen: list[Any] = []  # py4j expressions
        for i in range(num_keys):
            e = grouping.apply(i)
            if e.foldable():
                continue
            if e.deterministic():
                canonical = e.canonicalized()
                if any(canonical.equals(c) for c in seen):
                    continue
                seen.append(canonical)
            kept.append(i)
        return tuple(kept)
    except Exception:  # py4j / internal API drift: hash all keys
        import logging

        logging.getLogger(__name__).debug("cannot derive the keys Spark's exchange hashes", exc_info=True)
        return None


#: Spark's conf that allows the object-based hash aggregate (default true)
USE_OBJECT_HASH_AGGREGATE_CONF = "spark.sql.execution.useObjectHashAggregateExec"
_AGGREGATE_PACKAGE = "org.apache.spark.sql.catalyst.expressions.aggregate."


def spark_aggregate_node(agg_df: "DataFrame") -> tuple[str, bool]:
    """Which physical aggregate Spark's planner uses for the aggregation ``agg_df`` (a batch
    DataFrame whose analysed plan has the ``Aggregate``), and whether it runs in whole-stage
    codegen: ``(HASH_AGGREGATE | OBJECT_HASH_AGGREGATE | SORT_AGGREGATE, codegen)``.

    Why: ``explain()`` must name the nodes as Spark does, and Spark decides by rules over the
    aggregate functions' buffer types and classes (and the grouping types), so the decision is
    asked of Spark itself rather than copied into a type table that would drift from it:
    ``Aggregate.supportsHashAggregate(buffer attributes, grouping)`` for the hash aggregate,
    else ``Aggregate.supportsObjectHashAggregate(aggregate expressions, grouping)`` together with
    ``spark.sql.execution.useObjectHashAggregateExec`` for the object hash aggregate, else the
    sort aggregate. The same functions and key types reach all four steps of a streaming
    aggregation, so one answer holds for each. Runtime-replaceable aggregates (``count_if``,
    ``any_value``, ``median``, ...) are replaced first, as Spark's optimizer does before planning.
    Codegen: only a hash aggregate, and only when no function is an imperative (non-declarative)
    aggregate (``approx_count_distinct`` is one). Spark's test-only force flags are ignored.
    Falls back to ``(HASH_AGGREGATE, True)`` when the JVM plan cannot be inspected.
    """
    try:
        current = jvm_aggregate(agg_df, ("ReplaceExpressions", *_GROUPING_RULES))
        if current is None:
            return HASH_AGGREGATE, True
        jvm = jvm_view(agg_df.sparkSession)
        pending = jvm_seq(current.aggregateExpressions())
        aggregates = []
        while pending:
            e = pending.pop()
            if e.getClass().getSimpleName() == "AggregateExpression":
                aggregates.append(e)
                continue
            pending.extend(jvm_seq(e.children()))
        buffers = jvm.java.util.ArrayList()
        for a in aggregates:
            for attr in jvm_seq(a.aggregateFunction().aggBufferAttributes()):
                buffers.add(attr)
        expressions = jvm.java.util.ArrayList()
        for a in aggregates:
            expressions.add(a)
        to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        rules = jvm.org.apache.spark.sql.catalyst.plans.logical.Aggregate
        grouping = current.groupingExpressions()
        if rules.supportsHashAggregate(to_seq(buffers), grouping):
            imperative = _jvm_class(jvm, current, _AGGREGATE_PACKAGE + "ImperativeAggregate")
            codegen = not any(imperative.isInstance(a.aggregateFunction()) for a in aggregates)
            return HASH_AGGREGATE, codegen
        enabled = str(agg_df.sparkSession.conf.get(USE_OBJECT_HASH_AGGREGATE_CONF, "true")).strip().lower() == "true"
        if enabled and rules.supportsObjectHashAggregate(to_seq(expressions), grouping):
            return OBJECT_HASH_AGGREGATE, False
        return SORT_AGGREGATE, False
    except Exception:  # py4j / internal API drift: show the hash aggregate
        import logging

        logging.getLogger(__name__).debug("cannot ask Spark which aggregate node it plans", exc_info=True)
        return HASH_AGGREGATE, True


def _jvm_class(jvm: Any, near: Any, name: str) -> Any:
    """The JVM class ``name``, loaded by the class loader of the object ``near``."""
    return jvm.java.lang.Class.forName(name, False, near.getClass().getClassLoader())


def spark_grouping_key_schema(agg_df) -> dict | None:
    """The state key schema Spark records for the aggregation ``agg_df`` (StructType JSON).

    Why: the key schema goes into the state schema file and into the restart check's error text,
    and Spark takes it from the grouping attributes its planner sees, not from the output
    columns: literals are dropped, repeated keys kept once, computed keys are pulled out under the
    name ``_groupingexpression``, aliases of plain columns are gone (``groupBy(col("v").alias("x"))``
    keys ``v``), and a window key is ``window`` with its ``spark.timeWindow`` and
    ``spark.watermarkDelayMs`` metadata. The template's full optimizer would fold the aggregation of
    an empty relation away, so only the three rules that shape the grouping are applied, to the
    analyzed plan. ``None`` when the JVM plan cannot be inspected (the caller falls back to the
    output columns).
    """
    import json

    try:
        current = jvm_aggregate(agg_df, _GROUPING_RULES)
        if current is None:
            return None
        fields = []
        for e in jvm_seq(current.groupingExpressions()):
            is_attribute = e.getClass().getSimpleName() == "AttributeReference"
            fields.append(
                {
                    # Spark's planner names any other expression by its text (PhysicalAggregation)
                    "name": e.name() if is_attribute else e.toString(),
                    "type": json.loads(e.dataType().json()),
                    "nullable": bool(e.nullable()),
                    "metadata": json.loads(e.metadata().json()) if is_attribute else {},
                }
            )
        return {"type": "struct", "fields": fields}
    except Exception:  # py4j / internal API drift: fall back to the output columns
        import logging

        logging.getLogger(__name__).debug("cannot derive Spark's grouping key schema", exc_info=True)
        return None


#: Spark's logical nodes that hand on at most the rows they are given
_ROW_KEEPING_NODES = frozenset(
    {
        "Project",
        "Filter",
        "EventTimeWatermark",
        "CollectMetrics",
        "SubqueryAlias",
        "View",
        "ResolvedHint",
        "Repartition",
        "RepartitionByExpression",
        "RebalancePartitions",
    }
)


def partial_step_skippable(node: L.Aggregate, key_columns: tuple[str, ...], partition_key_indexes: tuple[int, ...] | None) -> str:
    """Whether batches may run this aggregation without its partial step, and whether its input
    is one source's rows (``operators.aggregate.PARTIAL_*``; ``runtime.partial_aggregation``
    decides per batch). Only with keys to shuffle by, not all of them literals, and not under
    cube/rollup. The input is a source's rows when Spark's analysis of the aggregation has only
    projections, filters, repartitions, views, watermarks and observations over one leaf: then the
    source's row count is the aggregation's, at most. A generator in a ``select`` (``explode``),
    a sliding window (Spark's ``Expand``), a join or a union makes more rows, or other ones."""
    if not key_columns or node.grouping_sets or partition_key_indexes == ():
        return PARTIAL_KEPT
    try:
        agg = jvm_aggregate(node.template, ())
        if agg is None:
            return PARTIAL_SKIPPABLE
        leaves, pending = 0, [agg.child()]
        while pending:
            current = pending.pop()
            children = jvm_seq(current.children())
            if not children:
                leaves += 1
            elif current.nodeName() in _ROW_KEEPING_NODES:
                pending.extend(children)
            else:
                return PARTIAL_SKIPPABLE
    except Exception:  # py4j / internal API drift: skipped only when asked for everywhere
        logging.getLogger(__name__).debug("cannot read the aggregation's input plan", exc_info=True)
        return PARTIAL_SKIPPABLE
    return PARTIAL_SKIPPABLE_FED_BY_SOURCE if leaves == 1 else PARTIAL_SKIPPABLE


def plan_streaming_aggregation(
    node: L.Aggregate,
    child: "PhysicalOperator",
    num_partitions: int,
    store_conf=None,
    spark_text: "AggregateExplainText | None" = None,
) -> "PhysicalOperator":
    """Spark's seven-step chain: Partial, Exchange, PartialMerge, StateStoreRestore,
    PartialMerge, StateStoreSave, Final (with a Sort below each step when Spark's planner picks
    the sort-based aggregate). ``spark_text``: Spark's own lines for the steps (explain only)."""
    info = aggregation_info(node)
    if spark_text is not None:
        info = dataclasses.replace(info, spark_text=spark_text)
    # sorted_for_aggregate: the Sort Spark puts below each step of a sort-based aggregation
    partial = StreamingAggregateExec(child=sorted_for_aggregate(info, child), info=info, mode="Partial")
    exchange = ShuffleExchangeExec(
        child=partial,
        keys=info.partition_key_names,
        num_partitions=num_partitions,
        spark_text=spark_text.exchange if spark_text is not None else "",
    )
    merge1 = StreamingAggregateExec(
        child=sorted_for_aggregate(info, exchange),
        info=info,
        mode="PartialMerge",
        step="exchange",
        num_partitions=num_partitions,
    )
    restore = StateStoreRestoreExec(child=merge1, info=info)
    merge2 = StreamingAggregateExec(child=sorted_for_aggregate(info, restore), info=info, mode="PartialMerge", step="state")
    save = StateStoreSaveExec(child=merge2, info=info, store_conf=store_conf)
    return StreamingAggregateExec(child=sorted_for_aggregate(info, save), info=info, mode="Final")


def session_window_info(node: L.Aggregate):
    """Describe a session-window aggregation; Spark's planner refuses one without any other
    grouping key (raised when the query is planned: at its first batch, or by ``explain()``)."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    names = node.grouping_names
    session_index = next(i for i, n in enumerate(names) if L.SESSION_WINDOW_KEY in (node.schema[n].metadata or {}))
    if len(names) < 2:
        raise global_session_aggregation_error()
    # the sessions are merged in the partial step: never skipped
    agg = dataclasses.replace(aggregation_info(node), partial_skippable=PARTIAL_KEPT)
    for call in agg.calls:
        call.row_columns()  # a function without per-row buffers says so here, from start()
    spark_key, value_buffers = _state_schema_json(node, agg.calls)
    partials = [p for c in agg.calls for p in c.partial_columns()]
    buffer_schema = node.input_plan.template.groupBy(*node.grouping).agg(*partials).schema
    # buffers the batch aggregation does not compute itself (sketch words) declare their fields
    declared = {f.name: f for c in agg.calls for f in c.state_fields()}
    buffer_types = tuple((declared.get(b) or buffer_schema[b]).dataType for b in agg.buffer_columns)
    # the grouping attributes as Spark's planner names them (a computed key is
    # _groupingexpression), which its state schema (and its state reader) shows
    grouping = spark_key["fields"] if len(spark_key["fields"]) == len(names) else StructType([node.schema[n] for n in names]).jsonValue()["fields"]
    key = {
        "type": "struct",
        "fields": [f for i, f in enumerate(grouping) if i != session_index]
        + [StructField("sessionStartTime", TimestampType(), False).jsonValue()],
    }
    value = {"type": "struct", "fields": list(grouping) + value_buffers["fields"]}
    conf = node.template.sparkSession.conf.get(MERGE_SESSIONS_IN_LOCAL_PARTITION_CONF, "false")
    child_names = set(node.child.schema.names) if node.child is not None else set()
    plain = all(_is_plain_column(g, child_names) for i, g in enumerate(node.grouping) if i != session_index)
    return SessionWindowInfo(
        agg=agg,
        session_index=session_index,
        merge_local=str(conf).strip().lower() == "true",
        buffer_types=buffer_types,
        keys_are_columns=plain,
        key_schema_json=key,
        value_schema_json=value,
    )


def _is_plain_column(col, child_names: set[str]) -> bool:
    """Whether a grouping column is just a column of the input (maybe renamed): Spark's
    analyser pulls every other grouping expression out into a projection, which shows in
    ``explain()`` (``List(k)`` versus ``Vector(_groupingexpression)``)."""
    node = column_node(col)
    while node.getClass().getSimpleName() == "Alias":
        node = node.child()
    if node.getClass().getSimpleName() not in ("UnresolvedAttribute", "SqlExpression"):
        return False
    return str(node.sql()).strip("`") in child_names


def plan_streaming_aggregation_for_session(
    node: L.Aggregate,
    child: "PhysicalOperator",
    num_partitions: int,
    store_conf=None,
    spark_text: "AggregateExplainText | None" = None,
) -> "PhysicalOperator":
    """Spark's ``planStreamingAggregationForSession``: Partial, optional local merge, Exchange
    on the keys without the session, Sort, SessionWindowStateStoreRestore, MergingSessions,
    SessionWindowStateStoreSave, Final (a sort-based aggregation adds a Sort below Partial and
    Final)."""
    info = session_window_info(node)
    if spark_text is not None:
        info = dataclasses.replace(info, agg=dataclasses.replace(info.agg, spark_text=spark_text))
    partial_input = sorted_for_aggregate(info.agg, child)
    plan: "PhysicalOperator" = SessionWindowPartialAggregateExec(child=partial_input, info=info, num_partitions=num_partitions)
    if info.merge_local:
        plan = SessionWindowSortExec(child=plan, info=info)
        plan = MergingSessionsExec(child=plan, info=info, step="local", num_partitions=num_partitions)
    plan = ShuffleExchangeExec(
        child=plan,
        keys=info.key_names,
        num_partitions=num_partitions,
        spark_text=spark_text.exchange if spark_text is not None else "",
    )
    plan = SessionWindowSortExec(child=plan, info=info)
    plan = SessionWindowStateStoreRestoreExec(child=plan, info=info)
    plan = MergingSessionsExec(child=plan, info=info, step="state", num_partitions=num_partitions)
    plan = SessionWindowStateStoreSaveExec(child=plan, info=info, store_conf=store_conf)
    return StreamingAggregateExec(child=sorted_for_aggregate(info.agg, plan), info=info.agg, mode="Final")
