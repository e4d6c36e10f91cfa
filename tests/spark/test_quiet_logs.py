"""What a user's console shows (issue 49): unmodified jobs (``tests/jobs/``) run with
``statestream run``, their stderr read as a user reads it.

- A healthy run and its restart print no warning that statestream's own work causes (the
  local checkpoint's "RDD N was locally checkpointed", the reader over no files' "All paths were
  ignored").
- A processor that raises is reported by statestream once, in one line that names the error and
  the user's frame; the whole traceback is the query's exception's (and Spark's executor and
  scheduler report the task, as they do on Spark's engine). No block manager warning repeats
  it, and no killed worker prints a ``BrokenPipeError``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parents[1] / "jobs"
BIN = Path(sys.executable).parent
CONFS = "--conf spark.master=local[2] --conf spark.sql.shuffle.partitions=2 --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false pyspark-shell"
#: statestream's own noise, gone
NOISE = ("was locally checkpointed", "All paths were ignored", "Putting block", "could not be removed as it was not found", "BrokenPipeError")


def _run(program: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATESTREAM_TEST", "PYTHONPATH"))}
    env.update(PYSPARK_SUBMIT_ARGS=CONFS, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run(
        [str(BIN / "statestream"), "run", str(JOBS / program), *args],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False,
    )


def _file(directory: Path, i: int, second: int, line: str) -> None:
    path = directory / f"part-{i}.json"
    path.write_text(json.dumps({"ts": f"2026-12-06 00:00:{second:02d}", "line": line}) + "\n")
    os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def test_a_run_and_its_restart_print_no_warning_of_statestream(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):
        _file(source, i, i, "a b")
    first = _run("windowed_count_restart.py", str(source), str(tmp_path / "ck"))
    _file(source, 3, 9, "c")
    again = _run("windowed_count_restart.py", str(source), str(tmp_path / "ck"))
    for run in (first, again):
        assert run.returncode == 0 and run.stdout.rstrip().endswith("done"), run.stderr[-3000:]
        assert [n for n in NOISE if n in run.stderr] == [], run.stderr[-5000:]
    assert "Batch: 0" in first.stdout and "Batch: 0" not in again.stdout


def test_a_failing_processor_is_reported_once_with_the_users_frame(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    _file(source, 0, 0, "k")
    run = _run("failing_processor.py", str(source), str(tmp_path / "ck"))
    assert run.returncode == 3 and "the query failed: StatestreamStreamingQueryException" in run.stdout, run.stdout + run.stderr[-3000:]
    ours = [line for line in run.stderr.splitlines() if re.match(r"^query \S+ failed: ", line)]
    assert len(ours) == 1, run.stderr[-5000:]
    assert "ValueError: no rows wanted for 'k'" in ours[0] and "failing_processor.py, line 19, in handleInputRows" in ours[0], ours[0]
    assert [n for n in NOISE if n in run.stderr] == [], run.stderr[-5000:]
    # statestream logs no traceback of its own (it used to log the whole one after "failed:").
    # What is left is Spark's executor and scheduler reporting the task, as on Spark's engine:
    # their count varies with the sibling tasks the failure cancels, so it is not counted here
    assert "failed: Traceback" not in run.stderr, run.stderr[-8000:]
