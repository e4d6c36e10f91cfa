"""Listener events of a Connect client's statestream queries, in the form Spark's Connect server
sends them.

A Connect client's ``spark.streams.addListener`` opens one long-lived ``ExecutePlan`` stream
(``add_listener_bus_listener``) on which the server sends every query event of the session
(``StreamingQueryListenerEvent``: an event type and the event's JSON); the client's listener bus
rebuilds PySpark's events from the JSON. ``onQueryStarted`` is not on that stream: the client
posts it itself from the start command's ``query_started_event_json``.

:class:`ListenerRelay` is a PySpark ``StreamingQueryListener`` on statestream's query manager of
one client session; each open stream subscribes a queue to it (:meth:`ListenerRelay.subscribe`),
which the endpoint's service drains into the stream together with Spark's own events.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import pyspark.sql.connect.proto as pb
from pyspark.sql.streaming import StreamingQueryListener

__all__ = ["ListenerRelay", "started_event_json"]


def started_event_json(query: Any, timestamp: str) -> str:
    """The JSON of a query's started event, as a Connect client's ``QueryStartedEvent.fromJson``
    reads it.

    Examples
    --------
    >>> class Q:
    ...     id, runId, name = "6c0f3b8e-1c4b-4c4e-9f51-4bd4ad9c2a10", "0b4b7c3e-3f1a-4a7e-8b2d-8d7c1b2a3f40", None
    >>> json.loads(started_event_json(Q(), "2026-12-07T20:00:00.000Z"))["name"] is None
    True
    """
    return json.dumps({"id": query.id, "runId": query.runId, "name": query.name, "timestamp": timestamp, "jobTags": []})


class ListenerRelay(StreamingQueryListener):
    """Relays the events of one client session's statestream queries to the session's open
    listener streams, as ``StreamingQueryListenerEvent`` messages.

    Examples
    --------
    >>> relay = ListenerRelay()
    >>> events = relay.subscribe()
    >>> relay.post(pb.StreamingQueryEventType.QUERY_IDLE_EVENT, {"id": "a", "runId": "b", "timestamp": "t"})
    >>> events.get_nowait().event_type == pb.StreamingQueryEventType.QUERY_IDLE_EVENT
    True
    """

    def __init__(self) -> None:
        self._subscribers: list[queue.Queue[Any]] = []
        self._lock = threading.Lock()

    def subscribe(self) -> "queue.Queue[Any]":
        """A queue that gets every event from now on (and ``None`` when :meth:`close_all` is called)."""
        events: queue.Queue[Any] = queue.Queue()
        with self._lock:
            self._subscribers.append(events)
        return events

    def unsubscribe(self, events: "queue.Queue[Any]") -> None:
        """Stop sending events to ``events``."""
        with self._lock:
            if events in self._subscribers:
                self._subscribers.remove(events)

    def close_all(self) -> None:
        """End every open stream (the client removed its last listener)."""
        with self._lock:
            subscribers, self._subscribers = self._subscribers, []
        for events in subscribers:
            events.put(None)

    def post(self, kind: int, event: dict) -> None:
        """Send one event (``kind``: a ``StreamingQueryEventType``) to every subscriber."""
        message = pb.StreamingQueryListenerEvent(event_json=json.dumps(event), event_type=kind)  # type: ignore[arg-type]
        with self._lock:
            subscribers = list(self._subscribers)
        for events in subscribers:
            events.put(message)

    # -- StreamingQueryListener ----------------------------------------------------------------

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - the client posts it from the start result
        """Not relayed: the client posts the started event from the start command's result."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        """Relay a progress event."""
        self.post(pb.StreamingQueryEventType.QUERY_PROGRESS_EVENT, {"progress": json.loads(event.progress.json)})

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        """Relay an idle event."""
        self.post(pb.StreamingQueryEventType.QUERY_IDLE_EVENT, {"id": str(event.id), "runId": str(event.runId), "timestamp": event.timestamp})

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        """Relay a terminated event (its exception text and error class)."""
        self.post(
            pb.StreamingQueryEventType.QUERY_TERMINATED_EVENT,
            {"id": str(event.id), "runId": str(event.runId), "exception": event.exception, "errorClassOnException": event.errorClassOnException},
        )
