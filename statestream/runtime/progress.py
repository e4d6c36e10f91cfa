"""Progress records of a streaming query, rendered exactly as Spark 4.1 renders them.

Spark: ``StateOperatorProgress``, ``SourceProgress``, ``SinkProgress`` and
``StreamingQueryProgress`` (``sql/api/.../streaming/progress.scala``), whose values the
``ProgressReporter`` fills in.

Users and tests compare these records with Spark's, field by field and as text, so the rendering
rules are Spark's, not Python's defaults:

* fields in Spark's order (see each class);
* ``durationMs``, ``eventTime``, ``customMetrics``, ``observedMetrics`` and source/sink
  ``metrics`` with sorted keys, and left out entirely when empty;
* rates (``inputRowsPerSecond``, ``processedRowsPerSecond``) rounded half-up to one decimal and
  left out when NaN or infinite;
* :meth:`json` is compact (``{"id":"...","runId":...}``) and :meth:`prettyJson` uses the
  Jackson default pretty printer's layout (``"key" : value``, 2-space indent, arrays as
  ``[ {`` ... ``}, {`` ... ``} ]``, empty ones as ``[ ]`` / ``{ }``).

:meth:`to_dict` gives the same content as plain Python values (rates as floats), which is what
PySpark's progress objects are built from; :func:`pyspark_json` renders it like PySpark does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

__all__ = [
    "StateOperatorProgress",
    "SourceProgress",
    "SinkProgress",
    "StreamingQueryProgress",
    "format_timestamp_ms",
    "compute_rates",
    "event_time_map",
    "round_rate",
    "offset_from_json_text",
    "render_json",
    "pyspark_json",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def format_timestamp_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds: ``1970-01-01T00:00:11.000Z``.

    This is the format of ``timestamp`` and of the ``eventTime`` values."""
    dt = _EPOCH + timedelta(milliseconds=int(ms))
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}."
        f"{dt.microsecond // 1000:03d}Z"
    )


def round_rate(value: float) -> Decimal | None:
    """A rate as Spark renders it: rounded half-up to one decimal, ``None`` (= left out) for
    NaN and infinities. The double is first turned into its shortest decimal text, as Scala's
    ``BigDecimal(double)`` does, so ``0.05`` rounds to ``0.1``."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    rounded = Decimal(repr(float(value))).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def _safe_div(numerator: float, denominator: float) -> float:
    """IEEE division (``x/0`` is ±inf or NaN), as the JVM computes the rates."""
    if denominator == 0:
        if numerator == 0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


def compute_rates(
    num_input_rows: int,
    trigger_start_ms: int,
    trigger_end_ms: int,
    previous_trigger_start_ms: int | None,
) -> tuple[float, float]:
    """``(inputRowsPerSecond, processedRowsPerSecond)`` of one source for one trigger.

    * input rate = rows / seconds since the previous trigger's start. The first trigger of a run
      has no previous start: the interval is infinite and the rate 0.0. Two triggers starting in
      the same millisecond give an infinite (or NaN) rate, which the JSON leaves out.
    * processing rate = rows / trigger duration in seconds, the duration being at least 1 ms.

    The query-level rates are the sums of the sources' rates (see
    :class:`StreamingQueryProgress`).
    """
    if previous_trigger_start_ms is None or previous_trigger_start_ms < 0:
        input_rate = 0.0  # rows / infinite interval
    else:
        input_rate = _safe_div(float(num_input_rows), (trigger_start_ms - previous_trigger_start_ms) / 1000.0)
    processing_sec = max(1, trigger_end_ms - trigger_start_ms) / 1000.0
    return input_rate, float(num_input_rows) / processing_sec


def event_time_map(watermark_ms: int | None, stats: Any | None = None) -> dict[str, str]:
    """The ``eventTime`` map of a progress event (spark-semantics §3.9).

    Parameters
    ----------
    watermark_ms:
        ``wm(N)`` of the batch, or ``None`` when the query has no watermark (the map is then
        empty and the field left out).
    stats:
        The event-time statistics of the first watermark node that saw rows in this batch (an
        object with ``count``, ``min``, ``max`` and ``avg`` in ms, e.g.
        :class:`~statestream.runtime.watermark.EventTimeStats`), or ``None``.
    """
    if watermark_ms is None:
        return {}
    result: dict[str, str] = {}
    if stats is not None and getattr(stats, "count", 0) > 0:
        result["avg"] = format_timestamp_ms(int(math.trunc(stats.avg)))
        result["max"] = format_timestamp_ms(stats.max)
        result["min"] = format_timestamp_ms(stats.min)
    result["watermark"] = format_timestamp_ms(watermark_ms)
    return result


def offset_from_json_text(text: str | None) -> Any:
    """An offset given as JSON text, as progress shows it: the parsed value, or the text itself
    when it is not JSON (Spark's ``tryParse``); ``None`` stays ``None``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _sorted_map(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not values:
        return None
    return {k: values[k] for k in sorted(values)}


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    """Add ``key`` unless ``value`` means "left out" (``None`` from the omission rules)."""
    if value is not None:
        target[key] = value


class _Record:
    """Shared rendering methods."""

    def _json_value(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The JSON content as plain Python values (rates as floats), fields in Spark's order."""
        return _plain(self._json_value())

    def json(self) -> str:
        """Compact JSON, as Spark's ``json``."""
        return render_json(self._json_value())

    def prettyJson(self) -> str:  # noqa: N802 - Spark's name
        """Indented JSON, as Spark's ``prettyJson``."""
        return render_json(self._json_value(), pretty=True)

    def __str__(self) -> str:
        return self.prettyJson()


@dataclass
class StateOperatorProgress(_Record):
    """Figures of one state-writing operator for one trigger.

    JSON fields, in order: ``operatorName``, ``numRowsTotal``, ``numRowsUpdated``,
    ``allUpdatesTimeMs``, ``numRowsRemoved``, ``allRemovalsTimeMs``, ``commitTimeMs``,
    ``memoryUsedBytes``, ``numRowsDroppedByWatermark``, ``numShufflePartitions``,
    ``numStateStoreInstances``, ``customMetrics`` (sorted, left out when empty).
    """

    operator_name: str
    num_rows_total: int = 0
    num_rows_updated: int = 0
    all_updates_time_ms: int = 0
    num_rows_removed: int = 0
    all_removals_time_ms: int = 0
    commit_time_ms: int = 0
    memory_used_bytes: int = 0
    num_rows_dropped_by_watermark: int = 0
    num_shuffle_partitions: int = 0
    num_state_store_instances: int = 0
    custom_metrics: dict[str, int] = field(default_factory=dict)

    def idle_copy(self) -> "StateOperatorProgress":
        """The values an idle trigger repeats: everything kept except ``numRowsUpdated`` and
        ``numRowsDroppedByWatermark``, which are 0 (nothing ran)."""
        return replace(self, num_rows_updated=0, num_rows_dropped_by_watermark=0, custom_metrics=dict(self.custom_metrics))

    def _json_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operatorName": self.operator_name,
            "numRowsTotal": int(self.num_rows_total),
            "numRowsUpdated": int(self.num_rows_updated),
            "allUpdatesTimeMs": int(self.all_updates_time_ms),
            "numRowsRemoved": int(self.num_rows_removed),
            "allRemovalsTimeMs": int(self.all_removals_time_ms),
            "commitTimeMs": int(self.commit_time_ms),
            "memoryUsedBytes": int(self.memory_used_bytes),
            "numRowsDroppedByWatermark": int(self.num_rows_dropped_by_watermark),
            "numShufflePartitions": int(self.num_shuffle_partitions),
            "numStateStoreInstances": int(self.num_state_store_instances),
        }
        metrics = _sorted_map(self.custom_metrics)
        _put(out, "customMetrics", {k: int(v) for k, v in metrics.items()} if metrics else None)
        return out


@dataclass
class SourceProgress(_Record):
    """Figures of one source for one trigger.

    Offsets are the source's offset values (JSON-able; ``None`` renders as ``null``); use
    :func:`offset_from_json_text` for offsets held as JSON text. JSON fields, in order:
    ``description``, ``startOffset``, ``endOffset``, ``latestOffset``, ``numInputRows``,
    ``inputRowsPerSecond``, ``processedRowsPerSecond`` (rounded, left out when NaN/infinite),
    ``metrics`` (sorted, left out when empty).
    """

    description: str
    start_offset: Any = None
    end_offset: Any = None
    latest_offset: Any = None
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    metrics: dict[str, str] = field(default_factory=dict)

    def _json_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "description": self.description,
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "latestOffset": self.latest_offset,
            "numInputRows": int(self.num_input_rows),
        }
        _put(out, "inputRowsPerSecond", round_rate(self.input_rows_per_second))
        _put(out, "processedRowsPerSecond", round_rate(self.processed_rows_per_second))
        _put(out, "metrics", _sorted_map(self.metrics))
        return out


@dataclass
class SinkProgress(_Record):
    """Figures of the sink for one trigger: ``description``, ``numOutputRows`` (-1 when the sink
    cannot tell, as for ``foreachBatch``), ``metrics`` (sorted, left out when empty)."""

    DEFAULT_NUM_OUTPUT_ROWS = -1

    description: str
    num_output_rows: int = DEFAULT_NUM_OUTPUT_ROWS
    metrics: dict[str, str] = field(default_factory=dict)

    def _json_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {"description": self.description, "numOutputRows": int(self.num_output_rows)}
        _put(out, "metrics", _sorted_map(self.metrics))
        return out


@dataclass
class StreamingQueryProgress(_Record):
    """What one trigger of a streaming query did.

    ``numInputRows``, ``inputRowsPerSecond`` and ``processedRowsPerSecond`` are not stored: they
    are the sums over :attr:`sources`, as in Spark, so the query-level and per-source figures
    always agree.

    JSON fields, in order: ``id``, ``runId``, ``name`` (``null`` when unnamed), ``timestamp``,
    ``batchId``, ``batchDuration``, ``numInputRows``, ``inputRowsPerSecond``,
    ``processedRowsPerSecond``, ``durationMs``, ``eventTime``, ``stateOperators``, ``sources``,
    ``sink``, ``observedMetrics`` (only when ``Dataset.observe`` results exist; values are the
    observed rows as JSON objects).
    """

    id: str
    run_id: str
    name: str | None
    timestamp: str
    batch_id: int
    batch_duration: int
    duration_ms: dict[str, int] = field(default_factory=dict)
    event_time: dict[str, str] = field(default_factory=dict)
    state_operators: list[StateOperatorProgress] = field(default_factory=list)
    sources: list[SourceProgress] = field(default_factory=list)
    sink: SinkProgress = field(default_factory=lambda: SinkProgress(""))
    observed_metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def num_input_rows(self) -> int:
        return sum(int(s.num_input_rows) for s in self.sources)

    @property
    def input_rows_per_second(self) -> float:
        return float(sum(s.input_rows_per_second for s in self.sources))

    @property
    def processed_rows_per_second(self) -> float:
        return float(sum(s.processed_rows_per_second for s in self.sources))

    def _json_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": str(self.id),
            "runId": str(self.run_id),
            "name": self.name,
            "timestamp": self.timestamp,
            "batchId": int(self.batch_id),
            "batchDuration": int(self.batch_duration),
            "numInputRows": self.num_input_rows,
        }
        _put(out, "inputRowsPerSecond", round_rate(self.input_rows_per_second))
        _put(out, "processedRowsPerSecond", round_rate(self.processed_rows_per_second))
        durations = _sorted_map(self.duration_ms)
        _put(out, "durationMs", {k: int(v) for k, v in durations.items()} if durations else None)
        _put(out, "eventTime", _sorted_map(self.event_time))
        out["stateOperators"] = [op._json_value() for op in self.state_operators]  # noqa: SLF001 - the progress classes render each other
        out["sources"] = [s._json_value() for s in self.sources]  # noqa: SLF001 - the progress classes render each other
        out["sink"] = self.sink._json_value()  # noqa: SLF001 - the progress classes render each other
        _put(out, "observedMetrics", _sorted_map(self.observed_metrics))
        return out


# -- rendering -----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text: str) -> str:
    """A JSON string as Jackson writes it (control characters as upper-case ``\\u00XX``,
    non-ASCII characters as they are)."""
    parts = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20:
            parts.append(f"\\u{ord(ch):04X}")
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return _string(str(value))
        return json.dumps(value)
    return _string(str(value))


def _render(value: Any, pretty: bool, level: int, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{ }" if pretty else "{}")
            return
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            if pretty:
                out.append("\n" + "  " * (level + 1))
            out.append(_string(str(key)))
            out.append(" : " if pretty else ":")
            _render(item, pretty, level + 1, out)
        if pretty:
            out.append("\n" + "  " * level)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[ ]" if pretty else "[]")
            return
        out.append("[ " if pretty else "[")
        for i, item in enumerate(value):
            if i:
                out.append(", " if pretty else ",")
            # array elements stay on the line of the bracket; objects inside keep the level
            _render(item, pretty, level, out)
        out.append(" ]" if pretty else "]")
    else:
        out.append(_scalar(value))


def render_json(value: Any, pretty: bool = False) -> str:
    """Render JSON as Spark's progress classes do: compact, or in the layout of Jackson's
    default pretty printer. Dict order is kept; ``Decimal`` values are written as they are."""
    out: list[str] = []
    _render(value, pretty, 0, out)
    return "".join(out)


def pyspark_json(record: _Record, pretty: bool = False) -> str:
    """The text PySpark's own progress objects give for ``json`` (``json.dumps`` of the
    content) and ``prettyJson`` (the same with ``indent=4``)."""
    return json.dumps(record.to_dict(), indent=4 if pretty else None)
