"""Spark's refusals of what a streaming query cannot do (its ``UnsupportedOperationChecker``):
the conditions, texts and builders that ``plan/analysis.py``'s rules raise, and the operators
when those checks are off.

>>> output_mode_error("update", OP_SESSION_WINDOW).getCondition()
'STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION'
"""

from __future__ import annotations

from typing import Sequence

from statestream.errors.spark_shaped import StatestreamAnalysisException, analysis_error

__all__ = [
    "LEGACY_CONDITION",
    "OUTPUT_MODE_CONDITION",
    "NON_TIME_WINDOW_CONDITION",
    "SQLSTATE_42KDE",
    "OP_AGGREGATION_WITHOUT_WATERMARK",
    "OP_NO_AGGREGATION",
    "OP_SESSION_WINDOW",
    "MSG_NO_STREAMING_SOURCE",
    "MSG_DISTINCT_AGGREGATE",
    "MSG_DEDUP_WITHIN_WATERMARK",
    "MSG_UNION_STREAM_BATCH",
    "MSG_LIMIT_UPDATE",
    "MSG_OFFSET",
    "MSG_SORT",
    "MSG_SAMPLE",
    "MSG_CORRECTNESS",
    "MSG_BATCH_ACTION_ON_STREAM",
    "unsupported_expressions_message",
    "output_mode_message",
    "non_time_window_message",
    "check_batch_action_on_stream",
    "legacy_analysis_error",
    "union_stream_batch_error",
    "output_mode_error",
]

# ---------------------------------------------------------------------------------------------
# Error conditions and texts (Spark 4.1; verified by running the same queries on Spark 4.1.4).
# Messages without a condition of their own are Spark's legacy condition carrying the text as
# its only parameter ``msg``; their ``str()`` is the bare text (Spark appends ``;\n<plan>``).
# ---------------------------------------------------------------------------------------------

LEGACY_CONDITION = "_LEGACY_ERROR_TEMP_3102"
OUTPUT_MODE_CONDITION = "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION"
NON_TIME_WINDOW_CONDITION = "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING"
SQLSTATE_42KDE = "42KDE"

OP_AGGREGATION_WITHOUT_WATERMARK = "streaming aggregations without watermark"
OP_NO_AGGREGATION = "no streaming aggregations"
OP_SESSION_WINDOW = "session window streaming aggregations"

MSG_NO_STREAMING_SOURCE = "Queries without streaming sources cannot be executed with writeStream.start()"
MSG_DISTINCT_AGGREGATE = (
    "Distinct aggregations are not supported on streaming DataFrames/Datasets. "
    "Consider using approx_count_distinct() instead."
)
MSG_DEDUP_WITHIN_WATERMARK = (
    "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets without watermark"
)
MSG_UNION_STREAM_BATCH = "Union between streaming and batch DataFrames/Datasets is not supported"
MSG_LIMIT_UPDATE = "Limits are not supported on streaming DataFrames/Datasets in Update output mode"
MSG_OFFSET = "Offset is not supported on streaming DataFrames/Datasets"
MSG_SORT = (
    "Sorting is not supported on streaming DataFrames/Datasets, "
    "unless it is on aggregated DataFrame/Dataset in Complete output mode"
)
MSG_SAMPLE = "Sampling is not supported on streaming DataFrames/Datasets"
MSG_CORRECTNESS = (
    "Detected pattern of possible 'correctness' issue due to global watermark. "
    "The query contains stateful operation which can emit rows older than the current watermark "
    'plus allowed late record delay, which are "late rows" in downstream stateful operations and '
    "these rows can be discarded. Please refer the programming guide doc for more details. "
    "If you understand the possible risk of correctness issue and still need to run the query, "
    "you can disable this check by setting the config "
    "`spark.sql.streaming.statefulOperator.checkCorrectness.enabled` to false."
)
MSG_BATCH_ACTION_ON_STREAM = (
    "Queries with streaming sources must be executed with writeStream.start(), "
    "or from a streaming table or flow definition within a Spark Declarative Pipeline."
)


#: Spark's refusals of a stream-static join by type and streaming side
#: (``(join type, the streaming side) -> text``); the rule that picks one is ``plan.joins``
MSG_STREAM_STATIC_JOIN = {
    ("FullOuter", "left"): (
        "FullOuter joins with streaming DataFrames/Datasets on the left and a static "
        "DataFrame/Dataset on the right is not supported"
    ),
    ("FullOuter", "right"): (
        "FullOuter joins with streaming DataFrames/Datasets on the right and a static "
        "DataFrame/Dataset on the left is not supported"
    ),
    ("LeftAnti", "right"): "LeftAnti joins with a streaming DataFrame/Dataset on the right are not supported",
    ("LeftOuter", "right"): (
        "LeftOuter join with a streaming DataFrame/Dataset on the right and a static "
        "DataFrame/Dataset on the left is not supported"
    ),
    ("LeftSemi", "right"): (
        "LeftSemi join with a streaming DataFrame/Dataset on the right and a static "
        "DataFrame/Dataset on the left is not supported"
    ),
    ("RightOuter", "left"): (
        "RightOuter join with a streaming DataFrame/Dataset on the left and a static "
        "DataFrame/DataSet on the right not supported"
    ),
}


def stream_stream_join_mode_message(output_mode: str) -> str:
    """Spark's refusal of a join of two streams outside append mode."""
    return (
        "Join between two streaming DataFrames/Datasets is not supported in "
        f"{output_mode.capitalize()} output mode, only in Append output mode"
    )


def unsupported_join_type_message(join_type: str) -> str:
    """Spark's refusal of a join type it never streams."""
    return f"Join type {join_type} is not supported with streaming DataFrame/Dataset"


def stream_stream_bound_message(join_type: str) -> str:
    """Spark's message for a stream-stream outer or semi join without the watermark bound it needs."""
    return (
        f"Stream-stream {join_type} join between two streaming DataFrame/Datasets is not supported "
        "without a watermark in the join keys, or a watermark on the nullable side and an "
        "appropriate range condition"
    )


def apply_in_pandas_with_state_mode_message(function_mode: str, query_mode: str) -> str:
    """Spark's refusal of an ``applyInPandasWithState`` whose output mode (``function_mode``,
    lower case) is not the query's (``query_mode``) in a query without aggregation."""
    return (
        f"applyInPandasWithState in {function_mode} mode is not supported with {query_mode.capitalize()} "
        "output mode on a streaming DataFrame/Dataset"
    )


MSG_APPLY_IN_PANDAS_UPDATE_WITH_AGGREGATION = (
    "applyInPandasWithState in update mode is not supported with aggregation on a streaming DataFrame/Dataset"
)
MSG_APPLY_IN_PANDAS_APPEND_AFTER_AGGREGATION = (
    "applyInPandasWithState in append mode is not supported after aggregation on a streaming DataFrame/Dataset"
)
MSG_APPLY_IN_PANDAS_EVENT_TIME_TIMEOUT_WITHOUT_WATERMARK = (
    "Watermark must be specified in the query using '[Dataset/DataFrame].withWatermark()' for using "
    "event-time timeout in a applyInPandasWithState. Event-time timeout not supported without watermark."
)


def unsupported_expressions_message(sqls: Sequence[str]) -> str:
    return "Expression(s): " + ", ".join(sqls) + " is not supported with streaming DataFrames/Datasets"


def output_mode_message(output_mode: str, operation: str) -> str:
    return (
        f"[{OUTPUT_MODE_CONDITION}] Invalid streaming output mode: {output_mode}. "
        f"This output mode is not supported for {operation} on streaming DataFrames/DataSets. "
        f"SQLSTATE: {SQLSTATE_42KDE}"
    )


def non_time_window_message(window_func: str, column_name: str, window_spec: str) -> str:
    # The newline is part of Spark's message template.
    return (
        f"[{NON_TIME_WINDOW_CONDITION}] Window function is not supported in {window_func} "
        f"(as column {column_name}) on streaming DataFrames/Datasets.\n"
        "Structured Streaming only supports time-window aggregation using the WINDOW function. "
        f"(window specification: {window_spec}) SQLSTATE: {SQLSTATE_42KDE}"
    )




def check_batch_action_on_stream() -> StatestreamAnalysisException:
    """The error of a batch action (``collect()``, ``show()``, ``count()``...) on a streaming
    DataFrame. Returned, not raised: the API layer raises it where the action was called."""
    return analysis_error(LEGACY_CONDITION, MSG_BATCH_ACTION_ON_STREAM, None, msg=MSG_BATCH_ACTION_ON_STREAM)



def legacy_analysis_error(message: str) -> StatestreamAnalysisException:
    """Spark's legacy condition of an unsupported operation, carrying ``message`` as ``msg``."""
    return analysis_error(LEGACY_CONDITION, message, None, msg=message)


def union_stream_batch_error() -> StatestreamAnalysisException:
    """Spark's refusal of a union of a streaming and a batch DataFrame."""
    return legacy_analysis_error(MSG_UNION_STREAM_BATCH)


def output_mode_error(output_mode: str, operation: str) -> StatestreamAnalysisException:
    """Spark's ``STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`` error; also raised by operators
    at run time when the analysis checks are disabled (e.g. a session window in update mode)."""
    return analysis_error(
        OUTPUT_MODE_CONDITION,
        output_mode_message(output_mode, operation),
        SQLSTATE_42KDE,
        outputMode=output_mode,
        operation=operation,
    )
