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
``use_preloading_daemon`` sets for a local-mode context), this module moves Spark's zips behind
the installed PySpark of the same version (``installed_packages_first``: the zips' modules are
compiled from source in every daemon), imports PySpark's daemon and then those modules, drops the zip importers from the import cache (an import that still
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

import os
import sys
import zipfile

__all__ = ["MODULE", "installed_packages_first", "preload", "main"]

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


def _zipped_package(entry: str) -> str | None:
    """The package a ``sys.path`` entry of Spark's own zips holds (``pyspark`` or ``py4j``)."""
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith("-src.zip"):
        return "py4j"
    return None


def _version_file(entry: str, package: str) -> bytes | None:
    """The bytes of ``package/version.py`` under a ``sys.path`` entry, a directory or a zip."""
    try:
        if entry.endswith(".zip"):
            with zipfile.ZipFile(entry) as z:
                return z.read(f"{package}/version.py")
        with open(os.path.join(entry or os.curdir, package, "version.py"), "rb") as f:
            return f.read()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def installed_packages_first(path: list[str]) -> list[str]:
    """``path`` with Spark's ``pyspark.zip`` and py4j zip moved to its end when the same
    version of the package is installed on it (its ``version.py`` byte for byte).

    Spark puts its zips first on a worker's path, and Python cannot cache the bytecode of
    modules imported from a zip: every daemon compiled PySpark from source, about 0.35 s of
    CPU more than importing the installed package's cached bytecode (0.52 against 0.17 s
    here), at the start of a query's first batch. A pip-installed PySpark ships its zip beside
    its own installed sources, so the two are the same version; a different one (another
    ``SPARK_HOME``) keeps the zip first, as Spark meant.
    """
    moved: list[str] = []
    for entry in path:
        package = _zipped_package(entry)
        if package is None:
            continue
        installed = next(
            (e for e in path if not e.endswith(".zip") and os.path.isdir(os.path.join(e or os.curdir, package))), None
        )
        zipped = _version_file(entry, package)
        if installed is not None and zipped is not None and _version_file(installed, package) == zipped:
            moved.append(entry)
    return [e for e in path if e not in moved] + moved


def main() -> None:
    """PySpark's daemon, run after :func:`preload`, with PySpark imported from its installed
    package when that is the zip's version (:func:`installed_packages_first`). PySpark's daemon
    module picks its worker module from ``sys.argv`` as it is imported, which is the same here."""
    if "pyspark" not in sys.modules:  # statestream's package imports nothing (its __init__)
        sys.path[:] = installed_packages_first(sys.path)
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
