"""Errors of the sources and sinks: a Python data source's failure, Kafka's unreachable brokers
and lost data, and a user's foreach or foreachBatch function that raised.

>>> error = foreach_batch_user_function_error(ValueError("boom"))
>>> error.getCondition(), error.getSqlState()
('FOREACH_BATCH_USER_FUNCTION_ERROR', '39000')
"""

from __future__ import annotations

import traceback
from typing import Any, Mapping

from statestream.errors.base import StatestreamError
from statestream.errors.checkpoint import CheckpointError
from statestream.errors.spark_shaped import (
    StatestreamAnalysisException,
    StatestreamArithmeticException,
    StatestreamIllegalArgumentException,
    StatestreamIllegalStateException,
    StatestreamNumberFormatException,
    StatestreamSparkRuntimeException,
    StatestreamUnsupportedOperationException,
    analysis_error,
)

__all__ = [
    "python_streaming_source_error",
    "python_sink_update_mode_error",
    "KafkaUnreachableError",
    "KafkaDataLossError",
    "ForeachUserFuncError",
    "foreach_user_function_error",
    "foreach_batch_user_function_error",
    "data_source_not_found_error",
    "user_schema_not_supported_error",
    "time_string_error",
    "rate_option_not_positive_error",
    "rate_option_negative_error",
    "ramp_up_time_negative_error",
    "rate_ramp_up_overflow_error",
    "rate_offset_overflow_error",
    "socket_option_required_error",
    "socket_include_timestamp_error",
    "socket_lines_gone_error",
    "socket_commit_out_of_order_error",
    "streaming_table_is_temp_view_error",
    "python_data_source_broadcast_error",
    "path_not_found_error",
    "source_path_not_specified_error",
    "schema_required_error",
    "file_source_boolean_option_error",
    "file_source_positive_option_error",
    "max_files_and_bytes_per_trigger_error",
    "clean_source_mode_error",
    "archive_dir_required_error",
    "archive_dir_other_file_system_error",
    "archive_dir_matches_source_error",
    "file_source_log_behind_error",
    "file_source_concurrent_update_error",
    "file_source_log_entry_missing_error",
    "file_source_invalid_batch_error",
    "sink_partitioning_not_supported_error",
    "sink_path_not_specified_error",
    "file_sink_output_mode_error",
    "file_sink_log_behind_error",
    "file_sink_concurrent_update_error",
    "memory_sink_query_name_error",
    "memory_sink_recovery_error",
    "table_temp_view_error",
    "table_view_error",
    "table_provider_mismatch_error",
    "table_without_provider_error",
    "table_not_file_based_error",
    "table_without_location_error",
    "kafka_fixed_schema_error",
    "kafka_time_string_error",
    "kafka_assign_json_error",
    "kafka_offsets_json_error",
    "kafka_timestamps_json_error",
    "kafka_no_match_strategy_error",
    "kafka_single_long_error",
    "kafka_ending_offsets_error",
    "kafka_ending_timestamp_error",
    "kafka_no_strategy_error",
    "kafka_several_strategies_error",
    "kafka_empty_assign_error",
    "kafka_empty_subscribe_error",
    "kafka_empty_pattern_error",
    "kafka_min_partitions_error",
    "kafka_auto_offset_reset_error",
    "kafka_deserializer_error",
    "kafka_serializer_error",
    "kafka_option_not_supported_error",
    "kafka_bootstrap_servers_required_error",
    "kafka_min_above_max_offsets_error",
    "kafka_subscribe_pattern_error",
    "kafka_client_missing_error",
    "kafka_trust_store_type_error",
    "kafka_key_store_type_error",
    "kafka_refused_error",
    "kafka_no_answer_error",
    "kafka_metadata_unavailable_error",
    "kafka_no_offset_for_timestamp_error",
    "kafka_timestamp_partitions_mismatch_error",
    "kafka_starting_offsets_partitions_mismatch_error",
    "kafka_partition_missing_error",
    "kafka_initial_offsets_corrupt_error",
    "kafka_fetch_timeout_error",
    "kafka_offset_range_lost_error",
    "kafka_available_now_partitions_changed_error",
    "kafka_available_now_partitions_lost_error",
    "kafka_available_now_offsets_behind_error",
    "kafka_missing_bootstrap_servers_error",
    "kafka_null_topic_error",
    "kafka_output_topic_required_error",
    "kafka_output_value_required_error",
    "kafka_output_type_error",
]


def python_streaming_source_error(action: str, cause: BaseException) -> StatestreamSparkRuntimeException:
    """Spark's ``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR``: a Python streaming source's
    ``initialOffset``, ``latestOffset``, ``partitions`` (``planPartitions``) or ``commit``
    (``commitSource``) raised, with the Python traceback."""
    detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    message = f"[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform {action}: {detail} SQLSTATE: 38000"
    return StatestreamSparkRuntimeException(message, "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR", {"action": action, "msg": detail}, "38000")


def python_sink_update_mode_error(name: str) -> "StatestreamIllegalArgumentException":
    """Spark's refusal of update mode for a Python data source's streaming writer (its write
    builder truncates, it does not take updates as appends)."""
    return StatestreamIllegalArgumentException(f"requirement failed: {name} does not support Update mode.")


#: the head of Spark's ``KAFKA_DATA_LOSS`` texts (the reason follows)
_DATA_LOSS_HEAD = (
    "Some data may have been lost because they are not available in Kafka any more;\n"
    "either the data was aged out by Kafka or the topic may have been deleted before all the data in the\n"
    "topic was processed.\n"
    "If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.\n"
    "Reason:"
)


class KafkaDataLossError(StatestreamIllegalStateException):
    """Spark's ``KAFKA_DATA_LOSS`` condition: the message has no ``[CLASS]`` prefix (Kafka's
    exceptions carry the plain text), the condition is ``condition`` and ``getCondition()``."""

    def __init__(self, sub: str, reason: str) -> None:
        self.condition = f"KAFKA_DATA_LOSS.{sub}"
        self.reason = reason
        super().__init__(f"{_DATA_LOSS_HEAD} {reason}")

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.condition

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        return "22000"


class KafkaUnreachableError(StatestreamIllegalStateException):
    """The brokers did not answer a metadata or offset request in time, or refused the
    client's login or TLS handshake."""


class ForeachUserFuncError(StatestreamError):
    """Spark's ``FOREACH_USER_FUNCTION_ERROR`` / ``FOREACH_BATCH_USER_FUNCTION_ERROR``: the user's
    sink code raised. ``reason`` is the user's failure as Spark shows it; the query's
    ``exception()`` shows the reason alone, as Spark unwraps these two errors there."""

    def __init__(self, error_class: str, sink: str, reason: str) -> None:
        message = (
            f"[{error_class}] An error occurred in the user provided function in {sink}. "
            f"Reason: {reason} SQLSTATE: 39000"
        )
        super().__init__(message)
        self.error_class = error_class
        self.reason = reason
        self._message = message

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return self.error_class

    getErrorClass = getCondition  # noqa: N815 - PySpark's name

    def getMessageParameters(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        return {"reason": self.reason}

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        return "39000"

    def unwrapped_message(self) -> str:
        """What ``query.exception()`` shows: Spark reports the cause of these errors."""
        return self.reason

    def __str__(self) -> str:
        return self._message


def foreach_user_function_error(reason: str) -> ForeachUserFuncError:
    """``FOREACH_USER_FUNCTION_ERROR`` with ``reason`` (a task's Python traceback)."""
    return ForeachUserFuncError("FOREACH_USER_FUNCTION_ERROR", "foreach sink", reason)


def foreach_batch_user_function_error(exc: BaseException) -> ForeachUserFuncError:
    """``FOREACH_BATCH_USER_FUNCTION_ERROR`` for ``exc`` raised by the user's function (Spark's
    text: the failure came back through the Python proxy of py4j)."""
    reason = "An exception was raised by the Python Proxy. Return Message: " + "".join(traceback.format_exception(exc))
    return ForeachUserFuncError("FOREACH_BATCH_USER_FUNCTION_ERROR", "foreach batch sink", reason)


# -- what every source and sink shares -----------------------------------------------------------------


def data_source_not_found_error(fmt: str) -> StatestreamError:
    """Spark's ``DATA_SOURCE_NOT_FOUND``: a ``format`` that no source or sink (built in or
    registered Python data source) has."""
    return StatestreamError(
        f"[DATA_SOURCE_NOT_FOUND] Failed to find the data source: {fmt}. Make sure the provider name is "
        "correct and the package is properly registered and compatible with your Spark version. SQLSTATE: 42K02"
    )


def user_schema_not_supported_error(provider: str) -> StatestreamUnsupportedOperationException:
    """A user-specified schema for a source whose schema is fixed (``provider``: Spark's class,
    ``RateStreamProvider``, ...)."""
    return StatestreamUnsupportedOperationException(f"{provider} source does not support user-specified schema.")


#: the head of Spark's ``JavaUtils.timeStringAs`` errors (the reason follows on the next line)
_TIME_STRING_FORMAT = (
    "Time must be specified as seconds (s), milliseconds (ms), microseconds (us), minutes (m or min), "
    "hour (h), or day (d). E.g. 50s, 100ms, or 250us."
)


def time_string_error(text: Any) -> StatestreamNumberFormatException:
    """Spark's ``JavaUtils.timeStringAs`` refusal of a time option (``maxFileAge``, ...)."""
    return StatestreamNumberFormatException(f"{_TIME_STRING_FORMAT}\nFailed to parse time string: {text}")


# -- rate, socket, table and Python data sources -----------------------------------------------------


def rate_option_not_positive_error(option: str, value: Any) -> StatestreamIllegalArgumentException:
    """A rate source's option (``rowsPerSecond``, ``rowsPerBatch``, ``numPartitions``) below 1."""
    return StatestreamIllegalArgumentException(f"Invalid value '{value}'. The option '{option}' must be positive")


def rate_option_negative_error(option: str, value: Any) -> StatestreamIllegalArgumentException:
    """A rate-micro-batch source's option (``startTimestamp``, ``advanceMillisPerBatch``) below 0."""
    return StatestreamIllegalArgumentException(f"Invalid value '{value}'. The option '{option}' must be non-negative")


def ramp_up_time_negative_error(value: Any) -> StatestreamIllegalArgumentException:
    """A rate source's ``rampUpTime`` below 0."""
    return StatestreamIllegalArgumentException(f"Invalid value '{value}'. The option 'rampUpTime' must not be negative")


def rate_ramp_up_overflow_error(rows_per_second: int, max_seconds: int, ramp_up_seconds: int) -> StatestreamArithmeticException:
    """A rate source whose ramp-up would take its offsets past a long."""
    return StatestreamArithmeticException(
        f"Integer overflow. Max offset with {rows_per_second} rowsPerSecond is "
        f"{max_seconds}, but 'rampUpTimeSeconds' is {ramp_up_seconds}."
    )


def rate_offset_overflow_error(rows_per_second: int, max_seconds: int, end_seconds: int) -> StatestreamArithmeticException:
    """A rate source that has run long enough for its offsets to pass a long."""
    return StatestreamArithmeticException(
        f"Integer overflow. Max offset with {rows_per_second} rowsPerSecond is "
        f"{max_seconds}, but it's {end_seconds} now."
    )


def socket_option_required_error(option: str) -> StatestreamAnalysisException:
    """A socket source without its ``host`` or ``port`` option."""
    return analysis_error(None, f'Set a {option} to read from with option("{option}", ...).')


def socket_include_timestamp_error() -> StatestreamAnalysisException:
    """A socket source's ``includeTimestamp`` that is neither true nor false."""
    return analysis_error(None, 'IncludeTimestamp must be set to either "true" or "false".')


def socket_lines_gone_error(first: int, last: int) -> StatestreamError:
    """A socket source asked again for lines it dropped when they were committed."""
    return StatestreamError(
        f"socket source: lines {first}..{last} were already committed and "
        "are gone (the socket source does not support recovery)"
    )


def socket_commit_out_of_order_error(committed: int, end: int) -> StatestreamError:
    """A socket source's commit of an offset below the one committed before."""
    return StatestreamError(f"Offsets committed out of order: {committed} followed by {end}")


def streaming_table_is_temp_view_error(name: str) -> StatestreamAnalysisException:
    """``readStream.table(name)`` of a temporary view that is not a streaming plan."""
    return analysis_error(
        None,
        f"{name} is not a temp view of streaming logical plan, please use batch API such as "
        "`DataFrameReader.table` to read it.",
    )


def python_data_source_broadcast_error(name: str) -> StatestreamError:
    """A Python data source whose pickled class PySpark registered as a broadcast (over 1 MB)."""
    return StatestreamError(
        f"The Python data source {name!r} was registered as a broadcast (its pickled class is over 1 MB); "
        "statestream cannot read it back. Make the class smaller (keep large objects out of its module)."
    )


# -- the file source -----------------------------------------------------------------------------------


def path_not_found_error(shown: str) -> StatestreamAnalysisException:
    """Spark's ``PATH_NOT_FOUND``: a file source's directory that does not exist (at ``load()``)."""
    return analysis_error("PATH_NOT_FOUND", f"[PATH_NOT_FOUND] Path does not exist: {shown}. SQLSTATE: 42K03", "42K03", path=shown)


#: Spark's text of a file source or sink without a path
_PATH_NOT_SPECIFIED = "'path' is not specified."


def source_path_not_specified_error() -> StatestreamIllegalArgumentException:
    """A file source without a path (Spark's text, without the error class the sink's has)."""
    return StatestreamIllegalArgumentException(_PATH_NOT_SPECIFIED)


def schema_required_error() -> StatestreamIllegalArgumentException:
    """A file source without a schema while schema inference is off."""
    return StatestreamIllegalArgumentException(
        "Schema must be specified when creating a streaming source DataFrame. If some files already "
        "exist in the directory, then depending on the file format you may be able to create a static "
        "DataFrame on that directory with 'spark.read.load(directory)' and infer schema from it."
    )


def file_source_boolean_option_error(raw: Any, name: str) -> StatestreamIllegalArgumentException:
    """A file source's boolean option that is neither true nor false."""
    return StatestreamIllegalArgumentException(f"Invalid value '{raw}' for option '{name}', must be 'true' or 'false'")


def file_source_positive_option_error(raw: Any, name: str) -> StatestreamIllegalArgumentException:
    """``maxFilesPerTrigger`` or ``maxBytesPerTrigger`` that is not a positive integer."""
    return StatestreamIllegalArgumentException(f"Invalid value '{raw}' for option '{name}', must be a positive integer")


def max_files_and_bytes_per_trigger_error() -> StatestreamIllegalArgumentException:
    """A file source with both per-trigger limits."""
    return StatestreamIllegalArgumentException("Options 'maxFilesPerTrigger' and 'maxBytesPerTrigger' can't be both set at the same time")


def clean_source_mode_error(raw: Any) -> StatestreamIllegalArgumentException:
    """A ``cleanSource`` that is not archive, delete or off."""
    return StatestreamIllegalArgumentException(f"Invalid mode for clean source option Some({raw}). Must be one of ARCHIVE,DELETE,OFF")


def archive_dir_required_error() -> StatestreamIllegalArgumentException:
    """``cleanSource=archive`` without ``sourceArchiveDir``."""
    return StatestreamIllegalArgumentException("Archive mode must be used with 'sourceArchiveDir' option.")


def archive_dir_other_file_system_error(source: str, archive: str) -> StatestreamIllegalArgumentException:
    """A ``sourceArchiveDir`` on another file system than the source's files (qualified paths)."""
    return StatestreamIllegalArgumentException(
        "requirement failed: Base archive path is located on a different file system than the source files. "
        f"source path: {source} / base archive path: {archive}"
    )


def archive_dir_matches_source_error() -> StatestreamIllegalArgumentException:
    """A ``sourceArchiveDir`` whose archived files could match the source's pattern."""
    return StatestreamIllegalArgumentException(
        "requirement failed: Base archive path cannot be set to the path where archived path can possibly "
        "match with source pattern. Ensure the base archive path doesn't match with source pattern in "
        "depth, where the depth is minimum of depth on both paths."
    )


def file_source_log_behind_error(log: str, log_offset: int, reached: int, missing: str) -> CheckpointError:
    """A file source's log that ends below the batch the offset log has reached: its last entry
    (``missing``) was lost, and its files would be read again."""
    return CheckpointError(
        f"The file source's log {log} ends at batch {log_offset}, but the offset log "
        f"has reached batch {reached}: the log file {missing} is missing (its files would be read again)"
    )


def _concurrent_log_update_text(batch: int, file: str) -> str:
    return f"Concurrent update to the log. Multiple streaming jobs detected for {batch} ({file})"


def file_source_concurrent_update_error(batch: int, file: str) -> StatestreamError:
    """A file source's log entry written by another run first (two runs on one checkpoint)."""
    return StatestreamError(_concurrent_log_update_text(batch, file))


def file_source_log_entry_missing_error(file: str) -> StatestreamError:
    """A file source's log entry that a batch's files are read from is not there."""
    return StatestreamError(f"file source log entry {file} is missing")


def file_source_invalid_batch_error(want: list[str], got: list[str]) -> StatestreamError:
    """Spark's assertion on a batch's columns: partition directories the source did not have
    when it was created."""
    return StatestreamError(f"assertion failed: Invalid batch: {','.join(want)} != {','.join(got)}")


# -- sinks -----------------------------------------------------------------------------------------------


def sink_partitioning_not_supported_error(name: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1197``: ``partitionBy`` with the memory, ``foreach`` or
    ``foreachBatch`` sink (``name``: as Spark's error shows it)."""
    return analysis_error("_LEGACY_ERROR_TEMP_1197", f"'{name}' does not support partitioning.", operation=name)


def sink_path_not_specified_error() -> StatestreamIllegalArgumentException:
    """Spark's ``_LEGACY_ERROR_TEMP_2047``: a file sink without a path."""
    return StatestreamIllegalArgumentException(_PATH_NOT_SPECIFIED, "_LEGACY_ERROR_TEMP_2047", {})


def file_sink_output_mode_error(fmt: str, output_mode: str) -> StatestreamAnalysisException:
    """Spark's ``STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE``: a file sink in another mode
    than append, raised by ``start()``."""
    mode = output_mode.lower()
    return analysis_error(
        "STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE",
        f"[STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE] Invalid streaming output mode: {mode}. "
        f"This output mode is not supported in Data Source {fmt}. SQLSTATE: 42KDE",
        "42KDE",
        outputMode=mode,
        className=fmt,
    )


def file_sink_log_behind_error(log: str, latest: int, checkpoint: str, committed: int, missing: str) -> CheckpointError:
    """A file sink's log that ends below the checkpoint's last committed batch: its last entry
    (``missing``) was lost, and readers would not see that batch's output."""
    return CheckpointError(
        f"The file sink's log {log} ends at batch {latest}, but the checkpoint "
        f"{checkpoint} committed batch {committed}: the log file "
        f"{missing} is missing, so readers would not see that output"
    )


def file_sink_concurrent_update_error(batch_id: int, file: str) -> CheckpointError:
    """A file sink's log entry written by another run first (two runs on one checkpoint)."""
    return CheckpointError(_concurrent_log_update_text(batch_id, file))


def memory_sink_query_name_error() -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1194``: ``format("memory")`` without ``queryName``."""
    return analysis_error("_LEGACY_ERROR_TEMP_1194", "queryName must be specified for memory sink.")


def memory_sink_recovery_error(offsets_path: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1299``: a memory sink in append or update mode whose
    checkpoint has offsets already (``offsets_path`` as Hadoop's ``Path`` prints it)."""
    return analysis_error(
        "_LEGACY_ERROR_TEMP_1299",
        "This query does not support recovering from checkpoint location. "
        f"Delete {offsets_path} to start over.",
        checkpointPath=offsets_path,
    )


def table_temp_view_error(name: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1190``: ``toTable`` of a temporary view."""
    return analysis_error("_LEGACY_ERROR_TEMP_1190", f"Temporary view {name} doesn't support streaming write.", tableName=name)


def table_view_error(name: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1191``: ``toTable`` of a view."""
    return analysis_error("_LEGACY_ERROR_TEMP_1191", f"Streaming into views {name} is not supported.", tableName=name)


def table_provider_mismatch_error(source: str, name: str, provider: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_1192``: ``toTable`` with a ``format`` other than the table's."""
    return analysis_error(
        "_LEGACY_ERROR_TEMP_1192",
        f"The input source({source}) is different from the table {name}'s data source provider({provider}).",
        source=source,
        tableName=name,
        provider=provider,
    )


def table_without_provider_error(name: str) -> StatestreamError:
    """``toTable`` of a table the catalog knows no data source provider of."""
    return StatestreamError(f"table {name} has no data source provider: statestream cannot stream into it")


def table_not_file_based_error(file_formats: tuple[str, ...], name: str, provider: str) -> StatestreamError:
    """``toTable`` of a table that is not one of the file formats statestream writes."""
    return StatestreamError(
        f"statestream streams into file-based tables only ({', '.join(file_formats)}); "
        f"table {name} is a '{provider}' table"
    )


def table_without_location_error(name: str) -> StatestreamError:
    """``toTable`` of a table without a location."""
    return StatestreamError(f"table {name} has no location: statestream cannot stream into it")


# -- Kafka's options (Spark's KafkaSourceProvider and KafkaSinkProvider) -------------------------------


def kafka_fixed_schema_error() -> StatestreamIllegalArgumentException:
    """A user-specified schema for the Kafka source."""
    return StatestreamIllegalArgumentException("requirement failed: Kafka source has a fixed schema and cannot be set with a custom one")


def kafka_time_string_error(suffix: str) -> StatestreamIllegalArgumentException:
    """A Kafka time option (``maxTriggerDelay``) with a unit Spark's ``JavaUtils`` lacks."""
    return StatestreamIllegalArgumentException(f'{_TIME_STRING_FORMAT}\nInvalid suffix: "{suffix}"')


def kafka_assign_json_error(text: str) -> StatestreamIllegalArgumentException:
    """An ``assign`` option that is not Spark's JSON of topic partitions."""
    return StatestreamIllegalArgumentException('Expected e.g. {"topicA":[0,1],"topicB":[0,1]}, got ' + text)


def kafka_offsets_json_error(text: str) -> StatestreamIllegalArgumentException:
    """A ``startingOffsets`` that is not Spark's JSON of partition offsets."""
    return StatestreamIllegalArgumentException('Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got ' + text)


def kafka_timestamps_json_error(text: str) -> StatestreamIllegalArgumentException:
    """A ``startingOffsetsByTimestamp`` that is not Spark's JSON of partition timestamps."""
    return StatestreamIllegalArgumentException(
        'Expected e.g. {"topicA": {"0": 123456789, "1": 123456789}, "topicB": {"0": 123456789, "1": 123456789}}, got ' + text
    )


def kafka_no_match_strategy_error(strategy: str) -> StatestreamIllegalArgumentException:
    """A ``startingOffsetsByTimestampStrategy`` other than error or latest (Java's enum lookup)."""
    return StatestreamIllegalArgumentException(f"No enum constant StrategyOnNoMatchStartingOffset.{strategy.upper()}")


def kafka_single_long_error(raw: str) -> StatestreamIllegalArgumentException:
    """A ``startingTimestamp`` that is not a long."""
    return StatestreamIllegalArgumentException(f"Expected a single long value, got {raw}")


def kafka_ending_offsets_error() -> StatestreamIllegalArgumentException:
    """``endingOffsets`` on a streaming Kafka source."""
    return StatestreamIllegalArgumentException("ending offset not valid in streaming queries")


def kafka_ending_timestamp_error() -> StatestreamIllegalArgumentException:
    """``endingOffsetsByTimestamp`` on a streaming Kafka source."""
    return StatestreamIllegalArgumentException("ending timestamp not valid in streaming queries")


def kafka_no_strategy_error(keys: tuple[str, ...]) -> StatestreamIllegalArgumentException:
    """A Kafka source with none of ``subscribe``, ``subscribePattern``, ``assign`` (``keys``)."""
    return StatestreamIllegalArgumentException(
        "One of the following options must be specified for Kafka source: " + ", ".join(keys) + ". See the docs for more details."
    )


def kafka_several_strategies_error(keys: tuple[str, ...]) -> StatestreamIllegalArgumentException:
    """A Kafka source with more than one of ``subscribe``, ``subscribePattern``, ``assign``."""
    return StatestreamIllegalArgumentException(
        "Only one of the following options can be specified for Kafka source: " + ", ".join(keys) + ". See the docs for more details."
    )


def kafka_empty_assign_error(value: str) -> StatestreamIllegalArgumentException:
    """An ``assign`` option that is not a JSON object."""
    return StatestreamIllegalArgumentException(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")


def kafka_empty_subscribe_error(value: str) -> StatestreamIllegalArgumentException:
    """A ``subscribe`` option without a topic."""
    return StatestreamIllegalArgumentException(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")


def kafka_empty_pattern_error(value: str) -> StatestreamIllegalArgumentException:
    """A blank ``subscribePattern``."""
    return StatestreamIllegalArgumentException(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'")


def kafka_min_partitions_error() -> StatestreamIllegalArgumentException:
    """A ``minPartitions`` below 1."""
    return StatestreamIllegalArgumentException("minPartitions must be positive")


def kafka_auto_offset_reset_error() -> StatestreamIllegalArgumentException:
    """``kafka.auto.offset.reset`` on a Kafka source (Spark's text, blanks and all)."""
    return StatestreamIllegalArgumentException(
        "\nKafka option 'auto.offset.reset' is not supported.\n"
        "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'\n"
        "to specify where to start. Structured Streaming manages which offsets are consumed\n"
        "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
        "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
        "'startingoffsets' only applies when a new Streaming query is started, and\n"
        "that resuming will always pick up from where the query left off. See the docs for more\n"
        "details.\n         "
    )


def kafka_deserializer_error(which: str) -> StatestreamIllegalArgumentException:
    """``kafka.key.deserializer`` or ``kafka.value.deserializer`` (``which``: key, value) on a
    Kafka source: it reads bytes."""
    return StatestreamIllegalArgumentException(
        f"Kafka option '{which}.deserializer' is not supported as {which}s are deserialized as byte arrays with "
        f"ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the {which}s."
    )


#: Spark's texts of a serializer option on the Kafka sink (its wording differs between the two)
_SERIALIZER_TEXTS = {
    "key": "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer.",
    "value": "Kafka option 'value.serializer' is not supported as value are serialized with ByteArraySerializer.",
}


def kafka_serializer_error(which: str) -> StatestreamIllegalArgumentException:
    """``kafka.key.serializer`` or ``kafka.value.serializer`` (``which``: key, value) on the Kafka
    sink: it writes bytes."""
    return StatestreamIllegalArgumentException(_SERIALIZER_TEXTS[which])


def kafka_option_not_supported_error(option: str) -> StatestreamIllegalArgumentException:
    """A ``kafka.*`` option Spark manages itself (``enable.auto.commit``, ``interceptor.classes``)."""
    return StatestreamIllegalArgumentException(f"Kafka option '{option}' is not supported")


def kafka_bootstrap_servers_required_error() -> StatestreamIllegalArgumentException:
    """A Kafka source without ``kafka.bootstrap.servers``."""
    return StatestreamIllegalArgumentException("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")


def kafka_min_above_max_offsets_error(min_per: int, max_per: int) -> StatestreamIllegalArgumentException:
    """A ``minOffsetsPerTrigger`` above ``maxOffsetsPerTrigger``."""
    return StatestreamIllegalArgumentException(f"The value of minOffsetPerTrigger({min_per}) is higher than the maxOffsetsPerTrigger({max_per}).")


def kafka_subscribe_pattern_error(pattern: str, cause: BaseException) -> StatestreamIllegalArgumentException:
    """A ``subscribePattern`` that is not a regular expression."""
    return StatestreamIllegalArgumentException(f"Invalid subscribePattern '{pattern}': {cause}")


# -- Kafka's client and brokers --------------------------------------------------------------------------


def kafka_client_missing_error(what: str) -> StatestreamError:
    """A Kafka source or sink (``what``) without the confluent-kafka package installed."""
    return StatestreamError(
        f"{what} needs the confluent-kafka package, which is not installed: pip install 'statestream[kafka]' "
        "(on a cluster, on every executor too)"
    )


def kafka_trust_store_type_error(kind: str) -> StatestreamError:
    """A ``kafka.ssl.truststore.location`` of a kind (JKS, ...) librdkafka cannot read."""
    return StatestreamError(
        f"Kafka option 'kafka.ssl.truststore.location' names a {kind} trust store, which this Kafka client "
        "(librdkafka) cannot read: give the CA certificates as a PEM file, with 'kafka.ssl.truststore.type' "
        "set to PEM or as 'kafka.ssl.ca.location' (keytool -exportcert -rfc writes one from a JKS store)"
    )


def kafka_key_store_type_error(kind: str) -> StatestreamError:
    """A ``kafka.ssl.keystore.location`` of a kind (JKS, ...) librdkafka cannot read."""
    return StatestreamError(
        f"Kafka option 'kafka.ssl.keystore.location' names a {kind} key store, which this Kafka client "
        "(librdkafka) cannot read: convert it to PKCS12 (keytool -importkeystore -deststoretype PKCS12) "
        "or give PEM files as 'kafka.ssl.certificate.location' and 'kafka.ssl.key.location'"
    )


def kafka_refused_error(servers: str, what: str, fatal: object) -> KafkaUnreachableError:
    """The brokers (``servers``) refused the client's login or TLS handshake (``fatal``: the
    client's error) while it tried ``what``."""
    return KafkaUnreachableError(
        f"Kafka: the brokers at {servers!r} refused the connection to {what}: {fatal} "
        "(check the options 'kafka.security.protocol', 'kafka.sasl.*' and 'kafka.ssl.*')"
    )


def kafka_no_answer_error(servers: str, what: str, timeout_s: float, cause: BaseException, last: object) -> KafkaUnreachableError:
    """The brokers did not answer ``what`` within ``timeout_s`` (``last``: the client's last
    error, if any)."""
    seen = f" (the client's last error: {last})" if last else ""
    return KafkaUnreachableError(
        f"Kafka: no answer from the brokers at {servers!r} (option 'kafka.bootstrap.servers') to {what} "
        f"within {timeout_s:g} s: {cause}{seen}"
    )


def kafka_metadata_unavailable_error(troubled: Mapping[str, object]) -> StatestreamIllegalStateException:
    """Topics whose metadata (``troubled``: topic -> the broker's error) stayed unavailable
    after the retries."""
    return StatestreamIllegalStateException(
        "Kafka: metadata of " + ", ".join(f"{n!r} ({e})" for n, e in sorted(troubled.items())) + " not available"
    )


def kafka_no_offset_for_timestamp_error(tp: str, timestamp: int) -> StatestreamIllegalArgumentException:
    """A starting timestamp no record of partition ``tp`` reaches, with the error strategy."""
    return StatestreamIllegalArgumentException(f"No offset matched from request of topic-partition {tp} and timestamp {timestamp}.")


def kafka_timestamp_partitions_mismatch_error(specified: str, assigned: str) -> StatestreamIllegalStateException:
    """Spark's ``KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED`` (Kafka's texts carry no class
    prefix): ``startingOffsetsByTimestamp`` for other partitions than those assigned."""
    return StatestreamIllegalStateException(
        "Partitions specified for Kafka timestamp based start offsets don't match what are assigned. Maybe topic "
        "partitions are created \nor deleted while the query is running, or you didn't specify all the partitions.\n"
        f"Specified: {specified} Assigned: {assigned}"
    )


def kafka_starting_offsets_partitions_mismatch_error(specified: str, assigned: str) -> StatestreamIllegalStateException:
    """Spark's assertion: specific ``startingOffsets`` for other partitions than those assigned."""
    return StatestreamIllegalStateException(
        "assertion failed: If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
        "Use -1 for latest, -2 for earliest, if you don't care.\n"
        f"Specified: {specified} Assigned: {assigned}"
    )


def kafka_partition_missing_error(tp: str) -> StatestreamIllegalStateException:
    """A partition whose offsets were asked for does not exist (any more)."""
    return StatestreamIllegalStateException(f"Kafka: partition {tp} does not exist (any more)")


def kafka_initial_offsets_corrupt_error(where: str, cause: BaseException) -> CheckpointError:
    """The Kafka source's initial offsets file that does not parse."""
    return CheckpointError(f"The Kafka source's initial offsets file {where} is corrupt: {cause}")


def kafka_fetch_timeout_error(offset: int, timeout_ms: int) -> StatestreamIllegalStateException:
    """A task that got no record for ``offset`` within ``pollTimeoutMs``."""
    return StatestreamIllegalStateException(f"Cannot fetch record for offset {offset} in {timeout_ms} milliseconds")


def kafka_offset_range_lost_error(start: int, end: int, tp: str, group_id: str) -> KafkaDataLossError:
    """Spark's ``KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE``: records ``[start, end)`` of a
    batch's range are gone from Kafka."""
    return KafkaDataLossError(
        "COULD_NOT_READ_OFFSET_RANGE",
        f"Could not read records in offset [{start}, {end}) for topic partition {tp}\n"
        f"with consumer group {group_id}.",
    )


def kafka_available_now_partitions_changed_error(prefetched: str, end: str) -> StatestreamError:
    """An ``availableNow`` run whose partitions changed since it fetched its end offsets."""
    return StatestreamError(
        "Kafka data source in Trigger.AvailableNow should provide the same topic partitions in pre-fetched offset to end "
        "offset for each microbatch. The error could be transient - restart your query, and report if you still see the "
        f"same issue.\ntopic-partitions for pre-fetched offset: {prefetched}, topic-partitions for end offset: "
        f"{end}."
    )


def kafka_available_now_partitions_lost_error(latest: str, end: str) -> StatestreamError:
    """An ``availableNow`` run whose partitions were lost while it ran."""
    return StatestreamError(
        "Some of partitions in Kafka topic(s) have been lost during running query with Trigger.AvailableNow. The error "
        "could be transient - restart your query, and report if you still see the same issue.\ntopic-partitions for "
        f"latest offset: {latest}, topic-partitions for end offset: {end}"
    )


def kafka_available_now_offsets_behind_error(latest: str, end: str) -> StatestreamError:
    """An ``availableNow`` run whose partitions report less than its end offsets."""
    return StatestreamError(
        "Some of partitions in Kafka topic(s) report available offset which is less than end offset during running query "
        "with Trigger.AvailableNow. The error could be transient - restart your query, and report if you still see the "
        f"same issue.\nlatest offset: {latest}, end offset: {end}"
    )


# -- the Kafka sink ------------------------------------------------------------------------------------


def kafka_missing_bootstrap_servers_error() -> StatestreamError:
    """Spark's ``MISSING_KAFKA_OPTION``: the Kafka sink without ``kafka.bootstrap.servers``."""
    return StatestreamError(
        "[MISSING_KAFKA_OPTION] Kafka option bootstrap.servers is not set. Please make sure it is set and retry. "
        "SQLSTATE: 42KDF"
    )


def kafka_null_topic_error() -> StatestreamIllegalStateException:
    """A row for the Kafka sink with a null topic and no ``topic`` option: Spark's
    ``KAFKA_NULL_TOPIC_IN_DATA``, whose text (as Spark's Kafka errors do) has no ``[CLASS]``
    prefix, the class being the exception's condition.

    >>> kafka_null_topic_error().getCondition()
    'KAFKA_NULL_TOPIC_IN_DATA'
    """
    return StatestreamIllegalStateException(
        "The Kafka message data sent to the producer contains a null topic. Use the `topic` option for setting a default topic.",
        "KAFKA_NULL_TOPIC_IN_DATA",
    )


def _kafka_output_error(text: str) -> StatestreamAnalysisException:
    """Spark's ``_LEGACY_ERROR_TEMP_3080``: the Kafka sink's ``validateQuery`` refusal."""
    return analysis_error("_LEGACY_ERROR_TEMP_3080", text, msg=text)


def kafka_output_topic_required_error() -> StatestreamAnalysisException:
    """The Kafka sink's stream has no ``topic`` column and there is no ``topic`` option."""
    return _kafka_output_error("topic option required when no 'topic' attribute is present. Use the topic option for setting a topic.")


def kafka_output_value_required_error() -> StatestreamAnalysisException:
    """The Kafka sink's stream has no ``value`` column."""
    return _kafka_output_error("Required attribute 'value' not found")


def kafka_output_type_error(name: str, type_text: str, allowed: str) -> StatestreamAnalysisException:
    """A column of the Kafka sink's stream (``name``: topic, key, value, headers, partition)
    whose type (``type_text``) is not one the sink takes (``allowed``)."""
    return _kafka_output_error(f"{name} attribute unsupported type {type_text}. {name} must be a(n) {allowed}")
