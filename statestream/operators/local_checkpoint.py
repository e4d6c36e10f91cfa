"""Materialising a DataFrame inside a batch: ``localCheckpoint`` with serialised blocks.

A batch materialises its result once before the sink sees it (so that its state steps run and
commit once whatever the sink does: once per attempt of the batch, see below), and some
operators materialise an intermediate (a union's stateful input, a stream-stream join's new rows
and matched pairs). Spark's ``Dataset.localCheckpoint`` keeps the blocks at Scala's
``MEMORY_AND_DISK``: rows *deserialised* in the JVM's heap, each an object with its own byte
array, sized row by row by the block manager's size estimator as the task stores them.

Why serialised instead: the heap then holds each partition as a few byte buffers about the size
of the rows' data, spilled to the local disks if the storage memory fills, and a task no longer
pays the size estimator on every row. Measured on W2 (1M keys, 630,000 output rows a batch), the
JVM's peak RSS went from 2.1-2.4 GB to 1.3-1.4 GB at the same speed; at 10M keys (2M output rows
a batch) from 3.3 to 2.2 GB (``bench/README.md``). The level is PySpark's ``StorageLevel(True,
True, False, False)``: disk and memory, not off the heap, not deserialised (PySpark's
``StorageLevel.MEMORY_AND_DISK``, whose name in Scala means the deserialised level).

A local checkpoint has no lineage: a block lost with its executor cannot be computed again, and
reading it fails with ``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND`` at any level. The micro-batch loop
collects the checkpoints a batch makes (``batch_local_checkpoints``) and runs the batch again
when one of *those* lost a block (``lost_local_checkpoint_block``); it drops them all when the
batch is done. The serialised level was first tried without the rerun (2026-11-28) and reverted
when a standalone cluster test that kills a worker failed on such a loss; why that loss had not
shown at the deserialised level in earlier runs is not known (it can happen at either level).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel

from statestream._jvm.calls import java_dataframe, set_jvm_log_level

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "LOST_BLOCK_ERROR_CLASS",
    "SERIALIZED_MEMORY_AND_DISK",
    "batch_local_checkpoints",
    "local_checkpoint",
    "lost_block_rdd_ids",
    "lost_local_checkpoint_block",
    "release_local_checkpoint",
]

logger = logging.getLogger(__name__)

#: Spark's error class for a read of a local checkpoint whose block is gone (the executor that
#: held it was lost, or the RDD was unpersisted: a local checkpoint has no lineage to compute
#: it again); its message names the block, ``rdd_<rdd id>_<partition>``
LOST_BLOCK_ERROR_CLASS = "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"
_LOST_BLOCK = re.compile(re.escape(LOST_BLOCK_ERROR_CLASS) + r"\][^\n]*?\brdd_(\d+)_\d+")

#: memory, spilling to disk; serialised (see the module docstring)
SERIALIZED_MEMORY_AND_DISK = StorageLevel(True, True, False, False)

#: the checkpoints made on a thread inside ``batch_local_checkpoints`` (the query's thread)
_made = threading.local()


#: whether this process's JVM has the block manager's warnings about the checkpoints quieted
_block_manager_quiet = False


def _quiet_block_manager(df: "DataFrame") -> None:
    """The driver's block manager logs at ERROR only, once per process: a task that fails while
    it stores a local checkpoint's block warns "Putting block rdd_N_P failed due to exception"
    (with the whole failure again) and that the block "could not be removed", beside the
    task's own failure, which the executor and the scheduler report. Spark's engine stores no
    blocks for the same query, so a user would see warnings it never prints."""
    global _block_manager_quiet
    if not _block_manager_quiet:
        _block_manager_quiet = True
        try:
            set_jvm_log_level(df.sparkSession, "org.apache.spark.storage.BlockManager", "ERROR")
        except Exception:  # only the log's noise
            logger.debug("could not set the block manager's log level", exc_info=True)


def local_checkpoint(df: "DataFrame") -> "DataFrame":
    """``df`` computed now (a job) and kept in the block manager, serialised; the DataFrame
    returned reads those blocks and never recomputes ``df``. Inside ``batch_local_checkpoints``
    it is added to the batch's list."""
    _quiet_block_manager(df)
    out = df.localCheckpoint(eager=True, storageLevel=SERIALIZED_MEMORY_AND_DISK)
    made = getattr(_made, "checkpoints", None)
    if made is not None:
        made.append(out)
    return out


@contextmanager
def batch_local_checkpoints() -> Iterator[list["DataFrame"]]:
    """Collect the local checkpoints this thread makes in the block (one attempt of a batch:
    its output and the operators' intermediates).

    Why: the loop must tell a block lost from one of them (run the batch again) from any other
    lost block, such as a ``foreachBatch`` function reading an earlier batch's released output
    (fail at once, as Spark would); and it drops them all once the batch is done instead of
    leaving the intermediates to the ContextCleaner."""
    made: list[DataFrame] = []
    outer = getattr(_made, "checkpoints", None)
    _made.checkpoints = made
    try:
        yield made
    finally:
        _made.checkpoints = outer


def _checkpointed_rdd(df: "DataFrame") -> Any:
    """The JVM RDD whose blocks the local checkpoint ``df`` reads (they are named after its id),
    or None when ``df`` is not one. Raises what py4j raises."""
    logical = java_dataframe(df).queryExecution().logical()
    return logical.rdd() if logical.getClass().getSimpleName() == "LogicalRDD" else None


def _checkpoint_rdd_id(df: "DataFrame") -> int | None:
    """The id of the RDD whose blocks the local checkpoint ``df`` reads, or None."""
    try:
        rdd = _checkpointed_rdd(df)
        return None if rdd is None else int(rdd.id())
    except Exception:  # then the loss cannot be told to be the batch's
        logger.debug("could not read the RDD of a local checkpoint", exc_info=True)
        return None


def release_local_checkpoint(df: "DataFrame") -> None:
    """Drop the blocks of a local checkpoint of a batch: its output once the sink has taken it,
    and its intermediates, when the batch (or a failed attempt of it) is done.

    Why: the blocks stay in the block manager until Spark's ContextCleaner sees the RDD
    unreachable, which waits for a JVM garbage collection that reaches it; meanwhile later
    batches add theirs. With a large output (W2's 10M keys: 2M rows a batch, about 2 GB when
    the blocks were deserialised) the driver's heap filled with rows no one would read again.
    The sink is done with the DataFrame when its ``add_batch`` returns (a ``foreachBatch``
    function that keeps it past its call would find it gone, as it would find Spark's own batch
    DataFrame unusable); removal is asynchronous, so the loop does not wait."""
    try:
        rdd = _checkpointed_rdd(df)
        if rdd is not None:
            # the context's removal, not ``rdd.unpersist``: the same blocks dropped, without the
            # RDD's warning that a local checkpoint cannot be recomputed once unpersisted (no
            # one reads it again), which would print on every batch
            rdd.context().unpersistRDD(rdd.id(), False)
    except Exception:  # only memory: the ContextCleaner still frees it later
        logger.debug("could not release the batch's materialised output", exc_info=True)


def lost_block_rdd_ids(exc: BaseException) -> set[int]:
    """The RDD ids of the local-checkpoint blocks that ``exc``, or an exception it was raised
    from, reports lost (Spark's ``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND``). A sink or a user's
    function may wrap the failure, hence the walk along the causes."""
    ids: set[int] = set()
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        ids.update(int(m) for m in _LOST_BLOCK.findall(str(e)))
        e = e.__cause__ or e.__context__
    return ids


def lost_local_checkpoint_block(exc: BaseException, made: Sequence["DataFrame"]) -> bool:
    """Whether ``exc`` is the loss of a block of one of the local checkpoints ``made`` (a
    batch's, collected by ``batch_local_checkpoints``).

    Why: Spark's own engine recomputes a lost partition from its lineage, so a query survives a
    lost executor; a local checkpoint cuts that lineage, and the loop runs the batch again
    instead (``MicroBatchExecution``). A block of any other checkpoint is not the batch's to
    recompute: running the batch again would meet the same loss."""
    lost = lost_block_rdd_ids(exc)
    return bool(lost) and any(_checkpoint_rdd_id(df) in lost for df in made)
