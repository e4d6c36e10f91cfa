"""One writer per checkpoint on an object store (issue 15, item 7): create-if-absent through S3's
conditional PUT, and the writer lease built on it (``checkpoint.object_store``,
``checkpoint.writer_lock.ObjectStoreLease``), against moto's S3 server on loopback. No Spark."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.files import CheckpointFileManager
from statestream.errors import FileAlreadyExistsError
from statestream.checkpoint.writer_lock import (
    CheckpointLockedError,
    CheckpointWriterLock,
    ObjectStoreLease,
)

LEASE_MS = 1200


@pytest.fixture
def root(s3_endpoint) -> str:
    return f"s3://checkpoints/lease-{uuid.uuid4().hex}?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"


def _holder(run: str) -> dict:
    return {"id": "q", "runId": run, "pid": 1, "host": "h", "since": "now"}


def _race(n: int, fn) -> list:
    """Run ``fn(i)`` in ``n`` threads released at once; each one's result or exception."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def go(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - the result under test
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_create_if_absent_has_exactly_one_winner(root):
    fm = CheckpointFileManager(root)
    assert fm.conditional is not None, "S3 with boto3 must offer conditional writes"
    results = _race(6, lambda i: fm.conditional.create(fm.path("offsets/0"), f"writer {i}".encode()))
    assert sorted(results) == [False] * 5 + [True]
    winner = results.index(True)
    assert fm.read_bytes("offsets/0") == f"writer {winner}".encode()


def test_a_log_entry_is_never_overwritten_by_a_second_writer(root):
    fm = CheckpointFileManager(root)
    fm.write_atomic("commits/3", b"first", overwrite=False)
    with pytest.raises(FileAlreadyExistsError, match="commits/3"):
        fm.write_atomic("commits/3", b"second", overwrite=False)
    assert fm.read_bytes("commits/3") == b"first"
    log = CommitLog(fm.child("commits"))
    results = _race(4, lambda i: log.add(7, CommitMetadata(1000 * i)))
    assert results.count(True) == 1 and results.count(False) == 3, results


def test_a_live_holder_keeps_the_lease(root):
    first = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    first.acquire(_holder("run-1"))
    try:
        # a long lease: refused as soon as the holder's beat moved (every lease/6), long before
        # the lease would have run out
        long_lease = 60_000
        first.lease_s = long_lease / 1000 / 6 / 6  # the holder beats often
        second = ObjectStoreLease(CheckpointFileManager(root), long_lease)
        t0 = time.monotonic()
        with pytest.raises(CheckpointLockedError, match="run-1") as err:
            second.acquire(_holder("run-2"))
        assert time.monotonic() - t0 < long_lease / 1000 / 2
        assert err.value.holder["runId"] == "run-1"
        first.check_held()
    finally:
        first.release()


def test_a_released_lease_is_taken_at_once(root):
    first = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    first.acquire(_holder("run-1"))
    first.release()
    waits: list[float] = []
    second = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS, sleep=waits.append)
    second.acquire(_holder("run-2"))
    assert waits == [], "a released lease was watched instead of taken"
    assert second.number == 2
    second.release()


def test_a_dead_holders_lease_is_taken_over_and_the_stalled_holder_learns_it(root):
    stalled = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    stalled.acquire(_holder("run-1"))
    # the holder stops beating without releasing: a killed process, or one stalled for a lease
    stalled._stop.set()
    stalled._thread.join()
    taker = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    t0 = time.monotonic()
    taker.acquire(_holder("run-2"))
    waited = time.monotonic() - t0
    assert LEASE_MS / 1000 * 0.9 <= waited < LEASE_MS / 1000 * 20, waited
    assert taker.number == 2
    # the stalled holder comes back: its next beat finds the higher number, and it stops
    assert stalled.renew() is False
    with pytest.raises(CheckpointLockedError, match="run-2"):
        stalled.check_held()
    taker.check_held()
    taker.release()


def test_racing_restarts_after_a_crash_let_exactly_one_run(root):
    dead = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    dead.acquire(_holder("run-0"))
    dead._stop.set()
    dead._thread.join()
    leases = [ObjectStoreLease(CheckpointFileManager(root), LEASE_MS) for _ in range(4)]
    results = _race(4, lambda i: leases[i].acquire(_holder(f"run-{i + 1}")))
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, CheckpointLockedError) for i, r in enumerate(results) if i != winners[0]), results
    leases[winners[0]].release()


def test_the_checkpoint_lock_uses_the_lease_on_s3(root):
    lock = CheckpointWriterLock(CheckpointFileManager(root), lease_ms=LEASE_MS)
    assert not lock.supported  # no flock on an object store
    lock.acquire("q", "run-1")
    assert lock.held
    other = CheckpointWriterLock(CheckpointFileManager(root), lease_ms=LEASE_MS)
    with pytest.raises(CheckpointLockedError, match="run-1"):
        other.acquire("q", "run-2")
    lock.release()
    other.acquire("q", "run-2")
    other.release()


def test_a_killed_holder_of_this_host_is_taken_over_at_once(root):
    import socket
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS)
    dead.acquire(dict(_holder("run-1"), host=socket.gethostname(), pid=int(gone.stdout)))
    dead._stop.set()
    dead._thread.join()
    waits: list[float] = []
    taker = ObjectStoreLease(CheckpointFileManager(root), LEASE_MS, sleep=waits.append)
    taker.acquire(_holder("run-2"))
    assert waits == [], "the lease of a process that is gone was watched instead of taken"
    taker.release()
