"""What the engine needs of the public API's objects, as protocols.

The runtime is handed a logical plan and a session-like object, never the API's ``DataFrame`` or
``StreamingSession``: the API modules import the runtime, so the runtime must not import them.
The API modules below ``api/session.py`` (the DataFrame, the reader and the writer) annotate the
session with :class:`StreamingSessionLike` for the same reason (``api/session.py`` imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["QueryRegistry", "StreamingSessionLike"]


class QueryRegistry(Protocol):
    """``StreamingQueryManager`` (``session.streams``) as seen from below it: a query is started
    through it (its checks come first), and its execution reports the end of its run."""

    #: the ``StreamingQueryListenerBus`` of the manager's listeners
    _listeners: Any

    def _start(self, q: Any) -> None: ...

    def _notify_terminated(self, ex: Any) -> None: ...


class StreamingSessionLike(Protocol):
    """``StreamingSession`` as seen from below it: the user's ``SparkSession``, the session's
    queries, and (for ``DataFrame.createTempView`` and its variants) its streaming views."""

    sparkSession: "SparkSession"  # noqa: N815 - PySpark's name

    @property
    def streams(self) -> QueryRegistry: ...

    def _register_view(self, name: str, df: Any, replace: bool, is_global: bool = False) -> None: ...

    def _view(self, name: str) -> Any: ...
