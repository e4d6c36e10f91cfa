"""Run an unmodified PySpark program with its streaming queries on statestream.

``statestream run job.py [args...]`` and the ``statestream-python`` interpreter (for
``spark-submit``: ``--conf spark.pyspark.driver.python=statestream-python`` or
``PYSPARK_DRIVER_PYTHON=statestream-python``) set :func:`statestream.api.session.enable_everywhere`
and then run the program as ``python`` would: ``sys.argv``, ``__name__ == "__main__"``, the
program's directory first on ``sys.path``, its exit status and its Ctrl-C. Every classic
SparkSession the program makes, in any of its modules, then serves ``readStream``, ``streams``
and the state readers with statestream; batch work stays Spark's.
"""

from __future__ import annotations

import code
import logging
import os
import runpy
import sys
import warnings
from collections.abc import Sequence

from statestream.api.session import enable_everywhere

__all__ = ["run_path", "run_module", "run_code", "run_stdin", "interact", "main", "configure_logging", "LOG_LEVEL_ENV"]

USAGE = """usage: statestream-python [-W FILTER] [-m MODULE | -c CODE | FILE | -] [ARG ...]

A Python interpreter whose SparkSessions run their streaming queries on statestream
(spark-submit: --conf spark.pyspark.driver.python=statestream-python). With no FILE, an
interactive console (running PYTHONSTARTUP first, as pyspark's shell sets it).
STATESTREAM_LOG_LEVEL=INFO (or DEBUG, ...) prints statestream's own log to stderr."""

#: the level of statestream's own log on stderr (``INFO``, ``DEBUG``, ...); unset: the program's
#: logging configuration alone decides (by default, warnings and errors)
LOG_LEVEL_ENV = "STATESTREAM_LOG_LEVEL"


def configure_logging(environ: dict[str, str] | None = None) -> None:
    """Give the ``statestream`` logger a stderr handler at ``STATESTREAM_LOG_LEVEL``, when that is
    set; the root logger, which the program may configure itself, is left alone.

    >>> configure_logging({"STATESTREAM_LOG_LEVEL": "INFO"})                 # doctest: +SKIP
    """
    level = (os.environ if environ is None else environ).get(LOG_LEVEL_ENV, "").strip().upper()
    if not level:
        return
    logger = logging.getLogger("statestream")
    if not any(getattr(h, "_statestream_launcher", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._statestream_launcher = True  # type: ignore[attr-defined]  # noqa: SLF001
        logger.addHandler(handler)
    logger.setLevel(level)


def run_path(path: str, args: Sequence[str] = ()) -> None:
    """Run the program file ``path`` as ``python path args...`` would, on statestream.

    Parameters
    ----------
    path : str
        The program, a ``.py`` file (or a directory or zip with ``__main__.py``).
    args : sequence of str
        Its arguments (``sys.argv[1:]``).

    Examples
    --------
    >>> from statestream.commands.launcher import run_path                   # doctest: +SKIP
    >>> run_path("wordcount.py", ["localhost", "9999"])                      # doctest: +SKIP
    """
    enable_everywhere()
    sys.argv = [path, *args]
    # python puts the program's directory first on the path (a directory or zip: itself), where
    # this launcher's own directory (a console script's) was
    _set_path_head(os.path.abspath(path) if os.path.isdir(path) or path.endswith(".zip") else os.path.dirname(os.path.abspath(path)))
    runpy.run_path(path, run_name="__main__")


def run_module(name: str, args: Sequence[str] = ()) -> None:
    """Run the module ``name`` as ``python -m name args...`` would, on statestream.

    >>> from statestream.commands.launcher import run_module                 # doctest: +SKIP
    >>> run_module("jobs.sessionize", ["--date", "2026-12-06"])              # doctest: +SKIP
    """
    enable_everywhere()
    sys.argv = [name, *args]
    _set_path_head(os.getcwd())
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def run_code(source: str, args: Sequence[str] = ()) -> None:
    """Run ``source`` as ``python -c source args...`` would, on statestream.

    >>> from statestream.commands.launcher import run_code                   # doctest: +SKIP
    >>> run_code("import sys; print(sys.argv)", ["x"])                       # doctest: +SKIP
    ['-c', 'x']
    """
    _run_text(source, "<string>", ["-c", *args])


def run_stdin(args: Sequence[str] = ()) -> None:
    """Run the program read from standard input, as ``python - args...`` does, on statestream.

    >>> from statestream.commands.launcher import run_stdin                  # doctest: +SKIP
    >>> run_stdin(["x"])                                                     # doctest: +SKIP
    """
    _run_text(sys.stdin.read(), "<stdin>", ["-", *args])


def _run_text(source: str, filename: str, argv: list[str]) -> None:
    """A program given as text (``-c``, ``-``): the current directory heads the path, as in python."""
    enable_everywhere()
    sys.argv = argv
    _set_path_head("")
    exec(compile(source, filename, "exec"), {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102


def _set_path_head(entry: str) -> None:
    """``sys.path[0]`` as python sets it for the program, in place of the launcher's."""
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.append(entry)


def interact() -> None:
    """An interactive console on statestream, after the ``PYTHONSTARTUP`` file (pyspark's shell
    names its ``shell.py`` there, which makes ``spark``).

    >>> from statestream.commands.launcher import interact                   # doctest: +SKIP
    >>> interact()                                                           # doctest: +SKIP
    """
    enable_everywhere()
    sys.argv = [""]
    _set_path_head("")
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    startup = os.environ.get("PYTHONSTARTUP")
    if startup and os.path.isfile(startup):
        with open(startup, encoding="utf-8") as f:
            exec(compile(f.read(), startup, "exec"), namespace)  # noqa: S102
    code.interact(local=namespace, banner="", exitmsg="")


def _warning_filter(option: str) -> tuple:
    """python's ``-W action:message:category:module:lineno`` as ``warnings.filterwarnings``
    arguments (action and message; the rest as python reads it, category by name)."""
    import builtins

    parts = (option.split(":") + [""] * 5)[:5]
    actions = {"d": "default", "e": "error", "i": "ignore", "a": "always", "m": "module", "o": "once"}
    action = actions.get(parts[0][:1], parts[0] or "default") if len(parts[0]) <= 1 else parts[0]
    category = getattr(builtins, parts[2], Warning) if parts[2] else Warning
    return (action, parts[1], category, parts[3], int(parts[4]) if parts[4].isdigit() else 0)


def main(argv: Sequence[str] | None = None) -> int:
    """``statestream-python``: Python's command line (``-m``, ``-c``, a file, or nothing for the
    console), with statestream serving every SparkSession. Exceptions leave as they leave
    ``python``: a traceback and status 1, ``SystemExit``'s status, Ctrl-C's.

    >>> from statestream.commands.launcher import main                       # doctest: +SKIP
    >>> main(["job.py", "--once"])                                           # doctest: +SKIP
    0
    """
    args = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    while args:
        if args[0] in ("-u", "-B", "-E", "-s", "-I", "-O", "-OO", "-q"):  # flags that matter at start-up only
            args.pop(0)
        elif args[0] == "-W" and len(args) > 1:  # a warnings filter, as python's -W adds it
            warnings.filterwarnings(*_warning_filter(args[1]))
            del args[:2]
        elif args[0] == "-X" and len(args) > 1:  # an implementation option: too late to take here
            logging.getLogger(__name__).warning("statestream-python ignores -X %s (set it with PYTHONX... variables)", args[1])
            del args[:2]
        else:
            break
    if not args:
        interact()
    elif args[0] == "-":
        run_stdin(args[1:])
    elif args[0] in ("-h", "--help"):
        print(USAGE)  # noqa: T201 - a command line prints
    elif args[0] == "-m" and len(args) > 1:
        run_module(args[1], args[2:])
    elif args[0] == "-c" and len(args) > 1:
        run_code(args[1], args[2:])
    elif args[0].startswith("-"):
        print(f"statestream-python: unknown option {args[0]}\n{USAGE}", file=sys.stderr)  # noqa: T201
        return 2
    else:
        run_path(args[0], args[1:])
    return 0
