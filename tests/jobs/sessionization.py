"""Sessionizes events with session_window, in the style of Spark's structured sessionization
example (a watermark, append mode, selectExpr casts, to the console). A PySpark program that
knows nothing of statestream: tests/spark/test_run_unchanged.py runs it as it is.

Usage: sessionization.py <input directory of JSON lines {"ts": ..., "line": ...}> [exit status]
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, session_window, split


def main(path: str) -> None:
    spark = SparkSession.builder.appName("StructuredSessionization").getOrCreate()
    lines = spark.readStream.schema("ts TIMESTAMP, line STRING").option("maxFilesPerTrigger", 1).json(path)
    events = lines.select(explode(split(lines.line, " ")).alias("sessionId"), lines.ts.alias("eventTime"))
    sessions = (
        events.withWatermark("eventTime", "10 seconds")
        .groupBy(session_window("eventTime", "10 seconds"), "sessionId")
        .count()
        .selectExpr(
            "sessionId",
            "CAST(session_window.start AS LONG) AS startSeconds",
            "CAST(session_window.end AS LONG) - CAST(session_window.start AS LONG) AS durationSeconds",
            "count AS numEvents",
        )
    )
    query = sessions.writeStream.outputMode("append").format("console").trigger(availableNow=True).start()
    query.awaitTermination()
    progress = query.lastProgress
    print(f"last batch {progress['batchId']}, watermark {progress['eventTime'].get('watermark')}")


if __name__ == "__main__":
    main(sys.argv[1])
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
