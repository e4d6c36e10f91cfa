"""The layers' promises about what they import, checked in a fresh interpreter: the storage
layers (``state/``, ``checkpoint/``) import no PySpark, directly or through the package's own
modules, so that they run where PySpark is not (a reader of a checkpoint, a repartition tool)
and a change to them cannot reach the JVM; and the errors package names every error once."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import statestream
import statestream.errors

PACKAGE = Path(statestream.__file__).parent


def _modules(folder: str) -> list[str]:
    return [f"statestream.{folder}"] + [
        f"statestream.{folder}.{m.name}" for m in pkgutil.iter_modules([str(PACKAGE / folder)])
    ]


def test_storage_layers_import_no_pyspark():
    storage = _modules("state") + _modules("checkpoint")
    code = (
        "import importlib, sys\n"
        f"for name in {storage!r}:\n"
        "    importlib.import_module(name)\n"
        "    leaked = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith(('pyspark.', 'py4j')))\n"
        "    if leaked:\n"
        "        raise SystemExit(f'{name} imports {leaked[:3]}')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    assert len(storage) > 10  # the walk found the modules


def test_errors_front_door_names_each_error_of_its_modules():
    homes = statestream.errors._HOMES
    found: dict[str, str] = {}
    for module in pkgutil.iter_modules([str(PACKAGE / "errors")]):
        tree = ast.parse((PACKAGE / "errors" / f"{module.name}.py").read_text())
        names = next(
            ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
        )
        for name in names:
            assert name not in found, f"{name} is in both errors.{found[name]} and errors.{module.name}"
            found[name] = module.name
    assert found == homes
    for name in homes:
        assert getattr(statestream.errors, name) is not None


def test_exception_classes_live_in_the_errors_package():
    """A public exception class defined outside ``statestream/errors/`` is an error text that a
    reader does not find where the package says (private control-flow exceptions may stay)."""
    outside = []
    for path in PACKAGE.rglob("*.py"):
        if "errors" in path.relative_to(PACKAGE).parts[:1]:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    outside.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert outside == []
