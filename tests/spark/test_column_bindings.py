"""Which attribute a column object refers to, with Spark's own streaming DataFrames as the oracle.

``df.col`` / ``df["col"]`` in Spark is ``df``'s attribute, not a name. Each case builds the same
query on Spark's ``readStream`` and on statestream's and compares the output columns' metadata
(the event-time marker ``spark.watermarkDelayMs`` and ``spark.timeWindow``), or the error Spark
raises when the query is defined. No query runs.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import error_text

SCHEMA = "timestamp TIMESTAMP, word STRING, other TIMESTAMP"


def _guide(words: DataFrame) -> DataFrame:
    return words.withWatermark("timestamp", "10 minutes").groupBy(F.window(words.timestamp, "10 minutes", "5 minutes"), words.word).count()


def _select_between(words: DataFrame) -> DataFrame:
    # the projection passes the attribute on; the reference still points below the watermark
    return words.withWatermark("timestamp", "10 minutes").select("timestamp", "word").groupBy(F.window(words.timestamp, "5 minutes")).count()


def _redefined(words: DataFrame) -> DataFrame:
    first = words.withWatermark("timestamp", "10 minutes")
    return first.withWatermark("timestamp", "5 minutes").groupBy(F.window(first.timestamp, "5 minutes")).count()


def _moved_marker(words: DataFrame) -> DataFrame:
    first = words.withWatermark("timestamp", "10 minutes")
    return first.withWatermark("other", "1 minute").groupBy(first.timestamp, F.col("other")).count()


def _mixed(words: DataFrame) -> DataFrame:
    marked = words.withWatermark("timestamp", "10 minutes")
    return marked.groupBy(F.window(words.timestamp, "5 minutes").alias("a"), F.window("timestamp", "5 minutes").alias("b")).count()


def _replaced_attribute(words: DataFrame) -> DataFrame:
    # withColumn replaces `timestamp`: the old attribute is gone and Spark says so
    return words.withColumn("timestamp", F.col("other")).groupBy(words.timestamp).count()


CASES: dict[str, Callable[[DataFrame], DataFrame]] = {
    "guide": _guide,
    "guide_item": lambda w: w.withWatermark("timestamp", "10 minutes").groupBy(F.window(w["timestamp"], "10 minutes")).count(),
    "by_name": lambda w: w.withWatermark("timestamp", "10 minutes").groupBy(F.window("timestamp", "10 minutes")).count(),
    "raw_key": lambda w: w.withWatermark("timestamp", "10 minutes").groupBy(w.timestamp).count(),
    "raw_key_by_name": lambda w: w.withWatermark("timestamp", "10 minutes").groupBy("timestamp").count(),
    "own_frame": lambda w: (lambda m: m.groupBy(F.window(m.timestamp, "10 minutes")).count())(w.withWatermark("timestamp", "1 minute")),
    "select_between": _select_between,
    "redefined_watermark": _redefined,
    "moved_marker": _moved_marker,
    "mixed_spellings": _mixed,
    "replaced_attribute": _replaced_attribute,
}


def _outcome(build: Callable[[DataFrame], DataFrame], engine: Any, path: str) -> Any:
    try:
        df = build(engine.readStream.format("parquet").schema(SCHEMA).load(path))
    except Exception as exc:  # noqa: BLE001 - compared by condition and text
        cond = getattr(exc, "getCondition", lambda: None)()
        return ("error", cond, error_text(exc).split("\n")[0].split(" in operator ")[0])
    return [(f.name, f.dataType.simpleString(), dict(f.metadata or {})) for f in df.schema.fields]


@pytest.mark.parametrize("name", list(CASES))
def test_column_binding_matches_spark(spark, tmp_path, name):
    from statestream import StreamingSession

    path = str(tmp_path / "in")
    (tmp_path / "in").mkdir()
    expected = _outcome(CASES[name], spark, path)
    actual = _outcome(CASES[name], StreamingSession(spark), path)
    assert actual == expected, f"{name}:\n  spark: {expected}\n  ours:  {actual}"
