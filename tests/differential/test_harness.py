"""Self-test of the differential harness with Spark's engine on both sides.

Must pass before statestream exists: it proves that the harness reproduces the reference's S1
micro-batches (including the no-data batches between files), reads watermarks and state metrics
from progress, finds identical runs identical and reports a difference when there is one.
"""

from __future__ import annotations

import copy

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import (
    assert_batch_rows,
    assert_same_batches,
    run_both,
    run_stream,
)

SCHEMA = "value LONG"


def windowed_count(df):
    """S1's query: 10 s watermark, 5 s tumbling windows, (start seconds, count)."""
    return (
        df.withColumn("eventTime", F.timestamp_seconds("value"))
        .withWatermark("eventTime", "10 seconds")
        .groupBy(F.window("eventTime", "5 seconds"))
        .count()
        .select(F.col("window.start").cast("long").alias("start"), "count")
    )


S1_INPUT = [[(v,) for v in range(10, 16)], [(25,)], [(10,)]]


def test_s1_oracle_against_itself(spark, tmp_path):
    a, b = run_both(spark, windowed_count, S1_INPUT, SCHEMA, "append", tmp_path, ours=spark)

    # Shape of S1 (reference §10): b0, b1 ND, b2, b3 ND, b4 and no ND batch after b4.
    assert_batch_rows(a, [[], [], [], [{"start": 10, "count": 5}], []])
    assert [x.num_input_rows for x in a.batches] == [6, 0, 1, 0, 1]
    assert [x.watermark for x in a.batches] == [
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:00:05.000Z",
        "1970-01-01T00:00:05.000Z",
        "1970-01-01T00:00:15.000Z",
        "1970-01-01T00:00:15.000Z",
    ]
    b3, b4 = a.batches[3].state[0], a.batches[4].state[0]
    assert (b3["operatorName"], b3["numRowsTotal"], b3["numRowsRemoved"]) == ("stateStoreSave", 2, 1)
    assert (b4["numRowsDroppedByWatermark"], b4["numRowsTotal"]) == (1, 2)
    assert a.batches[0].columns == [("start", "bigint"), ("count", "bigint")]

    assert_same_batches(a, b)

    # A changed row, watermark or metric must be reported with the batch id.
    c = copy.deepcopy(b)
    c.batches[3].rows = [{"start": 10, "count": 4}]
    with pytest.raises(AssertionError, match="batch 3: rows"):
        assert_same_batches(a, c)
    d = copy.deepcopy(b)
    d.batches[1].watermark = None
    with pytest.raises(AssertionError, match="batch 1: watermark"):
        assert_same_batches(a, d)
    e = copy.deepcopy(b)
    e.batches[4].state[0]["numRowsDroppedByWatermark"] = 0
    with pytest.raises(AssertionError, match="batch 4: state operators"):
        assert_same_batches(a, e)
    assert_same_batches(a, e, check_state=False)
    f = copy.deepcopy(b)
    del f.batches[-1]
    with pytest.raises(AssertionError, match="batch ids differ"):
        assert_same_batches(a, f)


def test_all_at_once_s6(spark, tmp_path):
    """S6: with both files present, batch 1 follows batch 0 with no ND batch in between."""
    run = run_stream(
        spark, windowed_count, [[(15,)], [(4,), (7,)]], SCHEMA, "append", tmp_path, style="all_at_once"
    )
    assert_batch_rows(run, [[], [{"start": 0, "count": 1}]])  # G stays 5: no ND batch after b1
    s = run.batches[1].state[0]
    assert (s["numRowsUpdated"], s["numRowsRemoved"], s["numRowsDroppedByWatermark"]) == (2, 1, 0)


def test_float_struct_and_timestamp_rows_compare(spark, tmp_path):
    """Window structs, timestamps and averages go through the comparison (json input too)."""

    def build(df):
        return (
            df.withWatermark("ts", "0 seconds")
            .groupBy(F.window("ts", "10 seconds"), "k")
            .agg(F.avg("x").alias("avg_x"), F.max("ts").alias("max_ts"))
        )

    import datetime as dt

    t = lambda s: dt.datetime(2024, 1, 1, 0, 0, s)  # noqa: E731
    batches = [[(t(1), "a", 1.0), (t(2), "a", 2.0), (t(3), None, None)], [(t(15), "b", 1.0 / 3)]]
    for fmt in ("parquet", "json"):
        a = run_stream(spark, build, batches, "ts TIMESTAMP, k STRING, x DOUBLE", "update", tmp_path, file_format=fmt)
        b = run_stream(spark, build, batches, "ts TIMESTAMP, k STRING, x DOUBLE", "update", tmp_path, file_format=fmt)
        assert_same_batches(a, b)
        first = {r["k"]: r for r in a.batches[0].rows}
        assert first["a"]["avg_x"] == pytest.approx(1.5)
        assert first["a"]["window"]["start"] == t(0)
        c = copy.deepcopy(b)
        with_rows = next(x for x in c.batches if x.batch_id > 0 and x.rows)
        with_rows.rows[0]["avg_x"] += 1e-12  # within tolerance
        assert_same_batches(a, c)
