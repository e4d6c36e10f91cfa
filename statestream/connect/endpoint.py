"""A Spark Connect endpoint whose streaming queries run on statestream.

:class:`ConnectEndpoint` starts (or takes) a classic driver with Spark's Connect plugin, which
serves Spark Connect on a loopback port of its own, and puts statestream's service
(:class:`~statestream.connect.service.StreamingConnectService`) in front of it on the address
clients use. A client connects as to any Spark Connect server
(``SparkSession.builder.remote("sc://host:port")``) and runs its job unchanged.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import grpc
from pyspark.sql import SparkSession

from statestream._jvm.connect import CONNECT_PLUGIN, connect_plugin_confs
from statestream.connect.service import StreamingConnectService

__all__ = ["ConnectEndpoint", "DEFAULT_PORT"]

logger = logging.getLogger(__name__)

#: Spark Connect's default port
DEFAULT_PORT = 15002

#: Spark's conf of the token its Connect server asks clients for, and the variable it also reads
TOKEN_CONF = "spark.connect.authenticate.token"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


class ConnectEndpoint:
    """A Spark Connect endpoint at ``host:port`` whose streaming queries run on statestream.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession, optional
        A classic session whose driver already runs Spark's Connect plugin
        (``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin``); without one, the
        endpoint makes its own session with the plugin, on ``master`` with ``conf``.
    host : str
        The address clients reach (default: loopback only).
    port : int
        The port clients reach (``0``: any free port, see :attr:`port`).
    master : str, optional
        The master of the session the endpoint makes (default ``local[*]``).
    conf : mapping, optional
        More confs for the session the endpoint makes.

    Examples
    --------
    >>> endpoint = ConnectEndpoint(port=0).start()  # doctest: +SKIP
    >>> client = SparkSession.builder.remote(endpoint.url).getOrCreate()  # doctest: +SKIP
    >>> endpoint.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        spark: SparkSession | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._spark = spark
        self._master = master
        self._conf = dict(conf or {})
        self._server: Any = None
        self._service: StreamingConnectService | None = None
        #: Spark's own Connect server behind the endpoint (its streaming queries run on Spark's
        #: engine: the differential tests compare the two)
        self.upstream_url: str | None = None

    @property
    def url(self) -> str:
        """The address a client's ``SparkSession.builder.remote(...)`` takes."""
        return f"sc://{self.host}:{self.port}"

    @property
    def spark(self) -> SparkSession:
        """The endpoint's classic session (made by :meth:`start` when none was given)."""
        if self._spark is None:
            raise RuntimeError("the endpoint has not started: call start()")
        return self._spark

    def start(self) -> "ConnectEndpoint":
        """Start Spark's Connect server (when the endpoint makes its session) and the endpoint."""
        if self._spark is None:
            # Spark's Connect server starts a handed-over query's foreachBatch worker with the
            # JVM's PYSPARK_PYTHON (not spark.pyspark.python): this interpreter, unless set
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = SparkSession.builder.master(self._master or "local[*]").appName("statestream connect-server")
            for key, value in {**self._conf, **connect_plugin_confs("127.0.0.1", _free_port())}.items():
                builder = builder.config(key, value)
            self._spark = builder.getOrCreate()
        spark = self._spark
        if CONNECT_PLUGIN not in str(spark.sparkContext.getConf().get("spark.plugins", "")):
            raise ValueError(
                f"the session's driver does not run Spark's Connect plugin: start it with spark.plugins={CONNECT_PLUGIN}, "
                "or let ConnectEndpoint make its session"
            )
        # Spark's Connect server asks for the token of its conf, else of the variable; the
        # endpoint asks for the same one, before anything reaches either engine
        token = spark.sparkContext.getConf().get(TOKEN_CONF, None) or os.environ.get(TOKEN_ENV) or None
        upstream_host = spark.sparkContext.getConf().get("spark.connect.grpc.binding.address", "127.0.0.1") or "127.0.0.1"
        upstream_port = spark.sparkContext.getConf().get("spark.connect.grpc.binding.port", str(DEFAULT_PORT))
        self.upstream_url = f"sc://{upstream_host}:{upstream_port}"
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="statestream-connect"),
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        bound = self._server.add_insecure_port(f"{self.host}:{self.port}")
        if not bound:
            raise OSError(f"the Connect endpoint cannot listen on {self.host}:{self.port}")
        self.port = bound
        # a worker on this machine reaches the endpoint on loopback when it listens on every address
        local, local_port = ("127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host), bound
        if token is not None:
            # a PySpark client sends a token over plain TCP only to "localhost" (local channel
            # credentials); the endpoint's foreachBatch workers are such clients, so an endpoint
            # on another address also listens on a loopback port of its own for them
            if local not in ("127.0.0.1", "::1", "localhost"):
                local_port = self._server.add_insecure_port("127.0.0.1:0")
            local = "localhost"
        self._service = StreamingConnectService(spark, f"{upstream_host}:{upstream_port}", f"sc://{local}:{local_port}", token=token)
        self._server.add_generic_rpc_handlers([self._service])
        self._server.start()
        logger.info("statestream's Spark Connect endpoint listens at %s (Spark's Connect server: %s:%s)", self.url, upstream_host, upstream_port)
        return self

    def wait(self) -> None:
        """Block until the endpoint stops."""
        if self._server is not None:
            self._server.wait_for_termination()

    def stop(self, grace: float = 5.0) -> None:
        """Stop the endpoint's statestream queries and the endpoint (the session stays)."""
        if self._service is not None:
            self._service.close()
        if self._server is not None:
            self._server.stop(grace).wait()
        self._server = self._service = None


def _free_port() -> int:
    """A free TCP port on loopback, for Spark's own Connect server behind the endpoint."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
