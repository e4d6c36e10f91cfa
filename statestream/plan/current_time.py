"""``current_timestamp()`` and friends in a streaming query: the batch's timestamp, not the clock.

Spark's ``MicroBatchExecution.runBatch`` replaces ``CurrentTimestamp``, ``CurrentDate`` and
``LocalTimestamp`` in each batch's plan by ``CurrentBatchTimestamp(batchTimestampMs)``, the
processing time recorded for the batch in ``offsets/<N>``. Every row of a batch sees the same
value, and a batch that runs again after a crash sees the value of its first run (reference §3.4,
§7.4). ``now()`` is a different expression class that Spark does *not* replace (checked on Spark
4.1.4: it keeps the wall-clock time at which the batch was planned), so it is left alone here too.

statestream runs each batch as a Spark *batch* job, whose optimizer would fix these functions to
the job's own start time. ``with_batch_timestamp`` rewrites the batch DataFrame's analysed plan
the way Spark's streaming engine does, before anything runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statestream._jvm.calls import java_class, java_dataframe, jvm_seq, jvm_view, static_member

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

__all__ = ["REPLACED_EXPRESSIONS", "with_batch_timestamp"]

#: Spark's expression classes that a streaming batch evaluates at ``batchTimestampMs``.
REPLACED_EXPRESSIONS = frozenset({"CurrentTimestamp", "CurrentDate", "LocalTimestamp"})


def _current_like(plan: Any) -> list[Any]:
    """The distinct current-time expressions of an analysed plan (every operator, every
    expression, pre-order)."""
    found: list[Any] = []
    plans = [plan]
    while plans:
        p = plans.pop()
        plans.extend(jvm_seq(p.children()))
        exprs = jvm_seq(p.expressions())
        while exprs:
            e = exprs.pop()
            if str(e.getClass().getSimpleName()) in REPLACED_EXPRESSIONS:
                if not any(e.equals(f) for f in found):
                    found.append(e)
            else:
                exprs.extend(jvm_seq(e.children()))
    return found


def with_batch_timestamp(df: "DataFrame", batch_timestamp_ms: int) -> "DataFrame":
    """``df`` with ``current_timestamp()``, ``current_date()`` and ``localtimestamp()`` fixed to
    ``batch_timestamp_ms`` (Spark's ``CurrentBatchTimestamp``). ``df`` itself when it has none."""
    from pyspark.sql import DataFrame

    jdf = java_dataframe(df)
    jvm = jvm_view(df.sparkSession)
    plan = jdf.queryExecution().analyzed()
    pattern = static_member(jvm, "org.apache.spark.sql.catalyst.trees.TreePattern", "CURRENT_LIKE")()
    if not plan.containsPattern(pattern):
        return df
    found = _current_like(plan)
    if not found:
        return df
    session_tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    replacements = java_class(jvm, "java.util.HashMap")()
    for e in found:
        zone = session_tz
        if str(e.getClass().getSimpleName()) != "CurrentTimestamp":  # the others are zone-aware
            tz = e.timeZoneId()
            if tz.isDefined():
                zone = tz.get()
        replacement = java_class(jvm, "org.apache.spark.sql.catalyst.expressions.CurrentBatchTimestamp")(
            int(batch_timestamp_ms), e.dataType(), static_member(jvm, "scala.Option", "apply")(zone)
        )
        replacements.put(e, replacement)
    # A Scala Map is a PartialFunction: it rewrites exactly the expressions it holds as keys.
    rule = static_member(jvm, "scala.jdk.javaapi.CollectionConverters", "asScala")(replacements)
    rewritten = plan.transformAllExpressions(rule)
    logger.debug("batch timestamp %d replaces %d current-time expression(s)", batch_timestamp_ms, len(found))
    new = static_member(jvm, "org.apache.spark.sql.classic.Dataset", "ofRows")(jdf.sparkSession(), rewritten)
    return DataFrame(new, df.sparkSession)
