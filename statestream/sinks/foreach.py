"""``writeStream.foreach(writer)``: user code called row by row inside Spark tasks.

Spark: ``ForeachWriterTable`` with PySpark's ``PythonForeachWriter``. Each partition of every
executed batch is one Spark task, and in that task (on an executor's Python worker, with a fresh
unpickled copy of the writer):

* ``writer`` a plain function: it is called with each row (a ``Row``);
* ``writer`` an object: ``open(partition_id, epoch_id)`` if it has one (``epoch_id`` is the batch
  id); when ``open`` returns something false (``False``, ``None``), ``process`` is skipped, else
  ``process(row)`` runs for each row; then ``close(error)`` if it has one, with the exception
  ``process`` raised or ``None``. An exception from ``open`` skips ``close``. ``process`` is
  required; a missing or non-callable method is refused when ``foreach()`` is called, with
  PySpark's ``ATTRIBUTE_NOT_CALLABLE``.

A failure in the user's code fails the query with Spark's ``FOREACH_USER_FUNCTION_ERROR``, whose
reason is the Python traceback of the failure (as a Python worker reports it). The progress
reports the rows handed to the writer, as Spark's V2 sink does (also those of a partition whose
``open`` said no).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from statestream.errors import foreach_user_function_error
from statestream.operators.python_worker import forget_zip_importers
from statestream.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ForeachSink", "partition_task"]

#: What ``foreach`` starts from; PySpark's JVM writer class, shown in ``sink.description``.
_PYTHON_WRITER = "org.apache.spark.sql.execution.python.streaming.PythonForeachWriter"
_TABLE = "org.apache.spark.sql.execution.streaming.sources.ForeachWriterTable"


def _not_callable(attr: str) -> Exception:
    from pyspark.errors import PySparkAttributeError

    return PySparkAttributeError(
        errorClass="ATTRIBUTE_NOT_CALLABLE", messageParameters={"attr_name": attr, "obj_name": "f"}
    )


def _method(writer: Any, name: str, required: bool) -> Callable[..., Any] | None:
    if not hasattr(writer, name):
        if required:
            raise _not_callable(name)
        return None
    fn = getattr(writer, name)
    if not callable(fn):
        raise _not_callable(name)
    return fn


def partition_task(writer: Any) -> Callable[[int, int, Iterable[Any]], tuple[int, str | None]]:
    """Check ``writer`` now (PySpark refuses a bad one in ``foreach()``) and return the function
    one task runs: ``task(partition_id, epoch_id, rows) -> (rows seen, traceback text or None)``.

    The returned function refers to ``writer`` only through its own closure, so Spark pickles a
    copy of the writer into every task.
    """
    if callable(writer):
        row_fn = writer

        def per_row(partition_id: int, epoch_id: int, rows: Iterable[Any]) -> tuple[int, str | None]:
            n = 0
            try:
                for row in rows:
                    n += 1
                    row_fn(row)
            except Exception as exc:  # noqa: BLE001 - reported to the driver, fails the query
                return n, "".join(traceback.format_exception(exc))
            return n, None

        return per_row

    _method(writer, "process", required=True)
    has_open = _method(writer, "open", required=False) is not None
    has_close = _method(writer, "close", required=False) is not None

    def open_process_close(partition_id: int, epoch_id: int, rows: Iterable[Any]) -> tuple[int, str | None]:
        it: Iterator[Any] = iter(rows)
        n = 0
        try:
            go = writer.open(partition_id, epoch_id) if has_open else True
        except Exception as exc:  # noqa: BLE001 - no close() after a failed open(), as in PySpark
            return n, "".join(traceback.format_exception(exc))
        error: BaseException | None = None
        try:
            if go:
                for row in it:
                    n += 1
                    writer.process(row)
        except Exception as exc:  # noqa: BLE001 - handed to close(), then reported
            error = exc
        try:
            if has_close:
                writer.close(error)
        except Exception as exc:  # noqa: BLE001 - a failing close() fails the task
            error = exc
        if error is not None:
            return n, "".join(traceback.format_exception(error))
        for _ in it:  # rows of a partition open() declined still count as given to the sink
            n += 1
        return n, None

    return open_process_close


class ForeachSink(Sink):
    """Runs a ``foreach`` writer over every partition of each batch, inside Spark tasks.

    Parameters
    ----------
    writer:
        A function of one row, or an object with ``process(row)`` and optional
        ``open(partition_id, epoch_id)`` and ``close(error)``.
    """

    def __init__(self, writer: Any) -> None:
        if writer is None:
            raise ValueError("foreach writer cannot be null")
        self.writer = writer
        self._task = partition_task(writer)
        self._last_rows = -1

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        task = self._task
        epoch = int(batch_id)

        def run(partition_id: int, rows: Iterable[Any]) -> Iterator[tuple[int, str | None]]:
            try:
                yield task(partition_id, epoch, rows)
            finally:
                forget_zip_importers()

        results = df.rdd.mapPartitionsWithIndex(run).collect()
        failures = [text for _, text in results if text is not None]
        self._last_rows = sum(n for n, _ in results)
        if failures:
            raise foreach_user_function_error(failures[0])

    def num_output_rows(self) -> int:
        return self._last_rows

    def description(self) -> str:
        # Spark prints the table's case class: the JVM writer and the row converter (a lambda),
        # each with its identity hash; ours are this object's.
        h = id(self) & 0xFFFFFFFF
        return f"ForeachWriterTable({_PYTHON_WRITER}@{h:x},Right({_TABLE}$$$Lambda@{(h * 31) & 0xFFFFFFFF:x}))"
