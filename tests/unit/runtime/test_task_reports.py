"""The state tasks' metric reports (no Spark): a retried task reports again, and only its last
report counts, both for the progress's ``stateOperators`` and for the rows a batch emitted."""

from __future__ import annotations

from statestream.operators.context import latest_task_reports
from statestream.runtime.progress_tracker import aggregate_operator_metrics
from statestream.runtime.small_batches import rows_emitted


def _report(op: int, part: int, out: int, total: int, **extra) -> dict:
    return {"operatorId": op, "partition": part, "numOutputRows": out, "numTotalStateRows": total, **extra}


REPORTS = [
    _report(0, 0, 5, 10, customMetrics={"a": 1}),
    _report(0, 1, 7, 20, customMetrics={"a": 2}),
    _report(1, 0, 100, 1),
    _report(0, 0, 6, 11, customMetrics={"a": 3}),  # partition 0 of operator 0, retried
]


def test_the_last_report_of_each_operators_partition_counts() -> None:
    last = latest_task_reports(REPORTS)
    assert sorted(last) == [(0, 0), (0, 1), (1, 0)]
    assert last[(0, 0)]["numOutputRows"] == 6


def test_operator_progress_sums_each_partitions_last_report() -> None:
    entry = aggregate_operator_metrics(0, "stateStoreSave", REPORTS, num_partitions=2)
    assert entry["numRowsTotal"] == 31
    assert entry["_numOutputRows"] == 13
    assert entry["numStateStoreInstances"] == 2
    assert entry["customMetrics"] == {"a": 5}


def test_rows_emitted_sums_every_operators_last_reports() -> None:
    assert rows_emitted(REPORTS) == 6 + 7 + 100
