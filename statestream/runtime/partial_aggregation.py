"""When a batch skips the partial aggregation below a streaming aggregation's exchange.

Spark aggregates each input partition before the shuffle (``HashAggregate`` in ``Partial``
mode) so that the exchange carries one buffer row per key and map task rather than every row.
When nearly every row of a batch has a key of its own, as with a state keyed by user, that
partial step hashes a million rows to save almost nothing, and it runs in the scan's tasks: a
batch read from one file split runs it in a single task while the other cores wait. Shuffling
the rows first by the keys' hash partitioning (the one the state needs) and aggregating after
the exchange gives the same buffer rows per key, with the aggregation spread over the state
partitions' tasks. On W2 (1M rows per batch, 630,000 keys) the scan stage went from about
620 to 290 ms. When keys repeat, the partial step pays for itself: at one key per ten rows both
ways cost the same on a batch of Spark's, and at five keys per batch the shuffle of raw rows is
the larger cost by far.

The decision looks one batch back, as the small-batch one does (``runtime.small_batches``):
the last batch's aggregation stored as many keys as a share of the rows it read. The first
batch of a run keeps the partial step. Which aggregations may skip it is the planner's
(``AggregationInfo.partial_skip``): with ``auto``, only those whose input rows are the source's
rows, filtered or projected, where that share means what it says.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from statestream.operators.aggregate import SKIP_ALL, SKIP_NONE, SKIP_SOURCE_FED

__all__ = [
    "SKIP_PARTIAL_CONF",
    "SKIP_NONE",
    "SKIP_SOURCE_FED",
    "SKIP_ALL",
    "MIN_ROWS",
    "MIN_KEYS_PER_ROW",
    "skip_partial_setting",
    "skip_partial_aggregation",
]

#: statestream's conf: ``auto`` (the default: decided per batch), ``true`` (every aggregation
#: with grouping keys skips it) or ``false`` (never)
SKIP_PARTIAL_CONF = "spark.statestream.aggregation.skipPartial"

#: below this many input rows the partial step costs too little to matter either way
MIN_ROWS = 100_000
#: the share of the input rows the aggregation's keys must reach (measured on 2 cores and a
#: batch of 1M rows, Spark's batch aggregation with the step and without: even at 0.1, 15 % less
#: without it at 0.25, 20-25 % at 0.45 and above)
MIN_KEYS_PER_ROW = 0.2

#: the operator name of a streaming aggregation's state in the progress (Spark's)
_AGGREGATION_OPERATOR = "stateStoreSave"


def skip_partial_setting(conf_get: Callable[[str, Any], Any]) -> str:
    """:data:`SKIP_PARTIAL_CONF` from a session conf's ``get``: ``auto``, ``true`` or ``false``;
    any other value is refused, naming the conf."""
    value = str(conf_get(SKIP_PARTIAL_CONF, "auto") or "auto").strip().lower()
    if value not in ("auto", "true", "false"):
        raise ValueError(f"{SKIP_PARTIAL_CONF} must be auto, true or false, got {value!r}")
    return value


def skip_partial_aggregation(
    last_progress: Mapping[str, Any] | None,
    setting: str,
    min_rows: int | None = None,
    min_keys_per_row: float | None = None,
) -> str:
    """Which aggregations of the next batch skip their partial step (``SKIP_*``).

    ``auto``: the source-fed ones, when the last batch (``last_progress``, its progress as a
    dict) read at least ``min_rows`` rows and every streaming aggregation in it stored at least
    ``min_keys_per_row`` keys per row read (``numRowsUpdated``: every key of the batch is put);
    by default :data:`MIN_ROWS` and :data:`MIN_KEYS_PER_ROW`."""
    min_rows = MIN_ROWS if min_rows is None else min_rows
    min_keys_per_row = MIN_KEYS_PER_ROW if min_keys_per_row is None else min_keys_per_row
    if setting == "true":
        return SKIP_ALL
    if setting != "auto" or not last_progress:
        return SKIP_NONE
    rows = int(last_progress.get("numInputRows") or 0)
    if rows < max(min_rows, 1):
        return SKIP_NONE
    aggregations = [op for op in last_progress.get("stateOperators") or [] if op.get("operatorName") == _AGGREGATION_OPERATOR]
    if not aggregations:
        return SKIP_NONE
    if all(int(op.get("numRowsUpdated") or 0) >= min_keys_per_row * rows for op in aggregations):
        return SKIP_SOURCE_FED
    return SKIP_NONE
