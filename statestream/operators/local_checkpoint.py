"""Materialising a DataFrame inside a batch: ``localCheckpoint`` with serialised blocks.

A batch materialises its result once before the sink sees it (so that its state steps run and
commit exactly once whatever the sink does), and some operators materialise an intermediate
(a union's stateful input, a stream-stream join's new rows and matched pairs). Spark's
``Dataset.localCheckpoint`` keeps the blocks at Scala's ``MEMORY_AND_DISK``: rows *deserialised*
in the JVM's heap, each a row object with a byte array of its own.

Why serialised instead: the heap then holds each partition as a few byte buffers about the size
of the rows' data (no object headers and array per row), and spills them to the local disks if
the storage memory fills. Measured on W2 (1M keys, 630,000 output rows a batch), the JVM's peak
RSS went from 2.1-2.4 GB to 1.3-1.4 GB at the same speed; at 10M keys (2M output rows a batch)
from 3.3 to 2.2 GB (``bench/README.md``). The cost moves, it does not grow in these runs:
storing a row serialises it, and every job that reads the blocks (the sink's, or each of
several actions a ``foreachBatch`` function runs, or the jobs that read a join's intermediate)
deserialises them.

The level is PySpark's ``StorageLevel(True, True, False, False)``: disk and memory, not off the
heap, not deserialised (Python's ``StorageLevel.MEMORY_AND_DISK``, whose name in Scala means the
deserialised level).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark import StorageLevel

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["SERIALIZED_MEMORY_AND_DISK", "local_checkpoint", "release_local_checkpoint"]

logger = logging.getLogger(__name__)

#: memory, spilling to disk; serialised (see the module docstring)
SERIALIZED_MEMORY_AND_DISK = StorageLevel(True, True, False, False)


def local_checkpoint(df: "DataFrame") -> "DataFrame":
    """``df`` computed now (a job) and kept in the block manager, serialised; the DataFrame
    returned reads those blocks and never recomputes ``df``."""
    return df.localCheckpoint(eager=True, storageLevel=SERIALIZED_MEMORY_AND_DISK)


def release_local_checkpoint(df: "DataFrame") -> None:
    """Drop the blocks of a batch's materialised output once the sink has taken it.

    Why: the blocks stay in the block manager until Spark's ContextCleaner sees the RDD
    unreachable, which waits for a JVM garbage collection that reaches it; meanwhile later
    batches add theirs. With a large output (W2's 10M keys: 2M rows a batch, about 2 GB when
    the blocks were deserialised) the driver's heap filled with rows no one would read again.
    The sink is done with the DataFrame when its ``add_batch`` returns (a ``foreachBatch``
    function that keeps it past its call would find it gone, as it would find Spark's own batch
    DataFrame unusable); removal is asynchronous, so the loop does not wait."""
    try:
        logical = df._jdf.queryExecution().logical()
        if logical.getClass().getSimpleName() == "LogicalRDD":
            logical.rdd().unpersist(False)
    except Exception:  # noqa: BLE001 - only memory: the ContextCleaner still frees it later
        logger.debug("could not release the batch's materialised output", exc_info=True)
