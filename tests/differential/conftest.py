"""Fixtures for the differential tier: Spark's engine (``spark``) versus statestream (``ours``).

``ours`` is a *factory*, not the engine: ``assert_equivalent`` calls it only after Spark's run
finished, so each test exercises (and pins) the oracle side even while statestream cannot be
imported, and then fails on the import instead of erroring in set-up.

Setting ``STATESTREAM_DIFF_AGAINST_SPARK=1`` makes ``ours`` return the SparkSession itself. That
checks the harness and every test's query and reference rows with Spark on both sides; it says
nothing about statestream, and the run header says so loudly.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

AGAINST_SPARK = os.environ.get("STATESTREAM_DIFF_AGAINST_SPARK") == "1"


def pytest_report_header(config: pytest.Config) -> str | None:
    if AGAINST_SPARK:
        return (
            "differential: STATESTREAM_DIFF_AGAINST_SPARK=1 -> 'ours' is Spark's own engine "
            "(harness self-check only; statestream is NOT tested)"
        )
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Report the time spent inside streaming queries per engine (start to stop)."""
    from tests.differential.harness import ENGINE_RUNS, ENGINE_SECONDS

    if not ENGINE_SECONDS:
        return
    parts = [f"{name}: {secs:.1f} s over {ENGINE_RUNS[name]} runs" for name, secs in sorted(ENGINE_SECONDS.items())]
    note = " (both sides are Spark: STATESTREAM_DIFF_AGAINST_SPARK=1)" if AGAINST_SPARK else ""
    terminalreporter.write_line("differential query time per engine: " + "; ".join(parts) + note)


@pytest.fixture
def ours(spark: Any) -> Callable[[], Any]:
    """A zero-argument factory returning ``statestream.StreamingSession(spark)``."""

    def make() -> Any:
        if AGAINST_SPARK:
            return spark
        from statestream import StreamingSession

        return StreamingSession(spark)

    return make


@pytest.fixture
def reused(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the batches statestream ran on a reused plan (``runtime.batch_plan_reuse``)."""
    from statestream.runtime.batch_plan_reuse import PlanReuse

    count = [0]
    original = PlanReuse.instantiate

    def counting(self: PlanReuse, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        count[0] += out is not None
        return out

    monkeypatch.setattr(PlanReuse, "instantiate", counting)
    return count
