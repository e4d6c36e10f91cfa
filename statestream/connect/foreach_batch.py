"""A Connect client's ``foreachBatch`` function, run as Spark's Connect server runs it.

The client sends its function pickled. Spark's Connect server runs it in a Python worker of its
own (PySpark's ``pyspark.sql.connect.streaming.worker.foreach_batch_worker``), a Spark Connect
client of the same session: each batch's DataFrame is kept in the session under a fresh id, the
worker gets the id and the batch id, and calls the function with ``CachedRemoteRelation(id)``, a
Connect DataFrame. :class:`ForeachBatchWorker` drives the same worker module with the same
protocol over a Unix socket, from statestream's ``foreachBatch`` on the endpoint's driver; the
worker's session reaches the endpoint, so what the function does (writes, queries, streaming
commands) goes where the client's own calls go.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import uuid
from typing import IO, Any, cast

from statestream._jvm.connect import ClientSession
from statestream.errors import foreach_batch_worker_error

__all__ = ["ForeachBatchWorker", "WORKER_MODULE"]

logger = logging.getLogger(__name__)

#: PySpark's worker that runs a Connect client's foreachBatch function
WORKER_MODULE = "pyspark.sql.connect.streaming.worker.foreach_batch_worker"

#: what the worker writes instead of a length when the function raised (PySpark's SpecialLengths)
_PYTHON_EXCEPTION_THROWN = -2


class ForeachBatchWorker:
    """The worker of one query's ``foreachBatch`` function: ``worker(batch_df, batch_id)`` runs
    the function on that batch in the worker (started on the first call) and raises its error.

    Parameters
    ----------
    client : statestream._jvm.connect.ClientSession
        The client's server-side session (the batches are kept there, the worker joins it).
    url : str
        The endpoint's ``sc://host:port``, which the worker connects to.
    command : bytes
        The client's pickled function (``StreamingForeachFunction.python_function.command``).
    python_version : str
        The client's Python ``major.minor``, which the worker checks against its own.
    token : str, optional
        The endpoint's authentication token: the worker presents it, as Spark's server gives
        its own workers the token (``SPARK_CONNECT_AUTHENTICATE_TOKEN``).

    Examples
    --------
    >>> worker = ForeachBatchWorker(client, "sc://127.0.0.1:15002", command, "3.11")  # doctest: +SKIP
    >>> ss_df.writeStream.foreachBatch(worker).start()  # doctest: +SKIP
    """

    def __init__(self, client: ClientSession, url: str, command: bytes, python_version: str, token: str | None = None) -> None:
        self.client = client
        self.url = url
        self.token = token
        self.command = command
        self.python_version = python_version
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._file: IO[bytes] | None = None
        self._socket: socket.socket | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        with self._lock:
            stream = self._started()
            df_id = str(uuid.uuid4())
            self.client.cache_dataframe(df_id, df)
            try:
                _write_utf8(stream, df_id)
                stream.write(struct.pack("!q", batch_id))
                stream.flush()
                _read_status(stream, f"batch {batch_id}")
            finally:
                self.client.uncache_dataframe(df_id)

    def close(self) -> None:
        """Stop the worker (the query ended). Not under the batches' lock: a function still
        running (or hung) is ended with its process, and the batch waiting on it fails."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with self._lock:
            for closing in (self._file, self._socket):
                if closing is not None:
                    closing.close()
            self._file = self._socket = None

    def _started(self) -> IO[bytes]:
        if self._file is not None:
            return self._file
        with tempfile.TemporaryDirectory(prefix="statestream-fb-") as tmp:
            path = os.path.join(tmp, "worker.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listener.bind(path)
                listener.listen(1)
                listener.settimeout(120)
                url = f"{self.url}/;user_id={self.client.user_id}" if self.client.user_id else f"{self.url}/"
                env = {**os.environ, "PYTHON_WORKER_FACTORY_SOCK_PATH": path, "SPARK_CONNECT_LOCAL_URL": url}
                env.pop("PYTHON_WORKER_FACTORY_SECRET", None)
                env.pop("SPARK_CONNECT_MODE_ENABLED", None)
                if self.token is not None:
                    env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self.token
                self._process = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], env=env)
                try:
                    conn, _ = listener.accept()
                except OSError as e:  # it never connected: not left running
                    self._process.kill()
                    self._process.wait()
                    self._process = None
                    raise foreach_batch_worker_error(f"the foreachBatch worker did not connect: {e}") from e
            finally:
                listener.close()
        conn.settimeout(None)
        self._socket = conn
        stream = cast(IO[bytes], conn.makefile("rwb", 65536))
        self._file = stream
        struct.unpack("!i", _read_exactly(stream, 4))  # the worker's pid
        _write_utf8(stream, self.python_version)
        _write_utf8(stream, self.client.session_id)
        stream.write(struct.pack("!i", len(self.command)))
        stream.write(self.command)
        stream.flush()
        _read_status(stream, "start")
        logger.debug("a foreachBatch worker (pid %s) serves session %s", self._process.pid if self._process else None, self.client.session_id)
        return stream


def _write_utf8(stream: IO[bytes], text: str) -> None:
    data = text.encode("utf-8")
    stream.write(struct.pack("!i", len(data)))
    stream.write(data)


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) < n:
        raise foreach_batch_worker_error("the foreachBatch worker ended without answering")
    return data


def _read_status(stream: IO[bytes], what: str) -> None:
    """The worker's answer to ``what``: 0, or the error the function (or the worker) raised."""
    (status,) = struct.unpack("!i", _read_exactly(stream, 4))
    if status == 0:
        return
    if status == _PYTHON_EXCEPTION_THROWN:
        (n,) = struct.unpack("!i", _read_exactly(stream, 4))
        raise foreach_batch_worker_error(_read_exactly(stream, n).decode("utf-8", "replace"))
    raise foreach_batch_worker_error(f"the foreachBatch worker answered {status} to {what}")
