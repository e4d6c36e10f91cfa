"""The what-if replay's recorded batches (``runtime.replay``) and its report
(``tools.watermark_replay``), without Spark."""

from __future__ import annotations

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeq, OffsetSeqLog, OffsetSeqMetadata
from statestream.runtime.replay import RecordedBatches
from statestream.tools.watermark_replay import BatchFigures, ReplayReport


def test_recorded_batches_come_from_the_offset_log_data_batches_only(tmp_path):
    log = OffsetSeqLog(CheckpointFileManager(str(tmp_path)).child("offsets"))
    for batch_id, ends, ts in [(0, [{"logOffset": 0}, None], 100), (1, [{"logOffset": 0}, None], 150), (2, [{"logOffset": 1}, 5], 200)]:
        log.add(batch_id, OffsetSeq(ends, OffsetSeqMetadata(0, ts, {})))
    r = RecordedBatches.load(str(tmp_path))
    assert r.next_batch([None, None]) == ([{"logOffset": 0}, None], 100, 0)
    # batch 1 ran for the watermark alone (nothing new): passed over
    assert r.next_batch([{"logOffset": 0}, None]) == ([{"logOffset": 1}, 5], 200, 2)
    assert r.next_batch([{"logOffset": 1}, 5]) is None
    assert r.next_batch([{"logOffset": 1}, 5]) is None  # and stays done


def test_the_report_counts_windows_that_close_later_or_earlier():
    windows = [
        {"key": "a", "recorded": 2, "replayed": 3},
        {"key": "b", "recorded": 2, "replayed": 2},
        {"key": "c", "recorded": 4, "replayed": 3},
        {"key": "d", "recorded": 5, "replayed": None},
        {"key": "e", "recorded": None, "replayed": None},
    ]
    report = ReplayReport("/ck", "5 seconds", [BatchFigures(0, 3, -1, 0, 3)], [BatchFigures(0, 3, 2, 1, 2)], windows=windows)
    assert report.window_shifts() == {"later": 1, "earlier": 1, "same": 2, "one_run_only": 1}
    assert report.totals("recorded")["output_rows"] == -1  # the sink did not say
    assert report.to_json()["replayed"]["totals"] == {"batches": 1, "input_rows": 3, "output_rows": 2, "dropped_rows": 1, "state_rows": 2}
