"""Aggregate decomposition: each aggregate function as partial buffers, a merge rule and a final
expression.

Spark: ``AggregateFunction`` with its ``aggBufferAttributes``, ``mergeExpressions`` and
``evaluateExpression``; ``AggUtils.planStreamingAggregation`` uses them in the Partial,
PartialMerge and Final modes. State stores *buffers*, never final results, so ``avg`` is kept as
``(sum, count)`` and only turned into a mean after the state step.

Where the parts live:

* ``decompose_aggregate`` reads a PySpark aggregate ``Column`` (its unresolved node tree) and
  returns an ``AggregateCall``: which function, its argument columns, the buffers.
* the per-function definitions (buffers, batch and row buffers, final expressions) are in
  ``plan/aggregate_functions.py``; the pure merge rules the state steps apply are in
  ``operators/aggregate_merge.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from statestream.errors import (
    aggregate_arity_error,
    aggregate_function_not_supported_error,
    aggregate_not_decomposable_error,
    distinct_aggregate_not_supported_error,
    distinct_aggregation_disabled_error,
    star_aggregate_error,
)
from statestream.plan.aggregate_functions import ALIASES, DISTINCT_AGGREGATION_CONF, FUNCTIONS, distinct_aggregation_enabled, BufferField, WithinGroup, decimal_arg, distinct_spec, interval_arg
from statestream._jvm.calls import java_column, jvm_seq, jvm_view

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "BufferField",
    "AggregateCall",
    "decompose_aggregate",
    "column_node",
    "SUPPORTED_FUNCTIONS",
]

SUPPORTED_FUNCTIONS = tuple(sorted(FUNCTIONS))


@dataclass(frozen=True)
class AggregateCall:
    """An aggregate function applied in a streaming aggregation.

    ``function`` is the canonical name (``avg`` for ``mean``, ``first`` for ``any_value``...);
    ``args`` the argument columns (PySpark ``Column`` objects, unresolved, so they re-resolve on
    every batch DataFrame); ``output_name`` the name Spark gives the result column; ``buffers``
    the state value columns, in Spark's buffer order; ``spec`` how they are computed, merged
    and finished (``plan/aggregate_functions.py``).
    """

    function: str
    args: tuple[Any, ...]
    is_distinct: bool
    output_name: str
    buffers: tuple[BufferField, ...]
    sql: str
    spec: Any = None
    #: the literal arguments after the columns: their Python values (``None`` where the argument
    #: is not a plain literal, e.g. ``array(0.25, 0.5)``) and the argument columns themselves
    options: tuple[Any, ...] = ()
    option_columns: tuple[Any, ...] = ()
    #: an inner call of an expression over aggregates: it has buffers but no output column
    hidden: bool = False
    #: the PySpark column of this one call (Spark's analysis of it tells equal calls apart)
    column: Any = field(default=None, compare=False, repr=False)
    #: a call Spark's own planner knows (not a user's Python aggregate function): its buffers
    #: are Spark's, shared and declared as Spark declares them
    spark_function: ClassVar[bool] = True

    def recomputed_column(self, values: "Column", values_sql: str = "") -> "Column":
        """Spark's own function over ``values`` (one input value per row; ``values_sql`` is the
        same column as SQL) with this call's literal arguments: the final value of a function
        whose buffer is kept as its values."""
        from pyspark.sql import functions as F

        if self.function in ("percentile_cont", "percentile_disc"):
            fraction, direction = self.options
            return F.expr(f"{self.function}({fraction}) WITHIN GROUP (ORDER BY {values_sql} {direction})")
        if self.options and isinstance(self.options[-1], WithinGroup):
            return F.expr(self.options[-1].template.format(v=values_sql))
        return F.call_function(self.function, values, *self.option_columns)

    @property
    def merge_groups(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """``(rule, buffer columns)`` per merge group, for the state steps."""
        groups: list[tuple[str, list[str]]] = []
        for b in self.buffers:
            if groups and groups[-1][0] == b.merge and b.group == len(groups) - 1:
                groups[-1][1].append(b.column)
            else:
                groups.append((b.merge, [b.column]))
        return tuple((rule, tuple(cols)) for rule, cols in groups)

    def partial_columns(self) -> list["Column"]:
        """The Spark aggregate columns that compute this call's buffers for one batch (Spark's
        Partial + PartialMerge: a batch aggregation yields one merged buffer row per key)."""
        cols = self.spec.partial(self.args, self.options)
        return [c.alias(b.column) for c, b in zip(cols, self.buffers)]

    def partial_names(self) -> list[str]:
        """The names of ``partial_columns`` (the batch aggregation's columns for this call)."""
        return [b.column for b in self.buffers]

    def state_fields(self) -> list[Any]:
        """Spark fields of the buffer columns when the batch aggregation does not compute them
        itself (a Python aggregate function's buffers come from the state step); else ``[]``."""
        return []

    def row_columns(self) -> list["Column"]:
        """This call's buffers for one input row on its own: Spark's Partial update applied to
        the initial buffer and a single row. Merging these per-row buffers gives what
        ``partial_columns`` computes for a group; the caller casts them to the buffer types."""
        return self.spec.row(self.args, self.options)

    def final_column(self) -> "Column":
        """The Final-mode expression over the merged buffers (Spark's evaluateExpression)."""
        from pyspark.sql import functions as F

        return self.spec.final([F.col(b.column) for b in self.buffers], self.options)


def _column_from_node(jvm: Any, node: Any) -> "Column":
    from pyspark.sql import Column

    return Column(jvm.org.apache.spark.sql.Column(node))


def column_node(col: "Column") -> Any:
    """The unresolved ``ColumnNode`` behind a classic PySpark column."""
    jc: Any = java_column(col)
    return jc.node()


def _literal(node: Any) -> Any:
    """The Python value of a literal argument node (``first(x, true)``); ``None`` for any other
    node (Spark's analysis of the template has already checked that it is foldable)."""
    if node.getClass().getSimpleName() != "Literal":
        return None
    value = node.value()
    return bool(value) if isinstance(value, bool) else value


def _distinct(name: str, function: str, nodes: list, input_df: Any) -> Any:
    """The spec of ``name(DISTINCT x)``: only with statestream's opt-in conf (Spark refuses
    distinct aggregates on streams, and so does ``start()`` without it), one value column."""
    if input_df is None or not distinct_aggregation_enabled(input_df.sparkSession.conf.get):
        raise distinct_aggregation_disabled_error(name, DISTINCT_AGGREGATION_CONF)
    if len(nodes) != 1 or FUNCTIONS[function].arity[0] > 1 or function in ("first", "last", "try_sum"):
        raise distinct_aggregate_not_supported_error(name)
    return distinct_spec(function)


def decompose_aggregate(col: "Column", index: int | str, output_name: str, input_df: Any = None) -> AggregateCall:
    """Decompose ``F.<fn>(args)[.alias(name)]`` into an ``AggregateCall``.

    ``output_name`` is the result column name, read from the batch-analysed template so it is
    exactly what Spark would call it; ``input_df`` (the aggregation's input template) gives the
    argument types where a buffer depends on them (``try_sum`` of integers). Raises
    ``UnsupportedAggregateError`` for expressions that are not a single aggregate function call
    (for example ``sum(x) + 1``).
    """
    from pyspark import SparkContext

    jvm = jvm_view(SparkContext)
    node = column_node(col)
    while node.getClass().getSimpleName() == "Alias":
        node = node.child()
    kind = node.getClass().getSimpleName()
    if kind != "UnresolvedFunction":
        raise aggregate_not_decomposable_error(node.sql(), SUPPORTED_FUNCTIONS)
    name = str(node.functionName()).lower()
    function = ALIASES.get(name, name)
    spec = FUNCTIONS.get(function)
    if spec is None:
        raise aggregate_function_not_supported_error(name, SUPPORTED_FUNCTIONS)
    arguments = node.arguments()
    nodes = jvm_seq(arguments)
    if function == "count":
        nodes = [a for a in nodes if a.getClass().getSimpleName() != "UnresolvedStar"]
    elif any(a.getClass().getSimpleName() == "UnresolvedStar" for a in nodes):
        raise star_aggregate_error(name)
    if node.isDistinct():
        spec = _distinct(name, function, nodes, input_df)
    lo, hi = spec.arity
    n_cols = min(len(nodes), hi)
    if n_cols < lo or len(nodes) > hi + spec.literal_args:
        raise aggregate_arity_error(name, lo, hi, len(nodes))
    args = tuple(_column_from_node(jvm, a) for a in nodes[:n_cols])
    options: tuple[Any, ...] = tuple(_literal(a) for a in nodes[n_cols:])
    option_columns = tuple(_column_from_node(jvm, a) for a in nodes[n_cols:])
    types = []
    if input_df is not None and args:
        try:
            types = [f.dataType for f in input_df.select(*args).schema.fields]
        except Exception:  # noqa: BLE001 - Spark's own analysis of the template reports it
            types = []
    if function == "try_sum" and types and spec.layout(types)[-1][1] == "try_sum":
        options = options + ("integral",)
    if function in ("sum", "avg", "try_sum", "try_avg") and not node.isDistinct() and decimal_arg(types) is not None:
        options = options + (decimal_arg(types),)
    elif function == "avg" and not node.isDistinct() and interval_arg(types) is not None:
        options = options + (interval_arg(types),)
    elif function in ("regr_avgx", "regr_avgy") and len(types) == 2:
        # Spark replaces them with avg of the pairs' x (or y): a decimal keeps avg's decimal buffers
        picked = decimal_arg([types[1] if function == "regr_avgx" else types[0]])
        if picked is not None:
            options = options + (picked,)
    buffers = tuple(
        BufferField(spark, f"__b{index}_{j}_{spark}", rule, group) for j, (spark, rule, group) in enumerate(spec.layout(types))
    )
    return AggregateCall(
        function=function,
        column=col,
        args=args,
        is_distinct=bool(node.isDistinct()),
        output_name=output_name,
        buffers=buffers,
        sql=str(node.sql()),
        spec=spec,
        options=options,
        option_columns=option_columns,
    )
