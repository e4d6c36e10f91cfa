"""The examples in the docstrings run as written (doctest), module by module: a renamed
argument or a changed message breaks its example here, not in a reader's hands."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import statestream.checkpoint
import statestream.commands
import statestream.connect
import statestream.errors
import statestream.operators
import statestream.plan
import statestream.runtime
import statestream.state
import statestream.tools

#: the packages whose docstring examples are checked here, without Spark (the public API's,
#: which need a session, are in tests/spark/test_api_docstring_examples.py)
PACKAGES = (
    statestream.errors, statestream.state, statestream.checkpoint, statestream.operators, statestream.plan, statestream.runtime,
    statestream.tools, statestream.commands, statestream.connect,
)

MODULES = sorted(
    {package.__name__ for package in PACKAGES}
    | {m.name for package in PACKAGES for m in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")}
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed (run: python -m doctest -v)"
