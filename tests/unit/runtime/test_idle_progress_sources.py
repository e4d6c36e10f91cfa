"""An idle trigger's source progress (no Spark): as in Spark's ``finishNoExecutionTrigger``,
a source that reports the latest offset it fetched and metrics (Kafka's offsets behind the
latest) reports them on an idle trigger too, measured at the committed end; other sources
report no latest offset and no metrics."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from statestream.runtime.progress_tracker import ProgressTracker
from statestream.sources.base import Source


class _Behind:
    """A source whose latest fetched offset is 7 while the committed end is given."""

    def description(self) -> str:
        return "Behind"

    def reported_latest_offset(self) -> Any:
        return '{"t":{"0":7}}'

    def metrics(self, end: Any) -> dict[str, str]:
        return {"maxOffsetsBehindLatest": str(7 - int(end.split(":")[-1].rstrip("}"))), "avgOffsetsBehindLatest": "x"}


class _Plain:
    """A source with the defaults of ``Source`` (neither a latest offset nor metrics)."""

    metrics = Source.metrics
    reported_latest_offset = Source.reported_latest_offset
    admission_controlled = Source.admission_controlled

    def description(self) -> str:
        return "Plain"


def _tracker(sources: list[Any]) -> ProgressTracker:
    posted: list = []
    ex = SimpleNamespace(
        query_id="q", run_id="r", query_name=None, plan=None, sources=sources, num_partitions=1,
        has_watermark=False, sink=SimpleNamespace(description=lambda: "Sink"),
        listeners=SimpleNamespace(post_idle=lambda *a: posted.append(a)),
    )
    t = ProgressTracker(ex, no_data_interval_ms=0)
    t.start_trigger()
    return t


def test_an_idle_trigger_reports_the_fetched_latest_offset_and_the_metrics_at_the_committed_end() -> None:
    t = _tracker([_Behind(), _Plain()])
    t.idle(3, ['{"t":{"0":5}}', "12"])
    behind, plain = t.last()["sources"]
    assert behind["startOffset"] == behind["endOffset"] == '{"t":{"0":5}}'
    assert behind["latestOffset"] == '{"t":{"0":7}}'
    assert list(behind["metrics"].items()) == [("avgOffsetsBehindLatest", "x"), ("maxOffsetsBehindLatest", "2")]
    assert plain["latestOffset"] is None and "metrics" not in plain
    assert plain["startOffset"] == plain["endOffset"] == "12"


class _Controlled(_Plain):
    """An admission-controlled source (a file source) that reports no latest offset."""

    admission_controlled = True


class _ControlledBehind(_Behind):
    admission_controlled = True


def test_a_batch_shows_the_end_offset_only_for_sources_without_admission_control() -> None:
    """A batch's ``latestOffset``: Spark 4.1 takes ``reportLatestOffset()`` from every
    admission-controlled source (null when it reports none: the file source, rate-micro-batch)
    and the batch's end offset from the others (rate, socket)."""
    t = _tracker([_Plain(), _Controlled(), _ControlledBehind()])
    t.ex.has_watermark = False
    t.ex.sink.num_output_rows = lambda: -1
    t.ex.listeners.post_progress = lambda prog: None
    ends = ["12", '{"logOffset":0}', '{"t":{"0":5}}']
    record = SimpleNamespace(batch_id=0, start=[None, None, None], end=ends, watermark_ms=0)
    t._pending = {"record": record, "ops": [], "stats": {}, "num_input": [1, 2, 3]}
    t.finish_batch(record)
    plain, controlled, behind = t.last()["sources"]
    assert plain["latestOffset"] == "12"
    assert controlled["latestOffset"] is None
    assert behind["latestOffset"] == '{"t":{"0":7}}'
