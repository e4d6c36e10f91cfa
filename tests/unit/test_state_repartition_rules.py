"""The rules of an offline repartition, without Spark: when a checkpoint is refused (Spark's
``STATE_REPARTITION_INVALID_*`` classes and texts), which batch it bases on, and which key columns
Spark's exchange hashes for each kind of store."""

from __future__ import annotations

import pytest

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeq, OffsetSeqLog, OffsetSeqMetadata, is_repartition_batch
from statestream.errors import StatestreamIllegalArgumentException, StatestreamIllegalStateException
from statestream.runtime.state_repartition import decide, hash_key_count, repartition_state


def logs(tmp_path, batches: list[int], committed: list[int]) -> tuple[str, OffsetSeqLog, CommitLog]:
    """A checkpoint whose offset log has ``batches`` (value: the pinned partition count, in
    order from batch 0) and whose commit log has ``committed``."""
    fm = CheckpointFileManager(str(tmp_path))
    offsets, commits = OffsetSeqLog(fm.child("offsets")), CommitLog(fm.child("commits"))
    for b, parts in enumerate(batches):
        offsets.add(b, OffsetSeq([b * 10], OffsetSeqMetadata(b * 1000, 5, {"spark.sql.shuffle.partitions": str(parts)})))
    for b in committed:
        commits.add(b, CommitMetadata(b * 1000 + 1))
    return str(tmp_path), offsets, commits


def test_a_committed_checkpoint_gets_the_next_batch(tmp_path):
    where, offsets, commits = logs(tmp_path, [4, 4, 4], [0, 1, 2])
    step = decide(where, offsets, commits, 7)
    assert (step.base_batch, step.repartition_batch, step.old_partitions, step.new_partitions, step.resume) == (2, 3, 4, 7, False)


def test_an_interrupted_repartition_resumes_with_the_same_count_only(tmp_path):
    where, offsets, commits = logs(tmp_path, [4, 4, 7], [0, 1])
    assert is_repartition_batch(offsets, 2) and not is_repartition_batch(offsets, 1)
    step = decide(where, offsets, commits, 7)
    assert (step.base_batch, step.repartition_batch, step.old_partitions, step.resume) == (1, 2, 4, True)
    with pytest.raises(StatestreamIllegalStateException) as err:
        decide(where, offsets, commits, 3)
    assert err.value.getCondition() == "STATE_REPARTITION_INVALID_CHECKPOINT.LAST_BATCH_ABANDONED_REPARTITION"
    assert err.value.getMessageParameters() == {
        "checkpointLocation": where, "lastBatchId": "2", "lastBatchShufflePartitions": "7", "numPartitions": "3",
    }
    assert str(err.value).startswith(
        "[STATE_REPARTITION_INVALID_CHECKPOINT.LAST_BATCH_ABANDONED_REPARTITION] The provided checkpoint location "
        f"'{where}' is in an invalid state. The last batch ID 2 is a repartition batch with 7 shuffle partitions"
    )
    assert str(err.value).endswith("SQLSTATE: 55019")


@pytest.mark.parametrize(
    "batches, committed, count, sub, params",
    [
        ([], [], 5, "NO_COMMITTED_BATCH", {}),
        ([], [0], 5, "NO_BATCH_FOUND", {}),
        ([4, 4, 4], [0], 5, "LAST_BATCH_FAILED", {"lastBatchId": "2"}),
        ([4, 4], [0, 1], 4, "SHUFFLE_PARTITIONS_ALREADY_MATCH", {"batchId": "1", "numPartitions": "4"}),
    ],
)
def test_refusals(tmp_path, batches, committed, count, sub, params):
    where, offsets, commits = logs(tmp_path, batches, committed)
    with pytest.raises(StatestreamIllegalStateException) as err:
        decide(where, offsets, commits, count)
    assert err.value.getCondition() == f"STATE_REPARTITION_INVALID_CHECKPOINT.{sub}"
    assert err.value.getMessageParameters() == {"checkpointLocation": where, **params}
    assert err.value.getSqlState() == "55019"


def test_a_failed_last_batch_may_be_skipped_on_request(tmp_path):
    where, offsets, commits = logs(tmp_path, [4, 4, 4], [0])
    step = decide(where, offsets, commits, 5, enforce_exactly_once_sink=False)
    assert (step.base_batch, step.repartition_batch, step.resume) == (0, 3, False)


@pytest.mark.parametrize(
    "location, count, sub, parameter",
    [(None, 5, "IS_NULL", "checkpointLocation"), ("", 5, "IS_EMPTY", "checkpointLocation"), ("x", 0, "IS_NOT_GREATER_THAN_ZERO", "numPartitions")],
)
def test_parameters(location, count, sub, parameter):
    with pytest.raises(StatestreamIllegalArgumentException) as err:
        repartition_state(None, location, count)  # type: ignore[arg-type]
    assert err.value.getCondition() == f"STATE_REPARTITION_INVALID_PARAMETER.{sub}"
    assert err.value.getMessageParameters() == {"parameter": parameter}
    assert str(err.value).startswith(f"[STATE_REPARTITION_INVALID_PARAMETER.{sub}] The repartition parameter {parameter} is invalid: ")


@pytest.mark.parametrize(
    "store, names, prefix, expected",
    [
        ("default", ["window", "k"], 0, 2),  # an aggregation: its grouping keys
        ("default", ["k", "sessionStart"], 1, 1),  # session windows: the keys before the session
        ("left-keyToNumValues", ["k"], 0, 1),
        ("left-keyWithIndexToValue", ["k", "index"], 0, 1),  # a join's row index is not hashed
        ("counts", ["k", "__userKey"], 0, 1),  # a map state's user key is not
        ("seen", ["k", "__index"], 0, 1),
        ("$eventTimers_keyToTimestamp", ["k", "__expiryTimestampMs"], 0, 1),
    ],
)
def test_hashed_key_columns(store, names, prefix, expected):
    assert hash_key_count("any", store, names, prefix) == expected


def test_an_interrupted_repartition_after_skipped_failed_batches_resumes(tmp_path):
    """--skip-failed-batch: batch 2 failed, the repartition batch 3 was cut short; only its own
    count finishes it (a start does so too), another one is refused."""
    where, offsets, commits = logs(tmp_path, [4, 4, 4, 7], [0, 1])
    step = decide(where, offsets, commits, 7, enforce_exactly_once_sink=True)
    assert (step.base_batch, step.repartition_batch, step.resume) == (1, 3, True)
    with pytest.raises(StatestreamIllegalStateException, match="LAST_BATCH_ABANDONED_REPARTITION"):
        decide(where, offsets, commits, 5, enforce_exactly_once_sink=False)
