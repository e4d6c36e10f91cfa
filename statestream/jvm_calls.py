"""Calls to the JVM's static members and constructors without Py4J's name lookups.

Why: ``spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(...)`` makes Py4J ask the JVM
about every name of the path in turn (is ``org`` a package, is ``apache``, ..., is ``ofRows`` a
method) before the call itself: eight round trips for one call. A batch of a small stream made
over a hundred round trips on the query thread, each a few tenths of a millisecond on a busy
driver. The objects made here know their class and member already, so a call is one round trip.
"""

from __future__ import annotations

from typing import Any

from py4j import protocol
from py4j.java_gateway import JavaClass, JavaMember

__all__ = ["java_class", "static_member"]


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
