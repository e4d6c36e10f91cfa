"""The ``socket`` source: UTF-8 lines read from a TCP connection (tests and demos only).

Spark: ``TextSocketSourceProvider`` / ``TextSocketMicroBatchStream``. What is mirrored:

* Options ``host`` and ``port`` (required) and ``includeTimestamp`` (``true``/``false``); the
  schema is ``value STRING``, plus ``timestamp TIMESTAMP`` (the time the line was received) with
  ``includeTimestamp``. A user schema is refused.
* A background thread connects once and appends every line it reads to a buffer. The offset is
  the number of lines received minus one (a plain JSON integer; ``-1`` before the first line, so
  the first trigger runs an empty batch, as Spark's initial offset makes it), and
  batch ``(s, e]`` holds lines ``s+1 .. e``; ``commit(e)`` drops them from the buffer.
* No recovery: lines live in memory only, so a restarted query cannot replay a batch whose lines
  were committed (Spark warns that the source is not for production use, and so does this one).

The connection is made on the first ``latest_offset`` call, i.e. when the query starts, not when
``load()`` builds the DataFrame.
"""

from __future__ import annotations

import datetime as _dt
import logging
import socket
import threading
from typing import TYPE_CHECKING, Any, Mapping

from statestream.errors import (
    number_format_error,
    socket_commit_out_of_order_error,
    socket_include_timestamp_error,
    socket_lines_gone_error,
    socket_option_required_error,
)
from statestream.sources.base import ReadLimit, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["TextSocketSource"]

logger = logging.getLogger(__name__)


class TextSocketSource(Source):
    """Lines from ``host:port`` as rows of ``value`` (and ``timestamp``).

    Raises
    ------
    AnalysisException-shaped / IllegalArgumentException
        Missing ``host``/``port`` or an invalid ``includeTimestamp`` (Spark's texts).
    """

    short_name = "socket"

    def __init__(self, spark: "SparkSession | None", options: Mapping[str, Any] | None = None) -> None:
        opts = {str(k).lower(): v for k, v in (options or {}).items()}
        if "host" not in opts:
            raise socket_option_required_error("host")
        if "port" not in opts:
            raise socket_option_required_error("port")
        self.host = str(opts["host"])
        try:
            self.port = int(str(opts["port"]).strip())
        except ValueError:
            raise number_format_error(opts["port"]) from None
        raw_ts = str(opts.get("includetimestamp", "false")).strip().lower()
        if raw_ts not in ("true", "false"):
            raise socket_include_timestamp_error()
        self.include_timestamp = raw_ts == "true"
        self._lock = threading.Lock()
        self._lines: list[tuple[str, _dt.datetime]] = []
        self._first_offset = 0  # offset of self._lines[0] (lines before it were committed)
        self._socket: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stopped = False

    @property
    def schema(self) -> "StructType":
        from pyspark.sql.types import StringType, StructField, StructType, TimestampType

        fields = [StructField("value", StringType(), True)]
        if self.include_timestamp:
            fields.append(StructField("timestamp", TimestampType(), True))
        return StructType(fields)

    # -- the connection -------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._socket is not None or self._stopped:
            return
        logger.warning("The socket source should not be used for production applications! It does not support recovery.")
        logger.info("Connecting to %s:%s", self.host, self.port)
        sock = socket.create_connection((self.host, self.port))
        self._socket = sock
        self._reader = threading.Thread(target=self._read_lines, args=(sock,), name=f"TextSocketSource({self.host}, {self.port})", daemon=True)
        self._reader.start()

    def _read_lines(self, sock: socket.socket) -> None:
        try:
            with sock.makefile("r", encoding="utf-8", newline=None) as reader:
                for line in reader:
                    received = _dt.datetime.now(_dt.timezone.utc)
                    with self._lock:
                        self._lines.append((line.rstrip("\r\n"), received))
        except OSError as exc:
            if not self._stopped:
                logger.warning("socket source %s:%s: read failed: %s", self.host, self.port, exc)
                self._error = exc
        logger.info("socket source %s:%s: stream finished", self.host, self.port)

    # -- Source contract -------------------------------------------------------------------------

    def latest_offset(self, start: Any, limit: ReadLimit) -> int:
        """Lines received so far minus one; ``-1`` before the first line, which is already an
        offset: like Spark's (its initial offset), the first trigger runs a batch with no rows."""
        self._connect()
        with self._lock:
            return self._first_offset + len(self._lines) - 1

    def get_batch(self, spark: "SparkSession", start: Any, end: Any) -> "DataFrame":
        lo = -1 if start is None else int(start)
        hi = int(end)
        with self._lock:
            if lo + 1 < self._first_offset:
                raise socket_lines_gone_error(lo + 1, self._first_offset - 1)
            rows = self._lines[lo + 1 - self._first_offset : hi + 1 - self._first_offset]
        data: list[tuple[Any, ...]]
        if self.include_timestamp:
            data = [(v, ts) for v, ts in rows]
        else:
            data = [(v,) for v, _ in rows]
        return spark.createDataFrame(data, self.schema)

    def commit(self, end: Any) -> None:
        """Lines up to ``end`` are processed: drop them."""
        hi = int(end)
        with self._lock:
            drop = hi + 1 - self._first_offset
            if drop < 0:
                raise socket_commit_out_of_order_error(self._first_offset - 1, hi)
            del self._lines[:drop]
            self._first_offset = hi + 1

    def stop(self) -> None:
        self._stopped = True
        sock, self._socket = self._socket, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def description(self) -> str:
        return f"TextSocketV2[host: {self.host}, port: {self.port}]"
