"""Differences the randomized differential tester (``test_random_queries.py``) found, each kept
as a small regression case that runs on both engines; the ones not fixed yet are declared in
``tests/known_gaps.py``."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_both

T0 = dt.datetime(2026, 1, 1)


@pytest.mark.parametrize("key_type", ["array<int>", "array<struct<a:int,b:string>>", "map<string,int>", "map<string,int> with a null value"])
def test_grouping_by_a_nested_key(spark, ours, tmp_path, key_type):
    """Grouping keys of nested types: equal arrays (and maps, whatever their entries' order)
    are one group, null and empty apart, across batches (the state store matches the keys)."""
    values = {
        "array<int>": [[1, 2], [1, 2], None, [], [None], [2, 1]],
        "array<struct<a:int,b:string>>": [[{"a": 1, "b": "x"}], [{"a": 1, "b": "x"}], None, [], [None], [{"a": 1, "b": None}]],
        "map<string,int>": [[("a", 1), ("b", 2)], [("b", 2), ("a", 1)], None, [], [("a", 0)], [("a", 1)]],
        "map<string,int> with a null value": [[("a", 1), ("b", 2)], [("b", 2), ("a", 1)], None, [], [("a", None)], [("a", 1)]],
    }[key_type]
    key_type = key_type.split(" ")[0]
    rows = [(i, T0 + dt.timedelta(seconds=i), v, i) for i, v in enumerate(values)]
    batches = [rows[:3], rows[3:], rows[:2]]
    expected, actual = run_both(
        spark, lambda df: df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")),
        batches, f"id BIGINT, ts TIMESTAMP, k {key_type}, v INT", "update", tmp_path, ours=ours,
    )
    assert_same_batches(expected, actual)


@pytest.mark.parametrize("value_type", ["array<int>", "struct<a:int,b:string>", "array<struct<a:int,b:string>>"])
def test_min_max_and_max_by_of_nested_values(spark, ours, tmp_path, value_type):
    """``min``/``max`` of arrays and structs (no Arrow kernel orders them), over a window in
    append mode and over plain keys in update mode: Spark's order (null elements first, a prefix
    first, field by field), across batches."""
    values = {
        "array<int>": [[1, 2], [1], None, [None, 5], [1, 2, 0], [3]],
        "struct<a:int,b:string>": [{"a": 1, "b": "x"}, {"a": None, "b": "y"}, None, {"a": 1, "b": "w"}, {"a": 2, "b": None}, {"a": 0, "b": "z"}],
        "array<struct<a:int,b:string>>": [[{"a": 1, "b": "x"}], [], None, [{"a": None, "b": "y"}], [{"a": 1, "b": "x"}, None], [{"a": 2, "b": ""}]],
    }[value_type]
    rows = [(i, T0 + dt.timedelta(seconds=2 * i), i % 2, v) for i, v in enumerate(values)]
    batches = [rows[:2], rows[2:4], rows[4:]]

    def windowed(df):
        return (df.withWatermark("ts", "2 seconds").groupBy(F.window("ts", "5 seconds"))
                .agg(F.max("v").alias("hi"), F.min("v").alias("lo"), F.max_by("id", "v").alias("id_of_hi")))

    def keyed(df):
        return df.groupBy("k").agg(F.max("v").alias("hi"), F.min("v").alias("lo"), F.min_by("id", "v").alias("id_of_lo"))

    schema = f"id BIGINT, ts TIMESTAMP, k INT, v {value_type}"
    for build, mode in ((windowed, "append"), (keyed, "update")):
        expected, actual = run_both(spark, build, batches, schema, mode, tmp_path / mode, ours=ours)
        assert_same_batches(expected, actual)
