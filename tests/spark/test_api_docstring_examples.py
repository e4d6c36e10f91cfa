"""The examples in the docstrings of the public API (``statestream.api``) run as written
(doctest) against the suite's SparkSession: a renamed argument or a changed output breaks its
example here, not in a reader's hands."""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil

import pyspark.sql.functions
import pytest

import statestream
import statestream.api

MODULES = sorted(m.name for m in pkgutil.iter_modules(statestream.api.__path__, "statestream.api."))

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_api_docstring_examples_run(spark, tmp_path, name):
    module = importlib.import_module(name)
    globs = {"spark": spark, "tmp": str(tmp_path), "F": pyspark.sql.functions, "StreamingSession": statestream.StreamingSession}
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    report = io.StringIO()
    for test in finder.find(module, name, globs=globs):
        # DocTestFinder copies ``globs`` per docstring: each example starts from the same globals
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed:\n{report.getvalue()}"
