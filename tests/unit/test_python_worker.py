"""The zip importers a statestream task drops from the worker's import cache (no Spark)."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport

from statestream.operators.python_worker import forget_zip_importers, releasing_zip_importers


def _zip_package(tmp_path) -> str:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zpkg/__init__.py", "")
        z.writestr("zpkg/sub/__init__.py", "")
        z.writestr("zpkg/sub/first.py", "VALUE = 1\n")
        z.writestr("zpkg/sub/second.py", "VALUE = 2\n")
    return str(archive)


def _zip_entries() -> list[str]:
    return [p for p, f in sys.path_importer_cache.items() if isinstance(f, zipimport.zipimporter)]


def test_dropped_importers_leave_imports_working(tmp_path, monkeypatch):
    archive = _zip_package(tmp_path)
    monkeypatch.syspath_prepend(archive)
    for name in ("zpkg", "zpkg.sub", "zpkg.sub.first", "zpkg.sub.second"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    first = importlib.import_module("zpkg.sub.first")
    assert first.VALUE == 1
    mine = [p for p in _zip_entries() if p.startswith(archive)]
    assert len(mine) >= 2  # the archive and its packages' directories inside it

    assert forget_zip_importers() >= len(mine)
    assert not _zip_entries()
    # what PySpark's worker does at every task start is now cheap, and imports still work
    importlib.invalidate_caches()
    assert importlib.import_module("zpkg.sub.second").VALUE == 2


def test_a_udf_function_releases_them_after_it_ran(tmp_path, monkeypatch):
    archive = _zip_package(tmp_path)
    monkeypatch.syspath_prepend(archive)
    monkeypatch.delitem(sys.modules, "zpkg", raising=False)

    def finish(x: int) -> int:
        importlib.import_module("zpkg")
        assert _zip_entries()
        return x + 1

    wrapped = releasing_zip_importers(finish)
    assert wrapped.__name__ == "finish"
    assert wrapped(1) == 2
    assert not _zip_entries()


class _FakeFrame:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def mapInArrow(self, func, schema):  # noqa: N802 - PySpark's name
        self.calls.append(("mapInArrow", func.__name__, schema))
        return self

    def collect(self) -> list:
        self.calls.append(("collect",))
        return []


class _FakeContext:
    defaultParallelism = 3

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def addJobTag(self, tag: str) -> None:  # noqa: N802
        self.calls.append(("tag", tag))

    def setJobDescription(self, text: str) -> None:  # noqa: N802
        self.calls.append(("description", text))


class _FakeSession:
    def __init__(self) -> None:
        self.calls: list = []
        self.sparkContext = _FakeContext(self.calls)

    def range(self, start: int, end: int, step: int, partitions: int) -> _FakeFrame:
        self.calls.append(("range", start, end, step, partitions))
        return _FakeFrame(self.calls)


def test_worker_warm_up_once_per_context_with_the_query_tag():
    from statestream.runtime.worker_warmup import start_worker_warm_up

    spark = _FakeSession()
    thread = start_worker_warm_up(spark, "query-tag")
    assert thread is not None
    thread.join(10)
    assert spark.calls == [
        ("tag", "query-tag"),
        ("description", "statestream: start the Python workers"),
        ("range", 0, 3, 1, 3),  # a task per default parallelism
        ("mapInArrow", "warm_up", "ok INT"),
        ("collect",),
    ]
    assert start_worker_warm_up(spark, "another-query") is None  # the workers stay warm


def test_warm_up_function_imports_the_state_modules_and_emits_nothing():
    import os
    import subprocess

    code = (
        "import sys\n"
        "import pyarrow as pa\n"
        "from statestream.runtime.worker_warmup import warm_up\n"
        "before = 'statestream.state.provider' in sys.modules\n"
        "out = list(warm_up(iter([pa.record_batch({'id': pa.array([0], pa.int64())})])))\n"
        "print(before, out, 'statestream.state.provider' in sys.modules, 'pandas' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "[]", "True", "True"]
