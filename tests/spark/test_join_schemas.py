"""The schema of a stream-static join on statestream equals Spark's streaming DataFrame's: column
names and order, types, nullability (an outer join's null-supplying side becomes nullable) and
metadata, so the event-time marker of ``withWatermark`` survives the join exactly where Spark's
does. No query runs: these are the DataFrames' schemas as built."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from pyspark.sql import functions as F

from statestream import StreamingSession

SCHEMA = "k LONG, ts TIMESTAMP, v LONG"


def _static(spark: Any) -> Any:
    return spark.range(3).selectExpr("id AS k", "CAST(id AS STRING) AS name", "CAST(id AS TIMESTAMP) AS seen")


CASES: dict[str, Callable[[Any, Any], Any]] = {
    "inner_on_name": lambda s, st: s.join(st, "k"),
    "left_outer_on_condition": lambda s, st: s.join(st, s.k == st.k, "left"),
    "left_semi": lambda s, st: s.join(st, ["k"], "left_semi"),
    "left_anti": lambda s, st: s.join(st, s.k == st.k, "anti"),
    "cross": lambda s, st: s.crossJoin(st),
    "no_condition": lambda s, st: s.join(st),
    "stream_right_inner": lambda s, st: st.join(s, "k"),
    "stream_right_outer": lambda s, st: st.join(s, "k", "right_outer"),
    "stream_right_outer_condition": lambda s, st: st.join(s, st.k == s.k, "right"),
    "full_outer_refused_at_start": lambda s, st: s.join(st, "k", "full"),
    "then_window": lambda s, st: s.join(st, "k").groupBy(F.window("ts", "5 seconds"), "name").count(),
    "right_then_window": lambda s, st: st.join(s, "k", "right").groupBy(F.window("ts", "5 seconds")).count(),
}


@pytest.mark.parametrize("watermarked", [False, True], ids=["plain", "watermarked"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_join_schema_matches_spark(spark, tmp_path, case, watermarked):
    ss = StreamingSession(spark)
    static = _static(spark)
    results = []
    for reader in (spark.readStream, ss.readStream):
        stream = reader.schema(SCHEMA).parquet(str(tmp_path))
        if watermarked:
            stream = stream.withWatermark("ts", "10 seconds")
        results.append(CASES[case](stream, static).schema)
    theirs, ours = results
    assert ours.jsonValue() == theirs.jsonValue()
