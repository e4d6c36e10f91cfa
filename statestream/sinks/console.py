"""The console sink: prints every micro-batch like Spark's ``format("console")``.

Spark: ``ConsoleTable`` / ``ConsoleWrite``. Output per batch is a line of 43 dashes,
``Batch: <id>``, the dash line again, then ``df.show(numRows, truncate)``. Printing to stdout is
the whole job of this sink, so it is the one place in statestream that calls ``print``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from statestream.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ConsoleSink"]

_DASHES = "-" * 43


def _bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true"


class ConsoleSink(Sink):
    """Shows each batch on stdout.

    Parameters
    ----------
    options:
        ``numRows`` (default 20) and ``truncate`` (default ``true``: cells cut to 20
        characters), case-insensitive, as in Spark.
    """

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        opts = {str(k).lower(): v for k, v in (options or {}).items()}
        self.num_rows = int(opts.get("numrows", 20))
        self.truncate = _bool(opts.get("truncate"), True)
        self._last_rows = -1

    def add_batch(self, batch_id: int, df: "DataFrame", output_mode: str) -> None:
        print(_DASHES)  # noqa: T201 - the console sink prints
        print(f"Batch: {batch_id}")  # noqa: T201 - the console sink prints
        print(_DASHES)  # noqa: T201 - the console sink prints
        df.show(self.num_rows, self.truncate)
        # Spark's console sink is a V2 sink and reports the rows it received.
        self._last_rows = df.count()

    def num_output_rows(self) -> int:
        return self._last_rows

    def description(self) -> str:
        # Spark prints the object's default toString; keep its shape with our own identity hash.
        return f"org.apache.spark.sql.execution.streaming.ConsoleTable$@{id(self) & 0xFFFFFFFF:x}"
