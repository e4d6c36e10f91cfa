"""StreamingQueryListener events of statestream's queries (Spark: ``StreamingQueryListenerBus``).

Listeners are PySpark's own ``StreamingQueryListener`` subclasses and receive PySpark's own
event classes, built from the same JSON Spark's JVM sends to Python: ``QueryStartedEvent``
(synchronously in ``start()``, before it returns, as Spark documents), ``QueryProgressEvent``
after each batch, ``QueryIdleEvent`` when an idle trigger is reported, and
``QueryTerminatedEvent`` when the run ends (with the exception text and its error class). A
listener that raises is logged and skipped, as Spark's bus does; the query goes on.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["StreamingQueryListenerBus"]

logger = logging.getLogger(__name__)


class StreamingQueryListenerBus:
    """The listeners of one ``StreamingQueryManager`` and the posting of events to them."""

    def __init__(self) -> None:
        self._listeners: list[Any] = []
        self._lock = threading.Lock()

    def add(self, listener: Any) -> None:
        from pyspark.sql.streaming.listener import StreamingQueryListener

        if not isinstance(listener, StreamingQueryListener):
            raise TypeError(f"addListener() takes a pyspark.sql.streaming.StreamingQueryListener, got {type(listener).__name__}")
        with self._lock:
            self._listeners.append(listener)

    def remove(self, listener: Any) -> None:
        with self._lock:
            self._listeners = [x for x in self._listeners if x is not listener]

    @property
    def listeners(self) -> list[Any]:
        with self._lock:
            return list(self._listeners)

    def _post(self, method: str, event: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(event)
            except Exception:  # noqa: BLE001 - Spark's bus logs a failing listener and goes on
                logger.warning("StreamingQueryListener %s.%s failed", type(listener).__name__, method, exc_info=True)

    def post_started(self, query_id: str, run_id: str, name: str | None, timestamp: str) -> None:
        from pyspark.sql.streaming.listener import QueryStartedEvent

        if self._listeners:
            self._post("onQueryStarted", QueryStartedEvent.fromJson({"id": query_id, "runId": run_id, "name": name, "timestamp": timestamp}))

    def post_progress(self, progress: dict[str, Any]) -> None:
        from pyspark.sql.streaming.listener import QueryProgressEvent

        if self._listeners:
            self._post("onQueryProgress", QueryProgressEvent.fromJson({"progress": progress}))

    def post_idle(self, query_id: str, run_id: str, timestamp: str) -> None:
        from pyspark.sql.streaming.listener import QueryIdleEvent

        if self._listeners:
            self._post("onQueryIdle", QueryIdleEvent.fromJson({"id": query_id, "runId": run_id, "timestamp": timestamp}))

    def post_terminated(self, query_id: str, run_id: str, exception: BaseException | None) -> None:
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        if not self._listeners:
            return
        condition = None
        if exception is not None:
            get = getattr(exception, "getCondition", None)
            try:
                condition = get() if get else None
            except Exception:  # noqa: BLE001
                condition = None
        text = None if exception is None else str(exception)
        event = QueryTerminatedEvent.fromJson({"id": query_id, "runId": run_id, "exception": text, "errorClassOnException": condition})
        self._post("onQueryTerminated", event)
