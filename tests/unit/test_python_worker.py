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
