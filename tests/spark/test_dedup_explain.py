"""``explain()`` of unstarted deduplication queries, compared with Spark's line for line (as in
``test_explain.py``: attribute ids, plan ids and random ids normalised)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from statestream import StreamingSession
from tests.spark.test_explain import _explain_mode_text, _rate, _with_ids_normalised

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
    for mode in ("simple", "extended", "cost", "formatted"):
        theirs = _with_ids_normalised(_explain_mode_text(build(spark.readStream), mode))
        ours = _with_ids_normalised(_explain_mode_text(build(StreamingSession(spark).readStream), mode))
        assert ours == theirs, "\n".join([f"mode {mode}", "statestream:", *ours, "Spark:", *theirs])
