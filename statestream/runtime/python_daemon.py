"""PySpark's Python daemon, with what a state step needs imported before it forks a worker.

PySpark starts one daemon per executor (``python -m pyspark.daemon``), which forks a worker for
each Python task slot; a worker imports what its function needs only once it has one. A state
step needs pyarrow's compute kernels, pandas (pyarrow imports it the first time it builds an
array) and statestream's state modules: about 0.3 s of CPU in every worker that starts. And
the first task of every new worker re-read the directory of ``pyspark.zip`` (about 0.1 s
here): the daemon imported PySpark from that zip, its fork inherits the zip's importer, and
PySpark's worker invalidates the import caches before each task. A query's first batch starts
its workers beside its first scan; with ``spark.python.worker.reuse=false``, or a trigger
longer than Spark's one-minute idle timeout for a worker, every task or every batch does.

Run as the daemon (``spark.python.daemon.module``, which ``runtime.worker_warmup``'s
``use_preloading_daemon`` sets for a local-mode context), this module imports PySpark's daemon
and then those modules, drops the zip importers from the import cache (an import that still
needs one makes it again from zipimport's own directory cache), and hands over to PySpark's
daemon: every worker it forks finds the modules imported, in pages shared copy-on-write.
Importing allocates no Arrow memory; the native threads it starts (OpenBLAS's, with numpy,
which PySpark's own daemon already has, and jemalloc's background thread, with pyarrow) come
with their libraries' own fork handlers.

Measured (bench/README, session 31): W1's first state stage, whose first task forks a second
worker, took 309 and 328 ms against 583 and 773 ms with PySpark's daemon (Spark's event log,
two runs each); with worker reuse off, 20-row batches took 251 ms against 617 ms (median).
An earlier attempt (session 25) saw no change of W1's whole first batch beyond its noise.
"""

from __future__ import annotations

import sys

__all__ = ["MODULE", "preload", "main"]

#: this module's name, as ``spark.python.daemon.module`` takes it
MODULE = "statestream.runtime.python_daemon"


def preload() -> None:
    """Import what a state step imports in a worker (see the module docstring)."""
    import pandas  # noqa: F401 - pyarrow imports it the first time it builds an array
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401

    import statestream.operators.state_step  # noqa: F401
    import statestream.operators.stateful  # noqa: F401
    import statestream.state.provider  # noqa: F401


def main() -> None:
    """PySpark's daemon, run after :func:`preload`. PySpark's daemon module picks its worker
    module from ``sys.argv`` as it is imported, which is the same here."""
    from pyspark import daemon

    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - the workers then import on their own, as without this
        print(f"statestream: the Python daemon could not preload modules: {exc!r}", file=sys.stderr)
    from statestream.operators.python_worker import forget_zip_importers

    forget_zip_importers()
    daemon.manager()


if __name__ == "__main__":
    main()
