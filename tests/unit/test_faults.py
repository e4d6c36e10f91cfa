"""The test-only crash points (``statestream.faults``): spec parsing and matching, no Spark."""

from __future__ import annotations

import pytest

from statestream import faults


def test_unset_spec_is_inert():
    assert faults.parse_crash_spec(None) is None
    assert faults.parse_crash_spec("") is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("after_offsets:3", ("after_offsets", 3, None)),
        ("after_state_commit:1:0", ("after_state_commit", 1, 0)),
        ("  after_commit:0 ", ("after_commit", 0, None)),
    ],
)
def test_spec_parsing(text, parsed):
    assert faults.parse_crash_spec(text) == parsed


@pytest.mark.parametrize("text", ["after_offset:3", "after_offsets", "after_offsets:x", "after_sink:1:2:3", "after_sink:1:p"])
def test_malformed_spec_is_refused(text):
    # a typo must not turn a crash test into a plain run
    with pytest.raises(ValueError, match="STATESTREAM_TEST_CRASH_AT"):
        faults.parse_crash_spec(text)


def test_crash_point_fires_only_at_its_point_batch_and_partition(monkeypatch):
    fired = []
    monkeypatch.setattr(faults, "_die", fired.append)
    monkeypatch.setattr(faults, "_SPEC", ("after_state_commit", 2, 1))
    faults.crash_point("after_state_commit", 1, 1)
    faults.crash_point("after_state_commit", 2, 0)
    faults.crash_point("after_sink", 2, 1)
    assert fired == []
    faults.crash_point("after_state_commit", 2, 1)
    assert fired == ["after_state_commit:2:1"]


def test_crash_point_without_partition_matches_every_partition(monkeypatch):
    fired = []
    monkeypatch.setattr(faults, "_die", fired.append)
    monkeypatch.setattr(faults, "_SPEC", ("after_sink", 4, None))
    faults.crash_point("after_sink", 4)
    faults.crash_point("after_sink", 3)
    assert fired == ["after_sink:4"]


def test_no_spec_means_no_crash(monkeypatch):
    monkeypatch.setattr(faults, "_die", lambda where: pytest.fail(f"crashed at {where}"))
    monkeypatch.setattr(faults, "_SPEC", None)
    for point in faults.CRASH_POINTS:
        faults.crash_point(point, 0, 0)
