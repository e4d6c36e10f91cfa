"""``StreamingSession`` points Spark's Python workers at the driver's interpreter when
``PYSPARK_PYTHON`` is unset and the workers run on this machine (a virtualenv used without
activation), and leaves an explicit setting, or a cluster's workers, alone."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from statestream.api.session import use_driver_python


def test_unset_means_the_driver_interpreter_on_a_local_master(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    for master in ("local[2]", "local-cluster[2,1,1024]"):
        spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3", master=master))
        use_driver_python(spark)
        assert spark.sparkContext.pythonExec == sys.executable


def test_a_cluster_master_keeps_the_workers_python(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3", master="yarn"))
    use_driver_python(spark)
    assert spark.sparkContext.pythonExec == "python3"


def test_an_explicit_setting_is_kept(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3.11")
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="/opt/python/bin/python3.11", master="local[2]"))
    use_driver_python(spark)
    assert spark.sparkContext.pythonExec == "/opt/python/bin/python3.11"
