"""Expressions around aggregate functions: ``sum(v) / count(*)``, ``size(collect_set(k))``,
``sum(x) FILTER (WHERE k > 1)``, SQL strings through ``F.expr``/``selectExpr``.

Spark: ``PhysicalAggregation`` splits an aggregation's result expressions into the aggregate
functions (which get buffers and state) and the expressions over their results (evaluated by the
Final aggregate). Here an output column is read from its unresolved PySpark node tree, or, for a
SQL string, from Spark's own SQL parser: every aggregate function call in it becomes a hidden
``AggregateCall`` with its buffers, and the column becomes an ``ExpressionCall`` that rebuilds the
expression with each call replaced by that call's final value.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from statestream.plan.aggregate_functions import ALIASES, FUNCTIONS, FilterCondition, WithinGroup
from statestream.errors import (
    aggregate_wrapper_not_evaluable_error,
    no_aggregate_function_error,
    operator_not_rebuildable_error,
    pandas_udaf_in_streaming_aggregation_error,
    within_group_not_supported_error,
)
from statestream.plan.aggregates import AggregateCall, column_node, decompose_aggregate
from statestream.plan.hyperloglog import as_hyperloglog
from statestream._jvm.calls import jvm_seq, jvm_view
from statestream.plan.python_aggregates import decompose_python_aggregate, python_aggregate_of

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["ExpressionCall", "SYMBOL_OPERATORS", "decompose_output"]


#: Spark's Column API names its operators by symbol (so does Spark Connect's protocol); these are
#: the Python operators of PySpark's classic columns that make the same column nodes
SYMBOL_OPERATORS: dict[str, Callable[..., Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "%": operator.mod,
    "==": operator.eq,
    "=": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "and": operator.and_,
    "&&": operator.and_,
    "or": operator.or_,
    "||": operator.or_,
    "!": operator.invert,
    "not": operator.invert,
    "<=>": lambda a, b: a.eqNullSafe(b),
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ExpressionCall(AggregateCall):
    """An output column that is an expression over aggregate calls (``inner``, hidden calls with
    their own buffers). ``rebuild(values)`` gives the expression with the i-th inner call
    replaced by ``values[i]``."""

    inner: tuple[AggregateCall, ...] = ()
    rebuild: Any = None

    def partial_columns(self) -> list["Column"]:
        return []

    def row_columns(self) -> list["Column"]:
        return []

    def final_over(self, values: list["Column"]) -> "Column":
        return self.rebuild(values)


def _is_aggregate_name(name: str) -> bool:
    name = name.lower()
    return name in FUNCTIONS or name in ALIASES


def _jvm() -> Any:
    from pyspark import SparkContext

    jvm = jvm_view(SparkContext)
    return jvm


def _column(node: Any) -> "Column":
    from pyspark.sql import Column

    return Column(_jvm().org.apache.spark.sql.Column(node))


def _children(node: Any) -> list[Any]:
    ch = node.children()
    return jvm_seq(ch)


def _data_type(jtype: Any) -> Any:
    from pyspark.sql.types import _parse_datatype_json_string

    return _parse_datatype_json_string(jtype.json())


def _apply(name: str, args: list["Column"]) -> "Column":
    """A call of Spark function ``name`` (or operator symbol) on ``args``."""
    from pyspark.sql import functions as F

    fn = SYMBOL_OPERATORS.get(name.lower())
    if fn is not None and (len(args) == 2 or name in ("!", "not")):
        return fn(*args)
    if name == "-" and len(args) == 1:
        return -args[0]
    if not _IDENTIFIER.match(name):
        raise operator_not_rebuildable_error(name)
    return F.call_function(name, *args)


# -- PySpark column nodes ---------------------------------------------------------------------


def _has_aggregate(node: Any) -> bool:
    kind = node.getClass().getSimpleName()
    if kind == "ExpressionColumnNode":
        return python_aggregate_of(node) is not None
    if kind == "UnresolvedFunction" and _is_aggregate_name(str(node.functionName())):
        return True
    if kind == "SqlExpression":
        return _sql_has_aggregate(_parse(str(node.expression())))
    try:
        return any(_has_aggregate(c) for c in _children(node))
    except Exception:  # noqa: BLE001 - a node kind without children
        return False


class _Collector:
    """Turns the aggregate calls met while rebuilding an expression into hidden calls."""

    def __init__(self, index: int, input_df: Any) -> None:
        self.index = index
        self.input_df = input_df
        self.calls: list[AggregateCall] = []

    def add(self, col: "Column | RewrittenCall") -> int:
        n = len(self.calls)
        # ``h<output>_<n>``: never the index of a plain call, so buffer names stay unique
        index, name = f"h{self.index}_{n}", f"__agg{self.index}_{n}"
        if isinstance(col, RewrittenCall):
            call = decompose_aggregate(col.call, index, name, self.input_df)
            options = call.options + (col.option,)
            self.calls.append(dataclasses.replace(call, options=options, column=col.whole))
            return n
        call = decompose_python_aggregate(col, index, name) or as_hyperloglog(
            decompose_aggregate(col, index, name, self.input_df), index, self.input_df
        )
        self.calls.append(call)
        return n


def _rebuild_node(node: Any, out: _Collector) -> Callable[[list["Column"]], "Column"]:
    """A function from the inner calls' values to ``node``'s expression (PySpark node tree)."""
    kind = node.getClass().getSimpleName()
    if not _has_aggregate(node):
        col = _column(node)
        return lambda values: col
    if kind == "UnresolvedFunction" and _is_aggregate_name(str(node.functionName())) or kind == "ExpressionColumnNode":
        i = out.add(_column(node))
        return lambda values: values[i]
    if kind == "SqlExpression":
        return _rebuild_sql(_parse(str(node.expression())), out)
    if kind == "Alias":
        inner = _rebuild_node(node.child(), out)
        name = str(node.name().head())
        return lambda values: inner(values).alias(name)
    if kind == "Cast":
        inner = _rebuild_node(node.child(), out)
        typ = _data_type(node.dataType())
        return lambda values: inner(values).cast(typ)
    if kind == "UnresolvedFunction":
        name = str(node.functionName())
        parts = [_rebuild_node(a, out) for a in _children(node)]
        return lambda values: _apply(name, [p(values) for p in parts])
    if kind == "CaseWhenOtherwise":
        branches = node.branches()
        pairs = []
        for b in jvm_seq(branches):
            pairs.append((_rebuild_node(b._1(), out), _rebuild_node(b._2(), out)))  # noqa: SLF001 - a Scala tuple's fields
        other = node.otherwise()
        otherwise = _rebuild_node(other.get(), out) if other.isDefined() else None
        return lambda values: _case_when(pairs, otherwise, values)
    raise aggregate_wrapper_not_evaluable_error(node.sql(), kind)


def _case_when(pairs: list, otherwise: Any, values: list["Column"]) -> "Column":
    from pyspark.sql import functions as F

    col = None
    for cond, value in pairs:
        col = F.when(cond(values), value(values)) if col is None else col.when(cond(values), value(values))
    return col.otherwise(otherwise(values)) if otherwise is not None else col  # type: ignore[union-attr, return-value]  # a CASE has a WHEN


# -- SQL strings (Spark's parser) ---------------------------------------------------------------


def _parse(text: str) -> Any:
    """Spark's SQL parser on ``text`` (Catalyst's, so it works on any thread)."""
    parser = getattr(getattr(_jvm().org.apache.spark.sql.catalyst.parser, "CatalystSqlParser$"), "MODULE$")
    return parser.parseExpression(text)


def _catalyst_children(e: Any) -> list[Any]:
    ch = e.children()
    return jvm_seq(ch)


def _sql_is_aggregate(e: Any) -> bool:
    if e.getClass().getSimpleName() != "UnresolvedFunction":
        return False
    parts = e.nameParts()
    return _is_aggregate_name(str(parts.apply(parts.length() - 1)))


def _sql_has_aggregate(e: Any) -> bool:
    return _sql_is_aggregate(e) or any(_sql_has_aggregate(c) for c in _catalyst_children(e))


@dataclass(frozen=True)
class RewrittenCall:
    """A SQL call PySpark's column API cannot say: ``first(x) FILTER (WHERE c)`` without
    ``IGNORE NULLS`` (option ``FilterCondition``), ``mode()``/``listagg() WITHIN GROUP (ORDER
    BY ...)`` (option ``WithinGroup``). ``call`` is the call without that part, ``option`` is
    appended to its options, ``whole`` is the call as Spark parses it (what Spark's analysis of
    the buffers reads)."""

    call: "Column"
    option: Any
    whole: "Column"


def _sql_call(e: Any) -> "Column | RewrittenCall":
    """A parsed aggregate call as a PySpark column, its ``FILTER (WHERE c)`` applied to its
    value arguments (rows failing ``c`` become nulls, which the function skips) and ``IGNORE
    NULLS`` passed as ``first``/``last``'s flag."""
    from pyspark.sql import functions as F

    parts = e.nameParts()
    name = str(parts.apply(parts.length() - 1)).lower()
    if e.orderingWithinGroup().length() > 0:
        return _within_group_call(name, e)
    arguments = e.arguments()
    args = [F.expr(str(a.sql())) for a in jvm_seq(arguments)]
    spec = FUNCTIONS[ALIASES.get(name, name)]
    n_values = min(len(args), spec.arity[1])
    if e.filter().isDefined():
        cond = F.expr(str(e.filter().get().sql()))
        if spec.name in ("first", "last") and not e.ignoreNulls():
            # a null value of a row that passes is taken: the filter cannot null the value
            return RewrittenCall(F.call_function(name, args[0], F.lit(False)), FilterCondition(cond), F.expr(str(e.sql())))
        if n_values == 0:
            args = [F.when(cond, F.lit(1))]
        else:
            args = [F.when(cond, a) for a in args[:n_values]] + args[n_values:]
    if e.ignoreNulls():
        args = args[:1] + [F.lit(True)]
    call = F.call_function(name, *args)
    if not e.isDistinct():
        return call
    # the same call marked DISTINCT (PySpark has no generic way to say it)
    n = column_node(call)
    return _column(n.copy(n.functionName(), n.arguments(), True, n.isUserDefinedFunction(), n.isInternal(), n.origin()))


def _within_group_call(name: str, e: Any) -> "Column | RewrittenCall":
    """``percentile_cont(p)``/``percentile_disc(p) WITHIN GROUP (ORDER BY x [DESC])`` as a call
    of the value column ``x`` with the fraction's SQL and the direction as literal arguments
    (the spec finishes it with the same SQL over the kept values); ``mode()`` and ``listagg``
    with WITHIN GROUP as a ``RewrittenCall`` keeping the values (``listagg``: with their sort
    keys) and finishing with the same SQL over them."""
    from pyspark.sql import functions as F

    orders = e.orderingWithinGroup()
    supported = ("percentile_cont", "percentile_disc", "mode", "listagg", "string_agg")
    if name not in supported or orders.length() != 1 or e.filter().isDefined() or e.isDistinct():
        raise within_group_not_supported_error(name)
    order = orders.apply(0)
    descending = "desc" in str(order.direction().sql()).lower()
    nulls = str(order.nullOrdering().sql())
    arguments = e.arguments()
    key = F.expr(str(order.child().sql()))
    direction = ("DESC" if descending else "ASC") + " " + nulls
    if name == "mode":
        template = f"mode() WITHIN GROUP (ORDER BY {{v}} {direction})"
        return RewrittenCall(F.call_function("mode", key), WithinGroup(template), F.expr(str(e.sql())))
    if name in ("listagg", "string_agg"):
        value = F.expr(str(arguments.apply(0).sql()))
        delimiter = str(arguments.apply(1).sql()).replace("{", "{{").replace("}", "}}") if arguments.length() > 1 else None
        args = "{v}.v" + (f", {delimiter}" if delimiter else "")
        template = f"{name}({args}) WITHIN GROUP (ORDER BY {{v}}.o {direction})"
        kept = F.struct(value.alias("v"), key.alias("o"))
        return RewrittenCall(F.call_function(name, kept), WithinGroup(template), F.expr(str(e.sql())))
    fraction = str(arguments.apply(0).sql())
    return F.call_function(name, F.expr(str(order.child().sql())), F.lit(fraction), F.lit("DESC" if descending else "ASC"))


def _rebuild_sql(e: Any, out: _Collector) -> Callable[[list["Column"]], "Column"]:
    """A function from the inner calls' values to the parsed expression ``e``."""
    from pyspark.sql import functions as F

    kind = e.getClass().getSimpleName()
    if not _sql_has_aggregate(e):
        col = F.expr(str(e.sql()))
        return lambda values: col
    if _sql_is_aggregate(e):
        i = out.add(_sql_call(e))
        return lambda values: values[i]
    if kind in ("Alias", "UnresolvedAlias"):
        inner = _rebuild_sql(e.child(), out)
        return (lambda values: inner(values).alias(str(e.name()))) if kind == "Alias" else inner
    if kind == "Cast":
        inner = _rebuild_sql(e.child(), out)
        typ = _data_type(e.dataType())
        return lambda values: inner(values).cast(typ)
    if kind == "UnresolvedFunction":
        parts = e.nameParts()
        name = str(parts.apply(parts.length() - 1))
        arguments = e.arguments()
        args = [_rebuild_sql(a, out) for a in jvm_seq(arguments)]
        return lambda values: F.call_function(name, *(a(values) for a in args))
    if kind == "UnaryMinus":
        inner = _rebuild_sql(e.child(), out)
        return lambda values: -inner(values)
    if kind == "Not":
        inner = _rebuild_sql(e.child(), out)
        return lambda values: ~inner(values)
    try:
        symbol = str(e.symbol())
    except Exception:  # noqa: BLE001 - not a binary operator
        symbol = None
    if symbol is not None and symbol in SYMBOL_OPERATORS:
        left, right = (_rebuild_sql(c, out) for c in _catalyst_children(e))
        fn = SYMBOL_OPERATORS[symbol]
        return lambda values: fn(left(values), right(values))
    raise aggregate_wrapper_not_evaluable_error(e.sql(), kind)


def _is_python_aggregate(expression: Any) -> bool:
    """A grouped-aggregate pandas UDF: Spark wraps the ``PythonUDF`` in an ``AggregateExpression``
    (or a ``PythonUDAF``)."""
    kind = expression.getClass().getSimpleName()
    if kind == "AggregateExpression":
        kind = expression.aggregateFunction().getClass().getSimpleName()
    return kind in ("PythonUDF", "PythonUDAF")


# -- entry point --------------------------------------------------------------------------------


def decompose_output(col: "Column", index: int, output_name: str, input_df: Any = None) -> list[AggregateCall]:
    """The calls one aggregation output column needs: a single call when the column is one
    aggregate function call (maybe aliased); else the hidden inner calls followed by an
    ``ExpressionCall`` producing the column."""
    node = column_node(col)
    while node.getClass().getSimpleName() == "Alias":
        node = node.child()
    kind = node.getClass().getSimpleName()
    python_call = decompose_python_aggregate(col, index, output_name)
    if python_call is not None:
        return [python_call]
    if kind == "ExpressionColumnNode" and _is_python_aggregate(node.expression()):
        # Spark's planner refuses it while planning the first batch (start() succeeds)
        raise pandas_udaf_in_streaming_aggregation_error()
    plain = kind == "UnresolvedFunction" and _is_aggregate_name(str(node.functionName()))
    if plain and not any(_has_aggregate(a) for a in _children(node)):
        return [as_hyperloglog(decompose_aggregate(col, index, output_name, input_df), index, input_df)]
    out = _Collector(index, input_df)
    if kind == "SqlExpression":
        parsed = _parse(str(node.expression()))
        while parsed.getClass().getSimpleName() in ("Alias", "UnresolvedAlias"):
            parsed = parsed.child()
        rebuild = _rebuild_sql(parsed, out)
    else:
        rebuild = _rebuild_node(node, out)
    if not out.calls:
        raise no_aggregate_function_error(node.sql())
    hidden = [dataclasses.replace(c, hidden=True) for c in out.calls]
    expression = ExpressionCall(
        function="expression",
        args=(),
        is_distinct=False,
        output_name=output_name,
        buffers=(),
        sql=str(node.sql()),
        inner=tuple(hidden),
        rebuild=rebuild,
    )
    return [*hidden, expression]
