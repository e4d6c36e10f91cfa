"""Unmodified PySpark programs (``tests/jobs/``, which import nothing of statestream) run three
ways: with ``python`` (Spark's own engine, the oracle), with ``statestream run`` and with
``spark-submit --conf spark.pyspark.driver.python=statestream-python``; their console output is
compared batch by batch, with their closing lines and exit statuses.

The inputs are files read one per batch (``maxFilesPerTrigger`` 1, ``availableNow``), so the
batches are the same on both engines. The programs' output does not say which engine ran them,
so each statestream run is made with ``STATESTREAM_LOG_LEVEL=INFO`` and must log the line of
``statestream.enable`` naming the session it serves and the loop's line of each batch it ran
(and Spark's run neither).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[1] / "jobs"
BIN = Path(sys.executable).parent
#: the settings every run gets from outside the program (PySpark's launcher reads this variable;
#: spark-submit gets the same as arguments)
CONFS = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}
#: a line that statestream logs when it serves a session (session.enable, at INFO)
SERVED = "statestream serves the streaming entry points"
#: a line that only statestream's micro-batch loop logs (at INFO), once per batch it ran
RAN = "statestream.runtime.progress_tracker: progress: batch"


def _events(root: Path) -> Path:
    """Six files of timestamped lines: words in overlapping windows, sessions that close as the
    event time moves on, and a late file (its rows behind the watermark)."""
    files = [
        [(0, "a b"), (3, "b c"), (4, "a")],
        [(7, "c a"), (9, "b")],
        [(16, "a d"), (18, "d")],
        [(2, "a late")],  # behind the sessionization's watermark by now
        [(31, "e a"), (33, "e")],
        [(60, "f")],
    ]
    src = root / "events"
    src.mkdir()
    for i, rows in enumerate(files):
        lines = [json.dumps({"ts": f"2026-12-06 00:00:{s:02d}" if s < 60 else "2026-12-06 00:01:00", "line": line}) for s, line in rows]
        (src / f"part-{i:02d}.json").write_text("\n".join(lines) + "\n")
        os.utime(src / f"part-{i:02d}.json", (1_700_000_000 + i, 1_700_000_000 + i))  # the source lists by time
    return src


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATESTREAM_TEST", "PYSPARK_SUBMIT_ARGS"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # spark-submit and its helpers find the venv's Python
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("PYTHONPATH", None)  # the programs see what a user's environment has: the installed packages
    return env


def _launch(how: str, program: str, *args: str, log_info: bool = False) -> subprocess.CompletedProcess:
    env = _env()
    confs = [a for k, v in CONFS.items() for a in ("--conf", f"{k}={v}")]
    if how == "spark-submit":
        cmd = [str(BIN / "spark-submit"), *confs, "--conf", f"spark.pyspark.driver.python={BIN / 'statestream-python'}", str(JOBS / program), *args]
    else:
        env["PYSPARK_SUBMIT_ARGS"] = " ".join([*confs, "pyspark-shell"])
        front = [sys.executable] if how == "python" else [str(BIN / "statestream"), "run"]
        cmd = [*front, str(JOBS / program), *args]
    if log_info:  # the served-session line comes through Python's logging
        env["STATESTREAM_LOG_LEVEL"] = "INFO"
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)


_HEADER = re.compile(r"^-{20,}\nBatch: (\d+)\n-{20,}\n", re.M)


def console_batches(stdout: str) -> dict[int, list[str]]:
    """The console sink's output: batch id -> the lines of its table (``+---+`` borders and rows)."""
    out: dict[int, list[str]] = {}
    matches = list(_HEADER.finditer(stdout))
    for m, nxt in zip(matches, [*matches[1:], None]):
        body = stdout[m.end() : nxt.start() if nxt else len(stdout)]
        out[int(m.group(1))] = [line for line in body.splitlines() if line.startswith(("+", "|"))]
    return out


def rows_of(table: list[str]) -> list[str]:
    return [line for line in table if line.startswith("|")][1:]  # the first row is the header


def closing_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("active queries", "last batch"))]  # the programs' own last lines


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return _events(tmp_path_factory.mktemp("unchanged"))


def _check_ran(run: subprocess.CompletedProcess, status: int = 0) -> None:
    assert run.returncode == status, f"exit {run.returncode}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-5000:]}"


def test_windowed_word_count_complete_mode_ordered(events):
    """Sliding windows in complete mode with ``orderBy``: every batch's table, in order, is
    Spark's; so is the line after ``awaitTermination`` (``spark.streams.active`` empty)."""
    spark = _launch("python", "windowed_word_count.py", str(events))
    _check_ran(spark)
    ours = _launch("statestream-run", "windowed_word_count.py", str(events), log_info=True)
    _check_ran(ours)
    assert SERVED in ours.stderr and ours.stderr.count(RAN) >= 6, ours.stderr[-3000:]
    assert SERVED not in spark.stderr and RAN not in spark.stderr
    expected = console_batches(spark.stdout)
    assert len(expected) == 6 and all(rows_of(t) for t in expected.values()), spark.stdout
    assert console_batches(ours.stdout) == expected
    assert closing_lines(ours.stdout) == closing_lines(spark.stdout) == ["active queries after the end: 0"]


def test_sessionization_append_mode(events):
    """Session windows with a watermark in append mode, run with ``statestream run`` and with
    spark-submit: each batch's rows (in any order, as append's partitions give them) and the
    last progress's batch and watermark are Spark's; the program's exit status comes through."""
    spark = _launch("python", "sessionization.py", str(events), "3")
    _check_ran(spark, 3)
    expected = {b: sorted(rows_of(t)) for b, t in console_batches(spark.stdout).items()}
    assert sum(len(r) for r in expected.values()) >= 4, spark.stdout  # sessions closed and emitted
    for how in ("statestream-run", "spark-submit"):
        ours = _launch(how, "sessionization.py", str(events), "3", log_info=True)
        _check_ran(ours, 3)
        log = ours.stderr + ours.stdout  # spark-submit sends the driver's stderr to stdout
        assert SERVED in log and RAN in log, (how, ours.stderr[-3000:])
        assert {b: sorted(rows_of(t)) for b, t in console_batches(ours.stdout).items()} == expected, how
        assert closing_lines(ours.stdout) == closing_lines(spark.stdout), how


class _LineServer:
    """A socket server on loopback that sends ``lines`` to the one client it accepts, then keeps
    the connection open until closed (a socket source's input)."""

    def __init__(self, lines: list[str]) -> None:
        import socket
        import threading

        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(1)
        self.port = self._server.getsockname()[1]
        self._lines = lines
        self._done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self._server.settimeout(120)
        try:
            client, _ = self._server.accept()
        except OSError:
            return
        with client:
            client.sendall("".join(f"{line}\n" for line in self._lines).encode())
            self._done.wait(300)

    def close(self) -> None:
        self._done.set()
        self._server.close()


def _word_totals(stdout: str) -> dict[str, int]:
    """The last complete-mode table's counts, summed over the windows, by word."""
    batches = console_batches(stdout)
    totals: dict[str, int] = {}
    for row in rows_of(batches[max(batches)]) if batches else []:
        cells = [c.strip() for c in row.strip("|").split("|")]
        totals[cells[1]] = totals.get(cells[1], 0) + int(cells[2])
    return totals


def test_socket_word_count_with_arrival_times():
    """The windowed network word count over a socket with ``includeTimestamp``: the windows
    follow each engine's arrival times, so what is compared is every word's total over its
    sliding windows (each line is in two of them), which must be Spark's."""
    lines = ["apache spark", "spark streaming state", "state of the stream", "spark"]
    totals = {}
    for how in ("python", "statestream-run"):
        server = _LineServer(lines)
        try:
            run = _launch(how, "network_word_count_windowed.py", "127.0.0.1", str(server.port), "10", "5", "25", log_info=how != "python")
        finally:
            server.close()
        _check_ran(run)
        totals[how] = _word_totals(run.stdout)
    words = [w for line in lines for w in line.split(" ")]
    assert totals["python"] == {w: 2 * words.count(w) for w in set(words)}
    assert totals["statestream-run"] == totals["python"]


def test_a_python_data_source_program(tmp_path):
    """A program that defines, registers and reads its own Python data source (rate-limited by
    its reader): every batch's rows and the last progress line are Spark's."""
    spark = _launch("python", "python_source_counts.py", "40", "7")
    _check_ran(spark)
    ours = _launch("statestream-run", "python_source_counts.py", "40", "7", log_info=True)
    _check_ran(ours)
    assert SERVED in ours.stderr and RAN in ours.stderr
    expected = {b: sorted(rows_of(t)) for b, t in console_batches(spark.stdout).items()}
    assert len(expected) >= 6, spark.stdout
    assert {b: sorted(rows_of(t)) for b, t in console_batches(ours.stdout).items()} == expected
    assert closing_lines(ours.stdout) == closing_lines(spark.stdout) and closing_lines(spark.stdout)


def test_a_failing_program_fails_as_with_python(tmp_path):
    """A program's uncaught error: status 1 and its traceback on stderr, as ``python`` gives;
    ``sys.argv`` and ``__name__`` are the program's."""
    program = tmp_path / "fails.py"
    program.write_text("import sys\nprint(sys.argv, __name__)\nraise KeyError('no such input')\n")
    env = _env()
    ran = subprocess.run([str(BIN / "statestream"), "run", str(program), "x", "--y"], env=env, capture_output=True, text=True, timeout=120, check=False)
    plain = subprocess.run([sys.executable, str(program), "x", "--y"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == plain.returncode == 1
    assert ran.stdout == plain.stdout == f"[{str(program)!r}, 'x', '--y'] __main__\n"
    assert ran.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1] == "KeyError: 'no such input'"
