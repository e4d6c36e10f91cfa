"""Pure tests of the streaming analysis rules (no Spark session).

Nodes get a stand-in template that only has a ``schema``; expression facts (window functions,
distinct aggregates, ``monotonically_increasing_id``) come from a fake inspector. Expected texts
are Spark 4.1's (spark-semantics.md §7.6, checked against Spark 4.1.4 in tests/spark).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from statestream.errors import StatestreamAnalysisException, check_batch_action_on_stream, write_stream_not_allowed_error
from statestream.plan import analysis as A
from statestream.plan.logical import (
    SESSION_WINDOW_KEY,
    TIME_WINDOW_KEY,
    WATERMARK_DELAY_KEY,
    Aggregate,
    Deduplicate,
    EventTimeWatermark,
    Limit,
    LogicalPlan,
    Sort,
    Stateless,
    StreamingRelation,
    Union,
)

WM = {WATERMARK_DELAY_KEY: 10000}


@dataclass
class FakeTemplate:
    schema: StructType


def tpl(*fields: tuple[str, object, dict] | tuple[str, object]) -> FakeTemplate:
    return FakeTemplate(
        StructType([StructField(f[0], f[1], True, f[2] if len(f) > 2 else {}) for f in fields])  # type: ignore[misc]
    )


class FakeInspector:
    """Facts per node, as the JVM inspector would report the ones a node introduces."""

    def __init__(self, facts: dict[int, list] | None = None) -> None:
        self._facts = facts or {}

    def add(self, node: LogicalPlan, *facts: object) -> "FakeInspector":
        self._facts[id(node)] = list(facts)
        return self

    def facts(self, node: LogicalPlan):
        return self._facts.get(id(node), [])


def source() -> StreamingRelation:
    return StreamingRelation(template=tpl(("ts", TimestampType()), ("value", LongType())))


def batch() -> LogicalPlan:
    return LogicalPlan(template=tpl(("value", LongType())))


def watermarked() -> EventTimeWatermark:
    return EventTimeWatermark(
        template=tpl(("ts", TimestampType(), WM), ("value", LongType())),
        child=source(),
        column="ts",
        delay_ms=10000,
    )


def agg(child: LogicalPlan, *keys: tuple[str, object, dict] | tuple[str, object]) -> Aggregate:
    fields = list(keys) + [("count", LongType())]
    return Aggregate(template=tpl(*fields), child=child, grouping=tuple(object() for _ in keys), aggregates=(object(),))


def window_key(session: bool = False) -> tuple[str, object, dict]:
    md = dict(WM)
    md[SESSION_WINDOW_KEY if session else TIME_WINDOW_KEY] = True
    return ("session_window" if session else "window", StructType(), md)


def check(plan: LogicalPlan, mode: str, conf=None, inspector=None) -> None:
    A.check_for_streaming(plan, mode, conf, inspector=inspector or FakeInspector())


def error(plan: LogicalPlan, mode: str, conf=None, inspector=None) -> StatestreamAnalysisException:
    with pytest.raises(StatestreamAnalysisException) as info:
        check(plan, mode, conf, inspector)
    return info.value


OUTPUT_MODE_APPEND = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: append. This output mode is "
    "not supported for streaming aggregations without watermark on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
OUTPUT_MODE_COMPLETE = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: complete. This output mode is "
    "not supported for no streaming aggregations on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
OUTPUT_MODE_SESSION = (
    "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: update. This output mode is "
    "not supported for session window streaming aggregations on streaming DataFrames/DataSets. SQLSTATE: 42KDE"
)
SORT = (
    "Sorting is not supported on streaming DataFrames/Datasets, unless it is on aggregated DataFrame/Dataset "
    "in Complete output mode"
)
CORRECTNESS_PREFIX = "Detected pattern of possible 'correctness' issue due to global watermark."


# ------------------------------------------------------------------------------ predicates


def test_is_streaming_and_aggregates_outermost_first():
    inner = agg(watermarked(), ("value", LongType()))
    outer = agg(inner, ("count", LongType()))
    assert A.is_streaming(outer)
    assert not A.is_streaming(batch())
    assert A.aggregates_in(outer) == [outer, inner]
    assert A.aggregates_in(batch()) == []


def test_event_time_key_detection():
    assert A.has_event_time_key(agg(watermarked(), ("ts", TimestampType(), WM)))
    assert A.has_event_time_key(agg(watermarked(), window_key(), ("value", LongType())))
    assert not A.has_event_time_key(agg(watermarked(), ("value", LongType())))
    assert A.watermark_in_grouping is A.has_event_time_key


def test_session_window_detection():
    assert A.is_session_window_aggregate(agg(watermarked(), window_key(session=True), ("value", LongType())))
    assert not A.is_session_window_aggregate(agg(watermarked(), window_key(), ("value", LongType())))


def test_contains_complete_data():
    a = agg(source(), ("value", LongType()))
    assert A.contains_complete_data(a, "complete")
    assert not A.contains_complete_data(a, "update")
    assert not A.contains_complete_data(source(), "complete")
    assert A.contains_complete_data(batch(), "append")


def test_dedup_event_time_key_all_columns_when_no_keys():
    wm = watermarked()
    assert A.dedup_has_event_time_key(Deduplicate(template=wm.template, child=wm, keys=()))
    assert A.dedup_has_event_time_key(Deduplicate(template=wm.template, child=wm, keys=("ts",)))
    assert not A.dedup_has_event_time_key(Deduplicate(template=wm.template, child=wm, keys=("value",)))


def test_sql_quoting_helpers():
    assert A.to_sql_id("r") == "`r`"
    assert A.to_sql_id("my col") == "`my col`"
    assert A.to_sql_id("`a.b`") == "`a.b`"
    assert A.to_sql_id("a.b") == "`a`.`b`"
    assert A.to_sql_id("`a``b`") == "`a``b`"
    assert A.to_sql_stmt("row_number()") == "ROW_NUMBER()"


# ------------------------------------------------------------------------------ output modes


def test_append_aggregation_without_watermark_key():
    e = error(agg(watermarked(), ("value", LongType())), "append")
    assert e.getCondition() == "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION"
    assert e.getSqlState() == "42KDE"
    assert e.getMessageParameters() == {"outputMode": "append", "operation": "streaming aggregations without watermark"}
    assert str(e) == OUTPUT_MODE_APPEND


def test_append_aggregation_with_watermark_key_is_allowed():
    check(agg(watermarked(), window_key(), ("value", LongType())), "append")


def test_append_decided_on_outermost_aggregation():
    inner_keyed = agg(watermarked(), window_key(), ("value", LongType()))
    assert str(error(agg(inner_keyed, ("value", LongType())), "append")) == OUTPUT_MODE_APPEND
    inner_unkeyed = agg(watermarked(), ("value", LongType()))
    check(agg(inner_unkeyed, ("ts", TimestampType(), WM)), "append")


def test_complete_without_aggregation():
    e = error(Stateless(template=source().template, child=source()), "Complete")
    assert e.getMessageParameters()["outputMode"] == "complete"
    assert str(e) == OUTPUT_MODE_COMPLETE


def test_update_session_window():
    e = error(agg(watermarked(), window_key(session=True), ("value", LongType())), "update")
    assert str(e) == OUTPUT_MODE_SESSION


def test_update_without_aggregation_is_allowed():
    check(Stateless(template=source().template, child=source()), "update")


def test_output_mode_is_checked_before_node_rules():
    a = agg(source(), ("value", LongType()))
    s = Sort(template=a.template, child=a)
    assert str(error(s, "append")) == OUTPUT_MODE_APPEND


# ------------------------------------------------------------------------------ node rules


def test_sort_rules():
    s = Sort(template=source().template, child=source())
    e = error(s, "append")
    assert e.getCondition() == "_LEGACY_ERROR_TEMP_3102"
    assert e.getMessageParameters() == {"msg": SORT}
    assert e.getSqlState() is None
    assert str(e) == SORT
    a = agg(source(), ("value", LongType()))
    assert str(error(Sort(template=a.template, child=a), "update")) == SORT
    check(Sort(template=a.template, child=a), "complete")
    before = agg(Sort(template=source().template, child=source()), ("value", LongType()))
    assert str(error(before, "complete")) == SORT


def test_limit_rules():
    lim = Limit(template=source().template, child=source(), n=3)
    assert str(error(lim, "update")) == "Limits are not supported on streaming DataFrames/Datasets in Update output mode"
    check(lim, "append")
    a = agg(source(), ("value", LongType()))
    check(Limit(template=a.template, child=a, n=2), "complete")
    assert "Limits" in str(error(Limit(template=a.template, child=a, n=2), "update"))


def test_offset_and_sample():
    off = Stateless(template=source().template, child=source(), op="Offset")
    assert str(error(off, "append")) == "Offset is not supported on streaming DataFrames/Datasets"
    smp = Stateless(template=source().template, child=source(), op="Sample")
    assert str(error(smp, "append")) == "Sampling is not supported on streaming DataFrames/Datasets"


def test_dedup_within_watermark_needs_event_time():
    src = source()
    d = Deduplicate(template=src.template, child=src, keys=("value",), within_watermark=True)
    assert str(error(d, "append")) == (
        "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets without watermark"
    )
    wm = watermarked()
    check(Deduplicate(template=wm.template, child=wm, keys=("value",), within_watermark=True), "append")


def test_union_stream_and_batch():
    src = source()
    u = Union(template=src.template, inputs=(batch(), src))
    assert str(error(u, "append")) == "Union between streaming and batch DataFrames/Datasets is not supported"
    check(Union(template=src.template, inputs=(src, source())), "append")


def test_bottom_up_order_lower_problem_wins():
    smp = Stateless(template=source().template, child=source(), op="Sample")
    off = Stateless(template=smp.template, child=smp, op="Offset")
    assert "Sampling" in str(error(off, "append"))


# ------------------------------------------------------------------------------ expression facts


def test_window_function_message():
    node = Stateless(template=source().template, child=source())
    insp = FakeInspector().add(
        node,
        A.WindowFunctionUse(
            ("row_number()",), ("r",), ("(PARTITION BY value ORDER BY ts ASC NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)",)
        ),
    )
    e = error(node, "append", inspector=insp)
    assert e.getCondition() == "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING"
    assert e.getSqlState() == "42KDE"
    assert e.getMessageParameters() == {
        "windowFunc": "ROW_NUMBER()",
        "columnName": "`r`",
        "windowSpec": "(PARTITION BY VALUE ORDER BY TS ASC NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)",
    }
    assert str(e) == (
        "[NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING] Window function is not supported in ROW_NUMBER() "
        "(as column `r`) on streaming DataFrames/Datasets.\nStructured Streaming only supports time-window "
        "aggregation using the WINDOW function. (window specification: (PARTITION BY VALUE ORDER BY TS ASC "
        "NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) SQLSTATE: 42KDE"
    )


def test_window_function_several_in_one_operator_joined_by_comma():
    node = Stateless(template=source().template, child=source())
    insp = FakeInspector().add(node, A.WindowFunctionUse(("row_number()", "rank(ts#2)"), ("a", "b"), ("(x)", "(y)")))
    e = error(node, "append", inspector=insp)
    assert e.getMessageParameters() == {"windowFunc": "ROW_NUMBER(),RANK(TS#2)", "columnName": "`a`,`b`", "windowSpec": "(X),(Y)"}


def test_monotonically_increasing_id_and_distinct():
    node = Stateless(template=source().template, child=source())
    insp = FakeInspector().add(node, A.UnsupportedExpressionUse(("monotonically_increasing_id()",)))
    e = error(node, "append", inspector=insp)
    assert str(e) == "Expression(s): monotonically_increasing_id() is not supported with streaming DataFrames/Datasets"
    assert e.getCondition() == "_LEGACY_ERROR_TEMP_3102"
    a = agg(source(), ("value", LongType()))
    insp = FakeInspector().add(a, A.DistinctAggregateUse(("count(DISTINCT ts)",)))
    assert str(error(a, "complete", inspector=insp)) == (
        "Distinct aggregations are not supported on streaming DataFrames/Datasets. Consider using "
        "approx_count_distinct() instead."
    )


def test_facts_over_batch_subtree():
    b = batch()
    insp = FakeInspector().add(b, A.WindowFunctionUse(("row_number()",), ("r",), ("()",)))
    u = Union(template=b.template, inputs=(source(), b))
    # a window over batch data is fine; the union of stream and batch is what fails
    assert "Union between streaming and batch" in str(error(u, "append", inspector=insp))
    insp = FakeInspector().add(b, A.UnsupportedExpressionUse(("monotonically_increasing_id()",)))
    assert "Expression(s)" in str(error(u, "append", inspector=insp))


# ------------------------------------------------------------------------------ correctness


def test_chained_aggregations():
    inner = agg(watermarked(), window_key(), ("value", LongType()))
    outer = agg(inner, window_key())
    for mode in ("complete", "update"):
        e = error(outer, mode)
        assert str(e).startswith(CORRECTNESS_PREFIX)
        assert str(e).endswith("`spark.sql.streaming.statefulOperator.checkCorrectness.enabled` to false.")
        assert e.getMessageParameters() == {"msg": str(e)}
    check(outer, "append")
    assert A.has_correctness_issue(outer, "update")
    assert not A.has_correctness_issue(outer, "append")


def test_aggregation_then_dedup():
    a = agg(watermarked(), window_key(), ("value", LongType()))
    on_event_time = Deduplicate(template=a.template, child=a, keys=("window",))
    assert str(error(on_event_time, "update")).startswith(CORRECTNESS_PREFIX)
    everything = Deduplicate(template=a.template, child=a, keys=())
    assert str(error(everything, "update")).startswith(CORRECTNESS_PREFIX)
    within = Deduplicate(template=a.template, child=a, keys=("value",), within_watermark=True)
    assert str(error(within, "update")).startswith(CORRECTNESS_PREFIX)
    check(within, "append")
    check(Deduplicate(template=a.template, child=a, keys=("value",)), "update")


def test_correctness_check_can_be_turned_into_a_warning(caplog):
    inner = agg(watermarked(), window_key(), ("value", LongType()))
    outer = agg(inner, window_key())
    with caplog.at_level(logging.WARNING, logger="statestream.plan.analysis"):
        check(outer, "update", conf={A.CHECK_CORRECTNESS_CONF: "FALSE"})
    assert any(CORRECTNESS_PREFIX in r.getMessage() for r in caplog.records)


def test_unsupported_operation_check_off_disables_everything():
    smp = Stateless(template=source().template, child=source(), op="Sample")
    check(smp, "complete", conf={A.UNSUPPORTED_OPERATION_CHECK_CONF: "false"})
    check(agg(source(), ("value", LongType())), "append", conf={A.UNSUPPORTED_OPERATION_CHECK_CONF: "false"})


def test_no_streaming_source_and_bad_mode():
    assert str(error(batch(), "append")) == "Queries without streaming sources cannot be executed with writeStream.start()"
    with pytest.raises(ValueError, match="upsert"):
        check(source(), "upsert")


def test_error_remembers_node():
    s = Sort(template=source().template, child=source())
    assert error(s, "append").statestream_node is s


# ------------------------------------------------------------------------------ helpers for the API layer


def test_batch_action_and_write_stream_errors():
    e = check_batch_action_on_stream()
    assert isinstance(e, StatestreamAnalysisException)
    assert e.getCondition() == "_LEGACY_ERROR_TEMP_3102"
    assert str(e) == (
        "Queries with streaming sources must be executed with writeStream.start(), or from a streaming table "
        "or flow definition within a Spark Declarative Pipeline."
    )
    w = write_stream_not_allowed_error()
    assert w.getCondition() == "WRITE_STREAM_NOT_ALLOWED"
    assert w.getSqlState() == "42601"
    assert str(w) == "[WRITE_STREAM_NOT_ALLOWED] `writeStream` can be called only on streaming Dataset/DataFrame. SQLSTATE: 42601"


def test_redefines_watermark_only_for_a_watermark_above_another_in_one_chain():
    """Spark's propagation refuses a watermark node that receives a watermark from below
    (through any operator), but not two watermarked streams meeting in a union."""
    first = watermarked()
    second = EventTimeWatermark(template=first.template, child=agg(first, ("ts", TimestampType(), WM)), column="ts", delay_ms=5000)
    assert A.redefines_watermark(second)
    assert A.redefines_watermark(agg(second, ("ts", TimestampType(), WM)))
    assert not A.redefines_watermark(first)
    assert not A.redefines_watermark(Union(template=first.template, inputs=(watermarked(), watermarked())))


# ------------------------------------------------------------------------------ finality columns


def test_finality_columns_refuse_complete_mode_only_after_sparks_own_rules():
    import dataclasses

    counted = dataclasses.replace(agg(watermarked(), window_key(), ("value", LongType())), finality=True)
    check(counted, "update")
    check(counted, "append")
    assert "complete mode emits every key in every batch" in str(error(counted, "complete"))
    # Spark's own refusal comes first: a finality aggregation in append mode without a watermark
    plain = dataclasses.replace(agg(source(), ("value", LongType())), finality=True)
    assert str(error(plain, "append")) == OUTPUT_MODE_APPEND
    # the check stays with Spark's checks turned off (it is statestream's own)
    off = {"spark.sql.streaming.unsupportedOperationCheck": "false"}
    assert "complete mode" in str(error(counted, "complete", conf=off))
    check(dataclasses.replace(counted, finality=False), "complete")
