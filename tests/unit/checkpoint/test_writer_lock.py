"""The checkpoint's writer lock, without Spark: one holder at a time across processes, released
by a holder killed with SIGKILL, and exactly one winner of two processes racing for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.writer_lock import LOCK_FILE, CheckpointWriterLock
from statestream.errors import CheckpointLockedError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from statestream.checkpoint.files import CheckpointFileManager
    from statestream.checkpoint.writer_lock import CheckpointWriterLock
    from statestream.errors import CheckpointLockedError
    sys.stdin.readline()  # all children start trying together
    try:
        CheckpointWriterLock(CheckpointFileManager(sys.argv[1])).acquire("q", sys.argv[2])
    except CheckpointLockedError:
        print("refused", flush=True)
        sys.exit(0)
    print("held", flush=True)
    time.sleep(600)
    """
)


def _holders(path: str, n: int) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [
        subprocess.Popen([sys.executable, "-c", _HOLDER, path, f"run{i}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for i in range(n)
    ]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    return procs


def test_one_holder_at_a_time_in_one_process(tmp_path):
    fm = CheckpointFileManager(str(tmp_path / "ck"))
    first, second = CheckpointWriterLock(fm), CheckpointWriterLock(fm)
    first.acquire("q1", "r1")
    with pytest.raises(CheckpointLockedError, match=rf"run r1 of query q1 in process {os.getpid()} on host .* holds the lock .*{LOCK_FILE}"):
        second.acquire("q1", "r2")
    first.release()
    first.release()  # idempotent
    second.acquire("q1", "r2")
    assert second.held
    second.release()


def test_a_killed_holder_releases_and_racing_restarts_get_one_winner(tmp_path):
    path = str(tmp_path / "ck")
    (holder,) = _holders(path, 1)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointLockedError, match=rf"run run0 of query q in process {holder.pid} "):
            CheckpointWriterLock(CheckpointFileManager(path)).acquire("q", "mine")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    racers = _holders(path, 3)  # three restarts after the crash, at the same moment
    try:
        answers = sorted(p.stdout.readline().strip() for p in racers)
        assert answers == ["held", "refused", "refused"]
    finally:
        for p in racers:
            p.kill()
            p.wait(10)
    lock = CheckpointWriterLock(CheckpointFileManager(path))
    lock.acquire("q", "after")  # every racer is gone: free again
    lock.release()


def test_object_stores_have_no_lock_and_say_so(caplog):
    import logging

    import pyarrow.fs as pafs

    lock = CheckpointWriterLock(CheckpointFileManager(str("/tmp")))
    lock.fm._fs = pafs.SubTreeFileSystem("/tmp", pafs.LocalFileSystem())  # stands for a store without locks
    with caplog.at_level(logging.INFO, logger="statestream.checkpoint.writer_lock"):
        lock.acquire("q", "r")
    assert not lock.held
    assert "without locks" in caplog.text
