"""The rules of running jobs unchanged, without Spark: the launcher's command line, which
sessions ``enable_everywhere`` serves, and which inputs make a query mix the two engines."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from statestream.commands import launcher
from statestream.plan import logical as L
from statestream.plan.analysis import inputs_from_spark_engine
from statestream.api.session import _wanted


@pytest.fixture
def calls(monkeypatch):
    seen: list[tuple] = []
    monkeypatch.setattr(launcher, "run_path", lambda p, a=(): seen.append(("path", p, list(a))))
    monkeypatch.setattr(launcher, "run_module", lambda m, a=(): seen.append(("module", m, list(a))))
    monkeypatch.setattr(launcher, "run_code", lambda c, a=(): seen.append(("code", c, list(a))))
    monkeypatch.setattr(launcher, "interact", lambda: seen.append(("console",)))
    monkeypatch.setattr(launcher, "run_stdin", lambda a=(): seen.append(("stdin", list(a))))
    return seen


def test_python_command_line(calls, capsys):
    assert launcher.main(["job.py", "a", "-m", "--x"]) == 0
    assert launcher.main(["-m", "jobs.count", "--date", "d"]) == 0
    assert launcher.main(["-c", "print(1)", "z"]) == 0
    assert launcher.main(["-u", "job.py"]) == 0  # an interpreter flag before the program is ignored
    assert launcher.main([]) == 0
    assert launcher.main(["-", "y"]) == 0
    assert launcher.main(["-X", "dev", "job.py"]) == 0
    assert calls == [
        ("path", "job.py", ["a", "-m", "--x"]),  # the program's own flags are its own
        ("module", "jobs.count", ["--date", "d"]),
        ("code", "print(1)", ["z"]),
        ("path", "job.py", []),
        ("console",),
        ("stdin", ["y"]),
        ("path", "job.py", []),
    ]
    assert launcher.main(["--frobnicate"]) == 2
    assert "unknown option --frobnicate" in capsys.readouterr().err


def test_warning_filters_as_python_reads_them(calls):
    import warnings

    with warnings.catch_warnings():
        assert launcher.main(["-W", "error::DeprecationWarning", "job.py"]) == 0
        assert warnings.filters[0][:3] == ("error", None, DeprecationWarning)
    assert launcher._warning_filter("ignore") == ("ignore", "", Warning, "", 0)
    assert launcher._warning_filter("d::UserWarning::3") == ("default", "", UserWarning, "", 3)


def test_the_program_directory_heads_the_path(tmp_path, monkeypatch):
    """``sys.path[0]`` is the program's directory (a directory program: itself), in place of
    the launcher's own, as with ``python job.py``; ``sys.argv`` and ``__name__`` are the program's."""
    import sys

    monkeypatch.setattr(launcher, "enable_everywhere", lambda: None)
    monkeypatch.setattr(sys, "path", ["/launcher/bin", "/site"])
    monkeypatch.setattr(sys, "argv", ["statestream-python"])
    program = tmp_path / "job.py"
    program.write_text("import sys\nSEEN.extend([sys.path[0], sys.argv, __name__])\n")
    seen: list = []
    import builtins

    monkeypatch.setattr(builtins, "SEEN", seen, raising=False)
    launcher.run_path(str(program), ["a"])
    assert seen == [str(tmp_path), [str(program), "a"], "__main__"]
    assert sys.path[1:] == ["/site"]


def test_log_level_from_the_environment():
    logger = logging.getLogger("statestream")
    before = (logger.level, list(logger.handlers))
    try:
        launcher.configure_logging({})
        assert logger.handlers == before[1]
        launcher.configure_logging({launcher.LOG_LEVEL_ENV: "info"})
        launcher.configure_logging({launcher.LOG_LEVEL_ENV: "INFO"})  # one handler, however often
        assert logger.level == logging.INFO and len(logger.handlers) == len(before[1]) + 1
    finally:
        logger.setLevel(before[0])
        logger.handlers[:] = before[1]


class _Conf:
    def __init__(self, values: dict[str, str] | None, fails: bool = False) -> None:
        self.values, self.fails = values or {}, fails

    def get(self, key: str, default: str) -> str:
        if self.fails:
            raise RuntimeError("no JVM")
        return self.values.get(key, default)


@dataclass
class _Session:
    conf: _Conf


def test_which_sessions_are_served():
    assert _wanted(_Session(_Conf({})))
    assert _wanted(_Session(_Conf({"spark.statestream.enabled": "true"})))
    assert not _wanted(_Session(_Conf({"spark.statestream.enabled": "false"})))
    assert not _wanted(_Session(_Conf({"spark.statestream.enabled": " FALSE "})))
    assert _wanted(_Session(_Conf({}, fails=True)))


@dataclass
class _Template:
    isStreaming: bool  # noqa: N815 - PySpark's name


def test_inputs_from_spark_engine():
    ours = L.StreamingRelation(template=_Template(True), source_spec=None)
    static = L.BatchRelation(template=_Template(False))
    spark_stream = L.BatchRelation(template=_Template(True))
    assert inputs_from_spark_engine(L.Union(template=None, inputs=(ours, static))) == []
    join = L.Join(template=None, left=ours, right=spark_stream, join_type="Inner", description="", transform=None)
    assert inputs_from_spark_engine(join) == [spark_stream]
