"""The Arrow side of a user-defined aggregate function (operators/python_aggregate.py) without
Spark: per-key update from the batch's lists, merge with stored buffers, finish, and the errors
a wrong function gets."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from statestream.operators.aggregate_merge import merge_group
from statestream.operators.python_aggregate import (
    PythonAggregateRule,
    evaluate_group,
    finish_buffers,
    merge_buffer_tables,
    update_groups,
)

SCHEMA = pa.schema([("total", pa.float64()), ("n", pa.int64())])
ROWS = pa.struct([("_0", pa.float64())])


class Mean:
    """Arrow columns: the mean of the non-null values (null for none)."""

    function_name = "mean_fn"
    columns = "arrow"

    def zero(self):
        return {"total": 0.0, "n": 0}

    def update(self, buffer, values):
        return {"total": buffer["total"] + (pc.sum(values).as_py() or 0.0), "n": buffer["n"] + (len(values) - values.null_count)}

    def merge(self, left, right):
        return {"total": pc.add(left["total"], right["total"]), "n": pc.add(left["n"], right["n"])}

    def finish(self, buffers):
        n = buffers["n"]
        return pc.if_else(pc.equal(n, 0), pa.scalar(None, pa.float64()), pc.divide(buffers["total"], pc.cast(n, pa.float64())))


class PandasMean(Mean):
    columns = "pandas"

    def update(self, buffer, values):
        return {"total": buffer["total"] + float(values.sum()), "n": buffer["n"] + int(values.count())}

    def merge(self, left, right):
        return left + right

    def finish(self, buffers):
        return buffers["total"] / buffers["n"].where(buffers["n"] > 0)


def _lists(groups):
    return pa.array([[{"_0": v} for v in g] if g is not None else None for g in groups], type=pa.list_(ROWS))


@pytest.mark.parametrize("fn", [Mean(), PandasMean()], ids=["arrow", "pandas"])
def test_update_groups_one_buffer_per_key(fn):
    table = update_groups(fn, _lists([[1.0, 2.0, None], [], [5.0], None]), SCHEMA)
    assert table.to_pylist() == [
        {"total": 3.0, "n": 2},
        {"total": 0.0, "n": 0},
        {"total": 5.0, "n": 1},
        {"total": 0.0, "n": 0},
    ]


def test_update_groups_of_a_sliced_list_array():
    lists = _lists([[9.0], [1.0, 2.0], [4.0]]).slice(1)
    assert update_groups(Mean(), lists, SCHEMA).column("n").to_pylist() == [2, 1]


@pytest.mark.parametrize("fn", [Mean(), PandasMean()], ids=["arrow", "pandas"])
def test_merge_only_where_a_buffer_was_stored(fn):
    rule = PythonAggregateRule(fn, "__b0_input", ("__b0_0_total", "__b0_1_n"), SCHEMA)
    state = [pa.array([10.0, None, 1.0]), pa.array([2, None, 1])]
    batch = [pa.array([1.0, 2.0, 3.0]), pa.array([1, 1, 1])]
    found = pa.array([True, False, True])
    total, n = merge_group(rule, state, batch, found)
    assert total.to_pylist() == [11.0, 2.0, 4.0]
    assert n.to_pylist() == [3, 1, 2]


def test_any_split_of_the_input_gives_the_whole():
    values = [1.5, None, 2.0, 8.0, -3.0, 4.25]
    whole = update_groups(Mean(), _lists([values]), SCHEMA)
    for cut in range(len(values) + 1):
        left = update_groups(Mean(), _lists([values[:cut]]), SCHEMA)
        right = update_groups(Mean(), _lists([values[cut:]]), SCHEMA)
        merged = merge_buffer_tables(Mean(), left, right, SCHEMA)
        assert merged.to_pylist() == whole.to_pylist()
    assert math.isclose(finish_buffers(Mean(), whole, pa.float64())[0].as_py(), 12.75 / 5)


def test_update_table_replaces_the_lists_with_buffers():
    rule = PythonAggregateRule(Mean(), "__b0_input", ("__b0_0_total", "__b0_1_n"), SCHEMA)
    table = pa.table({"__k0": ["a", "b"], "__b0_input": _lists([[1.0], [2.0, 3.0]]), "__b1_0_count": [1, 2]})
    out = rule.update_table(table)
    assert out.column_names == ["__k0", "__b1_0_count", "__b0_0_total", "__b0_1_n"]
    assert out.column("__b0_0_total").to_pylist() == [1.0, 5.0]


def test_evaluate_group_is_finish_of_update():
    assert evaluate_group(Mean(), SCHEMA, pa.float64(), [pa.array([1.0, None, 3.0])]) == 2.0
    assert evaluate_group(PandasMean(), SCHEMA, pa.float64(), [pa.array([None], pa.float64())]) is None


class Wrong(Mean):
    function_name = "wrong"

    def update(self, buffer, values):
        return {"total": 1.0}


class ShortFinish(Mean):
    function_name = "short"

    def finish(self, buffers):
        return pa.array([1.0])


def test_errors_name_the_function_and_the_part():
    with pytest.raises(TypeError, match=r"wrong\.update\(\) must return a mapping with the buffer fields \['total', 'n'\]"):
        update_groups(Wrong(), _lists([[1.0]]), SCHEMA)
    buffers = pa.table({"total": [1.0, 2.0], "n": [1, 1]}, schema=SCHEMA)
    with pytest.raises(ValueError, match=r"short\.finish\(\) returned 1 results for 2 buffers"):
        finish_buffers(ShortFinish(), buffers, pa.float64())
