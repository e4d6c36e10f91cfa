"""``explain()`` text in the shape Spark prints a physical plan."""

from __future__ import annotations

from statestream.operators.base import PhysicalOperator

__all__ = ["tree_string", "explain_string"]


def tree_string(plan: PhysicalOperator) -> str:
    """Spark's tree layout: ``+- `` before the last child, ``:- `` before the others."""
    lines: list[str] = []

    def go(node: PhysicalOperator, prefix: str, marker: str, last: bool) -> None:
        lines.append(prefix + marker + node.simple_string())
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
