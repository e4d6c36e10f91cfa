"""Event-time statistics, the global watermark and the rules that derive per-operator watermarks.

Spark: ``EventTimeStats`` (``EventTimeWatermarkExec.scala``), ``WatermarkTracker`` and
``MultipleWatermarkPolicy`` (``WatermarkTracker.scala``), and the two watermarks a stateful
operator gets from ``WatermarkPropagator`` (spark-semantics §3).

Everything here is plain Python over integers in milliseconds (event times are microseconds only
in :func:`is_older_than`), so the rules can be tested without Spark and reused by the driver loop,
the planner and the progress reporter alike.
"""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Hashable, Iterable, Mapping, TypeVar, Union

from statestream.errors import multiple_watermark_policy_error

__all__ = [
    "EventTimeStats",
    "MultipleWatermarkPolicy",
    "MULTIPLE_WATERMARK_POLICY_CONF",
    "parse_policy",
    "WatermarkTracker",
    "late_event_and_eviction_watermarks",
    "is_older_than",
    "micros_to_millis",
]

logger = logging.getLogger(__name__)

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

MULTIPLE_WATERMARK_POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"


def micros_to_millis(t_us: int) -> int:
    """Event time µs → ms, rounding towards negative infinity (as Spark's conversion does, so
    ``-1 µs`` is ``-1 ms``, not 0)."""
    return t_us // 1000


@dataclass
class EventTimeStats:
    """Max, min, mean and count of the event times (ms) one watermark node saw in one batch.

    Mergeable, so that per-partition figures can be combined in any order. The mean is kept as a
    running mean rather than a sum so it cannot overflow; :meth:`add` and :meth:`merge` use the
    same update formulas as Spark, so reported ``avg`` values agree with Spark's for the same
    sequence of additions.

    The empty value (:meth:`zero`) has ``max = Long.MinValue`` and ``min = Long.MaxValue`` so that
    the first :meth:`add` sets both.
    """

    max: int = LONG_MIN
    min: int = LONG_MAX
    avg: float = 0.0
    count: int = 0

    @classmethod
    def zero(cls) -> "EventTimeStats":
        """The empty statistics (no row seen)."""
        return cls(LONG_MIN, LONG_MAX, 0.0, 0)

    @property
    def is_empty(self) -> bool:
        return self.count == 0

    def add(self, t_ms: int) -> "EventTimeStats":
        """Account for one event time (ms). A null event time is added by callers as 0, which is
        what Spark does (the raw value of a null field). Returns ``self``."""
        self.max = max(self.max, t_ms)
        self.min = min(self.min, t_ms)
        self.count += 1
        self.avg += (t_ms - self.avg) / self.count
        return self

    def merge(self, other: "EventTimeStats") -> "EventTimeStats":
        """Fold ``other`` into ``self`` (weighted mean; an empty side is ignored). Returns
        ``self``."""
        if other.count == 0:
            return self
        if self.count == 0:
            self.max, self.min, self.avg, self.count = other.max, other.min, other.avg, other.count
            return self
        self.max = max(self.max, other.max)
        self.min = min(self.min, other.min)
        self.count += other.count
        self.avg += (other.avg - self.avg) * other.count / self.count
        return self

    @classmethod
    def from_aggregates(
        cls,
        min_ms: int | None,
        max_ms: int | None,
        sum_ms_or_avg: int | float | Decimal | None,
        count: int | None,
        *,
        is_avg: bool = False,
    ) -> "EventTimeStats":
        """Build statistics from figures a Spark aggregation computed (e.g. an ``observe()`` of
        ``min``, ``max``, ``sum``, ``count`` over the event time in ms).

        Parameters
        ----------
        sum_ms_or_avg:
            The exact sum of the event times (default), or their mean when ``is_avg=True``. A
            sum is divided exactly (``Decimal``), so large sums do not lose precision before the
            division.
        count:
            Number of rows; ``0``/``None`` gives :meth:`zero` whatever the other arguments.
        """
        if not count:
            return cls.zero()
        if min_ms is None or max_ms is None:
            raise ValueError("min and max are required when count > 0")
        if sum_ms_or_avg is None:
            avg = 0.0
        elif is_avg:
            avg = float(sum_ms_or_avg)
        else:
            avg = float(Decimal(sum_ms_or_avg) / Decimal(count))
        return cls(int(max_ms), int(min_ms), avg, int(count))

    def avg_ms(self) -> int:
        """The mean truncated to whole ms, as progress reports show it (Spark's ``avg.toLong``)."""
        return int(math.trunc(self.avg))


class MultipleWatermarkPolicy(enum.Enum):
    """How the global watermark is chosen from several watermark nodes
    (``spark.sql.streaming.multipleWatermarkPolicy``).

    ``MIN`` (default) waits for the slowest input, so no input's data is considered late just
    because another input is ahead; ``MAX`` follows the fastest and drops the others' late data.
    """

    MIN = "min"
    MAX = "max"

    @classmethod
    def default(cls) -> "MultipleWatermarkPolicy":
        return cls.MIN

    @classmethod
    def parse(cls, value: str) -> "MultipleWatermarkPolicy":
        """Parse a conf value, case-insensitively.

        Raises
        ------
        IllegalArgumentError
            ``[INVALID_CONF_VALUE.REQUIREMENT]`` with Spark's text for any other value.
        """
        lowered = str(value).lower()
        for policy in cls:
            if policy.value == lowered:
                return policy
        raise multiple_watermark_policy_error(MULTIPLE_WATERMARK_POLICY_CONF, lowered)

    def choose(self, node_watermarks: Iterable[int]) -> int:
        """The global candidate among per-node watermarks (at least one value required)."""
        values = list(node_watermarks)
        if not values:
            raise ValueError("no watermark node to choose from")
        return min(values) if self is MultipleWatermarkPolicy.MIN else max(values)


def parse_policy(value: str | None) -> MultipleWatermarkPolicy:
    """:meth:`MultipleWatermarkPolicy.parse`, with ``None`` meaning the default (``min``)."""
    if value is None:
        return MultipleWatermarkPolicy.default()
    return MultipleWatermarkPolicy.parse(value)


StatsLike = Union[EventTimeStats, "tuple[int, int, float, int]"]
#: what names a watermark node (the plan's node ids)
_Node = TypeVar("_Node", bound=Hashable)


def _as_stats(value: StatsLike) -> EventTimeStats:
    if isinstance(value, EventTimeStats):
        return value
    mn, mx, avg, count = value
    return EventTimeStats.from_aggregates(mn, mx, avg, count, is_avg=True)


class WatermarkTracker:
    """The query's global event-time watermark G and the per-node watermarks it is chosen from.

    Rules (spark-semantics §3.3), applied at the end of every executed batch:

    * a node that saw rows proposes ``max event time - delay``; its own watermark only moves up;
    * a node that has never seen a row counts as 0 (so with the ``min`` policy an idle input
      holds G at 0);
    * G becomes the policy's choice only if that is larger than G: G never decreases, and since
      it starts at 0 it is never negative.

    On restart only G is restored (:meth:`set_watermark`); per-node values start empty again, as
    in Spark.

    Idle inputs (opt-in, ``idle_timeout_ms``; Flink's ``withIdleness``, which Spark lacks): a
    node that has seen no row for that long, by the batches' clock (``now_ms`` of the updates;
    a node never seen counts from the first update), takes no part in the choice, so an input
    that went quiet no longer holds G back. G still never decreases; when every node is idle G
    stays. A node that sees rows again takes part again at once.

    Node ids are any hashable values (the logical ``EventTimeWatermark`` node id).
    """

    def __init__(self, policy: MultipleWatermarkPolicy | str = MultipleWatermarkPolicy.MIN, idle_timeout_ms: int | None = None) -> None:
        self.policy = policy if isinstance(policy, MultipleWatermarkPolicy) else MultipleWatermarkPolicy.parse(policy)
        self._node_watermarks: dict[Hashable, int] = {}
        self._global_ms = 0
        self.idle_timeout_ms = idle_timeout_ms
        #: node -> the batch time it last saw a row (or was first seen without one)
        self._last_data_ms: dict[Hashable, int] = {}
        #: node -> the largest event time (ms) it has seen in this run
        self._node_max_ms: dict[Hashable, int] = {}

    def idle_nodes(self, now_ms: int) -> set[Hashable]:
        """The nodes idle at ``now_ms`` (none without an idle timeout)."""
        if self.idle_timeout_ms is None:
            return set()
        return {n for n, t in self._last_data_ms.items() if now_ms - t >= self.idle_timeout_ms}

    @property
    def current_watermark(self) -> int:
        """G in ms."""
        return self._global_ms

    @property
    def node_watermarks(self) -> dict[Hashable, int]:
        """A copy of the per-node watermarks (ms); nodes never seen with data are 0 once they
        took part in an update."""
        return dict(self._node_watermarks)

    @property
    def node_max_event_times(self) -> dict[Hashable, int]:
        """A copy of the largest event time (ms) each node has seen in this run (nodes without
        a row yet are missing; the lateness measure's references)."""
        return dict(self._node_max_ms)

    def set_watermark(self, watermark_ms: int) -> None:
        """Set G directly (restart: the value restored from the offset and commit logs)."""
        self._global_ms = int(watermark_ms)

    def update_watermark(
        self,
        stats_by_node: Mapping[_Node, StatsLike],
        delays_by_node: Mapping[_Node, int],
        now_ms: int | None = None,
    ) -> bool:
        """Fold one batch's event-time statistics into the watermark.

        Parameters
        ----------
        stats_by_node:
            Statistics per watermark node for the batch just executed (nodes without rows may be
            missing or empty). Values are :class:`EventTimeStats` or ``(min, max, avg, count)``
            tuples.
        delays_by_node:
            The delay (ms) of every watermark node of the executed plan. These keys define the
            set of nodes that take part; a node with statistics must have a delay.
        now_ms:
            The batch's time, for idle inputs (ignored without an idle timeout).

        Returns
        -------
        bool
            ``True`` if G increased.
        """
        nodes = list(delays_by_node)
        for node in stats_by_node:
            if node not in delays_by_node:
                raise KeyError(f"watermark node {node!r} has statistics but no delay")
        if not nodes:
            return False
        for node in nodes:
            raw = stats_by_node.get(node)
            if raw is None:
                continue
            stats = _as_stats(raw)
            if stats.count <= 0:
                continue
            self._node_max_ms[node] = max(self._node_max_ms.get(node, stats.max), stats.max)
            candidate = stats.max - int(delays_by_node[node])
            previous = self._node_watermarks.get(node)
            if previous is None or candidate > previous:
                self._node_watermarks[node] = candidate
            if now_ms is not None:
                self._last_data_ms[node] = now_ms
        for node in nodes:
            self._node_watermarks.setdefault(node, 0)
            if now_ms is not None:
                self._last_data_ms.setdefault(node, now_ms)
        values: Iterable[int] = self._node_watermarks.values()
        if self.idle_timeout_ms is not None and now_ms is not None:
            idle = self.idle_nodes(now_ms)
            active = [w for n, w in self._node_watermarks.items() if n not in idle]
            if idle and active:
                logger.info("watermark: inputs %s idle for %d ms or more take no part", sorted(map(str, idle)), self.idle_timeout_ms)
            if not active:
                return False
            values = active
        chosen = self.policy.choose(values)
        if chosen > self._global_ms:
            logger.info("event-time watermark advanced from %d to %d ms", self._global_ms, chosen)
            self._global_ms = chosen
            return True
        logger.debug("event-time watermark stays at %d ms (candidate %d)", self._global_ms, chosen)
        return False

    #: Alias used by the driver loop.
    update_watermark_from = update_watermark


def late_event_and_eviction_watermarks(
    prev_wm: int | None, cur_wm: int, allow_multiple: bool = True
) -> tuple[int, int]:
    """The watermarks a stateful operator of batch N uses: ``(W_late, W_evict)``.

    With ``spark.sql.streaming.statefulOperator.allowMultiple=true`` (default) rows are filtered
    as late against the previous batch's watermark ``wm(N-1)`` and state is evicted with
    ``wm(N)``, so rows that upstream operators emit in the same batch are not mistaken for late
    ones. In the legacy mode both are ``wm(N)``. For batch 0 pass ``prev_wm=None`` (or 0): W_late
    is 0.

    Parameters
    ----------
    prev_wm:
        ``wm(N-1)``, the watermark recorded for the previous batch (``None`` for batch 0).
    cur_wm:
        ``wm(N)``.
    """
    late = (prev_wm or 0) if allow_multiple else cur_wm
    return late, cur_wm


def is_older_than(value_us: int | None, watermark_ms: int | None) -> bool:
    """Whether an event time (µs) counts as older than a watermark (ms).

    Equality counts as old (``value <= watermark``), and the comparison is done in µs so no
    precision is lost. A null value or a missing watermark is never old."""
    if value_us is None or watermark_ms is None:
        return False
    return value_us <= watermark_ms * 1000
