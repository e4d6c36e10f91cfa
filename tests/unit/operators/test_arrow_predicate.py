"""The Arrow form of a stream-stream join's condition (``operators/arrow_predicate.py``), without
Spark: SQL's three-valued logic, null-safe equality, timestamp ranges and integer arithmetic."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.arrow_predicate import evaluate_predicate, predicate_columns

UTC = dt.timezone.utc


def col(name: str) -> tuple:
    return ("col", name)


def lit(value, tag: str) -> tuple:
    return ("lit", value, tag)


def test_time_range_with_a_duration():
    """``rts >= lts AND rts <= lts + INTERVAL 5 SECONDS``, the usual bound of a stream join."""
    t0 = dt.datetime(2024, 5, 1, 12, tzinfo=UTC)
    lts = [t0, t0, t0, t0, None]
    rts = [t0, t0 + dt.timedelta(seconds=5), t0 + dt.timedelta(seconds=5, microseconds=1), t0 - dt.timedelta(microseconds=1), t0]
    table = pa.table({"l": pa.array(lts, pa.timestamp("us", tz="UTC")), "r": pa.array(rts, pa.timestamp("us", tz="UTC"))})
    tree = ("and", ("cmp", ">=", col("r"), col("l")), ("cmp", "<=", col("r"), ("add", col("l"), lit(5_000_000, "duration"), True)))
    assert evaluate_predicate(tree, table).tolist() == [True, True, False, False, False]


def test_three_valued_logic_null_is_false_only_at_the_end():
    """``NOT (a = 1)`` is null when ``a`` is null (not true), and ``null OR true`` is true."""
    table = pa.table({"a": pa.array([1, 2, None], pa.int64())})
    not_one = ("not", ("cmp", "==", col("a"), lit(1, "int64")))
    assert evaluate_predicate(not_one, table).tolist() == [False, True, False]
    or_true = ("or", ("cmp", "==", col("a"), lit(1, "int64")), lit(True, "bool"))
    assert evaluate_predicate(or_true, table).tolist() == [True, True, True]
    and_false = ("and", ("cmp", "==", col("a"), lit(1, "int64")), lit(False, "bool"))
    assert evaluate_predicate(and_false, table).tolist() == [False, False, False]


def test_null_safe_equality_and_null_tests():
    table = pa.table({"a": pa.array([1, None, None, 2], pa.int32()), "b": pa.array([1, None, 3, None], pa.int32())})
    assert evaluate_predicate(("cmp", "<=>", col("a"), col("b")), table).tolist() == [True, True, False, False]
    assert evaluate_predicate(("cmp", "==", col("a"), col("b")), table).tolist() == [True, False, False, False]
    assert evaluate_predicate(("is_null", col("a")), table).tolist() == [False, True, True, False]
    assert evaluate_predicate(("is_not_null", col("b")), table).tolist() == [True, False, True, False]


def test_strings_compare_by_bytes_as_spark_does():
    table = pa.table({"s": pa.array(["B", "a", "é", None])})
    assert evaluate_predicate(("cmp", "<", col("s"), lit("a", "string")), table).tolist() == [True, False, False, False]


def test_integer_arithmetic_widening_cast_and_overflow():
    table = pa.table({"i": pa.array([1, 2**31 - 1], pa.int32()), "l": pa.array([2, 2**31], pa.int64())})
    widened = ("cmp", "==", ("add", ("cast", col("i"), "int64"), lit(1, "int64"), True), col("l"))
    assert evaluate_predicate(widened, table).tolist() == [True, True]
    # ANSI mode: an overflow fails the query; legacy mode wraps around
    big = pa.table({"l": pa.array([2**63 - 1], pa.int64())})
    with pytest.raises(pa.ArrowInvalid):
        evaluate_predicate(("cmp", ">", ("add", col("l"), lit(1, "int64"), True), lit(0, "int64")), big)
    assert evaluate_predicate(("cmp", "<", ("add", col("l"), lit(1, "int64"), False), lit(0, "int64")), big).tolist() == [True]


def test_a_constant_predicate_covers_every_row():
    table = pa.table({"a": pa.array([1, 2, 3])})
    assert evaluate_predicate(lit(True, "bool"), table).tolist() == [True, True, True]
    assert evaluate_predicate(lit(None, "bool"), table).tolist() == [False, False, False]


def test_predicate_columns_lists_what_is_read():
    tree = ("and", ("cmp", ">=", col("__s1_1"), col("__s0_1")), ("is_null", col("__s0_2")))
    assert predicate_columns(tree) == {"__s0_1", "__s0_2", "__s1_1"}
    assert isinstance(evaluate_predicate(tree, pa.table({"__s1_1": [1], "__s0_1": [0], "__s0_2": [None]})), np.ndarray)
