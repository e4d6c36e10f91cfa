"""Spark Connect's server-side objects, reached from the endpoint's driver: the session a Connect
client's requests run in, and Spark's own Connect planner for the client's expressions and its
static relations (``statestream.connect`` uses them).

A client's ``SparkSession`` on the server is a ``SessionHolder`` that Spark's Connect service
keeps by user and session id; its ``session()`` has the client's confs and temporary views.
Expressions are turned into Catalyst by Spark's ``SparkConnectPlanner`` exactly as Spark's Connect
server turns them (every function, cast, lambda and literal form), and wrapped as classic PySpark
columns that statestream's DataFrame calls take.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.column import Column

from statestream._jvm.calls import classic_session, java_class, java_dataframe, jvm_view, static_member

__all__ = ["CONNECT_PLUGIN", "connect_plugin_confs", "ClientSession"]

#: the plugin that makes a classic driver serve Spark Connect clients (its jar ships in PySpark)
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"

_SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService"
_PLANNER = "org.apache.spark.sql.connect.planner.SparkConnectPlanner"


def connect_plugin_confs(host: str, port: int) -> dict[str, str]:
    """The confs that start Spark's Connect service in a classic driver, bound to ``host:port``.

    Examples
    --------
    >>> connect_plugin_confs("127.0.0.1", 15999)["spark.connect.grpc.binding.port"]
    '15999'
    """
    return {
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }


class ClientSession:
    """One Connect client's session on the server (Spark's ``SessionHolder``), seen from Python.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The endpoint's classic session (its SparkContext serves the Connect service).
    user_id, session_id : str
        The client's user and session ids, as its requests carry them.

    Examples
    --------
    >>> client = ClientSession(spark, "", "9a0c...")  # doctest: +SKIP
    >>> client.session.conf.get("spark.sql.shuffle.partitions")  # doctest: +SKIP
    '200'
    """

    def __init__(self, spark: Any, user_id: str, session_id: str) -> None:
        jvm = jvm_view(spark)
        self._jvm = jvm
        none = static_member(jvm, "scala.Option", "empty")()
        self._holder = static_member(jvm, _SERVICE, "getOrCreateIsolatedSession")(user_id, session_id, none)
        self._planner = java_class(jvm, _PLANNER)(self._holder, none)
        self._expression = static_member(jvm, "org.apache.spark.connect.proto.Expression", "parseFrom")
        self._relation = static_member(jvm, "org.apache.spark.connect.proto.Relation", "parseFrom")
        self._column = static_member(jvm, "org.apache.spark.sql.classic.ExpressionUtils", "column")
        self._of_rows = static_member(jvm, "org.apache.spark.sql.classic.Dataset", "ofRows")
        self.session = classic_session(spark.sparkContext, self._holder.session())
        # a trait's companion object: reached through its module instance, not a static forwarder
        registry = getattr(java_class(jvm, "org.apache.spark.sql.catalyst.analysis.FunctionRegistry$"), "MODULE$")
        self._internal = registry.internal()
        self._function_id = java_class(jvm, "org.apache.spark.sql.catalyst.FunctionIdentifier")
        self._internal_names: dict[str, bool] = {}

    @property
    def server_side_session_id(self) -> str:
        """The id Spark's Connect service gave this session: every response carries it."""
        return str(self._holder.serverSessionId())

    def column(self, expression: bytes) -> Any:
        """The classic PySpark ``Column`` of a serialized ``spark.connect.Expression``, planned
        by Spark's Connect planner as Spark's Connect server plans it."""
        catalyst = self._planner.transformExpression(self._expression(expression))
        return Column(self._column(catalyst))

    def is_internal_function(self, name: str) -> bool:
        """Whether ``name`` is one of Spark's internal functions (``product``,
        ``timestampdiff``...), which Spark's Connect planner looks up by name for a client (its
        PySpark functions call them without saying so) and ``call_function`` does not reach."""
        if name not in self._internal_names:
            self._internal_names[name] = bool(self._internal.functionExists(self._function_id(name)))
        return self._internal_names[name]

    @property
    def user_id(self) -> str:
        """The client's user id, as its requests carry it."""
        return str(self._holder.userId())

    @property
    def session_id(self) -> str:
        """The client's session id, as its requests carry it."""
        return str(self._holder.sessionId())

    def cache_dataframe(self, df_id: str, df: Any) -> None:
        """Keep a classic DataFrame in the session under ``df_id``: a client's
        ``CachedRemoteRelation(df_id)`` reads it (a ``foreachBatch`` batch, as Spark's Connect
        server hands it to the client's function). :meth:`uncache_dataframe` lets it go."""
        self._holder.cacheDataFrameById(df_id, java_dataframe(df))

    def uncache_dataframe(self, df_id: str) -> None:
        """Forget the DataFrame kept under ``df_id``."""
        self._holder.removeCachedDataFrame(df_id)

    def dataframe(self, relation: bytes) -> Any:
        """The classic PySpark ``DataFrame`` of a serialized ``spark.connect.Relation``, planned
        by Spark's Connect planner (a static part of a streaming query: the other side of a
        stream-static join)."""
        plan = self._planner.transformRelation(self._relation(relation))
        return DataFrame(self._of_rows(self._holder.session(), plan), self.session)
