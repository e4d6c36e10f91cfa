"""SQL over a streaming temporary view (``df.createOrReplaceTempView("v")`` then
``ss.sql("SELECT ... FROM v")``).

The view's template (an empty batch DataFrame with the stream's schema) is registered under the
view's name, so Spark analyses the query as it would analyse it over the stream: names, types and
errors are Spark's. Each micro-batch then registers its own rows under the same name in the
query's session (a clone of the user's, so no other query sees them) and runs the same SQL. That
is only the stream's answer when the SQL is stateless above the view; an aggregation, join, sort,
limit or deduplication written in SQL is refused with ``NotSupportedYetError`` (the DataFrame API
runs those).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from pyspark.sql.session import SparkSession as ClassicSparkSession

from statestream.errors import not_supported_yet
from statestream._jvm.calls import java_dataframe, java_session, jvm_seq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["relations_in", "check_stateless_above_view", "per_batch_sql", "STATEFUL_SQL_NODES"]

#: analysed plan nodes whose result over one batch is not the stream's result
STATEFUL_SQL_NODES = frozenset(
    {
        "Aggregate", "Join", "Sort", "GlobalLimit", "LocalLimit", "Deduplicate", "Distinct", "Window", "Union",
        "Intersect", "Except", "Offset", "Tail", "Pivot", "Expand", "LateralJoin",
    }
)  # fmt: skip

_LOCK = threading.Lock()


def relations_in(spark: "SparkSession", query: str) -> list[str]:
    """The table or view names ``query`` reads (lower case, dotted), from Spark's parser."""
    plan = java_session(spark).sessionState().sqlParser().parsePlan(query)
    names: list[str] = []
    pending = [plan]
    while pending:
        node = pending.pop()
        if node.getClass().getSimpleName() == "UnresolvedRelation":
            parts = node.multipartIdentifier()
            names.append(".".join(str(p) for p in jvm_seq(parts)).lower())
        pending.extend(jvm_seq(node.children()))
        # subqueries in expressions (WHERE x IN (SELECT ...)) hold plans too
        for expression in jvm_seq(node.expressions()):
            stack = [expression]
            while stack:
                e = stack.pop()
                if hasattr(e, "plan") and e.getClass().getSimpleName().endswith(("Subquery", "Exists", "InSubquery", "ListQuery")):
                    try:
                        pending.append(e.plan())
                    except Exception:  # noqa: BLE001 - not a subquery expression
                        pass
                stack.extend(jvm_seq(e.children()))
    return names


def check_stateless_above_view(template: "DataFrame", view: str, query: str) -> None:
    """Refuse SQL whose plan above the streaming view ``view`` has a stateful node."""
    plan = java_dataframe(template).queryExecution().analyzed()
    pending = [plan]
    while pending:
        node = pending.pop()
        name = node.nodeName()
        if _is_view_node(node, view):
            continue  # the view's own plan (it may aggregate: that is the stream's business)
        if name in STATEFUL_SQL_NODES:
            raise not_supported_yet(
                "StreamingSession",
                "sql",
                f"SQL with {name} over the streaming view {view} ({query!r}); write that step with the DataFrame API",
            )
        pending.extend(jvm_seq(node.children()))
        # WHERE x > (SELECT avg(x) FROM v) is checked too
        pending.extend(jvm_seq(node.subqueries()))


def _is_view_node(node: Any, view: str) -> bool:
    """Whether ``node`` is the streaming view itself (its ``SubqueryAlias`` or ``View``), by the
    exact identifier."""
    name = view.split(".")[-1]
    try:
        if node.nodeName() == "SubqueryAlias":
            return str(node.alias()).lower() == name
        if node.nodeName() == "View":
            return str(node.desc().identifier().table()).lower() == name
    except Exception:  # noqa: BLE001 - another kind of node
        return False
    return False


def per_batch_sql(view: str, query: str, template: "DataFrame") -> Callable[["DataFrame"], "DataFrame"]:
    """The transform of one batch: its rows under the view's name (in the batch's own session),
    the SQL over them, and the template back under that name."""

    def run(batch: "DataFrame") -> "DataFrame":
        session: Any = batch.sparkSession
        with _LOCK:
            batch.createOrReplaceTempView(view)
            try:
                # a projection over the SQL's result: without it the input rows' observation of a
                # batch whose last step is this SQL never completed (measured: numInputRows 0)
                # PySpark's own sql: an enabled session's would read the view as the stream
                return ClassicSparkSession.sql(session, query).select("*")
            finally:
                if session is template.sparkSession:
                    template.createOrReplaceTempView(view)

    return run
