"""What every per-partition state step shares: the ``mapInArrow`` entry point, the commit
sequence and the metric record sent back to the driver.

The aggregation, deduplication, session-window and global-limit steps differ in how they change
their store; they all run inside a Spark task, commit version N+1 the same way (with the crash
point the recovery tests use, and throttled maintenance) and report Spark's state-writer metrics
through the query's accumulator.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestream._jvm.calls import java_context, java_dataframe, java_session, jvm_view, py4j_gateway
from statestream.faults import crash_point, record_state_task
from statestream.operators.aggregate import PARTITION_ID_COLUMN, ROUTE_COLUMN
from statestream.operators.late_rows import write_late_rows
from statestream.operators.partition_routes import partition_routes
from statestream.operators.python_worker import forget_zip_importers
from statestream.state.provider import get_provider
from statestream.state.store import StateStoreConf, StateStoreId, StateStoreMetrics

__all__ = [
    "AllStatePartitions",
    "ROUTE_COLUMN",
    "StateStep",
    "StateStoreTask",
    "commit_state",
    "finish_writer_metrics",
    "map_state_partitions",
    "split_routed_rows",
    "SPLIT_MAX_ROW_READS",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateStep:
    """The base of every state step's frozen dataclass: ``process(partition, batches)`` returns
    (rows to emit, metrics); ``__call__`` is the ``mapInArrow`` function around it. The fields
    every step takes from ``state_step_args`` and nothing else reads are here, keyword-only."""

    #: the late-row ledger's root (``operators.late_rows``), None when off; keyword-only, after
    #: each step's own fields
    late_rows: str | None = field(default=None, kw_only=True)
    #: the operator's name, as the ledger records it
    operator_name: str = field(default="", kw_only=True)
    #: the query's metrics accumulator (None outside a query: a step called directly)
    accumulator: Any = field(default=None, compare=False, kw_only=True)
    #: the Spark local property that carries this step's per-batch fields (``batch_fields``) to
    #: its tasks, or None when the fields are the step's own: a reused batch plan
    #: (``runtime.batch_plan_reuse``) keeps the step of the batch it was built for, and the
    #: driver sets the property for each batch before the batch's job
    batch_args_property: str | None = field(default=None, kw_only=True)

    #: the fields that change from batch to batch (the store's version; an aggregation's
    #: watermarks): what ``batch_args_property`` carries
    batch_fields: ClassVar[tuple[str, ...]] = ("version",)

    def for_this_task(self) -> "StateStep":
        """This step with the batch's fields from ``batch_args_property`` (itself when it has
        none). A job of a reused plan that the driver did not give the property would run with
        another batch's version, so it fails instead."""
        if self.batch_args_property is None:
            return self
        import dataclasses
        import json

        from pyspark import TaskContext

        ctx = TaskContext.get()
        text = ctx.getLocalProperty(self.batch_args_property) if ctx is not None else None
        if not text:
            raise RuntimeError(
                f"statestream: the batch's arguments of state operator {self.operator_id} (local property "  # type: ignore[attr-defined]
                f"{self.batch_args_property}) were not set for this job"
            )
        args = json.loads(text)
        unknown = set(args) - set(self.batch_fields)
        if unknown:
            raise RuntimeError(f"statestream: unexpected batch arguments {sorted(unknown)} in {self.batch_args_property}")
        return dataclasses.replace(self, batch_args_property=None, **args)

    def process(self, partition: int, batches) -> tuple[Any, dict]:  # pragma: no cover - abstract
        raise NotImplementedError

    def partition_input(self, batches, partition: int, exchange: str, drop_partition_column: bool = True) -> pa.Table:
        """The task's rows as one table in the step's ``input_schema``.

        Every row carries the state partition computed before the exchange; a row of another
        partition means the exchange and the state placement disagree, and committing it would put
        a key into the wrong store, so the task fails instead. ``exchange`` names what the
        exchange should have partitioned by, for that message."""
        batches = list(batches)
        schema = self.input_schema  # type: ignore[attr-defined]
        table = pa.Table.from_batches(batches) if batches else schema.empty_table()
        table = table.cast(schema) if table.schema != schema else table
        if table.num_rows:
            pids = pc.unique(table.column(PARTITION_ID_COLUMN)).to_pylist()
            if pids != [partition]:
                msg = (
                    f"statestream: rows of state partitions {pids} reached task partition {partition} of "
                    f"operator {self.operator_id}; {exchange}"  # type: ignore[attr-defined]
                )
                raise RuntimeError(msg)
        return table.drop_columns([PARTITION_ID_COLUMN]) if drop_partition_column else table

    def store_task(self, partition: int) -> "StateStoreTask":
        """The lifecycle of this task's stores (:class:`StateStoreTask`) at the batch's version."""
        return StateStoreTask(self.version, partition)  # type: ignore[attr-defined]

    def provider(self, partition: int, key_schema: pa.Schema, value_schema: pa.Schema) -> Any:
        """The provider of this operator's store of ``partition`` (its default store)."""
        store_id = StateStoreId(self.state_root, self.operator_id, partition)  # type: ignore[attr-defined]
        conf = self.store_conf or StateStoreConf()  # type: ignore[attr-defined]
        return get_provider(store_id, key_schema, value_schema, conf, self.run_id)  # type: ignore[attr-defined]

    def record_late_rows(self, partition: int, rows: pa.Table, watermark_ms: int | None) -> None:
        """Write the rows this task dropped as late to the late-row ledger, when it is on."""
        root = self.late_rows
        if root and rows.num_rows and watermark_ms is not None:
            write_late_rows(
                root, self.operator_id, self.operator_name, self.version, partition, watermark_ms, rows  # type: ignore[attr-defined]
            )

    def new_metrics(self, partition: int, **extra: Any) -> dict:
        """The task's metric record with Spark's writer counters at 0, plus ``extra``."""
        m: dict[str, Any] = {
            "operatorId": self.operator_id,  # type: ignore[attr-defined]
            "partition": partition,
            "numOutputRows": 0,
            "numRowsDroppedByWatermark": 0,
            "numUpdatedStateRows": 0,
            "numRemovedStateRows": 0,
        }
        m.update(extra)
        return m

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        yield from self.for_this_task().run_partition(TaskContext.get().partitionId(), batches)  # type: ignore[union-attr]  # a task's function: its TaskContext is set

    def run_partition(self, partition: int, batches) -> Iterator[pa.RecordBatch]:
        """Process ``partition``'s rows, send the metrics to the driver and emit the output.

        A step whose task partition is not its state partition (the join's) finds the partition
        itself and calls this."""
        try:
            out, metrics = self.process(partition, batches)
            if self.accumulator is not None:
                self.accumulator.add([metrics])
            if isinstance(out, pa.Table):
                yield from out.to_batches(max_chunksize=1 << 16)
            else:
                yield from out
        finally:
            # last, once this task's imports are done: see ``python_worker``
            forget_zip_importers()


@dataclass(frozen=True)
class AllStatePartitions:
    """Runs ``step`` for every state partition, 0 to ``len(routes) - 1``, in one task: the
    ``mapInArrow`` function of a batch small enough that one task costs less than starting
    one per partition (``runtime.small_batches``).

    The rows arrive together (the exchange's partitions coalesced into one task); each carries
    its state partition (``PARTITION_ID_COLUMN``), by which they are split, in the order they
    came. Every partition runs, with no rows if none came, as it would in its own task: it
    commits its next version and evicts by the watermark. Each output row gets
    :data:`ROUTE_COLUMN`, ``routes[p]`` for partition p, an int that Spark's hash partitioning
    sends to partition p (:func:`map_state_partitions` repartitions by it). The stores, files,
    metrics and output partitions are those of the per-partition tasks."""

    step: StateStep
    routes: tuple[int, ...]

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        step = self.step.for_this_task()
        n = len(self.routes)
        batches = [b for b in batches if b.num_rows]
        table = pa.Table.from_batches(batches) if batches else None
        if table is None or not table.num_rows:
            bounds = np.zeros(n + 1, dtype=np.int64)
        else:
            pids = table.column(PARTITION_ID_COLUMN).to_numpy()
            order = np.argsort(pids, kind="stable")
            table = table.take(pa.array(order))
            bounds = np.searchsorted(pids[order], np.arange(n + 1), side="left")
            if bounds[0] != 0 or bounds[-1] != table.num_rows:
                msg = (
                    f"statestream: rows of state partitions {sorted(set(pids.tolist()) - set(range(n)))} "
                    f"reached operator {step.operator_id} (it has {n})"  # type: ignore[attr-defined]
                )
                raise RuntimeError(msg)
        for partition in range(n):
            lo, hi = int(bounds[partition]), int(bounds[partition + 1])
            rows = table.slice(lo, hi - lo).to_batches() if table is not None and hi > lo else []
            route = self.routes[partition]
            for out in step.run_partition(partition, rows):
                column = pa.array(np.full(out.num_rows, route, dtype=np.int32))
                yield pa.RecordBatch.from_arrays(
                    [*out.columns, column], schema=out.schema.append(pa.field(ROUTE_COLUMN, pa.int32(), False))
                )


def map_state_partitions(df: Any, step: StateStep, schema: Any, ctx: Any, num_partitions: int) -> Any:
    """``df.mapInArrow(step, schema)``: one task per state partition, or, in a small batch
    (``ctx.single_state_task``, a ``BatchContext``), one task that runs them all
    (:class:`AllStatePartitions`), whose rows then go back to their partitions through a
    repartition by :data:`ROUTE_COLUMN`, so that what follows (a foreach writer's ``open``, a
    file sink's files) sees Spark's partitions. ``num_partitions``: the partitions ``df`` has,
    which are the operator's state partitions (1 for a global aggregation, whose rows Spark
    gathers in one).

    With ``ctx.route_at_materialisation`` the rows stay in the one task with their route column,
    and :func:`split_routed_rows` puts them in their partitions once the batch is materialised:
    the sink reads them there, so the batch's job has no exchange (and no stage) for them."""
    if not ctx.single_state_task or num_partitions <= 1:
        return df.mapInArrow(step, schema)
    from pyspark.sql.types import IntegerType, StructField, StructType

    routed = StructType([*schema.fields, StructField(ROUTE_COLUMN, IntegerType(), False)])
    out = df.coalesce(1).mapInArrow(AllStatePartitions(step, tuple(partition_routes(num_partitions))), routed)
    if ctx.route_at_materialisation:
        return out
    return _shuffled_by_route(out, num_partitions)


#: the most row reads :func:`split_routed_rows` lets the sink's tasks make (each of N tasks
#: reads every row): a one-task batch that emitted more (a burst after a trickle) has its
#: rows shuffled to their partitions instead
SPLIT_MAX_ROW_READS = 1_000_000


def split_routed_rows(df: Any, num_partitions: int, rows: int | None) -> Any:
    """The materialised rows of a one-task batch (one partition, each row with its
    :data:`ROUTE_COLUMN`; ``rows`` of them, None if not known) as ``num_partitions``
    partitions, partition p holding the rows routed to p in the order they came, with no
    shuffle: what the repartition by route gives, without its stage in the batch's job (50-90 ms
    of a 400 ms batch on W1).

    The block is read ``num_partitions`` times, through a union of as many references to its
    rows, and partition p keeps the rows whose route is p's. That is cheap for the few rows a
    small batch emits, and it costs the driver three plans (about 15 ms) against the eight a
    union of one filter per partition takes. The union is of the rows' RDD, not of the
    DataFrame: over the local checkpoint, whose plan says ``SinglePartition``, Spark's union
    zips one-partition inputs into one partition (``spark.sql.unionOutputPartitioning``). Past
    :data:`SPLIT_MAX_ROW_READS` (or on a Spark without the calls used) the rows get the
    repartition by route, which the sink's job runs."""
    from pyspark.sql import DataFrame

    if rows is None or rows * num_partitions > SPLIT_MAX_ROW_READS:
        return _shuffled_by_route(df, num_partitions)
    session = df.sparkSession
    try:
        sc = session.sparkContext
        jdf = java_dataframe(df)
        block = jdf.queryExecution().toRdd().toJavaRDD()
        copies = py4j_gateway(sc).new_array(jvm_view(sc).org.apache.spark.api.java.JavaRDD, num_partitions)
        for p in range(num_partitions):
            copies[p] = block
        union = java_context(sc).union(copies).rdd()
        unknown = DataFrame(java_session(session).internalCreateDataFrame(union, jdf.schema(), False), session)
    except Exception:  # only an optimisation: the sink's job then shuffles
        logger.debug("the one-task batch's rows go back to their partitions by a shuffle", exc_info=True)
        return _shuffled_by_route(df, num_partitions)
    routes = ", ".join(str(r) for r in partition_routes(num_partitions))
    mine = f"`{ROUTE_COLUMN}` = element_at(array({routes}), spark_partition_id() + 1)"
    return unknown.where(mine).drop(ROUTE_COLUMN)


def _shuffled_by_route(df: Any, num_partitions: int) -> Any:
    """``df``'s rows in the partitions their :data:`ROUTE_COLUMN` names, by a shuffle, without
    the column."""
    from pyspark.sql import functions as F

    return df.repartition(num_partitions, F.col(ROUTE_COLUMN)).drop(ROUTE_COLUMN)


def commit_state(store, provider, version: int, partition: int) -> float:
    """Commit ``store`` (batch ``version`` writes version + 1), then run maintenance when it is
    due; returns the commit time in ms. :class:`StateStoreTask` calls it for each of its stores
    (and aborts them all if it raises)."""
    c0 = time.perf_counter()
    committed = store.commit()
    commit_ms = (time.perf_counter() - c0) * 1000
    crash_point("after_state_commit", version, partition)
    sid = provider.store_id
    hits, misses = provider.cache_counts()
    record_state_task(sid.checkpoint_root, sid.operator_id, partition, version, provider.run_id, hits, misses, store=sid.store_name, mapped=len(provider.mapped_versions()))
    provider.maybe_do_maintenance(committed)
    return commit_ms


class StateStoreTask:
    """The stores one state task writes, and their one lifecycle: each opened at the batch's
    version (:meth:`open`), all committed (version + 1) when the ``with`` block ends without an
    error, all aborted when it raises (what Spark's ``StateStoreWriter`` and the task's completion
    listener do). Every state step runs its store work inside one; ``commit_ms`` is then the
    time the commits took, and the store metrics are summed over the stores.

    Parameters
    ----------
    version : int
        The batch's state version: the stores open at it and commit ``version + 1``.
    partition : int
        The state partition (for the crash points and the task log).

    Examples
    --------
    >>> import tempfile
    >>> import pyarrow as pa
    >>> from statestream.state.provider import get_provider
    >>> from statestream.state.store import StateStoreConf, StateStoreId
    >>> schema = pa.schema([pa.field("k", pa.int64())]), pa.schema([pa.field("n", pa.int64())])
    >>> provider = get_provider(StateStoreId(tempfile.mkdtemp(), 0, 0), *schema, StateStoreConf(), "run")
    >>> with StateStoreTask(version=0, partition=0) as stores:
    ...     store = stores.open(provider)
    ...     store.put(pa.table({"k": [1, 2], "n": [10, 20]}))
    >>> sorted(provider.list_files()), stores.metrics().num_keys
    ([1], 2)
    """

    def __init__(self, version: int, partition: int) -> None:
        self.version = version
        self.partition = partition
        #: (provider, store) of each store opened, in the order opened
        self.opened: list[tuple[Any, Any]] = []
        #: the time the commits took (ms), once the block ended without an error
        self.commit_ms = 0.0

    def open(self, provider: Any, **get_store_args: Any) -> Any:
        """``provider``'s store at the batch's version (``get_store_args`` go to
        ``get_store``), committed or aborted with the others when the block ends."""
        store = provider.get_store(self.version, **get_store_args)
        self.opened.append((provider, store))
        return store

    def __enter__(self) -> "StateStoreTask":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.commit_ms = sum(commit_state(store, provider, self.version, self.partition) for provider, store in self.opened)
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()

    def abort(self) -> None:
        """Abort every store opened (a committed store ignores it)."""
        for _, store in self.opened:
            store.abort()

    def metrics(self) -> StateStoreMetrics:
        """The stores' metrics summed, each store read once: the rows they hold after the batch,
        their memory, and their custom metrics summed by name."""
        total = StateStoreMetrics(num_keys=0, memory_used_bytes=0)
        for _, store in self.opened:
            one = store.metrics()
            total.num_keys += one.num_keys
            total.memory_used_bytes += one.memory_used_bytes
            for k, v in one.custom_metrics.items():
                total.custom_metrics[k] = total.custom_metrics.get(k, 0) + v
        return total


def finish_writer_metrics(
    m: dict,
    stores: StateStoreTask,
    updates_ms: float,
    removal_ms: float | None = None,
    num_output_rows: int | None = None,
    custom: dict | None = None,
    num_total_state_rows: int | None = None,
) -> dict:
    """Complete a step's metric record with its stores' figures and the timings (Spark's
    StateStoreWriter names). ``removal_ms`` is left out for operators that never remove;
    ``num_total_state_rows`` replaces the stores' key count where Spark counts otherwise."""
    if num_output_rows is not None:
        m["numOutputRows"] = num_output_rows
    summed = stores.metrics()
    m["numTotalStateRows"] = summed.num_keys if num_total_state_rows is None else num_total_state_rows
    m["allUpdatesTimeMs"] = int(updates_ms)
    if removal_ms is not None:
        m["allRemovalsTimeMs"] = int(removal_ms)
    m["commitTimeMs"] = int(stores.commit_ms)
    m["stateMemory"] = summed.memory_used_bytes
    m["customMetrics"] = {**summed.custom_metrics, **(custom or {})}
    return m
