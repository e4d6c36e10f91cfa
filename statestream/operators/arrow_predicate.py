"""A join condition evaluated on Arrow columns inside a task.

A stream-stream join matches this batch's rows with the stored rows of the other side in the
task that owns their state partition (Spark's ``StreamingSymmetricHashJoinExec`` does the same
per row). Spark expressions cannot run inside a Python task, so the planner translates the
condition's non-equality part into the small, picklable tree below when every node of it has an
exact Arrow counterpart (``plan.stream_joins.arrow_condition``), and the join falls back to
matching with a Spark join when it has not.

The tree is made of tuples:

* ``("col", name)``: a column of the candidate pairs;
* ``("lit", value, type)``: a literal, ``type`` one of :data:`LITERAL_TYPES`;
* ``("cmp", op, a, b)`` with ``op`` in ``== < <= > >= <=>`` (``<=>``: null-safe equality);
* ``("and", a, b)``, ``("or", a, b)``, ``("not", a)``: SQL's three-valued logic;
* ``("is_null", a)``, ``("is_not_null", a)``;
* ``("add", a, b, checked)``, ``("sub", a, b, checked)``: integers (``checked``: an overflow
  raises, as Spark's ANSI mode does) or a timestamp and a duration;
* ``("cast", a, type)``: a widening cast between integer types.

Only types whose Arrow comparison is Spark's are translated (integers, booleans, strings,
dates, timestamps); floating point (Spark orders NaN above everything and equals it to
itself) and decimals are left to Spark.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["LITERAL_TYPES", "evaluate_predicate", "predicate_columns"]

LITERAL_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "duration": pa.duration("us"),
}

_COMPARE = {"==": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def predicate_columns(tree: Any) -> set[str]:
    """The column names a predicate reads (so that only those are gathered for it)."""
    if tree[0] == "col":
        return {tree[1]}
    if tree[0] == "lit":
        return set()
    out: set[str] = set()
    for child in tree[1:]:
        if isinstance(child, tuple):
            out |= predicate_columns(child)
    return out


def evaluate_predicate(tree: Any, table: pa.Table) -> np.ndarray:
    """The rows of ``table`` where the predicate is true (null counts as false, as in a join)."""
    value = _eval(tree, table)
    if isinstance(value, pa.Scalar):
        return np.full(table.num_rows, bool(value.as_py()), dtype=bool)
    filled = pc.fill_null(value, False)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def _eval(tree: Any, table: pa.Table) -> Any:
    op = tree[0]
    if op == "col":
        col = table.column(tree[1])
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if op == "lit":
        return pa.scalar(tree[1], LITERAL_TYPES[tree[2]])
    if op == "cmp":
        a, b = _eval(tree[2], table), _eval(tree[3], table)
        if tree[1] == "<=>":
            both_null = pc.and_(pc.is_null(a), pc.is_null(b))
            return pc.or_(both_null, pc.fill_null(pc.equal(a, b), False))
        return _COMPARE[tree[1]](a, b)
    if op == "and":
        return pc.and_kleene(_eval(tree[1], table), _eval(tree[2], table))
    if op == "or":
        return pc.or_kleene(_eval(tree[1], table), _eval(tree[2], table))
    if op == "not":
        return pc.invert(_eval(tree[1], table))
    if op == "is_null":
        return pc.is_null(_eval(tree[1], table))
    if op == "is_not_null":
        return pc.is_valid(_eval(tree[1], table))
    if op in ("add", "sub"):
        a, b = _eval(tree[1], table), _eval(tree[2], table)
        if op == "add":
            return pc.add_checked(a, b) if tree[3] else pc.add(a, b)
        return pc.subtract_checked(a, b) if tree[3] else pc.subtract(a, b)
    if op == "cast":
        return pc.cast(_eval(tree[1], table), LITERAL_TYPES[tree[2]])
    msg = f"unknown predicate node {op!r}"
    raise ValueError(msg)
