"""Offline repartition of a stopped query's state (Spark's ``OfflineStateRepartitionRunner``).

A stateful query's state is split into as many partitions as ``spark.sql.shuffle.partitions``
had when the checkpoint was created, and Spark pins that count in the offset log: changing the
conf later changes nothing. Repartitioning rewrites every operator's state into a new number of
partitions and records it, so the next start runs with it.

How (the layout of Spark's own offline repartition, which writes a batch of its own):

1. The last committed batch ``B`` is the base. A *repartition batch* ``R = B + 1`` is written to
   the offset log first: ``B``'s offsets, watermark, timestamp and confs, except the new
   ``spark.sql.shuffle.partitions``. Its sources read nothing, its sink writes nothing.
2. A Spark job per store reads each old partition's state (version ``B + 1``) in a task, hands
   the keys to Spark to compute ``pmod(hash(keys), N)`` (the partition Spark's exchange gives a
   key, so each key's state stays where its input rows arrive), checks that the same hash
   modulo the old count gives back the partition each key was read from (a store whose keys do
   not follow Spark's hash is refused rather than scattered; a deduplication's keys, which its
   state holds binary-comparable, are hashed decoded, and a key type with no decoding yet is
   refused before anything is written), and writes each key's rows into
   the new partition's share; a second job joins the shares of each new partition into a
   snapshot of version ``R + 1``.
3. Each operator's metadata records ``N``; then ``commits/R`` (with ``B``'s watermark) makes the
   repartition visible.

Nothing before step 3 changes what a restart loads: the old state (version ``B + 1``) is never
touched, so an interrupted repartition leaves a checkpoint whose last batch is an uncommitted
repartition batch; running the repartition again with the same count, or starting the query,
finishes it (the shares and snapshots are simply written again). Partitions beyond ``N`` keep
their old files, for reading the state as of earlier batches.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import (
    SHUFFLE_PARTITIONS,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    is_repartition_batch,
    partitions_of_batch,
)
from statestream.checkpoint.writer_lock import CheckpointWriterLock
from statestream.errors import (
    concurrent_stream_log_update_error,
    key_not_in_partition_error,
    repartition_invalid_checkpoint_error,
    repartition_invalid_parameter_error,
)
from statestream.faults import crash_point
from statestream.operators.dedup import (
    StreamingDeduplicateExec,
    StreamingDeduplicateWithinWatermarkExec,
    binary_comparable_decoded,
    binary_comparable_decoded_keys,
)
from statestream.operators.partition_routes import state_partition_id
from statestream.state import schema as S
from statestream.state.provider import StateStoreProvider, stored_schemas
from statestream.state.schema import (
    SINGLE_PARTITION_OPERATORS,
    read_all_operator_metadata,
    read_dormant_stores,
    read_operator_properties,
    read_stores_first_batch,
    set_operator_partitions,
)
from statestream.state.store import StateStoreId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "OfflineStateRepartitionRunner",
    "RepartitionResult",
    "is_repartition_batch",
    "plan_repartition",
    "repartition_state",
]

log = logging.getLogger(__name__)

#: where the shares of the new partitions are written while a repartition runs
WORK_DIR = ".statestream-repartition"
#: key columns of the Python state stores that address an entry below a grouping key
_ENTRY_KEY_COLUMNS = frozenset({"__index", "__userKey", "__expiryTimestampMs"})

# -- rules (no Spark) ------------------------------------------------------------------------------


def hash_key_count(operator_name: str, store_name: str, key_names: list[str], num_cols_prefix_key: int) -> int:
    """How many leading key columns Spark's exchange hashes for a store: the grouping or join
    keys, without what addresses an entry under them (a join row's index, a session's start, a
    Python state variable's list index, map key or timer time)."""
    if store_name.endswith("keyWithIndexToValue"):
        return len(key_names) - 1
    if num_cols_prefix_key > 0:
        return num_cols_prefix_key
    n = len(key_names)
    while n > 0 and key_names[n - 1] in _ENTRY_KEY_COLUMNS:
        n -= 1
    return n


def hashed_key_columns(
    checkpoint: str,
    operator_id: int,
    operator_name: str,
    key_schema: pa.Schema,
    hash_keys: int,
    spark_key_schema: Mapping[str, Any] | None,
) -> tuple[pa.Schema, tuple[Any, ...] | None]:
    """The ``hash_keys`` leading key columns as Spark's exchange hashed them, and the Spark types
    to decode the stored columns with (None: they are hashed as stored).

    A deduplication stores its keys binary-comparable (``operators.dedup.binary_comparable``:
    floating-point values as their bits, lists as bytes), while the exchange hashed the values
    (Spark's hash of ``-0.0`` is that of ``0.0``, of an array that of its elements): such
    columns are decoded first (``spark_key_schema``: the operator's key schema file). A key
    column that has no decoding yet (an array) is refused before anything is written, naming
    the operator and the column: its keys' partitions cannot be computed."""
    hashed = pa.schema(list(key_schema)[:hash_keys])
    if operator_name not in (StreamingDeduplicateExec.operator_name, StreamingDeduplicateWithinWatermarkExec.operator_name):
        return hashed, None
    spark_fields = (spark_key_schema or {}).get("fields") or []
    if len(spark_fields) < hash_keys:
        return hashed, None  # no schema file to decode by (the hash check still guards the move)
    types = tuple(f.get("type") for f in spark_fields[:hash_keys])
    decoded = []
    for f, spark_type in zip(hashed, types):
        column = binary_comparable_decoded(pa.array([], type=f.type), spark_type)
        if column is None:
            raise repartition_invalid_checkpoint_error(
                "UNSUPPORTED_STATEFUL_OPERATOR", checkpoint,
                operatorName=(
                    f"{operator_name} (operator {operator_id}: its key column {f.name!r}, {S.render_data_type(spark_type)}, is "
                    "stored byte-encoded, and repartition cannot compute Spark's hash of such a key from it yet; "
                    "nothing was changed)"
                ),
            )
        decoded.append(pa.field(f.name, column.type, f.nullable))
    if all(d.type == f.type for d, f in zip(decoded, hashed)):
        return hashed, None
    return pa.schema(decoded), types


def hash_input(table: pa.Table, hash_keys: int, key_types: tuple[Any, ...] | None) -> list[pa.Array]:
    """A store's ``hash_keys`` leading key columns as Spark's exchange hashed them (decoded by
    ``key_types``, see :func:`hashed_key_columns`)."""
    columns = [c.combine_chunks() for c in table.columns[:hash_keys]]
    if key_types is None:
        return columns

    decoded = binary_comparable_decoded_keys(columns, key_types)
    assert not isinstance(decoded, int), "a key without decoding is refused before the move (hashed_key_columns)"
    return decoded


@dataclass(frozen=True)
class RepartitionStep:
    """What a repartition does (decided from the logs, before anything is written)."""

    base_batch: int
    repartition_batch: int
    old_partitions: int
    new_partitions: int
    #: the repartition batch's offset entry is already written (an interrupted repartition)
    resume: bool


def decide(location: str, offset_log: OffsetSeqLog, commit_log: CommitLog, num_partitions: int, enforce_exactly_once_sink: bool = True) -> RepartitionStep:
    """The repartition of a checkpoint to ``num_partitions``, or Spark's refusal."""
    last_commit = commit_log.get_latest_batch_id()
    if last_commit is None:
        raise repartition_invalid_checkpoint_error("NO_COMMITTED_BATCH", location)
    last = offset_log.get_latest_batch_id()
    if last is None:
        raise repartition_invalid_checkpoint_error("NO_BATCH_FOUND", location)
    base = last_commit
    resume = False
    if last > last_commit:
        # an interrupted repartition: its batch follows the last commit, or the failed batches
        # it skipped (--skip-failed-batch); it is finished with its own count only
        if is_repartition_batch(offset_log, last):
            pinned = partitions_of_batch(offset_log.get(last))
            if pinned != num_partitions:
                raise repartition_invalid_checkpoint_error(
                    "LAST_BATCH_ABANDONED_REPARTITION", location,
                    lastBatchId=last, lastBatchShufflePartitions=pinned, numPartitions=num_partitions,
                )
            resume = True
        elif enforce_exactly_once_sink:
            raise repartition_invalid_checkpoint_error("LAST_BATCH_FAILED", location, lastBatchId=last)
    base_entry = offset_log.get(base)
    if base_entry is None:
        raise repartition_invalid_checkpoint_error("OFFSET_SEQ_NOT_FOUND", location, batchId=base)
    old = partitions_of_batch(base_entry)
    if old is None:
        raise repartition_invalid_checkpoint_error("MISSING_OFFSET_SEQ_METADATA", location, version=1, batchId=base)
    if not resume and old == num_partitions:
        raise repartition_invalid_checkpoint_error("SHUFFLE_PARTITIONS_ALREADY_MATCH", location, batchId=base, numPartitions=num_partitions)
    return RepartitionStep(base, last if resume else last + 1, old, num_partitions, resume)


# -- the Spark jobs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Store:
    """One store to move (picklable, sent to the tasks)."""

    state_root: str
    operator_id: int
    store_name: str
    #: the version to read in the old partitions, and what the store began at
    version: int
    begins_at: int | None
    old_partitions: int
    new_partitions: int
    new_version: int
    work_root: str
    hash_keys: int
    single_partition: bool
    #: the Spark types to decode the hashed key columns with (``hash_input``); None: as stored
    key_types: tuple[Any, ...] | None = None


def _provider(store: _Store, partition: int) -> Any:
    sid = StateStoreId(store.state_root, store.operator_id, partition, store.store_name)
    schemas = stored_schemas(sid)
    return None if schemas is None else StateStoreProvider(sid, *schemas)


def _old_table(store: _Store, partition: int) -> pa.Table | None:
    provider = _provider(store, partition)
    if provider is None:
        return None
    return provider.get_read_store(store.version, begins_at=store.begins_at).table()


def _share_name(new_partition: int, old_partition: int) -> str:
    return f"{new_partition}/{old_partition}.arrow"


def _write_ipc(files: CheckpointFileManager, rel: str, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    files.write_atomic(rel, sink.getvalue().to_pybytes())


def _read_ipc(files: CheckpointFileManager, rel: str) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(files.read_bytes(rel))).read_all()


def _split_store(spark: "SparkSession", store: _Store, hashed_schema: pa.Schema) -> int:
    """Job 1 of a store: each old partition's rows split into the new partitions' shares, each
    key placed by Spark's hash (``hashed_schema``: the hashed key columns as Spark saw them, see
    :func:`hashed_key_columns`). Returns the rows moved."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    hashed = pa.schema([pa.field(f"_k{i}", f.type, True) for i, f in enumerate(hashed_schema)])
    wire = StructType([StructField("_p", IntegerType()), StructField("_i", LongType()), *from_arrow_schema(hashed).fields])

    def emit_keys(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                table = _old_table(store, partition)
                if table is None or table.num_rows == 0:
                    continue
                n = table.num_rows
                columns = [pa.array(np.full(n, partition, dtype=np.int32)), pa.array(np.arange(n, dtype=np.int64))]
                columns += hash_input(table, store.hash_keys, store.key_types)
                yield from pa.Table.from_arrays(columns, schema=pa.schema([pa.field("_p", pa.int32()), pa.field("_i", pa.int64()), *hashed])).to_batches()

    done = StructType([StructField("_p", IntegerType()), StructField("rows", LongType())])

    def write_shares(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts, idx, new, check = [], [], [], []
        for batch in batches:
            parts.append(batch.column(0).to_numpy())
            idx.append(batch.column(1).to_numpy())
            new.append(batch.column(2).to_numpy())
            check.append(batch.column(3).to_numpy())
        if not parts:
            return
        partition = int(parts[0][0])
        order = np.concatenate(idx)
        target = np.empty(len(order), dtype=np.int32)
        target[order] = np.concatenate(new)
        back = np.empty(len(order), dtype=np.int32)
        back[order] = np.concatenate(check)
        if not (back == partition).all():
            bad = int(np.argmax(back != partition))
            raise key_not_in_partition_error(partition, store.operator_id, store.store_name, int(back[bad]), store.old_partitions)
        table = _old_table(store, partition)
        assert table is not None and table.num_rows == len(order)
        files = CheckpointFileManager(store.work_root)
        for np_ in np.unique(target):
            _write_ipc(files, _share_name(int(np_), partition), table.filter(pa.array(target == np_)))
        yield pa.record_batch([pa.array([partition], pa.int32()), pa.array([len(order)], pa.int64())], names=["_p", "rows"])

    keys = [F.col(f"_k{i}") for i in range(store.hash_keys)]
    ids = spark.range(0, store.old_partitions, 1, store.old_partitions).select(F.col("id").cast("int"))
    shaped = ids.mapInArrow(emit_keys, wire).select(
        "_p", "_i",
        state_partition_id(keys, store.new_partitions).alias("_n"),
        state_partition_id(keys, store.old_partitions).alias("_c"),
    )
    rows = shaped.mapInArrow(write_shares, done).collect()
    return sum(r["rows"] for r in rows)


def _build_snapshots(spark: "SparkSession", stores: list[_Store]) -> None:
    """Job 2: each new partition of each store becomes a snapshot of the repartition batch's
    version, made of its shares (empty where no key lands)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    tasks = [(i, p) for i, s in enumerate(stores) for p in range(1 if s.single_partition else s.new_partitions)]

    def build(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for t in batch.column(0).to_pylist():
                i, partition = tasks[t]
                store = stores[i]
                schemas = _schemas(store)
                assert schemas is not None  # only stores with files are moved
                provider = StateStoreProvider(StateStoreId(store.state_root, store.operator_id, partition, store.store_name), *schemas)
                if store.single_partition:
                    table = _old_table(store, 0)
                else:
                    files = CheckpointFileManager(store.work_root)
                    shares = [
                        _read_ipc(files, _share_name(partition, old))
                        for old in range(store.old_partitions) if files.exists(_share_name(partition, old))
                    ]
                    table = pa.concat_tables(shares) if shares else None
                provider.replace_version(store.new_version, table if table is not None else provider.schema.empty_table())
                crash_point("repartition_snapshot_written", store.new_version - 1, partition)
                yield pa.record_batch([pa.array([t], pa.int32())], names=["t"])

    ids = spark.range(0, len(tasks), 1, max(1, min(len(tasks), 64)))
    from pyspark.sql import functions as F

    ids.select(F.col("id").cast("int")).mapInArrow(build, StructType([StructField("t", IntegerType())])).collect()


def _schemas(store: _Store) -> tuple[pa.Schema, pa.Schema] | None:
    """A store's key and value schemas, from its newest file in any old partition; None when
    no partition has a file of it (a damaged file raises, naming it)."""
    for partition in range(store.old_partitions):
        provider = _provider(store, partition)
        if provider is not None:
            return provider.key_schema, provider.value_schema
    return None


@dataclass(frozen=True)
class RepartitionResult:
    """What a repartition did."""

    checkpoint: str
    repartition_batch: int
    base_batch: int
    old_partitions: int
    new_partitions: int
    #: (operator id, store name) -> rows moved
    rows: dict[tuple[int, str], int]


class OfflineStateRepartitionRunner:
    """Repartitions the state of a stopped query's checkpoint (see the module docstring)."""

    def __init__(self, spark: "SparkSession", checkpoint: str, progress: "Callable[[int, int, str], None] | None" = None) -> None:
        self.spark = spark
        self.checkpoint = checkpoint
        #: told (steps done, steps in all, the next step) before each step of the rewrite
        self.progress = progress or (lambda done, total, what: None)
        self.fm = CheckpointFileManager(checkpoint)
        self.offset_log = OffsetSeqLog(self.fm.child("offsets"))
        self.commit_log = CommitLog(self.fm.child("commits"))

    def run(self, num_partitions: int, enforce_exactly_once_sink: bool = True, *, lock: bool = True) -> RepartitionResult:
        """Repartition to ``num_partitions`` (or finish an interrupted repartition to it).
        ``lock``: take the checkpoint's writer lock (a running query refuses it); False when the
        caller is the query's own start, which holds it."""
        step = decide(self.checkpoint, self.offset_log, self.commit_log, num_partitions, enforce_exactly_once_sink)
        writer = CheckpointWriterLock(self.fm)
        if lock:
            writer.acquire(f"repartition-{uuid.uuid4()}", str(uuid.uuid4()))
        try:
            return self._run(step)
        finally:
            if lock:
                writer.release()

    def _run(self, step: RepartitionStep) -> RepartitionResult:
        base_entry = self.offset_log.get(step.base_batch)
        assert base_entry is not None and base_entry.metadata is not None
        state_root = self.fm.child("state").root
        work = self.fm.child(f"{WORK_DIR}/{step.repartition_batch}")
        operators = read_all_operator_metadata(state_root) if self.fm.exists("state") else {}
        stores = self._stores(step, state_root, work, operators)  # its refusals before anything is written
        if not step.resume:
            conf = dict(base_entry.metadata.conf)
            conf[SHUFFLE_PARTITIONS] = str(step.new_partitions)
            meta = OffsetSeqMetadata(base_entry.metadata.batch_watermark_ms, base_entry.metadata.batch_timestamp_ms, conf)
            if not self.offset_log.add(step.repartition_batch, OffsetSeq(list(base_entry.offsets), meta)):
                raise concurrent_stream_log_update_error(step.repartition_batch, self.offset_log.path_of(step.repartition_batch))
        crash_point("repartition_after_offsets", step.repartition_batch)
        self.fm.delete(f"{WORK_DIR}/{step.repartition_batch}")
        rows: dict[tuple[int, str], int] = {}
        splits = [(store, hashed_schema) for store, hashed_schema in stores if not store.single_partition]
        total = len(splits) + (1 if stores else 0)
        for i, (store, hashed_schema) in enumerate(splits):
            self.progress(i, total, f"splitting operator {store.operator_id}'s store {store.store_name}")
            rows[(store.operator_id, store.store_name)] = _split_store(self.spark, store, hashed_schema)
        if stores:
            self.progress(len(splits), total, "writing the new partitions' snapshots")
            _build_snapshots(self.spark, [s for s, _ in stores])
        self.progress(total, total, "done")
        if operators:
            set_operator_partitions(state_root, step.new_partitions)
        commit = self.commit_log.get(step.base_batch)

        self.commit_log.add(step.repartition_batch, commit if commit is not None else CommitMetadata())
        self.fm.delete(WORK_DIR)
        log.info(
            "repartitioned %s from %d to %d partitions in batch %d (%d rows)",
            self.checkpoint, step.old_partitions, step.new_partitions, step.repartition_batch, sum(rows.values()),
        )
        return RepartitionResult(self.checkpoint, step.repartition_batch, step.base_batch, step.old_partitions, step.new_partitions, rows)

    def _stores(self, step: RepartitionStep, state_root: str, work: CheckpointFileManager, operators: dict) -> list[tuple[_Store, pa.Schema]]:
        out = []
        spark_keys: dict[int, Any] = {}
        for op_id, md in sorted(operators.items()):
            python_state = read_operator_properties(state_root, op_id) is not None
            first = read_stores_first_batch(state_root, op_id) or {} if python_state else {}
            dormant = read_dormant_stores(state_root, op_id) if python_state else {}
            for name, (frozen, again) in sorted(dormant.items()):
                # a variable the last run does not declare keeps its files frozen in the old
                # partitions until a run declares it again: it cannot move with the others (one
                # declared again at or before the base batch has moved on, and moves)
                if frozen is not None and (again is None or again > step.base_batch):
                    raise repartition_invalid_checkpoint_error(
                        "UNSUPPORTED_STATEFUL_OPERATOR", self.checkpoint,
                        operatorName=f"{md.operator_name} (state variable {name} is not declared by the last run)",
                    )
            for info in md.state_store_info:
                store = _Store(
                    state_root=state_root,
                    operator_id=op_id,
                    store_name=info.store_name,
                    version=step.base_batch + 1,
                    begins_at=first.get(info.store_name) if python_state else 0,
                    old_partitions=step.old_partitions,
                    new_partitions=step.new_partitions,
                    new_version=step.repartition_batch + 1,
                    work_root=work.child(f"{op_id}/{info.store_name}").root,
                    hash_keys=0,
                    single_partition=md.operator_name in SINGLE_PARTITION_OPERATORS,  # partition 0 carried over
                )
                found = _schemas(store)
                if found is None:
                    continue  # a store that never wrote a file (no batch reached it)
                key_schema = found[0]
                from dataclasses import replace

                n = hash_key_count(md.operator_name, info.store_name, key_schema.names, info.num_cols_prefix_key)
                if op_id not in spark_keys:
                    stored = S.read_state_schema(state_root, op_id)
                    spark_keys[op_id] = None if stored is None else stored.key_schema
                hashed, key_types = hashed_key_columns(self.checkpoint, op_id, md.operator_name, key_schema, n, spark_keys[op_id])
                out.append((replace(store, hash_keys=n, key_types=key_types), hashed))
        return out


def check_parameters(checkpoint: Any, num_partitions: Any) -> None:
    """Spark's parameter checks of a repartition call."""
    if checkpoint is None:
        raise repartition_invalid_parameter_error("IS_NULL", "checkpointLocation")
    if not str(checkpoint).strip():
        raise repartition_invalid_parameter_error("IS_EMPTY", "checkpointLocation")
    if num_partitions is None:
        raise repartition_invalid_parameter_error("IS_NULL", "numPartitions")
    if int(num_partitions) <= 0:
        raise repartition_invalid_parameter_error("IS_NOT_GREATER_THAN_ZERO", "numPartitions")


def plan_repartition(checkpoint: Any, num_partitions: Any, enforce_exactly_once_sink: bool = True) -> RepartitionStep:
    """What a repartition of ``checkpoint`` would do, or Spark's refusal, from the logs alone
    (no Spark): the command line answers before it starts a Spark job."""
    check_parameters(checkpoint, num_partitions)
    fm = CheckpointFileManager(str(checkpoint))
    return decide(str(checkpoint), OffsetSeqLog(fm.child("offsets")), CommitLog(fm.child("commits")), int(num_partitions), enforce_exactly_once_sink)


def repartition_state(
    spark: "SparkSession", checkpoint: Any, num_partitions: Any, enforce_exactly_once_sink: bool = True,
    progress: "Callable[[int, int, str], None] | None" = None,
) -> RepartitionResult:
    """Repartition a stopped query's state to ``num_partitions`` (Spark's parameter checks and
    errors); see :class:`OfflineStateRepartitionRunner`. ``progress`` is told each step."""
    check_parameters(checkpoint, num_partitions)
    return OfflineStateRepartitionRunner(spark, str(checkpoint), progress).run(int(num_partitions), enforce_exactly_once_sink)
