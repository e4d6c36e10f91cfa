"""Errors of the operator tools that Spark has too, with Spark's error classes, SQLSTATEs and
texts: the state data sources (``spark.read.format("statestore")``, ``"state-metadata"``: Spark's
``STDS_*``) and the offline state repartition (``STATE_REPARTITION_INVALID_*``).

>>> error = state_source_required_option_error("path")
>>> error.getCondition(), error.getSqlState(), str(error)
('STDS_REQUIRED_OPTION_UNSPECIFIED', '42601', "[STDS_REQUIRED_OPTION_UNSPECIFIED] 'path' must be specified. SQLSTATE: 42601")
"""

from __future__ import annotations

from typing import Any

from statestream.errors.spark_shaped import (
    StatestreamIllegalArgumentException,
    StatestreamIllegalStateException,
    StatestreamSparkRuntimeException,
    spark_error_text,
)

__all__ = [
    "state_source_required_option_error",
    "state_source_conflicting_options_error",
    "state_source_option_negative_error",
    "state_source_option_empty_error",
    "state_source_boolean_option_error",
    "state_source_join_side_error",
    "state_source_change_end_before_start_error",
    "state_source_change_feed_only_option_error",
    "state_source_snapshot_start_after_batch_error",
    "state_source_no_committed_batch_error",
    "state_source_schema_unreadable_error",
    "state_source_offset_log_unavailable_error",
    "state_source_change_feed_across_repartition_error",
    "state_source_no_partition_error",
    "state_source_snapshot_partition_not_found_error",
    "state_source_no_state_variables_error",
    "state_source_timers_without_time_mode_error",
    "state_source_state_variable_not_defined_error",
    "state_source_requirement_failed_error",
    "state_source_option_needs_transform_with_state_error",
    "state_source_key_not_decodable_error",
    "repartition_invalid_parameter_error",
    "repartition_invalid_checkpoint_error",
]


# -- the state data sources (Spark's STDS_* errors, SparkRuntimeExceptions) -----------------------

#: SQLSTATEs of the state sources' error classes
_SQL_STATES = {
    "STDS_INVALID_OPTION_VALUE": "42616",
    "STDS_REQUIRED_OPTION_UNSPECIFIED": "42601",
    "STDS_CONFLICT_OPTIONS": "42613",
    "STDS_COMMITTED_BATCH_UNAVAILABLE": "KD006",
    "STDS_OFFSET_LOG_UNAVAILABLE": "KD006",
    "STDS_FAILED_TO_READ_STATE_SCHEMA": "42K03",
    "STDS_NO_PARTITION_DISCOVERED_IN_STATE_STORE": "KD006",
    "CANNOT_LOAD_STATE_STORE": "58030",
}


def _error(error_class: str, message: str, params: dict[str, str]) -> StatestreamSparkRuntimeException:
    sql_state = _SQL_STATES[error_class.split(".")[0]]
    return StatestreamSparkRuntimeException(spark_error_text(error_class, message, sql_state), error_class, params, sql_state)


def _invalid(option: str, sub: str, message: str) -> StatestreamSparkRuntimeException:
    params = {"optionName": option} if sub != "WITH_MESSAGE" else {"optionName": option, "message": message}
    return _error(f"STDS_INVALID_OPTION_VALUE.{sub}", f"Invalid value for source option '{option}': {message}", params)


def state_source_required_option_error(option: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_REQUIRED_OPTION_UNSPECIFIED``: a state source read without ``option``
    (``path``, ``changeStartBatchId``, ...)."""
    return _error("STDS_REQUIRED_OPTION_UNSPECIFIED", f"'{option}' must be specified.", {"optionName": option})


def state_source_conflicting_options_error(*options: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_CONFLICT_OPTIONS``: a state source read with ``options`` that exclude each other."""
    listed = "[" + ", ".join(f"'{o}'" for o in options) + "]"
    return _error("STDS_CONFLICT_OPTIONS", f"The options {listed} cannot be specified together. Please specify the one.", {"options": listed})


def state_source_option_negative_error(option: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.IS_NEGATIVE``: a batch, operator or partition id below 0."""
    return _invalid(option, "IS_NEGATIVE", "cannot be negative.")


def state_source_option_empty_error(option: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.IS_EMPTY``: a blank ``storeName``."""
    return _invalid(option, "IS_EMPTY", "cannot be empty.")


def state_source_boolean_option_error(option: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE`` for a boolean option (one Spark checks
    itself) that is neither true nor false."""
    return _invalid(option, "WITH_MESSAGE", "Boolean value is expected")


def state_source_join_side_error() -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE`` for a ``joinSide`` other than left,
    right or none."""
    return _invalid("joinSide", "WITH_MESSAGE", "Valid values are left,right,none")


def state_source_change_end_before_start_error(change_end: int) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: a change feed whose end batch
    (``change_end``, given or the last committed) is before its start batch."""
    return _invalid(
        "changeEndBatchId", "WITH_MESSAGE",
        "changeEndBatchId cannot be smaller than changeStartBatchId. Please check the input to changeEndBatchId, "
        f"or if you are using its default value, make sure that changeStartBatchId is less than {change_end}.",
    )


def state_source_change_feed_only_option_error(option: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: a change feed option without
    ``readChangeFeed``."""
    return _invalid(option, "WITH_MESSAGE", "Only specify this option when readChangeFeed is set to true.")


def state_source_snapshot_start_after_batch_error(batch_id: int) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: a ``snapshotStartBatchId`` after the
    batch read."""
    return _invalid("snapshotStartBatchId", "WITH_MESSAGE", f"value should be less than or equal to {batch_id}")


def state_source_no_committed_batch_error(location: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_COMMITTED_BATCH_UNAVAILABLE``: the checkpoint has no committed batch (or
    not the one asked for)."""
    return _error(
        "STDS_COMMITTED_BATCH_UNAVAILABLE",
        f"No committed batch found, checkpoint location: {location}. Ensure that the query has run and committed any "
        "microbatch before stopping.",
        {"checkpointLocation": location},
    )


def state_source_schema_unreadable_error(source_options: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_FAILED_TO_READ_STATE_SCHEMA`` (``source_options``: the options as Spark
    prints them)."""
    return _error(
        "STDS_FAILED_TO_READ_STATE_SCHEMA",
        "Failed to read the state schema. Either the file does not exist, or the file is corrupted. "
        f"options: {source_options}.\nRerun the streaming query to construct the state schema, and report to the "
        "corresponding communities or vendors if the error persists.",
        {"sourceOptions": source_options},
    )


def state_source_offset_log_unavailable_error(batch_id: int, location: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_OFFSET_LOG_UNAVAILABLE``: the offset log has no entry of the batch read."""
    return _error(
        "STDS_OFFSET_LOG_UNAVAILABLE",
        f"The offset log for {batch_id} does not exist, checkpoint location: {location}.\nPlease specify the "
        "batch ID which is available for querying - you can query the available batch IDs via using state metadata "
        "data source.",
        {"batchId": str(batch_id), "checkpointLocation": location},
    )


def state_source_change_feed_across_repartition_error(
    option: str, batch: int, before: object, after: object
) -> StatestreamSparkRuntimeException:
    """``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE`` of a change feed over a repartition batch
    (``before`` and ``after``: the partition counts), whose changes statestream cannot show."""
    return _invalid(
        option, "WITH_MESSAGE",
        f"the change feed cannot span batch {batch}, where the state was repartitioned from "
        f"{before} to {after} "
        f"partitions. Read the changes up to batch {batch - 1}, or from batch {batch + 1}.",
    )


def state_source_no_partition_error(source_options: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_NO_PARTITION_DISCOVERED_IN_STATE_STORE``."""
    return _error(
        "STDS_NO_PARTITION_DISCOVERED_IN_STATE_STORE",
        f"The state does not have any partition. Please double check that the query points to the valid state. "
        f"options: {source_options}",
        {"sourceOptions": source_options},
    )


def state_source_snapshot_partition_not_found_error(
    partition_id: int, operator_id: int, location: str
) -> StatestreamSparkRuntimeException:
    """Spark's ``CANNOT_LOAD_STATE_STORE.SNAPSHOT_PARTITION_ID_NOT_FOUND`` (``location``: the
    state directory as a Hadoop Path prints it)."""
    return _error(
        "CANNOT_LOAD_STATE_STORE.SNAPSHOT_PARTITION_ID_NOT_FOUND",
        f"An error occurred during loading state. Partition id {partition_id} not found for state of "
        f"operator {operator_id} at {location}.",
        {"snapshotPartitionId": str(partition_id), "operatorId": str(operator_id), "checkpointLocation": location},
    )


def state_source_no_state_variables_error() -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: a transformWithState with no state
    variable to read."""
    return _invalid("stateVarName", "WITH_MESSAGE", "No state variable names are defined for the transformWithState operator")


def state_source_timers_without_time_mode_error() -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: ``readRegisteredTimers`` of a
    transformWithState without a time mode."""
    return _invalid("readRegisteredTimers", "WITH_MESSAGE", "Registered timers are not available in TimeMode=None.")


def state_source_state_variable_not_defined_error(name: str) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: a ``stateVarName`` the
    transformWithState does not declare."""
    return _invalid("stateVarName", "WITH_MESSAGE", f"State variable {name} is not defined for the transformWithState operator.")


def state_source_requirement_failed_error() -> StatestreamIllegalArgumentException:
    """Spark's bare ``require`` failure: a transformWithState option on an operator that has not
    exactly one store of the name read."""
    return StatestreamIllegalArgumentException("requirement failed")


def state_source_option_needs_transform_with_state_error(option: str, operator_name: object) -> StatestreamSparkRuntimeException:
    """Spark's ``STDS_INVALID_OPTION_VALUE.WITH_MESSAGE``: ``stateVarName`` or
    ``readRegisteredTimers`` on an operator (``operator_name``) that is not a transformWithState."""
    what = "Providing state variable names" if option == "stateVarName" else "Providing readRegisteredTimers=true"
    return _invalid(
        option, "WITH_MESSAGE",
        f"{what} is only supported with the transformWithState operator. Found operator={operator_name}. Please remove "
        "this option and re-run the query.",
    )


def state_source_key_not_decodable_error(type_: object, operator_id: int) -> StatestreamIllegalArgumentException:
    """A deduplication key column (of Spark type ``type_``) whose binary-comparable bytes the
    state reader cannot decode yet."""
    return StatestreamIllegalArgumentException(
        f"the state reader cannot show the deduplication key column of type {type_!r} of operator "
        f"{operator_id} yet: statestream stores it as bytes (binary comparable) and has no decoding for it"
    )


# -- the offline state repartition (Spark's STATE_REPARTITION_INVALID_*) ----------------------------

_PARAMETER_TEXTS = {
    "IS_NULL": "cannot be null.",
    "IS_EMPTY": "cannot be empty.",
    "IS_NOT_GREATER_THAN_ZERO": "must be greater than zero.",
}
_CHECKPOINT_TEXTS = {
    "NO_COMMITTED_BATCH": (
        "There is no committed microbatch. Make sure the streaming query has successfully completed at least one "
        "microbatch before repartitioning."
    ),
    "NO_BATCH_FOUND": (
        "No microbatch has been recorded in the checkpoint location. Make sure the streaming query has successfully "
        "completed at least one microbatch before repartitioning."
    ),
    "LAST_BATCH_FAILED": (
        "The last batch ID <lastBatchId> didn't finish successfully. Please make sure the streaming query finishes "
        "successfully, before repartitioning.\nIf using ProcessingTime trigger, you can use AvailableNow trigger instead, "
        "which will make sure the query terminates successfully by itself.\nIf you want to skip this check, set "
        "enforceExactlyOnceSink parameter in repartition to false.\nBut this can cause duplicate output records from the "
        "failed batch when using exactly-once sinks."
    ),
    "LAST_BATCH_ABANDONED_REPARTITION": (
        "The last batch ID <lastBatchId> is a repartition batch with <lastBatchShufflePartitions> shuffle partitions and "
        "didn't finish successfully.\nYou're now requesting to repartition to <numPartitions> shuffle partitions.\nPlease "
        "retry with the same number of shuffle partitions as the previous attempt.\nOnce that completes successfully, you "
        "can repartition to another number of shuffle partitions."
    ),
    "SHUFFLE_PARTITIONS_ALREADY_MATCH": (
        "The number of shuffle partitions in the last committed batch (id=<batchId>) is the same as the requested "
        "<numPartitions> partitions.\nHence, already has the requested number of partitions, so no-op."
    ),
    "OFFSET_SEQ_NOT_FOUND": (
        "Offset sequence entry for batch ID <batchId> not found. You might have set a very low value for\n"
        "'spark.sql.streaming.minBatchesToRetain' config during the streaming query execution or you deleted files in the "
        "checkpoint location."
    ),
    "MISSING_OFFSET_SEQ_METADATA": (
        "The OffsetSeq (v<version>) metadata is missing for batch ID <batchId>. Please make sure the checkpoint is from a "
        "supported Spark version (Spark 4.0+)."
    ),
    "UNSUPPORTED_STATEFUL_OPERATOR": (
        "Unsupported stateful operator <operatorName>. Please use a checkpoint with supported stateful operators."
    ),
}
# Spark's error-conditions (the templates are facts of its API: the same texts, reworded nowhere)
_PARAMETER_HEAD = "The repartition parameter <parameter> is invalid:"
_CHECKPOINT_HEAD = "The provided checkpoint location '<checkpointLocation>' is in an invalid state."
_PARAMETER_SQL_STATE = "42616"
_CHECKPOINT_SQL_STATE = "55019"


def _render(template: str, params: dict[str, str]) -> str:
    for name, value in params.items():
        template = template.replace(f"<{name}>", value)
    return template


def repartition_invalid_parameter_error(sub: str, parameter: str) -> StatestreamIllegalArgumentException:
    """Spark's ``STATE_REPARTITION_INVALID_PARAMETER.<sub>`` (a ``SparkIllegalArgumentException``):
    ``sub`` is ``IS_NULL``, ``IS_EMPTY`` or ``IS_NOT_GREATER_THAN_ZERO``."""
    params = {"parameter": parameter}
    cls = f"STATE_REPARTITION_INVALID_PARAMETER.{sub}"
    text = _render(f"{_PARAMETER_HEAD} {_PARAMETER_TEXTS[sub]}", params)
    return StatestreamIllegalArgumentException(spark_error_text(cls, text, _PARAMETER_SQL_STATE), cls, params, _PARAMETER_SQL_STATE)


def repartition_invalid_checkpoint_error(sub: str, location: str, **extra: Any) -> StatestreamIllegalStateException:
    """Spark's ``STATE_REPARTITION_INVALID_CHECKPOINT.<sub>`` (a ``SparkIllegalStateException``):
    ``sub`` names the checkpoint's state (``NO_COMMITTED_BATCH``, ``LAST_BATCH_FAILED``, ...),
    ``extra`` the parameters of its text (``lastBatchId``, ``batchId``, ...)."""
    params = {"checkpointLocation": location, **{k: str(v) for k, v in extra.items()}}
    cls = f"STATE_REPARTITION_INVALID_CHECKPOINT.{sub}"
    text = _render(f"{_CHECKPOINT_HEAD} {_CHECKPOINT_TEXTS[sub]}", params)
    return StatestreamIllegalStateException(spark_error_text(cls, text, _CHECKPOINT_SQL_STATE), cls, params, _CHECKPOINT_SQL_STATE)
