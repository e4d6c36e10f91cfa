"""Reading Spark's JVM plan objects from Python: Scala sequences as lists.

The planner reads Spark's analysed and optimised plans through py4j. A Scala ``Seq`` has no
Python iteration protocol, so every reader turns one into a list the same way; it is kept here
once so that the planner modules share it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["jvm_seq", "expr_ids"]


def jvm_seq(seq: Any) -> list[Any]:
    """The elements of a Scala ``Seq`` (a py4j proxy), in order."""
    return [seq.apply(i) for i in range(seq.size())]


def expr_ids(seq: Any) -> list[int]:
    """The expression ids of a Scala ``Seq`` of named expressions (a plan's output, a
    dedup's keys): how the planner finds the same column again in another of Spark's plans."""
    return [int(e.exprId().id()) for e in jvm_seq(seq)]
