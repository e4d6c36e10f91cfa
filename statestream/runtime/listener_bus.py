"""StreamingQueryListener events of statestream's queries (Spark: ``StreamingQueryListenerBus``).

Listeners are PySpark's own ``StreamingQueryListener`` subclasses and receive PySpark's own
event classes, built from the same JSON Spark's JVM sends to Python.

Delivery follows Spark's: ``QueryStartedEvent`` is delivered synchronously in ``start()``, before
it returns (Spark documents it so); ``QueryProgressEvent`` (after each batch),
``QueryIdleEvent`` (an idle trigger reported) and ``QueryTerminatedEvent`` (the run ended, with
the exception text and its error class) are queued and delivered, in the order they were posted,
by one bus thread per session. Why: the query thread never waits for a listener, so a listener
may call ``query.stop()`` or ``query.awaitTermination()`` from ``onQueryProgress`` without
deadlocking the query, as on Spark. The bus thread runs only while events are queued.

A listener that raises is logged and skipped, as Spark's bus does; the query goes on. Tests that
expect an event after ``processAllAvailable()`` wait for the queue to drain
(:meth:`StreamingQueryListenerBus.wait_until_empty`, like Spark's tests' ``waitUntilEmpty``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

from statestream.errors import StatestreamStreamingQueryException

__all__ = ["StreamingQueryListenerBus"]

logger = logging.getLogger(__name__)


class StreamingQueryListenerBus:
    """The listeners of one ``StreamingQueryManager`` and the delivery of events to them."""

    def __init__(self) -> None:
        self._listeners: list[Any] = []
        self._lock = threading.Lock()
        #: queued (method, event) pairs, delivered in order by the bus thread
        self._queue: collections.deque[tuple[str, Any]] = collections.deque()
        #: notified when the queue is empty and no event is being delivered
        self._idle = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None

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

    def wait_until_empty(self, timeout: float = 30.0) -> bool:
        """Wait until every event posted so far has been delivered; ``False`` on timeout.
        Internal (tests): Spark's tests wait for its listener bus the same way."""
        if threading.current_thread() is self._worker:
            return False  # a listener waiting for its own bus would wait forever
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._queue or self._worker is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.2))
        return True

    def _deliver(self, method: str, event: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(event)
            except Exception:  # Spark's bus logs a failing listener and goes on
                logger.warning("StreamingQueryListener %s.%s failed", type(listener).__name__, method, exc_info=True)

    def _enqueue(self, method: str, event: Any) -> None:
        """Queue an event; start the bus thread if none is running."""
        with self._lock:
            self._queue.append((method, event))
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name="statestream-listener-bus", daemon=True)
                self._worker.start()

    def _drain(self) -> None:
        """The bus thread: deliver queued events in order, then end when the queue is empty."""
        while True:
            with self._lock:
                if not self._queue:
                    self._worker = None
                    self._idle.notify_all()
                    return
                method, event = self._queue.popleft()
            self._deliver(method, event)

    def post_started(self, query_id: str, run_id: str, name: str | None, timestamp: str) -> None:
        """Synchronous, on the caller's thread (``start()``)."""
        from pyspark.sql.streaming.listener import QueryStartedEvent

        if self._listeners:
            self._deliver("onQueryStarted", QueryStartedEvent.fromJson({"id": query_id, "runId": run_id, "name": name, "timestamp": timestamp}))

    def post_progress(self, progress: dict[str, Any]) -> None:
        from pyspark.sql.streaming.listener import QueryProgressEvent

        if self._listeners:
            self._enqueue("onQueryProgress", QueryProgressEvent.fromJson({"progress": progress}))

    def post_idle(self, query_id: str, run_id: str, timestamp: str) -> None:
        from pyspark.sql.streaming.listener import QueryIdleEvent

        if self._listeners:
            self._enqueue("onQueryIdle", QueryIdleEvent.fromJson({"id": query_id, "runId": run_id, "timestamp": timestamp}))

    def post_terminated(self, query_id: str, run_id: str, exception: BaseException | None) -> None:
        """Queue the run's ``QueryTerminatedEvent``. As Spark's, it describes the failure itself,
        not the ``STREAM_FAILED`` that wraps it: ``exception`` is the failure's text (a sink's
        ``FOREACH_(BATCH_)USER_FUNCTION_ERROR`` unwrapped to the user's error, as Spark unwraps
        it) and ``errorClassOnException`` the failure's own error class, ``None`` when it has none
        (a Spark job that failed in a Python UDF has none)."""
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        if not self._listeners:
            return
        text = condition = None
        if exception is not None:
            failure = exception.cause if isinstance(exception, StatestreamStreamingQueryException) and exception.cause is not None else exception
            condition = _error_class(failure)
            unwrapped = getattr(failure, "unwrapped_message", None)
            text = unwrapped() if callable(unwrapped) else str(failure)
        event = QueryTerminatedEvent.fromJson({"id": query_id, "runId": run_id, "exception": text, "errorClassOnException": condition})
        self._enqueue("onQueryTerminated", event)


def _error_class(failure: BaseException) -> str | None:
    """The error class of ``failure`` (PySpark's ``getCondition()``), or ``None``."""
    get = getattr(failure, "getCondition", None)
    try:
        return get() if callable(get) else None
    except Exception:  # noqa: BLE001 - a condition that cannot be read is no condition
        return None
