"""``StreamingSession`` points Spark's Python workers at the driver's interpreter when
``PYSPARK_PYTHON`` is unset (a virtualenv used without activation), and leaves an explicit
setting alone."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from statestream.session import use_driver_python


def test_unset_means_the_driver_interpreter(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3"))
    use_driver_python(spark)
    assert spark.sparkContext.pythonExec == sys.executable
    import os

    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_an_explicit_setting_is_kept(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3.11")
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="/opt/python/bin/python3.11"))
    use_driver_python(spark)
    assert spark.sparkContext.pythonExec == "/opt/python/bin/python3.11"
