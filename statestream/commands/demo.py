"""The seed query on an embedded local Spark: rate source, 20-second watermark, 5-second windows,
count, printed to the console as it streams.

Run with ``scripts/demo.sh`` (or ``python -m statestream.commands.demo``); stop with Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from statestream import StreamingSession
from statestream._jvm.java import ensure_java


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows-per-second", type=int, default=10)
    parser.add_argument("--mode", default="append", choices=["append", "update", "complete"])
    parser.add_argument("--checkpoint", default="checkpoints/counts")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (default: run until Ctrl-C)")
    parser.add_argument("--trigger", default="5 seconds",
                        help="the processing-time trigger's interval (default: 5 seconds, one readable table per interval; 0 seconds: as fast as it goes)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("statestream-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")  # no stage bars between the tables
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ss = StreamingSession(spark)
    counts = (
        ss.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()
        .withWatermark("timestamp", "20 seconds")
        .groupBy(F.window("timestamp", "5 seconds").alias("group"))
        .agg(F.count("value").alias("value_count"))
    )
    counts.explain()
    query = (
        counts.writeStream.outputMode(args.mode).format("console")
        .option("truncate", "false")
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=args.trigger)
        .start()
    )
    try:
        query.awaitTermination(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
