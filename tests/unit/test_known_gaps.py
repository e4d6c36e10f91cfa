"""Every declared gap names a test that exists: a gap whose test was renamed or removed would
otherwise drop silently, with nothing left to fail when the difference comes back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.known_gaps import KNOWN_GAPS

ROOT = Path(__file__).resolve().parents[2]


def test_every_gap_names_a_collected_test():
    files = sorted({nodeid.split("::")[0] for nodeid in KNOWN_GAPS})
    missing_files = [f for f in files if not (ROOT / f).is_file()]
    assert missing_files == [], f"gaps declared in files that do not exist: {missing_files}"
    # collection only (no test runs, no Spark): every tier, so slow and soak cases count too
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "", "--soak", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    collected = {line.strip() for line in done.stdout.splitlines() if "::" in line}
    assert collected, done.stdout[-2000:] + done.stderr[-2000:]
    stale = sorted(set(KNOWN_GAPS) - collected)
    assert stale == [], f"known_gaps.py declares tests that are not collected (renamed or removed?): {stale}"
