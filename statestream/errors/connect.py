"""What the Spark Connect endpoint (``statestream connect-server``) refuses in a client's
streaming query: the plan nodes and commands it does not rebuild on statestream yet. Each is a
``NotSupportedYetError``, so the endpoint hands the query to Spark's own engine unless the
client's session sets ``spark.statestream.handOverToSpark`` to ``false``."""

from __future__ import annotations

import hmac

from statestream.errors.base import NotSupportedYetError, StatestreamError
from statestream.errors.spark_shaped import _JvmShapedException, spark_error_text

__all__ = [
    "ForeachBatchWorkerError",
    "OperationCanceledException",
    "connect_authentication_failure",
    "connect_node_not_supported",
    "foreach_batch_worker_error",
    "operation_canceled_error",
]


def connect_node_not_supported(node: str) -> NotSupportedYetError:
    """The refusal of a Connect plan node (``node``: its field name in ``spark.connect.Relation``,
    or a part of one) that statestream does not rebuild yet.

    Examples
    --------
    >>> str(connect_node_not_supported("sort")).split(";")[0]
    "the Spark Connect plan node 'sort' of this streaming query is not rebuilt on statestream yet"
    """
    return NotSupportedYetError(
        f"the Spark Connect plan node {node!r} of this streaming query is not rebuilt on statestream yet; "
        "the endpoint runs such a query on Spark's own engine unless spark.statestream.handOverToSpark is false"
    )


class ForeachBatchWorkerError(StatestreamError, RuntimeError):
    """A Connect client's ``foreachBatch`` function failed in its worker (or the worker did)."""


def foreach_batch_worker_error(detail: str) -> ForeachBatchWorkerError:
    """The failure of a Connect client's ``foreachBatch`` function, with what its worker sent
    (the function's traceback), as the batch's error.

    Examples
    --------
    >>> str(foreach_batch_worker_error("ValueError: boom")).splitlines()[0]
    "the Connect client's foreachBatch function failed in its Python worker:"
    """
    return ForeachBatchWorkerError(f"the Connect client's foreachBatch function failed in its Python worker:\n{detail}")


def connect_authentication_failure(expected_token: str, authorization: str | None) -> str | None:
    """Why a call's ``authorization`` header fails an endpoint that asks for ``expected_token``
    (the description of Spark's Connect server's ``UNAUTHENTICATED`` status), or ``None`` when it
    carries the token as Spark's server expects it (``Bearer <token>``).

    Examples
    --------
    >>> connect_authentication_failure("s3cret", None)
    'No authentication token provided'
    >>> connect_authentication_failure("s3cret", "Bearer other")
    'Invalid authentication token'
    >>> connect_authentication_failure("s3cret", "Bearer s3cret") is None
    True
    """
    if authorization is None:
        return "No authentication token provided"
    if not hmac.compare_digest(authorization.encode(), f"Bearer {expected_token}".encode()):
        return "Invalid authentication token"
    return None


class OperationCanceledException(_JvmShapedException, StatestreamError, RuntimeError):
    """An operation of a Connect client ended by an interrupt (``interruptAll``,
    ``interruptTag``, ``interruptOperation``): Spark's ``SparkSQLException``."""

    #: the JVM class Spark's Connect server names for this error (its client has no class of
    #: its own for it)
    jvm_class = "org.apache.spark.SparkSQLException"


def operation_canceled_error() -> OperationCanceledException:
    """The error of a client's operation (a wait on a query) that an interrupt ended, as Spark's
    Connect server sends it (``OPERATION_CANCELED``).

    Examples
    --------
    >>> error = operation_canceled_error()
    >>> error.getCondition(), error.getSqlState(), str(error)
    ('OPERATION_CANCELED', 'HY008', '[OPERATION_CANCELED] Operation has been canceled. SQLSTATE: HY008')
    """
    text = spark_error_text("OPERATION_CANCELED", "Operation has been canceled.", "HY008")
    return OperationCanceledException(text, "OPERATION_CANCELED", {}, "HY008")
