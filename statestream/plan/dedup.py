"""Planning of streaming deduplication: Spark's ``StreamingDeduplicationStrategy``.

``dropDuplicates(keys)`` / ``dropDuplicatesWithinWatermark(keys)`` become the dedup operator over
its stateful exchange (``operators/dedup.py``). Planning resolves the keys as Spark's analyser
does, finds the event-time column and whether Spark's optimizer prunes it below the dedup, and
derives the state schemas.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statestream.errors import dedup_without_keys_error
from statestream.operators.base import PhysicalOperator
from statestream.operators.dedup import (
    DUMMY_VALUE_FIELD,
    EXPIRES_AT_FIELD,
    DeduplicationInfo,
    StatefulShuffleExchangeExec,
    StreamingDeduplicateExec,
    StreamingDeduplicateWithinWatermarkExec,
)
from statestream._jvm.calls import expr_ids, java_dataframe, jvm_seq
from statestream.plan.logical import WATERMARK_DELAY_KEY

if TYPE_CHECKING:
    from statestream.plan import logical as L

__all__ = ["analysed_key_names", "deduplication_info", "plan_streaming_deduplication"]

logger = logging.getLogger(__name__)

def analysed_key_names(template: Any) -> tuple[str, ...] | None:
    """The dedup keys of a ``dropDuplicates`` template as Spark resolved them (real column names,
    case as in the schema, Spark's order), or ``None`` when the analysed plan cannot be read."""
    positions = _jvm_key_positions(template)
    if positions is None:
        return None
    names = template.schema.names
    return tuple(names[i] for i in positions)


def _jvm_key_positions(template: Any) -> list[int] | None:
    """Key positions in the child's output, in the order Spark's analysed ``Deduplicate`` holds
    them (Spark de-duplicates the names through a Scala ``Set`` and resolves each one against
    the output, so the order and the matched columns are best read from Spark itself)."""
    jdf = getattr(template, "_jdf", None)
    if jdf is None:
        return None
    try:
        analyzed = jdf.queryExecution().analyzed()
        if analyzed.nodeName() != "Deduplicate":
            return None
        keys = analyzed.keys()
        out = analyzed.child().output()
        out_ids = expr_ids(out)
        return [out_ids.index(k) for k in expr_ids(keys)]
    except Exception:  # not a classic JVM DataFrame: resolve in Python
        logger.debug("could not read the dedup keys from the analysed template", exc_info=True)
        return None


def _python_key_positions(node: "L.Deduplicate", case_sensitive: bool) -> list[int]:
    names = list(node.child.schema.names) if node.child is not None else []
    wanted = list(dict.fromkeys(node.keys)) if node.keys else names
    out: list[int] = []
    for k in wanted:
        for i, n in enumerate(names):
            if (n == k) if case_sensitive else (n.lower() == k.lower()):
                out.append(i)
    return out


def _jvm_required_above(root: "L.LogicalPlan", node: "L.Deduplicate") -> set[int] | None:
    """Expression ids of the dedup's output that the rest of the query needs: the query's output
    plus everything the operators above the dedup reference. ``None`` when Spark's analysed plans
    cannot be read."""
    try:
        target = java_dataframe(node.template).queryExecution().analyzed()
        key_ids = expr_ids(target.keys())
        analyzed = java_dataframe(root.template).queryExecution().analyzed()
    except Exception:  # not a classic JVM DataFrame
        logger.debug("could not read the analysed plans for column pruning", exc_info=True)
        return None

    def visit(plan: Any, above: set[int]) -> set[int] | None:
        if plan.nodeName() == "Deduplicate" and expr_ids(plan.keys()) == key_ids:
            return above
        here = above | set(expr_ids(plan.references().toSeq()))
        for child in jvm_seq(plan.children()):
            found = visit(child, here)
            if found is not None:
                return found
        return None

    return visit(analyzed, set(expr_ids(analyzed.output())))


def _event_time_pruned(root: "L.LogicalPlan | None", node: "L.Deduplicate", et_index: int, positions: list[int]) -> bool:
    """Whether Spark's optimizer removes the event-time column from the dedup's input.

    Spark's column pruning inserts a projection below ``Deduplicate`` that keeps only the keys and
    the columns needed above it, so a non-key event-time column the rest of the query does not use
    is gone before the dedup runs, and with it the late-row filter (checked on Spark 4.1:
    ``withWatermark(...).dropDuplicates(["k"]).select("k", "value")`` drops no late row).
    ``DeduplicateWithinWatermark`` always keeps its event-time column.
    """
    if node.within_watermark or root is None or root is node or et_index in positions:
        return False
    required = _jvm_required_above(root, node)
    if required is None:
        return False
    try:
        child_ids = expr_ids(java_dataframe(node.template).queryExecution().analyzed().child().output())
    except Exception:  # noqa: BLE001
        return False
    return child_ids[et_index] not in required


def deduplication_info(node: "L.Deduplicate", root: "L.LogicalPlan | None" = None) -> DeduplicationInfo:
    """Resolve keys, event-time columns and state schemas of a ``Deduplicate`` node (``root``:
    the whole query, needed to know which columns Spark's optimizer prunes below the dedup)."""
    from pyspark.sql.types import LongType, NullType, StructField, StructType

    assert node.child is not None
    schema = node.child.schema
    positions = _jvm_key_positions(node.template)
    if positions is None:
        positions = _python_key_positions(node, case_sensitive=False)
    if not positions:
        raise dedup_without_keys_error()
    fields = schema.fields
    et_index = next((i for i, f in enumerate(fields) if WATERMARK_DELAY_KEY in (f.metadata or {})), None)
    et_key = next((j for j, i in enumerate(positions) if WATERMARK_DELAY_KEY in (fields[i].metadata or {})), None)
    delay = int((fields[et_index].metadata or {}).get(WATERMARK_DELAY_KEY, 0)) if et_index is not None else 0
    if et_index is not None and _event_time_pruned(root, node, et_index, positions):
        et_index = None
    key_schema = StructType([fields[i] for i in positions])
    if node.within_watermark:
        value_schema = StructType([StructField(EXPIRES_AT_FIELD, LongType(), False)])
    else:
        value_schema = StructType([StructField(DUMMY_VALUE_FIELD, NullType(), True)])
    return DeduplicationInfo(
        key_indices=tuple(positions),
        key_names=tuple(fields[i].name for i in positions),
        within_watermark=node.within_watermark,
        output_schema=schema,
        event_time_index=et_index,
        event_time_is_struct=et_index is not None and isinstance(fields[et_index].dataType, StructType),
        event_time_key=et_key,
        event_time_key_is_struct=et_key is not None and isinstance(fields[positions[et_key]].dataType, StructType),
        delay_ms=delay,
        key_schema_json=key_schema.jsonValue(),
        value_schema_json=value_schema.jsonValue(),
    )


def plan_streaming_deduplication(
    node: "L.Deduplicate",
    child: PhysicalOperator,
    num_partitions: int,
    store_conf: Any = None,
    root: "L.LogicalPlan | None" = None,
) -> PhysicalOperator:
    """Spark's ``StreamingDeduplicationStrategy``: the dedup operator over its stateful exchange."""
    info = deduplication_info(node, root)
    exchange = StatefulShuffleExchangeExec(child=child, keys=info.key_names, num_partitions=num_partitions, info=info)
    cls = StreamingDeduplicateWithinWatermarkExec if node.within_watermark else StreamingDeduplicateExec
    return cls(child=exchange, info=info, store_conf=store_conf)
