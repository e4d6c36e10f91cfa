"""IncrementalExecution: the per-batch rules that turn the planned query into this batch's plan.

Spark: ``IncrementalExecution`` and its ``StateOpIdRule``. Stateful operators get their state
info (checkpoint, run id, operator id, store version = batch id, partitions), the output mode,
and two watermarks: late rows are filtered with the previous batch's watermark and state is
evicted with the current one (Spark's default ``allowMultiple=true`` propagation for one
watermark).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from statestream.operators.base import PhysicalOperator, StatefulOperatorStateInfo, StateStoreWriter
from statestream.operators.session_window import SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec
from statestream.operators.stateful import StateStoreRestoreExec, StateStoreSaveExec

__all__ = ["IncrementalExecution", "state_writers"]


def state_writers(plan: PhysicalOperator) -> list[PhysicalOperator]:
    """State-writing operators in plan pre-order (= operator id order, closest to the sink
    first). A restore operator shares its save operator's id and is not listed."""
    return [n for n in plan.walk() if isinstance(n, StateStoreWriter) and not isinstance(n, StateStoreRestoreExec)]


@dataclass
class IncrementalExecution:
    state_root: str
    run_id: str
    batch_id: int
    num_partitions: int
    output_mode: str
    late_watermark_ms: int | None
    eviction_watermark_ms: int | None

    def apply(self, plan: PhysicalOperator) -> PhysicalOperator:
        ids: dict[int, int] = {}
        for i, w in enumerate(state_writers(plan)):
            ids[id(getattr(w, "info", None) or w)] = i

        def info_for(op_id: int) -> StatefulOperatorStateInfo:
            return StatefulOperatorStateInfo(self.state_root, self.run_id, op_id, self.batch_id, self.num_partitions)

        def rule(node: PhysicalOperator) -> PhysicalOperator:
            if isinstance(node, StateStoreRestoreExec):
                return dataclasses.replace(node, state_info=info_for(ids[id(node.info)]))
            if isinstance(node, SessionWindowStateStoreRestoreExec):
                return dataclasses.replace(
                    node,
                    state_info=info_for(ids[id(node.info)]),
                    event_time_watermark_for_late_events=self.late_watermark_ms,
                    event_time_watermark_for_eviction=self.eviction_watermark_ms,
                )
            if isinstance(node, (StateStoreSaveExec, SessionWindowStateStoreSaveExec)):
                return dataclasses.replace(
                    node,
                    state_info=info_for(ids[id(node.info)]),
                    output_mode=self.output_mode,
                    event_time_watermark_for_late_events=self.late_watermark_ms,
                    event_time_watermark_for_eviction=self.eviction_watermark_ms,
                )
            return node

        return plan.transform_up(rule)
