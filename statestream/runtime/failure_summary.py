"""One line that says why a query failed, the user's code first.

A failure in a Python worker (a processor, a UDF, a ``foreachBatch`` function's job) reaches the
driver as a ``PythonException`` whose text holds the worker's traceback: statestream's own
frames, then the user's, then the error. Printing all of that at every layer is how one failure
used to appear six times in the log. The query's log line keeps the error and the innermost
frame outside statestream and PySpark (where the user's code raised it); the full traceback
stays on the exception the query raises (``awaitTermination``, ``exception()``) and in the log
at DEBUG.
"""

from __future__ import annotations

import re

__all__ = ["failure_summary", "user_frame"]

#: a traceback's frame line: ``File "<path>", line <n>, in <function>``
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
#: the packages whose frames are not the user's
_ENGINE_PARTS = ("/statestream/", "/pyspark/", "/py4j/", "pyspark.zip", "py4j-", "<frozen ")


def user_frame(text: str) -> str | None:
    """The innermost frame of the tracebacks in ``text`` that is not statestream's, PySpark's or
    Py4J's, as ``path, line N, in function``; None when there is none.

    Examples
    --------
    >>> text = '''Traceback (most recent call last):
    ...   File "/x/statestream/operators/transform_with_state.py", line 843, in _handle_rows
    ...   File "/home/me/job.py", line 10, in handleInputRows
    ... ValueError: boom'''
    >>> user_frame(text)
    '/home/me/job.py, line 10, in handleInputRows'
    >>> user_frame("no traceback here") is None
    True
    """
    found = None
    for line in text.splitlines():
        m = _FRAME.match(line)
        if m and not any(part in m.group("path") for part in _ENGINE_PARTS):
            found = f"{m.group('path')}, line {m.group('line')}, in {m.group('function').strip()}"
    return found


def _error_line(text: str) -> str | None:
    """The last ``Name: message`` line of the last traceback in ``text`` (the error raised)."""
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=None)
    if last is None:
        return None
    tail = lines[last:]
    # an exception's name first (notes added to it follow its line and look alike), then any
    # ``Name: message`` line
    for pattern in (r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b", r"^[A-Za-z_][\w.]*: "):
        for line in reversed(tail):
            if re.match(pattern, line):
                return line.strip()
    return None


def failure_summary(exc: BaseException) -> str:
    """``error (where the user's code raised it)``: for a Python worker's failure, the error line
    of its traceback and the user's frame; otherwise the exception's class and first line.

    Examples
    --------
    >>> failure_summary(ValueError("bad value\\nmore detail"))
    'ValueError: bad value'
    >>> worker = RuntimeError('''An exception was thrown from the Python worker.
    ... Traceback (most recent call last):
    ...   File "/x/statestream/operators/state_step.py", line 150, in __call__
    ...   File "/home/me/job.py", line 10, in handleInputRows
    ... ValueError: boom
    ... transformWithState: the processor failed for key ('a',)''')
    >>> failure_summary(worker)
    'ValueError: boom (at /home/me/job.py, line 10, in handleInputRows)'
    """
    text = str(exc)
    frame = user_frame(text)
    error = _error_line(text)
    if error is None:
        first = text.strip().splitlines()[0] if text.strip() else ""
        error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f"{error} (at {frame})" if frame else error
