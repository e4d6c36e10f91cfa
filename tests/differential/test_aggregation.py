"""Differential tests of streaming aggregation: Spark's engine versus statestream, batch by batch.

Scenarios S1-S18 follow the reference's §10 (input files of ``value`` long seconds,
``eventTime = timestamp_seconds(value)``). Where §10 states the outcome, the oracle run is first
checked against it (``reference=``), so a harness slip cannot hide behind two engines agreeing;
then statestream must produce the same batches, watermarks, eventTime stats and state metrics.
These tests fail until ``statestream.StreamingSession`` exists; that is expected.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.differential.harness import assert_equivalent

SCHEMA = "value LONG"


# ------------------------------------------------------------------------------------------
# Query pieces in the reference's notation
# ------------------------------------------------------------------------------------------


def vals(*values: int | None) -> list[tuple[int | None]]:
    """One input file of ``value`` rows."""
    return [(v,) for v in values]


def ev(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value"))


def w(df: DataFrame, delay: str = "10 seconds") -> DataFrame:
    """``W10`` by default: event time plus a watermark."""
    return ev(df).withWatermark("eventTime", delay)


def secs(col: str) -> Any:
    return F.col(col).cast("long")


def cnt_t5(df: DataFrame) -> DataFrame:
    """``cnt(T5)``: 5 s tumbling windows, (window start in seconds, count)."""
    return df.groupBy(F.window("eventTime", "5 seconds")).count().select(secs("window.start").alias("start"), "count")


def w10_cnt_t5(df: DataFrame) -> DataFrame:
    return cnt_t5(w(df))


def sc(start: int, count: int) -> dict[str, int]:
    return {"start": start, "count": count}


def sec(start: int, end: int, count: int) -> dict[str, int]:
    return {"start": start, "end": end, "count": count}


E: list[dict[str, Any]] = []  # an empty batch, for readability of reference lists


# ------------------------------------------------------------------------------------------
# §10 scenarios
# ------------------------------------------------------------------------------------------


def test_s1_append_tumbling(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(10, 11, 12, 13, 14, 15), vals(25), vals(10)], SCHEMA, "append", tmp_path,
        reference=[E, E, E, [sc(10, 5)], E],
    )


def test_s2_update_tumbling(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(10, 11, 12, 13, 14, 15), vals(25), vals(10), vals(26)], SCHEMA, "update",
        tmp_path,
        reference=[[sc(10, 5), sc(15, 1)], E, [sc(25, 1)], E, E, [sc(25, 2)], E],
    )


def test_s2_suite_variant_late_and_on_time_in_one_batch(spark, ours, tmp_path):
    """After wm 15, one file ``[10, 25]``: 10 is dropped (metric 1), 25 updates its window."""
    exp, _ = assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(10, 11, 12, 13, 14, 15), vals(25), vals(10, 25)], SCHEMA, "update", tmp_path,
        reference=[[sc(10, 5), sc(15, 1)], E, [sc(25, 1)], E, [sc(25, 2)]],
    )
    assert exp.batches[4].state[0]["numRowsDroppedByWatermark"] == 1


def test_s3_complete_ignores_watermark(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(10, 11, 12, 13, 14, 15), vals(25), vals(10)], SCHEMA, "complete", tmp_path,
        reference=[
            [sc(10, 5), sc(15, 1)],
            [sc(10, 5), sc(15, 1), sc(25, 1)],
            [sc(10, 6), sc(15, 1), sc(25, 1)],
        ],
    )


def _raw_ts_count(df: DataFrame) -> DataFrame:
    return w(df).groupBy("eventTime").count().select(secs("eventTime").alias("t"), "count")


def test_s4_group_by_raw_timestamp_append(spark, ours, tmp_path):
    t = lambda s, c: {"t": s, "count": c}  # noqa: E731
    assert_equivalent(
        spark, ours, _raw_ts_count, [vals(10, 10, 11), vals(21), vals(11, 22), vals(40)], SCHEMA, "append", tmp_path,
        reference=[E, E, E, [t(10, 2), t(11, 1)], E, E, E, [t(21, 1), t(22, 1)]],
    )


def test_s5_dropped_metric_counts_keys(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(30), vals(1, 2, 3, 6, 7)], SCHEMA, "append", tmp_path,
        reference=[E, E, E],
    )
    assert exp.batches[2].num_input_rows == 5
    assert exp.batches[2].state[0]["numRowsDroppedByWatermark"] == 2


def test_s6_late_filter_uses_previous_watermark(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(15), vals(4, 7)], SCHEMA, "append", tmp_path,
        style="all_at_once",
        reference=[E, [sc(0, 1)]],
    )
    s = exp.batches[1].state[0]
    assert (s["numRowsUpdated"], s["numRowsRemoved"], s["numRowsDroppedByWatermark"]) == (2, 1, 0)


def test_s7_window_end_decides_lateness(spark, ours, tmp_path):
    assert_equivalent(
        spark, ours, lambda df: cnt_t5(w(df, "0 seconds")), [vals(4), vals(5), vals(5, 9), vals(10)], SCHEMA,
        "append", tmp_path,
        reference=[E, E, E, [sc(0, 1)], E, E, E, [sc(5, 3)]],
    )


def _sliding_10_5(df: DataFrame) -> DataFrame:
    return (
        w(df)
        .groupBy(F.window("eventTime", "10 seconds", "5 seconds"))
        .count()
        .select(secs("window.start").alias("start"), secs("window.end").alias("end"), "count")
    )


def test_s8_sliding_append(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, _sliding_10_5, [vals(7, 12), vals(31)], SCHEMA, "append", tmp_path,
        reference=[E, E, E, [sec(0, 10, 1), sec(5, 15, 2), sec(10, 20, 1)]],
    )
    s = exp.batches[3].state[0]
    assert (s["numRowsRemoved"], s["numRowsTotal"]) == (3, 2)


def test_s9_sliding_partially_late_update(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, _sliding_10_5, [vals(25), vals(12), vals(40)], SCHEMA, "update", tmp_path,
        reference=[[sec(20, 30, 1), sec(25, 35, 1)], E, [sec(10, 20, 1)], [sec(35, 45, 1), sec(40, 50, 1)], E],
    )
    assert exp.batches[2].state[0]["numRowsDroppedByWatermark"] == 1
    assert exp.batches[4].state[0]["numRowsRemoved"] == 2


def test_s10_window_start_offset_negative_times(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return (
            ev(df)
            .groupBy(F.window("eventTime", "10 seconds", "10 seconds", "3 seconds"))
            .count()
            .select(secs("window.start").alias("start"), secs("window.end").alias("end"), "count")
        )

    assert_equivalent(
        spark, ours, build, [vals(0, 2, 3, 12, 13, -1, -8)], SCHEMA, "complete", tmp_path,
        reference=[[sec(-17, -7, 1), sec(-7, 3, 3), sec(3, 13, 2), sec(13, 23, 1)]],
    )


def test_event_times_before_1970_with_a_fraction_of_a_millisecond_report_as_sparks(spark, ours, tmp_path):
    """The event-time statistics in ms of times before 1970 that fall between two milliseconds
    (the first batch holds only such times: its min, max and avg are all of them; all are late
    under the first watermark, 0), then a batch that moves the watermark. Checked on both
    engines' progress (``eventTime`` and watermark)."""

    def build(df: DataFrame) -> DataFrame:
        return (
            df.withColumn("eventTime", F.timestamp_micros("value"))
            .withWatermark("eventTime", "1 second")
            .groupBy(F.window("eventTime", "5 seconds"))
            .count()
            .select(secs("window.start").alias("start"), "count")
        )

    exp, _ = assert_equivalent(
        spark, ours, build, [vals(-1_000_500, -3_250_100, -1), vals(7_000_700, -2_999)], SCHEMA, "update", tmp_path,
    )
    # what the comparison covered: Spark's statistics of those times, rounded down to the ms
    assert exp.batches[0].event_time is not None
    assert (exp.batches[0].event_time["min"], exp.batches[0].event_time["max"]) == ("1969-12-31T23:59:56.749Z", "1969-12-31T23:59:59.999Z")


def test_s11_non_divisible_sliding_window(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return (
            ev(df)
            .groupBy(F.window("eventTime", "7 seconds", "3 seconds"))
            .count()
            .select(secs("window.start").alias("start"), secs("window.end").alias("end"), "count")
        )

    assert_equivalent(
        spark, ours, build, [vals(10)], SCHEMA, "complete", tmp_path,
        reference=[[sec(6, 13, 1), sec(9, 16, 1)]],
    )


def test_s14_global_aggregation_with_watermark_update(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, lambda df: w(df).groupBy().count(), [vals(10, 11), vals(30), vals(1)], SCHEMA, "update",
        tmp_path,
        reference=[[{"count": 2}], [{"count": 2}], [{"count": 3}], [{"count": 3}], [{"count": 4}]],
    )
    assert [b.state[0]["numRowsUpdated"] for b in exp.batches] == [1, 1, 1, 1, 1]


def test_s17_watermark_never_decreases(spark, ours, tmp_path):
    exp, _ = assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(50), vals(20), vals(55)], SCHEMA, "update", tmp_path,
        reference=[[sc(50, 1)], E, E, [sc(55, 1)], E],
    )
    assert exp.batches[2].watermark == "1970-01-01T00:00:40.000Z"
    assert exp.batches[4].watermark == "1970-01-01T00:00:45.000Z"


def test_s18_null_event_time(spark, ours, tmp_path):
    t = lambda s, c: {"t": s, "count": c}  # noqa: E731
    exp, _ = assert_equivalent(
        spark, ours, _raw_ts_count, [vals(None, 20), vals(30)], SCHEMA, "update", tmp_path,
        reference=[[t(None, 1), t(20, 1)], E, [t(30, 1)], E],
    )
    # The null key survives eviction at wm 20 (the key 20 itself is evicted).
    assert exp.batches[3].state[0]["numRowsTotal"] == 2


# ------------------------------------------------------------------------------------------
# Beyond §10: the seed query, several keys, nulls, many aggregates, sliding with startTime
# ------------------------------------------------------------------------------------------

MODES = ["append", "update", "complete"]
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def seed_query(df: DataFrame) -> DataFrame:
    """The shape of the project's seed query: 20 s watermark, 5 s windows aliased ``group``."""
    return (
        df.withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds").alias("group"))
        .agg(F.count("value").alias("value_count"))
    )


SEED_INPUT = [
    [(at(0), 1), (at(1), 2), (at(6), None), (at(7), 4)],
    [(at(12), 5), (at(3), 6), (None, 7)],
    [(at(40), 8), (at(2), 9)],  # 2 s is late once the watermark is past the window's end
    [(at(41), 10), (at(30), 11), (at(19), 12)],
    [(at(80), 13)],
]


@pytest.mark.parametrize("mode", MODES)
def test_seed_query(spark, ours, tmp_path, mode):
    assert_equivalent(spark, ours, seed_query, SEED_INPUT, "timestamp TIMESTAMP, value LONG", mode, tmp_path)


def multi_key_many_aggs(df: DataFrame) -> DataFrame:
    """A string key next to the window, nulls in the key and in the values, six aggregates."""
    return (
        df.withWatermark("ts", "10 seconds")
        .groupBy("k", F.window("ts", "10 seconds"))
        .agg(
            F.count("x").alias("n_x"),
            F.count("*").alias("n"),
            F.sum("x").alias("sum_x"),
            F.avg("x").alias("avg_x"),
            F.min("x").alias("min_x"),
            F.max("x").alias("max_x"),
            F.sum("d").alias("sum_d"),
            F.avg("d").alias("avg_d"),
            F.min("s").alias("min_s"),
        )
    )


MULTI_KEY_INPUT = [
    [
        (at(1), "a", 1, 0.5, "p"),
        (at(2), "a", None, None, None),
        (at(3), None, 7, 1.25, "q"),
        (at(4), "b", -3, -2.0, "r"),
        (at(12), "a", 10, 0.1, "s"),
    ],
    [(at(5), None, None, None, None), (at(8), "b", 4, 0.2, "a"), (at(25), "c", 2, 3.0, "z")],
    [(at(3), "a", 100, 100.0, "late")],  # late for window [0, 10) once wm >= 10
    [(at(26), "c", None, 1.0 / 3, None), (at(27), None, 5, 2.0 / 3, "m"), (at(60), "a", 1, 1.0, "n")],
]
MULTI_KEY_SCHEMA = "ts TIMESTAMP, k STRING, x LONG, d DOUBLE, s STRING"


@pytest.mark.parametrize("mode", MODES)
def test_string_key_and_window_nulls_many_aggregates(spark, ours, tmp_path, mode):
    assert_equivalent(spark, ours, multi_key_many_aggs, MULTI_KEY_INPUT, MULTI_KEY_SCHEMA, mode, tmp_path)


def sliding_with_start(df: DataFrame) -> DataFrame:
    return (
        w(df, "5 seconds")
        .groupBy(F.window("eventTime", "10 seconds", "4 seconds", "2 seconds"))
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        .select(secs("window.start").alias("start"), secs("window.end").alias("end"), "n", "total")
    )


@pytest.mark.parametrize("mode", MODES)
def test_sliding_windows_with_start_time(spark, ours, tmp_path, mode):
    assert_equivalent(
        spark, ours, sliding_with_start, [vals(1, 3, 9, 14), vals(2, 21), vals(5, 30, 31), vals(50)], SCHEMA, mode,
        tmp_path,
    )


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_group_by_count_without_watermark(spark, ours, tmp_path, mode):
    """``groupBy(...).count()`` on a plain key: no watermark, no eventTime in progress, no ND batches."""
    assert_equivalent(
        spark, ours, lambda df: df.groupBy((F.col("value") % 3).alias("k")).count(),
        [vals(1, 2, 3, 4), vals(None, 5), vals(6, 6, None)], SCHEMA, mode, tmp_path,
    )


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_global_count_without_watermark(spark, ours, tmp_path, mode):
    assert_equivalent(
        spark, ours, lambda df: df.groupBy().agg(F.count("*").alias("n"), F.sum("value").alias("s")),
        [vals(1, 2), vals(None), vals(3)], SCHEMA, mode, tmp_path,
    )


def test_complete_mode_order_by(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return (
            df.groupBy((F.col("value") % 4).alias("k"))
            .agg(F.count("*").alias("n"), F.max("value").alias("mx"))
            .orderBy(F.desc("n"), F.asc_nulls_first("k"))
        )

    assert_equivalent(
        spark, ours, build, [vals(1, 2, 5), vals(9, 13, None, 6), vals(4, 8, 12, 16, 0)], SCHEMA, "complete",
        tmp_path, ordered=True,
    )


def test_complete_mode_windowed_order_by(spark, ours, tmp_path):
    def build(df: DataFrame) -> DataFrame:
        return cnt_t5(w(df)).orderBy("start")

    assert_equivalent(
        spark, ours, build, [vals(10, 11, 3), vals(25, 1), vals(10)], SCHEMA, "complete", tmp_path, ordered=True
    )


def test_json_input_windowed_count(spark, ours, tmp_path):
    """The same S2-shaped query read from JSON files instead of Parquet."""
    assert_equivalent(
        spark, ours, w10_cnt_t5, [vals(10, 11, 15), vals(25), vals(10, 26)], SCHEMA, "update", tmp_path,
        file_format="json",
    )


# ------------------------------------------------------------------------------------------
# Keys Spark's optimizer drops (RemoveLiteralFromGroupExpressions, RemoveRepetitionFromGroupExpressions)
# ------------------------------------------------------------------------------------------


def _spark_keys_per_partition(spark, checkpoint: str) -> dict[int, int]:
    """State keys per partition of operator 0 in Spark's checkpoint (its state data source)."""
    rows = spark.read.format("statestore").load(checkpoint).groupBy("partition_id").count().collect()
    return {int(r["partition_id"]): int(r["count"]) for r in rows if r["count"]}


def _our_keys_per_partition(checkpoint: str) -> dict[int, int]:
    """State keys per partition of operator 0 in statestream's checkpoint (latest version)."""
    import pyarrow as pa

    from statestream.state.provider import get_provider
    from statestream.state.store import StateStoreConf, StateStoreId

    counts = {}
    root = Path(checkpoint) / "state"
    for pdir in sorted((root / "0").iterdir()):
        if not pdir.name.isdigit():
            continue
        files = sorted(pdir.glob("*.delta"), key=lambda f: int(f.name.split(".")[0]))
        schema = pa.ipc.open_stream(files[-1].read_bytes()).schema
        nk = int(schema.metadata[b"statestream.state.numKeyColumns"])
        fields = [f for f in schema if f.name != "__op"]
        provider = get_provider(
            StateStoreId(str(root), 0, int(pdir.name)), pa.schema(fields[:nk]), pa.schema(fields[nk:]), StateStoreConf(),
            "keys-per-partition",
        )
        n = provider.get_read_store(int(files[-1].name.split(".")[0])).num_keys()
        if n:
            counts[int(pdir.name)] = n
    return counts


#: name: (output mode, query): grouping keys that Spark's exchange does not hash
DROPPED_KEY_CASES = {
    "literal_and_column": ("update", lambda df: df.groupBy(F.lit(1).alias("one"), "value").count()),
    "literal_only": ("update", lambda df: df.groupBy(F.lit("x").alias("x")).agg(F.sum("value").alias("s"))),
    "literal_and_window": (
        "append",
        lambda df: w(df).groupBy(F.lit(7).alias("seven"), F.window("eventTime", "5 seconds")).count()
        .select("seven", secs("window.start").alias("start"), "count"),
    ),
    "repeated_key": (
        "update",
        lambda df: df.groupBy((F.col("value") % 5).alias("a"), (F.col("value") % 5).alias("b")).count(),
    ),
}


@pytest.mark.parametrize("name", list(DROPPED_KEY_CASES))
def test_keys_dropped_by_spark_optimizer(spark, ours, tmp_path, name):
    """Spark's optimizer drops literal and repeated grouping keys before planning, so its exchange
    (and the state placement) hashes the remaining keys only, or the int literal 0 when every key
    is a literal. Same batches, and each state partition holds as many keys as Spark's."""
    mode, build = DROPPED_KEY_CASES[name]
    expected, actual = assert_equivalent(
        spark, ours, build, [vals(1, 2, 3, 4, 11), vals(5, 6, 7, 22), vals(8, 9, 40)], SCHEMA, mode, tmp_path
    )
    assert _our_keys_per_partition(actual.checkpoint) == _spark_keys_per_partition(spark, expected.checkpoint)
