"""Malformed records in file sources, as Spark's engine handles them (issue 15): JSON and CSV
lines that do not parse, values of the wrong type or out of range, missing and extra fields,
under each parser mode: PERMISSIVE (with ``columnNameOfCorruptRecord``), DROPMALFORMED and
FAILFAST. Each batch's rows and input counts equal Spark's; a FAILFAST query fails on both
engines with the same error class."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.differential.harness import assert_same_batches, run_stream

JSON_BATCHES = [
    ['{"k": "a", "v": 1}', '{"k": "b", "v": "x"}', "{broken json", '{"k": null, "v": 3}'],
    ['{"k": "c", "v": 99999999999999999999}', '{"k": "d"}', '{"k": "e", "v": 5, "extra": true}', "[1, 2]"],
    ['{"k": "f", "v": 6}'],
]
CSV_BATCHES = [["a,1", "b,x", "c", "d,4,extra"], ["e,99999999999999999999", ",7", "f,6"]]


def _feeder(directory: Path, suffix: str, batches: list[list[str]]):
    """Writes batch ``i`` as one raw text file, atomically, its mtime ``i`` seconds later."""
    base = time.time() - 3600

    def feed(i: int, _rows: Any) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory.parent / f".{directory.name}-{i}.tmp"
        tmp.write_text("\n".join(batches[i]) + "\n")
        os.utime(tmp, (base + i, base + i))
        os.replace(tmp, directory / f"part-{i:05d}.{suffix}")

    return feed


def _run(engine: Any, tag: str, fmt: str, schema: str, options: dict[str, str], batches: list[list[str]], tmp_path: Path, build=lambda df: df):
    directory = tmp_path / f"in-{tag}"
    directory.mkdir(parents=True)

    def source(e: Any):
        reader = e.readStream.format(fmt).schema(schema).option("maxFilesPerTrigger", 1)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(str(directory))

    return run_stream(
        engine, build, [[]] * len(batches), schema, "append", tmp_path / tag,
        source=source, feed=_feeder(directory, fmt, batches),
    )


CASES = [
    ("json", "k STRING, v INT, _corrupt STRING", {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}, JSON_BATCHES),
    ("json", "k STRING, v INT", {"mode": "DROPMALFORMED"}, JSON_BATCHES),
    ("json", "k STRING, v INT", {}, JSON_BATCHES),  # PERMISSIVE without a corrupt-record column
    ("csv", "k STRING, v INT, _corrupt STRING", {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}, CSV_BATCHES),
    ("csv", "k STRING, v INT", {"mode": "DROPMALFORMED"}, CSV_BATCHES),
]


@pytest.mark.parametrize(
    ("fmt", "schema", "options", "batches"), CASES,
    ids=["json-permissive-corrupt-column", "json-dropmalformed", "json-permissive", "csv-permissive-corrupt-column", "csv-dropmalformed"],
)
def test_malformed_records_per_mode_equal_spark(spark, ours, tmp_path, fmt, schema, options, batches):
    expected = _run(spark, "spark", fmt, schema, options, batches, tmp_path)
    actual = _run(ours(), "ours", fmt, schema, options, batches, tmp_path)
    assert any(b.rows for b in expected.batches), "Spark kept no rows: the test would prove nothing"
    assert_same_batches(expected, actual)


def test_malformed_records_under_a_stateful_aggregation_equal_spark(spark, ours, tmp_path):
    """The corrupt-record column through a streaming aggregation: counts of good and bad rows
    per batch, as Spark's engine keeps them in state."""
    from pyspark.sql import functions as F

    schema = "k STRING, v INT, _corrupt STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}

    def build(df):
        bad = F.col("_corrupt").isNotNull()
        return df.groupBy(F.when(bad, "bad").otherwise("good").alias("kind")).agg(F.count("*").alias("n"), F.sum("v").alias("s"))

    runs = []
    for engine, tag in ((spark, "spark"), (ours(), "ours")):
        directory = tmp_path / f"in-{tag}"
        directory.mkdir(parents=True)

        def source(e: Any, directory: Path = directory):
            reader = e.readStream.format("json").schema(schema).option("maxFilesPerTrigger", 1)
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load(str(directory))

        runs.append(run_stream(
            engine, build, [[]] * len(JSON_BATCHES), schema, "complete", tmp_path / tag,
            source=source, feed=_feeder(directory, "json", JSON_BATCHES),
        ))
    assert_same_batches(runs[0], runs[1])


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_failfast_fails_the_query_as_spark(spark, ours, tmp_path, fmt):
    """FAILFAST: the batch with a malformed record fails the query on both engines, with
    Spark's error class for it, naming the file."""
    from pyspark.errors import StreamingQueryException

    batches = JSON_BATCHES if fmt == "json" else CSV_BATCHES
    texts = []
    for engine, tag in ((spark, "spark"), (ours(), "ours")):
        directory = tmp_path / f"in-{tag}"
        _feeder(directory, fmt, batches)(0, None)
        query = (
            engine.readStream.format(fmt).schema("k STRING, v INT").option("mode", "FAILFAST").load(str(directory))
            .writeStream.format("noop").option("checkpointLocation", str(tmp_path / f"ck-{tag}")).start()
        )
        with pytest.raises(StreamingQueryException) as err:
            query.awaitTermination(120)
        texts.append(str(err.value))
    for text in texts:  # Spark's error wraps MALFORMED_RECORD_IN_PARSING (its cause) in the file's
        assert "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file" in text, text[:2000]
        assert f"part-00000.{fmt}" in text


def test_null_and_far_future_event_times_equal_spark(spark, ours, tmp_path):
    """Null event times and one far in the future (a clock bug upstream): the far-future row
    moves the watermark years ahead, and every later row is dropped as late. Nothing hides it:
    progress shows the far-future max event time, the watermark and the dropped-row count, on
    both engines alike, batch by batch."""
    import datetime as dt

    from pyspark.sql import functions as F

    utc = dt.timezone.utc
    t0 = dt.datetime(2026, 1, 1, tzinfo=utc)
    batches = [
        [("a", t0), ("b", None), ("a", t0 + dt.timedelta(seconds=3))],
        [("a", t0 + dt.timedelta(seconds=4)), ("c", dt.datetime(2099, 1, 1, tzinfo=utc))],
        [("a", t0 + dt.timedelta(seconds=5)), ("b", None), ("d", t0 + dt.timedelta(seconds=6))],
    ]

    def build(df):
        return (
            df.withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "5 seconds"), "k")
            .agg(F.count("*").alias("n"))
        )

    expected = run_stream(spark, build, batches, "k STRING, ts TIMESTAMP", "append", tmp_path / "spark")
    actual = run_stream(ours(), build, batches, "k STRING, ts TIMESTAMP", "append", tmp_path / "ours")
    assert_same_batches(expected, actual)
    last = [b for b in actual.batches if b.num_input_rows][-1]
    assert last.progress["eventTime"]["watermark"].startswith("2098-12-31T23:59:50")
    assert last.progress["stateOperators"][0]["numRowsDroppedByWatermark"] == 2  # a null time is not late
