"""statestream's opt-in Python aggregate function (``statestream.AggregateFunction``) against
Spark's engine.

Spark refuses user-defined grouped aggregates on streams, so the oracle is Spark's engine running
the same aggregate written with built-in functions: ``weighted_mean(x, y)`` is
``sum(x * y) / sum(y)``, ``spread(x)`` is ``max(x) - min(x)``. The same file batches go into both,
and every batch is compared (rows to 1e-9 relative, watermark, state row counts), with late rows,
eviction, a restart in the middle and a global aggregation. On a static DataFrame the function is
a grouped-aggregate Arrow UDF and matches the built-in equivalent there too.
"""

from __future__ import annotations

import sys
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from statestream import AggregateFunction, StreamingSession
from tests.differential.harness import _resolve_ours, assert_same_batches, rows_match, run_stream
from tests.differential.test_aggregate_functions import BATCHES, SCHEMA, _windowed_batches


class WeightedMean(AggregateFunction):
    """sum(x * y) / sum(y), nulls skipped as Spark's sum skips them (Arrow columns)."""

    buffer_schema = "total double, weight double, pairs long, weights long"
    result_type = "double"

    def zero(self):
        return {"total": 0.0, "weight": 0.0, "pairs": 0, "weights": 0}

    def update(self, buffer, x, y):
        products = pc.multiply(x, y)
        return {
            "total": buffer["total"] + (pc.sum(products).as_py() or 0.0),
            "weight": buffer["weight"] + (pc.sum(y).as_py() or 0.0),
            "pairs": buffer["pairs"] + len(products) - products.null_count,
            "weights": buffer["weights"] + len(y) - y.null_count,
        }

    def merge(self, left, right):
        return {name: pc.add(left[name], right[name]) for name in ("total", "weight", "pairs", "weights")}

    def finish(self, buffers):
        # Spark: sum of no values is null, and x / 0.0 is null
        empty = pc.or_(pc.or_(pc.equal(buffers["pairs"], 0), pc.equal(buffers["weights"], 0)), pc.equal(buffers["weight"], 0.0))
        return pc.if_else(empty, pa.scalar(None, pa.float64()), pc.divide(buffers["total"], buffers["weight"]))


class Spread(AggregateFunction):
    """max(x) - min(x) (pandas columns)."""

    buffer_schema = "lo double, hi double"
    result_type = "double"
    columns = "pandas"

    def zero(self):
        return {"lo": None, "hi": None}

    def update(self, buffer, x):
        x = x.dropna()
        if x.empty:
            return buffer
        lo, hi = float(x.min()), float(x.max())
        return {
            "lo": lo if buffer["lo"] is None else min(buffer["lo"], lo),
            "hi": hi if buffer["hi"] is None else max(buffer["hi"], hi),
        }

    def merge(self, left, right):
        return {"lo": np.fmin(left["lo"], right["lo"]), "hi": np.fmax(left["hi"], right["hi"])}

    def finish(self, buffers):
        return buffers["hi"] - buffers["lo"]


weighted_mean = WeightedMean()
spread = Spread()

# Spark's Python workers cannot import this test module: ship its classes by value, as they
# would be for a class defined in a user's script
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _same_on_both(spark, tmp_path, builtin, python, batches, mode, workdir_tag=""):
    """Spark's engine runs ``builtin``, statestream runs ``python``; every batch must agree."""
    expected = run_stream(spark, builtin, batches, SCHEMA, mode, tmp_path)
    actual = run_stream(StreamingSession(spark), python, batches, SCHEMA, mode, tmp_path)
    assert_same_batches(expected, actual)
    return actual


def _keyed(use_python: bool):
    def build(df: DataFrame) -> DataFrame:
        wm = weighted_mean("x", "y") if use_python else F.sum(F.col("x") * F.col("y")) / F.sum("y")
        sp = spread("x") if use_python else F.max("x") - F.min("x")
        return df.groupBy("k").agg(
            wm.alias("wm"),
            F.count("*").alias("n"),
            sp.alias("spread"),
            (sp * 2 + F.sum("i")).alias("mixed"),
        )

    return build


def test_update_mode_keyed_with_builtins_and_expressions(spark, tmp_path):
    _same_on_both(spark, tmp_path, _keyed(False), _keyed(True), BATCHES, "update")


def _windowed(use_python: bool):
    def build(df: DataFrame) -> DataFrame:
        wm = weighted_mean("x", "i") if use_python else F.sum(F.col("x") * F.col("i")) / F.sum("i")
        sp = spread("x") if use_python else F.max("x") - F.min("x")
        return (
            df.withColumn("ts", F.timestamp_seconds("t"))
            .withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds", "5 seconds"), "k")
            .agg(wm.alias("wm"), sp.alias("spread"), F.stddev("x").alias("sd"))
            .select(F.col("window.start").cast("long").alias("start"), "k", "wm", "spread", "sd")
        )

    return build


@pytest.mark.parametrize("mode", ["append", "update"])
def test_sliding_windows_with_late_rows_and_eviction(spark, tmp_path, mode):
    _same_on_both(spark, tmp_path, _windowed(False), _windowed(True), _windowed_batches(), mode)


def _global(use_python: bool):
    def build(df: DataFrame) -> DataFrame:
        sp = spread("y") if use_python else F.max("y") - F.min("y")
        wm = weighted_mean("y", "x") if use_python else F.sum(F.col("y") * F.col("x")) / F.sum("x")
        return df.agg(sp.alias("spread"), wm.alias("wm"), F.count("k").alias("n"))

    return build


def test_global_complete(spark, tmp_path):
    _same_on_both(spark, tmp_path, _global(False), _global(True), BATCHES, "complete")


def test_restart_in_the_middle(spark, tmp_path):
    """The buffers stored after two batches carry on after a restart on the same checkpoint."""
    runs = {}
    for engine, build in ((spark, _keyed(False)), (StreamingSession(spark), _keyed(True))):
        workdir = tmp_path / f"restart-{uuid.uuid4().hex[:8]}"
        first = run_stream(engine, build, BATCHES[:2], SCHEMA, "update", tmp_path, workdir=workdir)
        second = run_stream(engine, build, BATCHES[2:], SCHEMA, "update", tmp_path, workdir=workdir)
        runs[engine is spark] = (first, second)
    for i in range(2):
        assert_same_batches(runs[True][i], runs[False][i])


def test_static_dataframe(spark):
    """On a static DataFrame the function is a grouped-aggregate Arrow UDF (which Spark does not
    let share an ``agg()`` with built-in functions, so each is its own aggregation)."""
    df = spark.createDataFrame([r for batch in BATCHES for r in batch], SCHEMA)
    ours = df.groupBy("k").agg(weighted_mean("x", "y").alias("wm"), spread("x").alias("spread"))
    builtin = df.groupBy("k").agg(
        (F.sum(F.col("x") * F.col("y")) / F.sum("y")).alias("wm"), (F.max("x") - F.min("x")).alias("spread")
    )
    expected = [r.asDict() for r in builtin.collect()]
    assert rows_match(expected, [r.asDict() for r in ours.collect()], float_tol=1e-9)
    assert ours.columns == ["k", "wm", "spread"]
    assert df.groupBy("k").agg(weighted_mean("x", "y")).columns == ["k", "weighted_mean(x, y)"]


def test_state_holds_the_buffer_fields(spark, tmp_path):
    """The state value columns are the user's buffer fields, named and typed as declared."""
    from statestream.plan.planner import aggregation_info

    ss = StreamingSession(spark)
    (tmp_path / "in").mkdir()  # load() needs an existing directory (Spark's PATH_NOT_FOUND)
    stream = ss.readStream.schema(SCHEMA).parquet(str(tmp_path / "in"))
    agg = stream.groupBy("k").agg(weighted_mean("x", "y"), F.sum("i"))
    info = aggregation_info(agg._plan)
    fields = [(f["name"], f["type"]) for f in info.value_schema_json["fields"]]
    assert fields == [("total", "double"), ("weight", "double"), ("pairs", "long"), ("weights", "long"), ("sum", "long")]


def test_session_window_is_refused_from_start(spark, tmp_path):
    from statestream.errors import StatestreamError

    def build(df: DataFrame) -> DataFrame:
        ts = F.timestamp_seconds("t")
        return df.withColumn("ts", ts).withWatermark("ts", "5 seconds").groupBy(F.session_window("ts", "3 seconds"), "k").agg(spread("x"))

    with pytest.raises(StatestreamError, match="Python aggregate function spread in session window"):
        run_stream(StreamingSession(spark), build, BATCHES[:1], SCHEMA, "append", tmp_path)


class Broken(WeightedMean):
    def update(self, buffer, x, y):
        return {"total": 1.0}


def test_a_wrong_buffer_fails_the_query_naming_the_function(spark, tmp_path):
    broken = Broken()

    def build(df: DataFrame) -> DataFrame:
        return df.groupBy("k").agg(broken("x", "y"))

    with pytest.raises(Exception, match=r"broken\.update\(\) must return a mapping with the buffer fields"):
        run_stream(_resolve_ours(spark, None), build, BATCHES[:1], SCHEMA, "update", tmp_path)
