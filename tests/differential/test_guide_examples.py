"""The kinds of program Spark's Structured Streaming guide walks through, written in the project's
own words, run on Spark's engine and on statestream with the same input, every batch compared.

* the network word count: lines from a socket, split into words, a running count (complete mode);
* windowed word counts over event time with a watermark, grouped with the column taken from the
  DataFrame before ``withWatermark`` (as the guide writes it), in update and append mode;
* a file-source job: device readings (parquet files; JSON input rows are a known gap of their own), a filter, a projection and a count per device type,
  then the same selection through a temporary view and SQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent, assert_same_batches, run_stream
from tests.differential.test_sources_more import LineServer, assert_same, drive

# -- the network word count ------------------------------------------------------------------------


def test_network_word_count(spark, ours, tmp_path):
    lines = [["apache spark", "spark streaming"], ["hello world", "hello spark"]]

    def scenario(engine: Any, tag: str):
        server = LineServer()
        try:

            def make(rs: Any) -> Any:
                text = rs.format("socket").option("host", "127.0.0.1").option("port", server.port).load()
                words = text.select(F.explode(F.split(text.value, " ")).alias("word"))
                return words.groupBy("word").count()

            steps = [(lambda g=g: server.send(g)) for g in lines]
            return drive(engine, make, tmp_path / tag, steps, mode="complete", settle=1.0)
        finally:
            server.close()

    expected = scenario(spark, "spark")
    actual = scenario(ours(), "ours")
    assert expected.rows, expected.describe()
    assert_same(expected, actual)


# -- windowed word counts with a watermark -----------------------------------------------------------

WORDS_SCHEMA = "timestamp TIMESTAMP, word STRING"
T0 = dt.datetime(2024, 3, 1, 12, 0, 0)


def _at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


WORD_BATCHES = [
    [(_at(7), "dog"), (_at(8), "owl")],
    [(_at(9), "dog"), (_at(14), "owl"), (_at(13), "cat")],
    [(_at(4), "dog"), (_at(17), "owl"), (_at(24), "cat")],  # 12:04 is late by then
    [(_at(40), "dog")],
]


def _windowed_word_counts(words: DataFrame) -> DataFrame:
    counts = (
        words.withWatermark("timestamp", "10 minutes")
        .groupBy(F.window(words.timestamp, "10 minutes", "5 minutes"), words.word)
        .count()
    )
    return counts.select(F.col("window.start").alias("start"), F.col("window.end").alias("end"), "word", "count")


def _windowed_word_counts_on_watermarked(words: DataFrame) -> DataFrame:
    marked = words.withWatermark("timestamp", "10 minutes")
    counts = marked.groupBy(F.window(marked.timestamp, "10 minutes", "5 minutes"), marked.word).count()
    return counts.select(F.col("window.start").alias("start"), F.col("window.end").alias("end"), "word", "count")


def test_windowed_word_counts_update(spark, ours, tmp_path):
    """The guide's form (``words.timestamp`` from before ``withWatermark``) in update mode."""
    assert_equivalent(spark, ours, _windowed_word_counts, WORD_BATCHES, WORDS_SCHEMA, "update", tmp_path)


def test_windowed_word_counts_append(spark, ours, tmp_path):
    """Append mode needs the grouping column to carry the watermark: taken from the watermarked
    DataFrame, each window is emitted once when the watermark passes its end."""
    assert_equivalent(spark, ours, _windowed_word_counts_on_watermarked, WORD_BATCHES, WORDS_SCHEMA, "append", tmp_path)


# -- a file-source job ---------------------------------------------------------------------------------

DEVICE_SCHEMA = "device STRING, deviceType STRING, signal DOUBLE, time TIMESTAMP"
DEVICE_BATCHES = [
    [("d1", "phone", 12.0, _at(0)), ("d2", "sensor", 5.0, _at(1)), ("d3", "phone", 30.5, _at(2))],
    [("d4", "sensor", 15.0, _at(3)), ("d1", "phone", 9.0, _at(4))],
    [("d5", "router", 11.0, _at(5))],
]


def test_file_source_device_readings(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        strong = df.select("device", "deviceType", "signal").where("signal > 10")
        return strong.groupBy("deviceType").count()

    assert_equivalent(spark, ours, build, DEVICE_BATCHES, DEVICE_SCHEMA, "complete", tmp_path)


def _same_sql_on_both(spark, tmp_path, view: str, query: str, mode: str) -> None:
    """``query`` (``{view}`` is the view's name) over the device stream registered as a temporary
    view: ``spark.sql`` on Spark's engine, ``ss.sql`` on statestream; every batch compared."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)

    def build(sql, name):
        def run(df: DataFrame) -> DataFrame:
            df.createOrReplaceTempView(name)
            return sql(query.format(view=name))

        return run

    expected = run_stream(spark, build(spark.sql, f"{view}_spark"), DEVICE_BATCHES, DEVICE_SCHEMA, mode, tmp_path)
    actual = run_stream(ss, build(ss.sql, f"{view}_ours"), DEVICE_BATCHES, DEVICE_SCHEMA, mode, tmp_path)
    assert_same_batches(expected, actual)


def test_file_source_selection_through_sql(spark, tmp_path):
    """The same selection as SQL over a temporary view."""
    _same_sql_on_both(spark, tmp_path, "readings", "SELECT device, signal FROM {view} WHERE signal > 10", "append")


def test_sql_count_over_a_streaming_view(spark, tmp_path):
    """The guide's ``spark.sql("select count(*) from updates")`` over a streaming view: Spark runs
    the aggregation; statestream runs only stateless SQL over a stream (known gap)."""
    _same_sql_on_both(spark, tmp_path, "updates", "SELECT count(*) AS n FROM {view}", "complete")
