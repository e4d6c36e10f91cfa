"""Differential tests of analysis-time checks (reference §7.6, scenario S36).

For each query ``writeStream.start()`` must raise on statestream exactly when it raises on Spark,
an ``AnalysisException`` with the same message text (plan suffix and JVM trace excluded); the
allowed shapes must start on both.
"""

from __future__ import annotations

import uuid
from typing import Callable

import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from tests.differential.harness import error_text, start_error

SCHEMA = "value LONG"


def ev(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value"))


def w10(df: DataFrame) -> DataFrame:
    return ev(df).withWatermark("eventTime", "10 seconds")


def win5(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("eventTime", "5 seconds").alias("w")).agg(F.count("*").alias("c1"))


CASES: dict[str, tuple[str, Callable[[DataFrame], DataFrame], bool]] = {
    # name: (output mode, query, rejected by Spark?)
    "append_agg_without_watermark": ("append", lambda df: df.groupBy("value").count(), True),
    "append_agg_watermark_not_a_key": ("append", lambda df: w10(df).groupBy("value").count(), True),
    "complete_without_agg": ("complete", lambda df: df.select("value"), True),
    "update_session_window": (
        "update",
        lambda df: w10(df).groupBy(F.session_window("eventTime", "10 seconds")).count(),
        True,
    ),
    "sort_without_agg_append": ("append", lambda df: df.orderBy("value"), True),
    "sort_after_agg_update": ("update", lambda df: df.groupBy("value").count().orderBy("value"), True),
    "count_distinct": ("complete", lambda df: df.groupBy().agg(F.countDistinct("value")), True),
    "limit_update": ("update", lambda df: df.limit(3), True),
    "offset": ("append", lambda df: df.offset(1), True),
    "sample": ("append", lambda df: df.sample(0.5), True),
    "row_number": ("append", lambda df: df.withColumn("r", F.row_number().over(Window.orderBy("value"))), True),
    "monotonically_increasing_id": ("append", lambda df: df.withColumn("i", F.monotonically_increasing_id()), True),
    "chained_aggs_complete": ("complete", lambda df: df.groupBy("value").count().groupBy("count").count(), True),
    "chained_aggs_update": ("update", lambda df: df.groupBy("value").count().groupBy("count").count(), True),
    "update_agg_then_event_time_dedup": ("update", lambda df: win5(w10(df)).dropDuplicates(["w"]), True),
    "dedup_within_watermark_without_watermark": (
        "append",
        lambda df: df.dropDuplicatesWithinWatermark(["value"]),
        True,
    ),
    "union_with_batch": ("append", lambda df: df.union(df.sparkSession.range(3).withColumnRenamed("id", "value")), True),
    "union_by_name_with_batch": (
        "append",
        lambda df: df.unionByName(df.sparkSession.range(3).withColumnRenamed("id", "value")),
        True,
    ),
    "union_with_batch_then_agg": (
        "complete",
        lambda df: df.union(df.sparkSession.range(3).withColumnRenamed("id", "value")).groupBy("value").count(),
        True,
    ),
    # the batch DataFrame on the left: PySpark's own union gets the stream (statestream raises
    # Spark's error when the union is built, Spark at start())
    "batch_union_stream": ("append", lambda df: df.sparkSession.range(3).withColumnRenamed("id", "value").union(df), True),
    "batch_union_all_stream": (
        "append",
        lambda df: df.sparkSession.range(3).withColumnRenamed("id", "value").unionAll(df),
        True,
    ),
    "batch_union_by_name_stream": (
        "append",
        lambda df: df.sparkSession.range(3).withColumnRenamed("id", "value").unionByName(df),
        True,
    ),
    "cube_append_without_watermark": ("append", lambda df: df.cube("value").count(), True),
    # Allowed shapes.
    "update_without_agg": ("update", lambda df: df.filter("value > 0"), False),
    "sort_after_agg_complete": ("complete", lambda df: df.groupBy("value").count().orderBy("value"), False),
    "limit_append": ("append", lambda df: df.limit(3), False),
    "limit_after_agg_complete": ("complete", lambda df: df.groupBy("value").count().limit(2), False),
    "chained_windowed_aggs_append": (
        "append",
        lambda df: win5(w10(df))
        .groupBy(F.window(F.window_time("w"), "10 seconds"))
        .agg(F.count("*").alias("n"), F.sum("c1").alias("t")),
        False,
    ),
    "cube_complete": ("complete", lambda df: df.cube("value").count(), False),
    "cube_update": ("update", lambda df: df.cube("value").count(), False),
    "rollup_update": ("update", lambda df: df.rollup("value", (F.col("value") % 2).alias("p")).count(), False),
    "cube_window_append": ("append", lambda df: w10(df).cube(F.window("eventTime", "5 seconds"), "value").count(), False),
    "windowed_agg_append": ("append", lambda df: win5(w10(df)), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_start_verdict_matches_spark(spark, ours, tmp_path, name):
    mode, build, rejected = CASES[name]
    expected = start_error(spark, build, SCHEMA, mode, tmp_path)
    assert (expected is not None) == rejected, f"Spark's verdict changed for {name}: {expected}"
    actual = start_error(ours(), build, SCHEMA, mode, tmp_path)
    assert actual == expected, f"{name} ({mode}):\n  spark: {expected}\n  ours:  {actual}"


def test_batch_on_the_left_of_a_union_with_a_stream(spark, ours, tmp_path):
    """``batch.union(stream)``: Spark refuses it at ``start()``; statestream, whose stream PySpark's
    own ``union`` cannot take, raises the same error (class, condition, text) when the union is
    built. Other PySpark methods given a statestream DataFrame say what to call instead, except
    ``join``/``crossJoin``, which statestream takes over for a statestream argument."""
    from pyspark.errors import AnalysisException

    static = spark.range(3).withColumnRenamed("id", "value")
    spark_stream = spark.readStream.format("rate").load().select("value")
    with pytest.raises(AnalysisException) as expected:
        static.union(spark_stream).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    stream = ours().readStream.format("rate").load().select("value")
    with pytest.raises(AnalysisException) as actual:
        static.union(stream)
    assert actual.value.getCondition() == expected.value.getCondition() == "_LEGACY_ERROR_TEMP_3102"
    assert error_text(actual.value) == error_text(expected.value)
    with pytest.raises(AttributeError, match=r"DataFrame\.exceptAll\(\).*stream_df\.<method>\(batch_df\)"):
        static.exceptAll(stream)
    # PySpark's own join of the static DataFrame takes the stream (a join Spark accepts)
    assert static.join(stream, "value").isStreaming and type(static.join(stream, "value")).__module__ == "statestream.api.dataframe"


def _sink(writer, sink: str, where: str):
    """``writer`` pointed at ``sink`` (no checkpoint location), as a user would write it."""
    if sink == "foreach":
        return writer.foreach(lambda row: None)
    if sink == "foreachBatch":
        return writer.foreachBatch(lambda df, batch_id: None)
    if sink == "memory":
        return writer.format("memory").queryName(f"no_checkpoint_{uuid.uuid4().hex[:8]}")
    if sink in ("parquet", "json"):
        return writer.format(sink).option("path", where)
    return writer.format(sink)


@pytest.mark.parametrize("sink", ["memory", "foreach", "foreachBatch", "console", "noop", "parquet", "json"])
def test_start_without_a_checkpoint_location(spark, ours, tmp_path, sink):
    """Only the sinks Spark lets a one-time query use (memory, foreach, foreachBatch, console,
    noop) start without ``checkpointLocation`` (on a temporary one); the others are refused at
    ``start()`` with ``_LEGACY_ERROR_TEMP_1298``, as on Spark's engine."""
    from pyspark.errors import AnalysisException

    verdicts = []
    for engine in (spark, ours()):
        writer = engine.readStream.format("rate").load().writeStream
        try:
            query = _sink(writer, sink, str(tmp_path / f"out-{uuid.uuid4().hex[:8]}")).start()
        except AnalysisException as exc:
            verdicts.append((exc.getCondition(), error_text(exc)))
        else:
            query.stop()
            verdicts.append(None)
    assert verdicts[0] == verdicts[1]
    assert (verdicts[0] is None) == (sink not in ("parquet", "json"))


def test_kafka_sink_without_a_checkpoint_location(ours):
    """A Kafka sink is not one of the one-time-query sinks, so it needs ``checkpointLocation``
    (``_LEGACY_ERROR_TEMP_1298``), checked at ``start()`` before any broker is reached. Spark's
    side cannot run here: the test session has no Kafka jar, so Spark stops earlier, at the
    lookup of the source (``_LEGACY_ERROR_TEMP_1140``); with the jar it reaches the same check."""
    from pyspark.errors import AnalysisException

    writer = ours().readStream.format("rate").load().writeStream.format("kafka")
    writer = writer.option("kafka.bootstrap.servers", "127.0.0.1:9").option("topic", "t")
    with pytest.raises(AnalysisException) as caught:
        writer.start()
    assert caught.value.getCondition() == "_LEGACY_ERROR_TEMP_1298"
    assert "checkpointLocation must be specified" in error_text(caught.value)
