"""The Kafka source (``readStream.format("kafka")``), in the shape of Spark's spark-sql-kafka
connector: options validated when the DataFrame is created, offsets planned on the driver
(:mod:`.offset_reader`, :mod:`.offsets`), records read inside Spark tasks
(:mod:`.partition_reader`), the micro-batch stream tying them to the loop (:mod:`.stream`).

What Spark's connector does, and which of it we match, is written down in
``docs/kafka-facts.md``.
"""

from __future__ import annotations
