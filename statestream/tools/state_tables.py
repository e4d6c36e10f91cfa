"""Each state store of a stopped query's checkpoint as an Arrow table, and an in-place edit of it.

The debugging hook of the Python state operators (a ``transformWithState`` processor keeps one
store per state variable, plus its timers) that works for every operator's stores: it lists the
operators and their stores, reads a store as of any batch still retained, and replaces the last
committed batch's content of one store. It reads through the engine's own classes
(:class:`~statestream.checkpoint.commits.CommitLog`, the operator metadata,
:class:`~statestream.state.provider.StateStoreProvider`), so what it shows is what a restart
would load. It runs on the driver and reads every partition's files in turn: a debugging tool
for one store, not the Spark-parallel state reader.

The tables are the stored layout: a ``partition_id`` column, then the store's key columns and
value columns. For a ``transformWithState`` variable the key columns are the grouping keys (plus
``__index`` for a list element, ``__userKey`` for a map entry) and the values ``__value`` (a
struct of the variable's schema) and, with a TTL, ``__ttlExpirationMs``; the timers store
(``$eventTimers_keyToTimestamp`` / ``$procTimers_keyToTimestamp``) keys each timer by the
grouping keys and ``__expiryTimestampMs``.

An edit writes the new content as a snapshot of the version that the last committed batch
produced, so the next run starts from it. The query must be stopped. A key must stay in the
partition it was read from: Spark's exchange places a key in ``pmod(hash(keys), N)``, and a
row in another partition would never meet its key's input.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import state_partitions_of_batch
from statestream.errors import (
    batch_not_committed_state_error,
    no_committed_state_error,
    no_state_operator_error,
    no_store_files_error,
    store_not_declared_error,
)
from statestream.state.provider import StateStoreProvider, stored_schemas
from statestream.state.schema import (
    read_all_operator_metadata,
    read_dormant_stores,
    read_operator_properties,
    read_stores_first_batch,
)
from statestream.state.store import StateStoreId

__all__ = ["PARTITION_COLUMN", "StateTables", "store_begins_at", "stored_version"]

log = logging.getLogger(__name__)

#: the column that says which state partition a row belongs to
PARTITION_COLUMN = "partition_id"


def store_begins_at(state_root: str, operator_id: int, store_name: str) -> int | None:
    """The version a store began at: the batch that first declared it, as the operator
    properties record it (a transformWithState variable added on restart); 0 for other
    operators' stores; None where not recorded (inferred from the files)."""
    if read_operator_properties(state_root, operator_id) is None:
        return 0
    return (read_stores_first_batch(state_root, operator_id) or {}).get(store_name)


def stored_version(state_root: str, operator_id: int, store_name: str, version: int) -> int:
    """The version whose files hold ``version`` of the store: a variable that the running
    processor does not declare kept its content from the version its files stop at, until
    the batch that declares it again (whose snapshot carries that content on)."""
    frozen, again = read_dormant_stores(state_root, operator_id).get(store_name, (None, None))
    if frozen is not None and version > frozen and (again is None or version <= again):
        return frozen
    return version


class StateTables:
    """The state stores under one checkpoint (``checkpoint`` is the query's checkpoint location)."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.state_root = CheckpointFileManager(checkpoint).child("state").root
        self._root_files = CheckpointFileManager(checkpoint)
        self._commits = CommitLog(self._root_files.child("commits"))

    # -- what there is ---------------------------------------------------------------------------

    def last_committed_batch(self) -> int:
        """The newest batch of the commit log (the state a restart resumes from)."""
        latest = self._commits.get_latest_batch_id()
        if latest is None:
            raise no_committed_state_error(self._root_files.display("commits"))
        return latest

    def operators(self) -> dict[int, tuple[str, ...]]:
        """Operator id -> its store names, from the operator metadata files."""
        return {
            op: tuple(s.store_name for s in md.state_store_info)
            for op, md in sorted(read_all_operator_metadata(self.state_root).items())
        }

    def stores(self, operator_id: int = 0) -> tuple[str, ...]:
        """The store names of one operator (a transformWithState's variables and timers)."""
        ops = self.operators()
        if operator_id not in ops:
            raise no_state_operator_error(self.checkpoint, operator_id, ops)
        return ops[operator_id]

    def _partitions(self, operator_id: int, version: int) -> list[int]:
        """The partitions holding ``version`` of an operator's state (see
        ``state_partitions_of_batch``: a repartition leaves higher partitions behind)."""
        return state_partitions_of_batch(self._root_files, operator_id, version - 1)

    def _provider(self, operator_id: int, partition: int, store_name: str) -> StateStoreProvider | None:
        sid = StateStoreId(self.state_root, operator_id, partition, store_name)
        schemas = stored_schemas(sid)
        return None if schemas is None else StateStoreProvider(sid, *schemas)

    def _begins_at(self, operator_id: int, store_name: str) -> int | None:
        return store_begins_at(self.state_root, operator_id, store_name)

    def _stored_version(self, operator_id: int, store_name: str, version: int) -> int:
        return stored_version(self.state_root, operator_id, store_name, version)

    def _version(self, batch_id: int | None) -> int:
        last = self.last_committed_batch()
        batch = last if batch_id is None else batch_id
        if batch < 0 or batch > last:
            raise batch_not_committed_state_error(batch, self.checkpoint, last)
        return batch + 1  # the state version batch b commits

    # -- read and edit ---------------------------------------------------------------------------

    def read(self, store_name: str = "default", operator_id: int = 0, batch_id: int | None = None) -> pa.Table:
        """The store's content after ``batch_id`` (default: the last committed batch), every
        partition, with a leading ``partition_id`` column."""
        self.stores(operator_id)
        version = self._version(batch_id)
        begins_at = self._begins_at(operator_id, store_name)
        version = self._stored_version(operator_id, store_name, version)
        parts: list[pa.Table] = []
        for partition in self._partitions(operator_id, version):
            provider = self._provider(operator_id, partition, store_name)
            if provider is None:
                continue
            table = provider.get_read_store(version, begins_at=begins_at).table()
            parts.append(table.add_column(0, PARTITION_COLUMN, pa.array([partition] * table.num_rows, pa.int32())))
        if not parts:
            raise no_store_files_error(operator_id, self.checkpoint, store_name)
        return pa.concat_tables(parts, promote_options="permissive")

    def write(self, table: pa.Table, store_name: str = "default", operator_id: int = 0) -> None:
        """Replace the store's content at the last committed batch with ``table`` (the layout
        :meth:`read` returns). Every partition of the store is rewritten: a partition with no row
        in ``table`` becomes empty."""
        self.stores(operator_id)
        version = self._version(None)
        if self._stored_version(operator_id, store_name, version) != version:
            raise store_not_declared_error(store_name, operator_id)
        if PARTITION_COLUMN not in table.column_names:
            raise ValueError(f"the edited table needs the {PARTITION_COLUMN!r} column that read() gives")
        partitions = self._partitions(operator_id, version)
        given = set(table.column(PARTITION_COLUMN).to_pylist())
        unknown = sorted(p for p in given if p not in partitions)
        if unknown:
            raise ValueError(f"partition ids {unknown} do not exist in operator {operator_id}; it has partitions {partitions}")
        for partition in partitions:
            provider = self._provider(operator_id, partition, store_name)
            rows = table.filter(pc.equal(table.column(PARTITION_COLUMN), partition)).drop_columns([PARTITION_COLUMN])
            if provider is None:
                if rows.num_rows:
                    raise ValueError(f"partition {partition} of operator {operator_id} has no files of store {store_name!r}: its rows cannot be written")
                continue
            if rows.column_names != provider.schema.names:
                raise ValueError(f"the edited table's columns {rows.column_names} are not the store's {provider.schema.names}")
            try:
                rows = rows.cast(provider.schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise ValueError(f"the edited table does not fit store {store_name!r}'s schema {provider.schema}: {exc}") from exc
            provider.replace_version(version, rows)
        log.info("replaced store %r of operator %d at version %d (%d rows)", store_name, operator_id, version, table.num_rows)
