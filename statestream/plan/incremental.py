"""IncrementalExecution: the per-batch rules that turn the planned query into this batch's plan.

Spark: ``IncrementalExecution`` with its ``StateOpIdRule`` and ``ConvertLocalLimitRule``. Stateful
operators get their state info (checkpoint, run id, operator id, store version = batch id,
partitions), the output mode, and two watermarks: late rows are filtered with the previous
batch's watermark and state is evicted with the current one (Spark's default
``allowMultiple=true`` propagation for one watermark). A streaming local limit with no stateful
operator below it in its stage becomes an ordinary local limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from statestream.operators.base import PhysicalOperator, StatefulOperatorStateInfo, StateStoreWriter, WatermarkSupport
from statestream.operators.limit import LocalLimitExec, StreamingGlobalLimitExec, StreamingLocalLimitExec, has_no_stateful_op
from statestream.operators.session_window import SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec
from statestream.operators.stateful import StateStoreRestoreExec, StateStoreSaveExec

__all__ = ["IncrementalExecution", "state_writers"]


def state_writers(plan: PhysicalOperator) -> list[PhysicalOperator]:
    """State-writing operators in plan pre-order (= operator id order, closest to the sink
    first). A restore operator shares its save operator's id and is not listed."""
    return [n for n in plan.walk() if isinstance(n, StateStoreWriter) and not isinstance(n, StateStoreRestoreExec)]


def _state_identity(node: PhysicalOperator) -> object:
    """What identifies one stateful operator across the copies ``transform_up`` makes of it:
    the aggregation info its restore/save pair shares, else its ``node_id``."""
    info = getattr(node, "info", None)
    if info is not None:
        return id(info)
    node_id = getattr(node, "node_id", None)
    return node_id if node_id is not None else id(node)


@dataclass
class IncrementalExecution:
    state_root: str
    run_id: str
    batch_id: int
    num_partitions: int
    output_mode: str
    late_watermark_ms: int | None
    eviction_watermark_ms: int | None
    #: the batch's processing time (``batchTimestampMs``), for processing-time timeouts
    batch_timestamp_ms: int | None = None

    def apply(self, plan: PhysicalOperator) -> PhysicalOperator:
        ids: dict[object, int] = {}
        for i, w in enumerate(state_writers(plan)):
            ids[_state_identity(w)] = i

        def info_for(op_id: int) -> StatefulOperatorStateInfo:
            return StatefulOperatorStateInfo(self.state_root, self.run_id, op_id, self.batch_id, self.num_partitions)

        def rule(node: PhysicalOperator) -> PhysicalOperator:
            if isinstance(node, StateStoreRestoreExec):
                return dataclasses.replace(node, state_info=info_for(ids[_state_identity(node)]))
            if isinstance(node, SessionWindowStateStoreRestoreExec):
                return dataclasses.replace(
                    node,
                    state_info=info_for(ids[_state_identity(node)]),
                    event_time_watermark_for_late_events=self.late_watermark_ms,
                    event_time_watermark_for_eviction=self.eviction_watermark_ms,
                )
            if isinstance(node, (StateStoreSaveExec, SessionWindowStateStoreSaveExec)):
                return dataclasses.replace(
                    node,
                    state_info=info_for(ids[_state_identity(node)]),
                    output_mode=self.output_mode,
                    event_time_watermark_for_late_events=self.late_watermark_ms,
                    event_time_watermark_for_eviction=self.eviction_watermark_ms,
                )
            if isinstance(node, StreamingGlobalLimitExec):
                return dataclasses.replace(
                    node, state_info=info_for(ids[_state_identity(node)]), output_mode=self.output_mode
                )
            if isinstance(node, StreamingLocalLimitExec) and node.child is not None and has_no_stateful_op(node.child):
                # Spark's ConvertLocalLimitRule: nothing below needs its input read to the end
                return LocalLimitExec(child=node.child, n=node.n)
            if isinstance(node, StateStoreWriter) and _state_identity(node) in ids:
                # any other state writer (deduplication, ...): state info and both watermarks
                changes: dict = {"state_info": info_for(ids[_state_identity(node)])}
                if isinstance(node, WatermarkSupport):
                    changes["event_time_watermark_for_late_events"] = self.late_watermark_ms
                    changes["event_time_watermark_for_eviction"] = self.eviction_watermark_ms
                if hasattr(node, "batch_timestamp_ms"):
                    changes["batch_timestamp_ms"] = self.batch_timestamp_ms
                return dataclasses.replace(node, **changes)
            return node

        return plan.transform_up(rule)
