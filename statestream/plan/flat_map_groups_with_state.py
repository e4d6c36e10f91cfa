"""Planning of ``applyInPandasWithState``: Spark's ``FlatMapGroupsWithStateStrategy`` for the
pandas variant. The operator (``operators/flat_map_groups_with_state.py``) sits over a stateful
exchange by its grouping keys; planning resolves the keys, finds the event-time column and derives
the state schemas of Spark's state format version 2 (key = the grouping columns; value =
``groupState`` plus ``timeoutTimestamp`` when a timeout is configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.operators.base import PhysicalOperator
from statestream.operators.dedup import StatefulShuffleExchangeExec
from statestream.operators.flat_map_groups_with_state import (
    GROUP_STATE_FIELD,
    NO_TIMEOUT,
    TIMEOUT_TIMESTAMP_FIELD,
    FlatMapGroupsWithStateExec,
    FlatMapGroupsWithStateInfo,
)
from statestream.plan.logical import WATERMARK_DELAY_KEY

if TYPE_CHECKING:
    from statestream.plan import logical as L

__all__ = ["flat_map_groups_with_state_info", "plan_flat_map_groups_with_state", "grouping_positions"]


def grouping_positions(schema: Any, keys: tuple[str, ...]) -> tuple[list[int], int | None]:
    """(position of each grouping column in ``schema``, an exact name first, else one that
    differs only in case; position of the event-time column or ``None``), for the Python state
    operators, which group by input column names."""
    names = list(schema.names)
    positions = []
    for k in keys:
        exact = [i for i, n in enumerate(names) if n == k]
        loose = [i for i, n in enumerate(names) if n.lower() == k.lower()]
        positions.append((exact or loose)[0])
    et_index = next((i for i, f in enumerate(schema.fields) if WATERMARK_DELAY_KEY in (f.metadata or {})), None)
    return positions, et_index


def flat_map_groups_with_state_info(node: "L.FlatMapGroupsWithState") -> FlatMapGroupsWithStateInfo:
    from pyspark.sql.types import LongType, StructField, StructType

    assert node.child is not None
    schema = node.child.schema
    positions, et_index = grouping_positions(schema, node.keys)
    fields = schema.fields
    key_schema = StructType([fields[i] for i in positions])
    value_fields = [StructField(GROUP_STATE_FIELD, node.state_schema, True)]
    if node.timeout_conf != NO_TIMEOUT:
        value_fields.append(StructField(TIMEOUT_TIMESTAMP_FIELD, LongType(), False))
    return FlatMapGroupsWithStateInfo(
        key_indices=tuple(positions),
        key_names=tuple(fields[i].name for i in positions),
        func=node.func,
        output_schema=node.output_schema,
        state_schema=node.state_schema,
        func_output_mode=node.output_mode,
        timeout_conf=node.timeout_conf,
        event_time_index=et_index,
        event_time_is_struct=et_index is not None and isinstance(fields[et_index].dataType, StructType),
        watermark_present=et_index is not None,
        key_schema_json=key_schema.jsonValue(),
        value_schema_json=StructType(value_fields).jsonValue(),
    )


def plan_flat_map_groups_with_state(
    node: "L.FlatMapGroupsWithState", child: PhysicalOperator, num_partitions: int, store_conf: Any = None
) -> PhysicalOperator:
    """The operator over its stateful exchange ``hashpartitioning(keys, N)``."""
    info = flat_map_groups_with_state_info(node)
    exchange = StatefulShuffleExchangeExec(child=child, keys=info.key_names, num_partitions=num_partitions, info=info)  # type: ignore[arg-type]
    return FlatMapGroupsWithStateExec(child=exchange, info=info, store_conf=store_conf)
