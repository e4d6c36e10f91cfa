"""The sketch aggregates (issue 10): KLL, Theta and HLL sketches built from values and merged
from sketches, ``approx_top_k`` and the bitmap aggregates, in a streaming aggregation on both
engines. A sketch's bytes may depend on the order it was fed, so each is compared through
Spark's own scalar functions over it (counts, quantiles, estimates); below the sketches'
compression sizes those are exact, and equal on both engines."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_same_batches, run_both

SCHEMA = "k STRING, t LONG, v LONG, d DOUBLE, kll BINARY, theta BINARY, hll BINARY"


def _sketch_bytes(spark, values: list[int]) -> tuple[bytes, bytes, bytes]:
    """A KLL, a Theta and an HLL sketch of ``values``, made by Spark's batch functions (the
    merge aggregates' input)."""
    df = spark.createDataFrame([(v,) for v in values], "v LONG")
    row = df.agg(
        F.kll_sketch_agg_bigint("v").alias("kll"), F.theta_sketch_agg("v").alias("theta"), F.hll_sketch_agg("v").alias("hll")
    ).first()
    return bytes(row["kll"]), bytes(row["theta"]), bytes(row["hll"])


def _batches(spark) -> list[list[tuple]]:
    sketches = {n: _sketch_bytes(spark, list(range(n, n * 3))) for n in (1, 2, 5, 7)}

    def row(k: str, t: int, v: int | None, n: int) -> tuple:
        kll, theta, hll = sketches[n]
        return (k, t, v, None if v is None else v / 4.0, kll, theta, hll)

    return [
        [row("a", 1, 3, 1), row("a", 2, 9, 2), row("b", 3, 6, 5)],
        [row("a", 4, None, 7), row("b", 5, 12, 1), row("b", 6, 4, 2)],
        [row("c", 7, 1, 5), row("a", 8, 40, 5)],
    ]


def _build(df: DataFrame) -> DataFrame:
    agg = df.groupBy("k").agg(
        F.kll_sketch_agg_bigint("v").alias("kb"),
        F.kll_sketch_agg_double("d").alias("kd"),
        F.kll_merge_agg_bigint("kll").alias("km"),
        F.theta_sketch_agg("v").alias("ts"),
        F.theta_union_agg("theta").alias("tu"),
        F.theta_intersection_agg("theta").alias("ti"),
        F.hll_union_agg("hll").alias("hu"),
        F.call_function("approx_top_k", F.col("v"), F.lit(2)).alias("top"),
        F.bitmap_construct_agg(F.bitmap_bit_position("v")).alias("bm"),
    )
    return agg.select(
        "k",
        F.kll_sketch_get_n_bigint("kb").alias("kb_n"),
        F.kll_sketch_get_quantile_bigint("kb", F.lit(0.5)).alias("kb_q"),
        F.kll_sketch_get_quantile_double("kd", F.lit(0.9)).alias("kd_q"),
        F.kll_sketch_get_n_bigint("km").alias("km_n"),
        F.kll_sketch_get_quantile_bigint("km", F.lit(0.25)).alias("km_q"),
        F.theta_sketch_estimate("ts").alias("ts_e"),
        F.theta_sketch_estimate("tu").alias("tu_e"),
        F.theta_sketch_estimate("ti").alias("ti_e"),
        F.hll_sketch_estimate("hu").alias("hu_e"),
        "top",
        F.bitmap_count("bm").alias("bm_n"),
    )


def test_sketch_aggregates_match_sparks_estimates(spark, ours, tmp_path):
    exp, act = run_both(spark, _build, _batches(spark), SCHEMA, "update", tmp_path, ours=ours)
    assert_same_batches(exp, act)
    # the merges saw several sketches per key (a's KLL count is the sum of its sketches' sizes)
    last = {r["k"]: r for r in exp.batches[-1].rows}
    assert last["a"]["km_n"] == 2 * (1 + 2 + 7 + 5)
