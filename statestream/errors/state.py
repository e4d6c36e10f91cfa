"""Errors of the state store and of a restart the stored state refuses.

Pure module: no PySpark import (``state/`` raises these). The restart errors carry Spark's error
class, SQLSTATE, parameters and text, so that a user sees what Spark's engine would say.
"""

from __future__ import annotations

from typing import Mapping

from statestream.errors.base import StatestreamError

__all__ = [
    "StateStoreError",
    "schema_must_be_nullable_error",
    "IncompatibleRestartError",
    "StateSchemaNotCompatibleError",
    "StateVariableTypeChangedError",
    "OperatorConfigChangedError",
    "OperatorNotMatchError",
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
