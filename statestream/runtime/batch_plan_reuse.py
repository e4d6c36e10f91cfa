"""One batch's Spark plan serving the batches after it.

A statestream batch is a chain of DataFrame steps (the source's rows, the watermark's
observation, the partial aggregation, the exchange, the state step's ``mapInArrow``, the final
projection), and PySpark analyses each step as it is made: on W9 (20 rows a batch) building that
chain took about 100 ms of a 450 ms batch, against about 20 ms of planning in Spark's engine,
which plans each batch from the same logical plan (``IncrementalExecution``) without building
anything again.

Here the first batch that can serve as a template keeps its analysed plan; each later batch
takes that plan with the source relations swapped for the batch's own (``LogicalRelation.copy``
with this batch's files and the template's output attributes, so that every attribute above
still resolves), through a Scala map handed to ``transform``, as ``plan.current_time`` already
does for the batch timestamp. What else changes between batches reaches the plan another way:

* the state steps take their per-batch fields (the store's version, the watermarks) from a
  local property the driver sets before the batch's job (``StateStep.batch_args_property``), so
  the pickled step in the plan is the same for every batch;
* the observations (the watermark's event-time statistics, a source's input count) keep the
  template's names, and their values are read by name from the executed plan of the batch
  (``QueryExecution.observedMetrics``), not through the template's ``Observation`` objects;
* the batch timestamp is fixed afterwards on the swapped plan (``with_batch_timestamp``);
* a watermark node's lateness reference (``operators.lateness``) is a column of its own, whose
  value is swapped in with the relations.

Only what is known to carry nothing else per batch is reused (:func:`reusable_plan`): streaming
aggregations, session windows, deduplications and stateless queries over file sources, each
source read through one relation node, every expression deterministic (Spark's engine seeds
``rand()`` and ``uuid()`` again for each batch). A batch whose sources are not plain file
relations (another source kind) is built as before; a file source with nothing new in a batch
gives its reader over no files (``Source.empty_relation``), so that batch runs on the kept plan
too. Every batch is built for any other query, for a driver whose Python threads share JVM
threads (``PYSPARK_PIN_THREAD=false``: a local property would not reach the batch's jobs), and
for a query with ``spark.statestream.planReuse.enabled=false``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from statestream._jvm.calls import (
    java_class,
    java_dataframe,
    java_session,
    jvm_plan_nodes,
    jvm_seq,
    jvm_view,
    static_member,
)
from statestream.operators.base import ExecutedByParent, StatefulOperator, StateStoreWriter, batch_args_property
from statestream.operators.basic import UnionExec
from statestream.operators.limit import LocalLimitExec
from statestream.operators.watermark import lateness_reference_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = [
    "PLAN_REUSE_CONF",
    "BatchPlanTemplate",
    "PlanReuse",
    "clear_batch_args",
    "observed_by_name",
    "pinned_threads",
    "reusable_plan",
    "set_batch_args",
]

#: statestream's conf: build each batch's DataFrame once and reuse its plan (default true)
PLAN_REUSE_CONF = "spark.statestream.planReuse.enabled"


def reusable_plan(plan: "PhysicalOperator") -> bool:
    """Whether a batch plan of this physical plan may serve later batches: every stateful
    operator's step takes its per-batch fields from a local property (a streaming aggregation's,
    a session window's, a deduplication's: ``StateStoreWriter.reusable_in_batch_plans``), no
    local limit counts its scans from the executed plan, and no union runs an input on its own
    while the batch is built (its materialised rows belong to that batch)."""
    for node in plan.walk():
        if isinstance(node, LocalLimitExec):
            return False
        if isinstance(node, UnionExec) and node.materialises_inputs():
            return False
        if isinstance(node, StatefulOperator) and not getattr(node, "reusable_in_batch_plans", False):
            return False
    return True


def _file_relation(df: "DataFrame") -> Any:
    """The analysed plan of ``df`` when it is a file source's ``LogicalRelation``, else None."""
    plan = java_dataframe(df).queryExecution().analyzed()
    return plan if plan.getClass().getSimpleName() == "LogicalRelation" else None


def _not_a_template(plan: Any, leaves: Mapping[int, Any]) -> str | None:
    """Why the analysed ``plan`` cannot serve later batches, or None when it can.

    * Each source must be read through exactly one relation node: Spark gives a second read of
      the same relation (a self-union, a view read twice) new attribute ids, so a swap keyed on
      the first would leave the second reading the template's files.
    * Every expression must be deterministic: Spark's engine seeds ``rand()``, ``uuid()`` and
      ``shuffle()`` again for each batch, which a kept plan would not (``spark_partition_id()``
      is let through: it has no seed)."""
    counts = {i: 0 for i in leaves}
    for leaf in jvm_seq(plan.collectLeaves()):
        if leaf.getClass().getSimpleName() != "LogicalRelation":
            continue
        for i, relation in leaves.items():
            if leaf.relation().equals(relation.relation()):
                counts[i] += 1
    twice = sorted(i for i, n in counts.items() if n != 1)
    if twice:
        return f"source(s) {twice} read through {[counts[i] for i in twice]} relation nodes"
    if not plan.deterministic():
        seeded = _seeded_expressions(plan)
        if seeded:
            return f"it has nondeterministic expressions ({', '.join(sorted(set(seeded)))})"
    return None


#: nondeterministic expressions that a kept plan evaluates as a new plan would: their value
#: depends on the partition a row is in, not on a seed drawn when the plan was analysed (a
#: session window's partial step tags each row with ``spark_partition_id()``)
PARTITION_BOUND_EXPRESSIONS = frozenset({"SparkPartitionID"})


def _seeded_expressions(plan: Any) -> list[str]:
    """Class names of the nondeterministic expressions of the analysed ``plan`` that are not
    :data:`PARTITION_BOUND_EXPRESSIONS` (an expression is counted where its nondeterminism
    starts: none of its children is nondeterministic)."""
    found: list[str] = []
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        pending = jvm_seq(node.expressions())
        while pending:
            expr = pending.pop()
            if expr.deterministic():
                continue
            nondeterministic = [c for c in jvm_seq(expr.children()) if not c.deterministic()]
            if not nondeterministic and expr.getClass().getSimpleName() not in PARTITION_BOUND_EXPRESSIONS:
                found.append(expr.getClass().getSimpleName())
            pending.extend(nondeterministic)
        nodes.extend(jvm_seq(node.children()))
    return found


def _state_savers(plan: "PhysicalOperator") -> list[Any]:
    """The operators of ``plan`` that run a state step of their own (a restore's work is done
    by the save's step above it)."""
    return [n for n in plan.walk() if isinstance(n, StateStoreWriter) and not isinstance(n, ExecutedByParent)]


def pinned_threads(sc: Any) -> bool:
    """Whether each Python thread has its own JVM thread (PySpark's default, ``PYSPARK_PIN_THREAD``
    not false): only then does a local property the query thread sets reach the jobs it
    submits."""
    from py4j.clientserver import ClientServer

    return isinstance(getattr(sc, "_gateway", None), ClientServer)


def set_batch_args(sc: Any, plan: "PhysicalOperator", keys: list[str]) -> None:
    """Set, for the jobs this thread submits next, each state step's per-batch fields from this
    batch's ``plan``, adding each property set to ``keys`` (for :func:`clear_batch_args`, also
    after a failure here)."""
    for node in _state_savers(plan):
        key = batch_args_property(node.get_state_info().operator_id)
        keys.append(key)
        sc.setLocalProperty(key, json.dumps(node.step_batch_args()))


def clear_batch_args(sc: Any, keys: list[str]) -> None:
    for key in keys:
        sc.setLocalProperty(key, None)


@dataclass
class BatchPlanTemplate:
    """A batch's analysed plan kept for later batches, with what a batch swaps or reads in it."""

    #: the analysed JVM plan of the batch's result (before the batch timestamp)
    plan: Any
    #: source index -> the file relation the template read (replaced in each batch)
    leaves: dict[int, Any]
    #: source index -> the name of its input-count observation in the plan
    input_names: dict[int, str]
    #: watermark node id -> the name of its event-time observation in the plan
    watermark_names: dict[str, str]
    #: source index -> its relation's schema (JSON): a batch's relation must have the same
    leaf_schemas: dict[int, str] = field(default_factory=dict)
    #: source index -> what a batch's relation keeps of the template's (``LogicalRelation.copy``'s
    #: arguments after the relation: output, catalog table, streaming flag, stream), read once
    leaf_fields: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    #: watermark node id -> the alias in the plan that gives its lateness reference column
    lateness_aliases: dict[str, Any] = field(default_factory=dict)


@dataclass
class PlanReuse:
    """The templates of one run of a query, one per shape of batch (``BatchContext.plan_shape``:
    whether its state partitions run in one task, which aggregations skip their partial step);
    :meth:`instantiate` gives a batch's DataFrame from one."""

    templates: dict[tuple[bool, str], BatchPlanTemplate] = field(default_factory=dict)
    #: set when a swap failed (a Spark whose constructors differ): every batch is then built
    disabled: bool = False

    def capture(
        self,
        result: "DataFrame",
        raw_sources: Mapping[int, "DataFrame"],
        read: set[int],
        input_observations: Mapping[int, Any],
        watermark_observations: Mapping[str, Any],
        shape: tuple[bool, str],
        extra: Mapping[str, Any],
    ) -> None:
        """Keep ``result``'s plan as the template for batches of its shape, when every source it
        reads (``read``) came as a file relation and nothing in the batch (``extra``: a user's
        observation) is read through objects of this batch alone."""
        if self.disabled or shape in self.templates or extra:
            return
        leaves = {}
        for i in read:
            df = raw_sources.get(i)
            if df is None:  # no new data in this source: a later batch may serve
                return
            relation = _file_relation(df)
            if relation is None:  # another kind of source, in every batch of the run
                self.disabled = True
                logger.debug("source %d does not give file relations: every batch is built", i)
                return
            leaves[i] = relation
        plan = java_dataframe(result).queryExecution().analyzed()
        why = _not_a_template(plan, leaves)
        if why:
            self.disabled = True
            logger.debug("batch plan not reused: %s", why)
            return
        self.templates[shape] = BatchPlanTemplate(
            plan=plan,
            leaves=leaves,
            leaf_schemas={i: r.schema().json() for i, r in leaves.items()},
            leaf_fields={i: (r.output(), r.catalogTable(), r.isStreaming(), r.stream()) for i, r in leaves.items()},
            input_names={i: obs._name for i, obs in input_observations.items()},  # noqa: SLF001 - its name in the plan
            watermark_names={n: obs._name for n, obs in watermark_observations.items()},  # noqa: SLF001
            lateness_aliases=_lateness_aliases(plan, list(watermark_observations)),
        )
        logger.debug("batch plan kept for reuse (%d source relation(s))", len(leaves))

    def instantiate(
        self,
        spark: "SparkSession",
        raw_sources: Mapping[int, "DataFrame"],
        shape: tuple[bool, str],
        lateness_references: Mapping[str, int | None] | None = None,
    ) -> "tuple[DataFrame, BatchPlanTemplate] | None":
        """This batch's DataFrame from the template of its shape, with its sources' relations
        and its watermark nodes' lateness references (node id -> ms) swapped in; None when
        there is none or a source is not a file relation this time."""
        from pyspark.sql import DataFrame

        template = self.templates.get(shape)
        if template is None or self.disabled:
            return None
        jvm = jvm_view(spark)
        swaps = java_class(jvm, "java.util.HashMap")()
        try:
            for i, old in template.leaves.items():
                df = raw_sources.get(i)
                new = _file_relation(df) if df is not None else None
                if new is None or new.schema().json() != template.leaf_schemas[i]:
                    return None
                swaps.put(old, old.copy(new.relation(), *template.leaf_fields[i]))
            # A Scala Map is a PartialFunction: it rewrites exactly the relations it holds as keys.
            as_scala = static_member(jvm, "scala.jdk.javaapi.CollectionConverters", "asScala")
            plan = template.plan.transform(as_scala(swaps))
            if template.lateness_aliases:
                plan = plan.transformAllExpressions(as_scala(_lateness_swaps(jvm, template.lateness_aliases, lateness_references or {})))
            jdf = static_member(jvm, "org.apache.spark.sql.classic.Dataset", "ofRows")(java_session(spark), plan)
        except Exception:  # only an optimisation: the batch is built instead
            logger.warning("statestream: a batch plan could not be reused; building every batch", exc_info=True)
            self.disabled = True
            return None
        return DataFrame(jdf, spark), template


def _lateness_aliases(plan: Any, node_ids: list[str]) -> dict[str, Any]:
    """The aliases of the analysed ``plan`` that give the watermark nodes ``node_ids`` their
    lateness reference column (``lateness_reference_column``), by node id."""
    wanted = {lateness_reference_column(n): n for n in node_ids}
    found: dict[str, Any] = {}
    for node in jvm_plan_nodes(plan):
        if node.getClass().getSimpleName() != "Project":
            continue
        for e in jvm_seq(node.projectList()):
            if e.getClass().getSimpleName() == "Alias" and str(e.name()) in wanted:
                found[wanted[str(e.name())]] = e
    return found


def _lateness_swaps(jvm: Any, aliases: Mapping[str, Any], references: Mapping[str, int | None]) -> Any:
    """A Java map from each lateness reference alias of a template (``CAST(<literal> AS
    BIGINT) AS <column>``) to the same alias (same expression id) over this batch's reference."""
    as_scala = static_member(jvm, "scala.jdk.javaapi.CollectionConverters", "asScala")
    literal = java_class(jvm, "org.apache.spark.sql.catalyst.expressions.Literal")

    def seq(expression: Any) -> Any:
        values = java_class(jvm, "java.util.ArrayList")()
        values.add(expression)
        return as_scala(values).toSeq()

    types = java_class(jvm, "org.apache.spark.sql.types.DataTypes")
    swaps = java_class(jvm, "java.util.HashMap")()
    for node_id, alias in aliases.items():
        value = references.get(node_id)
        # py4j passes an int that fits 32 bits as an Integer: the cast above makes it a BIGINT
        small = value is not None and -(2**31) <= int(value) < 2**31
        new = literal.create(None if value is None else int(value), types.IntegerType if small else types.LongType)
        swaps.put(alias, alias.withNewChildren(seq(alias.child().withNewChildren(seq(new)))))
    return swaps


def observed_by_name(df: "DataFrame", names: list[str]) -> dict[str, dict | None]:
    """The values of the observations ``names`` in ``df``'s executed plan (None for one that
    did not run)."""
    metrics = java_dataframe(df).queryExecution().observedMetrics()
    out: dict[str, dict | None] = {}
    for name in names:
        row = metrics.get(name)
        out[name] = json.loads(row.get().json()) if row.isDefined() else None
    return out
