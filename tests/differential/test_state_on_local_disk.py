"""State versions cached on local disk (``spark.statestream.stateStore.onLocalDisk``) against
Spark's own engine.

By default each Python worker keeps the versions it committed as memory-mapped Arrow files under
Spark's local directories instead of in its heap; ``false`` keeps them in the heap. The rows must
not change: each test feeds both engines the same files and compares every batch's rows,
watermark, state rows and rows dropped as late, and checks that the workers did map their
versions from files (they are there while the query runs), or did not when the conf is off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.differential.test_plan_reuse import QUERIES, _steps, _watermarks_and_state_rows
from tests.differential.test_sources_more import assert_same, both, drive
from tests.spark_confs import session_confs

#: the store is the same for every operator, so two of them (tests/cluster runs more, on
#: executors of their own): with the conf unset (the default, on local disk), set to true, and off
CASES = [("window count update", None), ("dedup within watermark", "true"), ("window count update", "false")]


def local_state_files(spark: Any, pattern: str = "*.arrow") -> list[Path]:
    """The state files (``pattern``) the Python workers keep under the driver's block manager
    directories (in local mode the executor's; Spark hands them to its Python workers)."""
    env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
    dirs = [Path(str(d.getPath())) for d in env.blockManager().diskBlockManager().localDirs()]
    return [f for d in dirs for f in d.glob(f"statestream-state-*/*/*/*/{pattern}")]


def files_per_batch(spark: Any, name: str, seen: list[int], pattern: str = "*.arrow") -> Any:
    """The scenario of ``both`` for query ``name`` of ``QUERIES``, which notes in ``seen``, after
    each of statestream's batches, how many of its state files (``pattern``) are on local disk
    (files of earlier queries stay while their versions are cached: only this one's count)."""
    build, mode = QUERIES[name]

    def scenario(engine: Any, work: Path) -> Any:
        src = work / "src"
        src.mkdir(parents=True)
        earlier = set(local_state_files(spark, pattern))
        on_batch = (lambda b: seen.append(len(set(local_state_files(spark, pattern)) - earlier))) if engine is not spark else None
        return drive(engine, lambda rs: build(rs, src), work, _steps(src), mode=mode, on_batch=on_batch)

    return scenario


@pytest.mark.parametrize(("name", "setting"), CASES)
def test_versions_on_local_disk_give_sparks_batches(spark, ours, tmp_path, name, setting):
    from statestream.state.local_disk import ON_LOCAL_DISK_CONF

    seen: list[int] = []
    assert spark.conf.get(ON_LOCAL_DISK_CONF, None) is None
    with session_confs(spark, {ON_LOCAL_DISK_CONF: setting} if setting else {}):
        expected, actual = both(spark, ours, tmp_path, files_per_batch(spark, name, seen))
    assert_same(expected, actual)
    assert _watermarks_and_state_rows(expected) == _watermarks_and_state_rows(actual)
    if setting == "false":
        assert seen and max(seen) == 0, seen
    else:  # from the second batch on, the state of the first is cached in mapped files
        assert seen and max(seen[1:]) > 0, seen
