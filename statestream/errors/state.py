"""Errors of the state store and of a restart the stored state refuses.

Pure module: no PySpark import (``state/`` raises these). The restart errors carry Spark's error
class, SQLSTATE, parameters and text, so that a user sees what Spark's engine would say.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from statestream.errors.base import StatestreamError

__all__ = [
    "StateStoreError",
    "schema_must_be_nullable_error",
    "key_type_unsupported_error",
    "key_value_not_encodable_error",
    "key_column_count_mismatch_error",
    "key_structure_mismatch_error",
    "dedup_key_list_type_error",
    "state_file_missing_error",
    "state_file_read_error",
    "state_file_corrupt_error",
    "state_file_not_statestream_error",
    "state_file_truncated_error",
    "state_file_format_version_error",
    "state_file_unreadable_error",
    "state_file_schema_mismatch_error",
    "state_file_without_key_count_error",
    "state_version_negative_error",
    "state_version_zero_replace_error",
    "operator_properties_corrupt_error",
    "state_schema_file_corrupt_error",
    "state_schema_file_without_version_error",
    "state_schema_file_version_error",
    "operator_metadata_corrupt_error",
    "operator_metadata_version_error",
    "store_setting_below_one_error",
    "state_compression_codec_error",
    "max_batches_in_memory_error",
    "on_local_disk_conf_error",
    "state_data_type_error",
    "state_column_count_error",
    "state_column_type_error",
    "store_not_updating_error",
    "eviction_predicate_length_error",
    "IncompatibleRestartError",
    "StateSchemaNotCompatibleError",
    "StateVariableTypeChangedError",
    "OperatorConfigChangedError",
    "OperatorNotMatchError",
    "key_schema_not_compatible_error",
    "value_schema_not_compatible_error",
    "state_variable_type_changed_error",
    "operator_config_changed_error",
    "operator_not_match_error",
    "source_count_changed_error",
]


class StateStoreError(StatestreamError):
    """A state store file is missing, corrupt, or its schema is incompatible.

    Examples
    --------
    >>> error = schema_must_be_nullable_error("count", "StructType(StructField(n,LongType,false))")
    >>> error.getCondition()
    'TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE'
    """

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        """Spark's error class, when Spark has one for this failure."""
        return self.error_class


def schema_must_be_nullable_error(column_family: str, schema_text: str) -> StateStoreError:
    """Spark's ``TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE``: with the Avro state encoding, a
    transformWithState variable (``column_family``) whose schema (``schema_text``, as Spark's
    ``StructType.toString`` prints it) has a field that is not nullable."""
    return StateStoreError(
        "[TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE] If Avro encoding is enabled, all the fields in the schema for "
        f"column family {column_family} must be nullable\nwhen using the TransformWithState operator.\n"
        f"Please make the schema nullable. Current schema: {schema_text} SQLSTATE: XXKST",
        "TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE",
    )


# -- keys ------------------------------------------------------------------------------------------


def key_type_unsupported_error(type_: object, where: str) -> StateStoreError:
    """A key column (``where``: the operator and the column's path) of an Arrow type the state
    store cannot match keys of (checked when the store is opened)."""
    return StateStoreError(f"statestream's state store cannot use a column of type {type_} as (part of) a key: {where}")


def key_value_not_encodable_error(value: Any) -> StateStoreError:
    """A key value the state store has no canonical encoding for (a Python object of a type no
    Arrow key column holds)."""
    return StateStoreError(f"statestream cannot encode the key value {value!r} ({type(value).__name__})")


def key_column_count_mismatch_error(left: int, right: int) -> StateStoreError:
    """The two sides of a key match have different numbers of key columns."""
    return StateStoreError(f"key column count mismatch: {left} vs {right}")


def key_structure_mismatch_error() -> StateStoreError:
    """The two sides of a key match have key columns of different nesting."""
    return StateStoreError("key structure mismatch between the two sides of a key match")


def dedup_key_list_type_error(type_: object) -> StateStoreError:
    """A deduplication key column that is a list of a type the binary-comparable key encoding
    cannot hold."""
    return StateStoreError(f"statestream cannot use a list of {type_} as (part of) a deduplication key")


# -- state files (Spark's CANNOT_LOAD_STATE_STORE, STATE_STORE_INVALID_FORMAT) -------------------


def state_file_missing_error(shown: str, store_id: object, needed_for: int) -> StateStoreError:
    """A state file that loading version ``needed_for`` needs is not there."""
    return StateStoreError(
        f"Error reading state file {shown} of {store_id}: the file does not exist, "
        f"but it is needed to load version {needed_for}",
        "CANNOT_LOAD_STATE_STORE",
    )


def state_file_read_error(shown: str, store_id: object, needed_for: int, cause: BaseException) -> StateStoreError:
    """Reading a state file failed (``cause``: the file system's error)."""
    return StateStoreError(
        f"Error reading state file {shown} of {store_id} (needed for version {needed_for}): {cause}", "CANNOT_LOAD_STATE_STORE"
    )


def state_file_corrupt_error(shown: str, store_id: object, damage: object) -> StateStoreError:
    """A state file whose checksum trailer does not match its content (``damage`` says how)."""
    return StateStoreError(f"State file {shown} of {store_id} is corrupt: {damage}", "CANNOT_LOAD_STATE_STORE")


def state_file_not_statestream_error(shown: str, store_id: object) -> StateStoreError:
    """A state file whose schema metadata has no statestream format version."""
    return StateStoreError(
        f"State file {shown} of {store_id} is not a statestream state file "
        f"(no format version in its schema metadata)",
        "CANNOT_LOAD_STATE_STORE",
    )


def state_file_truncated_error(shown: str, store_id: object) -> StateStoreError:
    """A state file of the current format without its checksum trailer: it was cut short."""
    return StateStoreError(
        f"State file {shown} of {store_id} is corrupt: its checksum trailer is missing (the file was cut short)",
        "CANNOT_LOAD_STATE_STORE",
    )


def state_file_format_version_error(shown: str, store_id: object, found: bytes, newest: int) -> StateStoreError:
    """A state file of a format version this statestream cannot read (a newer one's)."""
    return StateStoreError(
        f"State file {shown} of {store_id} has format version {found.decode(errors='replace')}, "
        f"but this statestream reads format versions 1 to {newest}",
        "CANNOT_LOAD_STATE_STORE",
    )


def state_file_unreadable_error(shown: str, store_id: object, cause: BaseException) -> StateStoreError:
    """A state file that Arrow cannot read (``cause``: Arrow's or the file system's error)."""
    return StateStoreError(f"State file {shown} of {store_id} is corrupt or unreadable: {cause}", "CANNOT_LOAD_STATE_STORE")


def state_file_schema_mismatch_error(shown: str, store_id: object, found: object, expected: object) -> StateStoreError:
    """A state file whose columns are not those of the store's state schema (Spark's
    ``STATE_STORE_INVALID_FORMAT``)."""
    return StateStoreError(
        f"State file {shown} of {store_id} does not match the expected state schema: "
        f"file has {found}, expected {expected}",
        "STATE_STORE_INVALID_FORMAT",
    )


def state_file_without_key_count_error(shown: str, store_id: object) -> StateStoreError:
    """A state file whose schema metadata does not say how many of its columns are the key."""
    return StateStoreError(f"State file {shown} of {store_id} records no key column count", "CANNOT_LOAD_STATE_STORE")


def state_version_negative_error(version: int, store_id: object) -> StateStoreError:
    """A load of a state version below 0."""
    return StateStoreError(f"cannot load version {version} of {store_id}: versions start at 0")


def state_version_zero_replace_error(version: int, store_id: object) -> StateStoreError:
    """A replacement of state version 0 (or below), which is always empty."""
    return StateStoreError(f"cannot replace version {version} of {store_id}: version 0 is always empty")


# -- schema and operator metadata files ------------------------------------------------------------


def operator_properties_corrupt_error(shown: str, cause: BaseException | None = None) -> StateStoreError:
    """An operator properties file that is not JSON (``cause``: the parser's error) or not a
    JSON object (no ``cause``)."""
    return StateStoreError(f"Operator properties file {shown} is corrupt: {cause if cause is not None else 'not a JSON object'}")


def state_schema_file_corrupt_error(where: str, cause: BaseException) -> StateStoreError:
    """A state schema file (Spark's ``state.schema`` format) that does not parse."""
    return StateStoreError(f"State schema file {where} is corrupt: {cause}")


def state_schema_file_without_version_error(where: str, version_text: str) -> StateStoreError:
    """A state schema file whose first string is not a format version ``v<N>``."""
    return StateStoreError(f"State schema file {where} does not start with a format version (found {version_text!r})")


def state_schema_file_version_error(where: str, version: int, readable: Sequence[int], written: int) -> StateStoreError:
    """A state schema file of a format version statestream cannot read."""
    return StateStoreError(
        f"State schema file {where} has format version {version}, but statestream reads only versions "
        f"{', '.join(str(v) for v in readable)} (it writes version {written})"
    )


def operator_metadata_corrupt_error(where: str, cause: BaseException) -> StateStoreError:
    """An operator metadata file that is not UTF-8 or whose JSON does not parse."""
    return StateStoreError(f"Operator metadata file {where} is corrupt: {cause}")


def operator_metadata_version_error(where: str, found: str, version: int) -> StateStoreError:
    """An operator metadata file of another format version than the one statestream reads."""
    return StateStoreError(
        f"Operator metadata file {where} has format version {found!r}, but statestream reads only "
        f"version v{version}"
    )


# -- the store's settings and updates --------------------------------------------------------------


def store_setting_below_one_error(name: str, value: int) -> StateStoreError:
    """A state store setting (``min_deltas_for_snapshot``, ...) that must be at least 1."""
    return StateStoreError(f"{name} must be >= 1, got {value}")


def state_compression_codec_error(codec: str) -> StateStoreError:
    """A state store compression codec Arrow's IPC writer does not have."""
    return StateStoreError(f"unsupported state store compression codec {codec!r} (use lz4, zstd or none)")


def max_batches_in_memory_error(value: object) -> StateStoreError:
    """``spark.sql.streaming.maxBatchesToRetainInMemory`` set to something that is not a number."""
    return StateStoreError(f"spark.sql.streaming.maxBatchesToRetainInMemory must be a whole number of batches, got {value!r}")


def on_local_disk_conf_error(conf: str, value: object) -> StateStoreError:
    """The conf that keeps the state on local disk (``conf``) set to neither true nor false."""
    return StateStoreError(f"{conf} must be true or false, got {value!r}")


def state_data_type_error(data: object) -> StateStoreError:
    """Rows given to the state store that are neither an Arrow Table nor a RecordBatch."""
    return StateStoreError(f"state store expects a pyarrow Table or RecordBatch, got {type(data).__name__}")


def state_column_count_error(what: str, store_id: object, expected: Sequence[str], found: Sequence[str]) -> StateStoreError:
    """Rows given to the state store (``what``: puts, removals, ...) whose columns are not as many
    as the store's schema has (``expected``: its column names; ``found``: the rows')."""
    return StateStoreError(
        f"{what} for {store_id} must have {len(expected)} columns ({', '.join(expected)}), "
        f"got {len(found)} ({', '.join(found)})"
    )


def state_column_type_error(
    what: str, store_id: object, index: int, name: str, found: object, expected: object, cause: BaseException
) -> StateStoreError:
    """A column of rows given to the state store that does not cast to the store's type."""
    return StateStoreError(f"{what} for {store_id}: column {index} ({name}) has type {found}, expected {expected}: {cause}")


def store_not_updating_error(what: str, store_id: object, version: int, state: str) -> StateStoreError:
    """An update (``what``) of a store version that was committed or aborted already."""
    return StateStoreError(f"cannot {what} {store_id} version {version}: the store was already {state}")


def eviction_predicate_length_error(store_id: object, values: int, rows: int) -> StateStoreError:
    """An eviction predicate that returned another number of values than the state has rows."""
    return StateStoreError(f"eviction predicate for {store_id} returned {values} values for {rows} rows")


class IncompatibleRestartError(StatestreamError):
    """A query restarted on a checkpoint that it cannot continue (and the message says why).

    Examples
    --------
    >>> error = OperatorNotMatchError(
    ...     "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    ...     {"OpsInMetadataSeq": "0 -> stateStoreSave", "OpsInCurBatchSeq": "0 -> dedupe"},
    ... )
    >>> isinstance(error, IncompatibleRestartError), error.getSqlState()
    (True, '42K03')
    """

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        """Spark's error class, when Spark has one for this refusal."""
        return self.error_class


#: Spark's texts of the restart errors: error class -> (SQLSTATE, message template lines)
_SPARK_ERRORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": (
        "XXKST",
        (
            "Provided key schema does not match existing state key schema.",
            "Please check number and type of fields.",
            "Existing key_schema={storedKeySchema} and new key_schema={newKeySchema}.",
            "If you want to force running the query without schema validation, please set "
            "spark.sql.streaming.stateStore.stateSchemaCheck to false.",
            "However, please note that running the query with incompatible schema could cause "
            "non-deterministic behavior.",
        ),
    ),
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE": (
        "XXKST",
        (
            "Provided value schema does not match existing state value schema.",
            "Please check number and type of fields.",
            "Existing value_schema={storedValueSchema} and new value_schema={newValueSchema}.",
            "If you want to force running the query without schema validation, please set "
            "spark.sql.streaming.stateStore.stateSchemaCheck to false.",
            "However, please note that running the query with incompatible schema could cause "
            "non-deterministic behavior.",
        ),
    ),
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE": (
        "42K06",
        (
            "Cannot change {stateVarName} to {newType} between query restarts. Please set {stateVarName} to {oldType}, "
            "or restart with a new checkpoint directory.",
        ),
    ),
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART": (
        "42K06",
        (
            "Cannot change {configName} from {oldConfig} to {newConfig} between restarts. Please set {configName} to "
            "{oldConfig}, or restart with a new checkpoint directory.",
        ),
    ),
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": (
        "42K03",
        (
            "Streaming stateful operator name does not match with the operator in state metadata. "
            "This likely to happen when user adds/removes/changes stateful operator of existing streaming query.",
            "Stateful operators in the metadata: [{OpsInMetadataSeq}]; "
            "Stateful operators in current batch: [{OpsInCurBatchSeq}].",
        ),
    ),
}


def _spark_message(error_class: str, params: Mapping[str, str]) -> str:
    """Spark's rendering of an error: ``[CLASS] line1\\nline2... SQLSTATE: xxxxx``."""
    sql_state, lines = _SPARK_ERRORS[error_class]
    body = "\n".join(lines).format(**params)
    return f"[{error_class}] {body} SQLSTATE: {sql_state}"


class _SparkClassedRestartError(IncompatibleRestartError):
    """An ``IncompatibleRestartError`` that also carries Spark's SQLSTATE and message parameters."""

    def __init__(self, error_class: str, params: Mapping[str, str]) -> None:
        super().__init__(_spark_message(error_class, params), error_class)
        self.message_parameters = dict(params)
        self.sql_state = _SPARK_ERRORS[error_class][0]

    def getMessageParameters(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        return dict(self.message_parameters)

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        return self.sql_state


class StateSchemaNotCompatibleError(_SparkClassedRestartError):
    """The stored key or value schema cannot hold the new query's state."""


class StateVariableTypeChangedError(_SparkClassedRestartError):
    """A transformWithState variable changed kind (value, list, map) between runs."""


class OperatorConfigChangedError(_SparkClassedRestartError):
    """An operator setting that the state depends on (a time mode) changed between runs."""


class OperatorNotMatchError(_SparkClassedRestartError):
    """The stateful operators of the new plan differ from those recorded in the checkpoint."""


def key_schema_not_compatible_error(stored: str, new: str) -> StateSchemaNotCompatibleError:
    """Spark's ``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``: the new query's state key schema
    (``new``, as Spark renders a data type) cannot read the stored one (``stored``)."""
    return StateSchemaNotCompatibleError(
        "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", {"storedKeySchema": stored, "newKeySchema": new}
    )


def value_schema_not_compatible_error(stored: str, new: str) -> StateSchemaNotCompatibleError:
    """Spark's ``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``: the new query's state value schema
    cannot read the stored one."""
    return StateSchemaNotCompatibleError(
        "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", {"storedValueSchema": stored, "newValueSchema": new}
    )


def state_variable_type_changed_error(name: str, old_type: str, new_type: str) -> StateVariableTypeChangedError:
    """Spark's ``STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE``: the transformWithState variable
    ``name`` was a ``old_type`` (ValueState, ListState, MapState) and is now a ``new_type``."""
    return StateVariableTypeChangedError(
        "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE", {"stateVarName": name, "oldType": old_type, "newType": new_type}
    )


def operator_config_changed_error(name: str, old: str, new: str) -> OperatorConfigChangedError:
    """Spark's ``STATE_STORE_INVALID_CONFIG_AFTER_RESTART``: a transformWithState setting
    (``timeMode``, ``outputMode``) changed between runs."""
    return OperatorConfigChangedError(
        "STATE_STORE_INVALID_CONFIG_AFTER_RESTART", {"configName": name, "oldConfig": old, "newConfig": new}
    )


def operator_not_match_error(in_metadata: str, in_current_batch: str) -> OperatorNotMatchError:
    """Spark's ``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``: the stateful operators
    recorded in the checkpoint (``in_metadata``: ``0 -> stateStoreSave, ...``) are not those of
    the new plan (``in_current_batch``)."""
    return OperatorNotMatchError(
        "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
        {"OpsInMetadataSeq": in_metadata, "OpsInCurBatchSeq": in_current_batch},
    )


def source_count_changed_error(recorded: int, requested: int) -> IncompatibleRestartError:
    """A restart whose query reads another number of sources than the checkpoint's offsets
    record (Spark's ``OffsetSeq.toStreamProgress`` assertion, word for word)."""
    return IncompatibleRestartError(
        f"assertion failed: There are [{recorded}] sources in the checkpoint offsets and now "
        f"there are [{requested}] sources requested by the query. Cannot continue."
    )
