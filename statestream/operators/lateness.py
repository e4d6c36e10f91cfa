"""How late rows arrive: a per-batch histogram of each watermark input's lateness.

No engine measures this; Spark only counts the rows its stateful operators drop. statestream
measures, for every row that reaches a ``withWatermark`` node, how far its event time is behind
the *reference*: the largest event time that input had seen when the watermark filtering this
batch's late rows was computed (the previous batch's watermark is computed from the batches
before it, so the reference of batch N is the input's maximum event time over batches 0 to
N-2). With a delay ``d`` that input's watermark is ``reference - d``, and a row is late
(``event time <= watermark``) exactly when its lateness, in whole milliseconds, is at least
``d``. So the histogram answers, for any delay, how many rows it would have kept, without
running the query again: that is what ``statestream watermark advise`` reads.

Lateness ``L`` (ms) goes into fixed log-spaced buckets, four to a doubling: bucket 0 holds
``L = 0``, bucket ``b >= 1`` the ``L`` with ``b - 1 <= 4 * log2(L) < b``. Every row of bucket
``b`` is kept by a delay of :func:`bucket_delay_ms` ``(b)``, at most 19% (``2 ** 0.25``) more
than the least delay that keeps it. Rows ahead of the reference, rows with a null event time and
rows of a batch with no reference yet (the first two batches) count as *ahead*: every delay
keeps them. A batch's histogram has at most :data:`NUM_BUCKETS` buckets, so the history stays
small.

Exact for one watermark input. With several, the query's watermark is chosen among the inputs'
(``multipleWatermarkPolicy``), so an input's own delay is not all that decides its late rows.
After a restart the inputs' maxima are not known again until they have been seen (Spark keeps
only the query's watermark): the reference is then the watermark plus the input's delay.

Everything here is plain Python, testable without Spark; the watermark node's observation
computes the buckets (``EventTimeWatermarkExec``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = [
    "BUCKETS_PER_DOUBLING",
    "LATENESS_CONF",
    "NUM_BUCKETS",
    "LatenessHistogram",
    "bucket_delay_ms",
    "bucket_of",
    "reference_max_ms",
]

#: statestream's conf: measure each watermark input's lateness (default false: it costs the watermark
#: node about 0.2 to 0.4 s per million rows, measured on W1)
LATENESS_CONF = "spark.statestream.lateness.enabled"

BUCKETS_PER_DOUBLING = 4
#: lateness up to 2 ** 42 ms (about 139 years) has a bucket of its own; more goes in the last
NUM_BUCKETS = BUCKETS_PER_DOUBLING * 42 + 1


def bucket_of(lateness_ms: int) -> int:
    """The bucket of a lateness of ``lateness_ms`` (at least 0), as ``lateness_bucket`` of
    ``operators.watermark`` computes it in Spark (the same double arithmetic).

    >>> [bucket_of(x) for x in (0, 1, 2, 3, 1000)]
    [0, 1, 5, 7, 40]
    """
    if lateness_ms < 0:
        raise ValueError(f"lateness must be at least 0 ms, not {lateness_ms}")
    if lateness_ms == 0:
        return 0
    return min(int(math.floor(BUCKETS_PER_DOUBLING * math.log2(lateness_ms))) + 1, NUM_BUCKETS - 1)


def bucket_delay_ms(bucket: int) -> int:
    """The least whole-millisecond delay that keeps every row of ``bucket``: its upper edge.

    >>> [bucket_delay_ms(b) for b in (0, 1, 4, 40)]
    [1, 2, 2, 1024]
    """
    if bucket <= 0:
        return 1
    return int(math.ceil(2 ** (bucket / BUCKETS_PER_DOUBLING)))


def reference_max_ms(snapshot: Mapping[str, int] | None, node_id: str, delay_ms: int, late_watermark_ms: int) -> int | None:
    """The reference of one watermark input for a batch: its maximum event time in ``snapshot``
    (the inputs' maxima when the batch's late-row watermark was computed), else the late-row
    watermark plus the input's delay when there is a watermark (after a restart), else None
    (no row can be late yet).

    >>> reference_max_ms({"a": 5000}, "a", 1000, 4000), reference_max_ms({}, "a", 1000, 4000)
    (5000, 5000)
    >>> reference_max_ms(None, "a", 1000, 0) is None
    True
    """
    if snapshot and node_id in snapshot:
        return int(snapshot[node_id])
    if late_watermark_ms > 0:
        return int(late_watermark_ms) + int(delay_ms)
    return None


@dataclass
class LatenessHistogram:
    """Row counts by lateness bucket, for one input over one batch or more.

    Examples
    --------
    >>> h = LatenessHistogram(ahead=90, buckets={bucket_of(500): 9, bucket_of(60_000): 1})
    >>> h.rows
    100
    >>> h.delay_for(0.99)     # keeps the 99 rows behind by 500 ms or less
    512
    >>> h.kept_by(512), h.kept_by(65_536)
    (99, 100)
    """

    #: rows every delay keeps (ahead of the reference, null event time, no reference yet)
    ahead: int = 0
    #: bucket -> rows
    buckets: dict[int, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """All rows counted."""
        return self.ahead + sum(self.buckets.values())

    def merge(self, other: "LatenessHistogram") -> "LatenessHistogram":
        """Fold ``other`` into this one; returns ``self``."""
        self.ahead += other.ahead
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n
        return self

    def kept_by(self, delay_ms: int) -> int:
        """Rows a delay of ``delay_ms`` surely keeps (a bucket that straddles the delay counts
        as dropped: a lower bound)."""
        return self.ahead + sum(n for b, n in self.buckets.items() if bucket_delay_ms(b) <= delay_ms)

    def delay_for(self, completeness: float) -> int:
        """The least bucket edge (ms) that keeps at least ``completeness`` (0 to 1) of the rows;
        0 when the rows ahead alone are enough."""
        if not 0 < completeness <= 1:
            raise ValueError(f"completeness must be above 0 and at most 1, not {completeness}")
        need = math.ceil(completeness * self.rows - 1e-9)
        kept = self.ahead
        if kept >= need:
            return 0
        for b in sorted(self.buckets):
            kept += self.buckets[b]
            if kept >= need:
                return bucket_delay_ms(b)
        return bucket_delay_ms(max(self.buckets))

    def to_json(self) -> dict[str, Any]:
        """The compact form kept in the progress history."""
        return {"ahead": self.ahead, "buckets": [[b, n] for b, n in sorted(self.buckets.items())]}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "LatenessHistogram":
        """The histogram of :meth:`to_json`'s form."""
        return cls(int(value.get("ahead", 0)), {int(b): int(n) for b, n in value.get("buckets", [])})

    @classmethod
    def from_observation(cls, count: int, histogram: Iterable[Any] | None) -> "LatenessHistogram":
        """From one batch's observation: its row count and Spark's ``histogram_numeric`` of the
        buckets (exact: there are fewer distinct buckets than bins), ``[{"x": b, "y": n}]``."""
        buckets: dict[int, int] = {}
        for entry in histogram or []:
            x, y = (entry["x"], entry["y"]) if isinstance(entry, Mapping) else (entry[0], entry[1])
            buckets[int(round(float(x)))] = buckets.get(int(round(float(x))), 0) + int(round(float(y)))
        return cls(max(int(count) - sum(buckets.values()), 0), buckets)
