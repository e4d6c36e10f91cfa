"""A class-data-sharing archive for the JVMs of the child processes (crash and torture tests).

Why: every restart of a killed query is a new process, and most of its cost is the JVM loading
Spark's classes (about 8 s of session start and 3.5 s of first job on the CI machine's 2 cores).
JDK 13 and later can dump the classes one run loaded into an archive
(``-XX:ArchiveClassesAtExit``) that later JVMs map instead of loading the classes again
(``-XX:SharedArchiveFile``); with C1 alone (``-XX:TieredStopAtLevel=1``, these children run for
seconds) a child is ready in about half the time. The random-kill torture restarts a child 200
times, so this is what makes it fit the CI budget.

The archive is made once per JDK, PySpark and Python (a child runs the seed query to its end
with the dump option) and kept under ``.pytest_cache``. It is only a cache: a JVM that cannot
use it warns and loads classes as usual, and if it cannot be made the children run without it.
Nothing here changes what a child computes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "crash_child.py"
#: the child's JVM options come from this variable (``crash_child.main``)
ENV_CHILD_JAVA_OPTIONS = "STATESTREAM_TEST_CHILD_JAVA_OPTIONS"

_options: str | None = None


def _key() -> str:
    from statestream._jvm.java import ensure_java

    ensure_java()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    import pyspark

    text = f"{java}|{pyspark.__version__}|{sys.version}|{pyspark.__file__}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _make(archive: Path) -> bool:
    """Run the seed query to its end in a child whose JVM dumps its classes at exit."""
    from tests.crash.test_crash_recovery import write_inputs

    with tempfile.TemporaryDirectory(prefix="statestream-cds-") as tmp:
        work = Path(tmp)
        write_inputs(work / "input")
        partial = archive.with_suffix(f".{os.getpid()}.tmp")
        job = {
            "engine": "statestream",
            "query": "seed",
            "mode": "append",
            "input": str(work / "input"),
            "checkpoint": str(work / "checkpoint"),
            "output": str(work / "output"),
            "calls": str(work / "calls.log"),
            "result": str(work / "result.json"),
            "timeout": 300,
        }
        (work / "job.json").write_text(json.dumps(job))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STATESTREAM_TEST_CRASH")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env[ENV_CHILD_JAVA_OPTIONS] = f"-XX:ArchiveClassesAtExit={partial}"
        run = subprocess.run(
            [sys.executable, str(CHILD), str(work / "job.json")],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600, check=False,
        )
        if run.returncode != 0 or not partial.exists():
            log.warning("no class archive for the child JVMs (exit %s): %s", run.returncode, run.stderr[-2000:])
            partial.unlink(missing_ok=True)
            return False
        os.replace(partial, archive)
        return True


def child_java_options() -> str:
    """The JVM options for a child process: the shared class archive (made on first use) and
    C1 only; empty when the archive cannot be made or ``STATESTREAM_TEST_NO_CDS`` is set."""
    global _options
    if _options is not None:
        return _options
    _options = ""
    if os.environ.get("STATESTREAM_TEST_NO_CDS"):
        return _options
    cache = ROOT / ".pytest_cache" / "statestream-cds"
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"children-{_key()}.jsa"
    if archive.exists() or _make(archive):
        _options = f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -Xlog:cds=off -Xlog:cds+dynamic=off"
    return _options
