"""How a batch's Python steps get their rows from the JVM: the Arrow batches of the exchange.

Every state step is a ``mapInArrow`` over the stateful exchange, so each of its input rows goes
through Spark's ``ArrowWriter`` on the executor. Since Spark 4.0 that writer stops a batch at
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000) *or* at
``spark.sql.execution.arrow.maxBytesPerBatch`` bytes (64 MB by default), and to know the bytes
it asks every column's vectors for their buffer sizes after every row, unless the byte limit is
``Int.MaxValue`` (no limit). For a struct column (a window, a session) that question walks the
struct's children and sets their value counts each time.

Measured on W2 (1M keys, 630,000 keys a batch, a ``window`` struct in the key; Java Flight
Recorder on the executor's task threads, 2026-11-28): the per-row size question was 154 of the
414 samples of the state stage's tasks, and their CPU time went from about 400 ms to 165 ms a
task without it; the stateless floor's final aggregation of the same rows takes about 75 ms.

A state step reads its whole partition before it emits anything, so how the input is cut into
batches changes neither its answers nor its peak memory. The byte limit is therefore lifted on
the query's own session clone, unless the user set it: the row limit still cuts the batches, as
it did before Spark 4.0. A user's own Python function in the same query (``mapInPandas`` before
an aggregation) then also gets batches of at most 10,000 rows whatever their size.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["ARROW_MAX_BYTES_PER_BATCH", "NO_BYTE_LIMIT", "arrow_exchange_confs"]

#: Spark's byte limit of an Arrow batch sent to a Python worker
ARROW_MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
#: the value at which Spark's writer stops measuring batches (``Int.MaxValue``)
NO_BYTE_LIMIT = str(2**31 - 1)


def arrow_exchange_confs(user_set: Callable[[str], bool]) -> dict[str, str]:
    """The confs a query's session clone sets for its Arrow exchanges, given whether the user's
    session set a conf itself (``user_set(key)``): the user's own value always wins."""
    return {} if user_set(ARROW_MAX_BYTES_PER_BATCH) else {ARROW_MAX_BYTES_PER_BATCH: NO_BYTE_LIMIT}
