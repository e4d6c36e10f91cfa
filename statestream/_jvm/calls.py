"""Calls to the JVM's static members and constructors without Py4J's name lookups, and Scala
sequences read as lists.

Why: ``spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(...)`` makes Py4J ask the JVM
about every name of the path in turn (is ``org`` a package, is ``apache``, ..., is ``ofRows`` a
method) before the call itself: eight round trips for one call. A batch of a small stream made
over a hundred round trips on the query thread, each a few tenths of a millisecond on a busy
driver. The objects made here know their class and member already, so a call is one round trip.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from py4j import protocol
from py4j.java_gateway import JavaClass, JavaMember

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = [
    "jvm_view",
    "java_session",
    "java_context",
    "java_dataframe",
    "java_column",
    "py4j_gateway",
    "java_class",
    "static_member",
    "jvm_seq",
    "expr_ids",
    "jvm_plan_nodes",
    "clone_session",
    "classic_session",
]


def jvm_view(owner: SparkSession | SparkContext | type[SparkContext]) -> Any:
    """The JVM view (py4j's ``JVMView``) of ``owner``, a classic SparkSession or its SparkContext
    (or the ``SparkContext`` class: the running context's): what ``owner._jvm.org.apache...``
    reaches. PySpark types the handle as optional (None before
    a gateway is launched); reaching it through here names that case instead of failing on
    ``None.org``.

    Raises
    ------
    RuntimeError
        ``owner`` has no JVM view.
    """
    view = owner._jvm  # noqa: SLF001
    if view is None:
        shown = owner.__name__ if isinstance(owner, type) else type(owner).__name__
        raise RuntimeError(f"{shown} has no JVM view (no gateway to the JVM: no SparkContext is running)")
    return view


def java_session(session: Any) -> Any:
    """The JVM ``SparkSession`` behind a classic PySpark session (``session._jsparkSession``)."""
    return session._jsparkSession  # noqa: SLF001


def java_context(sc: Any) -> Any:
    """The ``JavaSparkContext`` behind a PySpark ``SparkContext`` (``sc._jsc``)."""
    return sc._jsc  # noqa: SLF001


def java_dataframe(df: Any) -> Any:
    """The JVM ``Dataset`` behind a classic PySpark DataFrame (``df._jdf``): its plans
    (``queryExecution()``), schema and RDD."""
    return df._jdf  # noqa: SLF001


def java_column(column: Any) -> Any:
    """The JVM ``Column`` behind a classic PySpark column (``column._jc``); the session's
    ``expression(...)`` of it is its Catalyst expression."""
    return column._jc  # noqa: SLF001


def py4j_gateway(sc: Any) -> Any:
    """The Py4J gateway of a PySpark ``SparkContext`` (``sc._gateway``): what makes Java arrays."""
    return sc._gateway  # noqa: SLF001


def _client(jvm: Any) -> Any:
    # a JVMView holds the client of its gateway
    return jvm._gateway_client  # noqa: SLF001


def java_class(jvm: Any, fqn: str) -> JavaClass:
    """The class ``fqn`` (``java.util.HashMap``) of ``jvm`` (a ``spark._jvm``): calling it
    constructs an instance in one round trip."""
    return JavaClass(fqn, _client(jvm))


def static_member(jvm: Any, fqn: str, name: str) -> JavaMember:
    """The static method ``name`` of class ``fqn`` of ``jvm``; calling it is one round trip.
    A Scala object's method is reached through its class's static forwarder (``ofRows`` of
    ``org.apache.spark.sql.classic.Dataset``), as Py4J's own lookup reaches it."""
    return JavaMember(name, None, protocol.STATIC_PREFIX + fqn, _client(jvm))


def jvm_seq(seq: Any) -> list[Any]:
    """The elements of a Scala ``Seq`` (a py4j proxy), in order: it has no Python iteration
    protocol, and every reader of Spark's plans (the planner, the operators, the runtime) turns
    one into a list the same way."""
    return [seq.apply(i) for i in range(seq.size())]


def expr_ids(seq: Any) -> list[int]:
    """The expression ids of a Scala ``Seq`` of named expressions (a plan's output, a
    dedup's keys): how the planner finds the same column again in another of Spark's plans."""
    return [int(e.exprId().id()) for e in jvm_seq(seq)]


def jvm_plan_nodes(plan: Any) -> Iterator[Any]:
    """The nodes of one of Spark's plan trees (a py4j proxy: an executed ``SparkPlan``), in
    pre-order, children left to right: how the readers of an executed plan's metrics walk it."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(jvm_seq(node.children())))


def set_jvm_log_level(owner: Any, name: str, level: Any) -> Any:
    """Set Spark's log4j logger ``name`` to ``level`` (a name such as ``"ERROR"``, or a level a
    previous call returned); returns the level it had."""
    jvm = jvm_view(owner)
    before = static_member(jvm, "org.apache.logging.log4j.LogManager", "getLogger")(name).getLevel()
    if isinstance(level, str):
        level = static_member(jvm, "org.apache.logging.log4j.Level", "toLevel")(level)
    java_class(jvm, "org.apache.logging.log4j.core.config.Configurator").setLevel(name, level)
    return before


@contextmanager
def quiet_jvm_logger(owner: Any, name: str, level: str = "ERROR") -> Iterator[None]:
    """Spark's log4j logger ``name`` at ``level`` while the block runs, then at its level again:
    for a warning Spark's engine would not print for the same job, raised by a call statestream
    makes that the engine does not (the file source's reader over no files)."""
    before = set_jvm_log_level(owner, name, level)
    try:
        yield
    finally:
        set_jvm_log_level(owner, name, before)


def clone_session(user: Any) -> Any:
    """A classic SparkSession over a clone of ``user``'s JVM session (its confs, views and UDFs),
    for statestream's own batch work (see :func:`classic_session`)."""
    return classic_session(user.sparkContext, user._jsparkSession.cloneSession())  # noqa: SLF001


def classic_session(sc: Any, jsession: Any) -> Any:
    """A classic PySpark SparkSession over the JVM session ``jsession`` of ``sc``'s JVM. Made
    with PySpark's own constructor: under ``statestream.enable_everywhere`` (``statestream
    run``) the wrapped constructor would serve it too, and a micro-batch's DataFrames (the ones
    ``foreachBatch`` gets) belong to a plain session, as on Spark's engine."""
    from pyspark.sql.session import SparkSession

    session = SparkSession.__new__(SparkSession)
    init = getattr(SparkSession.__init__, "__wrapped__", SparkSession.__init__)
    init(session, sc, jsession)
    return session
