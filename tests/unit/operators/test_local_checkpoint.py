"""Which failures make the micro-batch loop run a batch again (``operators.local_checkpoint``),
and the loop's reruns themselves."""

from __future__ import annotations

from statestream.operators.local_checkpoint import LOST_BLOCK_ERROR_CLASS, lost_block_rdd_ids

LOST = (
    f"org.apache.spark.SparkException: [{LOST_BLOCK_ERROR_CLASS}] Checkpoint block rdd_12_0 not found! Either the executor that "
    "originally checkpointed this partition is no longer alive, or the original RDD is unpersisted."
)


class _Wrapped(Exception):
    pass


def test_the_error_names_the_rdd():
    assert lost_block_rdd_ids(RuntimeError(LOST)) == {12}


def test_a_job_abort_as_py4j_shows_it():
    """The text of a ``Py4JJavaError``: the call, the job abort, the task's failure, then the
    stack; only the lost block's RDD is taken."""
    text = (
        "An error occurred while calling o431.localCheckpoint.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 31.0 failed 1 times, "
        "most recent failure: Lost task 1.0 in stage 31.0 (TID 55) (localhost executor driver): "
        f"org.apache.spark.SparkException: [{LOST_BLOCK_ERROR_CLASS}] Checkpoint block rdd_202_1 not found! Either the executor\n"
        "that originally checkpointed this partition is no longer alive, or the original RDD is unpersisted.\n"
        "\tat org.apache.spark.rdd.LocalCheckpointRDD.compute(LocalCheckpointRDD.scala:66)\n"
        "\tat org.apache.spark.storage.BlockManager.getOrElseUpdate (block rdd_7_3)\n"
        f"Caused by: org.apache.spark.SparkException: [{LOST_BLOCK_ERROR_CLASS}] Checkpoint block rdd_202_1 not found!"
    )
    assert lost_block_rdd_ids(RuntimeError(text)) == {202}


def test_a_wrapped_loss_is_found_through_its_causes():
    """A sink (or a ``foreachBatch`` function) may raise its own error from Spark's."""
    try:
        try:
            raise RuntimeError(LOST)
        except RuntimeError as inner:
            raise _Wrapped("the user's function failed") from inner
    except _Wrapped as exc:
        assert lost_block_rdd_ids(exc) == {12}
    try:
        try:
            raise RuntimeError(LOST)
        except RuntimeError:
            raise _Wrapped("raised while handling it")  # noqa: B904 - the implicit context
    except _Wrapped as exc:
        assert lost_block_rdd_ids(exc) == {12}


def test_other_failures_are_not_a_loss():
    assert not lost_block_rdd_ids(RuntimeError("[DIVIDE_BY_ZERO] Division by zero."))
    assert not lost_block_rdd_ids(_Wrapped("boom"))
    # the class's name in a user's own message, without a block
    assert not lost_block_rdd_ids(_Wrapped(f"we handle {LOST_BLOCK_ERROR_CLASS} elsewhere"))


def test_a_cycle_of_causes_ends():
    a, b = _Wrapped("a"), _Wrapped("b")
    a.__cause__, b.__cause__ = b, a
    assert not lost_block_rdd_ids(a)


# -- the loop's rerun (MicroBatchExecution._run_batch_surviving_lost_blocks), without Spark -----


class _FakeRDD:
    def __init__(self, rdd_id: int) -> None:
        self.rdd_id = rdd_id
        self.unpersisted = False

    def id(self) -> int:
        return self.rdd_id

    def context(self) -> "_FakeContext":
        return _FakeContext(self)


class _FakeContext:
    """The RDD's SparkContext, as far as the module calls it: ``unpersistRDD(id, blocking)``."""

    def __init__(self, rdd: _FakeRDD) -> None:
        self.rdd = rdd

    def unpersistRDD(self, rdd_id: int, blocking: bool) -> None:
        assert rdd_id == self.rdd.rdd_id
        self.rdd.unpersisted = True


class _Checkpointed:
    """What ``DataFrame.localCheckpoint`` gives, as far as the module reads it."""

    def __init__(self, rdd_id: int) -> None:
        from types import SimpleNamespace

        self.rdd = _FakeRDD(rdd_id)
        logical = SimpleNamespace(getClass=lambda: SimpleNamespace(getSimpleName=lambda: "LogicalRDD"), rdd=lambda: self.rdd)
        self._jdf = SimpleNamespace(queryExecution=lambda: SimpleNamespace(logical=lambda: logical))


class _Input:
    def __init__(self, rdd_id: int) -> None:
        self.rdd_id = rdd_id

    def localCheckpoint(self, eager: bool, storageLevel: object) -> _Checkpointed:
        return _Checkpointed(self.rdd_id)


def _loop(outcomes):
    """A ``MicroBatchExecution`` whose ``_run_batch`` makes one local checkpoint per attempt
    (RDD 100, 101, ...) and then does what ``outcomes`` says: None succeeds, a callable given
    the attempt's RDD id returns the exception to raise."""
    import threading
    from types import SimpleNamespace

    from statestream.operators.local_checkpoint import local_checkpoint
    from statestream.runtime.microbatch import MicroBatchExecution

    ex = MicroBatchExecution.__new__(MicroBatchExecution)
    ex._stop = threading.Event()
    durations: dict[str, int] = {"latestOffset": 5}

    def restore(saved: dict[str, int]) -> None:
        durations.clear()
        durations.update(saved)

    ex.progress = SimpleNamespace(
        record_duration=lambda phase, _t: durations.__setitem__(phase, durations.get(phase, 0) + 1),
        durations=lambda: dict(durations),
        restore_durations=restore,
    )
    made: list[_Checkpointed] = []
    pending = list(outcomes)

    def run_batch(record, prev_wm, first):
        ex.progress.record_duration("queryPlanning", 0.0)  # a phase the attempt reached
        made.append(local_checkpoint(_Input(100 + len(made))))
        outcome = pending.pop(0)
        if outcome is not None:
            raise outcome(made[-1].rdd.rdd_id)

    ex._run_batch = run_batch
    return ex, made, durations


def _lost(rdd_id: int) -> Exception:
    return RuntimeError(f"[{LOST_BLOCK_ERROR_CLASS}] Checkpoint block rdd_{rdd_id}_1 not found!")


def test_a_batch_that_lost_its_own_block_runs_again_and_every_attempt_is_released():
    from types import SimpleNamespace

    ex, made, durations = _loop([_lost, _lost, None])
    ex._run_batch_surviving_lost_blocks(SimpleNamespace(batch_id=7), 0, False)
    assert [m.rdd.rdd_id for m in made] == [100, 101, 102]
    assert all(m.rdd.unpersisted for m in made)
    # the failed attempts' whole time in addBatch; only the last attempt's own phases
    assert durations == {"latestOffset": 5, "addBatch": 2, "queryPlanning": 1}


def test_a_lost_block_of_another_checkpoint_fails_at_once():
    """Say a ``foreachBatch`` function read the previous batch's released output."""
    from types import SimpleNamespace

    import pytest

    ex, made, _ = _loop([lambda rid: _lost(rid - 1), None])
    with pytest.raises(RuntimeError, match="rdd_99_1"):
        ex._run_batch_surviving_lost_blocks(SimpleNamespace(batch_id=7), 0, False)
    assert len(made) == 1 and made[0].rdd.unpersisted


def test_other_failures_are_raised_at_once():
    from types import SimpleNamespace

    import pytest

    ex, made, _ = _loop([lambda rid: ValueError("boom"), None])
    with pytest.raises(ValueError, match="boom"):
        ex._run_batch_surviving_lost_blocks(SimpleNamespace(batch_id=7), 0, False)
    assert len(made) == 1 and made[0].rdd.unpersisted


def test_the_loss_is_raised_after_the_last_rerun():
    from types import SimpleNamespace

    import pytest

    from statestream.runtime.microbatch import MAX_BATCH_RERUNS_ON_LOST_BLOCKS

    ex, made, _ = _loop([_lost] * (MAX_BATCH_RERUNS_ON_LOST_BLOCKS + 2))
    with pytest.raises(RuntimeError, match=LOST_BLOCK_ERROR_CLASS):
        ex._run_batch_surviving_lost_blocks(SimpleNamespace(batch_id=7), 0, False)
    assert len(made) == MAX_BATCH_RERUNS_ON_LOST_BLOCKS + 1


def test_a_loss_while_stopping_is_a_stop_not_a_failure():
    from types import SimpleNamespace

    import pytest

    from statestream.runtime.microbatch import _StoppedDuringBatch, _is_cancellation

    ex, made, _ = _loop([_lost, None])
    ex._stop.set()
    with pytest.raises(_StoppedDuringBatch) as info:
        ex._run_batch_surviving_lost_blocks(SimpleNamespace(batch_id=7), 0, False)
    assert len(made) == 1
    assert _is_cancellation(info.value)
