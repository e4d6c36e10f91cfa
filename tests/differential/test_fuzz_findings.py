"""Differences the randomized differential tester (``test_random_queries.py``) found, each kept
as a small regression case that runs on both engines; the ones not fixed yet are declared in
``tests/known_gaps.py``."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_both

T0 = dt.datetime(2026, 1, 1)


@pytest.mark.parametrize("key_type", ["array<int>", "array<struct<a:int,b:string>>", "map<string,int>"])
def test_grouping_by_a_nested_key(spark, ours, tmp_path, key_type):
    """Grouping keys of nested types: equal arrays (and maps, whatever their entries' order)
    are one group, null and empty apart, across batches (the state store matches the keys)."""
    values = {
        "array<int>": [[1, 2], [1, 2], None, [], [None], [2, 1]],
        "array<struct<a:int,b:string>>": [[{"a": 1, "b": "x"}], [{"a": 1, "b": "x"}], None, [], [None], [{"a": 1, "b": None}]],
        "map<string,int>": [[("a", 1), ("b", 2)], [("b", 2), ("a", 1)], None, [], [("a", None)], [("a", 1)]],
    }[key_type]
    rows = [(i, T0 + dt.timedelta(seconds=i), v, i) for i, v in enumerate(values)]
    batches = [rows[:3], rows[3:], rows[:2]]
    expected, actual = run_both(
        spark, lambda df: df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")),
        batches, f"id BIGINT, ts TIMESTAMP, k {key_type}, v INT", "update", tmp_path, ours=ours,
    )
    assert_same_batches(expected, actual)
