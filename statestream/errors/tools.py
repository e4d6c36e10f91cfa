"""Errors of the operator tools that work on a stopped query's checkpoint: the rollback, the
state tables, the compatibility check and the state repartition's own checks.

Pure module: no PySpark import (``statestream checkpoint rollback`` and the state tables run
without it). The tools' errors that Spark has too, with Spark's error classes (the state data
sources' ``STDS_*``, the repartition's ``STATE_REPARTITION_*``), are in
:mod:`~statestream.errors.spark_tools`.

>>> str(no_checkpoint_error("/q"))
'no checkpoint at /q: it has no offsets/ and no commits/'
"""

from __future__ import annotations

from typing import Iterable, Sequence

from statestream.errors.checkpoint import CheckpointError
from statestream.errors.state import StateStoreError

__all__ = [
    "log_not_retained_error",
    "no_checkpoint_error",
    "rollback_interrupted_error",
    "batch_not_committed_error",
    "offsets_not_retained_error",
    "state_not_retained_error",
    "not_a_file_sink_error",
    "no_committed_state_error",
    "no_state_operator_error",
    "batch_not_committed_state_error",
    "no_store_files_error",
    "store_not_declared_error",
    "empty_offset_log_error",
    "key_not_in_partition_error",
    "lateness_not_recorded_error",
    "restate_not_possible_error",
]


# -- rollback ----------------------------------------------------------------------------------------


def log_not_retained_error(file: str, batch_id: int) -> CheckpointError:
    """A rollback of a compactible log (a file sink's or a file source's) to ``batch_id`` whose
    entries need a log file (``file``) that retention deleted."""
    return CheckpointError(f"{file} is no longer retained: the log cannot go back to batch {batch_id}")


def no_checkpoint_error(checkpoint: str) -> CheckpointError:
    """A rollback of a directory that has neither an offset log nor a commit log."""
    return CheckpointError(f"no checkpoint at {checkpoint}: it has no offsets/ and no commits/")


def rollback_interrupted_error(checkpoint: str, marked: object) -> CheckpointError:
    """A rollback to another batch than the one an interrupted rollback (``marked``) was going to."""
    return CheckpointError(f"a rollback of {checkpoint} to batch {marked} was interrupted: finish it first (--to-batch {marked})")


def batch_not_committed_error(to_batch: int, checkpoint: str, committed: Sequence[int]) -> CheckpointError:
    """A rollback to a batch that is not among the retained committed batches (``committed``)."""
    retained = f"the committed batches retained are {committed[0]}..{committed[-1]}" if committed else "it has no committed batch"
    return CheckpointError(f"batch {to_batch} is not a committed batch of {checkpoint}: " + retained)


def offsets_not_retained_error(file: str, to_batch: int) -> CheckpointError:
    """A rollback to a batch whose offset log file (``file``) retention deleted."""
    return CheckpointError(f"{file} is no longer retained: the checkpoint cannot go back to batch {to_batch}")


def state_not_retained_error(file: str, version: int) -> CheckpointError:
    """A rollback to a state version that needs a delta file (``file``) retention deleted."""
    return CheckpointError(
        f"{file} is no longer retained: the state cannot go back to "
        f"version {version} (raise spark.sql.streaming.minBatchesToRetain to keep more)"
    )


def not_a_file_sink_error(path: str) -> CheckpointError:
    """A rollback of a file sink's output at a directory that has no sink log."""
    return CheckpointError(f"{path} is not a file sink's output: it has no _spark_metadata/")


# -- state tables ------------------------------------------------------------------------------------


def no_committed_state_error(commits: str) -> StateStoreError:
    """A state table of a checkpoint whose commit log (``commits``) has no batch."""
    return StateStoreError(f"{commits} has no committed batch: the checkpoint has no state yet")


def no_state_operator_error(checkpoint: str, operator_id: int, operators: Iterable[int]) -> StateStoreError:
    """A state table of an operator the checkpoint has no state of (``operators``: those it has)."""
    return StateStoreError(f"the checkpoint {checkpoint} has no state operator {operator_id}; operators: {sorted(operators)}")


def batch_not_committed_state_error(batch: int, checkpoint: str, last: int) -> StateStoreError:
    """A state table read as of a batch that is not committed."""
    return StateStoreError(f"batch {batch} is not committed in {checkpoint}: the last committed batch is {last}")


def no_store_files_error(operator_id: int, checkpoint: str, store_name: str) -> StateStoreError:
    """A state table of a store that no partition has files of."""
    return StateStoreError(f"operator {operator_id} of {checkpoint} has no files for store {store_name!r}")


def store_not_declared_error(store_name: str, operator_id: int) -> StateStoreError:
    """An edit of a store (a transformWithState variable) that the query's last run did not
    declare: its content is dormant until a run declares it again."""
    return StateStoreError(
        f"store {store_name!r} of operator {operator_id} is not declared by the query's last run: its content is kept "
        "as that run found it until a run declares it again, and cannot be edited before then"
    )


# -- compatibility and repartition -----------------------------------------------------------------


def empty_offset_log_error(checkpoint: str) -> CheckpointError:
    """The compatibility check of a checkpoint that has no batch to check a query against."""
    return CheckpointError(f"{checkpoint} has no batch in its offset log: any query can start on it")


def key_not_in_partition_error(partition: int, operator_id: int, store_name: str, placed: int, partitions: int) -> StateStoreError:
    """A repartition that finds a key in a state partition other than the one Spark's hash
    places it in (``placed`` of ``partitions``): the keys cannot be moved safely."""
    return StateStoreError(
        f"state partition {partition} of operator {operator_id} (store {store_name!r}) holds a key that "
        f"Spark's hash places in partition {placed} of {partitions}: its keys do not follow Spark's "
        "exchange, so they cannot be moved to new partitions safely; nothing was changed"
    )


# -- the watermark advisor ---------------------------------------------------------------------------


def lateness_not_recorded_error(checkpoint: str) -> CheckpointError:
    """The watermark advisor on a checkpoint whose progress history holds no lateness record."""
    return CheckpointError(
        f"no lateness recorded in {checkpoint}/progress: the advisor needs a query with withWatermark that ran with "
        "spark.statestream.lateness.enabled=true (and its progress history on, the default); set it and run the query "
        "for a few batches first"
    )


# -- restatement -------------------------------------------------------------------------------------


def restate_not_possible_error(aggregate: str | None, why: str) -> CheckpointError:
    """A restatement that cannot be computed: the query has no aggregation (``aggregate`` None),
    or one of its aggregates has buffers whose merge depends on the rows' order."""
    if aggregate is None:
        return CheckpointError(f"cannot restate: {why}; restate needs a streaming aggregation whose late rows went to the ledger")
    return CheckpointError(
        f"cannot restate the aggregate {aggregate}: its buffers ({why}) do not merge the same whatever the order of the rows, "
        "so late rows cannot be added to what was emitted; restate a query without it"
    )
