"""Every error statestream raises, by area, each with Spark's error class where Spark has one.

An error that Spark raises for the same situation carries Spark's error class, message
parameters, SQLSTATE and text, and subclasses PySpark's own exception type
(:mod:`~statestream.errors.spark_shaped`), so that user code and the differential tests catch
it exactly as they would catch Spark's. Every error text lives in this package, built by small
factories in the module of its area:

========================  ===============================================================
``base``                  the root ``StatestreamError``; what statestream does not run yet
``state``                 the state store's files; restarts the stored state refuses
``checkpoint``            the checkpoint's logs, files and writer lock
``spark_shaped``          PySpark's exception classes for Spark's JVM errors
``arguments``             PySpark's argument checks, made in Python before the JVM
``query``                 a query's start next to another run; its failure
``analysis``              what Spark's analyzer refuses; what statestream cannot plan
``sources_sinks``         Python data sources, Kafka, foreach and foreachBatch
========================  ===============================================================

``state``, ``checkpoint`` and ``base`` import no PySpark (the storage layers raise them), and
this front door imports a name's module only when the name is first used (PEP 562), so that
``statestream.state`` and ``statestream.checkpoint`` stay free of PySpark.

Examples
--------
>>> from statestream.errors import CheckpointError, StatestreamError
>>> issubclass(CheckpointError, StatestreamError)
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestream.errors.base import (
        StatestreamError,
        NotSupportedYetError,
        NotSupportedYetAttributeError,
        not_supported_yet,
        spark_connect_session_error,
        missing_member,
    )
    from statestream.errors.state import (
        StateStoreError,
        schema_must_be_nullable_error,
        IncompatibleRestartError,
        StateSchemaNotCompatibleError,
        StateVariableTypeChangedError,
        OperatorConfigChangedError,
        OperatorNotMatchError,
    )
    from statestream.errors.checkpoint import (
        CheckpointError,
        ConcurrentStreamLogUpdateError,
        concurrent_stream_log_update_error,
        FileAlreadyExistsError,
        CheckpointLockedError,
        WriterLeaseLostError,
    )
    from statestream.errors.spark_shaped import (
        StatestreamAnalysisException,
        StatestreamStreamingQueryException,
        StatestreamIllegalArgumentException,
        StatestreamIllegalStateException,
        StatestreamNumberFormatException,
        StatestreamSparkRuntimeException,
        StatestreamUnsupportedOperationException,
        StatestreamArithmeticException,
        spark_error_text,
        analysis_error,
    )
    from statestream.errors.arguments import (
        value_not_non_empty_str_error,
        value_not_true_error,
        only_allow_single_trigger_error,
        value_not_positive_error,
        checked_timeout,
        number_format_error,
    )
    from statestream.errors.query import (
        stream_failed_error,
        query_exception_view,
        duplicate_query_name_error,
        duplicate_query_id_error,
        checkpoint_in_use_error,
        concurrent_query_error,
    )
    from statestream.errors.analysis import (
        ALLOW_MULTIPLE_CONF,
        MIXED_ENGINES_CONDITION,
        UnsupportedAggregateError,
        IntervalArithmeticError,
        python_data_source_error,
        mixed_engines_error,
        redefined_watermark_error,
    )
    from statestream.errors.sources_sinks import (
        python_streaming_source_error,
        python_sink_update_mode_error,
        KafkaUnreachableError,
        KafkaDataLossError,
        ForeachUserFuncError,
        foreach_user_function_error,
        foreach_batch_user_function_error,
    )

#: each public name and the module of this package it lives in
_HOMES = {
    "StatestreamError": "base",
    "NotSupportedYetError": "base",
    "NotSupportedYetAttributeError": "base",
    "not_supported_yet": "base",
    "spark_connect_session_error": "base",
    "missing_member": "base",
    "StateStoreError": "state",
    "schema_must_be_nullable_error": "state",
    "IncompatibleRestartError": "state",
    "StateSchemaNotCompatibleError": "state",
    "StateVariableTypeChangedError": "state",
    "OperatorConfigChangedError": "state",
    "OperatorNotMatchError": "state",
    "CheckpointError": "checkpoint",
    "ConcurrentStreamLogUpdateError": "checkpoint",
    "concurrent_stream_log_update_error": "checkpoint",
    "FileAlreadyExistsError": "checkpoint",
    "CheckpointLockedError": "checkpoint",
    "WriterLeaseLostError": "checkpoint",
    "StatestreamAnalysisException": "spark_shaped",
    "StatestreamStreamingQueryException": "spark_shaped",
    "StatestreamIllegalArgumentException": "spark_shaped",
    "StatestreamIllegalStateException": "spark_shaped",
    "StatestreamNumberFormatException": "spark_shaped",
    "StatestreamSparkRuntimeException": "spark_shaped",
    "StatestreamUnsupportedOperationException": "spark_shaped",
    "StatestreamArithmeticException": "spark_shaped",
    "spark_error_text": "spark_shaped",
    "analysis_error": "spark_shaped",
    "value_not_non_empty_str_error": "arguments",
    "value_not_true_error": "arguments",
    "only_allow_single_trigger_error": "arguments",
    "value_not_positive_error": "arguments",
    "checked_timeout": "arguments",
    "number_format_error": "arguments",
    "stream_failed_error": "query",
    "query_exception_view": "query",
    "duplicate_query_name_error": "query",
    "duplicate_query_id_error": "query",
    "checkpoint_in_use_error": "query",
    "concurrent_query_error": "query",
    "ALLOW_MULTIPLE_CONF": "analysis",
    "MIXED_ENGINES_CONDITION": "analysis",
    "UnsupportedAggregateError": "analysis",
    "IntervalArithmeticError": "analysis",
    "python_data_source_error": "analysis",
    "mixed_engines_error": "analysis",
    "redefined_watermark_error": "analysis",
    "python_streaming_source_error": "sources_sinks",
    "python_sink_update_mode_error": "sources_sinks",
    "KafkaUnreachableError": "sources_sinks",
    "KafkaDataLossError": "sources_sinks",
    "ForeachUserFuncError": "sources_sinks",
    "foreach_user_function_error": "sources_sinks",
    "foreach_batch_user_function_error": "sources_sinks",
}

__all__ = [
    "StatestreamError",
    "NotSupportedYetError",
    "NotSupportedYetAttributeError",
    "not_supported_yet",
    "spark_connect_session_error",
    "missing_member",
    "StateStoreError",
    "schema_must_be_nullable_error",
    "IncompatibleRestartError",
    "StateSchemaNotCompatibleError",
    "StateVariableTypeChangedError",
    "OperatorConfigChangedError",
    "OperatorNotMatchError",
    "CheckpointError",
    "ConcurrentStreamLogUpdateError",
    "concurrent_stream_log_update_error",
    "FileAlreadyExistsError",
    "CheckpointLockedError",
    "WriterLeaseLostError",
    "StatestreamAnalysisException",
    "StatestreamStreamingQueryException",
    "StatestreamIllegalArgumentException",
    "StatestreamIllegalStateException",
    "StatestreamNumberFormatException",
    "StatestreamSparkRuntimeException",
    "StatestreamUnsupportedOperationException",
    "StatestreamArithmeticException",
    "spark_error_text",
    "analysis_error",
    "value_not_non_empty_str_error",
    "value_not_true_error",
    "only_allow_single_trigger_error",
    "value_not_positive_error",
    "checked_timeout",
    "number_format_error",
    "stream_failed_error",
    "query_exception_view",
    "duplicate_query_name_error",
    "duplicate_query_id_error",
    "checkpoint_in_use_error",
    "concurrent_query_error",
    "ALLOW_MULTIPLE_CONF",
    "MIXED_ENGINES_CONDITION",
    "UnsupportedAggregateError",
    "IntervalArithmeticError",
    "python_data_source_error",
    "mixed_engines_error",
    "redefined_watermark_error",
    "python_streaming_source_error",
    "python_sink_update_mode_error",
    "KafkaUnreachableError",
    "KafkaDataLossError",
    "ForeachUserFuncError",
    "foreach_user_function_error",
    "foreach_batch_user_function_error",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'statestream.errors' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"statestream.errors.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
