"""``explain()`` of unstarted deduplication queries, compared with Spark's (same normalisation as
``test_explain.py``: attribute ids, event-time markers, plan ids and run ids removed)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from statestream import StreamingSession
from tests.spark.test_explain import _explain_text, _normalise, _rate

CASES: dict[str, Callable[[Any], Any]] = {
    "drop_duplicates_all_columns": lambda r: _rate(r).dropDuplicates(),
    "event_time_key_with_watermark": lambda r: (
        _rate(r).withWatermark("timestamp", "10 seconds").dropDuplicates(["value", "timestamp"])
    ),
    "within_watermark": lambda r: _rate(r).withWatermark("timestamp", "10 seconds").dropDuplicatesWithinWatermark(["value"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dedup_explain_matches_spark(spark, case):
    build = CASES[case]
    theirs = _normalise(_explain_text(build(spark.readStream)))
    ours = _normalise(_explain_text(build(StreamingSession(spark).readStream)))
    assert ours == theirs, "\n".join(["statestream:", *ours, "Spark:", *theirs])
