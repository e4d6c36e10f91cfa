"""Logical plan of a streaming query.

Each node is an immutable record of one user operation. Next to the node we keep a *template*: a
Spark batch DataFrame built by applying the same operations to an empty relation with the
source's schema. Spark's analyzer resolves the template eagerly, which gives us (for free and
exactly as Spark would) unresolved-column errors at definition time, every node's output schema,
the default names of aggregate columns, and the event-time marker metadata
(``spark.watermarkDelayMs``) carried through projections and ``window()``.

At run time the planner replays the nodes on each micro-batch's real data (see
``plan/planner.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from statestream.operators.watermark import WATERMARK_DELAY_KEY

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

__all__ = [
    "LogicalPlan",
    "StreamingRelation",
    "BatchRelation",
    "Stateless",
    "EventTimeWatermark",
    "CollectMetrics",
    "Aggregate",
    "Sort",
    "Limit",
    "Deduplicate",
    "FlatMapGroupsWithState",
    "TransformWithState",
    "Union",
    "Join",
    "WATERMARK_DELAY_KEY",
    "TIME_WINDOW_KEY",
    "SESSION_WINDOW_KEY",
]

TIME_WINDOW_KEY = "spark.timeWindow"
SESSION_WINDOW_KEY = "spark.sessionWindow"

#: a kind of plan node (``LogicalPlan.find``'s answer has that type)
_Node = TypeVar("_Node", bound="LogicalPlan")


@dataclass(frozen=True, eq=False)
class LogicalPlan:
    """Base of all logical nodes. ``template`` is the batch-analysed DataFrame of this node."""

    template: "DataFrame" = field(repr=False)

    @property
    def children(self) -> tuple["LogicalPlan", ...]:
        return ()

    @property
    def schema(self) -> "StructType":
        return self.template.schema

    @property
    def node_name(self) -> str:
        return type(self).__name__

    def walk(self) -> Iterator[LogicalPlan]:
        """Pre-order traversal (the node, then its children, left to right)."""
        yield self
        for c in self.children:
            yield from c.walk()

    def find(self, kind: type[_Node]) -> list[_Node]:
        return [n for n in self.walk() if isinstance(n, kind)]

    def with_new_children(self, children: tuple["LogicalPlan", ...]) -> "LogicalPlan":
        """This node over ``children`` (same count and order as ``children``): the one way plan
        rewrites (filter pushdown, limits) rebuild a node, whatever its arity."""
        if children:
            msg = f"{self.node_name} has no children"
            raise ValueError(msg)
        return self

    def event_time_columns(self) -> list[str]:
        """Output columns carrying the event-time marker (``spark.watermarkDelayMs``)."""
        return [f.name for f in self.schema.fields if WATERMARK_DELAY_KEY in (f.metadata or {})]


@dataclass(frozen=True, eq=False)
class StreamingRelation(LogicalPlan):
    """A streaming source (Spark: ``StreamingRelationV2``). ``source_spec`` builds the source
    at ``start()``; ``source_index`` is its position in the offset log (set by the query)."""

    source_spec: Any = None

    @property
    def node_name(self) -> str:
        return "StreamingRelation"


@dataclass(frozen=True, eq=False)
class BatchRelation(LogicalPlan):
    """A batch (static) PySpark DataFrame inside a streaming query, e.g. the other side of
    ``union``. ``template`` is the DataFrame itself. It lets the analysis see what Spark sees
    (``Union between streaming and batch DataFrames/Datasets is not supported`` at ``start()``)."""

    @property
    def node_name(self) -> str:
        return "BatchRelation"


@dataclass(frozen=True, eq=False)
class UnaryNode(LogicalPlan):
    child: LogicalPlan | None = None

    @property
    def input_plan(self) -> LogicalPlan:
        """``child``, which every node the API builds has (the field's default only lets a
        subclass give its own fields defaults)."""
        if self.child is None:
            msg = f"{self.node_name} has no child"
            raise ValueError(msg)
        return self.child

    @property
    def children(self) -> tuple[LogicalPlan, ...]:
        return (self.child,) if self.child is not None else ()

    def with_new_children(self, children: tuple[LogicalPlan, ...]) -> LogicalPlan:
        (child,) = children
        return self if child is self.child else replace(self, child=child)


@dataclass(frozen=True, eq=False)
class Stateless(UnaryNode):
    """A stateless operation (select, filter, withColumn, drop, ...) replayed on each batch by
    ``transform``. ``op`` is Spark's logical node name (``Project``, ``Filter``)."""

    op: str = "Project"
    description: str = ""
    transform: Callable[["DataFrame"], "DataFrame"] | None = field(default=None, repr=False)
    columns: tuple["Column", ...] = field(default=(), repr=False)

    @property
    def node_name(self) -> str:
        return self.op


@dataclass(frozen=True, eq=False)
class AggregationFinality(Stateless):
    """The ``revision`` and ``is_final`` columns of an aggregation built with
    ``spark.statestream.aggregation.finality.enabled`` on (statestream's own; Spark has no such
    node): a projection over the ``Aggregate`` whose template adds the two columns and whose
    batches already carry them (the aggregation's state step computes them), so the planner
    plans the aggregation in its place and the optimizer lets no conjunct that reads them move
    below it."""


@dataclass(frozen=True, eq=False)
class CollectMetrics(UnaryNode):
    """``observe(name, *exprs)``: named aggregate metrics of each batch's rows, reported in the
    progress as ``observedMetrics[name]`` (Spark: ``CollectMetrics``)."""

    name: str = ""
    exprs: tuple[Any, ...] = ()


@dataclass(frozen=True, eq=False)
class EventTimeWatermark(UnaryNode):
    """``withWatermark(column, delay)`` (Spark: ``EventTimeWatermark``). ``node_id`` keys the
    per-node watermark in the tracker."""

    column: str = ""
    delay_ms: int = 0
    delay_text: str = ""
    node_id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass(frozen=True, eq=False)
class Aggregate(UnaryNode):
    """``groupBy(grouping).agg(aggregates)``. Grouping and aggregate columns are kept as the
    user wrote them (unresolved PySpark columns).

    ``grouping_sets`` is ``"cube"`` or ``"rollup"`` for ``cube(...)``/``rollup(...)`` (Spark:
    ``Aggregate`` over ``Expand``, with the grouping id ``spark_grouping_id`` as an extra key).
    ``key_filters`` are predicates over the grouping outputs that Spark's optimizer would have
    applied below the aggregation (see ``plan/optimizer.py``); they drop keys before the state."""

    grouping: tuple["Column", ...] = field(default=(), repr=False)
    aggregates: tuple["Column", ...] = field(default=(), repr=False)
    grouping_sets: str | None = None
    key_filters: tuple["Column", ...] = field(default=(), repr=False)
    #: built with ``spark.statestream.aggregation.finality.enabled`` on: its rows carry
    #: ``revision`` and ``is_final`` (added to the schema by a projection above this node)
    finality: bool = False
    #: positions (in ``aggregates``) of the aggregate columns no operator above reads: Spark's
    #: optimizer drops them with their functions, so they are not computed and have no buffer in
    #: the state; the rows carry a typed null under their names (``plan/column_pruning.py``)
    unread: frozenset[int] = frozenset()

    @property
    def grouping_names(self) -> list[str]:
        return self.schema.names[: len(self.grouping)]

    @property
    def aggregate_names(self) -> list[str]:
        return self.schema.names[len(self.grouping) :]

    def grouping_field(self, name: str):
        return self.schema[name]

    def event_time_key(self) -> str | None:
        """The grouping column carrying the event-time marker, if any."""
        for name in self.grouping_names:
            if WATERMARK_DELAY_KEY in (self.schema[name].metadata or {}):
                return name
        return None

    def is_session_window(self) -> bool:
        return any(SESSION_WINDOW_KEY in (self.schema[n].metadata or {}) for n in self.grouping_names)


@dataclass(frozen=True, eq=False)
class Sort(UnaryNode):
    """``orderBy``/``sort``: only legal after an aggregation in complete mode."""

    transform: Callable[["DataFrame"], "DataFrame"] | None = field(default=None, repr=False)
    description: str = ""


@dataclass(frozen=True, eq=False)
class Limit(UnaryNode):
    """``limit(n)``."""

    n: int = 0


@dataclass(frozen=True, eq=False)
class Deduplicate(UnaryNode):
    """``dropDuplicates(keys)`` / ``dropDuplicatesWithinWatermark(keys)``."""

    keys: tuple[str, ...] = ()
    within_watermark: bool = False


@dataclass(frozen=True, eq=False)
class FlatMapGroupsWithState(UnaryNode):
    """``groupBy(keys).applyInPandasWithState(func, outputStructType, stateStructType,
    outputMode, timeoutConf)``; ``output_mode`` is the function's (lower case), ``timeout_conf``
    one of PySpark's ``GroupStateTimeout`` names."""

    keys: tuple[str, ...] = ()
    func: Any = None
    output_schema: Any = None
    state_schema: Any = None
    output_mode: str = "update"
    timeout_conf: str = "NoTimeout"

    @property
    def node_name(self) -> str:
        return "FlatMapGroupsInPandasWithState"


@dataclass(frozen=True, eq=False)
class TransformWithState(UnaryNode):
    """``groupBy(keys).transformWithStateInPandas(...)`` (``use_pandas``) or
    ``transformWithState(...)`` (rows): Spark's ``TransformWithStateInPySpark``. ``output_mode``
    and ``time_mode`` are lower case (``none``, ``processingtime``, ``eventtime``);
    ``initial_state`` is the initial state's batch DataFrame and ``initial_state_keys`` its
    grouping columns; ``event_time_column`` names the output column that carries the event time
    onwards (``eventTimeColumnName``), ``""`` when none."""

    keys: tuple[str, ...] = ()
    processor: Any = field(default=None, repr=False)
    output_schema: Any = field(default=None, repr=False)
    output_mode: str = "update"
    time_mode: str = "none"
    use_pandas: bool = True
    initial_state: Any = field(default=None, repr=False)
    initial_state_keys: tuple[str, ...] = ()
    event_time_column: str = ""

    @property
    def node_name(self) -> str:
        return "TransformWithStateInPySpark"


@dataclass(frozen=True, eq=False)
class Union(LogicalPlan):
    """``union`` of streaming inputs (``unionByName`` when ``by_name``; ``allow_missing``: its
    ``allowMissingColumns``)."""

    inputs: tuple[LogicalPlan, ...] = ()
    by_name: bool = False
    allow_missing: bool = False

    @property
    def children(self) -> tuple[LogicalPlan, ...]:
        return self.inputs

    def with_new_children(self, children: tuple[LogicalPlan, ...]) -> LogicalPlan:
        if len(children) != len(self.inputs):
            raise ValueError("a union keeps its number of inputs")
        return self if all(a is b for a, b in zip(children, self.inputs)) else replace(self, inputs=tuple(children))


@dataclass(frozen=True, eq=False)
class Join(LogicalPlan):
    """``left.join(right, on, how)`` / ``crossJoin`` (Spark: ``Join``). Either side may be a
    ``BatchRelation`` (a static DataFrame) or a streaming subtree.

    ``join_type`` is Spark's name of the join type (``Inner``, ``Cross``, ``LeftOuter``,
    ``RightOuter``, ``FullOuter``, ``LeftSemi``, ``LeftAnti``); ``description`` is the user's
    ``on`` as text. ``transform(left_df, right_df)`` joins one micro-batch's DataFrames of both
    sides as the user's call did (``on`` columns taken from a statestream DataFrame are bound to
    that side's batch, see ``plan/bindings.py``)."""

    left: LogicalPlan | None = None
    right: LogicalPlan | None = None
    join_type: str = "Inner"
    description: str = ""
    transform: Callable[["DataFrame", "DataFrame"], "DataFrame"] | None = field(default=None, repr=False)

    @property
    def children(self) -> tuple[LogicalPlan, ...]:
        return tuple(c for c in (self.left, self.right) if c is not None)

    def with_new_children(self, children: tuple[LogicalPlan, ...]) -> LogicalPlan:
        left, right = children
        return self if left is self.left and right is self.right else replace(self, left=left, right=right)
