"""A transformWithStateInPandas processor that fails on its first key: what a user sees when
their own code raises inside a stateful query. A PySpark program that knows nothing of
statestream: tests/spark/test_quiet_logs.py runs it as it is.

Usage: failing_processor.py <input directory of JSON lines {"ts": ..., "line": ...}> <checkpoint>
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor


class FailsOnFirstKey(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n LONG")

    def handleInputRows(self, key, rows, timerValues):
        raise ValueError(f"no rows wanted for {key[0]!r}")

    def close(self):
        pass


if __name__ == "__main__":
    spark = (
        SparkSession.builder.appName("FailingProcessor")
        .config("spark.sql.streaming.stateStore.providerClass", "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .getOrCreate()
    )
    lines = spark.readStream.schema("ts TIMESTAMP, line STRING").json(sys.argv[1])
    out = lines.groupBy("line").transformWithStateInPandas(FailsOnFirstKey(), "line STRING, n LONG", "update", "None")
    query = out.writeStream.outputMode("update").format("console").option("checkpointLocation", sys.argv[2]).trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - the program reports what it caught
        print(f"the query failed: {type(exc).__name__}")
        sys.exit(3)
