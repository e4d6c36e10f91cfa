"""Planning of ``transformWithStateInPandas`` / ``transformWithState``: Spark's
``TransformWithStateInPySparkStrategy``. The operator (``operators/transform_with_state.py``) sits
over a stateful exchange by its grouping keys. Planning resolves the keys and the event-time
columns and, as Spark's driver does before the first batch, runs the processor's ``init`` with a
recording handle to learn its state variables (names, kinds, schemas, TTL): what the state schema
file records and a restart compares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.operators.base import PhysicalOperator
from statestream.operators.dedup import StatefulShuffleExchangeExec
from statestream.operators.stateful_processor_handle import DriverStatefulProcessorHandle, StateVariableInfo
from statestream.operators.transform_with_state import TransformWithStateExec, TransformWithStateInfo
from statestream.plan.flat_map_groups_with_state import grouping_positions

if TYPE_CHECKING:
    from statestream.plan import logical as L

__all__ = ["transform_with_state_info", "plan_transform_with_state", "declared_state_variables"]


def declared_state_variables(processor: Any, time_mode: str) -> tuple[StateVariableInfo, ...]:
    """The variables ``processor.init`` declares (on a copy: the user's object is not touched),
    with Spark's errors for a duplicate name or a TTL outside processing time."""
    return _pre_init(processor, time_mode)[0]


def _pre_init(processor: Any, time_mode: str) -> tuple[tuple[StateVariableInfo, ...], tuple[str, ...]]:
    """(declared variables, names given to ``deleteIfExists`` and not declared)."""
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    handle = DriverStatefulProcessorHandle(time_mode)
    copy.init(handle)
    copy.close()
    declared = tuple(handle.variables)
    names = {v.name for v in declared}
    return declared, tuple(n for n in dict.fromkeys(handle.deleted) if n not in names)


def _state_value_schema(variables: tuple[StateVariableInfo, ...]) -> dict:
    """One struct field per variable (a list as an array, a map as a map), for the schema file."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    fields = []
    for v in variables:
        t: Any = v.value_schema
        if v.kind == "list":
            t = ArrayType(t)
        elif v.kind == "map":
            t = MapType(v.user_key_schema, t)
        fields.append(StructField(v.name, t, True))
    return StructType(fields).jsonValue()


def transform_with_state_info(node: "L.TransformWithState", variables: tuple[StateVariableInfo, ...] | None = None) -> TransformWithStateInfo:
    from pyspark.sql.types import StructType

    assert node.child is not None
    schema = node.child.schema
    positions, et_index = grouping_positions(schema, node.keys)
    fields = schema.fields
    out_names = list(node.output_schema.names)
    out_et = out_names.index(node.event_time_column) if node.event_time_column in out_names else None
    deleted: tuple[str, ...] = ()
    if variables is None:
        variables, deleted = _pre_init(node.processor, node.time_mode)
    key_schema = StructType([fields[i] for i in positions])
    return TransformWithStateInfo(
        key_indices=tuple(positions),
        key_names=tuple(fields[i].name for i in positions),
        processor=node.processor,
        output_schema=_without_metadata(node.output_schema),
        output_mode=node.output_mode,
        time_mode=node.time_mode,
        use_pandas=node.use_pandas,
        variables=variables,
        event_time_index=et_index,
        event_time_is_struct=et_index is not None and isinstance(fields[et_index].dataType, StructType),
        output_event_time_index=out_et,
        initial_state=node.initial_state,
        initial_key_names=node.initial_state_keys,
        deleted_variables=deleted,
        key_schema_json=key_schema.jsonValue(),
        value_schema_json=_state_value_schema(variables),
    )


def _without_metadata(schema: Any) -> Any:
    """The output schema without the event-time marker (``mapInArrow`` takes plain types)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields])


def plan_transform_with_state(
    node: "L.TransformWithState", child: PhysicalOperator, num_partitions: int, store_conf: Any = None
) -> PhysicalOperator:
    """The operator over its stateful exchange ``hashpartitioning(keys, N)``."""
    info = transform_with_state_info(node)
    exchange = StatefulShuffleExchangeExec(child=child, keys=info.key_names, num_partitions=num_partitions, info=info)  # type: ignore[arg-type]
    return TransformWithStateExec(child=exchange, info=info, store_conf=store_conf)
