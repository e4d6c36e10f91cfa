"""``explain()`` text in the shape Spark prints a physical plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from statestream.errors import unknown_explain_mode_error
from statestream.operators.base import PhysicalOperator, StateStoreWriter, node_name
from statestream.operators.join import SparkPlanNodeExec
from statestream.plan.spark_text import shown_output

if TYPE_CHECKING:
    from statestream.plan.logical import LogicalPlan

__all__ = [
    "tree_string",
    "explain_string",
    "codegen_stage_ids",
    "formatted_string",
    "logical_tree_string",
    "EXPLAIN_MODES",
    "AdaptiveSparkPlanExec",
    "as_spark_explains",
]


@dataclass(frozen=True)
class AdaptiveSparkPlanExec(PhysicalOperator):
    """The root Spark's ``explain()`` shows over a streaming query with no stateful operator
    whose plan has an exchange (a join's broadcast, a ``repartition``): adaptive execution then
    applies to Spark's plan of the DataFrame, and its initial plan is shown without whole-stage
    codegen. Explain only: a running query's batches are never adaptive."""

    child: PhysicalOperator | None = None

    def simple_string(self) -> str:
        return "AdaptiveSparkPlan isFinalPlan=false"

    def formatted_details(self) -> str | None:
        """Spark lists the adaptive root's output (not its input) above its arguments."""
        shown = shown_output(self.child)
        head = f"Output [{len(shown)}]: [{', '.join(shown)}]\n" if shown is not None else ""
        return head + "Arguments: isFinalPlan=false"


#: Spark's exchange nodes, by the name ``explain()`` shows
_EXCHANGES = ("Exchange", "BroadcastExchange")


def as_spark_explains(plan: PhysicalOperator) -> PhysicalOperator:
    """``plan`` as Spark's ``explain()`` of the streaming DataFrame shows it: under
    ``AdaptiveSparkPlan`` when no operator keeps state and some node is an exchange."""
    nodes = list(plan.walk())
    if any(isinstance(n, StateStoreWriter) for n in nodes):
        return plan
    if not any(node_name(n) in _EXCHANGES for n in nodes):
        return plan
    return AdaptiveSparkPlanExec(child=plan.transform_up(_without_columnar_transitions))


def _without_columnar_transitions(node: PhysicalOperator) -> PhysicalOperator:
    """A node taken from Spark's plan minus the columnar-to-row transitions, which Spark inserts
    only when it prepares a plan to run: its adaptive initial plan does not show them."""
    if isinstance(node, SparkPlanNodeExec) and node.text in ("ColumnarToRow", "RowToColumnar") and len(node.inputs) == 1:
        return node.inputs[0]
    return node


def _starts_stage(node: PhysicalOperator) -> bool:
    """Whether Spark compiles ``node`` into a codegen stage of its own even below a codegen
    parent (a sort-merge join's inputs, say); only nodes taken from Spark's own plan say so."""
    starts = getattr(node, "starts_codegen_stage", None)
    return bool(starts()) if callable(starts) else False


def codegen_stage_ids(plan: PhysicalOperator) -> dict[int, int]:
    """``id(node) -> n`` for the nodes Spark would compile into whole-stage codegen stage n.

    A stage is a maximal connected run of codegen-capable nodes; Spark numbers the stages in
    the order it finishes building them, children first, so the stage nearest the source is 1.
    Under ``AdaptiveSparkPlan`` no node is marked (Spark shows the adaptive initial plan).
    """
    ids: dict[int, int] = {}
    counter = 0
    if isinstance(plan, AdaptiveSparkPlanExec):
        return ids

    def members(node: PhysicalOperator) -> list[PhysicalOperator]:
        out = [node]
        for c in node.children:
            if c.supports_codegen() and not _starts_stage(c):
                out.extend(members(c))
        return out

    def visit(node: PhysicalOperator, parent_codegen: bool) -> None:
        nonlocal counter
        for c in node.children:
            visit(c, node.supports_codegen())
        if node.supports_codegen() and (not parent_codegen or _starts_stage(node)):
            counter += 1
            for m in members(node):
                ids[id(m)] = counter

    visit(plan, False)
    return ids


def tree_string(plan: PhysicalOperator, verbose: bool = False) -> str:
    """Spark's tree layout: ``+- `` before the last child, ``:- `` before the others, and
    ``*(n) `` before the nodes of whole-stage codegen stage n; ``verbose``: each node's verbose
    line (Spark's extended explain)."""
    lines: list[str] = []
    stages = codegen_stage_ids(plan)

    def go(node: PhysicalOperator, prefix: str, marker: str, last: bool) -> None:
        stage = stages.get(id(node))
        star = f"*({stage}) " if stage is not None else ""
        lines.append(prefix + marker + star + (node.verbose_string() if verbose else node.simple_string()))
        kids = node.children
        child_prefix = prefix + ("" if not marker else ("   " if last else ":  "))
        for i, c in enumerate(kids):
            is_last = i == len(kids) - 1
            go(c, child_prefix, "+- " if is_last else ":- ", is_last)

    go(plan, "", "", True)
    return "\n".join(lines)


def formatted_string(plan: PhysicalOperator) -> str:
    """Spark's ``explain(mode="formatted")``: the tree with numbered operators (children first),
    then each operator's details."""
    stages = codegen_stage_ids(plan)
    numbers: dict[int, int] = {}
    order: list[PhysicalOperator] = []

    def number(node: PhysicalOperator) -> None:
        for c in node.children:
            number(c)
        order.append(node)
        numbers[id(node)] = len(order)

    number(plan)
    lines: list[str] = []

    def go(node: PhysicalOperator, prefix: str, marker: str, last: bool) -> None:
        star = "* " if id(node) in stages else ""
        lines.append(f"{prefix}{marker}{star}{node.formatted_name() or node_name(node)} ({numbers[id(node)]})")
        kids = node.children
        child_prefix = prefix + ("" if not marker else ("   " if last else ":  "))
        for i, c in enumerate(kids):
            go(c, child_prefix, "+- " if i == len(kids) - 1 else ":- ", i == len(kids) - 1)

    go(plan, "", "", True)
    details = []
    for node in order:
        head = f"({numbers[id(node)]}) {node_name(node)}"
        if id(node) in stages:
            head += f" [codegen id : {stages[id(node)]}]"
        body = node.formatted_details()
        if body is None:
            body = _default_details(node)
        details.append(head + (f"\n{body}" if body else "") + "\n")
    return "\n".join(lines) + "\n\n\n" + "\n".join(details)


def _default_details(node: PhysicalOperator) -> str:
    """The details Spark's formatted explain writes for a node without its own: the input's
    attributes (a leaf: its output's), when known, then the arguments of its line."""
    lines = []
    kids = node.children
    attributes = shown_output(kids[0]) if len(kids) == 1 else (shown_output(node) if not kids else None)
    if attributes is not None:
        lines.append(f"{'Input' if kids else 'Output'} [{len(attributes)}]: [{', '.join(attributes)}]")
    text = node.simple_string()
    arguments = text[len(node_name(node)) :].strip() if text.startswith(node_name(node)) else text
    if arguments:
        lines.append(f"Arguments: {arguments}")
    return "\n".join(lines)


def codegen_string(plan: PhysicalOperator) -> str:
    """``explain(mode="codegen")``: the whole-stage codegen subtrees. Spark compiles their code
    for each micro-batch's own plan, so there is no code to show before a batch runs."""
    stages = codegen_stage_ids(plan)
    roots: dict[int, PhysicalOperator] = {}

    def visit(node: PhysicalOperator) -> None:
        stage = stages.get(id(node))
        if stage is not None and stage not in roots:
            roots[stage] = node
        for c in node.children:
            visit(c)

    visit(plan)
    out = [f"Found {len(roots)} WholeStageCodegen subtrees."]
    for i, stage in enumerate(sorted(roots), 1):
        out.append(f"== Subtree {i} / {len(roots)} ==")
        out.append(tree_string(roots[stage]))
        out.append("\nGenerated code: compiled by Spark for each micro-batch's plan (none before a batch runs)\n")
    return "\n".join(out)


def explain_string(
    plan: PhysicalOperator,
    extended: bool = False,
    logical: "str | dict[str, str] | None" = None,
    mode: str | None = None,
    schema_line: str = "",
) -> str:
    """The text of ``explain()`` in one of Spark's modes (``simple``, ``extended``,
    ``formatted``, ``cost``, ``codegen``); ``extended=True`` means ``extended``. ``logical`` is
    the logical plan's tree (``logical_tree_string``) for the modes that show it, or Spark's own
    trees by section (``parsed``, ``analyzed``, ``optimized``, ``cost``: see
    ``plan/spark_text.py``), and ``schema_line`` the output's ``name: type, ...`` line Spark
    prints above the analysed plan."""
    mode = (mode or ("extended" if extended else "simple")).lower()
    if mode not in EXPLAIN_MODES:
        raise unknown_explain_mode_error(mode)
    if mode == "formatted":
        return "== Physical Plan ==\n" + formatted_string(plan) + "\n"
    if mode == "codegen":
        return codegen_string(plan) + "\n"
    out = []
    # (read only when ``logical`` is given)
    sections = logical if isinstance(logical, dict) else dict.fromkeys(("parsed", "analyzed", "optimized", "cost"), logical or "")
    if mode == "extended" and logical:
        out.append("== Parsed Logical Plan ==\n" + sections["parsed"] + "\n")
        out.append("== Analyzed Logical Plan ==\n" + (schema_line + "\n" if schema_line else "") + sections["analyzed"] + "\n")
        out.append("== Optimized Logical Plan ==\n" + sections["optimized"] + "\n")
    if mode == "cost" and logical:
        out.append("== Optimized Logical Plan ==\n" + sections["cost"] + "\n")
    out.append("== Physical Plan ==\n" + tree_string(plan, verbose=mode in ("extended", "cost")))
    return "\n".join(out) + "\n"


#: the modes of PySpark's ``DataFrame.explain(mode=...)``
EXPLAIN_MODES = ("simple", "extended", "codegen", "cost", "formatted")


def logical_tree_string(plan: "LogicalPlan") -> str:
    """statestream's logical plan in Spark's tree layout (``~`` marks a streaming node, as
    Spark marks the nodes over a streaming source)."""
    lines: list[str] = []

    def describe(node: "LogicalPlan") -> str:
        op = getattr(node, "op", None) or node.node_name
        text = getattr(node, "description", "") or ""
        if node.node_name == "StreamingRelation":
            text = ", ".join(node.schema.names)
        return f"~{op} {text}".rstrip()

    def go(node: "LogicalPlan", prefix: str, marker: str, last: bool) -> None:
        lines.append(prefix + marker + describe(node))
        kids = node.children
        child_prefix = prefix + ("" if not marker else ("   " if last else ":  "))
        for i, c in enumerate(kids):
            go(c, child_prefix, "+- " if i == len(kids) - 1 else ":- ", i == len(kids) - 1)

    go(plan, "", "", True)
    return "\n".join(lines)
