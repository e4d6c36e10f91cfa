"""Restatement: an aggregation's emitted results corrected with the late rows the ledger kept.

With ``spark.statestream.lateRows.path`` set, every partial group a streaming aggregation drops
as late is kept in the late-row ledger (``operators/late_rows.py``). :func:`restate` merges,
for each window or key with such rows, the buffers its last emission came from (read from the
state's change feed: the key's last update before it left the state) with every late partial
group of that key, and finishes the merged buffers with the query's own final step. The result
is what the query would have emitted for that key had no row been late: what the same query with
a delay long enough for those rows emits.

Each restated row carries, beside the grouping columns and the corrected aggregates,
``emitted_batch`` (the batch of the key's last emission; null when every row of the key came
late, so nothing was emitted) and ``revision`` (the emissions of the key so far plus one). A
downstream table takes it with a ``MERGE`` on the grouping columns, replacing the row whose
revision is lower. Written with a batch id of its own to an idempotent sink (a ``foreachBatch``
that records the ids it wrote, a Delta ``txnVersion``), it lands exactly once.

Only buffers whose merge does not depend on the order of the rows can be restated (``count``,
``sum``, ``avg``, ``min``, ``max``, the variances and covariances, the bitwise ones,
``collect_set``, ``product``...); ``first``, ``last``, ``max_by``, ``collect_list`` and
aggregates written in Python are refused, by name.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeqLog
from statestream.checkpoint.query_record import read_query_record
from statestream.errors import no_checkpoint_error, restate_not_possible_error
from statestream.operators.aggregate import final_projection
from statestream.operators.aggregate_merge import merge_group_segments
from statestream.operators.stateful import StateStoreSaveExec
from statestream.plan import logical as L
from statestream.plan.incremental import state_writers
from statestream.plan.planner import plan_streaming_query
from statestream.state.keys import group_ids
from statestream.state.provider import StateStoreConf
from statestream.tools.state_reader import read_state_table

__all__ = ["ORDER_FREE_RULES", "restate", "merged_buffers"]

log = logging.getLogger(__name__)

#: merge rules whose result does not depend on the order of the merged rows
ORDER_FREE_RULES = frozenset(
    {"sum0", "sum", "min", "max", "moments", "covariance", "bit_and", "bit_or", "bit_xor", "union", "try_sum", "decimal_sum", "try_decimal_sum", "product"}
)

_EMITTED, _REVISION = "__restate_emitted_batch", "__restate_revision"


def merged_buffers(rows: pa.Table, key_columns: tuple[str, ...], groups: list[tuple[str, tuple[str, ...]]]) -> pa.Table:
    """One row per key of ``rows`` (its rows in the order to merge), each buffer group merged
    by its rule; the keys' other columns (those not in a group) from each key's first row.

    >>> t = pa.table({"k": [1, 2, 1], "n": [2, 5, 1], "mx": [7, 1, 9], "other": ["a", "b", "c"]})
    >>> merged_buffers(t, ("k",), [("sum0", ("n",)), ("max", ("mx",))]).to_pylist()
    [{'k': 1, 'n': 3, 'mx': 9, 'other': 'a'}, {'k': 2, 'n': 5, 'mx': 1, 'other': 'b'}]
    """
    n = rows.num_rows
    ids = group_ids([rows.column(k) for k in key_columns], n) if n else np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), ids))  # by key, each key's rows in their given order
    ordered = rows.take(pa.array(order))
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]]) if n else np.zeros(0, dtype=np.int64)
    firsts = ordered.take(pa.array(starts))
    merged = {}
    for rule, cols in groups:
        for col, values in zip(cols, merge_group_segments(rule, [ordered.column(c) for c in cols], starts)):
            merged[col] = values
    return pa.table({name: merged.get(name, firsts.column(name)) for name in rows.column_names})


def _check_mergeable(info: Any) -> list[tuple[str, tuple[str, ...]]]:
    groups = []
    for call in info.calls:
        for rule, cols in call.merge_groups:
            if not isinstance(rule, str) or rule not in ORDER_FREE_RULES or hasattr(call, "step_finisher"):
                raise restate_not_possible_error(call.output_name, str(rule if isinstance(rule, str) else "a Python aggregate"))
            groups.append((rule, tuple(cols)))
    return groups


def _aggregation(ss: Any, checkpoint: str, build: Callable[[Any], Any]) -> tuple[int, Any, str]:
    """(operator id, AggregationInfo, output mode) of the query ``build(ss)`` returns, planned as
    the checkpoint's batches were."""
    fm = CheckpointFileManager(checkpoint)
    latest = OffsetSeqLog(fm.child("offsets")).get_latest()
    if latest is None:
        raise no_checkpoint_error(fm.display())
    query = build(ss)
    writer = query.writeStream if hasattr(query, "writeStream") else query
    plan, mode = writer._plan, writer._mode  # noqa: SLF001 - the writer's own plan and mode
    # the mode the checkpoint ran in (a function that returns a DataFrame has the writer's default)
    recorded = (read_query_record(fm) or {}).get("outputMode")
    mode = str(recorded).lower() if recorded else mode
    meta = latest[1].metadata
    partitions = int((meta.conf if meta is not None else {}).get("spark.sql.shuffle.partitions") or ss.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    relations = plan.find(L.StreamingRelation)
    physical = plan_streaming_query(plan, partitions, {id(r): i for i, r in enumerate(relations)}, StateStoreConf(), output_mode=mode)
    for operator_id, writer_node in enumerate(state_writers(physical)):
        if isinstance(writer_node, StateStoreSaveExec) and writer_node.info is not None:
            return operator_id, writer_node.info, mode
    raise restate_not_possible_error(None, "the query has no streaming aggregation")


def _emissions(checkpoint: str, operator_id: int, info: Any, mode: str) -> pa.Table:
    """Per key of the state's change feed: its key and buffer columns as of its last update,
    the batch of its last emission and its emissions so far (update mode: each batch that
    changed it; append mode: the one when it left the state)."""
    changes = read_state_table({"readChangeFeed": "true", "changeStartBatchId": 0, "operatorId": operator_id}, checkpoint)
    key, value = changes.column("key").combine_chunks(), changes.column("value").combine_chunks()
    columns = {name: key.field(i) for i, name in enumerate(info.key_columns)}
    columns.update({name: value.field(i) for i, name in enumerate(info.buffer_columns)})
    table = pa.table({**columns, "batch_id": changes.column("batch_id"), "change": changes.column("change_type")})
    updates = table.filter(pc.equal(table.column("change"), "update"))
    deletes = table.filter(pc.equal(table.column("change"), "delete"))
    # each key's last update: the rows in batch order, the last row of each key kept
    updates = updates.take(pc.sort_indices(updates, [("batch_id", "ascending")]))
    ids = group_ids([updates.column(k) for k in info.key_columns], updates.num_rows) if updates.num_rows else np.zeros(0, np.int64)
    last = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int64)
    last[ids] = np.arange(len(ids))  # later rows overwrite earlier ones
    counts = np.bincount(ids, minlength=len(last)) if len(ids) else np.zeros(0, np.int64)
    out = updates.take(pa.array(last)).drop_columns(["change"])
    emitted = out.column("batch_id").to_numpy(zero_copy_only=False)
    revisions = counts
    if info.finality and mode == "update" and deletes.num_rows:
        # with the finality columns on, a key the watermark evicted after its last update was
        # emitted once more (final) in the batch that removed it
        deleted_at_of = _deleted_at(out, deletes, info.key_columns)
        later = deleted_at_of > emitted
        emitted = np.where(later, deleted_at_of, emitted)
        revisions = counts + later.astype(np.int64)
    elif mode == "append" and deletes.num_rows:
        # emitted once, when the key left the state
        emitted = _deleted_at(out, deletes, info.key_columns)
        revisions = (emitted >= 0).astype(np.int64)
    return out.drop_columns(["batch_id"]).append_column(_EMITTED, pa.array(emitted, pa.int64())).append_column(
        _REVISION, pa.array(np.asarray(revisions, dtype=np.int64) + 1, pa.int64())
    )


def _deleted_at(keys: pa.Table, deletes: pa.Table, key_columns: Any) -> np.ndarray:
    """For each row of ``keys``, the batch of its key's (last) delete in ``deletes``, or -1."""
    deletes = deletes.take(pc.sort_indices(deletes, [("batch_id", "ascending")]))  # the last one wins below
    both = pa.concat_tables([keys.select(list(key_columns)), deletes.select(list(key_columns))])
    gid = group_ids([both.column(k) for k in key_columns], both.num_rows)
    deleted_at = dict(zip(gid[keys.num_rows :].tolist(), deletes.column("batch_id").to_pylist()))
    return np.array([deleted_at.get(g, -1) for g in gid[: keys.num_rows].tolist()], dtype=np.int64)


def _nullable(table: pa.Table) -> pa.Table:
    """``table`` with every field nullable (the ledger and the state differ in that alone)."""
    return table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))


def restate(ss: Any, checkpoint: str, build: Callable[[Any], Any], ledger: str) -> Any:
    """The restatement DataFrame of the aggregation of the query ``build(ss)`` returns (``ss``: a
    StreamingSession; the query as it ran on ``checkpoint``), from the late-row ledger at
    ``ledger``: one row per window or key with late rows, with the grouping columns, the
    corrected aggregates, ``emitted_batch`` and ``revision`` (see the module docstring).

    Raises
    ------
    StatestreamError
        ``restate_not_possible_error``: the query has no aggregation, or an aggregate whose
        buffers cannot be merged out of order (named).
    FileNotFoundError
        When the ledger holds no rows of the aggregation.
    """
    operator_id, info, mode = _aggregation(ss, checkpoint, build)
    groups = _check_mergeable(info)
    root = CheckpointFileManager(ledger).child(f"operator={operator_id}")
    if not root.exists():
        raise FileNotFoundError(f"the ledger at {ledger} has no late rows of the aggregation (operator {operator_id})")
    late = ds.dataset(root.path(), format="parquet", partitioning="hive", filesystem=root.fs).to_table()
    late = _nullable(late.take(pc.sort_indices(late, [("batch", "ascending")])).select([*info.key_columns, *info.buffer_columns]))
    emissions = _nullable(_emissions(checkpoint, operator_id, info, mode))
    # the emitted keys that have late rows, then every late row: merged per key in that order
    both = pa.concat_tables([emissions.select([*info.key_columns, *info.buffer_columns]), late])
    gid = group_ids([both.column(k) for k in info.key_columns], both.num_rows)
    late_keys = set(gid[emissions.num_rows :].tolist())
    keep = np.array([g in late_keys for g in gid[: emissions.num_rows].tolist()], dtype=bool)
    extras = emissions.filter(pa.array(keep)).select([_EMITTED, _REVISION])
    rows = pa.concat_tables([both.slice(0, emissions.num_rows).filter(pa.array(keep)), late])
    n_emitted = extras.num_rows
    rows = rows.append_column(_EMITTED, pa.concat_arrays([extras.column(_EMITTED).combine_chunks(), pa.nulls(late.num_rows, pa.int64())]))
    rows = rows.append_column(_REVISION, pa.concat_arrays([extras.column(_REVISION).combine_chunks(), pa.array(np.ones(late.num_rows, np.int64))]))
    merged = merged_buffers(rows, info.key_columns, groups)
    log.info("restating %d keys (%d emitted before) from %d late partial groups", merged.num_rows, n_emitted, late.num_rows)
    spark = ss.sparkSession
    df = spark.createDataFrame(merged)
    carried = dataclasses.replace(
        info, key_columns=(*info.key_columns, _EMITTED, _REVISION), grouping_names=(*info.grouping_names, "emitted_batch", "revision")
    )
    return final_projection(df, carried)
