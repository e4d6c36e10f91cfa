"""The state steps' Python workers start from statestream's preloading daemon in local mode
(``runtime.python_daemon``): a query sets Spark's ``spark.python.daemon.module`` on its context
before its first Python task, and a worker that runs afterwards is a fork of that daemon with
the state modules already imported."""

from __future__ import annotations

from pyspark.sql import functions as F


def test_a_stateful_query_runs_its_workers_from_the_preloading_daemon(spark, tmp_path):
    from statestream import StreamingSession
    from statestream.runtime.python_daemon import MODULE

    ss = StreamingSession(spark)
    source = ss.memoryStream("v long")
    counts = source.toDF().groupBy((F.col("v") % 3).alias("k")).count()
    query = counts.writeStream.format("memory").queryName("preloading_daemon").outputMode("complete").option(
        "checkpointLocation", str(tmp_path / "ck")).start()
    try:
        source.add_data([(1,), (2,), (3,), (4,), (5,)])
        query.processAllAvailable()
        assert sorted(tuple(r) for r in spark.table("preloading_daemon").collect()) == [(0, 1), (1, 2), (2, 2)]
    finally:
        query.stop()
    assert spark.sparkContext._conf.get("spark.python.daemon.module") == MODULE

    def parent(batches):
        import os
        import sys

        import pyarrow as pa

        import pyspark

        preloaded = "statestream.state.provider" in sys.modules
        origin = pyspark.__file__
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode()
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"command": [command], "preloaded": [preloaded], "origin": [origin]})

    rows = spark.range(1, numPartitions=1).mapInArrow(parent, "command string, preloaded boolean, origin string").collect()
    assert MODULE in rows[0]["command"] and rows[0]["preloaded"], rows
    # the installed PySpark (cached bytecode) rather than Spark's zip of the same version
    import pyspark

    assert ".zip" not in rows[0]["origin"] and rows[0]["origin"] == pyspark.__file__, rows
