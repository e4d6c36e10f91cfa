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
the installed PySpark of the same files (``installed_packages_first``: the zips' modules are
compiled from source in every daemon), imports PySpark's daemon and then those modules, drops
the zip importers from the import cache (an import that still needs one makes it again from
zipimport's own directory cache), and hands over to PySpark's daemon: every worker it forks
finds the modules imported, in pages shared copy-on-write. Importing allocates no Arrow
memory; the native threads it starts (OpenBLAS's, with numpy, which PySpark's own daemon
already has, and jemalloc's background thread, with pyarrow) come with their libraries' own
fork handlers.

Measured (bench/README, session 31): W1's first state stage, whose first task forks a second
worker, took 309 and 328 ms against 583 and 773 ms with PySpark's daemon (Spark's event log,
two runs each); with worker reuse off, 20-row batches took 251 ms against 617 ms (median).
An earlier attempt (session 25) saw no change of W1's whole first batch beyond its noise.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import sys
import zipfile
from types import ModuleType
from typing import Any, Callable

from statestream.operators.python_worker import forget_zip_importers

__all__ = ["MODULE", "installed_packages_first", "main", "preload", "quiet_when_the_jvm_left"]

#: this module's name, as ``spark.python.daemon.module`` takes it
MODULE = "statestream.runtime.python_daemon"


def preload() -> None:
    """Import what a state step imports in a worker (see the module docstring)."""
    import pandas  # noqa: F401 - pyarrow imports it the first time it builds an array
    import pyarrow
    import pyarrow.compute

    try:  # Acero, behind pyarrow's Table.join and group_by (state/keys.py, the merges): 9-17 ms a worker
        import pyarrow.acero  # noqa: F401
    except ImportError:  # a pyarrow built without it: the steps that need it say so themselves
        pass

    import statestream.operators.state_step  # lazy: main() chooses where PySpark comes from first
    import statestream.operators.stateful  # lazy: main() chooses where PySpark comes from first
    import statestream.state.provider  # noqa: F401 - lazy: main() chooses where PySpark comes from first


def _zipped_package(entry: object) -> str | None:
    """The package a ``sys.path`` entry of Spark's own zips holds (``pyspark`` or ``py4j``)."""
    if not isinstance(entry, str):
        return None
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        return "pyspark"
    if name.startswith("py4j-") and name.endswith("-src.zip"):
        return "py4j"
    return None


#: the files of each package compared between Spark's zip and the installed package
_COMPARED = {
    "pyspark": ("version.py", "daemon.py", "worker.py"),
    "py4j": ("version.py", "java_gateway.py"),
}


def _same_as_installed(zip_path: str, package: str, others: list[str]) -> bool:
    """Whether the package that ``others`` (the path without Spark's zips) would import, found
    as Python's import finds it (a directory, an egg, another zip), has the zip's files."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(package, others)
        if spec is None or spec.origin is None or spec.loader is None:
            return False
        where = os.path.dirname(spec.origin)
        read = spec.loader.get_data  # type: ignore[attr-defined]
        with zipfile.ZipFile(zip_path) as z:
            return all(read(os.path.join(where, n)) == z.read(f"{package}/{n}") for n in _COMPARED[package])
    except Exception:  # noqa: BLE001 - unreadable either side: Spark's zip stays first
        return False


def installed_packages_first(path: list[str]) -> list[str]:
    """``path`` with Spark's ``pyspark.zip`` and py4j zip moved to its end when the package the
    rest of the path holds has the same files (its version, daemon and worker modules).

    Spark puts its zips first on a worker's path, and Python cannot cache the bytecode of
    modules imported from a zip: every daemon compiled PySpark from source, about 0.35 s of
    CPU more than importing the installed package's cached bytecode (0.52 against 0.17 s
    here), at the start of a query's first batch. A pip-installed PySpark ships its zip beside
    its own installed sources, so the two are the same; another one (another ``SPARK_HOME``)
    keeps the zip first, as Spark meant.
    """
    zips = {i: pkg for i, e in enumerate(path) if (pkg := _zipped_package(e)) is not None}
    if not zips:
        return list(path)
    others = [e for i, e in enumerate(path) if i not in zips and isinstance(e, str)]
    moved = {i for i, pkg in zips.items() if _same_as_installed(path[i], pkg, others)}
    return [e for i, e in enumerate(path) if i not in moved] + [path[i] for i in sorted(moved)]


def _pyspark_daemon() -> ModuleType:
    """PySpark's daemon module, imported from the installed package when
    :func:`installed_packages_first` moves Spark's zips; from the zips, as Spark meant, when that
    fails (a daemon that cannot start fails every Python task of the context)."""
    spark_path = list(sys.path)
    if "pyspark" not in sys.modules:  # statestream's package imports nothing (its __init__)
        try:
            sys.path[:] = installed_packages_first(spark_path)
        except Exception:  # noqa: BLE001 - Spark's path as it was
            sys.path[:] = spark_path
    try:
        from pyspark import daemon

        return daemon
    except ImportError:
        if sys.path == spark_path:
            raise
        sys.path[:] = spark_path
        for name in [m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")]:
            del sys.modules[name]
        importlib.invalidate_caches()
        from pyspark import daemon

        return daemon


def quiet_when_the_jvm_left(worker: Callable[..., int]) -> Callable[..., int]:
    """PySpark's forked worker loop (``daemon.worker``), ending its process silently when the
    JVM closed the task's socket: a task killed by a stop or a cancelled stage. PySpark's
    daemon prints the ``BrokenPipeError`` of its last flush as a traceback, then exits with 1;
    the exit stays, the traceback (which tells the user nothing: the task was killed on
    purpose) goes. Any other error is PySpark's to report, as before."""

    @functools.wraps(worker)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            return worker(*args, **kwargs)
        except (BrokenPipeError, ConnectionResetError):
            os._exit(1)

    return run


def main() -> None:
    """PySpark's daemon, run after :func:`preload`, with PySpark imported from its installed
    package when that has the zip's files (:func:`_pyspark_daemon`). PySpark's daemon module
    picks its worker module from ``sys.argv`` as it is imported, which is the same here."""
    daemon = _pyspark_daemon()

    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - the workers then import on their own, as without this
        print(f"statestream: the Python daemon could not preload modules: {exc!r}", file=sys.stderr)  # noqa: T201 - no logging is set up in the daemon yet; stderr reaches the executor's log

    forget_zip_importers()
    daemon.worker = quiet_when_the_jvm_left(daemon.worker)  # type: ignore[attr-defined]  # the manager's forks call it by this name
    daemon.manager()


if __name__ == "__main__":
    main()
