"""``operators.local_checkpoint.lost_local_checkpoint_block``: which failures make the loop run a
batch again."""

from __future__ import annotations

from statestream.operators.local_checkpoint import LOST_BLOCK_ERROR_CLASS, lost_local_checkpoint_block

LOST = (
    f"[{LOST_BLOCK_ERROR_CLASS}] Checkpoint block rdd_12_0 not found! Either the executor that "
    "originally checkpointed this partition is no longer alive, or the original RDD is unpersisted."
)


class _Wrapped(Exception):
    pass


def test_the_error_class_itself():
    assert lost_local_checkpoint_block(RuntimeError(LOST))


def test_a_wrapped_loss_is_found_through_its_causes():
    """A sink (or a ``foreachBatch`` function) may raise its own error from Spark's."""
    try:
        try:
            raise RuntimeError(LOST)
        except RuntimeError as inner:
            raise _Wrapped("the user's function failed") from inner
    except _Wrapped as exc:
        assert lost_local_checkpoint_block(exc)
    try:
        try:
            raise RuntimeError(LOST)
        except RuntimeError:
            raise _Wrapped("raised while handling it")  # noqa: B904 - the implicit context
    except _Wrapped as exc:
        assert lost_local_checkpoint_block(exc)


def test_other_failures_are_not_a_loss():
    assert not lost_local_checkpoint_block(RuntimeError("[DIVIDE_BY_ZERO] Division by zero."))
    assert not lost_local_checkpoint_block(_Wrapped("boom"))


def test_a_cycle_of_causes_ends():
    a, b = _Wrapped("a"), _Wrapped("b")
    a.__cause__, b.__cause__ = b, a
    assert not lost_local_checkpoint_block(a)
