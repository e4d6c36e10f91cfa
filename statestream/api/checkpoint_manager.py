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
    state files), rollback and the compatibility check of a changed query.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> manager = ss.checkpointManager
    >>> [name for name in ("repartition", "rollback", "check") if callable(getattr(manager, name))]
    ['repartition', 'rollback', 'check']
    """

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
        when a later batch failed (its output may then be written twice).

        Parameters
        ----------
        checkpointLocation : str
            The checkpoint of a stopped query.
        numPartitions : int
            The new number of state partitions (a positive int).
        enforceExactlyOnceSink : bool, default True
            ``False`` repartitions from the last committed batch when a later one failed.

        Returns
        -------
        RepartitionResult
            The batch written, the old and new partition counts, and the rows moved per store.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("b",)])
        0
        >>> checkpoint = f"{tmp}/checkpoint_repartition"
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint).start()
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> result = ss.checkpointManager.repartition(checkpoint, 4)
        >>> result.old_partitions, result.new_partitions
        (2, 4)
        """
        return repartition_state(self._spark, checkpointLocation, numPartitions, enforceExactlyOnceSink)

    def rollback(self, checkpointLocation: str, batchId: int, fileSinks: "list[str] | tuple[str, ...]" = ()) -> "RollbackResult":  # noqa: N803
        """Make ``batchId`` the last committed batch of the stopped query at
        ``checkpointLocation``: its next start reprocesses everything after it. The offset and
        commit logs, the state files, the file sources' logs and the given file sinks' logs (and
        the data files only later batches wrote) go back; see ``statestream.tools.rollback``.

        Parameters
        ----------
        checkpointLocation : str
            The checkpoint of a stopped query.
        batchId : int
            The batch that becomes the last committed one.
        fileSinks : list of str, optional
            The output paths of file sinks whose logs (and files) go back too.

        Returns
        -------
        RollbackResult
            What was removed: ``batches_removed``, ``state_files_removed``, ...

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("b",)])
        0
        >>> checkpoint = f"{tmp}/checkpoint_rollback"
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint).start()
        >>> q.processAllAvailable()
        >>> ms.add_data([("c",)])
        1
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> result = ss.checkpointManager.rollback(checkpoint, 0)
        >>> result.to_batch, result.batches_removed
        (0, [1])
        """
        return rollback_checkpoint(checkpointLocation, int(batchId), tuple(fileSinks))

    def check(self, checkpointLocation: str, query: Any, numPartitions: int | None = None) -> "CompatibilityReport":  # noqa: N803
        """Plan ``query`` (a function of the StreamingSession that returns the changed streaming
        DataFrame, or its ``writeStream`` with the output mode set) against the stopped query's
        checkpoint, writing nothing: ``compatible``, or each difference with Spark's error class
        and the fix (``numPartitions``: the partition count the deploy asks for, compared with
        the checkpoint's); see ``statestream.tools.compatibility``.

        Parameters
        ----------
        checkpointLocation : str
            The checkpoint of a stopped query.
        query : callable
            ``query(ss)`` returns the changed streaming DataFrame, or its ``writeStream``.
        numPartitions : int, optional
            The number of state partitions the deploy asks for.

        Returns
        -------
        CompatibilityReport
            ``compatible`` and the ``differences`` found.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("k STRING")
        >>> ms.add_data([("a",), ("b",)])
        0
        >>> checkpoint = f"{tmp}/checkpoint_check"
        >>> counts = ms.toDF().groupBy("k").count()
        >>> q = counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint).start()
        >>> q.processAllAvailable()
        >>> q.stop()
        >>> def changed(ss):
        ...     return ss.memoryStream("k STRING").toDF().groupBy("k").count().writeStream.outputMode("update")
        >>> ss.checkpointManager.check(checkpoint, changed).compatible
        True
        """
        return check_compatibility(self._session, checkpointLocation, query, numPartitions)
