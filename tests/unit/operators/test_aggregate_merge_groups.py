"""Pure tests of the merge groups (``operators/aggregate_merge.py``): buffers built from parts
of the input and merged in any split equal the buffer of the whole, as Spark's PartialMerge
promises; order-sensitive rules keep the stored (left) side's priority."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from statestream.operators.aggregate_merge import merge_group, merge_group_segments


def moments_of(values: np.ndarray, order: int) -> list[float]:
    """The CentralMomentAgg buffer ``n, avg, m2..`` of ``values``, computed directly."""
    n = float(len(values))
    avg = float(values.mean()) if len(values) else 0.0
    out = [n, avg]
    for k in range(2, order + 1):
        out.append(float(((values - avg) ** k).sum()) if len(values) else 0.0)
    return out


def as_columns(buffers: list[list[float]]) -> list[pa.Array]:
    return [pa.array([b[i] for b in buffers], pa.float64()) for i in range(len(buffers[0]))]


@pytest.mark.parametrize("seed", range(5))
def test_moments_of_any_split_equal_the_whole(seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(100.0, 7.0, size=200)
    cuts = np.sort(rng.choice(np.arange(1, 200), size=6, replace=False))
    parts = np.split(values, cuts)
    parts.insert(2, np.array([]))  # an empty buffer (all-null group) merges as the identity
    merged = merge_group_segments("moments", as_columns([moments_of(p, 4) for p in parts]), np.array([0]))
    expected = moments_of(values, 4)
    for got, want in zip(merged, expected):
        assert got[0].as_py() == pytest.approx(want, rel=1e-9, abs=1e-6)


def test_two_way_moments_merge_uses_the_batch_where_nothing_is_stored():
    a, b = np.array([1.0, 2.0, 4.0]), np.array([8.0, 16.0])
    state = as_columns([moments_of(a, 2), [0.0, 0.0, 0.0]])
    state = [pa.array([s[0].as_py(), None]) for s in state]
    batch = as_columns([moments_of(b, 2), moments_of(b, 2)])
    out = merge_group("moments", state, batch, pa.array([True, False]))
    whole = moments_of(np.concatenate([a, b]), 2)
    assert [c[0].as_py() for c in out] == pytest.approx(whole)
    assert [c[1].as_py() for c in out] == pytest.approx(moments_of(b, 2))


def test_covariance_and_correlation_moments_merge():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=50), rng.normal(size=50)

    def buf(xs, ys):
        n = float(len(xs))
        mx, my = xs.mean(), ys.mean()
        return [n, mx, my, float(((xs - mx) * (ys - my)).sum()), float(((xs - mx) ** 2).sum()), float(((ys - my) ** 2).sum())]

    parts = [buf(x[:10], y[:10]), buf(x[10:31], y[10:31]), buf(x[31:], y[31:])]
    merged = merge_group_segments("covariance", as_columns(parts), np.array([0]))
    for got, want in zip(merged, buf(x, y)):
        assert got[0].as_py() == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_first_keeps_the_stored_value_and_last_takes_the_new_one():
    stored = [pa.array([1, None, 5]), pa.array([True, False, True])]
    batch = [pa.array([2, 3, None]), pa.array([True, True, False])]
    found = pa.array([True, True, True])
    first = merge_group("first", stored, batch, found)
    last = merge_group("last", stored, batch, found)
    assert first[0].to_pylist() == [1, 3, 5] and first[1].to_pylist() == [True, True, True]
    # a set value of null (first/last without ignoreNulls) is a value
    assert last[0].to_pylist() == [2, 3, 5]


def test_max_by_min_by_ties_go_to_the_later_buffer_and_null_orderings_are_ignored():
    values = pa.array(["a", "b", "c", "d", "e"])
    ordering = pa.array([3.0, 3.0, None, 1.0, 1.0])
    hi = merge_group_segments("max_by", [values, ordering], np.array([0, 3]))
    lo = merge_group_segments("min_by", [values, ordering], np.array([0, 3]))
    assert hi[0].to_pylist() == ["b", "e"] and hi[1].to_pylist() == [3.0, 1.0]
    assert lo[0].to_pylist() == ["b", "e"]
    none = merge_group_segments("max_by", [pa.array(["x"]), pa.array([None], pa.float64())], np.array([0]))
    assert none[0].to_pylist() == [None] and none[1].to_pylist() == [None]


@pytest.mark.parametrize("rule,expected", [("bit_and", [4, None]), ("bit_or", [7, None]), ("bit_xor", [3, None])])
def test_bitwise_folds_skip_nulls(rule, expected):
    values = pa.array([6, None, 5, None, None], pa.int32())
    out = merge_group_segments(rule, [values], np.array([0, 3]))
    assert out[0].to_pylist() == expected and out[0].type == pa.int32()


def test_collect_list_concatenates_in_order_and_collect_set_unions():
    lists = pa.array([[1, 2], None, [2, 3], [], [9]], pa.list_(pa.int64()))
    cat = merge_group_segments("concat", [lists], np.array([0, 3]))
    assert cat[0].to_pylist() == [[1, 2, 2, 3], [9]]
    union = merge_group_segments("union", [lists], np.array([0, 3]))
    assert union[0].to_pylist() == [[1, 2, 3], [9]]
    two_way = merge_group("concat", [pa.array([["s"], None], pa.list_(pa.string()))], [pa.array([["b"], ["c"]], pa.list_(pa.string()))], pa.array([True, False]))
    assert two_way[0].to_pylist() == [["s", "b"], ["c"]]


def test_try_sum_overflow_is_null_and_stays_null():
    big = 2**63 - 10
    sums = pa.array([big, 20, 5, None, 1], pa.int64())
    empty = pa.array([False, False, False, False, True])
    out = merge_group_segments("try_sum", [sums, empty], np.array([0, 2, 4]))
    # run 0 overflows; run 1 holds an earlier overflow (null in a non-empty buffer); run 2 is empty
    assert out[0].to_pylist() == [None, None, 1]
    assert out[1].to_pylist() == [False, False, True]


def test_equal_means_merge_to_exactly_zero_spread():
    """A constant column split over buffers keeps m2 == m3 == m4 == 0 exactly (Spark's pairwise
    merge adds delta = 0), so skewness and kurtosis stay null and corr divides by zero as in
    Spark; a rounding residue would give numbers."""
    parts = [[1.0, 0.1, 0.0, 0.0, 0.0], [2.0, 0.1, 0.0, 0.0, 0.0], [3.0, 0.1, 0.0, 0.0, 0.0]]
    merged = merge_group_segments("moments", as_columns(parts), np.array([0]))
    assert [c[0].as_py() for c in merged] == [6.0, 0.1, 0.0, 0.0, 0.0]
    cov = merge_group_segments("covariance", as_columns([[1.0, 0.1, 7.0, 0.0, 0.0, 0.0], [2.0, 0.1, 7.0, 0.0, 0.0, 0.0]]), np.array([0]))
    assert [c[0].as_py() for c in cov] == [3.0, 0.1, 7.0, 0.0, 0.0, 0.0]


def test_nan_is_above_every_number():
    from statestream.operators.aggregate_merge import merge_buffer_segments, merge_buffers

    nan = float("nan")
    hi = merge_buffers("max", pa.array([nan, 1.0, None]), pa.array([1.0, nan, nan]))
    assert all(np.isnan(v) for v in hi.to_pylist())
    lo = merge_buffers("min", pa.array([nan, 1.0, None, nan]), pa.array([1.0, nan, nan, None]))
    assert lo.to_pylist()[:2] == [1.0, 1.0] and all(np.isnan(v) for v in lo.to_pylist()[2:])
    seg = merge_buffer_segments("min", pa.array([nan, None, 2.0, nan]), np.array([0, 2]))
    assert np.isnan(seg.to_pylist()[0]) and seg.to_pylist()[1] == 2.0
    by = merge_group_segments("min_by", [pa.array(["a", "b"]), pa.array([1.0, nan])], np.array([0]))
    assert by[0].to_pylist() == ["a"]
    by = merge_group_segments("max_by", [pa.array(["a", "b", "c"]), pa.array([nan, 5.0, 1.0])], np.array([0]))
    assert by[0].to_pylist() == ["a"]


def test_product_skips_nulls_and_is_null_when_all_are():
    out = merge_group_segments("product", [pa.array([2.0, None, 3.0, None, None])], np.array([0, 3]))
    assert out[0].to_pylist() == [6.0, None]
    two_way = merge_group("product", [pa.array([2.0, None])], [pa.array([4.0, 5.0])], pa.array([True, False]))
    assert two_way[0].to_pylist() == [8.0, 5.0]


def test_decimal_sum_keeps_the_buffer_type_and_is_empty():
    from decimal import Decimal as D

    t = pa.decimal128(20, 2)
    sums, empty = merge_group(
        "decimal_sum",
        [pa.array([D("1.10"), None, D("0")], t), pa.array([False, None, True])],
        [pa.array([D("2.00"), D("3.00"), D("0")], t), pa.array([False, False, True])],
        pa.array([True, False, True]),
    )
    assert sums.type == t and sums.to_pylist() == [D("3.10"), D("3.00"), D("0.00")]
    assert empty.to_pylist() == [False, False, True]
    runs, runs_empty = merge_group_segments("decimal_sum", [pa.array([D("1.10"), D("1"), D("2"), D("0")], t), pa.array([False, True, False, True])], np.array([0, 1, 3]))
    assert runs.to_pylist() == [D("1.10"), D("3.00"), D("0.00")] and runs_empty.to_pylist() == [False, False, True]


def test_decimal_sum_overflow_fails_and_try_sum_gives_null():
    from decimal import Decimal as D

    big = pa.decimal128(38, 2)
    state = [pa.array([D("9" * 36 + ".99"), D("1.00")], big), pa.array([False, False])]
    batch = [pa.array([D("1.00"), D("1.00")], big), pa.array([False, False])]
    with pytest.raises(ArithmeticError, match="ARITHMETIC_OVERFLOW"):
        merge_group("decimal_sum", state, batch, pa.array([True, True]))
    sums, empty = merge_group("try_decimal_sum", state, batch, pa.array([True, True]))
    assert sums.to_pylist() == [None, D("2.00")] and empty.to_pylist() == [False, False]
    # an overflowed (null, non-empty) buffer stays null
    again, _ = merge_group("try_decimal_sum", [sums, empty], batch, pa.array([True, True]))
    assert again.to_pylist() == [None, D("3.00")]


def test_union_of_nested_values_keeps_first_appearances():
    t = pa.list_(pa.struct([("s", pa.string()), ("i", pa.int32())]))
    state = [pa.array([[{"s": "a", "i": 1}], None], t)]
    # a batch's buffer is already a set (Spark's collect_set of the batch); a key without a
    # stored buffer keeps it as it is
    batch = [pa.array([[{"s": "a", "i": 1}, {"s": "b", "i": 1}], [{"s": "c", "i": None}]], t)]
    (merged,) = merge_group("union", state, batch, pa.array([True, False]))
    assert merged.to_pylist() == [[{"s": "a", "i": 1}, {"s": "b", "i": 1}], [{"s": "c", "i": None}]]
    runs = merge_group_segments("union", [pa.array([[{"s": "a", "i": 1}], [{"s": "a", "i": 1}, {"s": "c", "i": None}]], t)], np.array([0]))
    assert runs[0].to_pylist() == [[{"s": "a", "i": 1}, {"s": "c", "i": None}]]
