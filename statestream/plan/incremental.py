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
from typing import Any, Mapping

from statestream.operators.base import PhysicalOperator, StatefulOperatorStateInfo, StateStoreWriter, WatermarkSupport
from statestream.operators.limit import LocalLimitExec, StreamingGlobalLimitExec, StreamingLocalLimitExec, has_no_stateful_op
from statestream.operators.session_window import SessionWindowStateStoreRestoreExec, SessionWindowStateStoreSaveExec
from statestream.operators.stateful import StateStoreRestoreExec, StateStoreSaveExec
from statestream.operators.stream_join import StreamingSymmetricHashJoinExec
from statestream.operators.transform_with_state import TransformWithStateExec
from statestream.operators.watermark import EventTimeWatermarkExec
from statestream.plan.stream_joins import join_output_watermark, join_state_watermark

__all__ = ["IncrementalExecution", "state_writers", "input_watermarks"]


def state_writers(plan: PhysicalOperator) -> list[StateStoreWriter]:
    """State-writing operators in plan pre-order (= operator id order, closest to the sink
    first). A restore operator shares its save operator's id and is not listed."""
    return [n for n in plan.walk() if isinstance(n, StateStoreWriter) and not isinstance(n, StateStoreRestoreExec)]


def _state_identity(node: PhysicalOperator | StateStoreWriter) -> object:
    """What identifies one stateful operator across the copies ``transform_up`` makes of it:
    the aggregation info its restore/save pair shares, else its ``node_id``."""
    info = getattr(node, "info", None)
    if info is not None:
        return id(info)
    node_id = getattr(node, "node_id", None)
    return node_id if node_id is not None else id(node)


def input_watermarks(plan: PhysicalOperator, origin_ms: int | None) -> dict[object, int | None]:
    """Each state writer's *input* watermark (by ``_state_identity``) when the query's global
    watermark is ``origin_ms``: Spark's ``PropagateWatermarkSimulator`` (``allowMultiple=true``).

    A watermark node outputs the global watermark; any other node passes on the smallest of its
    children's (those that have one); a state writer passes on what it produces from its input
    (a stream-stream join the smallest of its state watermarks and its input, every other
    operator its input). ``None``: no watermark below the operator. As in Spark, a global
    watermark of 0 (none computed yet) is not propagated: every operator's input is 0."""
    found: dict[object, int | None] = {}

    def visit(node: PhysicalOperator) -> int | None:
        outs = [visit(c) for c in node.children]
        if isinstance(node, EventTimeWatermarkExec):
            return origin_ms
        known = [w for w in outs if w is not None]
        wm = min(known) if known else None
        if isinstance(node, StateStoreWriter) and not isinstance(node, StateStoreRestoreExec):
            found[_state_identity(node)] = wm
            # a global watermark of 0 (none yet) is not propagated: every operator gets 0
            if wm is not None and wm != 0 and isinstance(node, StreamingSymmetricHashJoinExec):
                return join_output_watermark(node.info, wm)
            if isinstance(node, TransformWithStateExec) and not node.produces_output_watermark():
                return None
        return wm

    if origin_ms is not None:
        visit(plan)
    return found


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
    #: watermark node id -> its input's lateness reference (``operators.lateness``); None: the
    #: query does not measure lateness
    lateness_references: Mapping[str, int | None] | None = None

    def apply(self, plan: PhysicalOperator) -> PhysicalOperator:
        ids: dict[object, int] = {}
        for i, w in enumerate(state_writers(plan)):
            ids[_state_identity(w)] = i

        # per-operator input watermarks; an operator without a watermark below it keeps the
        # global ones (what it always got), and only a join changes what operators above see
        late_in = input_watermarks(plan, self.late_watermark_ms)
        evict_in = input_watermarks(plan, self.eviction_watermark_ms)

        def watermarks(node: PhysicalOperator) -> tuple[int | None, int | None]:
            key = _state_identity(node)
            late, evict = late_in.get(key), evict_in.get(key)
            if isinstance(node, StreamingSymmetricHashJoinExec):
                return late, evict
            return (self.late_watermark_ms if late is None else late, self.eviction_watermark_ms if evict is None else evict)

        def info_for(op_id: int) -> StatefulOperatorStateInfo:
            return StatefulOperatorStateInfo(self.state_root, self.run_id, op_id, self.batch_id, self.num_partitions)

        def with_watermarks(node: PhysicalOperator, **extra: object) -> PhysicalOperator:
            """``node`` with its state info and its own late-event and eviction watermarks."""
            late, evict = watermarks(node)
            # fields of the stateful operators (``node`` is typed as any physical operator)
            fields: dict[str, Any] = {
                "state_info": info_for(ids[_state_identity(node)]),
                "event_time_watermark_for_late_events": late,
                "event_time_watermark_for_eviction": evict,
            }
            return dataclasses.replace(node, **fields, **extra)

        def rule(node: PhysicalOperator) -> PhysicalOperator:
            if isinstance(node, EventTimeWatermarkExec) and self.lateness_references is not None:
                return dataclasses.replace(node, measure_lateness=True, lateness_reference_ms=self.lateness_references.get(node.node_id))
            if isinstance(node, StateStoreRestoreExec):
                return dataclasses.replace(node, state_info=info_for(ids[_state_identity(node)]))
            if isinstance(node, SessionWindowStateStoreRestoreExec):
                return with_watermarks(node)
            if isinstance(node, (StateStoreSaveExec, SessionWindowStateStoreSaveExec)):
                return with_watermarks(node, output_mode=self.output_mode)
            if isinstance(node, StreamingSymmetricHashJoinExec):
                _, evict = watermarks(node)
                states = (join_state_watermark(node.info, 0, evict), join_state_watermark(node.info, 1, evict))
                return with_watermarks(node, state_watermarks=states)
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
                    late, evict = watermarks(node)
                    changes["event_time_watermark_for_late_events"] = late
                    changes["event_time_watermark_for_eviction"] = evict
                if hasattr(node, "batch_timestamp_ms"):
                    changes["batch_timestamp_ms"] = self.batch_timestamp_ms
                return dataclasses.replace(node, **changes)
            return node

        return plan.transform_up(rule)
