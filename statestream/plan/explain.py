"""``explain()`` text in the shape Spark prints a physical plan."""

from __future__ import annotations

from statestream.operators.base import PhysicalOperator

__all__ = ["tree_string", "explain_string", "codegen_stage_ids"]


def codegen_stage_ids(plan: PhysicalOperator) -> dict[int, int]:
    """``id(node) -> n`` for the nodes Spark would compile into whole-stage codegen stage n.

    A stage is a maximal connected run of codegen-capable nodes; Spark numbers the stages in
    the order it finishes building them, children first, so the stage nearest the source is 1.
    """
    ids: dict[int, int] = {}
    counter = 0

    def members(node: PhysicalOperator) -> list[PhysicalOperator]:
        out = [node]
        for c in node.children:
            if c.supports_codegen():
                out.extend(members(c))
        return out

    def visit(node: PhysicalOperator, parent_codegen: bool) -> None:
        nonlocal counter
        for c in node.children:
            visit(c, node.supports_codegen())
        if node.supports_codegen() and not parent_codegen:
            counter += 1
            for m in members(node):
                ids[id(m)] = counter

    visit(plan, False)
    return ids


def tree_string(plan: PhysicalOperator) -> str:
    """Spark's tree layout: ``+- `` before the last child, ``:- `` before the others, and
    ``*(n) `` before the nodes of whole-stage codegen stage n."""
    lines: list[str] = []
    stages = codegen_stage_ids(plan)

    def go(node: PhysicalOperator, prefix: str, marker: str, last: bool) -> None:
        stage = stages.get(id(node))
        star = f"*({stage}) " if stage is not None else ""
        lines.append(prefix + marker + star + node.simple_string())
        kids = node.children
        child_prefix = prefix + ("" if not marker else ("   " if last else ":  "))
        for i, c in enumerate(kids):
            is_last = i == len(kids) - 1
            go(c, child_prefix, "+- " if is_last else ":- ", is_last)

    go(plan, "", "", True)
    return "\n".join(lines)


def explain_string(plan: PhysicalOperator, extended: bool = False, logical: str | None = None) -> str:
    out = []
    if extended and logical:
        out.append("== Analyzed Logical Plan ==\n" + logical + "\n")
    out.append("== Physical Plan ==\n" + tree_string(plan))
    return "\n".join(out) + "\n"
