"""How long the micro-batch loop waits before its next trigger.

Spark: ``ProcessingTimeExecutor`` and the polling delay of ``MicroBatchExecution``. With a
processing-time interval, the next trigger starts when the interval since the last one started
has passed (at once when the batch took longer). Without one (``processingTime=0``, the default
trigger, and ``availableNow``), a trigger that ran a batch is followed at once by the next, and a
trigger that found no new data waits Spark's ``spark.sql.streaming.pollingDelay`` (10 ms) before
asking the sources again, so an idle query does not spin.
"""

from __future__ import annotations

__all__ = ["POLLING_DELAY_S", "time_to_next_trigger"]

#: Spark's ``spark.sql.streaming.pollingDelay`` default: the pause after a trigger without data
POLLING_DELAY_S = 0.010


def time_to_next_trigger(interval_ms: int, elapsed_s: float, ran_batch: bool) -> float:
    """Seconds to wait before the next trigger, given the trigger's processing-time
    ``interval_ms`` (0: none), the seconds ``elapsed_s`` since this trigger started and whether
    it ran a batch (``ran_batch``); 0 means start the next trigger now."""
    if interval_ms > 0:
        return max(0.0, interval_ms / 1000.0 - elapsed_s)
    return 0.0 if ran_batch else POLLING_DELAY_S
