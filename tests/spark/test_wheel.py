"""The package as a user installs it: ``python -m build`` makes a wheel and an sdist with the
project's metadata (name, version, dependencies, extras, the two programs), and the wheel,
installed into a fresh virtualenv outside the checkout, runs the seed query with ``statestream
run`` (the job itself imports nothing of statestream).

The fresh virtualenv gets the wheel alone (``--no-deps``); its dependencies (PySpark, pyarrow,
pandas, numpy) come from the test environment's site-packages through a ``.pth`` line, which
Python adds to the path without running the ``.pth`` files there (so the checkout's editable
install stays out of sight). ``pip check`` then confirms that the wheel's declared dependencies
are met, and the job's log shows that the copy of statestream that ran is the wheel's.
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SEED_JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F

spark = SparkSession.builder.getOrCreate()
counts = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
          .withWatermark("timestamp", "20 seconds")
          .groupBy(F.window("timestamp", "5 seconds").alias("group"))
          .agg(F.count("value").alias("value_count")))
query = (counts.writeStream.outputMode("update").format("memory").queryName("counts")
         .option("checkpointLocation", sys.argv[1]).start())
while (query.lastProgress or {"batchId": -1})["batchId"] < 2:
    query.awaitTermination(0.5)
progress = query.lastProgress
query.stop()
rows = spark.sql("SELECT group.start, group.end, value_count FROM counts").collect()
widths = {(r.end - r.start).total_seconds() for r in rows}
print("batches", progress["batchId"] + 1, "rows", len(rows), "widths", sorted(widths), "counted", min(r.value_count for r in rows))
'''


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, stdin=subprocess.DEVNULL, **kwargs)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    return out


def test_wheel_and_sdist_metadata(dist):
    """One wheel and one sdist, named and versioned as the package, with pyproject's
    dependencies and extras, both programs, and no tests or benchmarks inside."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    import statestream

    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"statestream-{statestream.__version__}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"statestream-{statestream.__version__}.tar.gz"]
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        info = f"statestream-{statestream.__version__}.dist-info"
        meta = email.message_from_string(whl.read(f"{info}/METADATA").decode())
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "statestream" and meta["Version"] == statestream.__version__
    assert meta["Requires-Python"] == project["requires-python"]
    requires = {Requirement(r) for r in meta.get_all("Requires-Dist") if "extra ==" not in r}
    assert requires == {Requirement(d) for d in project["dependencies"]}, requires
    assert set(meta.get_all("Provides-Extra")) == set(project["optional-dependencies"])
    for program, target in project["scripts"].items():
        assert f"{program} = {target}" in entry_points
    assert all(n.startswith(("statestream/", info)) for n in names), [n for n in names if not n.startswith(("statestream/", info))]
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "statestream").rglob("*.py")}
    assert packages <= {n.rsplit("/", 1)[0] for n in names}, packages - {n.rsplit("/", 1)[0] for n in names}
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "statestream/__init__.py"} <= members


def test_the_wheel_runs_the_seed_query_from_a_fresh_virtualenv(dist, tmp_path):
    """The wheel in a new virtualenv, run from outside the checkout: ``statestream run`` serves
    the unmodified seed query (rate source, 20 s watermark, 5 s windows, count), its batches
    run on statestream, and the copy of statestream that ran is the wheel's."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    wheel = next(dist.glob("*.whl"))
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    _run([str(py), "-m", "pip", "check"])
    job = tmp_path / "seed.py"
    job.write_text(SEED_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATESTREAM_TEST", "PYSPARK_SUBMIT_ARGS", "PYTHONPATH"))}
    env.update(
        STATESTREAM_LOG_LEVEL="INFO", PYSPARK_PYTHON=str(py), PYSPARK_DRIVER_PYTHON=str(py),
        PYSPARK_SUBMIT_ARGS="--conf spark.master=local[2] --conf spark.sql.shuffle.partitions=2 --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false pyspark-shell",
    )
    where = _run([str(py), "-c", "import statestream; print(statestream.__file__)"], cwd=tmp_path, env=env).stdout.strip()
    assert where.startswith(str(site)), where
    ran = _run([str(venv / "bin" / "statestream"), "run", str(job), str(tmp_path / "checkpoint")], cwd=tmp_path, env=env)
    assert "statestream serves the streaming entry points" in ran.stderr, ran.stderr[-3000:]
    assert ran.stderr.count("statestream.runtime.progress_tracker: progress: batch") >= 3, ran.stderr[-3000:]
    words = ran.stdout.split()
    assert words[:1] == ["batches"] and int(words[1]) >= 3, ran.stdout
    assert int(words[3]) >= 1 and words[5] == "[5.0]" and int(words[7]) >= 1, ran.stdout
