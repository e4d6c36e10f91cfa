"""Checks made on the first batch of every run, before any state is touched (Spark: the state
schema check and the operator metadata check that ``IncrementalExecution`` makes when
``isFirstBatch``): a restarted query must have the same stateful operators, with compatible
state schemas, as the run that wrote the checkpoint."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from statestream.plan.incremental import state_writers

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = ["check_state_on_first_batch"]


def check_state_on_first_batch(ex, plan: "PhysicalOperator", batch_id: int) -> None:
    """Write (first start) or verify (restart) the operator metadata and state schema files."""
    try:
        from statestream.state import schema as S
    except ImportError:  # pragma: no cover - during development
        logger.warning("state schema checks unavailable")
        return
    hook = getattr(S, "check_and_write_state_metadata", None)
    if hook is None:
        logger.warning("state schema checks unavailable")
        return
    ops = []
    for i, w in enumerate(state_writers(plan)):
        key_schema, value_schema = w.state_schemas() if hasattr(w, "state_schemas") else (None, None)
        ops.append((i, w.operator_name, key_schema, value_schema, ex.num_partitions))
    hook(ex.fm.child("state"), ops, batch_id, ex.df.sparkSession.conf.get("spark.sql.streaming.stateStore.stateSchemaCheck", "true") == "true")
