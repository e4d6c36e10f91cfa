"""Counts words in a sliding event-time window, in the style of Spark's windowed network word
count example (complete mode, ordered by window, to the console). A PySpark program that knows
nothing of statestream: tests/spark/test_run_unchanged.py runs it as it is.

Usage: windowed_word_count.py <input directory of JSON lines {"ts": ..., "line": ...}>
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split, window

if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("Usage: windowed_word_count.py <input directory>", file=sys.stderr)
        sys.exit(-1)

    spark = SparkSession.builder.appName("WindowedWordCount").getOrCreate()

    lines = spark.readStream.schema("ts TIMESTAMP, line STRING").option("maxFilesPerTrigger", 1).json(sys.argv[1])
    words = lines.select(explode(split(lines.line, " ")).alias("word"), lines.ts.alias("timestamp"))
    windowed_counts = (
        words.groupBy(window(words.timestamp, "10 seconds", "5 seconds"), words.word)
        .count()
        .orderBy("window", "word")
    )

    query = (
        windowed_counts.writeStream.outputMode("complete")
        .format("console")
        .option("truncate", "false")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"active queries after the end: {len(spark.streams.active)}")
