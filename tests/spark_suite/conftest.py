"""The ``session`` of the adapted PySpark streaming tests, once per engine.

Every test of this directory takes ``session`` and runs twice: on Spark's own streaming engine
(``[spark]``: a self-check of the adaptation, Spark is the oracle) and on statestream
(``[statestream]``: a ``newSession()`` that ``statestream.enable`` serves). The test body is plain
PySpark code; after ``enable``, ``session.readStream``, ``session.streams`` and
``df.writeStream`` are statestream's. Hand-over to Spark's engine is switched off on the
statestream side, so a call statestream does not run fails the test instead of quietly running
on Spark.

The ``[spark]`` half checks the adaptation, not statestream: Spark's engine and the expected values
do not change with statestream's code, so it runs in the soak tier (``scripts/soak.sh``, marked
``soak``) and CI runs the ``[statestream]`` half.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

import statestream
from statestream.api.handover import HANDOVER_CONF

ENGINES = (pytest.param("spark", marks=pytest.mark.soak), "statestream")


@pytest.fixture(params=ENGINES)
def engine(request: Any) -> str:
    """The engine under test: ``"spark"`` or ``"statestream"``."""
    return request.param


@pytest.fixture
def session(spark: Any, engine: str) -> Iterator[Any]:
    """A fresh session of the shared SparkContext, served by ``engine``; its queries are
    stopped (and statestream's serving undone) afterwards."""
    s = spark.newSession()
    if engine == "statestream":
        s.conf.set(HANDOVER_CONF, "false")
        statestream.enable(s)
    try:
        yield s
    finally:
        for q in list(s.streams.active):
            try:
                q.stop()
            except Exception:  # noqa: BLE001 - a failed query is stopped already
                pass
        if engine == "statestream":
            statestream.disable(s)


@pytest.fixture
def database(session: Any, tmp_path: Any) -> Iterator[str]:
    """A database under ``tmp_path``, made the session's current one, so that the unqualified
    tables of Spark's tests stay out of the working directory; dropped with its tables."""
    name = f"spark_suite_{uuid.uuid4().hex[:8]}"
    session.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    session.catalog.setCurrentDatabase(name)
    try:
        yield name
    finally:
        for q in list(session.streams.active):
            q.stop()
        session.catalog.setCurrentDatabase("default")
        session.sql(f"DROP DATABASE {name} CASCADE")


@pytest.fixture
def text_dir(tmp_path: Any) -> str:
    """A directory holding one text file of two lines (``hello``, ``this``): the shape of the
    sample file Spark's streaming tests read as a text stream."""
    d = tmp_path / "text-input"
    d.mkdir()
    (d / "text-test.txt").write_text("hello\nthis")
    return str(d)

