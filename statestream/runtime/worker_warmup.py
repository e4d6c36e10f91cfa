"""Python workers started while the first batch is being planned.

A query's first batch used to start its Python workers only when its state stage began: the
daemon forks, and each worker imports pyarrow, pandas and statestream's state modules, about
1.5 s, while everything else waited. Here a background thread runs one tiny job at the query's
start (one task per default parallelism, each importing those modules) while the query thread
lists its sources, writes its offsets and plans the batch; the state tasks then find warm
workers. It is done once per SparkContext (the workers stay up between queries), its job carries
the query's tag (a stop cancels it) and its failure only costs the time it meant to save.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["start_worker_warm_up"]

logger = logging.getLogger(__name__)

#: set on a SparkContext whose workers a query already warmed
_WARMED_ATTR = "_statestream_python_workers_warmed"


def start_worker_warm_up(spark: "SparkSession", job_tag: str) -> threading.Thread | None:
    """Start the warm-up job in a daemon thread, once per SparkContext; returns the thread, or
    None when this context's workers were warmed before."""
    sc = spark.sparkContext
    if getattr(sc, _WARMED_ATTR, False):
        return None
    setattr(sc, _WARMED_ATTR, True)

    def run() -> None:
        try:
            sc.addJobTag(job_tag)
            sc.setJobDescription("statestream: start the Python workers")
            n = max(1, int(sc.defaultParallelism))
            spark.range(0, n, 1, n).mapInArrow(warm_up, "ok INT").collect()
        except Exception:  # noqa: BLE001 - a stopped query or session; the batches start them anyway
            logger.debug("Python worker warm-up did not finish", exc_info=True)

    thread = threading.Thread(target=run, name="statestream-worker-warm-up", daemon=True)
    thread.start()
    return thread


def warm_up(batches: "Iterator[pa.RecordBatch]") -> "Iterator[pa.RecordBatch]":
    """The warm-up's ``mapInArrow`` function: it only imports what a state step needs."""
    import pandas  # noqa: F401 - pyarrow imports it for an empty table, as a step's store does
    import pyarrow.compute  # noqa: F401

    import statestream.operators.state_step  # noqa: F401
    import statestream.state.provider  # noqa: F401
    from statestream.operators.python_worker import forget_zip_importers

    for _ in batches:
        pass
    forget_zip_importers()
    yield from ()
