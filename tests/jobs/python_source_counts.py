"""Counts events of a data source written in Python with PySpark's Python Data Source API: the
reader admits at most ``perTrigger`` new records a trigger (its own rate limit), and the counts
per event-time window go to the console in update mode. A PySpark program that knows nothing of
statestream: tests/spark/test_run_unchanged.py runs it as it is.

Usage: python_source_counts.py <total records> <records per trigger>
"""

import datetime as dt
import sys

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.functions import count, window


class CappedReader(DataSourceStreamReader):
    def __init__(self, options):
        self.total = int(options["total"])
        self.per_trigger = int(options["perTrigger"])
        self.current = 0

    def initialOffset(self):
        return {"offset": 0}

    def latestOffset(self):
        self.current = min(self.current + self.per_trigger, self.total)
        return {"offset": self.current}

    def partitions(self, start, end):
        middle = (start["offset"] + end["offset"]) // 2
        return [InputPartition((start["offset"], middle)), InputPartition((middle, end["offset"]))]

    def read(self, partition):
        low, high = partition.value
        for i in range(low, high):
            yield (i, ["red", "green", "blue"][i % 3], dt.datetime(2026, 1, 1) + dt.timedelta(seconds=2 * i))


class EventSource(DataSource):
    @classmethod
    def name(cls):
        return "events"

    def schema(self):
        return "id LONG, colour STRING, ts TIMESTAMP"

    def streamReader(self, schema):
        return CappedReader(self.options)


if __name__ == "__main__":
    total, per_trigger = sys.argv[1:3]
    spark = SparkSession.builder.appName("PythonSourceCounts").getOrCreate()
    spark.dataSource.register(EventSource)
    events = spark.readStream.format("events").option("total", total).option("perTrigger", per_trigger).load()
    counts = (
        events.withWatermark("ts", "10 seconds")
        .groupBy(window("ts", "20 seconds"), "colour")
        .agg(count("*").alias("events"))
    )
    query = counts.writeStream.outputMode("update").format("console").option("truncate", "false").start()
    query.processAllAvailable()
    query.stop()
    progress = query.lastProgress
    print(f"last batch {progress['batchId']}: {progress['numInputRows']} rows, end offset {progress['sources'][0]['endOffset']}")
