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


def _state(reader, checkpoint):
    return [r.asDict(recursive=True) for r in reader.format("statestore").load(checkpoint).collect()]


STATE_CASES = {
    # avg's sum buffer of a group whose inputs are all null: Spark's starts at 0.0, not null
    "avg_of_nulls": ("v TINYINT", lambda df: df.groupBy("k").agg(F.avg("v").alias("a")), "update", [[(1, None)], [(1, None), (2, 3)]]),
    # a global aggregation's key has no field: one empty key struct per state row
    "global_aggregate": ("v TINYINT", lambda df: df.agg(F.approx_count_distinct("v").alias("d")), "update", [[(1, 5)], []]),
    # a map key: Spark's state key field is its analyzer's alias of the sorted map
    "map_key": ("v TINYINT", lambda df: df.withColumn("m", F.create_map(F.lit("a"), F.col("k"))).groupBy("m").agg(F.count("v").alias("n")), "update", [[(1, 5)], [(2, None)]]),
    # collect_list's buffer: Spark stores it serialized (binary), statestream as an array
    "collect_list": ("v TINYINT", lambda df: df.groupBy("k").agg(F.collect_list("v").alias("l")), "update", [[(1, 5)], [(1, None)]]),
    # a deduplication's array key: statestream keeps it binary comparable and cannot decode it
    "dedup_on_an_array": ("v ARRAY<INT>", lambda df: df.dropDuplicates(["v"]), "append", [[(1, [1, 2])], [(2, [1, 2]), (3, None)]]),
    # aggregate columns a projection leaves out: Spark's optimizer drops them, buffers and all
    "unread_aggregates": (
        "v BIGINT",
        lambda df: df.groupBy("k").agg(F.count("v").alias("n"), F.sum("v").alias("s"), F.max("v").alias("m")).select("k", (F.col("m") + 1).alias("m1")),
        "update",
        [[(1, 5), (2, -9_223_372_036_854_775_808)], [(2, -1), (1, None)]],
    ),
    # every aggregate column left out: the state keeps the keys only
    "every_aggregate_unread": ("v BIGINT", lambda df: df.groupBy("k").agg(F.sum("v").alias("s")).select("k"), "update", [[(1, 5)], [(2, 3), (1, 1)]]),
}


@pytest.mark.parametrize("name", sorted(STATE_CASES))
def test_state_after_the_query(spark, ours, tmp_path, name):
    """The state store reader shows the same state for both engines' checkpoints."""
    value_type, build, mode, batches = STATE_CASES[name]
    expected, actual = run_both(spark, build, batches, f"k INT, {value_type}", mode, tmp_path, ours=ours)
    assert_same_batches(expected, actual)
    theirs = _state(spark.read, expected.checkpoint)
    got = _state(ours().read, actual.checkpoint)
    assert sorted(map(repr, got)) == sorted(map(repr, theirs))


def test_a_sort_based_aggregate_over_a_map_key_fails_as_on_spark(spark, ours, tmp_path):
    """``first`` of an array grouped by a map: Spark's engine plans a sort-based aggregation,
    whose sort over the sorted map fails (``DATATYPE_MISMATCH.INVALID_ORDERING_TYPE``);
    statestream must fail the same way."""
    from tests.differential.harness import run_stream

    build = lambda df: df.groupBy("k").agg(F.first("v").alias("f"))  # noqa: E731
    schema = "k MAP<STRING,INT>, v ARRAY<INT>"
    failures = {}
    for name, engine in (("spark", spark), ("statestream", ours())):
        with pytest.raises(Exception) as raised:  # noqa: PT011 - compared below
            run_stream(engine, build, [[([("a", 1)], [1])]], schema, "update", tmp_path / name)
        failures[name] = str(raised.value)
    assert "INVALID_ORDERING_TYPE" in failures["spark"]
    assert "INVALID_ORDERING_TYPE" in failures["statestream"], failures["statestream"][:2000]


@pytest.mark.parametrize("kind", ["stream_stream", "stream_static"])
def test_input_rows_of_a_file_of_null_join_keys(spark, ours, tmp_path, kind):
    """A join over a file whose join keys are all null: Spark's engine infers ``isnotnull(k)``
    from the join's condition and pushes it to the Parquet scan, which skips the file's one row
    group, so the batch counts no input rows; the joined rows are equal."""

    def build(df):
        if kind == "stream_static":
            return df.join(df.sparkSession.createDataFrame([(1, 5)], "k INT, s INT"), "k")
        left = df.where(F.col("id") % 2 == 0).select(F.col("k").alias("lk"), F.col("id").alias("lid"))
        right = df.where(F.col("id") % 2 == 1).select(F.col("k").alias("rk"), F.col("id").alias("rid"))
        return left.join(right, F.col("lk") == F.col("rk"))

    batches = [[(0, T0, 1), (1, T0, 1)], [(2, T0, None), (3, T0, None)]]
    expected, actual = run_both(spark, build, batches, "id BIGINT, ts TIMESTAMP, k INT", "append", tmp_path, ours=ours)
    assert_same_batches(expected, actual)


def _join_sides(df):
    left = df.where(F.col("id") % 2 == 0).select(F.col("k").alias("lk"), F.col("ts").alias("lts"), F.col("id").alias("lid")).withWatermark("lts", "0 seconds")
    right = df.where(F.col("id") % 2 == 1).select(F.col("k").alias("rk"), F.col("ts").alias("rts"), F.col("id").alias("rid")).withWatermark("rts", "0 seconds")
    return left, right, (F.col("lk") == F.col("rk")) & F.col("rts").between(F.col("lts"), F.col("lts") + F.expr("INTERVAL 5 SECONDS"))


JOIN_STATE_CASES = {
    # a left semi join outputs the left side only: Spark's optimizer keeps the right side's
    # columns the condition reads (rk, rts), and the right state holds those
    "left_semi": lambda df: (lambda left, right, c: left.join(right, c, "left_semi"))(*_join_sides(df)),
    # columns no operator above the join reads are pruned from both sides' state (lid, rid)
    "inner_then_select": lambda df: (lambda left, right, c: left.join(right, c, "inner").select("lk", "lts"))(*_join_sides(df)),
}


@pytest.mark.parametrize("name", sorted(JOIN_STATE_CASES))
@pytest.mark.parametrize("side", ["left", "right"])
def test_join_state_columns(spark, ours, tmp_path, name, side):
    """The columns of a stream-stream join's state: what Spark's column pruning leaves of each
    side (the state reader shows them)."""
    batches = [[(0, T0, 1), (1, T0, 1), (2, T0, 2)], [(3, T0 + dt.timedelta(seconds=2), 2)]]
    expected, actual = run_both(spark, JOIN_STATE_CASES[name], batches, "id BIGINT, ts TIMESTAMP, k INT", "append", tmp_path, ours=ours)
    assert_same_batches(expected, actual)
    theirs = [r.asDict(recursive=True) for r in spark.read.format("statestore").option("joinSide", side).load(expected.checkpoint).collect()]
    got = [r.asDict(recursive=True) for r in ours().read.format("statestore").option("joinSide", side).load(actual.checkpoint).collect()]
    assert sorted(map(repr, got)) == sorted(map(repr, theirs))


PYTHON_UNEQUAL_KEYS = {
    # form: (key type, the keys of the two rows of one group, the row of another key)
    "pandas_null_int": ("INT", [None, None], 1),
    "pandas_nan": ("DOUBLE", [float("nan"), float("nan")], 1.0),
    "rows_nan": ("DOUBLE", [float("nan"), float("nan")], 1.0),
    # pandas holds a null DOUBLE as NaN, and Spark's state key is what the worker sets: NaN
    "pandas_null_double": ("DOUBLE", [None, None], 1.0),
    # a null and a NaN key are two groups on the JVM but one state key (NaN) for the worker
    "pandas_null_and_nan": ("DOUBLE", [None, float("nan")], 1.0),
    "rows_null_double": ("DOUBLE", [None, None], 1.0),
}


@pytest.mark.parametrize("form", sorted(PYTHON_UNEQUAL_KEYS))
def test_transform_with_state_over_keys_python_cannot_compare(spark, ours, tmp_path, form):
    """transformWithState over keys that are not equal to themselves in Python: PySpark's
    worker groups consecutive rows by ``==`` on the key tuples, and a null integer (NaN in
    pandas) or a NaN float is never equal to another one, so Spark's engine calls
    ``handleInputRows`` once per row of such a key, each call seeing the previous one's state.
    The state store holds the key the worker set (a NaN where pandas made one of a null)."""
    from tests.differential import random_processors
    from tests.differential.test_random_queries import PROVIDER, ROCKSDB
    from tests.spark_confs import session_confs

    key_type, keys, other = PYTHON_UNEQUAL_KEYS[form]
    processor = random_processors.RowCounter if form.startswith("rows") else random_processors.PandasCounter

    def build(df):
        grouped = df.groupBy("k")
        out = f"k {key_type}, {random_processors.OUTPUT}"
        if form.startswith("rows"):
            return grouped.transformWithState(processor(0, True), out, "update", "None")
        return grouped.transformWithStateInPandas(processor(0, True), out, "update", "None")

    batches = [[(0, T0, keys[0]), (1, T0, keys[1]), (2, T0, other)], [(3, T0, keys[0])]]
    with session_confs(spark, {PROVIDER: ROCKSDB}):
        expected, actual = run_both(spark, build, batches, f"id BIGINT, ts TIMESTAMP, k {key_type}", "update", tmp_path, ours=ours)
    assert_same_batches(expected, actual)
    theirs = [r.asDict(recursive=True) for r in spark.read.format("statestore").option("stateVarName", "state").load(expected.checkpoint).collect()]
    got = [r.asDict(recursive=True) for r in ours().read.format("statestore").option("stateVarName", "state").load(actual.checkpoint).collect()]
    assert sorted(map(repr, got)) == sorted(map(repr, theirs))


TWS_KEY_CASES = {
    # Arrow sorts no arrays: the keys are ordered through their ranks under Spark's order
    "rows-array": ("transform_with_state_rows", "array<int>", [1, 2]),
    "rows-array_of_structs": ("transform_with_state_rows", "array<struct<a:int,b:string>>", [{"a": 1, "b": "x"}]),
    # the handle's index of the phase's key tuples hashed them (a struct is a dict: unhashable)
    "pandas-struct": ("transform_with_state_pandas", "struct<a:int,b:string>", {"a": 1, "b": "x"}),
    "rows-struct": ("transform_with_state_rows", "struct<a:int,b:string>", {"a": 1, "b": "x"}),
    # a list state's row count grouped its keys with Arrow's group_by, which takes no structs
    "pandas-struct-list_state": ("transform_with_state_pandas", "struct<a:int,b:string>", {"a": 1, "b": "x"}, "list"),
    "rows-struct-list_state": ("transform_with_state_rows", "struct<a:int,b:string>", None, "list"),
    "rows-array-map_state": ("transform_with_state_rows", "array<int>", [1, 2], "map"),
    # Spark's engine fails on these (declared in known_gaps.py)
    "pandas-array": ("transform_with_state_pandas", "array<int>", [1, 2]),
    "pandas-interval": ("transform_with_state_pandas", "interval day to second", 5),
    "rows-interval": ("transform_with_state_rows", "interval day to second", 5),
    "rows-year_month_interval": ("transform_with_state_rows", "interval year to month", 5),
    # pandas holds a null timestamp as NaT, which PySpark's worker cannot set as the key
    "pandas-null_timestamp": ("transform_with_state_pandas", "timestamp", None),
    "pandas-null_timestamp_ntz": ("transform_with_state_pandas", "timestamp_ntz", None),
    # pandas 3 holds a null string as a float NaN, which the processor's output cannot hold:
    # both engines fail converting it
    "pandas-null_string": ("transform_with_state_pandas", "string", None),
}


@pytest.mark.parametrize("name", sorted(TWS_KEY_CASES))
def test_transform_with_state_key_types(spark, ours, tmp_path, name):
    """transformWithState grouped by nested and interval keys, its count in a value (or a list
    or map state): the same rows and state on both engines, or the same failure."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    family, key_type, key, *state_kind = TWS_KEY_CASES[name]
    case = Case((key_type,), (), family, (), 0, 3, 0, "update", 2, (((0, start, key), (1, start, key)),), state_kind=(state_kind or ["value"])[0])
    # a declared failure here includes Spark's FOREACH_BATCH_USER_FUNCTION_ERROR wrapper
    run_case(spark, ours, case, tmp_path, strict_wrappers=True)


@pytest.mark.parametrize("key_type", ["tinyint", "bigint"])
def test_transform_with_state_pandas_null_integer_key_beside_zero(spark, ours, tmp_path, key_type):
    """transformWithStateInPandas grouped by an integer key that is null in one row and 0 in
    another (seed 36). Spark's engine keeps one state for both keys: pandas holds the null key as
    a float NaN, which becomes 0 when the worker sets it as the implicit key, so key 0 counts the
    null key's row too. statestream keeps two states, one per grouping key."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    case = Case((key_type,), (key_type,), "transform_with_state_pandas", (), 0, 3, 0, "append", 1,
                (((0, start, None, None), (1, start, 0, None)),), provider="rocksdb")
    run_case(spark, ours, case, tmp_path)


def test_chained_window_sum_near_the_long_minimum(spark, ours, tmp_path):
    """A chained window aggregation (``sum`` of a bigint) whose second batch puts the long minimum
    and -18 in one window of one (null) key, after a restart (seed 37). Spark's engine runs it:
    its optimizer prunes the sum, which the second aggregation does not read, from the first
    aggregation (no sum in its state either). statestream computed every aggregate and failed
    with ``ARITHMETIC_OVERFLOW``; it now prunes them too (``plan/column_pruning.py``)."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    second = start + dt.timedelta(seconds=2)
    batches = (
        ((0, start, None, None, None), (1, start, None, None, None)),
        ((2, second, None, None, None), (3, start + dt.timedelta(seconds=18), None, -9_223_372_036_854_775_808, None),
         (4, start + dt.timedelta(seconds=13), None, -18, -87)),
    )
    case = Case(("timestamp_ntz",), ("bigint", "tinyint"), "chained_window_aggregate", (("sum", 0),), 0, 10, 0, "append", 1,
                batches, restart_at=1, trigger="processing_time", provider="hdfs")
    run_case(spark, ours, case, tmp_path)


def test_chained_sliding_window_aggregation_with_unread_aggregates(spark, ours, tmp_path):
    """A chained aggregation whose first step has sliding windows (Spark's ``Expand`` below it)
    and a ``sum`` the second step does not read: Spark never evaluates it, so the long minimum
    and -1 in one window do not overflow, and its state has only the count's buffer."""
    start = T0

    def build(df):
        first = df.withWatermark("ts", "0 seconds").groupBy(F.window("ts", "10 seconds", "5 seconds"), "k").agg(
            F.sum("v").alias("s"), F.count("v").alias("n")
        )
        return first.where("n > 0").groupBy(F.window(F.window_time("window"), "20 seconds")).agg(F.count("*").alias("windows"))

    batches = [
        [(0, start, 1, -9_223_372_036_854_775_808), (1, start + dt.timedelta(seconds=1), 1, -1)],
        [(2, start + dt.timedelta(seconds=45), 2, 3)],
        [(3, start + dt.timedelta(seconds=90), 2, 3)],
    ]
    expected, actual = run_both(spark, build, batches, "id BIGINT, ts TIMESTAMP, k INT, v BIGINT", "append", tmp_path, ours=ours)
    assert_same_batches(expected, actual)
    assert sum(len(b.rows) for b in expected.batches) > 0  # the windows closed and came out
    theirs = _state(spark.read, expected.checkpoint)
    got = _state(ours().read, actual.checkpoint)
    assert sorted(map(repr, got)) == sorted(map(repr, theirs))


def test_year_month_interval_through_the_state(spark, ours, tmp_path):
    """A year-month interval column through a stateful operator (a deduplication keyed by it):
    Spark's engine runs it; PySpark's Arrow conversion has no year-month intervals."""

    def build(df):
        return df.withColumn("m", F.expr("make_ym_interval(0, v)")).dropDuplicates(["m"]).select("id", F.col("m").cast("string").alias("m"))

    batches = [[(0, T0, 1), (1, T0, 1)], [(2, T0, 2)]]
    expected, actual = run_both(spark, build, batches, "id BIGINT, ts TIMESTAMP, v INT", "append", tmp_path, ours=ours)
    assert_same_batches(expected, actual)


@pytest.mark.parametrize("keys", [[None], [None, "a", None]], ids=["null", "null_and_other"])
def test_apply_in_pandas_with_state_over_a_null_string_key(spark, ours, tmp_path, keys):
    """applyInPandasWithState over a null string key: pandas 3 gives the key as a float NaN, and a
    function that writes it back to a string column gives a float column. PySpark's worker
    converts its output as objects (it pads the frames with an empty one of ``None`` columns),
    so Spark's engine ran it; statestream's typed conversion failed."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    rows = tuple((i, start, k) for i, k in enumerate(keys))
    case = Case(("string",), (), "apply_in_pandas_with_state", (), 0, 3, 0, "append", 1, (rows,))
    run_case(spark, ours, case, tmp_path)


STRUCT_TIMER_KEYS = {
    "struct": {"a": 1, "b": "x"},
    "struct_of_nulls": {"a": None, "b": None},
    "null_struct": None,
}


@pytest.mark.parametrize("key", sorted(STRUCT_TIMER_KEYS))
@pytest.mark.parametrize("form", ["pandas", "rows"])
def test_transform_with_state_struct_key_timers(spark, ours, tmp_path, form, key):
    """transformWithState grouped by a struct, with an event-time timer per key that fires in a
    later batch (random tester, seed 15)."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case

    from tests.differential.test_random_queries import run_case

    value = STRUCT_TIMER_KEYS[key]
    batches = (((0, start, value), (1, start, value)), ((2, start + dt.timedelta(seconds=20), {"a": 7, "b": "z"}),), ())
    case = Case(("struct<a:int,b:string>",), (), f"transform_with_state_{form}", (), 0, 3, 0, "update", 1, batches, gap=3, every_batch=False, python_watermark=True)
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_avg_of_a_day_time_interval(spark, ours, tmp_path, mode):
    """``avg`` of a day-time interval column: Spark's ``Average`` sums it as an interval (DAY TO
    SECOND, from 0) beside the count and divides the sum by the count; statestream cast it to a
    double and failed to plan (random tester, seed 16: an empty first batch). Rows, nulls, a
    group of nulls only, an odd division (7 s / 2), over two batches and an empty one."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    batches = (
        (),
        ((0, start, 1, 1), (1, start, 1, 2), (2, start, 2, None), (3, start, 3, 7)),
        ((4, start, 1, None), (5, start, 3, 0), (6, start, 4, -5)),
    )
    case = Case(("tinyint",), ("interval day to second",), "aggregate", (("avg", 0), ("count", 0)), 0, 3, 0, mode, 2, batches)
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("mode", ["append", "update"])
def test_avg_of_a_day_time_interval_in_session_windows(spark, ours, tmp_path, mode):
    """``avg`` of a day-time interval over session windows: the rows of one session merge their
    sum buffers, an interval, which Arrow's grouped sum does not take (random tester, seed 32:
    ``hash_sum`` has no kernel for ``duration[us]``). Sessions of several rows, nulls, a session
    of nulls only, one that a later batch extends."""
    import datetime as dt

    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    s = dt.timedelta(seconds=1)
    batches = (
        ((0, start, None, None), (1, start, None, None), (2, start + s, 1, 4), (3, start + 2 * s, 1, 3), (4, start, 2, None)),
        ((5, start + 3 * s, 1, None), (6, start + 20 * s, 2, 9), (7, start + 21 * s, 2, -2)),
        ((8, start + 40 * s, 3, 1),),
    )
    case = Case(("tinyint",), ("interval day to second",), "session_window_aggregate", (("avg", 0), ("sum", 0)), 0, 3, 0, mode, 1, batches)
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize(
    "key_type",
    ["array<struct<a:int,b:string>>", "array<array<double>>", "array<decimal(10,2)>", "array<struct<a:array<bigint>,d:double>>"],
)
def test_dedup_over_arrays_of_nested_values(spark, ours, tmp_path, key_type):
    """``dropDuplicates`` keyed by an array of structs (random tester, seed 18: ``[None]`` in one
    row), of arrays, of decimals: Spark compares the keys as binary rows; statestream's byte
    encoding of a list key covered only fixed-width, string and binary elements and refused the
    rest. Equal, unequal, null and empty arrays over two batches (the second meets the first's
    keys in the state)."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    values = {
        "array<struct<a:int,b:string>>": ([None], [{"a": 1, "b": "x"}], [{"a": 1, "b": None}], [], None, [{"a": 1, "b": "x"}, None]),
        "array<array<double>>": ([[0.0]], [[-0.0]], [None], [[]], None, [[1.5, None]]),
        "array<decimal(10,2)>": ([None], [1], [2], [], None, [1, None]),
        "array<struct<a:array<bigint>,d:double>>": ([None], [{"a": [1], "d": 0.0}], [{"a": [1], "d": -0.0}], [{"a": None, "d": None}], None, []),
    }[key_type]
    if key_type == "array<decimal(10,2)>":
        import decimal

        values = tuple(None if v is None else [None if x is None else decimal.Decimal(x) for x in v] for v in values)
    first = tuple((i, start, i % 2, v) for i, v in enumerate(values + values[:2]))
    second = tuple((10 + i, start, i % 2, v) for i, v in enumerate(values[2:] + values[:1]))
    case = Case(("tinyint", key_type), (), "dedup", (), 0, 3, 0, "append", 2, (first, (), second))
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("function", ["first", "last"])
def test_first_and_last_of_a_global_aggregation_over_no_rows(spark, ours, tmp_path, function):
    """``first``/``last`` in a global aggregation (no grouping key) whose batch has no rows:
    Spark keeps its initial buffer (``valueSet`` false); statestream's partial step set
    ``valueSet`` true with no row seen (random tester, soak seed 85098921: the state differed).
    An empty batch, then rows (a null among them), then another empty batch."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    for family in ("union_aggregate", "aggregate"):
        batches = ((), ((0, start, [1, None]), (1, start, None), (2, start, [2])), ())
        case = Case((), ("array<int>",), family, ((function, 0),), 0, 3, 0, "update", 1, batches)
        run_case(spark, ours, case, tmp_path / family)


@pytest.mark.parametrize("key_type", ["array<int>", "struct<a:array<int>,b:string>"])
@pytest.mark.parametrize("mode", ["append", "update"])
def test_session_windows_grouped_by_a_list_key(spark, ours, tmp_path, key_type, mode):
    """Session windows grouped by an array (or a struct holding one): the restore step found the
    batch's distinct keys with Arrow's ``group_by``, which has no kernel for list keys, and
    failed once the state held sessions (random tester, seed 19). Equal, null and empty keys;
    the second batch extends and opens sessions of keys in the state, the third closes them."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    values = {
        "array<int>": ([1, 2], [1, 2], None, [], [None], [2, 1]),
        "struct<a:array<int>,b:string>": ({"a": [1], "b": "x"}, {"a": [1], "b": "x"}, None, {"a": [], "b": None}, {"a": None, "b": "y"}, {"a": [1], "b": "y"}),
    }[key_type]
    sec = dt.timedelta(seconds=1)
    first = tuple((i, start + i * sec, v, 1) for i, v in enumerate(values))
    second = tuple((10 + i, start + (2 + i) * sec, v, 2) for i, v in enumerate(values[::-1]))
    third = ((20, start + 60 * sec, values[0], 3),)
    case = Case((key_type,), ("int",), "session_window_aggregate", (("count", 0), ("sum", 0)), 2, 3, 0, mode, 2, (first, second, third))
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("subset", [["m"], None])
def test_dedup_within_watermark_keyed_by_a_map(spark, ours, tmp_path, subset):
    """``dropDuplicatesWithinWatermark`` over a map column (random tester, seed 24): Spark's
    streaming ``DeduplicateWithinWatermark`` takes map keys where its batch ``dropDuplicates``
    (which statestream asked to resolve the keys) refuses them with
    ``UNSUPPORTED_FEATURE.SET_OPERATION_ON_MAP_TYPE``. Equal maps in either entry order, null,
    empty and null-valued maps, over two batches."""
    values = [[("a", 1), ("b", 2)], [("b", 2), ("a", 1)], None, [], [("a", None)], [("a", 1)]]
    rows = [(i, T0 + dt.timedelta(seconds=i % 2), dict(v) if v is not None else None) for i, v in enumerate(values)]
    batches = [rows[:3], rows[3:] + [(9, T0, {"a": 1, "b": 2})]]

    def build(df):
        df = df.withWatermark("ts", "10 seconds")
        return df.dropDuplicatesWithinWatermark(subset) if subset else df.drop("id").dropDuplicatesWithinWatermark()

    expected, actual = run_both(spark, build, batches, "id BIGINT, ts TIMESTAMP, m map<string,int>", "append", tmp_path, ours=ours)
    assert_same_batches(expected, actual)


def test_an_overflow_in_the_state_step_under_a_foreach_batch_sink(spark, ours, tmp_path):
    """A windowed ``sum`` that overflows a long (random tester, seed 24: -11 and Long.MinValue in
    one window) fails on both engines with ``ARITHMETIC_OVERFLOW``. Spark's aggregation runs
    lazily inside the sink's ``foreachBatch`` (the test's collect), so its error is wrapped in
    ``FOREACH_BATCH_USER_FUNCTION_ERROR``; statestream's state step runs before the sink, so its
    error is the overflow alone. Declared in ``tests/known_gaps.py``; the random tester treats
    that wrapper as this declared difference."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    rows = ((0, start, None, None), (1, start, None, -11), (2, start, None, -(2**63)))
    case = Case(("tinyint",), ("bigint",), "window_aggregate", (("sum", 0),), 0, 3, 0, "append", 1, (rows,))
    run_case(spark, ours, case, tmp_path, strict_wrappers=True)


@pytest.mark.parametrize("precision", [5, 11])
def test_avg_of_a_small_decimal_keeps_sparks_unscaled_buffer(spark, ours, tmp_path, precision):
    """``avg`` of a decimal whose precision + 4 fits a double's 15 digits (random tester, seed
    25: decimal(5,2)): Spark's DecimalAggregates averages the unscaled values, so its state's
    ``sum`` is 1.0 for 0.01; statestream kept 0.01. The rows, and the state read back, match."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    from decimal import Decimal

    first = ((0, start, None, Decimal("0.01")), (1, start, 1, Decimal("-3.25")), (2, start, 1, None))
    second = ((3, start, 1, Decimal("999.99")), (4, start, None, Decimal("0.02")))
    case = Case(("tinyint",), (f"decimal({precision},2)",), "aggregate", (("avg", 0),), 0, 3, 0, "update", 1, (first, second))
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("rows", [False, True], ids=["empty_batches", "rows"])
def test_a_global_aggregation_asking_for_rocksdb(spark, ours, tmp_path, rows):
    """A global aggregation (no grouping key) of a query that asks for Spark's RocksDB provider:
    its store has no key columns, and as layered runs it lost its one row, counting one more
    state row every batch (random tester, seed 33: ``numRowsTotal`` 2 against Spark's 1 after
    two empty batches). Such a store keeps its row in a table (``StateStoreProvider.layered``)."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    batches = (((0, start, 3), (1, start, 5)), (), ((2, start, 3), (3, start, None))) if rows else ((), ())
    aggregates = (("approx_count_distinct", 0), ("count", 0), ("max", 0))
    case = Case((), ("tinyint",), "union_aggregate", aggregates, 0, 3, 0, "update", 1, batches, provider="rocksdb")
    run_case(spark, ours, case, tmp_path)


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_the_running_mean_of_moments_over_infinities(spark, ours, tmp_path, mode):
    """The mean in the buffers of ``var_pop``, ``stddev`` and ``covar_pop`` (``avg``, ``xAvg``),
    which the state holds: Spark updates it row by row, so it is NaN once an infinite value is
    followed by another value, and infinite when the one infinite value comes last, where a
    sum's average is infinite in both cases (random tester, seed 33: ``avg`` -inf against
    Spark's NaN for -inf then -0.0). The orders, a second infinity, a NaN, nulls, and a stored
    infinite mean that a later batch merges."""
    from tests.differential.random_queries import T0 as start
    from tests.differential.random_queries import Case
    from tests.differential.test_random_queries import run_case

    inf, nan = float("inf"), float("nan")
    groups = {1: [-inf, -0.0], 2: [-0.0, -inf], 3: [inf, inf], 4: [1.5, inf, 2.0], 5: [nan, inf], 6: [1.0, 2.0, None], 7: [None, inf]}
    first = tuple((i, start, k, v) for i, (k, v) in enumerate((k, v) for k, vs in groups.items() for v in vs))
    second = ((100, start, 2, 3.0), (101, start, 7, 1.0), (102, start, 6, -inf))
    aggregates = (("var_pop", 0), ("stddev", 0), ("covar_pop", 0))
    case = Case(("tinyint",), ("double",), "aggregate", aggregates, 0, 3, 0, mode, 2, (first, second))
    run_case(spark, ours, case, tmp_path)
