"""When a batch skips the partial aggregation below a streaming aggregation's exchange.

Spark aggregates each input partition before the shuffle (``HashAggregate`` in ``Partial``
mode) so that the exchange carries one buffer row per key and map task rather than every row.
When nearly every row of a batch has a key of its own, as with a state keyed by user, that
partial step hashes a million rows to save almost nothing, and it runs in the scan's tasks: a
batch read from one file split runs it in a single task while the other cores wait. Shuffling
the rows first by the keys' hash partitioning (the one the state needs) and aggregating after
the exchange gives the same buffer rows per key, with the aggregation spread over the state
partitions' tasks (``operators.aggregate.shuffled_by_keys``). On W2 (1M rows per batch, 630,000
keys) the scan stage went from about 620 to 290 ms.

When keys repeat, the partial step pays for itself. Measured with Spark's batch aggregation of
W2's rows on 2 cores, one file of 1M rows, with the step and without: at 0.1 keys per row both
cost the same; at 0.25 the one without took 15 % less time, at 0.5 and above 20 to 25 % less;
at 1,000 keys it took 60 % more. Hence :data:`MIN_KEYS_PER_ROW`.

The answers are the same either way, up to what already varies with Spark's input
partitioning: floating-point sums in another order, and functions of the rows' order
(``first``, ``collect_list``) when a key's rows come from more than one map task.

The decision looks back to the last batch of the run that read rows (no-data batches and idle
triggers do not count), as the small-batch one looks one batch back (``runtime.small_batches``):
each aggregation of that batch put at least :data:`MIN_KEYS_PER_ROW` keys per row the batch
read (its ``numRowsUpdated``: every key of the batch is put). The first batch of each run,
a restart's included, keeps the partial step. Which aggregations may skip it is the planner's
(``AggregationInfo.partial_skippable``): never those without keys to shuffle by, with only
literal keys, under cube/rollup or over session windows; with ``auto``, only those whose input
rows are a source's rows (projected, filtered, repartitioned, watermarked, observed), where
that share means what it says; with ``true``, all the others too (after a join, a union, an
``explode``, a sliding window). The conf is read as each run starts; a bad value fails
``start()``.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping

from statestream.operators.aggregate import skips_partial
from statestream.operators.context import SKIP_ALL, SKIP_NONE, SKIP_SOURCE_FED

__all__ = [
    "SKIP_PARTIAL_CONF",
    "MIN_ROWS",
    "MIN_KEYS_PER_ROW",
    "skip_partial_setting",
    "skip_partial_aggregation",
]

#: statestream's conf: ``auto`` (the default: decided per batch), ``true`` (every aggregation
#: that can, in every batch) or ``false`` (never)
SKIP_PARTIAL_CONF = "spark.statestream.aggregation.skipPartial"

#: below this many input rows the partial step costs too little to matter either way
MIN_ROWS = 100_000
#: the keys per input row the last batch's aggregations must have reached
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
    last_data_progress: Mapping[str, Any] | None,
    setting: str,
    skippable: Collection[str],
    min_rows: int | None = None,
    min_keys_per_row: float | None = None,
) -> str:
    """What the next batch asks of its aggregations' partial steps (``SKIP_*``).

    ``skippable``: the plan's aggregations' ``partial_skippable``; a request that none of them
    would follow is ``SKIP_NONE``, so the batch keeps the shape (and plan template) it has.
    ``auto``: the source-fed ones skip when the last batch that read rows
    (``last_data_progress``, its progress as a dict) read at least ``min_rows`` rows and every
    streaming aggregation in it stored at least ``min_keys_per_row`` keys per row read
    (``numRowsUpdated``: every key of the batch is put); by default :data:`MIN_ROWS` and
    :data:`MIN_KEYS_PER_ROW`."""
    requested = _requested(last_data_progress, setting, min_rows, min_keys_per_row)
    return requested if any(skips_partial(s, requested) for s in skippable) else SKIP_NONE


def _requested(last_data_progress: Mapping[str, Any] | None, setting: str, min_rows: int | None, min_keys_per_row: float | None) -> str:
    if setting == "true":
        return SKIP_ALL
    if setting != "auto" or not last_data_progress:
        return SKIP_NONE
    min_rows = MIN_ROWS if min_rows is None else min_rows
    min_keys_per_row = MIN_KEYS_PER_ROW if min_keys_per_row is None else min_keys_per_row
    rows = int(last_data_progress.get("numInputRows") or 0)
    if rows < max(min_rows, 1):
        return SKIP_NONE
    aggregations = [op for op in last_data_progress.get("stateOperators") or [] if op.get("operatorName") == _AGGREGATION_OPERATOR]
    if not aggregations:
        return SKIP_NONE
    if all(int(op.get("numRowsUpdated") or 0) >= min_keys_per_row * rows for op in aggregations):
        return SKIP_SOURCE_FED
    return SKIP_NONE
