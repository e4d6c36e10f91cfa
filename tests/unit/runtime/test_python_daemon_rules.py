"""The preloading daemon's wrapper of PySpark's worker loop: a socket the JVM closed (a killed
task) ends the forked worker with PySpark's exit status and no traceback; other errors pass."""

from __future__ import annotations

import subprocess
import sys

import pytest

from statestream.runtime.python_daemon import quiet_when_the_jvm_left

CHILD = """
import sys
from statestream.runtime.python_daemon import quiet_when_the_jvm_left
def worker(sock, authenticated):
    raise {error}("the JVM went away")
quiet_when_the_jvm_left(worker)(None, False)
"""


@pytest.mark.parametrize("error", ["BrokenPipeError", "ConnectionResetError"])
def test_a_closed_socket_ends_the_worker_quietly(error):
    done = subprocess.run([sys.executable, "-c", CHILD.format(error=error)], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (1, "")


def test_other_errors_and_results_pass_through():
    assert quiet_when_the_jvm_left(lambda sock, authenticated: 0)(None, True) == 0

    def broken(sock, authenticated):
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        quiet_when_the_jvm_left(broken)(None, True)
