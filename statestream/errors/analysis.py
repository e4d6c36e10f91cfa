"""Errors of planning a streaming query: what Spark's analyzer refuses, and what statestream
cannot plan yet.

>>> redefined_watermark_error().getCondition()
'_LEGACY_ERROR_TEMP_3076'
"""

from __future__ import annotations

import traceback
from typing import Any, Iterable, Mapping, Sequence

from statestream.errors.base import StatestreamError
from statestream.errors.spark_shaped import (
    StatestreamAnalysisException,
    StatestreamArithmeticException,
    StatestreamIllegalArgumentException,
    analysis_error,
)

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "MIXED_ENGINES_CONDITION",
    "UnsupportedAggregateError",
    "IntervalArithmeticError",
    "python_data_source_error",
    "mixed_engines_error",
    "redefined_watermark_error",
    "call_on_streaming_dataset_unsupported_error",
    "pivot_on_stream_error",
    "write_stream_not_allowed_error",
    "event_time_not_timestamp_error",
    "event_time_without_watermark_error",
    "schema_not_supported_error",
    "invalid_output_mode_error",
    "cluster_by_with_partition_by_error",
    "clustering_column_not_found_error",
    "checkpoint_location_required_error",
    "null_path_error",
    "unknown_explain_mode_error",
    "cannot_parse_interval_error",
    "invalid_interval_format_error",
    "negative_delay_threshold_error",
    "window_interval_with_months_error",
    "trigger_interval_with_months_error",
    "negative_trigger_interval_error",
    "multiple_watermark_policy_error",
    "dedup_without_keys_error",
    "stream_join_without_equality_error",
    "global_session_aggregation_error",
    "pandas_udaf_in_streaming_aggregation_error",
    "distinct_aggregation_disabled_error",
    "distinct_aggregate_not_supported_error",
    "aggregate_not_decomposable_error",
    "aggregate_function_not_supported_error",
    "star_aggregate_error",
    "aggregate_arity_error",
    "operator_not_rebuildable_error",
    "aggregate_wrapper_not_evaluable_error",
    "within_group_not_supported_error",
    "no_aggregate_function_error",
    "approx_count_distinct_rsd_error",
    "grouping_id_columns_error",
    "grouping_column_error",
    "python_aggregate_in_session_window_error",
    "python_aggregate_buffer_schema_error",
    "finality_column_conflict_error",
    "finality_session_window_error",
    "finality_output_mode_error",
]


class UnsupportedAggregateError(StatestreamError, ValueError):
    """An aggregate expression statestream cannot decompose yet (raised from ``start()``)."""


class IntervalArithmeticError(StatestreamArithmeticException):
    """Spark's ``ArithmeticException`` for an interval whose duration overflows 64 bits.

    >>> IntervalArithmeticError().getCondition()
    'INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION'
    """

    def __init__(self, message: str | None = None) -> None:
        message = message or (
            "[INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION] Integer overflow while operating with "
            "intervals. Try devising appropriate values for the interval parameters. SQLSTATE: 22015"
        )
        super().__init__(message, "INTERVAL_ARITHMETIC_OVERFLOW.WITHOUT_SUGGESTION", {}, "22015")


#: Spark's conf that selects the watermark propagation (named in the error below)
ALLOW_MULTIPLE_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"


def python_data_source_error(action: str, cause: BaseException) -> StatestreamAnalysisException:
    """Spark's ``PYTHON_DATA_SOURCE_ERROR``: a Python data source's code failed while Spark's
    engine drove it on the driver (``action``: ``initialize source``, ...), with the Python
    traceback as Spark shows it."""
    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source {action}: {detail} SQLSTATE: 38000"
    return analysis_error("PYTHON_DATA_SOURCE_ERROR", message, "38000", action="plan", type=action, msg=detail)


#: the condition of a query whose inputs come from both engines (statestream's own: Spark has no
#: such query, since it has one engine)
MIXED_ENGINES_CONDITION = "STATESTREAM_MIXED_STREAMING_ENGINES"


def mixed_engines_error(spark_inputs: list[str]) -> StatestreamAnalysisException:
    """The refusal at ``start()`` of a query that reads a stream of Spark's own engine
    (``spark.readStream`` on a session statestream does not serve) beside statestream's
    streams: its batches would fail with Spark's "must be executed with writeStream.start()".
    ``spark_inputs`` names those inputs (``rate [timestamp, value]``)."""
    named = "; ".join(spark_inputs) or "a streaming DataFrame of Spark's engine"
    message = (
        f"[{MIXED_ENGINES_CONDITION}] This query reads {len(spark_inputs) or 1} stream(s) through Spark's own streaming "
        f"engine ({named}) beside streams read through statestream; one query runs on one engine. Create that input "
        "with statestream's reader as well: call statestream.enable(spark) before spark.readStream (or run the job with "
        "`statestream run`), or read it with StreamingSession(spark).readStream. SQLSTATE: 42KDE"
    )
    return analysis_error(MIXED_ENGINES_CONDITION, message, "42KDE", inputs=named)


def redefined_watermark_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_3076``: a ``withWatermark`` above another one of the same
    stream, met when the watermark propagation is simulated (a batch whose watermark is not 0)."""
    message = (
        "Redefining watermark is disallowed. You can set the config "
        f"'{ALLOW_MULTIPLE_CONF}' to 'false' to restore the previous behavior. "
        "Note that multiple stateful operators will be disallowed."
    )
    return analysis_error("_LEGACY_ERROR_TEMP_3076", message, None, config=ALLOW_MULTIPLE_CONF)


# -- the API layer: batch-only methods, writeStream, withWatermark ---------------------------------


def call_on_streaming_dataset_unsupported_error(method: str) -> StatestreamAnalysisException:
    """Spark's ``CALL_ON_STREAMING_DATASET_UNSUPPORTED``: a batch-only writer method (``write``,
    ``writeTo``, ``mergeInto``) on a streaming DataFrame."""
    condition = "CALL_ON_STREAMING_DATASET_UNSUPPORTED"
    return analysis_error(
        condition,
        f"[{condition}] The method `{method}` can not be called on streaming Dataset/DataFrame. SQLSTATE: 42KDE",
        "42KDE",
        methodName=f"`{method}`",
    )


def pivot_on_stream_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_3063``: ``pivot`` (and ``crosstab``, which pivots) on a
    streaming DataFrame."""
    msg = "pivot is not supported on a streaming DataFrames/Datasets"
    return analysis_error("_LEGACY_ERROR_TEMP_3063", msg, None)


def write_stream_not_allowed_error() -> StatestreamAnalysisException:
    """Spark's ``WRITE_STREAM_NOT_ALLOWED``: ``writeStream`` on a batch DataFrame."""
    condition = "WRITE_STREAM_NOT_ALLOWED"
    return analysis_error(
        condition,
        f"[{condition}] `writeStream` can be called only on streaming "
        "Dataset/DataFrame. SQLSTATE: 42601",
        "42601",
    )


def event_time_not_timestamp_error(name: str, type_text: str) -> StatestreamAnalysisException:
    """Spark's ``EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE``: ``withWatermark`` on a column (``name``)
    whose type (``type_text``, upper case as Spark prints it) is not a timestamp."""
    return analysis_error(
        "EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE",
        f'[EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE] The event time `{name}` has the invalid type '
        f'"{type_text}", but expected "TIMESTAMP". SQLSTATE: 42K09',
        "42K09",
        eventName=f"`{name}`",
        eventType=f'"{type_text}"',
    )


def event_time_without_watermark_error() -> StatestreamAnalysisException:
    """Spark's ``CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK``: a transformWithState's
    event-time column in a stream without a watermark."""
    return analysis_error(
        "CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK",
        "[CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK] Watermark needs to be defined to reassign event "
        "time column. Failed to find watermark definition in the streaming query. SQLSTATE: 42611",
        "42611",
    )


def schema_not_supported_error(source: str) -> StatestreamAnalysisException:
    """Spark's ``UNSUPPORTED_FEATURE.SCHEMA_NOT_SUPPORTED``: a user-specified schema for one of
    statestream's batch sources (``source``: the state data sources)."""
    return StatestreamAnalysisException(
        f"[UNSUPPORTED_FEATURE.SCHEMA_NOT_SUPPORTED] The {source} source does not take a user-specified schema.",
        error_class="UNSUPPORTED_FEATURE.SCHEMA_NOT_SUPPORTED",
    )


# -- the writer's settings ---------------------------------------------------------------------------


def invalid_output_mode_error(output_mode: Any) -> StatestreamAnalysisException:
    """Spark's ``STREAMING_OUTPUT_MODE.INVALID``: ``outputMode()`` with a mode that is not
    append, update or complete."""
    msg = (
        f"[STREAMING_OUTPUT_MODE.INVALID] Invalid streaming output mode: {output_mode}. SQLSTATE: 42KDE"
    )
    return analysis_error("STREAMING_OUTPUT_MODE.INVALID", msg, "42KDE", outputMode=str(output_mode))


def cluster_by_with_partition_by_error() -> StatestreamAnalysisException:
    """Spark's ``SPECIFY_CLUSTER_BY_WITH_PARTITIONED_BY_IS_NOT_ALLOWED``."""
    return analysis_error(
        "SPECIFY_CLUSTER_BY_WITH_PARTITIONED_BY_IS_NOT_ALLOWED",
        "[SPECIFY_CLUSTER_BY_WITH_PARTITIONED_BY_IS_NOT_ALLOWED] Cannot specify both CLUSTER BY and PARTITIONED BY. SQLSTATE: 42908",
        "42908",
    )


def clustering_column_not_found_error(column: Any, names: Sequence[str]) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1196``: a ``clusterBy`` column that is not one of the
    stream's top-level columns (``names``)."""
    return analysis_error(
        "_LEGACY_ERROR_TEMP_1196",
        f"Clustering column {column} not found in existing columns ({', '.join(names)}).",
        colType="Clustering",
        colName=str(column),
        validColumnNames=", ".join(names),
    )


def checkpoint_location_required_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1298``: a query started without a checkpoint location on a sink
    that needs one (any but memory, foreach, foreachBatch, console and noop)."""
    return analysis_error(
        "_LEGACY_ERROR_TEMP_1298",
        "checkpointLocation must be specified either through option(\"checkpointLocation\", ...) or "
        "SparkSession.conf.set(\"spark.sql.streaming.checkpointLocation\", ...).",
    )


def null_path_error() -> StatestreamIllegalArgumentException:
    """Hadoop's ``Path`` refusal of a null string, as Spark's ``start()`` raises it for
    ``option("checkpointLocation", None)``."""
    return StatestreamIllegalArgumentException("Can not create a Path from a null string")


def unknown_explain_mode_error(mode: str) -> StatestreamIllegalArgumentException:
    """Spark's refusal of an ``explain(mode)`` it does not have."""
    return StatestreamIllegalArgumentException(
        f"Unknown explain mode: {mode}. Accepted explain modes are 'simple', 'extended', 'codegen', 'cost', 'formatted'."
    )


# -- intervals and watermarks ------------------------------------------------------------------------


def _sql_string(value: str) -> str:
    """A string as Spark quotes it in error parameters (``toSQLValue``)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cannot_parse_interval_error(text: str | None) -> StatestreamAnalysisException:
    """Spark's ``CANNOT_PARSE_INTERVAL``: a watermark delay or window duration (``text``, or
    ``None``) that is not an interval."""
    shown = _sql_string(text) if text is not None else "NULL"
    message = (
        f"[CANNOT_PARSE_INTERVAL] Unable to parse {shown}. Please ensure that the value provided is "
        "in a valid format for defining an interval. You can reference the documentation for the "
        "correct format. If the issue persists, please double check that the input value is not "
        "null or empty and try again. SQLSTATE: 22006"
    )
    return analysis_error("CANNOT_PARSE_INTERVAL", message, "22006", intervalString=shown)


_INVALID_INTERVAL_FORMAT_DETAILS = {
    "INPUT_IS_EMPTY": "Interval string cannot be empty.",
    "INVALID_PREFIX": "Invalid interval prefix {prefix}.",
    "UNRECOGNIZED_NUMBER": "Unrecognized number {number}.",
    "INVALID_VALUE": "Invalid value {value}.",
    "INVALID_PRECISION": "Interval can only support nanosecond precision, {value} is out of range.",
    "INVALID_FRACTION": "{unit} cannot have fractional part.",
    "INVALID_UNIT": "Invalid unit {unit}.",
    "MISSING_NUMBER": "Expect a number after {word} but hit EOL.",
    "MISSING_UNIT": "Expect a unit name after {word} but hit EOL.",
    "ARITHMETIC_EXCEPTION": "Uncaught arithmetic exception while parsing '{input}'.",
}


def invalid_interval_format_error(text: str, sub: str, params: Mapping[str, str]) -> StatestreamIllegalArgumentException:
    """Spark's ``INVALID_INTERVAL_FORMAT.<sub>``: a processing-time trigger interval (``text``)
    that Spark's ``stringToInterval`` refuses, ``params`` the reason's (``unit``, ``word``, ...)."""
    params = {"input": text, **params}
    detail = _INVALID_INTERVAL_FORMAT_DETAILS[sub].format(**params)
    condition = f"INVALID_INTERVAL_FORMAT.{sub}"
    message = (
        f"[{condition}] Error parsing '{text}' to interval. Please ensure that the value provided is "
        "in a valid format for defining an interval. You can reference the documentation for the "
        f"correct format. {detail} SQLSTATE: 22006"
    )
    return StatestreamIllegalArgumentException(message, error_class=condition, params=params, sql_state="22006")


def negative_delay_threshold_error(delay_threshold: str) -> StatestreamIllegalArgumentException:
    """Spark's ``require`` of ``withWatermark``: a delay below zero."""
    return StatestreamIllegalArgumentException(f"requirement failed: delay threshold ({delay_threshold}) should not be negative.")


def window_interval_with_months_error(duration: str) -> StatestreamIllegalArgumentException:
    """Spark's ``_LEGACY_ERROR_TEMP_3231``: a ``window()`` duration with a month part."""
    return StatestreamIllegalArgumentException(
        f"Intervals greater than a month is not supported ({duration}).",
        error_class="_LEGACY_ERROR_TEMP_3231",
        params={"interval": duration},
    )


def trigger_interval_with_months_error(text: str) -> StatestreamIllegalArgumentException:
    """Spark's ``_LEGACY_ERROR_TEMP_3262``: a processing-time trigger interval with months or years."""
    return StatestreamIllegalArgumentException(
        f"Doesn't support month or year interval: {text}",
        error_class="_LEGACY_ERROR_TEMP_3262",
        params={"interval": text},
    )


def negative_trigger_interval_error() -> StatestreamIllegalArgumentException:
    """Spark's ``require`` of ``ProcessingTimeTrigger``: a negative period."""
    return StatestreamIllegalArgumentException("requirement failed: the interval of trigger should not be negative")


def multiple_watermark_policy_error(conf: str, value: str) -> StatestreamIllegalArgumentException:
    """Spark's ``INVALID_CONF_VALUE.REQUIREMENT`` for the multiple-watermark policy conf
    (``conf``) set to something else than min or max (``value``, lower case)."""
    requirement = (
        f"Invalid value for '{conf}'. Valid values are 'min' and 'max'"
    )
    message = (
        f"[INVALID_CONF_VALUE.REQUIREMENT] The value '{value}' in the config "
        f'"{conf}" is invalid. {requirement} SQLSTATE: 22022'
    )
    return StatestreamIllegalArgumentException(
        message,
        error_class="INVALID_CONF_VALUE.REQUIREMENT",
        params={"confName": conf, "confValue": value, "confRequirement": requirement},
        sql_state="22022",
    )


# -- the planner's refusals ----------------------------------------------------------------------------


def dedup_without_keys_error() -> StatestreamIllegalArgumentException:
    """Spark's ``require`` of ``StatefulOpClusteredDistribution``: a streaming ``dropDuplicates``
    with no key column left."""
    return StatestreamIllegalArgumentException(
        "requirement failed: The expressions for hash of a StatefulOpClusteredDistribution should not be Nil. "
        "An AllTuples should be used to represent a distribution that only has a single partition."
    )


def stream_join_without_equality_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1181``: a stream-stream join without an equality between the
    sides (raised when the query plans its first batch)."""
    return analysis_error("_LEGACY_ERROR_TEMP_1181", "Stream-stream join without equality predicate is not supported.")


def global_session_aggregation_error() -> StatestreamAnalysisException:
    """Spark's planner's refusal of a session-window aggregation without another grouping key."""
    return analysis_error(None, "Global aggregation with session window in streaming query is not supported.")


def pandas_udaf_in_streaming_aggregation_error() -> StatestreamAnalysisException:
    """Spark's planner's refusal of a group aggregate pandas UDF in a streaming aggregation
    (raised while the first batch is planned: ``start()`` succeeds)."""
    return analysis_error(None, "Streaming aggregation doesn't support group aggregate pandas UDF")


# -- aggregates statestream cannot decompose (UnsupportedAggregateError) ------------------------------


def distinct_aggregation_disabled_error(name: str, conf: str) -> UnsupportedAggregateError:
    """A ``DISTINCT`` aggregate without statestream's opt-in conf (``conf``)."""
    return UnsupportedAggregateError(
        f"{name}(DISTINCT ...) needs {conf}=true: distinct aggregations are not supported on "
        "streaming DataFrames by Spark; statestream runs them exactly when that conf is on"
    )


def distinct_aggregate_not_supported_error(name: str) -> UnsupportedAggregateError:
    """A ``DISTINCT`` aggregate of more than one column, or of a function that has no exact
    distinct form."""
    return UnsupportedAggregateError(f"statestream supports DISTINCT only on one-column aggregates such as count, sum, avg, not {name}()")


def aggregate_not_decomposable_error(sql: str, supported: Iterable[str]) -> UnsupportedAggregateError:
    """An aggregate expression that is not a call of an aggregate function (``supported``)."""
    return UnsupportedAggregateError(
        f"statestream cannot decompose the aggregate expression {sql}: expected a call of one of {', '.join(supported)}"
    )


def aggregate_function_not_supported_error(name: str, supported: Iterable[str]) -> UnsupportedAggregateError:
    """An aggregate function statestream has no streaming form of."""
    return UnsupportedAggregateError(
        f"statestream does not support the aggregate function {name}() in streaming aggregations yet (supported: {', '.join(supported)})"
    )


def star_aggregate_error(name: str) -> UnsupportedAggregateError:
    """``name(*)`` of an aggregate other than ``count``."""
    return UnsupportedAggregateError(f"{name}(*) is not a valid aggregate")


def aggregate_arity_error(name: str, lo: int, hi: int, got: int) -> UnsupportedAggregateError:
    """An aggregate call with another number of column arguments than the function takes."""
    return UnsupportedAggregateError(f"{name}() takes {lo} to {hi} column arguments in statestream, got {got}")


def operator_not_rebuildable_error(name: str) -> UnsupportedAggregateError:
    """An operator around an aggregate that statestream cannot call by name (not an identifier)."""
    return UnsupportedAggregateError(f"statestream cannot rebuild the operator {name!r} around an aggregate yet")


def aggregate_wrapper_not_evaluable_error(sql: str, kind: str) -> UnsupportedAggregateError:
    """An expression (``sql``, of Spark's class ``kind``) around an aggregate that statestream
    cannot evaluate on the aggregate's result."""
    return UnsupportedAggregateError(f"statestream cannot evaluate {sql} around an aggregate yet ({kind})")


def within_group_not_supported_error(name: str) -> UnsupportedAggregateError:
    """A ``WITHIN GROUP (ORDER BY ...)`` aggregate statestream does not run."""
    return UnsupportedAggregateError(f"statestream does not support {name}(...) WITHIN GROUP (ORDER BY ...) yet")


def no_aggregate_function_error(sql: str) -> UnsupportedAggregateError:
    """An aggregation's column with no aggregate function in it."""
    return UnsupportedAggregateError(f"{sql} has no aggregate function")


def approx_count_distinct_rsd_error(sql: str) -> UnsupportedAggregateError:
    """An ``approx_count_distinct`` whose relative standard deviation is not a number literal."""
    return UnsupportedAggregateError(f"approx_count_distinct: the relative standard deviation must be a number literal, got {sql}")


def grouping_id_columns_error() -> UnsupportedAggregateError:
    """``grouping_id(...)`` over other columns than all grouping columns in their order."""
    return UnsupportedAggregateError("statestream supports grouping_id() only over all grouping columns, in their order")


def grouping_column_error(args: Sequence[str], grouping_names: Iterable[str]) -> UnsupportedAggregateError:
    """``grouping(...)`` that does not name exactly one grouping column."""
    return UnsupportedAggregateError(f"grouping({', '.join(args)}) does not name one of the grouping columns {list(grouping_names)}")


def python_aggregate_in_session_window_error(function: object) -> UnsupportedAggregateError:
    """A Python aggregate function in a session-window aggregation."""
    return UnsupportedAggregateError(
        f"statestream does not support the Python aggregate function {function} in session window aggregations yet"
    )


def python_aggregate_buffer_schema_error(name: str, buffer_schema: object) -> UnsupportedAggregateError:
    """A Python aggregate function whose ``buffer_schema`` is not a struct of named fields."""
    return UnsupportedAggregateError(f"{name}.buffer_schema must be a struct of named fields, got {buffer_schema!r}")


# -- statestream's finality columns (spark.statestream.aggregation.finality.enabled) ---------------


def finality_column_conflict_error(name: str, conf: str) -> StatestreamAnalysisException:
    """An aggregation built with the finality setting on (``conf``) whose own output has a
    column named like one of the two it gains (``revision``, ``is_final``)."""
    return analysis_error(
        None,
        f"The aggregation already has a column named `{name}`, and with {conf}=true its output gains the "
        "columns `revision` and `is_final`. Rename that column (alias it), or set the conf to false "
        "before building this aggregation.",
    )


def finality_session_window_error(conf: str) -> StatestreamAnalysisException:
    """A session-window aggregation built with the finality setting on: sessions merge, so a
    session has no stable key to count revisions of."""
    return analysis_error(
        None,
        f"{conf}=true does not apply to session-window aggregations yet: sessions merge, so a session "
        "has no stable key whose emissions could be counted. Set the conf to false before building this aggregation.",
    )


def finality_output_mode_error(conf: str) -> StatestreamAnalysisException:
    """An aggregation with the finality columns started in complete mode, which re-emits every
    key in every batch and never drops a late row, so that no row is ever final."""
    return analysis_error(
        None,
        f"The aggregation was built with {conf}=true, whose `revision` and `is_final` columns need the "
        "update or append output mode: complete mode emits every key in every batch and never evicts "
        "one, so no row is ever final. Use outputMode(\"update\") or \"append\", or set the conf to "
        "false before building the aggregation.",
    )
