"""Progress records: field order, omission rules, rounding and the exact JSON text of Spark 4.1."""

from __future__ import annotations

import json
import math

import pytest

from statestream.runtime.progress import (
    SinkProgress,
    SourceProgress,
    StateOperatorProgress,
    StreamingQueryProgress,
    compute_rates,
    event_time_map,
    format_timestamp_ms,
    offset_from_json_text,
    pyspark_json,
    render_json,
    round_rate,
)
from statestream.runtime.watermark import EventTimeStats

# prettyJson of a Spark 4.1.4 progress event (update-mode windowed count over a file source,
# 5 shuffle partitions, noop sink), taken from the JVM object.
SPARK_PRETTY = """{
  "id" : "145d0c87-6c84-416e-b9ed-aefb2de32a1c",
  "runId" : "369d40f3-780a-4326-a8cf-4af03916f107",
  "name" : null,
  "timestamp" : "2026-11-21T20:33:37.882Z",
  "batchId" : 0,
  "batchDuration" : 10006,
  "numInputRows" : 3,
  "inputRowsPerSecond" : 0.0,
  "processedRowsPerSecond" : 0.3,
  "durationMs" : {
    "addBatch" : 6705,
    "commitOffsets" : 513,
    "getBatch" : 331,
    "latestOffset" : 211,
    "queryPlanning" : 2041,
    "triggerExecution" : 10002,
    "walCommit" : 148
  },
  "eventTime" : {
    "avg" : "1970-01-01T00:00:11.000Z",
    "max" : "1970-01-01T00:00:12.000Z",
    "min" : "1970-01-01T00:00:10.000Z",
    "watermark" : "1970-01-01T00:00:00.000Z"
  },
  "stateOperators" : [ {
    "operatorName" : "stateStoreSave",
    "numRowsTotal" : 2,
    "numRowsUpdated" : 2,
    "allUpdatesTimeMs" : 599,
    "numRowsRemoved" : 0,
    "allRemovalsTimeMs" : 61,
    "commitTimeMs" : 1241,
    "memoryUsedBytes" : 1792,
    "numRowsDroppedByWatermark" : 0,
    "numShufflePartitions" : 5,
    "numStateStoreInstances" : 5,
    "customMetrics" : {
      "SnapshotLastUploaded.partition_0_default" : -1,
      "SnapshotLastUploaded.partition_1_default" : -1,
      "SnapshotLastUploaded.partition_2_default" : -1,
      "SnapshotLastUploaded.partition_3_default" : -1,
      "SnapshotLastUploaded.partition_4_default" : -1,
      "loadedMapCacheHitCount" : 0,
      "loadedMapCacheMissCount" : 0,
      "stateOnCurrentVersionSizeBytes" : 1072
    }
  } ],
  "sources" : [ {
    "description" : "FileStreamSource[file:/tmp/ss_oracle/ck/in]",
    "startOffset" : null,
    "endOffset" : {
      "logOffset" : 0
    },
    "latestOffset" : null,
    "numInputRows" : 3,
    "inputRowsPerSecond" : 0.0,
    "processedRowsPerSecond" : 0.3
  } ],
  "sink" : {
    "description" : "NoopTable",
    "numOutputRows" : 2
  }
}"""


def _spark_like_progress() -> StreamingQueryProgress:
    start, end = 1_795_293_217_882, 1_795_293_217_882 + 10_006
    in_rate, proc_rate = compute_rates(3, start, end, None)
    stats = EventTimeStats.zero().add(10_000).add(12_000).add(11_000)
    custom = {f"SnapshotLastUploaded.partition_{p}_default": -1 for p in range(5)}
    custom.update({"stateOnCurrentVersionSizeBytes": 1072, "loadedMapCacheMissCount": 0, "loadedMapCacheHitCount": 0})
    return StreamingQueryProgress(
        id="145d0c87-6c84-416e-b9ed-aefb2de32a1c",
        run_id="369d40f3-780a-4326-a8cf-4af03916f107",
        name=None,
        timestamp=format_timestamp_ms(start),
        batch_id=0,
        batch_duration=end - start,
        duration_ms={
            "walCommit": 148,
            "triggerExecution": 10002,
            "queryPlanning": 2041,
            "latestOffset": 211,
            "getBatch": 331,
            "commitOffsets": 513,
            "addBatch": 6705,
        },
        event_time=event_time_map(0, stats),
        state_operators=[StateOperatorProgress("stateStoreSave", 2, 2, 599, 0, 61, 1241, 1792, 0, 5, 5, custom)],
        sources=[
            SourceProgress(
                "FileStreamSource[file:/tmp/ss_oracle/ck/in]", None, {"logOffset": 0}, None, 3, in_rate, proc_rate
            )
        ],
        sink=SinkProgress("NoopTable", 2),
    )


def test_pretty_json_matches_spark_byte_for_byte():
    assert _spark_like_progress().prettyJson() == SPARK_PRETTY


def test_compact_json_matches_spark():
    p = _spark_like_progress()
    compact = p.json()
    assert compact == json.dumps(json.loads(SPARK_PRETTY), separators=(",", ":"))
    assert compact.startswith('{"id":"145d0c87-6c84-416e-b9ed-aefb2de32a1c","runId":')
    assert str(p) == SPARK_PRETTY


def test_to_dict_field_order_and_pyspark_rendering():
    d = _spark_like_progress().to_dict()
    assert list(d) == [
        "id",
        "runId",
        "name",
        "timestamp",
        "batchId",
        "batchDuration",
        "numInputRows",
        "inputRowsPerSecond",
        "processedRowsPerSecond",
        "durationMs",
        "eventTime",
        "stateOperators",
        "sources",
        "sink",
    ]
    assert d["processedRowsPerSecond"] == 0.3
    assert pyspark_json(_spark_like_progress()) == json.dumps(json.loads(SPARK_PRETTY))
    assert pyspark_json(_spark_like_progress(), pretty=True) == json.dumps(json.loads(SPARK_PRETTY), indent=4)


def test_omission_rules_idle_event():
    op = StateOperatorProgress("stateStoreSave", 3, 4, num_rows_dropped_by_watermark=2, custom_metrics={})
    p = StreamingQueryProgress(
        id="q",
        run_id="r",
        name="n",
        timestamp=format_timestamp_ms(0),
        batch_id=1,
        batch_duration=0,
        duration_ms={},
        event_time={},
        state_operators=[op.idle_copy()],
        sources=[],
        sink=SinkProgress("ForeachBatchSink"),
    )
    d = p.to_dict()
    assert "durationMs" not in d and "eventTime" not in d and "observedMetrics" not in d
    assert "customMetrics" not in d["stateOperators"][0]
    assert d["stateOperators"][0]["numRowsUpdated"] == 0
    assert d["stateOperators"][0]["numRowsDroppedByWatermark"] == 0
    assert d["stateOperators"][0]["numRowsTotal"] == 3
    assert d["sink"] == {"description": "ForeachBatchSink", "numOutputRows": -1}
    assert d["numInputRows"] == 0
    assert '"sources" : [ ]' in p.prettyJson()
    assert p.json().endswith('"stateOperators":[{"operatorName":"stateStoreSave","numRowsTotal":3,"numRowsUpdated":0,'
                             '"allUpdatesTimeMs":0,"numRowsRemoved":0,"allRemovalsTimeMs":0,"commitTimeMs":0,'
                             '"memoryUsedBytes":0,"numRowsDroppedByWatermark":0,"numShufflePartitions":0,'
                             '"numStateStoreInstances":0}],"sources":[],"sink":{"description":"ForeachBatchSink",'
                             '"numOutputRows":-1}}')


def test_nan_and_infinite_rates_are_left_out():
    s = SourceProgress("src", num_input_rows=5, input_rows_per_second=math.inf, processed_rows_per_second=math.nan)
    d = s.to_dict()
    assert "inputRowsPerSecond" not in d and "processedRowsPerSecond" not in d
    p = StreamingQueryProgress("q", "r", None, "t", 0, 1, sources=[s, SourceProgress("b", input_rows_per_second=1.0)])
    assert "inputRowsPerSecond" not in p.to_dict()  # inf + 1 = inf


def test_metrics_maps_sorted_and_optional():
    s = SourceProgress("src", metrics={"b": "2", "a": "1"})
    assert list(s.to_dict()["metrics"]) == ["a", "b"]
    sink = SinkProgress("k", 3, {"z": "1", "y": "2"})
    assert sink.json() == '{"description":"k","numOutputRows":3,"metrics":{"y":"2","z":"1"}}'
    p = StreamingQueryProgress("q", "r", None, "t", 0, 1, observed_metrics={"m2": {"c": 1}, "m1": {"c": 2}})
    assert list(p.to_dict()["observedMetrics"]) == ["m1", "m2"]
    assert p.json().endswith('"observedMetrics":{"m1":{"c":2},"m2":{"c":1}}}')


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.958, "1.0"), (1.4514, "1.5"), (58.82, "58.8"), (0.05, "0.1"), (0.25, "0.3"), (0.0, "0.0"), (-0.04, "0.0"), (1e10, "10000000000.0"), (1e-7, "0.0")],
)
def test_round_rate_half_up(value, expected):
    assert render_json(round_rate(value)) == expected


def test_round_rate_special():
    assert round_rate(math.nan) is None
    assert round_rate(math.inf) is None
    assert round_rate(-math.inf) is None


def test_compute_rates():
    # first trigger of a run: the input rate is 0.0
    assert compute_rates(3, 1000, 1958, None) == (0.0, pytest.approx(3 / 0.958))
    assert compute_rates(1, 12_182, 14_273, 3_157) == (pytest.approx(1 / 9.025), pytest.approx(1 / 2.091))
    # the duration is at least 1 ms
    assert compute_rates(2, 5, 5, 0)[1] == 2000.0
    rate, _ = compute_rates(2, 5, 6, 5)
    assert math.isinf(rate)
    rate, _ = compute_rates(0, 5, 6, 5)
    assert math.isnan(rate)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (11_000, "1970-01-01T00:00:11.000Z"),
        (16_666, "1970-01-01T00:00:16.666Z"),
        (1_795_293_217_882, "2026-11-21T20:33:37.882Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_format_timestamp(ms, text):
    assert format_timestamp_ms(ms) == text


def test_event_time_map():
    assert event_time_map(None, None) == {}
    assert event_time_map(5_000, None) == {"watermark": "1970-01-01T00:00:05.000Z"}
    assert event_time_map(5_000, EventTimeStats.zero()) == {"watermark": "1970-01-01T00:00:05.000Z"}
    stats = EventTimeStats.zero().add(0).add(20_000).add(30_000)
    assert event_time_map(0, stats) == {
        "avg": "1970-01-01T00:00:16.666Z",
        "max": "1970-01-01T00:00:30.000Z",
        "min": "1970-01-01T00:00:00.000Z",
        "watermark": "1970-01-01T00:00:00.000Z",
    }


def test_offset_from_json_text():
    assert offset_from_json_text('{"logOffset":1}') == {"logOffset": 1}
    assert offset_from_json_text("not json") == "not json"
    assert offset_from_json_text(None) is None


def test_string_escaping_like_jackson():
    assert render_json({"d": 'a"b\\c\n\x01é/'}) == '{"d":"a\\"b\\\\c\\n\\u0001é/"}'
    assert render_json({}, pretty=True) == "{ }"
    assert render_json({"a": [], "b": {}}, pretty=True) == '{\n  "a" : [ ],\n  "b" : { }\n}'
    assert render_json({"a": [{"x": 1}, {"y": 2}]}, pretty=True) == (
        '{\n  "a" : [ {\n    "x" : 1\n  }, {\n    "y" : 2\n  } ]\n}'
    )
