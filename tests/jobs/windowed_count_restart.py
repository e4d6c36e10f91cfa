"""Counts rows in 5-second event-time windows with a watermark, to the console, over a file
source with a checkpoint (availableNow): run twice, the second run restarts from the first's
checkpoint. A PySpark program that knows nothing of statestream: tests/spark/test_quiet_logs.py
runs it as it is.

Usage: windowed_count_restart.py <input directory of JSON lines {"ts": ..., "line": ...}> <checkpoint>
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

if __name__ == "__main__":
    spark = SparkSession.builder.appName("WindowedCountRestart").getOrCreate()
    lines = spark.readStream.schema("ts TIMESTAMP, line STRING").option("maxFilesPerTrigger", 1).json(sys.argv[1])
    counts = lines.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "5 seconds")).count()
    query = (
        counts.writeStream.outputMode("update").format("console")
        .option("checkpointLocation", sys.argv[2]).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    print("done")
