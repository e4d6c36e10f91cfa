"""The rules of an offline repartition, without Spark: when a checkpoint is refused (Spark's
``STATE_REPARTITION_INVALID_*`` classes and texts), which batch it bases on, and which key columns
Spark's exchange hashes for each kind of store."""

from __future__ import annotations

import pyarrow as pa
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


# -- deduplication keys, which the state holds binary-comparable ----------------------------------

DEDUP_KEYS = pa.table({
    "d": pa.array([-0.0, 0.0, float("nan"), None, 1.5], pa.float64()),
    "f": pa.array([-0.0, 1.0, None, 2.0, float("nan")], pa.float32()),
    "s": pa.array(
        [{"x": -0.0, "y": 1}, None, {"x": 2.0, "y": None}, {"x": None, "y": 3}, {"x": 1.0, "y": 4}],
        pa.struct([("x", pa.float64()), ("y", pa.int64())]),
    ),
    "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
})


def _spark_keys(table: pa.Table) -> dict:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(table.schema).jsonValue()


def _bits(column: pa.Array) -> list:
    """Values compared bit for bit (-0.0 is not 0.0, NaN equals NaN)."""
    import struct

    def one(v):
        if isinstance(v, float):
            return struct.pack("<d", v)
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        return v

    return [one(v) for v in column.to_pylist()]


@pytest.mark.parametrize("operator", ["dedupe", "dedupeWithinWatermark"])
def test_dedup_keys_are_hashed_as_the_query_had_them(operator):
    """Spark's exchange hashed the key values (its hash of -0.0 is that of 0.0), the state holds
    their bits: repartition decodes them, bit for bit, before Spark hashes them."""
    from statestream.operators.dedup import binary_comparable
    from statestream.runtime.state_repartition import hash_input, hashed_key_columns

    stored = binary_comparable(DEDUP_KEYS)
    assert stored.schema.field("d").type == pa.int64()  # what the store holds
    hashed, key_types = hashed_key_columns("ckpt", 0, operator, stored.schema, 4, _spark_keys(DEDUP_KEYS))
    assert hashed == DEDUP_KEYS.schema
    decoded = hash_input(stored, 4, key_types)
    for got, want in zip(decoded, DEDUP_KEYS.columns):
        assert got.type == want.type and _bits(got) == _bits(want.combine_chunks())


def test_other_keys_are_hashed_as_stored():
    from statestream.runtime.state_repartition import hash_input, hashed_key_columns

    keys = pa.table({"k": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    spark_keys = _spark_keys(keys)
    for operator, spark in [("stateStoreSave", spark_keys), ("dedupe", spark_keys), ("dedupe", None)]:
        hashed, key_types = hashed_key_columns("ckpt", 0, operator, keys.schema, 2, spark)
        assert hashed == keys.schema and key_types is None
        assert hash_input(keys, 2, key_types) == [c.combine_chunks() for c in keys.columns]
    # an aggregation's double keys are stored as doubles (normalised as Spark's exchange saw them)
    doubles = pa.table({"d": pa.array([1.0], pa.float64())})
    assert hashed_key_columns("ckpt", 0, "stateStoreSave", doubles.schema, 1, _spark_keys(doubles)) == (doubles.schema, None)


def _dedup_checkpoint(tmp_path, keys: pa.Table) -> str:
    """A stopped dropDuplicates(keys) query at batch 1 with 2 state partitions, its state in
    partition 0 (version 2) as the dedup step stores it."""
    from statestream.operators.dedup import binary_comparable
    from statestream.state import schema as S
    from statestream.state.provider import StateStoreProvider
    from statestream.state.store import StateStoreId

    where, _, _ = logs(tmp_path, [2, 2], [0, 1])
    root = str(tmp_path / "state")
    stored = binary_comparable(keys)
    value = pa.schema([pa.field("__dummy__", pa.null())])
    S.write_state_schema(root, 0, _spark_keys(keys), {"type": "struct", "fields": [{"name": "__dummy__", "type": "void", "nullable": True, "metadata": {}}]})
    S.write_operator_metadata(root, S.OperatorStateMetadata(0, "dedupe", (S.StateStoreMetadata("default", 0, 2),)))
    provider = StateStoreProvider(StateStoreId(root, 0, 0), stored.schema, value)
    provider.replace_version(2, pa.Table.from_arrays([*stored.columns, pa.nulls(stored.num_rows)], schema=pa.schema([*stored.schema, *value])))
    return where


def test_dedup_array_keys_are_refused_before_anything_is_written(tmp_path):
    """An array key is stored as bytes with no decoding yet: Spark's hash of it cannot be
    computed, so the repartition is refused up front, naming the operator and the column (not as
    a damaged store), and the checkpoint is left as it was."""
    from statestream.runtime.state_repartition import OfflineStateRepartitionRunner

    keys = pa.table({"tags": pa.array([[1, 2], [], None], pa.list_(pa.int64())), "n": pa.array([1, 2, 3], pa.int64())})
    where = _dedup_checkpoint(tmp_path, keys)
    runner = OfflineStateRepartitionRunner(None, where)  # refused before any Spark job
    with pytest.raises(StatestreamIllegalStateException) as err:
        runner.run(3)
    assert err.value.getCondition() == "STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_STATEFUL_OPERATOR"
    text = str(err.value)
    assert "dedupe (operator 0: its key column 'tags'" in text and "cannot compute Spark's hash" in text, text
    assert runner.offset_log.get_latest_batch_id() == 1  # no repartition batch was written
    assert not CheckpointFileManager(where).exists(".statestream-repartition")


def test_dedup_double_keys_are_moved_decoded(tmp_path):
    """The stores a repartition moves: a dedup store with double keys carries the types to
    decode them with, and its hashed columns read back as the query's values."""
    from statestream.runtime.state_repartition import OfflineStateRepartitionRunner, decide, hash_input, _old_table

    keys = DEDUP_KEYS.select(["d", "n"])
    where = _dedup_checkpoint(tmp_path, keys)
    runner = OfflineStateRepartitionRunner(None, where)
    step = decide(where, runner.offset_log, runner.commit_log, 3)
    from statestream.state.schema import read_all_operator_metadata

    state_root = str(tmp_path / "state")
    [(store, hashed)] = runner._stores(step, state_root, runner.fm.child("work"), read_all_operator_metadata(state_root))
    assert hashed == keys.schema and store.key_types == ("double", "long")
    got = hash_input(_old_table(store, 0), store.hash_keys, store.key_types)
    assert _bits(got[0]) == _bits(keys.column("d").combine_chunks())
