"""What every per-partition state step shares: the ``mapInArrow`` entry point, the commit
sequence and the metric record sent back to the driver.

The aggregation, deduplication, session-window and global-limit steps differ in how they change
their store; they all run inside a Spark task, commit version N+1 the same way (with the crash
point the recovery tests use, and throttled maintenance) and report Spark's state-writer metrics
through the query's accumulator.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pyarrow as pa

from statestream.faults import crash_point, record_state_task

__all__ = ["StateStep", "commit_state", "finish_writer_metrics"]


class StateStep:
    """Mixin for the frozen dataclass of a state step: ``process(partition, batches)`` returns
    (rows to emit, metrics); ``__call__`` is the ``mapInArrow`` function around it."""

    accumulator: Any

    def process(self, partition: int, batches) -> tuple[Any, dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        out, metrics = self.process(partition, batches)
        if self.accumulator is not None:
            self.accumulator.add([metrics])
        if isinstance(out, pa.Table):
            yield from out.to_batches(max_chunksize=1 << 16)
        else:
            yield from out


def commit_state(store, provider, version: int, partition: int) -> float:
    """Commit ``store`` (batch ``version`` writes version + 1), then run maintenance when it is
    due; returns the commit time in ms. The caller aborts the store if this raises."""
    c0 = time.perf_counter()
    committed = store.commit()
    commit_ms = (time.perf_counter() - c0) * 1000
    crash_point("after_state_commit", version, partition)
    sid = provider.store_id
    record_state_task(sid.checkpoint_root, sid.operator_id, partition, version, provider.run_id, *provider.cache_counts())
    provider.maybe_do_maintenance(committed)
    return commit_ms


def finish_writer_metrics(
    m: dict,
    store,
    updates_ms: float,
    commit_ms: float,
    removal_ms: float | None = None,
    num_output_rows: int | None = None,
    custom: dict | None = None,
) -> dict:
    """Complete a step's metric record with the store's figures and the timings (Spark's
    StateStoreWriter names). ``removal_ms`` is left out for operators that never remove."""
    sm = store.metrics()
    if num_output_rows is not None:
        m["numOutputRows"] = num_output_rows
    m["numTotalStateRows"] = sm.num_keys
    m["allUpdatesTimeMs"] = int(updates_ms)
    if removal_ms is not None:
        m["allRemovalsTimeMs"] = int(removal_ms)
    m["commitTimeMs"] = int(commit_ms)
    m["stateMemory"] = sm.memory_used_bytes
    m["customMetrics"] = {**sm.custom_metrics, **(custom or {})}
    return m
