"""The layers' promises about what they import, checked in a fresh interpreter: the storage
layers (``state/``, ``checkpoint/``) import no PySpark, directly or through the package's own
modules, so that they run where PySpark is not (a reader of a checkpoint, a repartition tool)
and a change to them cannot reach the JVM; and the errors package names every error once and
holds every error text."""

from __future__ import annotations

import ast
import importlib
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


def _exported() -> dict[str, str]:
    """Each name the errors package exports, and its area module (no name in two areas)."""
    found: dict[str, str] = {}
    for area in statestream.errors.AREAS:
        for name in statestream.errors.area_module(area).__all__:
            assert name not in found, f"{name} is in both errors.{found[name]} and errors.{area}"
            found[name] = area
    return found


def test_errors_front_door_serves_each_error_of_its_areas():
    modules = {m.name for m in pkgutil.iter_modules([str(PACKAGE / "errors")])}
    assert modules == set(statestream.errors.AREAS)
    for name, area in _exported().items():
        assert getattr(statestream.errors, name) is getattr(statestream.errors.area_module(area), name)


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


def _error_constructors() -> tuple[set[str], tuple[object, ...]]:
    """The names and objects that build an error: ``analysis_error`` and every exception class
    the errors package exports."""
    classes = {
        name: getattr(statestream.errors, name)
        for name in _exported()
        if name[:1].isupper() and isinstance(getattr(statestream.errors, name), type)
    }
    names = set(classes) | {"analysis_error"}
    return names, (*classes.values(), statestream.errors.analysis_error)


def _is_text(node: ast.expr) -> bool:
    """A string literal or f-string, alone or in a concatenation (``"a " + b``, ``"%s" % b``)."""
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def test_error_texts_live_in_the_errors_package():
    """An error built outside ``statestream/errors/`` takes its text from a factory there: no
    call of ``analysis_error`` or of an exported exception class (under any alias) with a
    string literal or f-string among its positional arguments or as ``message``."""
    names, objects = _error_constructors()
    inline = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "errors" or path.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text())
        module_name = ".".join(("statestream", *relative.with_suffix("").parts)).removesuffix(".__init__")
        namespace = vars(importlib.import_module(module_name))
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("statestream.")
            for alias in node.names
            if alias.name in names
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name is None:
                continue
            builds_error = name in names or name in aliases or any(namespace.get(name) is o for o in objects)
            texts = [*node.args, *(k.value for k in node.keywords if k.arg == "message")]
            if builds_error and any(_is_text(arg) for arg in texts):
                inline.append(f"{relative}:{node.lineno}: {name}(...)")
    assert inline == [], "error texts outside statestream/errors/ (move each into a factory there):\n" + "\n".join(inline)


#: PySpark's private handles of its JVM objects: only ``_jvm/calls.py``'s accessors read them
JVM_HANDLES = frozenset({"_jvm", "_jsparkSession", "_jsc", "_jdf", "_jc", "_gateway"})


def test_jvm_handles_are_read_only_through_the_bridge():
    """Outside ``statestream/_jvm/``, no module reads ``x._jdf``, ``x._jvm``, ... of a PySpark
    object (a class's own attribute, ``self._jvm``, is its own business): the accessors of
    ``_jvm/calls.py`` are the one place that knows PySpark's private names."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "_jvm":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in JVM_HANDLES
                and isinstance(node.ctx, ast.Load)
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
    assert not found, "PySpark's JVM handles read outside statestream/_jvm (use its accessors):\n" + "\n".join(found)
