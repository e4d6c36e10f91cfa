"""What a statestream task does to the Python worker it runs in, beyond its own work.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task (its
``setup_spark_files``). On Python before 3.13 that makes every ``zipimporter`` in
``sys.path_importer_cache`` read its archive's whole directory again. The worker imports
``pyspark`` and ``py4j`` from ``pyspark.zip`` and the py4j zip, and every package imported from
them leaves a zipimporter there: about 15 of them, so each task first spends 70 to 150 ms
re-reading the same two directories. Measured with py-spy on W9 (bench/, 60 batches of 20 rows),
this was three quarters of the Python workers' time, and the largest part of a small batch.

Those cache entries only save a lookup: ``zipimport`` keeps each archive's directory in its own
module cache, so an entry dropped here is rebuilt without reading the archive, when an import
next needs it. A task's own imports put some back, and so does a namespace package recomputing
its path (the invalidation makes every such path stale), so they are dropped as a task's Python
code ends: the next task's invalidation is then a loop over a few file-system finders. The state
steps, the join's scans, the Arrow UDFs of the aggregates, the foreach sink's partitions and the
Kafka source's tasks do it; the Kafka sink's and the offline repartition's tasks do not. The
archives do not change while a worker lives: Spark starts a new worker for a new ``pyspark.zip``.
"""

from __future__ import annotations

import functools
import sys
import zipimport
from typing import Any, Callable, TypeVar

__all__ = ["forget_zip_importers", "releasing_zip_importers"]

F = TypeVar("F", bound=Callable[..., Any])


def forget_zip_importers() -> int:
    """Drop the zip importers from ``sys.path_importer_cache``; returns how many were dropped."""
    cache = sys.path_importer_cache
    stale = [path for path, finder in list(cache.items()) if isinstance(finder, zipimport.zipimporter)]
    for path in stale:
        cache.pop(path, None)
    return len(stale)


def releasing_zip_importers(func: F) -> F:
    """``func`` (a Python UDF's function, run in a worker) followed by
    :func:`forget_zip_importers`."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            forget_zip_importers()

    return run  # type: ignore[return-value]
