"""Differential tests of stateless queries (select / filter / withColumn) in append and update.

No state operator, so progress has an empty ``stateOperators`` list, and without a watermark no
``eventTime`` object; with a watermark but nothing stateful, the watermark is still reported and
still advances, yet no no-data batch ever runs (nothing would answer ``shouldRunAnotherBatch``).
"""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent

SCHEMA = "ts TIMESTAMP, k STRING, x LONG, d DOUBLE"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)
INPUT = [
    [(T0, "a", 1, 0.5), (T0 + dt.timedelta(seconds=3), None, None, None), (T0, "b", -2, 2.5)],
    [],  # an empty file: a data batch with zero input rows
    [(T0 + dt.timedelta(seconds=30), "a", 7, 1.0 / 3), (None, "c", 8, -0.0)],
]


def projection(df: DataFrame) -> DataFrame:
    return (
        df.filter(F.col("x").isNull() | (F.col("x") > 0))
        .withColumn("x2", F.col("x") * 2)
        .withColumn("label", F.concat_ws("-", F.coalesce("k", F.lit("none")), F.col("x").cast("string")))
        .select("ts", "label", "x2", (F.col("d") + 1).alias("d1"))
    )


@pytest.mark.parametrize("mode", ["append", "update"])
def test_select_filter_with_column(spark, ours, tmp_path, mode):
    assert_equivalent(spark, ours, projection, INPUT, SCHEMA, mode, tmp_path)


@pytest.mark.parametrize("mode", ["append", "update"])
def test_watermark_without_state(spark, ours, tmp_path, mode):
    exp, _ = assert_equivalent(
        spark, ours, lambda df: projection(df.withWatermark("ts", "10 seconds")), INPUT, SCHEMA, mode, tmp_path
    )
    assert len(exp.batches) == 3  # no ND batch even though the watermark moved
    assert exp.batches[2].watermark == "2024-05-01T11:59:53.000Z"


def test_json_input_stateless(spark, ours, tmp_path):
    assert_equivalent(spark, ours, projection, INPUT, SCHEMA, "append", tmp_path, file_format="json")


def _more_operations(df: DataFrame) -> DataFrame:
    """PySpark's other stateless DataFrame methods, chained (issue 11)."""

    def plus_one(batches):
        for pdf in batches:
            pdf = pdf.copy()
            pdf["x"] = pdf["x"] + 1
            yield pdf

    def tagged(batches):
        import pyarrow as pa

        for b in batches:
            yield b.append_column("tag", pa.array(["arrow"] * b.num_rows))

    return (
        df.repartition(3, "k")
        .coalesce(1)
        .hint("broadcast")
        .transform(lambda d, n: d.withColumn("n", F.lit(n)), 5)
        .na.fill({"k": "none"})
        .fillna(0, subset=["x"])
        .replace("a", "A", subset=["k"])
        .na.replace(-2, -20, subset=["x"])
        .dropna(subset=["ts"])
        .na.drop(how="all")
        .mapInPandas(plus_one, "ts TIMESTAMP, k STRING, x LONG, d DOUBLE, n INT")
        .mapInArrow(tagged, "ts TIMESTAMP, k STRING, x LONG, d DOUBLE, n INT, tag STRING")
        .withMetadata("x", {"comment": "kept"})
        .withColumns({"x3": F.col("x") * 3, "dd": F.col("d") * 2})
        .repartitionByRange(2, "x")
        .sampleBy("k", {"A": 1.0, "b": 1.0, "c": 0.0}, seed=1)
        .toDF("ts", "key", "x", "d", "n", "tag", "x3", "dd")
    )


@pytest.mark.parametrize("mode", ["append", "update"])
def test_more_stateless_operations(spark, ours, tmp_path, mode):
    assert_equivalent(spark, ours, _more_operations, INPUT, SCHEMA, mode, tmp_path)


def _replace_with_null(df: DataFrame) -> DataFrame:
    """``value=None`` replaces with null (PySpark tells it from a value left out)."""
    return df.replace("a", None).na.replace([-2, 8], None, subset=["x"]).replace({"b": None}, subset=["k"])


def test_replace_with_null(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _replace_with_null, INPUT, SCHEMA, "append", tmp_path)


def test_replace_without_value_refused_like_pyspark(spark, ours):
    """A value left out is PySpark's own error unless ``to_replace`` is a dict."""
    from pyspark.errors import PySparkTypeError

    errors = []
    for engine in (spark, ours()):
        df = engine.readStream.format("rate").load()
        for call in (lambda: df.replace(1), lambda: df.na.replace(1)):
            with pytest.raises(PySparkTypeError) as info:
                call()
            errors.append((info.value.getCondition(), str(info.value)))
    assert errors[2:] == errors[:2]
    assert errors[0][0] == "ARGUMENT_REQUIRED"


def _reshape(df: DataFrame) -> DataFrame:
    from pyspark.sql.types import StructType

    kept = df.select("k", "x", "d").to(StructType.fromDDL("k STRING, d DOUBLE, x LONG"))
    long_form = kept.unpivot(["k"], ["x", "d"], "column", "value").melt("k", ["value"], "v", "val")
    other = df.select("k", F.col("x").alias("only_here"))
    return long_form.unionByName(other, allowMissingColumns=True)


def test_unpivot_to_and_union_by_name_with_missing_columns(spark, ours, tmp_path):
    assert_equivalent(spark, ours, _reshape, INPUT, SCHEMA, "append", tmp_path)


def test_stateless_operations_feed_an_aggregation(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return _more_operations(df).groupBy("key").agg(F.sum("x3").alias("s"), F.count("*").alias("c"))

    assert_equivalent(spark, ours, build, INPUT, SCHEMA, "update", tmp_path)


def _observed(run) -> dict[int, dict]:
    """Batch id -> {metric name: values in the metrics' order} (PySpark's progress objects hold
    the metrics as Rows, which the harness's JSON shows as lists; the field names are checked in
    tests/spark/test_listeners.py)."""
    from tests.differential.harness import normalise_progress

    out = {}
    for p in run.progress:
        p = normalise_progress(p)
        if "addBatch" in (p.get("durationMs") or {}):
            metrics = p.get("observedMetrics") or {}
            out[p["batchId"]] = {k: list(v.values()) if isinstance(v, dict) else v for k, v in metrics.items()}
    return out


@pytest.mark.parametrize("aggregated", [False, True], ids=["stateless", "aggregation"])
def test_observe_named_metrics_in_progress(spark, ours, tmp_path, aggregated):
    """``observe("name", ...)``: the progress of every executed batch carries the same
    ``observedMetrics`` as Spark's (metrics above and below a watermark and an aggregation)."""
    from tests.differential.harness import assert_same_batches, run_both

    def build(df: DataFrame) -> DataFrame:
        df = df.observe("input", F.count(F.lit(1)).alias("rows"), F.max("x").alias("max_x"), F.sum("d").alias("sum_d"))
        if not aggregated:
            return df.filter("x > 0").observe("kept", F.count(F.lit(1)).alias("rows"))
        counts = df.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "5 seconds"), "k").count()
        return counts.observe("windows", F.count(F.lit(1)).alias("rows"), F.sum("count").alias("total"))

    mode = "update" if aggregated else "append"
    exp, act = run_both(spark, build, INPUT, SCHEMA, mode, tmp_path, ours=ours)
    assert_same_batches(exp, act)
    expected, actual = _observed(exp), _observed(act)
    assert expected and all(expected.values()), expected
    assert actual == expected


def test_sql_over_a_streaming_temp_view(spark, tmp_path):
    """``createOrReplaceTempView`` + SQL: Spark's ``spark.sql`` over the view is a stream; on
    statestream the same SQL goes through ``ss.sql``. SQL that aggregates over the view is not
    supported yet and says so."""
    from statestream import StreamingSession
    from statestream.errors import NotSupportedYetError

    from tests.differential.harness import assert_same_batches, run_stream

    query = "SELECT upper(k) AS k, x * 2 AS x2, d FROM events_{tag} WHERE x IS NULL OR x > 0"
    ss = StreamingSession(spark)

    def build(sql, tag):
        def run(df: DataFrame) -> DataFrame:
            df.createOrReplaceTempView(f"events_{tag}")
            return sql(query.format(tag=tag)).withColumn("seen", F.lit(1))

        return run

    expected = run_stream(spark, build(spark.sql, "spark"), INPUT, SCHEMA, "append", tmp_path)
    actual = run_stream(ss, build(ss.sql, "ours"), INPUT, SCHEMA, "append", tmp_path)
    assert_same_batches(expected, actual)
    assert ss.table("events_ours").isStreaming
    assert not ss.sql("SELECT 1 AS one").isStreaming  # no streaming view: Spark's batch DataFrame
    with pytest.raises(NotSupportedYetError, match=r"StreamingSession\.sql\(\).*Aggregate over the streaming view events_ours"):
        ss.sql("SELECT k, count(*) FROM events_ours GROUP BY k")
