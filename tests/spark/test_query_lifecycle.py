"""Query lifecycle details a Spark user relies on: the temporary checkpoint of a query started
without ``checkpointLocation`` is removed when the query stops cleanly and kept after a failure
(Spark's ``deleteCheckpointOnStop``)."""

from __future__ import annotations

import os

import pytest

from statestream import StreamingSession


def _memory_query(spark, name: str, fail: bool = False):
    from pyspark.sql import functions as F

    ss = StreamingSession(spark)
    stream = ss.memoryStream("v INT")
    stream.add_data([(1,), (2,), (3,)])
    df = stream.toDF()
    if fail:
        df = df.select(F.raise_error(F.lit("boom")).alias("v"))
    return df.writeStream.format("memory").queryName(name).outputMode("append").start()


def test_temporary_checkpoint_removed_on_clean_stop(spark):
    q = _memory_query(spark, "lifecycle_clean")
    q.processAllAvailable()
    location = q._ex.checkpoint_location  # noqa: SLF001
    assert os.path.isdir(os.path.join(location, "commits"))
    q.stop()
    assert not os.path.exists(location)
    assert spark.table("lifecycle_clean").count() == 3


def test_temporary_checkpoint_kept_after_failure(spark):
    q = _memory_query(spark, "lifecycle_failed", fail=True)
    with pytest.raises(Exception, match="boom"):
        q.awaitTermination(120)
    location = q._ex.checkpoint_location  # noqa: SLF001
    assert os.path.isdir(location)
    q.stop()
    assert os.path.isdir(location)
