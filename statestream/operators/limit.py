"""The streaming limit: StreamingLocalLimitExec, the single-partition exchange and
StreamingGlobalLimitExec, plus the stateless limits Spark uses where a limit needs no state.

Spark: ``StreamingGlobalLimitExec`` and ``StreamingLocalLimitExec`` (``streamingLimits.scala``),
``LocalLimitExec``, ``CollectLimitExec``, ``TakeOrderedAndProjectExec`` and the
``ConvertLocalLimitRule`` of ``IncrementalExecution``.

How a stateful ``limit(n)`` runs in statestream:

* the local limit keeps at most ``n`` rows of each partition. Where no stateful operator runs
  below it in the same stage, it is Spark's own (non-draining) limit, ``df.limit(n)``: it stops
  reading its input early, exactly as Spark's ``LocalLimitExec`` does, which is why the number of
  input rows a batch reports then comes from the scan's metric (:func:`scan_input_rows`).
  Otherwise (``StreamingLocalLimitExec``) it must read its whole input, so that the state step
  below commits and reports its metrics: a row-index filter does that inside the JVM.
* the exchange brings the rows to one partition (Spark: ``Exchange SinglePartition``; the
  ``AllTuples`` distribution of the global limit).
* ``StreamingGlobalLimitExec`` runs one Arrow function in that single task (``mapInArrow``):
  it opens state partition 0 of its operator at version N, reads the number of rows the query
  emitted so far (one null key, one long value), lets through only what is left of ``n``,
  stores the new count and commits version N+1 before it hands any row back. State never leaves
  the task; the driver receives only the metrics, through the batch's accumulator.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from statestream._jvm.calls import java_dataframe, jvm_plan_nodes
from statestream.operators.aggregate import ShuffleExchangeExec
from statestream.operators.basic import BatchRelationExec, StreamingRelationExec
from statestream.operators.state_step import StateStep, finish_writer_metrics
from statestream.operators.base import (
    PhysicalOperator,
    StatefulOperator,
    StatefulOperatorStateInfo,
    StateStoreWriter,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from statestream.operators.context import BatchContext

__all__ = [
    "LocalLimitExec",
    "StreamingLocalLimitExec",
    "SinglePartitionExchangeExec",
    "StreamingGlobalLimitExec",
    "GlobalLimitStateStep",
    "CollectLimitExec",
    "TakeOrderedAndProjectExec",
    "LocalTableScanExec",
    "LIMIT_KEY_SCHEMA_JSON",
    "LIMIT_VALUE_SCHEMA_JSON",
    "has_no_stateful_op",
    "scan_input_rows",
    "input_rows_by_source",
]

#: Spark's state schema of the global limit: one key column of type void (always null) ...
LIMIT_KEY_SCHEMA_JSON: dict = {
    "type": "struct",
    "fields": [{"name": "key", "type": "void", "nullable": True, "metadata": {}}],
}
#: ... and one long value, the number of rows emitted over the query's life.
LIMIT_VALUE_SCHEMA_JSON: dict = {
    "type": "struct",
    "fields": [{"name": "value", "type": "long", "nullable": True, "metadata": {}}],
}

_KEY_SCHEMA = pa.schema([pa.field("key", pa.null())])
_VALUE_SCHEMA = pa.schema([pa.field("value", pa.int64())])
_STATE_SCHEMA = pa.schema(list(_KEY_SCHEMA) + list(_VALUE_SCHEMA))

#: ``monotonically_increasing_id()`` is (partition index << 33) + the row's index in its
#: partition; this mask keeps the index.
_ROW_INDEX_MASK = (1 << 33) - 1


def _keep_first_rows_of_each_partition(df: "DataFrame", n: int) -> "DataFrame":
    """The first ``n`` rows of every partition, evaluated on every row so the input is read to
    its end (a filter never stops early, unlike Spark's ``LocalLimitExec``)."""
    from pyspark.sql import functions as F

    return df.filter(F.expr(f"(monotonically_increasing_id() & {_ROW_INDEX_MASK}) < {int(n)}"))


def _with_metadata(df: "DataFrame", schema: "StructType") -> "DataFrame":
    """Put back column metadata (the event-time marker) that an Arrow round trip may drop."""
    for f in schema.fields:
        if f.metadata and dict(df.schema[f.name].metadata or {}) != dict(f.metadata):
            df = df.withMetadata(f.name, dict(f.metadata))
    return df


def has_no_stateful_op(plan: PhysicalOperator) -> bool:
    """True when no stateful operator runs in the same stage below ``plan`` (the search stops
    at exchanges). Spark: ``ConvertLocalLimitRule.hasNoStatefulOp``."""
    if isinstance(plan, StatefulOperator):
        return False
    if isinstance(plan, (ShuffleExchangeExec, SinglePartitionExchangeExec)):
        return True
    return all(has_no_stateful_op(c) for c in plan.children)


@dataclass(frozen=True)
class LocalLimitExec(PhysicalOperator):
    """At most ``n`` rows per partition, without reading further (Spark's ``LocalLimitExec``).

    Executed as Spark's batch ``limit(n)``, whose physical plan is this local limit, the
    ``Exchange SinglePartition`` and a global limit of ``n``: the exchange node above is then a
    no-op. Keeping only ``n`` rows in total instead of ``n`` per partition changes nothing
    downstream, since the global limit keeps at most ``n`` anyway and which rows win is
    unspecified."""

    child: PhysicalOperator | None = None
    n: int = 0

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        return self.child.execute(ctx).limit(self.n)

    def supports_codegen(self) -> bool:
        return True

    def simple_string(self) -> str:
        return f"LocalLimit {self.n}"


@dataclass(frozen=True)
class StreamingLocalLimitExec(PhysicalOperator):
    """At most ``n`` rows per partition, reading the input to its end so that a stateful
    operator below, in the same stage, commits its state (Spark's ``StreamingLocalLimitExec``).
    ``IncrementalExecution`` turns it into a :class:`LocalLimitExec` when there is none."""

    child: PhysicalOperator | None = None
    n: int = 0

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        return _keep_first_rows_of_each_partition(self.child.execute(ctx), self.n)

    def simple_string(self) -> str:
        return f"StreamingLocalLimit {self.n}"


@dataclass(frozen=True)
class SinglePartitionExchangeExec(PhysicalOperator):
    """``Exchange SinglePartition, ENSURE_REQUIREMENTS``: all rows to one partition, the
    distribution the global limit requires. Spark's batch ``limit`` of a :class:`LocalLimitExec`
    below already did the exchange."""

    child: PhysicalOperator | None = None
    #: explain only: the plan id Spark's explain shows on an exchange
    plan_id: int | None = None

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        df = self.child.execute(ctx)
        if isinstance(self.child, LocalLimitExec):
            return df
        return df.repartition(1)

    def simple_string(self) -> str:
        text = "Exchange SinglePartition, ENSURE_REQUIREMENTS"
        return text if self.plan_id is None else f"{text}, [plan_id={self.plan_id}]"


@dataclass(frozen=True)
class StreamingGlobalLimitExec(PhysicalOperator, StateStoreWriter):
    """Lets through at most ``n`` rows over the life of the query (Spark's
    ``StreamingGlobalLimitExec``). Its input is one partition; its state is partition 0 of its
    operator: one null key whose value is the number of rows emitted so far.

    ``node_id`` identifies the operator across the per-batch rewrites of the plan (it is what
    ``IncrementalExecution`` keys the operator id by)."""

    child: PhysicalOperator | None = None
    n: int = 0
    state_info: StatefulOperatorStateInfo | None = None
    output_mode: str | None = None
    store_conf: Any = None
    node_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    operator_name = "globalLimit"

    def state_schemas(self) -> tuple[dict, dict]:
        """Spark's key and value schemas of the limit's state (schema file, restart check)."""
        return LIMIT_KEY_SCHEMA_JSON, LIMIT_VALUE_SCHEMA_JSON

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        df = self.child.execute(ctx)
        step = GlobalLimitStateStep(**self.state_step_args(ctx), limit=self.n)
        return _with_metadata(df.mapInArrow(step, df.schema), df.schema)

    def simple_string(self) -> str:
        si = self.state_info
        mode = (self.output_mode or "<unknown>").capitalize()
        return f"StreamingGlobalLimit {self.n}, {si if si else 'state info [ <unknown> ]'} stateStoreCkptIds = None, {mode}"


@dataclass(frozen=True)
class GlobalLimitStateStep(StateStep):
    """The global limit's work in its single task, picklable so Spark ships it to the Python
    worker. ``__call__`` is the ``mapInArrow`` function; :meth:`process` is the pure part."""

    state_root: str
    run_id: str
    operator_id: int
    version: int
    limit: int
    store_conf: Any = None

    def process(self, partition: int, batches) -> tuple[list[pa.RecordBatch], dict]:
        """Emit what is left of the limit from ``batches`` and commit the new count.

        The whole input is read (the rows beyond the limit are dropped as they come, so memory
        holds at most what is emitted) and the new count is committed before any row is handed
        back: a task that dies while its output is being written has either committed the
        version it would rewrite on retry, or nothing."""
        if partition != 0:
            msg = (
                f"statestream: the global limit (operator {self.operator_id}) ran in partition {partition}; "
                "its input must be a single partition"
            )
            raise RuntimeError(msg)
        m = self.new_metrics(partition, allRemovalsTimeMs=0)
        key = pa.table({"key": pa.nulls(1)}, schema=_KEY_SCHEMA)
        out: list[pa.RecordBatch] = []
        with self.store_task(partition) as stores:
            store = stores.open(self.provider(partition, _KEY_SCHEMA, _VALUE_SCHEMA))
            t0 = time.perf_counter()
            found = store.lookup(key)
            stored = found.column("value")[0].as_py() if found.column("__found")[0].as_py() else None
            before = int(stored or 0)
            count = before
            for batch in batches:
                if count >= self.limit:
                    continue  # read on, so the stage above us finishes its input
                take = min(batch.num_rows, self.limit - count)
                if take:
                    out.append(batch.slice(0, take) if take < batch.num_rows else batch)
                    count += take
            if count > before:
                store.put(pa.table({"key": pa.nulls(1), "value": pa.array([count], pa.int64())}, schema=_STATE_SCHEMA))
                m["numUpdatedStateRows"] = 1
                m["numOutputRows"] = count - before
            updates_ms = (time.perf_counter() - t0) * 1000
        finish_writer_metrics(m, stores, updates_ms)
        return out, m


@dataclass(frozen=True)
class CollectLimitExec(PhysicalOperator):
    """A per-batch limit without state: Spark plans it where the limit's input is not made of
    appends (complete mode over an aggregation), ``CollectLimitExec`` at the root of the plan,
    ``GlobalLimitExec`` elsewhere.

    Whatever rows it keeps, the state step below must still see its whole output. With
    ``drain`` the per-partition cut is a reading filter and the single partition comes from a
    shuffle; without it (a sort below already reads everything, and its order must be kept)
    it is Spark's batch ``limit``."""

    child: PhysicalOperator | None = None
    n: int = 0
    root: bool = True
    drain: bool = True

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None
        df = self.child.execute(ctx)
        if not self.drain:
            return df.limit(self.n)
        return _keep_first_rows_of_each_partition(df, self.n).repartition(1).limit(self.n)

    def simple_string(self) -> str:
        return f"CollectLimit {self.n}" if self.root else f"GlobalLimit {self.n}"


@dataclass(frozen=True)
class TakeOrderedAndProjectExec(PhysicalOperator):
    """``orderBy(...).limit(n)`` of a complete result (Spark's ``TakeOrderedAndProjectExec``):
    Spark's batch planner turns the sort plus limit into a top-n that reads its whole input."""

    child: PhysicalOperator | None = None
    n: int = 0
    description: str = ""
    output: tuple[str, ...] = ()
    transform: Callable[["DataFrame"], "DataFrame"] | None = field(default=None, repr=False, compare=False)

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        assert self.child is not None and self.transform is not None
        return self.transform(self.child.execute(ctx)).limit(self.n)

    def simple_string(self) -> str:
        return f"TakeOrderedAndProject(limit={self.n}, orderBy={self.description}, output=[{','.join(self.output)}])"


@dataclass(frozen=True)
class LocalTableScanExec(PhysicalOperator):
    """An empty relation: what Spark's optimizer makes of ``limit(0)`` and everything below it
    (``OptimizeLimitZero``), so no source is read and no state operator below it runs."""

    schema: Any = field(default=None, repr=False, compare=False)
    output: tuple[str, ...] = ()

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        return ctx.spark.createDataFrame([], self.schema)

    def simple_string(self) -> str:
        # Spark never starts a codegen stage at a LocalTableScan, so it shows no ``*(n)`` here
        # (it would inside a parent's stage, which this operator does not model)
        return f"LocalTableScan <empty>, [{', '.join(self.output)}]"


def scan_input_rows(result: "DataFrame") -> list[int] | None:
    """The rows each leaf scan of ``result``'s executed plan produced (its ``numOutputRows``
    metric; 0 for a leaf without one), leaves in plan order, once ``result`` has run; ``None`` if
    the plan cannot be read.

    Spark counts a source's input rows this way (``StreamSourceAwareSparkPlan`` metrics). It
    differs from a count of all rows of the batch when a non-draining limit stopped the scan
    early: a Parquet scan then reports whole columnar batches (4096 rows) read, a JSON scan the
    rows actually read. Observing a count on the batch would see only the rows the limit pulled.
    """
    try:
        plan = java_dataframe(result).queryExecution().executedPlan()
    except Exception:  # noqa: BLE001 - not a classic DataFrame
        return None
    rows: list[int] = []
    for node in jvm_plan_nodes(plan):
        if node.children().size() == 0:
            metric = node.metrics().get("numOutputRows")
            rows.append(int(metric.get().value()) if metric.isDefined() else 0)
    return rows


def input_rows_by_source(plan: PhysicalOperator, result: "DataFrame") -> dict[int, int] | None:
    """Input rows per source index from the scans' metrics (:func:`scan_input_rows`), when the
    executed plan has one leaf per leaf of ``plan`` (a source's batch, or an empty relation);
    ``None`` otherwise, like Spark, which then falls back to another count."""
    leaves: list[int | None] = []
    for n in plan.walk():
        if isinstance(n, StreamingRelationExec):
            leaves.append(n.source_index)
        elif isinstance(n, LocalTableScanExec):
            leaves.append(None)
        elif isinstance(n, BatchRelationExec):
            leaves.extend([None] * n.leaf_count())  # a static side's own scans count for no source
    scanned = scan_input_rows(result)
    if scanned is None or len(scanned) != len(leaves):
        return None
    out: dict[int, int] = {}
    for source, rows in zip(leaves, scanned):
        if source is not None:
            out[source] = out.get(source, 0) + rows
    return out
