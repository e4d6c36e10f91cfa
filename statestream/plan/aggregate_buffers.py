"""Spark's own view of an aggregation's buffers: which aggregate calls share one buffer, and how
Spark declares each buffer field.

Spark's ``PhysicalAggregation`` keeps one aggregate function per set of semantically equal
aggregate expressions: ``first(s)`` and ``any_value(s)`` (both ``First(s, false)`` after
``ReplaceExpressions``), ``sum(d)`` and ``try_sum(d)`` of a small decimal (both a sum of the
unscaled longs after ``DecimalAggregates``), or ``sum(i)`` in ``sum(i) / count(i)`` next to a
plain ``sum(i)``, have one buffer in its state. Its buffer attributes also carry their own nullability (``avg``'s
``count`` is nullable; the batch aggregation statestream uses to compute it is not). Both are
read here from Spark's analysis of the aggregation's input template, so that the state holds the
same fields as Spark's.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Sequence

from statestream._jvm.calls import java_dataframe, jvm_seq, jvm_view
from statestream.plan.aggregate_expressions import ExpressionCall

if TYPE_CHECKING:
    from statestream.plan.aggregates import AggregateCall

__all__ = ["SparkBuffer", "spark_buffers", "share_equal_calls", "jvm_aggregate"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SparkBuffer:
    """One aggregate call as Spark's planner sees it: the canonical form of its aggregate
    expression and its buffer fields as ``(name, nullable)``."""

    canonical: str
    fields: tuple[tuple[str, bool], ...]


def jvm_aggregate(agg_df: Any, rules: tuple[str, ...]) -> Any:
    """The first ``Aggregate`` node of ``agg_df``'s analysed plan after Spark's optimizer rules
    ``rules`` (names in ``org.apache.spark.sql.catalyst.optimizer``), or ``None``."""
    plan = java_dataframe(agg_df).queryExecution().analyzed()
    package = jvm_view(agg_df.sparkSession).org.apache.spark.sql.catalyst.optimizer
    for name in rules:
        plan = getattr(getattr(package, name + "$"), "MODULE$").apply(plan)
    pending = [plan]
    while pending:
        current = pending.pop(0)
        if current.nodeName() == "Aggregate":
            return current
        pending.extend(jvm_seq(current.children()))
    return None


def _is_leaf(call: "AggregateCall") -> bool:
    """A call with buffers of its own computed by a Spark aggregate (not an expression over
    calls, a grouping id or a Python aggregate function)."""
    return bool(call.buffers) and call.column is not None and call.spark_function


def spark_buffers(input_df: Any, calls: Sequence["AggregateCall"]) -> dict[int, SparkBuffer]:
    """``SparkBuffer`` per leaf call (by ``id``), from one analysis of all of them over
    ``input_df``; empty when Spark's plan cannot be read (then nothing is shared and the batch
    aggregation's nullability stands)."""
    leaves = [c for c in calls if _is_leaf(c)]
    if not leaves or input_df is None:
        return {}
    try:
        agg = jvm_aggregate(input_df.agg(*(c.column for c in leaves)), ("ReplaceExpressions", "DecimalAggregates"))
        if agg is None:
            return {}
        named = agg.aggregateExpressions()
        if named.length() != len(leaves):
            return {}
        out = {}
        for i, call in enumerate(leaves):
            found = _aggregate_expressions(named.apply(i))
            if len(found) != 1:
                continue
            e = found[0]
            attrs = jvm_seq(e.aggregateFunction().aggBufferAttributes())
            fields = tuple((str(a.name()), bool(a.nullable())) for a in attrs)
            out[id(call)] = SparkBuffer(str(e.canonicalized()), fields)
        return out
    except Exception:  # py4j / internal API drift: keep every call's own buffer
        log.debug("cannot read Spark's aggregate buffers", exc_info=True)
        return {}


def _aggregate_expressions(e: Any) -> list[Any]:
    """The ``AggregateExpression`` nodes in ``e`` (one for a single call; under ``MakeDecimal`` or
    a cast when Spark's ``DecimalAggregates`` rewrote a decimal sum or average)."""
    if e.getClass().getSimpleName() == "AggregateExpression":
        return [e]
    return [a for child in jvm_seq(e.children()) for a in _aggregate_expressions(child)]


def share_equal_calls(calls: Sequence["AggregateCall"], buffers: dict[int, SparkBuffer]) -> tuple["AggregateCall", ...]:
    """``calls`` with each call that Spark would merge into an earlier equal one replaced by an
    expression reading that call's result (no buffers of its own); expressions over a replaced
    call are pointed at its replacement."""
    first: dict[str, AggregateCall] = {}
    replaced: dict[int, AggregateCall] = {}
    for call in calls:
        spark = buffers.get(id(call))
        if spark is None:
            continue
        original = first.setdefault(spark.canonical, call)
        if original is not call:
            replaced[id(call)] = ExpressionCall(
                function="shared",
                args=(),
                is_distinct=False,
                output_name=call.output_name,
                buffers=(),
                sql=call.sql,
                hidden=call.hidden,
                inner=(original,),
                rebuild=_first_value,
            )
    if not replaced:
        return tuple(calls)
    out = []
    for call in calls:
        call = replaced.get(id(call), call)
        inner = getattr(call, "inner", ())
        if inner and any(id(i) in replaced for i in inner):
            call = dataclasses.replace(call, inner=tuple(replaced.get(id(i), i) for i in inner))  # type: ignore[call-arg]
        out.append(call)
    return tuple(out)


def _first_value(values: list) -> Any:
    return values[0]
