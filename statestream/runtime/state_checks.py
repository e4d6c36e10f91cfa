"""Checks made on the first batch of every run, before any state is touched (Spark: the state
schema check and the operator metadata check that ``IncrementalExecution`` makes when
``isFirstBatch``): a restarted query must have the same stateful operators, with compatible
state schemas, as the run that wrote the checkpoint."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from statestream.plan.incremental import state_writers
from statestream.state import schema as S

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = ["check_state_on_first_batch"]


def check_state_on_first_batch(ex, plan: "PhysicalOperator", batch_id: int) -> None:
    """Verify (restart) then write the operator metadata and state schema files."""
    state_root = ex.fm.child("state").root
    schema_check = ex.session.sparkSession.conf.get("spark.sql.streaming.stateStore.stateSchemaCheck", "true").lower() == "true"
    writers = state_writers(plan)
    current = {i: w.operator_name for i, w in enumerate(writers)}
    if batch_id > 0:
        existing = S.read_all_operator_metadata(state_root)
        if existing:
            S.check_operator_metadata({k: v.operator_name for k, v in existing.items()}, current)
    for i, w in enumerate(writers):
        if hasattr(w, "validate_and_write_state_schema"):  # an operator with its own restart rules
            w.validate_and_write_state_schema(state_root, i, schema_check, batch_id)
        else:
            key_json, value_json = w.state_schemas()
            S.validate_and_write_state_schema(
                state_root, i, key_json, value_json,
                check_value=getattr(w, "check_value_schema", True), schema_check_enabled=schema_check,
            )
        for store, (key_json, value_json) in getattr(w, "store_schemas", dict)().items():
            S.write_store_schema(state_root, i, store, key_json, value_json)
        S.write_operator_metadata(
            state_root,
            S.OperatorStateMetadata(
                i,
                w.operator_name,
                tuple(
                    S.StateStoreMetadata(name, getattr(w, "num_cols_prefix_key", 0), ex.num_partitions)
                    for name in getattr(w, "state_store_names", ("default",))
                ),
            ),
        )
