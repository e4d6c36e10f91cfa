"""What a statestream task does to the Python worker it runs in, beyond its own work.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task (its
``setup_spark_files``). On Python before 3.13 that makes every ``zipimporter`` in
``sys.path_importer_cache`` read its archive's whole directory again. The worker imports
``pyspark`` and ``py4j`` from ``pyspark.zip`` and the py4j zip, and every package imported from
them leaves a zipimporter there: about 15 of them, so each task first spends 70 to 150 ms
re-reading the same two directories. Measured with py-spy on 250 batches of 20 rows, this was
three quarters of the Python workers' time, and the largest part of a small batch.

Those cache entries only save a lookup: ``zipimport`` keeps each archive's directory in its own
module cache, so an entry dropped here is rebuilt without reading the archive, when an import
next needs it. Dropping them at the end of a task makes the next task's invalidation a loop over
a few file-system finders. The archives do not change while a worker lives: Spark starts a new
worker for a new ``pyspark.zip``.
"""

from __future__ import annotations

import sys
import zipimport

__all__ = ["forget_zip_importers"]


def forget_zip_importers() -> int:
    """Drop the zip importers from ``sys.path_importer_cache``; returns how many were dropped."""
    cache = sys.path_importer_cache
    stale = [path for path, finder in list(cache.items()) if isinstance(finder, zipimport.zipimporter)]
    for path in stale:
        cache.pop(path, None)
    return len(stale)
