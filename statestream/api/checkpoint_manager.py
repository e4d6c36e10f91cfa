"""``StreamingSession.checkpointManager``: operations on a stopped query's checkpoint.

Spark's newest code has a private ``spark._streamingCheckpointManager.repartition(checkpoint,
numPartitions)``; a StreamingSession offers the same object under that name, so code written for
Spark's runs unchanged, and under the public name ``checkpointManager``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statestream.runtime.state_repartition import repartition_state
from statestream.tools.compatibility import check_compatibility
from statestream.tools.rollback import rollback_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statestream.runtime.state_repartition import RepartitionResult
    from statestream.tools.compatibility import CompatibilityReport
    from statestream.tools.rollback import RollbackResult

__all__ = ["StreamingCheckpointManager"]


class StreamingCheckpointManager:
    """Offline operations on a stopped query's checkpoint: repartition (a Spark job over the
    state files), rollback and the compatibility check of a changed query."""

    def __init__(self, session: Any) -> None:
        #: the StreamingSession that offers it
        self._session = session
        self._spark: "SparkSession" = session.sparkSession

    def repartition(
        self, checkpointLocation: Any, numPartitions: Any, enforceExactlyOnceSink: bool = True  # noqa: N803
    ) -> "RepartitionResult":
        """Rewrite the state of the stopped query at ``checkpointLocation`` into
        ``numPartitions`` partitions; its next start runs with that many. It writes a batch of
        its own (the last committed batch's offsets, no input, no output). Refused with Spark's
        ``STATE_REPARTITION_INVALID_PARAMETER.*`` / ``STATE_REPARTITION_INVALID_CHECKPOINT.*``
        errors; ``enforceExactlyOnceSink=False`` repartitions from the last committed batch
        when a later batch failed (its output may then be written twice)."""
        return repartition_state(self._spark, checkpointLocation, numPartitions, enforceExactlyOnceSink)

    def rollback(self, checkpointLocation: str, batchId: int, fileSinks: "list[str] | tuple[str, ...]" = ()) -> "RollbackResult":  # noqa: N803
        """Make ``batchId`` the last committed batch of the stopped query at
        ``checkpointLocation``: its next start reprocesses everything after it. The offset and
        commit logs, the state files, the file sources' logs and the given file sinks' logs (and
        the data files only later batches wrote) go back; see ``statestream.tools.rollback``."""
        return rollback_checkpoint(checkpointLocation, int(batchId), tuple(fileSinks))

    def check(self, checkpointLocation: str, query: Any, numPartitions: int | None = None) -> "CompatibilityReport":  # noqa: N803
        """Plan ``query`` (a function of the StreamingSession that returns the changed streaming
        DataFrame, or its ``writeStream`` with the output mode set) against the stopped query's
        checkpoint, writing nothing: ``compatible``, or each difference with Spark's error class
        and the fix (``numPartitions``: the partition count the deploy asks for, compared with
        the checkpoint's); see ``statestream.tools.compatibility``."""
        return check_compatibility(self._session, checkpointLocation, query, numPartitions)
