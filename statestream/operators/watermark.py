"""EventTimeWatermarkExec: marks the event-time column and gathers event-time statistics.

Spark: ``EventTimeWatermarkExec`` with its ``EventTimeStatsAccum``. The operator passes rows
through unchanged. While the batch runs, Spark's ``observe()`` computes min, max, sum and count of
the event time in milliseconds over every row that flows through this node (a null event time
counts as 0 ms, as in Spark), so no extra pass over the data is needed. After the batch, the loop
turns those figures into ``EventTimeStats`` for the ``WatermarkTracker``.

The milliseconds are rounded down (a time before 1970 between two milliseconds reports the
earlier one, as Spark's engine does) in long arithmetic (``unix_millis``). The sum, for the
average, is exact: three long sums of the value's bits (:data:`SUM_PARTS`), cheap per row where
one decimal sum would run Spark's decimal arithmetic on every row and one long sum could
overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from statestream.operators.base import PhysicalOperator
from statestream.operators.basic import StreamingRelationExec
from statestream.operators.lateness import BUCKETS_PER_DOUBLING, NUM_BUCKETS, LatenessHistogram

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "WATERMARK_DELAY_KEY",
    "LATENESS_FIELD",
    "BEYOND_DELAY_FIELD",
    "lateness_reference_column",
    "lateness_bucket",
    "SUM_PARTS",
    "EventTimeWatermarkExec",
    "event_time_sum",
    "sources_counted_by_watermark",
    "mark_event_time",
    "observed_values",
    "stats_from_observation",
    "lateness_records",
]

#: the metadata key that marks a relation's event-time column with its watermark delay (ms), as
#: Spark's ``withWatermark`` marks it (``EventTimeWatermark.delayKey``)
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"

#: the event time's sum is observed as one long sum per bit range, (name, shift, mask): bits 40
#: and up (with the sign), 20 to 39, 0 to 19; no part can overflow below 2^40 rows
SUM_PARTS = (("sum_hi", 40, None), ("sum_mid", 20, 0xFFFFF), ("sum_lo", 0, 0xFFFFF))


def event_time_sum(values: dict) -> int | None:
    """The exact sum of the event times (ms) from an observation's :data:`SUM_PARTS`; None when a
    part is missing (no row was observed)."""
    total = 0
    for name, shift, _ in SUM_PARTS:
        part = values.get(name)
        if part is None:
            return None
        total += int(part) << shift
    return total


#: the observation's fields of the lateness measure: Spark's ``histogram_numeric`` of the rows'
#: lateness buckets, and the rows at least the delay late (those this input's watermark drops)
LATENESS_FIELD = "lateness"
BEYOND_DELAY_FIELD = "beyond_delay"


def lateness_reference_column(node_id: str) -> str:
    """The name of the column that carries a watermark node's lateness reference in a batch
    plan (dropped after the node's observation)."""
    return f"__statestream_lateness_ref_{node_id.replace('-', '_')}"


def lateness_bucket(lateness: "Column") -> "Column":
    """The lateness bucket (``operators.lateness.bucket_of``) of a lateness column (ms), null
    where it is null or below 0 (a row ahead of its reference)."""
    from pyspark.sql import functions as F

    per_doubling = F.floor(F.log2(lateness) * F.lit(BUCKETS_PER_DOUBLING)) + F.lit(1)
    return (
        F.when(lateness.isNull() | (lateness < 0), F.lit(None))
        .when(lateness == 0, F.lit(0))
        .otherwise(F.least(per_doubling, F.lit(NUM_BUCKETS - 1)))
        .cast("int")
    )


def mark_event_time(df: "DataFrame", column: str, delay_ms: int) -> "DataFrame":
    """Give ``column`` the event-time marker metadata and take it away from every other column
    (only one column of a relation carries it, as after Spark's ``withWatermark``)."""
    for f in df.schema.fields:
        md = dict(f.metadata or {})
        if f.name != column and WATERMARK_DELAY_KEY in md:
            md.pop(WATERMARK_DELAY_KEY)
            df = df.withMetadata(f.name, md)
    md = dict(df.schema[column].metadata or {})
    md[WATERMARK_DELAY_KEY] = int(delay_ms)
    return df.withMetadata(column, md)


@dataclass(frozen=True)
class EventTimeWatermarkExec(PhysicalOperator):
    child: PhysicalOperator | None = None
    column: str = ""
    delay_ms: int = 0
    delay_text: str = ""
    node_id: str = ""
    column_type: str = ""
    #: explain only: the column as its input shows it, with its attribute id (``timestamp#0``)
    column_text: str = ""
    #: measure the lateness of the rows (``spark.statestream.lateness.enabled``)
    measure_lateness: bool = False
    #: per batch: the input's reference maximum event time (ms) its rows' lateness is measured
    #: from (``operators.lateness``), None while no row can be late
    lateness_reference_ms: int | None = None

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        assert self.child is not None
        df = mark_event_time(self.child.execute(ctx), self.column, self.delay_ms)
        obs = Observation(f"__statestream_event_time_{self.node_id.replace('-', '_')}_{ctx.batch_id}")
        ms = F.coalesce(F.unix_millis(F.col(self.column)), F.lit(0))
        parts = []
        for name, shift, mask in SUM_PARTS:
            part = F.shiftright(ms, shift) if shift else ms
            parts.append(F.sum(part.bitwiseAND(F.lit(mask)) if mask is not None else part).alias(name))
        if self.measure_lateness:
            # the reference is a column of its own, so that a reused batch plan can swap its
            # value (``lateness_reference_column``); it is dropped again after the observation
            ref = lateness_reference_column(self.node_id)
            df = df.withColumn(ref, F.lit(self.lateness_reference_ms).cast("long"))
            lateness = F.col(ref) - F.unix_millis(F.col(self.column))
            # every bucket of a batch gets a bin of its own: the histogram is exact
            parts += [
                F.histogram_numeric(lateness_bucket(lateness), F.lit(NUM_BUCKETS)).alias(LATENESS_FIELD),
                F.count_if(lateness >= F.lit(int(self.delay_ms))).alias(BEYOND_DELAY_FIELD),
            ]
        df = df.observe(
            obs,
            F.min(ms).alias("min"),
            F.max(ms).alias("max"),
            *parts,
            F.count(F.lit(1)).alias("count"),
        )
        if self.measure_lateness:
            df = df.drop(lateness_reference_column(self.node_id))
        ctx.observations[self.node_id] = obs
        return df

    def simple_string(self) -> str:
        column = self.column_text or self.column
        typed = f"{column}: {self.column_type}" if self.column_type else column
        return f"EventTimeWatermark {self.node_id}, {typed}, {self.delay_text}"


def sources_counted_by_watermark(plan: PhysicalOperator, scans: Mapping[int, int]) -> dict[int, str]:
    """``{source index: watermark node id}`` for each source scanned once (``scans``: the scans
    of each source in ``plan``) whose rows go straight into an ``EventTimeWatermarkExec``: that
    node's observation counts every row of the source, so the batch's input rows are read from
    it and the source needs no count of its own (an observation is evaluated row by row: beside
    the watermark's, a count cost about 40 ms more a million rows on W1's files)."""
    out: dict[int, str] = {}
    for node in plan.walk():
        child = getattr(node, "child", None)
        if isinstance(node, EventTimeWatermarkExec) and isinstance(child, StreamingRelationExec):
            if scans.get(child.source_index) == 1:
                out[child.source_index] = node.node_id
    return out


def observed_values(obs, timeout_s: float = 5.0) -> dict | None:
    """The values of a finished ``Observation``, or ``None`` when it never completed (no job ran
    over its plan); ``Observation.get`` alone would block forever in that case. Values already
    read (a dict, or None: from a reused batch plan's executed plan) are returned as they are."""
    import time

    if obs is None or isinstance(obs, dict):
        return obs

    deadline = time.monotonic() + timeout_s
    future = obs._jo.future()  # noqa: SLF001 - the only non-blocking view of an Observation
    # the listener bus completes it a few milliseconds after the job: poll often at first
    wait = 0.001
    while not future.isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(wait)
        wait = min(wait * 2, 0.01)
    return obs.get


def lateness_records(plan: PhysicalOperator, observations: Mapping[str, object]) -> dict[str, dict]:
    """Each lateness-measuring watermark node's record of the batch for the progress history:
    its column, delay and reference, its rows, the rows at least the delay late, and their
    histogram (``LatenessHistogram.to_json``). Keyed by a name that stays across restarts (node
    ids do not): the event-time column, with `` (2)``, `` (3)``... for the second and later
    nodes of the same column in plan order. A node whose observation did not run (no job over
    its rows) is left out."""
    out: dict[str, dict] = {}
    seen: dict[str, int] = {}
    for node in plan.walk():
        if not isinstance(node, EventTimeWatermarkExec) or not node.measure_lateness:
            continue
        seen[node.column] = seen.get(node.column, 0) + 1
        name = node.column if seen[node.column] == 1 else f"{node.column} ({seen[node.column]})"
        values = observed_values(observations.get(node.node_id))
        if values is None:
            continue
        count = int(values.get("count") or 0)
        histogram = LatenessHistogram.from_observation(count, values.get(LATENESS_FIELD))
        out[name] = {
            "column": node.column,
            "delayMs": int(node.delay_ms),
            "referenceMs": node.lateness_reference_ms,
            "rows": count,
            "beyondDelay": int(values.get(BEYOND_DELAY_FIELD) or 0),
            **histogram.to_json(),
        }
    return out


def stats_from_observation(obs) -> tuple[int, int, float, int] | None:
    """(min, max, avg, count) in ms from a finished observation, or ``None`` when no row passed
    (or the observation never ran because the batch produced no job)."""
    values = observed_values(obs)
    if values is None:
        return None
    count = int(values.get("count") or 0)
    if count == 0:
        return None
    total = event_time_sum(values)
    avg = total / count if total is not None else 0.0
    return int(values["min"]), int(values["max"]), avg, count
