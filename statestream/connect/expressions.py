"""A Connect client's expressions as classic PySpark columns.

statestream reads a column the way PySpark builds it (Spark's column nodes: a function called by
name, an alias, a column by name), to find an aggregation's functions and a query's event time.
So the forms a client's ``functions`` and ``Column`` operators send (``unresolved_function``,
``unresolved_attribute``, ``alias``, ``cast``, ``when`` chains, SQL text) are rebuilt here with
PySpark's own ``functions``, giving the nodes PySpark's classic API gives for the same call. Any
other form (literals of every type, struct fields, lambdas...) is planned by Spark's Connect
planner into a Catalyst expression (``_jvm.connect.ClientSession.column``), which Spark takes as
is in a projection or a filter.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import pyspark.sql.connect.proto as pb
from pyspark.sql import functions as F

from statestream._jvm.connect import ClientSession
from statestream.connect.messages import without_plan_ids
from statestream.errors import connect_node_not_supported
from statestream.plan.aggregate_expressions import SYMBOL_OPERATORS

__all__ = ["ColumnBuilder"]

#: aggregate functions a client calls with ``is_distinct``, as PySpark's functions name them
_DISTINCT = {"count": F.count_distinct, "sum": F.sum_distinct}


class ColumnBuilder:
    """Classic columns from Connect expressions, for one client session.

    Parameters
    ----------
    client : statestream._jvm.connect.ClientSession
        The client's server-side session (its Connect planner takes the forms not rebuilt here).

    Examples
    --------
    >>> import pyspark.sql.connect.proto as pb
    >>> builder = ColumnBuilder(client)  # doctest: +SKIP
    >>> e = pb.Expression(unresolved_attribute=pb.Expression.UnresolvedAttribute(unparsed_identifier="x"))
    >>> builder.column(e)  # doctest: +SKIP
    Column<'x'>
    """

    def __init__(self, client: ClientSession, rebuilt: Mapping[int, Any] | None = None) -> None:
        self.client = client
        self.rebuilt = rebuilt if rebuilt is not None else {}

    def column(self, e: pb.Expression) -> Any:
        """The classic column of ``e``: a column bound to a rebuilt DataFrame is that
        DataFrame's; any other reference is by name."""
        kind = e.WhichOneof("expr_type")
        if kind == "unresolved_attribute":
            attribute = e.unresolved_attribute
            if attribute.HasField("plan_id") and attribute.plan_id in self.rebuilt:
                return self.rebuilt[attribute.plan_id][attribute.unparsed_identifier]
            return F.col(attribute.unparsed_identifier)
        if kind == "unresolved_star" and e.unresolved_star.HasField("plan_id"):
            raise connect_node_not_supported("df['*'] (a star bound to one DataFrame)")
        if kind == "unresolved_star" and not e.unresolved_star.HasField("unparsed_target"):
            return F.col("*")
        if kind == "alias" and len(e.alias.name) == 1 and not e.alias.HasField("metadata"):
            return self.column(e.alias.expr).alias(e.alias.name[0])
        if kind == "cast" and e.cast.WhichOneof("cast_to_type") == "type_str" and e.cast.eval_mode == pb.Expression.Cast.EVAL_MODE_UNSPECIFIED:
            return self.column(e.cast.expr).cast(e.cast.type_str)
        if kind == "expression_string":
            return F.expr(e.expression_string.expression)
        if kind == "unresolved_function":
            built = self._function(e.unresolved_function)
            if built is not None:
                return built
        if kind == "call_function":
            # Spark parses the name as a (multi-part) identifier, as F.call_function does
            return F.call_function(e.call_function.function_name, *(self.column(a) for a in e.call_function.arguments))
        return self.client.column(without_plan_ids(e).SerializeToString())

    def _function(self, f: pb.Expression.UnresolvedFunction) -> Any:
        """A function call as PySpark's functions and operators make it; None for a form left to
        Spark's Connect planner (a user-defined function, one of Spark's internal functions,
        which its planner looks up by name itself, a distinct call other than
        ``count``/``sum``)."""
        name = f.function_name
        if f.is_user_defined_function or f.is_internal or self.client.is_internal_function(name):
            return None
        args = [self.column(a) for a in f.arguments]
        operator = SYMBOL_OPERATORS.get(name.lower())
        if operator is not None and (len(args) == 2 or (name.lower() in ("!", "not") and len(args) == 1)):
            return operator(*args)  # the node PySpark's classic operator makes (`a * b`: "*")
        if name == "negative" and len(args) == 1:
            return -args[0]
        if f.is_distinct:
            distinct = _DISTINCT.get(name.lower())
            return distinct(*args) if distinct is not None and args else None
        if name == "when":
            if len(args) < 2:
                return None
            built = F.when(args[0], args[1])
            pairs = args[2:]
            while len(pairs) >= 2:
                built = built.when(pairs[0], pairs[1])
                pairs = pairs[2:]
            return built.otherwise(pairs[0]) if pairs else built
        return F.call_function(_identifier(name), *args)


def _identifier(name: str) -> str:
    """``name`` as ``F.call_function`` parses it back to itself: an operator's name (``%``,
    ``==``) in backquotes.

    Examples
    --------
    >>> _identifier("count"), _identifier("%")
    ('count', '`%`')
    """
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"
