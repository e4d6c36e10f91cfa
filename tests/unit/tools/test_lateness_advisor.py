"""The watermark advisor over progress history entries (``tools.lateness_advisor``), without Spark."""

from __future__ import annotations

import pytest

from statestream.operators.lateness import LatenessHistogram, bucket_delay_ms, bucket_of
from statestream.tools.lateness_advisor import advise_from_history, format_delay


def _entry(batch: int, reference: int | None, histogram: LatenessHistogram, beyond: int, **extra) -> dict:
    rec = {"column": "t", "delayMs": 1000, "referenceMs": reference, "rows": histogram.rows, "beyondDelay": beyond, **histogram.to_json()}
    return {"batchId": batch, "lateness": {"w": rec}, **extra}


def test_the_advice_merges_the_batches_and_costs_the_change():
    history = [
        _entry(0, None, LatenessHistogram(ahead=100), 0),
        _entry(1, None, LatenessHistogram(ahead=100), 0),
        _entry(2, 10_000, LatenessHistogram(ahead=90, buckets={bucket_of(3000): 10}), 10),
        _entry(
            3, 20_000, LatenessHistogram(ahead=99, buckets={bucket_of(500): 1}), 0,
            stateOperators=[{"numRowsTotal": 600}],
            eventTime={"max": "2026-01-01T00:00:30.000Z", "watermark": "2026-01-01T00:00:29.000Z"},
        ),
    ]
    [a] = advise_from_history(history, completeness=0.99)
    assert (a.rows, a.kept_rows, a.batches) == (400, 390, 4)
    assert a.advised_delay_ms == bucket_delay_ms(bucket_of(3000)) and a.advised_kept_rows == 400
    assert a.closes_later_ms == a.advised_delay_ms - 1000
    assert a.closes_later_batches == round(a.closes_later_ms / 10_000, 2)  # the front moves 10 s a batch
    assert a.extra_state_rows == round(600 * a.closes_later_ms / 1000)  # 600 rows over a 1 s span
    assert a.to_json()["advisedDelayMs"] == a.advised_delay_ms and a.to_json()["keptShare"] == 390 / 400


def test_no_lateness_gives_no_advice_and_a_bad_share_is_refused():
    assert advise_from_history([{"batchId": 0}]) == []
    with pytest.raises(ValueError, match="completeness"):
        advise_from_history([], completeness=1.5)


def test_delays_read_as_watermark_delays():
    assert [format_delay(x) for x in (0, 999, 1000, 90_000, -2000)] == ["0 milliseconds", "999 milliseconds", "1 seconds", "1.5 minutes", "-2 seconds"]


def test_advise_reads_the_checkpoints_history_from_a_batch_on(tmp_path):
    from statestream.checkpoint.files import CheckpointFileManager
    from statestream.checkpoint.progress_log import ProgressLog
    from statestream.tools.lateness_advisor import advise

    log = ProgressLog(CheckpointFileManager(str(tmp_path)).child("progress"))
    log.add(_entry(0, None, LatenessHistogram(ahead=10), 0))
    log.add(_entry(1, 5000, LatenessHistogram(ahead=0, buckets={bucket_of(60_000): 10}), 10))
    log.add(_entry(2, 9000, LatenessHistogram(ahead=10), 0))
    [everything] = advise(str(tmp_path), completeness=0.9)
    assert everything.rows == 30 and everything.batches == 3 and everything.advised_delay_ms == bucket_delay_ms(bucket_of(60_000))
    [recent] = advise(str(tmp_path), completeness=0.9, since=2)
    assert recent.rows == 10 and recent.batches == 1 and recent.advised_delay_ms == 0
