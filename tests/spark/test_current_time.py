"""``with_batch_timestamp``: current-time functions of a batch plan fixed to the batch timestamp
(Spark's ``CurrentBatchTimestamp`` rewrite in ``MicroBatchExecution.runBatch``)."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Observation
from pyspark.sql import functions as F

from statestream.plan.current_time import with_batch_timestamp

TS_MS = 1_714_567_890_123  # 2024-05-01T12:51:30.123Z
UTC = dt.timezone.utc


def test_current_functions_take_the_batch_timestamp(spark):
    df = spark.range(2).select(
        F.current_timestamp().alias("ct"),
        F.current_date().alias("cd"),
        F.localtimestamp().alias("lt"),
        F.expr("unix_millis(current_timestamp())").alias("ms"),
        F.expr("curdate()").alias("cd2"),
        F.now().alias("nw"),
    )
    rows = with_batch_timestamp(df, TS_MS).collect()
    instant = dt.datetime.fromtimestamp(TS_MS / 1000, tz=UTC)
    assert len(rows) == 2
    for r in rows:
        assert r.ms == TS_MS
        assert r.ct.replace(tzinfo=UTC) == instant  # the session time zone is UTC in tests
        assert r.cd == r.cd2 == instant.date()
        assert r.lt == instant.replace(tzinfo=None)
        assert r.nw.replace(tzinfo=UTC) > instant  # now() is not replaced (as in Spark): the clock


def test_current_date_follows_the_session_time_zone(spark):
    # 23:30 UTC is already the next day in Tokyo
    ms = int(dt.datetime(2024, 5, 1, 23, 30, tzinfo=UTC).timestamp() * 1000)
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        df = spark.range(1).select(F.current_date().alias("cd"), F.localtimestamp().alias("lt"))
        r = with_batch_timestamp(df, ms).collect()[0]
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert r.cd == dt.date(2024, 5, 2)
    assert r.lt == dt.datetime(2024, 5, 2, 8, 30)


def test_plans_without_current_time_are_returned_as_they_are(spark):
    df = spark.range(3).withColumn("y", F.col("id") * 2)
    assert with_batch_timestamp(df, TS_MS) is df


def test_observations_survive_the_rewrite(spark):
    obs = Observation("current_time_rewrite_observation")
    df = spark.range(5).observe(obs, F.count(F.lit(1)).alias("n")).withColumn("t", F.current_timestamp())
    out = with_batch_timestamp(df, TS_MS)
    assert out is not df
    assert out.count() == 5
    assert obs.get == {"n": 5}
