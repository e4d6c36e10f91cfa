"""The stateless parts of a streaming aggregation: partial aggregation, the exchange, the merge
steps and the final projection.

Spark: ``HashAggregateExec`` (or ``ObjectHashAggregateExec`` / ``SortAggregateExec``, whichever
Spark's planner picks for the aggregate functions) in Partial / PartialMerge / Final mode and the
``Exchange hashpartitioning(K, N)`` between them. Spark's batch engine runs the first three for
us in one ``groupBy(K).agg(<buffers>)``: partial aggregation, the exchange and the merge. Its
output has exactly one buffer row per key, and partition p holds the keys whose
``pmod(murmur3(K), N)`` is p, which is state partition p. The nodes stay separate in the plan so
that ``explain()`` has Spark's shape and each step has one place in the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from statestream.operators.base import ExecutedByParent, PhysicalOperator
from statestream.operators.context import SKIP_ALL, SKIP_SOURCE_FED
from statestream.operators.partition_routes import exchange_keys, state_partition_id

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from statestream.operators.context import BatchContext

__all__ = [
    "AggregateCallLike",
    "AggregationInfo",
    "AggregateExplainText",
    "StreamingAggregateExec",
    "HashAggregateExec",
    "AggregateSortExec",
    "ShuffleExchangeExec",
    "sorted_for_aggregate",
    "PARTITION_ID_COLUMN",
    "ROUTE_COLUMN",
    "GROUPING_ID_NAME",
    "PARTIAL_KEPT",
    "PARTIAL_SKIPPABLE",
    "PARTIAL_SKIPPABLE_FED_BY_SOURCE",
    "skips_partial",
    "HASH_AGGREGATE",
    "OBJECT_HASH_AGGREGATE",
    "SORT_AGGREGATE",
    "FINALITY_CONF",
    "REVISION_COLUMN",
    "IS_FINAL_COLUMN",
    "REVISION_STATE_FIELD",
    "IS_FINAL_STEP_COLUMN",
]

PARTITION_ID_COLUMN = "__statestream_pid"
#: the column with which a one-task batch's state step (``state_step.AllStatePartitions``) sends
#: each partition's output rows back to that partition (``partition_routes``); the Final step
#: carries it when the batch's materialisation does the sending (``BatchContext.
#: route_at_materialisation``)
ROUTE_COLUMN = "__statestream_route"
#: Spark's name of the grouping id of cube/rollup (a key of the state)
GROUPING_ID_NAME = "spark_grouping_id"

#: statestream's own setting (off by default, so that the output stays Spark's): an aggregation
#: built while it is on has two more output columns, ``revision`` (how many times the row's key
#: was emitted, this row included) and ``is_final`` (the watermark passed the key's event time:
#: no later row can change it); in update mode a key's final row is also emitted when the
#: watermark evicts it without an update
FINALITY_CONF = "spark.statestream.aggregation.finality.enabled"
REVISION_COLUMN = "revision"
IS_FINAL_COLUMN = "is_final"
#: the state's emission counter (a value field after the buffers, only with finality on)
REVISION_STATE_FIELD = "__statestream_revision"
#: the state step's ``is_final`` column (renamed ``is_final`` by the Final step)
IS_FINAL_STEP_COLUMN = "__statestream_is_final"

#: Whether an aggregation's partial step can be skipped (``AggregationInfo.partial_skippable``):
#: not without keys to shuffle by, nor when all of them are literals (Spark's exchange then
#: hashes a constant), nor under cube/rollup (Spark's Expand multiplies the rows before the
#: partial step), nor for session windows (their own merge runs in that step); where it can,
#: whether the aggregation's input rows are one source's rows, filtered or projected, so that
#: the last batch's keys per source row tell what the step saves
PARTIAL_KEPT = "kept"
PARTIAL_SKIPPABLE = "skippable"
PARTIAL_SKIPPABLE_FED_BY_SOURCE = "skippable, source-fed"


def skips_partial(partial_skippable: str, requested: str) -> bool:
    """Whether an aggregation (its ``AggregationInfo.partial_skippable``) skips its partial step
    in a batch that asks ``requested`` (``SKIP_*``)."""
    if partial_skippable == PARTIAL_KEPT:
        return False
    if requested == SKIP_ALL:
        return True
    return requested == SKIP_SOURCE_FED and partial_skippable == PARTIAL_SKIPPABLE_FED_BY_SOURCE


#: The physical aggregate nodes Spark's planner chooses between (``explain()`` names)
HASH_AGGREGATE = "HashAggregate"
OBJECT_HASH_AGGREGATE = "ObjectHashAggregate"
SORT_AGGREGATE = "SortAggregate"


@dataclass(frozen=True)
class AggregateExplainText:
    """Spark's own ``explain()`` text for the steps of one streaming aggregation, attribute ids
    included, read from Spark's batch plan of the same aggregation over a stand-in input
    (``plan/spark_text.py``). Explain only; ``lines``, ``verbose`` and ``details`` are keyed by
    the step's mode (``Partial``, ``PartialMerge``, ``Final``)."""

    lines: dict[str, str]
    verbose: dict[str, str]
    details: dict[str, str]
    #: the grouping attributes (``window#9-T10000ms, _groupingexpression#12L``), as the state
    #: store nodes list them
    keys: str
    #: the stateful exchange's line (``Exchange hashpartitioning(...), REQUIRED_BY_STATEFUL_OPERATOR, [plan_id=n]``)
    exchange: str
    #: the local sort below a sort-based step (``""``: a hash-based aggregation)
    sort: str
    #: the buffer rows' attributes (output of the partial and merge steps)
    buffer_output: tuple[str, ...]
    #: the final step's output attributes
    output: tuple[str, ...]
    #: a session-window aggregation's extra lines: ``keys`` (the keys without the session),
    #: ``session`` (the session attribute, ``session_window#8``), ``merging`` /
    #: ``merging_local`` (``MergingSessions`` after the restore / inside each input partition),
    #: ``merging_details`` and ``sort`` (the sort by keys and session)
    session: dict[str, str] = field(default_factory=dict)


class AggregateCallLike(Protocol):
    """What the aggregation's operators read of one planned aggregate call (the planner's
    ``AggregateCall`` of ``plan/aggregates.py`` and its kin): the output column's name, the state
    buffers, how they merge (``spec``), and the final value's column. Some calls also have
    ``hidden``, ``finished_column`` or ``final_over``/``inner`` (an expression over aggregates),
    read with ``getattr``. Read-only members: the calls are frozen dataclasses."""

    @property
    def output_name(self) -> str: ...

    @property
    def buffers(self) -> tuple[Any, ...]: ...

    @property
    def spec(self) -> Any: ...

    @property
    def sql(self) -> str:
        """The call's SQL text, as Spark's plan shows it."""
        ...

    @property
    def merge_groups(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The buffers' merge rules, each with the buffer columns it merges."""
        ...

    def partial_columns(self) -> list["Column"]:
        """The partial aggregation's columns (the buffers of one batch's rows)."""
        ...

    def partial_names(self) -> list[str]:
        """The names of :meth:`partial_columns`."""
        ...

    def state_fields(self) -> list[Any]:
        """The buffers' fields in the state's value schema."""
        ...

    def row_columns(self) -> list["Column"]:
        """The buffers of one row (a session window's rows before they merge)."""
        ...

    def recomputed_column(self, values: "Column", values_sql: str = "") -> "Column":
        """The final value recomputed over all kept ``values`` (a ``spec.recompute`` call)."""
        ...

    def final_column(self) -> "Column":
        """The call's final value, from its buffer columns."""
        ...


@dataclass(frozen=True)
class AggregationInfo:
    """Everything about one streaming aggregation that its operators share."""

    grouping: tuple[Any, ...] = field(repr=False)  # user grouping Columns (unresolved)
    grouping_names: tuple[str, ...]  # output names of the grouping columns
    key_columns: tuple[str, ...]  # internal names of the keys in state (__k0, __k1, ...)
    calls: tuple["AggregateCallLike", ...]
    output_schema: Any = field(repr=False)  # the template's StructType (final output)
    event_time_key: str | None = None  # internal key name carrying the event-time marker
    event_time_is_struct: bool = False  # a window struct: compare its `end` field
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)
    #: predicates over the grouping outputs, applied to the grouped rows before the state step
    #: (filters Spark's optimizer would push below the aggregation; see plan/optimizer.py)
    key_filters: tuple[Any, ...] = field(default=(), repr=False)
    #: "cube" or "rollup": keys are the grouping columns plus the grouping id (the last key)
    grouping_sets: str | None = None
    #: positions of the keys the exchange hashes into the state partition id: Spark's grouping
    #: after its optimizer dropped literal and repeated keys (``()``: all keys are literals, and
    #: Spark hashes the int literal ``0``); ``None``: all keys
    partition_key_indexes: tuple[int, ...] | None = None
    #: the node Spark's planner uses for all the aggregation's steps (``HASH_AGGREGATE``,
    #: ``OBJECT_HASH_AGGREGATE`` or ``SORT_AGGREGATE``), from Spark's own rule applied to the
    #: template's aggregate functions (``plan/planner.py::spark_aggregate_node``); explain only
    aggregate_node: str = HASH_AGGREGATE
    #: whether that node runs inside whole-stage codegen (explain's ``*(n)`` prefix)
    aggregate_codegen: bool = True
    #: Spark's text of the steps for ``explain()`` (``None``: statestream's own rendering)
    spark_text: AggregateExplainText | None = field(default=None, repr=False, compare=False)
    #: whether a batch may run this aggregation without its partial step (``PARTIAL_*``; set by
    #: the planner, which sees the aggregation's input)
    partial_skippable: str = PARTIAL_KEPT
    #: the output rows carry ``revision`` and ``is_final`` (``FINALITY_CONF``), and the state
    #: counts each key's emissions (``REVISION_STATE_FIELD``)
    finality: bool = False
    #: positions of the aggregate output columns no operator above reads: no call computes them
    #: and the state has no buffer for them (Spark's optimizer drops them); the rows carry a
    #: typed null under their names (``plan/column_pruning.py``)
    unread: tuple[int, ...] = ()

    @property
    def spark_key_names(self) -> tuple[str, ...]:
        """The grouping attributes as Spark's planner names them (``_groupingexpression`` for a
        computed key, literals dropped, ...): the state key schema's field names, which come
        from Spark's analysis; the output names when that analysis was not available."""
        fields = self.key_schema_json.get("fields") if self.key_schema_json else None
        return tuple(f["name"] for f in fields) if fields else self.grouping_names

    @property
    def partition_key_sql(self) -> tuple[str, ...]:
        """SQL expressions over the key columns that Spark's exchange hashes."""
        if self.partition_key_indexes is None:
            return tuple(f"`{k}`" for k in self.key_columns)
        return tuple(f"`{self.key_columns[i]}`" for i in self.partition_key_indexes) or ("0",)

    @property
    def partition_key_names(self) -> tuple[str, ...]:
        """The same keys by their output names (for ``explain()``)."""
        if self.partition_key_indexes is None:
            return self.grouping_names
        return tuple(self.grouping_names[i] for i in self.partition_key_indexes) or ("0",)

    @property
    def buffer_columns(self) -> tuple[str, ...]:
        return tuple(b.column for c in self.calls for b in c.buffers)

    @property
    def partial_names(self) -> tuple[str, ...]:
        """The batch aggregation's columns after the keys: the buffers, except that a Python
        aggregate function has its argument rows there (the state step updates its buffers)."""
        return tuple(n for c in self.calls for n in c.partial_names())

    def key_sql(self) -> str:
        if self.spark_text is not None:
            return self.spark_text.keys
        return ", ".join(self.grouping_names)

    def functions_sql(self, prefix: str) -> str:
        parts = []
        for c in self.calls:
            if hasattr(c, "final_over"):
                continue  # an expression over the calls before it, evaluated by the Final step
            inner = c.sql
            name = inner.split("(", 1)
            parts.append(f"{prefix}{name[0]}({name[1]}" if len(name) == 2 and prefix else inner)
        return ", ".join(parts)


@dataclass(frozen=True)
class StreamingAggregateExec(PhysicalOperator):
    """One aggregate step, shown under the name of the node Spark's planner would use
    (``info.aggregate_node``: the three nodes compute the same buffers, so statestream runs all
    of them the same way). ``mode`` is ``Partial``, ``PartialMerge`` or ``Final``; ``step``
    tells the two PartialMerge nodes apart (``exchange``: right after the shuffle, ``state``:
    after StateStoreRestore).

    The merged buffers are always asked for the keys' hash partitioning with ``repartition``,
    as Spark's stateful distribution requires: when the batch ``groupBy`` already shuffled by
    them, Spark drops the request as redundant; when its input is one partition (a limit below,
    a source batch read by a single task, which Spark reports as ``SinglePartition``), the
    ``groupBy`` does not shuffle at all and the request does."""

    child: PhysicalOperator | None = None
    info: AggregationInfo | None = None
    mode: str = "Partial"
    step: str = ""
    num_partitions: int | None = None

    def execute(self, ctx: "BatchContext") -> "DataFrame":
        from pyspark.sql import functions as F

        assert self.child is not None and self.info is not None
        df = self.child.execute(ctx)
        info = self.info
        if self.mode == "Partial" or (self.mode == "PartialMerge" and self.step == "state"):
            # Partial runs inside Spark's groupBy below; the second merge runs inside the
            # state step of StateStoreSaveExec (fused with restore and save).
            return df
        if self.mode == "PartialMerge":
            partials = [p for c in info.calls for p in c.partial_columns()]
            if info.grouping_sets:
                # cube/rollup: Spark's Expand runs inside this batch aggregation; its grouping id
                # becomes the last key, as in Spark's state
                group = {"cube": df.cube, "rollup": df.rollup}[info.grouping_sets]
                agg = group(*info.grouping).agg(*partials, F.grouping_id().alias(GROUPING_ID_NAME))
            else:
                grouping: tuple[Any, ...] = info.grouping
                if skips_partial(info.partial_skippable, ctx.skip_partial):
                    df, grouping = shuffled_by_keys(df, info, int(self.num_partitions or 1))
                agg = df.groupBy(*grouping).agg(*partials) if partials else df.groupBy(*grouping).count().drop("count")
            for cond in info.key_filters:
                agg = agg.filter(cond)
            if info.grouping_sets:
                n = len(info.grouping_names)
                agg = agg.toDF(*info.key_columns[:n], *info.partial_names, info.key_columns[n])
                agg = agg.select(*info.key_columns, *info.partial_names)
            else:
                agg = agg.toDF(*info.key_columns, *info.partial_names)
            if not info.key_columns:
                return agg.withColumn(PARTITION_ID_COLUMN, F.lit(0).cast("int"))
            n = int(self.num_partitions or 1)
            hashed = exchange_keys(agg, [F.expr(k) for k in info.partition_key_sql], info.key_schema_json)
            return agg.repartition(n, *hashed).withColumn(PARTITION_ID_COLUMN, state_partition_id(hashed, n))
        if self.mode == "Final":
            out_fields = {f.name: f for f in info.output_schema.fields}
            out = final_projection(df, info)
            casts = []
            for name in out.columns:
                if name not in out_fields:  # the route, or the finality columns (their own types)
                    casts.append(F.col(name))
                    continue
                field = out_fields[name]
                col = F.col(f"`{name}`").cast(field.dataType)
                # the metadata goes on with the alias: withMetadata(name) would parse a name
                # such as ``percentile_approx(x, 0.5, 10000)`` as a nested field
                casts.append(col.alias(name, metadata=dict(field.metadata)) if field.metadata else col.alias(name))
            return out.select(*casts)
        raise ValueError(f"unknown aggregate mode {self.mode}")

    def supports_codegen(self) -> bool:
        assert self.info is not None
        return self.info.aggregate_codegen

    def simple_string(self) -> str:
        assert self.info is not None
        if self.info.spark_text is not None:
            return self.info.spark_text.lines[self.mode]
        prefix = {"Partial": "partial_", "PartialMerge": "merge_", "Final": ""}[self.mode]
        return aggregate_string(self.info, prefix)

    def verbose_string(self) -> str:
        assert self.info is not None
        if self.info.spark_text is not None:
            return self.info.spark_text.verbose[self.mode]
        return self.simple_string()

    def formatted_details(self) -> str | None:
        assert self.info is not None
        return self.info.spark_text.details[self.mode] if self.info.spark_text is not None else None


def shuffled_by_keys(df: "DataFrame", info: AggregationInfo, num_partitions: int) -> "tuple[DataFrame, tuple[Column, ...]]":
    """``df`` with the grouping keys as columns, shuffled by the hash partitioning the state
    needs, and the grouping over those columns: the batch aggregation over it needs no exchange
    of its own, so Spark runs its partial and final steps after this one (``runtime.
    partial_aggregation`` tells when that is worth it).

    The keys are hashed as Spark's exchange hashes them (``partition_key_indexes``: literals
    left out, a repeated key once), so a key's rows meet in the task of its state partition.
    Should Spark ever not see the two partitionings as one, the ``repartition`` after the
    aggregation (``PartialMerge``) still puts each key in its partition, with one more
    exchange. The columns are named apart from the input's, and the grouping gives them back
    the output names, which the key filters read."""
    from pyspark.sql import functions as F

    taken = {c.lower() for c in df.columns}
    prefix = "__statestream_key"
    while any(c.startswith(prefix) for c in taken):
        prefix = "_" + prefix
    names = [f"{prefix}{i}" for i in range(len(info.grouping))]
    keyed = df.withColumns({n: F.col(g) if isinstance(g, str) else g for n, g in zip(names, info.grouping)})
    indexes = info.partition_key_indexes if info.partition_key_indexes is not None else range(len(names))
    keyed = keyed.repartition(num_partitions, *exchange_keys(keyed, [F.col(names[i]) for i in indexes], info.key_schema_json))
    return keyed, tuple(F.col(n).alias(out) for n, out in zip(names, info.grouping_names))


#: the name this class had when every step was shown as a HashAggregate
HashAggregateExec = StreamingAggregateExec


def aggregate_string(info: AggregationInfo, prefix: str) -> str:
    """The ``explain()`` line of one aggregate step. Spark prints a sort-based aggregate's keys
    as ``key=[...]`` (hash-based ones: ``keys=[...]``), and those are its grouping attributes,
    which the comparison with Spark's explain sees as they are."""
    functions = info.functions_sql(prefix)
    if info.aggregate_node == SORT_AGGREGATE:
        return f"{SORT_AGGREGATE}(key=[{', '.join(info.spark_key_names)}], functions=[{functions}])"
    return f"{info.aggregate_node}(keys=[{info.key_sql()}], functions=[{functions}])"


@dataclass(frozen=True)
class AggregateSortExec(ExecutedByParent, PhysicalOperator):
    """``Sort [K ASC NULLS FIRST], false, 0``: the local sort Spark inserts below each
    ``SortAggregate`` step (its required child ordering; Spark's own grouping and the state step
    need no such sort in statestream, so it only shows in ``explain()``)."""

    child: PhysicalOperator | None = None
    keys: tuple[str, ...] = ()
    #: explain only: Spark's line (attribute ids), when known
    spark_text: str = ""

    def supports_codegen(self) -> bool:
        return True

    def simple_string(self) -> str:
        if self.spark_text:
            return self.spark_text
        return "Sort [" + ", ".join(f"{k} ASC NULLS FIRST" for k in self.keys) + "], false, 0"


def sorted_for_aggregate(info: AggregationInfo, child: PhysicalOperator) -> PhysicalOperator:
    """``child`` under the ``Sort`` Spark puts below a sort-based aggregate step (it requires its
    input ordered by its grouping keys), or ``child`` itself when the aggregation is hash-based
    or has no keys (no ordering required)."""
    if info.aggregate_node == SORT_AGGREGATE and info.key_columns:
        return AggregateSortExec(child=child, keys=info.spark_key_names, spark_text=info.spark_text.sort if info.spark_text else "")
    return child


def final_projection(df: "DataFrame", info: AggregationInfo) -> "DataFrame":
    """Spark's Final aggregate over the merged buffer rows (one per key): the grouping columns
    under their output names, then each call's result.

    A call whose buffer keeps its input values (``percentile_approx``, ``approx_count_distinct``,
    ...; ``FunctionSpec.recompute``) is finished by Spark's own function over those values: the
    key's lists are zipped (``arrays_zip`` pads the shorter ones with nulls, which the functions
    skip) and exploded, keeping one row for a key whose lists are all empty, and one aggregation
    by the keys evaluates every such function, carrying the other results with ``first`` (all
    rows of a key hold the same values). The plan above the state step never branches, so the
    state step runs once per batch."""
    from pyspark.sql import functions as F

    keys = [F.col(k) for k in info.key_columns]
    out_keys = [F.col(k).alias(n) for k, n in zip(info.key_columns, info.grouping_names)]
    present = set(df.columns)
    # the state step's finality columns, under their output names (after the aggregates)
    finality = (
        {REVISION_COLUMN: F.col(REVISION_STATE_FIELD), IS_FINAL_COLUMN: F.col(IS_FINAL_STEP_COLUMN)}
        if info.finality and {REVISION_STATE_FIELD, IS_FINAL_STEP_COLUMN} <= present
        else {}
    )

    def final(c: "AggregateCallLike") -> "Column":
        # a call the state step already finished (its buffers were not emitted)
        finished = getattr(c, "finished_column", None)
        return F.col(finished) if finished in present else c.final_column()

    names = {id(c): f"__final{i}" for i, c in enumerate(info.calls)}
    leaves = [c for c in info.calls if not hasattr(c, "final_over")]
    again = [c for c in leaves if getattr(c.spec, "recompute", False)]
    carried = [c for c in leaves if not getattr(c.spec, "recompute", False)]
    if again:
        lists = [c.buffers[0].column for c in again]
        exploded = df.select(
            *keys,
            *(final(c).alias(names[id(c)]) for c in carried),
            *(col.alias(name) for name, col in finality.items()),
            F.explode_outer(F.arrays_zip(*(F.col(n) for n in lists))).alias("__values"),
        )
        # the finality columns are the key's own (one row per key): grouped by, as the keys
        done = exploded.groupBy(*keys, *(F.col(name) for name in finality)).agg(
            *(F.first(F.col(names[id(c)])).alias(names[id(c)]) for c in carried),
            *(
                c.recomputed_column(F.col("__values").getField(n), f"`__values`.`{n}`").alias(names[id(c)])
                for c, n in zip(again, lists)
            ),
        )
        finality = {name: F.col(name) for name in finality}
        value = {id(c): F.col(names[id(c)]) for c in leaves}
    else:
        done = df
        value = {id(c): final(c) for c in leaves}

    def result(c: "AggregateCallLike") -> "Column":
        if hasattr(c, "final_over"):
            over: Any = c  # an expression over aggregates (``ExpressionCall``)
            return over.final_over([result(i) for i in over.inner])
        return value[id(c)]

    shown = [c for c in info.calls if not getattr(c, "hidden", False)]
    # a one-task batch's rows keep their route to the batch's materialisation (never with a
    # recomputed call: its aggregation by the keys would spread them over partitions)
    routed = [F.col(ROUTE_COLUMN)] if ROUTE_COLUMN in present and not again else []
    ends = [col.alias(name) for name, col in finality.items()]
    return done.select(*out_keys, *_with_unread([result(c).alias(c.output_name) for c in shown], info), *ends, *routed)


def _with_unread(computed: list["Column"], info: AggregationInfo) -> list["Column"]:
    """The aggregate output columns in their order: ``computed`` ones, and a typed null for each
    unread one (``AggregationInfo.unread``)."""
    if not info.unread:
        return computed
    from pyspark.sql import functions as F

    fields = info.output_schema.fields[len(info.grouping_names) :]
    given = iter(computed)
    return [F.lit(None).cast(f.dataType).alias(f.name) if i in info.unread else next(given) for i, f in enumerate(fields)]


@dataclass(frozen=True)
class ShuffleExchangeExec(ExecutedByParent, PhysicalOperator):
    """``Exchange hashpartitioning(K, N), REQUIRED_BY_STATEFUL_OPERATOR`` (or ``SinglePartition``
    with no keys). Spark's own shuffle inside the aggregation's ``groupBy`` performs it."""

    child: PhysicalOperator | None = None
    keys: tuple[str, ...] = ()
    num_partitions: int | None = None
    #: explain only: Spark's line for this exchange (attribute and plan ids), when known
    spark_text: str = ""

    def simple_string(self) -> str:
        if self.spark_text:
            return self.spark_text
        if not self.keys:
            # Spark's streaming plan keeps the batch requirement for a single partition
            return "Exchange SinglePartition, ENSURE_REQUIREMENTS"
        return f"Exchange hashpartitioning({', '.join(self.keys)}, {self.num_partitions}), REQUIRED_BY_STATEFUL_OPERATOR"
