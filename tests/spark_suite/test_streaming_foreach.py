"""Adapted from PySpark's ``python/pyspark/sql/tests/streaming/test_streaming_foreach.py``
(Spark 4.1): ``writeStream.foreach`` with a plain function and with writer objects (``open``,
``process``, ``close`` present or not, ``open`` returning false), a writer that raises, and
writers PySpark refuses.

Each test runs on Spark's engine and on statestream (``conftest.py``). The writers run in Spark's
Python workers, so they record what they are called with as small JSON files in event
directories under ``tmp_path`` (one file per call), which the test reads back; each input file
of the stream holds one line.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest
from pyspark.errors import PySparkAttributeError, StreamingQueryException


class EventLog:
    """Event directories a writer (pickled into Spark's workers) writes to, and the stream's
    input directory. Only the directories travel with a pickled copy."""

    def __init__(self, root: Any) -> None:
        self.input_dir = str(root / "input")
        self.dirs = {kind: str(root / kind) for kind in ("open", "process", "close")}
        for d in (self.input_dir, *self.dirs.values()):
            os.makedirs(d)

    def __getstate__(self) -> dict:
        return {"dirs": self.dirs}

    def __setstate__(self, state: dict) -> None:
        self.dirs = state["dirs"]

    def record(self, kind: str, **fields: Any) -> None:
        """One event of ``kind`` (``open``, ``process``, ``close``) with ``fields``."""
        with open(os.path.join(self.dirs[kind], uuid.uuid4().hex), "w") as f:
            f.write(json.dumps(fields) + "\n")

    def add_input_file(self) -> None:
        with open(os.path.join(self.input_dir, uuid.uuid4().hex), "w") as f:
            f.write("text\n")

    def events(self, session: Any, kind: str, schema: str) -> list[dict]:
        return [r.asDict() for r in session.read.schema(schema).json(self.dirs[kind]).collect()]

    def opened(self, session: Any) -> list[dict]:
        return self.events(session, "open", "partition INT, epoch INT")

    def processed(self, session: Any) -> list[dict]:
        return self.events(session, "process", "value STRING")

    def closed(self, session: Any) -> list[dict]:
        return self.events(session, "close", "error STRING")


def _run(session: Any, log: EventLog, writer: Any, files: int) -> None:
    """A text stream over the log's input directory into ``foreach(writer)``; each of ``files``
    input files is added, then processed, in turn (one batch each)."""
    try:
        query = session.readStream.format("text").load(log.input_dir).writeStream.foreach(writer).start()
        for _ in range(files):
            log.add_input_file()
            query.processAllAvailable()
    finally:
        for q in session.streams.active:
            q.stop()


def _fails_the_query(session: Any, log: EventLog, writer: Any) -> BaseException:
    """The error of a query over one input file into ``foreach(writer)`` (raised by ``foreach``
    itself, by ``start()`` or by the batch); fails the test if there is none."""
    try:
        _run(session, log, writer, 1)
    except Exception as e:  # noqa: BLE001 - whichever step refuses the writer
        return e
    pytest.fail(f"the writer {writer!r} did not fail the query")


@pytest.fixture
def log(tmp_path):
    return EventLog(tmp_path)


def test_plain_function(session, log):
    def each_row(row):
        log.record("process", value="text")

    _run(session, log, each_row, 2)
    assert len(log.processed(session)) == 2


def test_open_process_close(session, log):
    class Writer:
        def open(self, partition_id, epoch_id):
            log.record("open", partition=partition_id, epoch=epoch_id)
            return True

        def process(self, row):
            log.record("process", value="text")

        def close(self, error):
            log.record("close", error=str(error))

    _run(session, log, Writer(), 2)
    opened = log.opened(session)
    assert len(opened) == 2
    assert {e["epoch"] for e in opened} == {0, 1}
    assert len(log.processed(session)) == 2
    closed = log.closed(session)
    assert len(closed) == 2
    assert {e["error"] for e in closed} == {"None"}


def test_open_returning_false_skips_the_rows(session, log):
    class Writer:
        def open(self, partition_id, epoch_id):
            log.record("open", partition=partition_id, epoch=epoch_id)
            return False

        def process(self, row):
            log.record("process", value="text")

        def close(self, error):
            log.record("close", error=str(error))

    _run(session, log, Writer(), 2)
    assert len(log.opened(session)) == 2
    assert log.processed(session) == []
    closed = log.closed(session)
    assert len(closed) == 2
    assert {e["error"] for e in closed} == {"None"}


def test_writer_without_open(session, log):
    class Writer:
        def process(self, row):
            log.record("process", value="text")

        def close(self, error):
            log.record("close", error=str(error))

    _run(session, log, Writer(), 2)
    assert log.opened(session) == []
    assert len(log.processed(session)) == 2
    assert len(log.closed(session)) == 2


def test_writer_without_close(session, log):
    class Writer:
        def open(self, partition_id, epoch_id):
            log.record("open", partition=partition_id, epoch=epoch_id)
            return True

        def process(self, row):
            log.record("process", value="text")

    _run(session, log, Writer(), 2)
    assert len(log.opened(session)) == 2
    assert len(log.processed(session)) == 2
    assert log.closed(session) == []


def test_writer_with_process_only(session, log):
    class Writer:
        def process(self, row):
            log.record("process", value="text")

    _run(session, log, Writer(), 2)
    assert log.opened(session) == []
    assert len(log.processed(session)) == 2
    assert log.closed(session) == []


def test_process_raising_fails_the_query(session, log):
    class Writer:
        def process(self, row):
            raise RuntimeError("test error")

        def close(self, error):
            log.record("close", error=str(error))

    with pytest.raises(StreamingQueryException) as raised:
        _run(session, log, Writer(), 1)
    text = str(raised.value)
    assert "test error" in text
    assert "FOREACH_USER_FUNCTION_ERROR" in text  # Spark 4.1.4's condition for a foreach writer
    assert log.processed(session) == []
    assert len(log.closed(session)) == 1


def test_function_of_an_iterator(session, log):
    # Spark's test lists this function among invalid writers without asserting a failure; on
    # Spark 4.1.4 it runs: a one-argument function is called with each row, which it may
    # iterate (a Row is a tuple)
    def each(rows):
        for value in rows:
            log.record("process", value=str(value))

    _run(session, log, each, 1)
    assert log.processed(session) == [{"value": "text"}]


class _WithProcess:
    def process(self, row):
        pass


class _NoProcess:
    def open(self, partition):
        pass


class _ProcessNotCallable:
    process = True


class _OpenNotCallable(_WithProcess):
    open = True


class _CloseNotCallable(_WithProcess):
    close = True


@pytest.mark.parametrize("writer", [_NoProcess, _ProcessNotCallable, _OpenNotCallable, _CloseNotCallable])
def test_refused_writers(session, log, writer):
    error = _fails_the_query(session, log, writer())
    assert isinstance(error, PySparkAttributeError)
    assert error.getCondition() == "ATTRIBUTE_NOT_CALLABLE"


class _ProcessWithoutRow:
    def process(self):
        pass


class _OpenWithoutArguments(_WithProcess):
    def open(self):
        pass


@pytest.mark.parametrize("writer", [_ProcessWithoutRow, _OpenWithoutArguments])
def test_writers_failing_when_called(session, log, writer):
    error = _fails_the_query(session, log, writer())
    assert isinstance(error, StreamingQueryException)
    assert "TypeError" in str(error)
