"""Differential tests of the aggregate functions beyond count/sum/avg/min/max (issue 10): each
family in one query, so one oracle run covers many functions; the same file batches go into
Spark's engine and into statestream and every batch is compared (rows to 1e-9 relative, state
row counts, watermarks).

Input rows: ``k`` (group), ``t`` (event time, seconds), ``x``/``y`` (doubles with nulls),
``i`` (int with nulls), ``b`` (boolean with nulls), ``s`` (string).
"""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent, assert_same_batches, run_both, run_stream
from tests.spark_confs import session_confs

SCHEMA = "k STRING, t LONG, x DOUBLE, y DOUBLE, i INT, b BOOLEAN, s STRING"

# Three batches; group "a" spans all of them, "b" starts late, "c" only has nulls in x/y/i/b.
# x and y vary within every group that has two or more pairs (corr divides by their spread).
BATCHES = [
    [
        ("a", 10, 1.5, 2.0, 6, True, "p"),
        ("a", 11, 2.5, 1.0, 3, True, "q"),
        ("a", 12, None, 7.0, None, None, "r"),
        ("c", 12, None, None, None, None, "z"),
    ],
    [
        ("a", 13, 4.0, 3.5, 5, False, "s"),
        ("b", 14, 10.0, -1.0, 12, True, "t"),
        ("b", 15, 7.0, 4.0, 9, None, "u"),
        ("c", 16, None, 1.0, None, None, None),
    ],
    [
        ("a", 21, 0.25, 8.0, 1, True, "v"),
        ("b", 22, 7.0, 2.5, 9, False, "w"),
        ("b", 23, -3.0, 0.5, None, True, "x"),
        ("d", 24, 5.0, 6.0, 2, True, "y"),
    ],
]


def _moments(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(
        F.stddev("x"),
        F.stddev_samp("x"),
        F.stddev_pop("x"),
        F.std("y"),
        F.variance("x"),
        F.var_samp("y"),
        F.var_pop("x"),
        F.skewness("x"),
        F.kurtosis("y"),
    )


def _covariance(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(
        F.covar_pop("x", "y"),
        F.covar_samp("x", "y"),
        F.regr_count("y", "x"),
        F.regr_avgx("y", "x"),
        F.regr_avgy("y", "x"),
        F.regr_sxx("y", "x"),
        F.regr_syy("y", "x"),
        F.regr_sxy("y", "x"),
        F.regr_slope("y", "x"),
        F.regr_intercept("y", "x"),
        F.regr_r2("y", "x"),
    )


def _corr(df: DataFrame) -> DataFrame:
    # "c" has one pair at most and "d" one: corr's n <= 1 guard; the others vary in both
    return df.groupBy("k").agg(F.corr("x", "y").alias("r"))


def _pick(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(
        F.first("x"),
        F.first("x", ignorenulls=True).alias("first_ign"),
        F.last("i"),
        F.last("i", ignorenulls=True).alias("last_ign"),
        F.first_value(F.col("s")).alias("fv"),
        F.last_value(F.col("s"), F.lit(True)).alias("lv"),
        F.any_value("s"),
        F.max_by("s", "x"),
        F.min_by("s", "y"),
        F.max_by("i", "b").alias("max_by_bool"),
    )


def _logic(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg(
        F.bool_and("b"),
        F.bool_or("b"),
        F.every("b").alias("ev"),
        F.some("b").alias("so"),
        F.bit_and("i"),
        F.bit_or("i"),
        F.bit_xor("i"),
        F.count_if(F.col("x") > 2).alias("cif"),
        F.try_sum("i"),
        F.try_sum("x").alias("tsx"),
        F.try_avg("i"),
        F.try_avg("x").alias("tax"),
        F.mean("i"),
    )


def _collect(df: DataFrame) -> DataFrame:
    agg = df.groupBy("k").agg(
        F.collect_list("s").alias("ls"),
        F.array_agg("i").alias("li"),
        F.collect_set("i").alias("si"),
        F.collect_set(F.struct("s", "i")).alias("ss"),
        F.collect_set(F.array("i", "i")).alias("sa"),
    )
    # collect_set's element order is its hash set's: compare the sets
    return agg.select("k", "ls", "li", F.array_sort("si").alias("si"), F.array_sort("ss").alias("ss"), F.array_sort("sa").alias("sa"))


def _sketches(df: DataFrame) -> DataFrame:
    """Functions whose Spark buffer is a map, a digest or a sketch; below the digests'
    compression sizes every one of them equals Spark's exactly (checked here)."""
    return df.groupBy("k").agg(
        F.percentile("x", 0.5).alias("p50"),
        F.percentile("i", [0.25, 0.75]).alias("pq"),
        F.median("y").alias("med"),
        F.percentile_approx("x", 0.5).alias("pa"),
        F.approx_percentile("y", [0.1, 0.9], 100).alias("apq"),
        F.mode("i", True).alias("mo"),
        F.approx_count_distinct("s").alias("acd"),
        F.approx_count_distinct("i", 0.1).alias("acd_rsd"),
        F.count_min_sketch("i", F.lit(0.5), F.lit(0.5), F.lit(1)).alias("cms"),
        F.hll_sketch_agg("i").alias("hll"),
        F.listagg("s", ",").alias("la"),
        F.string_agg("s").alias("sa"),
        F.product("x").alias("prod"),
        F.bitmap_construct_agg(F.bitmap_bit_position(F.abs("i"))).alias("bm"),
    )


def _expressions(df: DataFrame) -> DataFrame:
    """Expressions around aggregates (PySpark columns and SQL strings), FILTER clauses."""
    return df.groupBy("k").agg(
        (F.sum("x") / F.count("*")).alias("mean_x"),
        F.size(F.collect_set("s")).alias("n_s"),
        F.array_sort(F.collect_list("i")).alias("sorted_i"),
        (F.max("x") - F.min("x")).alias("spread"),
        F.round(F.avg(F.col("x") * 2), 2).alias("r"),
        F.when(F.count("x") > 1, F.stddev("x")).otherwise(F.lit(-1.0)).alias("cw"),
        F.expr("sum(x) FILTER (WHERE t > 11)").alias("fs"),
        F.expr("count(*) FILTER (WHERE b)").alias("fc"),
        F.expr("sum(i) / count(*)").alias("e"),
        F.expr("first(x) IGNORE NULLS").alias("fi"),
        # a row that passes the filter is taken even with a null value (key a: t = 12, x null)
        F.expr("first(x) FILTER (WHERE t > 11)").alias("ff"),
        F.expr("last(i) FILTER (WHERE b)").alias("lf"),
        F.expr("mode() WITHIN GROUP (ORDER BY i DESC)").alias("mw"),
        F.expr("listagg(s, '|') WITHIN GROUP (ORDER BY t DESC)").alias("lw"),
        F.expr("string_agg(s) WITHIN GROUP (ORDER BY s)").alias("sw"),
        F.expr("percentile_approx(x, 0.5) + max(y)").alias("pa"),
        F.expr("avg(i)"),
        F.expr("cast(count(s) AS string)").alias("cs"),
        F.percentile_approx("y", 0.5),  # a result name with a dot in it
        F.expr("percentile_cont(0.25) WITHIN GROUP (ORDER BY x)").alias("pc"),
        F.expr("percentile_disc(0.5) WITHIN GROUP (ORDER BY y DESC)").alias("pd"),
    )


def _dict_form(df: DataFrame) -> DataFrame:
    return df.groupBy("k").agg({"x": "stddev", "i": "max", "y": "variance", "s": "count"})


QUERIES = {
    "expressions": _expressions,
    "dict_form": _dict_form,
    "sketches": _sketches,
    "moments": _moments,
    "covariance": _covariance,
    "corr": _corr,
    "first_last_by": _pick,
    "bool_bit_try": _logic,
    "collect": _collect,
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_update_mode_keyed(spark, ours, tmp_path, name):
    assert_equivalent(spark, ours, QUERIES[name], BATCHES, SCHEMA, "update", tmp_path)


def _windowed(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("ts", F.timestamp_seconds("t"))
        .withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds", "5 seconds"), "k")
        .agg(
            F.stddev("x").alias("sd"),
            F.corr("x", "i").alias("r"),
            F.first("s").alias("f"),
            F.max_by("s", "x").alias("mb"),
            F.collect_list("i").alias("li"),
            F.bit_or("i").alias("bo"),
            F.kurtosis("x").alias("ku"),
            F.percentile_approx("x", 0.5).alias("pa"),
            F.approx_count_distinct("s").alias("acd"),
        )
        .select(F.col("window.start").cast("long").alias("start"), "k", "sd", "r", "f", "mb", "li", "bo", "ku", "pa", "acd")
    )


def _windowed_batches():
    # corr(x, i) over sliding windows: keep x and i varying within every window that has two pairs
    return [
        [("a", 10, 1.5, 0.0, 6, True, "p"), ("a", 11, 2.5, 0.0, 3, True, "q"), ("b", 12, 4.0, 0.0, None, None, "r")],
        [("a", 13, 4.0, 0.0, 5, False, "s"), ("b", 14, 10.0, 0.0, 12, True, "t"), ("a", 4, 9.0, 0.0, 1, True, "late")],
        [("a", 31, 0.5, 0.0, 1, True, "v"), ("b", 32, 7.0, 0.0, 9, False, "w")],
    ]


def test_sliding_window_append(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _windowed, _windowed_batches(), SCHEMA, "append", tmp_path)


def test_sliding_window_update(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _windowed, _windowed_batches(), SCHEMA, "update", tmp_path)


def _session(df: DataFrame) -> DataFrame:
    return (
        df.withColumn("ts", F.timestamp_seconds("t"))
        .withWatermark("ts", "5 seconds")
        .groupBy(F.session_window("ts", "3 seconds"), "k")
        .agg(
            F.var_pop("x").alias("vp"),
            F.skewness("x").alias("sk"),
            F.covar_samp("x", "y").alias("cs"),
            F.first("s").alias("f"),
            F.last("s").alias("l"),
            F.min_by("s", "y").alias("mb"),
            F.collect_list("s").alias("ls"),
            F.bool_and("b").alias("ba"),
            F.bit_xor("i").alias("bx"),
            F.try_sum("i").alias("ts"),
            F.median("x").alias("med"),
            F.listagg("s", "|").alias("la"),
            F.expr("first(x) FILTER (WHERE i > 2)").alias("ff"),
        )
        .select(F.col("session_window.start").cast("long").alias("start"), F.col("session_window.end").cast("long").alias("end"), "k", "vp", "sk", "cs", "f", "l", "mb", "ls", "ba", "bx", "ts", "med", "la", "ff")
    )


def test_session_window_append(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _session, BATCHES, SCHEMA, "append", tmp_path)


def _global(df: DataFrame) -> DataFrame:
    return df.agg(
        F.stddev_pop("x").alias("sd"),
        F.regr_slope("y", "x").alias("slope"),
        F.last("s").alias("l"),
        F.max_by("k", "y").alias("mb"),
        F.bool_or("b").alias("bo"),
        F.count_if("b").alias("cb"),
        F.collect_list("k").alias("lk"),
        F.approx_count_distinct("k").alias("acd"),
        F.percentile("x", [0.5, 0.9]).alias("pq"),
    )


def test_global_complete(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _global, BATCHES, SCHEMA, "complete", tmp_path)


def test_restart_in_the_middle(spark, ours, tmp_path):
    """Stop after the first two batches, restart on the same checkpoint with the third: the
    stored buffers (moments, first/last, lists) carry on exactly as in Spark."""
    import uuid

    from tests.differential.harness import _resolve_ours

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(
            F.kurtosis("x").alias("ku"),
            F.corr("x", "y").alias("r"),
            F.first("s").alias("f"),
            F.last("i", True).alias("l"),
            F.collect_list("s").alias("ls"),
            F.max_by("s", "x").alias("mb"),
            F.percentile_approx("y", [0.5, 0.75]).alias("pa"),
            F.count_min_sketch("i", F.lit(0.5), F.lit(0.5), F.lit(1)).alias("cms"),
        )

    runs = {}
    for engine in (spark, _resolve_ours(spark, ours)):
        workdir = tmp_path / f"restart-{uuid.uuid4().hex[:8]}"
        first = run_stream(engine, build, BATCHES[:2], SCHEMA, "update", tmp_path, workdir=workdir)
        second = run_stream(engine, build, BATCHES[2:], SCHEMA, "update", tmp_path, workdir=workdir)
        runs[engine is spark] = (first, second)
    for i in range(2):
        assert_same_batches(runs[True][i], runs[False][i])


def test_histogram_numeric_of_merged_batches(spark, ours, tmp_path):
    """histogram_numeric's bins depend on how partial histograms were merged: Spark keeps the
    bins of each batch (two bins at 7.0 for key "b" in batch 2), statestream recomputes the
    histogram from all the key's values (one bin at 7.0 with height 2)."""

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(F.histogram_numeric("x", F.lit(5)).alias("hist"))

    assert_equivalent(spark, ours, build, BATCHES, SCHEMA, "update", tmp_path)


def test_exact_distinct_aggregates_opt_in(spark, tmp_path):
    """statestream's opt-in beyond Spark: with ``spark.statestream.aggregation.distinct.enabled``
    the distinct aggregates Spark refuses on a stream run exactly. Spark's engine cannot be the
    oracle here, so each complete-mode batch is compared with Spark's *batch* query over every
    file read so far; without the conf, ``start()`` refuses the query with Spark's error."""
    from pyspark.errors import AnalysisException

    from statestream import StreamingSession

    from tests.differential.harness import rows_match

    conf = "spark.statestream.aggregation.distinct.enabled"

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(
            F.count_distinct("s").alias("ds"),
            F.sum_distinct("i").alias("si"),
            F.expr("avg(DISTINCT x)").alias("ax"),
            (F.countDistinct("i") + F.count("*")).alias("mixed"),
        )

    ss = StreamingSession(spark)
    with pytest.raises(AnalysisException, match="Distinct aggregations are not supported"):
        run_stream(ss, build, BATCHES[:1], SCHEMA, "complete", tmp_path)
    with session_confs(spark, {conf: "true"}):
        run = run_stream(ss, build, BATCHES, SCHEMA, "complete", tmp_path)
    assert [b.batch_id for b in run.batches] == [0, 1, 2]
    for b in run.batches:
        seen = [r for batch in BATCHES[: b.batch_id + 1] for r in batch]
        expected = [r.asDict(recursive=True) for r in build(spark.createDataFrame(seen, SCHEMA)).collect()]
        assert rows_match(expected, b.rows, float_tol=1e-9), (b.batch_id, expected, b.rows)


def test_grouped_aggregate_pandas_udf_fails_at_the_first_batch(spark, tmp_path):
    """A grouped-aggregate pandas UDF in a streaming aggregation: Spark's planner refuses it
    while planning the first batch, so ``start()`` succeeds and the query fails; the same here."""
    from pyspark.sql.functions import PandasUDFType, pandas_udf

    from tests.differential.harness import _resolve_ours

    mean_udf = pandas_udf(lambda v: float(v.mean()), "double", PandasUDFType.GROUPED_AGG)

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(mean_udf(F.col("x")).alias("m"))

    messages = []
    for engine in (spark, _resolve_ours(spark, None)):
        # start() succeeds; the failure comes from the query (processAllAvailable re-raises it)
        with pytest.raises(Exception) as info:  # noqa: PT011 - both engines' exception types differ
            run_stream(engine, build, BATCHES[:1], SCHEMA, "update", tmp_path)
        messages.append(str(info.value))
    for m in messages:
        assert "Streaming aggregation doesn't support group aggregate pandas UDF" in m, m


def test_constant_columns_nan_and_mixed_outputs(spark, ours, tmp_path):
    """Edge cases Spark's buffers define: a group whose x is constant across batches keeps a zero
    spread (skewness and kurtosis null, regr_r2 null or 1 by which side is constant), NaN orders
    above every number in max/min/max_by/min_by, and an expression output next to a plain call of
    the same function keeps its own buffers."""
    nan = float("nan")
    batches = [
        [("a", 1, 0.1, 1.0, 1, True, "p"), ("a", 2, 0.1, 2.0, 2, True, "q"), ("n", 3, nan, 1.0, 1, True, "r")],
        [("a", 4, 0.1, 3.0, 3, True, "s"), ("a", 5, 0.1, 4.0, 3, True, "t"), ("n", 6, 2.0, nan, 2, True, "u")],
        [("a", 7, 0.1, 5.0, 4, True, "v"), ("n", 8, 1.0, 3.0, 3, True, "w")],
    ]

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(
            F.skewness("x").alias("sk"),
            F.kurtosis("x").alias("ku"),
            F.stddev("x").alias("sd"),
            F.regr_r2("x", "y").alias("r2_const_y"),
            F.regr_r2("y", "x").alias("r2_const_x"),
            F.regr_slope("y", "x").alias("slope"),
            F.max("x").alias("mx"),
            F.min("y").alias("mn"),
            F.max_by("s", "x").alias("mbx"),
            F.min_by("s", "y").alias("mby"),
            (F.sum("i") / F.count("i")).alias("ratio"),
            F.count("i").alias("ci"),
            F.sum("i").alias("si"),
        )

    assert_equivalent(spark, ours, build, batches, SCHEMA, "update", tmp_path)


def _state_schemas(spark, ours, build, tmp_path):
    from statestream.state import schema as S

    exp, act = run_both(spark, build, BATCHES[:1], SCHEMA, "update", tmp_path, ours=ours)
    assert_same_batches(exp, act)
    return [S.read_state_schema(f"{run.checkpoint}/state", 0) for run in (exp, act)]


def _transparent_buffers(df: DataFrame) -> DataFrame:
    """Functions whose Spark buffer is made of plain typed fields (no opaque object)."""
    return df.groupBy("k").agg(
        F.count("*"),
        F.sum("i"),
        F.avg("x"),
        F.stddev("x"),
        F.kurtosis("y"),
        F.corr("x", "y"),
        F.regr_slope("y", "x"),
        F.first("s"),
        F.last("i", True),
        F.max_by("s", "x"),
        F.bool_and("b"),
        F.bit_xor("i"),
        F.try_sum("i"),
        F.try_avg("x"),
        F.product("x"),
        F.count_if("b"),
        F.any_value("s"),  # Spark's First(s, false), the same as first(s): one buffer
        (F.sum("i") / F.count("*")).alias("ratio"),  # both already have a buffer
    )


def test_state_schema_is_sparks_buffer_layout(spark, ours, tmp_path):
    """The state key and value schemas equal Spark's, field for field (names, types,
    nullability), for functions whose buffer is not an opaque object (what Spark's state reader
    shows); calls Spark merges into one share one buffer, and the rows stay Spark's."""
    spark_schema, our_schema = _state_schemas(spark, ours, _transparent_buffers, tmp_path)
    assert len(our_schema.value_schema["fields"]) == 39
    assert our_schema.key_schema == spark_schema.key_schema
    assert our_schema.value_schema == spark_schema.value_schema


def test_approx_count_distinct_state_is_sparks_registers(spark, ours, tmp_path):
    """approx_count_distinct's Spark buffer is HyperLogLog++'s register words (``MS[0]``, ...,
    longs); statestream keeps the key's values and finishes with Spark's own function."""

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(F.approx_count_distinct("s"))

    spark_schema, our_schema = _state_schemas(spark, ours, build, tmp_path)
    assert our_schema.value_schema == spark_schema.value_schema


DECIMAL_SCHEMA = "k STRING, t LONG, a DECIMAL(8,2), b DECIMAL(12,3), c DECIMAL(20,2), e DECIMAL(38,2)"


def _decimal_batches():
    from decimal import Decimal as D

    return [
        [("a", 1, D("1.25"), D("1.125"), D("1.10"), D("1.10")), ("a", 2, D("2.50"), None, D("3.33"), None), ("b", 3, None, None, None, None)],
        [
            ("a", 4, D("0.01"), D("7.001"), D("99999999.99"), D("9999999999999999999999999999.99")),
            ("b", 5, D("7.77"), D("1.000"), D("2.22"), D("1.00")),
        ],
        [("b", 20, D("-3.33"), D("-0.001"), None, D("-2.50")), ("c", 21, None, D("4.444"), D("0.05"), None)],
    ]


def _decimal_aggregates(df: DataFrame) -> list:
    return [F.call_function(fn, F.col(c)).alias(f"{fn}_{c}") for c in "abce" for fn in ("sum", "avg", "try_sum", "try_avg")]


def test_decimal_sums_and_averages(spark, ours, tmp_path):
    """Spark's decimal buffers depend on the precision (unscaled long sums, double or decimal
    averages, ``isEmpty``): the rows and the state value schema equal Spark's for each."""
    from statestream.state import schema as S

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(*_decimal_aggregates(df))

    exp, act = run_both(spark, build, _decimal_batches(), DECIMAL_SCHEMA, "update", tmp_path, ours=ours)
    assert_same_batches(exp, act)
    spark_schema, our_schema = (S.read_state_schema(f"{run.checkpoint}/state", 0) for run in (exp, act))
    assert our_schema.value_schema == spark_schema.value_schema


HIGH_SCALE_SCHEMA = "k STRING, t LONG, h DECIMAL(38,18), w DECIMAL(20,0), m DECIMAL(30,10)"


def _high_scale_batches():
    from decimal import Decimal as D

    return [
        [
            ("a", 1, D("1.000000000000000001"), D("1"), D("0.0000000001")),
            ("a", 2, D("2.000000000000000002"), D("2"), D("1.0000000002")),
            ("b", 3, D("0.333333333333333333"), D("5"), D("-2.5")),
        ],
        [
            ("a", 4, D("0.000000000000000001"), D("2"), D("7.7777777777")),
            ("b", 5, D("-0.666666666666666667"), D("-8"), D("0.0000000005")),
            ("b", 6, D("1234567890123456.123456789012345678"), D("99999999999999999999"), None),
        ],
        [
            ("a", 7, D("-1.999999999999999999"), D("1"), D("3.1415926535")),
            ("c", 8, D("0.000000000000000005"), D("3"), D("0.0000000001")),
            ("c", 9, D("0.000000000000000001"), D("4"), D("0.0000000002")),
        ],
    ]


def test_decimal_average_rounds_once_like_spark(spark, ours, tmp_path):
    """avg/try_avg/regr_avgx/regr_avgy of wide decimals (the result scale is the input's plus 4): Spark divides to 38
    significant digits and rounds half up once, to the result scale; thirds, sevenths and values
    at the last digit show any second rounding."""

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(
            *(F.call_function(fn, F.col(c)).alias(f"{fn}_{c}") for c in "hwm" for fn in ("avg", "try_avg")),
            # Spark replaces these with avg of the pairs' x (or y): avg's decimal buffers and rounding
            F.regr_avgx("h", "m").alias("rax_hm"),
            F.regr_avgy("h", "w").alias("ray_hw"),
            F.regr_avgx("w", "h").alias("rax_wh"),
        )

    exp, act = run_both(spark, build, _high_scale_batches(), HIGH_SCALE_SCHEMA, "update", tmp_path, ours=ours)
    assert_same_batches(exp, act)


def test_decimal_sums_in_session_windows(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("ts", F.timestamp_seconds("t"))
            .withWatermark("ts", "5 seconds")
            .groupBy(F.session_window("ts", "3 seconds"), "k")
            .agg(*_decimal_aggregates(df))
            .withColumn("start", F.col("session_window.start").cast("long"))
            .drop("session_window")
        )

    assert_equivalent(spark, ours, build, _decimal_batches(), DECIMAL_SCHEMA, "append", tmp_path)
