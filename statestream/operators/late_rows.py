"""The late-row ledger (opt-in): every row a watermark drops, kept where the user can look.

Spark only counts the rows its stateful operators drop as late (``numRowsDroppedByWatermark``).
With ``spark.statestream.lateRows.path`` set, each state task that drops rows also writes them,
as a Parquet file, to ``<path>/operator=<id>/batch=<batchId>/part-<partition>.parquet``, with two
more columns: ``_operator`` (the operator's name) and ``_watermark`` (the watermark that dropped
them). ``spark.read.parquet(path)`` reads them, with ``operator`` and ``batch`` as partition
columns; ``statestream late-rows PATH`` shows them.

What a row is depends on where the operator drops: deduplication, the Python state operators
and the stream-stream join drop input rows (the row as the operator received it); an
aggregation and a session window drop after the partial aggregation Spark runs before the
exchange, so their dropped rows are partial groups (the key and the partial buffers).

Exactly once across restarts: a file's name is fixed by (operator, batch, partition), a rerun
of a batch (after a crash) drops the same rows and rewrites the same file, and a retried task
overwrites its attempt. A rollback removes the files of the batches it undoes.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from statestream.checkpoint.files import CheckpointFileManager

__all__ = ["LATE_ROWS_CONF", "late_rows_file", "write_late_rows"]

log = logging.getLogger(__name__)

#: where the ledger goes (a directory; unset: no ledger)
LATE_ROWS_CONF = "spark.statestream.lateRows.path"


def late_rows_file(operator_id: int, batch_id: int, partition: int) -> str:
    """The ledger file of one state task, relative to the ledger's root."""
    return f"operator={operator_id}/batch={batch_id}/part-{partition:05d}.parquet"


def write_late_rows(
    root: str, operator_id: int, operator_name: str, batch_id: int, partition: int, watermark_ms: int, rows: pa.Table
) -> None:
    """Write the rows one state task dropped as late (nothing when there are none)."""
    if rows.num_rows == 0:
        return
    n = rows.num_rows
    table = rows.append_column("_operator", pa.array([operator_name] * n, pa.string())).append_column(
        "_watermark", pa.array(np.full(n, watermark_ms * 1000, dtype=np.int64), pa.timestamp("us", tz="UTC"))
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    CheckpointFileManager(root).write_atomic(late_rows_file(operator_id, batch_id, partition), sink.getvalue().to_pybytes())
    log.debug("late-row ledger: %d rows of operator %d, batch %d, partition %d", n, operator_id, batch_id, partition)
