"""Counts words arriving on a socket in sliding windows of their arrival time, in the style of
Spark's windowed network word count example (``includeTimestamp``, complete mode ordered by
window, to the console). A PySpark program that knows nothing of statestream:
tests/spark/test_run_unchanged.py runs it as it is.

Usage: network_word_count_windowed.py <host> <port> <window seconds> <slide seconds> [run seconds]
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split, window

if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        print("Usage: network_word_count_windowed.py <host> <port> <window seconds> <slide seconds> [run seconds]", file=sys.stderr)
        sys.exit(-1)
    host, port = sys.argv[1], int(sys.argv[2])
    window_duration, slide_duration = f"{sys.argv[3]} seconds", f"{sys.argv[4]} seconds"

    spark = SparkSession.builder.appName("StructuredNetworkWordCountWindowed").getOrCreate()
    lines = spark.readStream.format("socket").option("host", host).option("port", port).option("includeTimestamp", "true").load()
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    windowed_counts = words.groupBy(window(words.timestamp, window_duration, slide_duration), words.word).count().orderBy("window")

    query = windowed_counts.writeStream.outputMode("complete").format("console").option("truncate", "false").start()
    if len(sys.argv) == 6:
        query.awaitTermination(int(sys.argv[5]))
        query.stop()
    else:
        query.awaitTermination()
