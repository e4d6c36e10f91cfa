"""Counts the words of a Kafka topic, in the style of Spark's structured Kafka word count example
(complete mode, to the console). A PySpark program that knows nothing of statestream:
tests/kafka/test_kafka_job_unchanged.py runs it as it is.

Usage: kafka_word_count.py <bootstrap-servers> <subscribe-type> <topics>
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split

if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("Usage: kafka_word_count.py <bootstrap-servers> <subscribe-type> <topics>", file=sys.stderr)
        sys.exit(-1)
    bootstrap_servers, subscribe_type, topics = sys.argv[1:]

    spark = SparkSession.builder.appName("StructuredKafkaWordCount").getOrCreate()
    lines = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option(subscribe_type, topics)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 4)
        .load()
        .selectExpr("CAST(value AS STRING)")
    )
    word_counts = lines.select(explode(split(lines.value, " ")).alias("word")).groupBy("word").count().orderBy("word")
    query = word_counts.writeStream.outputMode("complete").format("console").trigger(availableNow=True).start()
    query.awaitTermination()
    print(f"batches: {query.lastProgress['batchId'] + 1}")
