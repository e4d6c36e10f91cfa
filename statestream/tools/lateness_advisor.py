"""The watermark advisor: which delay each input needs, read from the lateness it recorded.

Every batch's progress history (``<checkpoint>/progress/``) carries, for each watermark input, a
histogram of how late its rows were (``operators.lateness``). Merged over the batches, it tells
for any delay how many rows that delay would have kept: :func:`advise` gives the least delay
that keeps a share of them (``--completeness``), beside the delay in force and what it kept,
with what the change costs: how much later (or earlier) each window closes, and an estimate of
the state rows it adds.

``statestream watermark advise CHECKPOINT`` prints it (``--json`` for scripts).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.progress_log import ProgressLog
from statestream.errors import lateness_not_recorded_error
from statestream.operators.lateness import LatenessHistogram

__all__ = ["InputAdvice", "advise", "advise_from_history", "format_delay"]


@dataclass(frozen=True)
class InputAdvice:
    """The advice for one watermark input.

    Attributes
    ----------
    node_id, column:
        The input's name in the history (its event-time column, numbered when several inputs
        have the same) and its event-time column.
    delay_ms:
        The delay in force (of the last batch read).
    rows:
        The input's rows over the batches read.
    kept_rows:
        The rows the delay in force kept (every row less late than the delay).
    completeness:
        The share of rows asked for (0 to 1).
    advised_delay_ms:
        The least delay (to within 19%: the lateness histogram's bucket edges) that keeps that
        share.
    advised_kept_rows:
        The rows the advised delay keeps.
    closes_later_ms:
        How much later, in event time, each window would close with the advised delay
        (negative: earlier).
    closes_later_batches:
        The same in batches, at the median advance of the input's largest event time per batch
        (None when it did not advance).
    extra_state_rows:
        An estimate of the state rows the advised delay adds (negative: saves), assuming the
        state holds rows in proportion to the event-time span between the largest event time
        and the watermark (None without a figure to go on).
    batches:
        The batches read (with rows of this input).
    """

    node_id: str
    column: str
    delay_ms: int
    rows: int
    kept_rows: int
    completeness: float
    advised_delay_ms: int
    advised_kept_rows: int
    closes_later_ms: int
    closes_later_batches: float | None
    extra_state_rows: int | None
    batches: int

    @property
    def kept_share(self) -> float:
        """The share of rows the delay in force kept (1.0 without rows)."""
        return self.kept_rows / self.rows if self.rows else 1.0

    @property
    def advised_kept_share(self) -> float:
        """The share of rows the advised delay keeps (1.0 without rows)."""
        return self.advised_kept_rows / self.rows if self.rows else 1.0

    def to_json(self) -> dict[str, Any]:
        """The advice as a JSON object (``--json``)."""
        camel = {"".join(w.capitalize() if i else w for i, w in enumerate(k.split("_"))): v for k, v in asdict(self).items()}
        return {**camel, "keptShare": self.kept_share, "advisedKeptShare": self.advised_kept_share}


def format_delay(ms: int) -> str:
    """A delay in the units ``withWatermark`` takes.

    >>> format_delay(1500), format_delay(120_000), format_delay(1024)
    ('1.5 seconds', '2 minutes', '1.024 seconds')
    """
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    for unit, size in (("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000)):
        if ms >= size:
            value = ms / size
            text = f"{value:.3f}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    return f"{sign}{ms} milliseconds"


def _median_advance(maxima: list[int]) -> float | None:
    steps = [b - a for a, b in zip(maxima, maxima[1:]) if b > a]
    return statistics.median(steps) if steps else None


def _state_span(history: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(state rows, event-time span in ms between the largest event time and the watermark) of
    the last batch that reports both."""
    for entry in reversed(history):
        ops = entry.get("stateOperators") or []
        et = entry.get("eventTime") or {}
        if not ops or "max" not in et or "watermark" not in et:
            continue
        try:
            span = _parse_ms(et["max"]) - _parse_ms(et["watermark"])
        except ValueError:
            continue
        if span > 0:
            return sum(int(op.get("numRowsTotal", 0)) for op in ops), span
    return None


def _parse_ms(text: str) -> int:
    """Milliseconds of a progress timestamp (``2026-12-07T05:00:00.000Z``)."""
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000)


def advise_from_history(history: Iterable[dict[str, Any]], completeness: float = 0.999) -> list[InputAdvice]:
    """The advice for each watermark input from progress history entries (oldest first).

    Examples
    --------
    >>> entry = {"batchId": 2, "lateness": {"w0": {"column": "t", "delayMs": 1000,
    ...     "referenceMs": 10_000, "rows": 100, "beyondDelay": 10, "ahead": 80,
    ...     "buckets": [[36, 10], [47, 10]]}}}
    >>> [a] = advise_from_history([entry], completeness=0.95)
    >>> a.kept_rows, a.advised_delay_ms, a.advised_kept_rows
    (90, 3445, 100)
    """
    if not 0 < completeness <= 1:
        raise ValueError(f"completeness must be above 0 and at most 1, not {completeness}")
    entries = list(history)
    merged: dict[str, LatenessHistogram] = {}
    info: dict[str, dict[str, Any]] = {}
    beyond: dict[str, int] = {}
    maxima: dict[str, list[int]] = {}
    batches: dict[str, int] = {}
    for entry in entries:
        for node_id, rec in (entry.get("lateness") or {}).items():
            merged.setdefault(node_id, LatenessHistogram()).merge(LatenessHistogram.from_json(rec))
            info[node_id] = rec
            beyond[node_id] = beyond.get(node_id, 0) + int(rec.get("beyondDelay", 0))
            if rec.get("referenceMs") is not None:
                maxima.setdefault(node_id, []).append(int(rec["referenceMs"]))
            if rec.get("rows"):
                batches[node_id] = batches.get(node_id, 0) + 1
    span = _state_span(entries)
    out = []
    for node_id, histogram in merged.items():
        rec = info[node_id]
        delay = int(rec.get("delayMs", 0))
        advised = histogram.delay_for(completeness)
        later = advised - delay
        advance = _median_advance(maxima.get(node_id, []))
        extra = None
        if span is not None:
            rows, span_ms = span
            extra = int(round(rows * later / span_ms))
        out.append(
            InputAdvice(
                node_id=node_id,
                column=str(rec.get("column", "")),
                delay_ms=delay,
                rows=histogram.rows,
                kept_rows=histogram.rows - beyond[node_id],
                completeness=completeness,
                advised_delay_ms=advised,
                advised_kept_rows=histogram.kept_by(advised),
                closes_later_ms=later,
                closes_later_batches=round(later / advance, 2) if advance else None,
                extra_state_rows=extra,
                batches=batches.get(node_id, 0),
            )
        )
    return out


def advise(checkpoint: str, completeness: float = 0.999, since: int | None = None) -> list[InputAdvice]:
    """The advice for each watermark input of the query at ``checkpoint``, from the batches from
    ``since`` on (all recorded when None).

    Raises
    ------
    CheckpointError
        When no batch read recorded any lateness (the query has no watermark, its progress
        history or lateness measure was off, or it ran before statestream measured lateness).

    Examples
    --------
    >>> import tempfile
    >>> advise(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    statestream.errors.checkpoint.CheckpointError: no lateness recorded in ...
    """
    history = ProgressLog(CheckpointFileManager(checkpoint).child("progress")).read(after=None if since is None else since - 1)
    advice = advise_from_history(history, completeness)
    if not advice:
        raise lateness_not_recorded_error(checkpoint)
    return advice
