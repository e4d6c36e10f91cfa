"""One SparkSession per test run (local[2], 2 shuffle partitions, UI off).

Tests under ``tests/unit`` must not need Spark at all; they never ask for the ``spark`` fixture.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _make_spark():
    from statestream._jvm.java import ensure_java

    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # credentials for the S3 test server on loopback (tests/spark/test_object_store_checkpoint.py):
    # set before the JVM starts, so that its Python workers, which write state, inherit them
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "statestream-test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "statestream-test")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("statestream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark():
    spark = _make_spark()
    yield spark
    spark.stop()


def pytest_addoption(parser):
    parser.addoption(
        "--soak", action="store_true", default=False,
        help="also run the soak cases (@pytest.mark.soak: the 200-kill torture, ...); scripts/soak.sh sets it",
    )
    parser.addoption(
        "--fuzz-examples", type=int, default=12,
        help="random queries the randomized differential tester runs (tests/differential/test_random_queries.py)",
    )
    parser.addoption(
        "--fuzz-families", default="",
        help="comma-separated operator families the randomized differential tester draws from (default: all)",
    )
    parser.addoption(
        "--fuzz-seed", type=int, default=0,
        help="the seed of the randomized differential tester's cases (scripts/fuzz.sh draws one and prints it)",
    )


@pytest.hookimpl(trylast=True)  # after the -m selection: a covering slow case must really run
def pytest_collection_modifyitems(config, items):
    from tests.known_gaps import apply

    apply(items)
    _drop_soak_cases_unless_asked(config, items)
    _drop_samples_covered_by_the_slow_tier(config, items)
    items.sort(key=_schedule_rank)


#: modules that run for minutes, longest first: they go first, so that with two workers
#: (scripts/test.sh) the long ones overlap the many short ones instead of ending the run alone
LONG_MODULES = (
    "tests/crash/test_random_kills.py",
    "tests/cluster/",
    "tests/crash/",
    "tests/kafka/test_kafka_crash.py",
    "tests/connect/test_connect_endpoint.py",
    "tests/spark/test_run_unchanged.py",
)


def _schedule_rank(item) -> int:
    path = item.nodeid.split("::")[0]
    for rank, prefix in enumerate(LONG_MODULES):
        if path.startswith(prefix):
            return rank
    return len(LONG_MODULES)


def _drop_soak_cases_unless_asked(config, items) -> None:
    """A soak case (``@pytest.mark.soak``) runs for many minutes (hundreds of kills, long
    cluster runs): it runs only with ``--soak`` (``scripts/soak.sh``), and CI runs its fixed-seed
    sample instead (the case marked ``covered_by_slow`` with its name)."""
    if config.getoption("--soak"):
        return
    drop = [item for item in items if item.get_closest_marker("soak") is not None]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


def _drop_samples_covered_by_the_slow_tier(config, items) -> None:
    """A default-run sample marked ``covered_by_slow("<test>")`` repeats, in small, a slow case
    of its module (the same crash point, which the slow case reaches too): when that slow case
    runs in the same session, the sample would only repeat it, so it is deselected."""
    selected = {item.nodeid for item in items}
    drop = []
    for item in items:
        marker = item.get_closest_marker("covered_by_slow")
        if marker is None:
            continue
        covering = f"{item.nodeid.split('::')[0]}::{marker.args[0]}"
        if covering in selected:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server (moto's) on loopback with a bucket ``checkpoints``; its
    ``host:port``. The credentials are the environment's (set above, before the JVM starts)."""
    pytest.importorskip("moto", reason="the object-store test needs moto[server] (pip install -e .[test])")
    import pyarrow.fs as pafs

    # (also set before the JVM starts, by _make_spark, for a run that has Spark)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "statestream-test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "statestream-test")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    endpoint = f"127.0.0.1:{port}"
    try:
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="statestream-test", secret_key="statestream-test",
                               region="us-east-1", allow_bucket_creation=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                fs.create_dir("checkpoints")
                break
            except OSError:
                assert proc.poll() is None, "the S3 test server exited"
                assert time.monotonic() < deadline, "the S3 test server did not start"
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
