"""StreamingQuery and StreamingQueryManager handles (PySpark's names and behaviour)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from statestream.errors import (
    StatestreamStreamingQueryException,
    checked_timeout,
    concurrent_query_error,
    duplicate_query_id_error,
    duplicate_query_name_error,
    missing_member,
    query_exception_view,
)
from statestream.plan.explain import explain_string
from statestream.runtime.listener_bus import StreamingQueryListenerBus

if TYPE_CHECKING:
    from statestream.runtime.microbatch import MicroBatchExecution

__all__ = ["StreamingQuery", "StreamingQueryManager"]

logger = logging.getLogger(__name__)


def _progress(values: dict) -> Any:
    """A progress record as PySpark's own ``StreamingQueryProgress`` (built from the same JSON
    shape Spark's JVM hands to PySpark)."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    return StreamingQueryProgress.fromJson(values)


class StreamingQuery:
    """A handle to a running (or terminated) query: PySpark's ``StreamingQuery``.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> ms = ss.memoryStream("a INT")
    >>> ms.add_data([(1,)])
    0
    >>> q = ms.toDF().writeStream.format("noop").queryName("query_class").start()
    >>> q.processAllAvailable()
    >>> q.name, q.isActive
    ('query_class', True)
    >>> q.stop()
    >>> q.isActive
    False
    """

    def __init__(self, execution: "MicroBatchExecution") -> None:
        self._ex = execution
        #: the dashboard served for this query (``spark.statestream.ui.port``), or None
        self._dashboard: Any = None

    @property
    def dashboardUrl(self) -> str | None:  # noqa: N802
        """The address of this query's dashboard, when ``spark.statestream.ui.port`` is set."""
        return None if self._dashboard is None else self._dashboard.url

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.streaming.query import StreamingQuery as _PySpark

        raise missing_member("StreamingQuery", _PySpark, name)

    @property
    def id(self) -> str:
        """The query's id, as PySpark's ``StreamingQuery.id``: a UUID string kept in the checkpoint, the
        same across restarts from it.

        Examples
        --------
        >>> import uuid
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").option("checkpointLocation", f"{tmp}/query_id").start()
        >>> first = q.id
        >>> q.stop()
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").option("checkpointLocation", f"{tmp}/query_id").start()
        >>> q.id == first, str(uuid.UUID(first)) == first
        (True, True)
        >>> q.stop()
        """
        return self._ex.query_id

    @property
    def runId(self) -> str:  # noqa: N802
        """The id of this run of the query, as PySpark's ``StreamingQuery.runId``: a new UUID string at
        every start, restarts from the checkpoint included.
        """
        return self._ex.run_id

    @property
    def name(self) -> str | None:
        """The name given with ``queryName``, or ``None``, as PySpark's ``StreamingQuery.name``.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("query_name").start()
        >>> q.name
        'query_name'
        >>> q.stop()
        """
        return self._ex.query_name

    @property
    def isActive(self) -> bool:  # noqa: N802
        """Whether the query is running, as PySpark's ``StreamingQuery.isActive``: false once it was
        stopped, failed, or finished (``trigger(once=True)`` / ``availableNow=True``).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").start()
        >>> q.isActive
        True
        >>> q.stop()
        >>> q.isActive
        False
        """
        return self._ex.is_active

    @property
    def status(self) -> dict:
        """What the query is doing now, as PySpark's ``StreamingQuery.status``: a dict with
        ``message``, ``isDataAvailable`` and ``isTriggerActive`` (a copy: it does not change).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").start()
        >>> q.processAllAvailable()
        >>> sorted(q.status)
        ['isDataAvailable', 'isTriggerActive', 'message']
        >>> q.stop()
        >>> q.status["message"]
        'Stopped'
        """
        return self._ex.status

    @property
    def lastProgress(self) -> Any:  # noqa: N802
        """PySpark's ``StreamingQueryProgress`` of the last trigger (attribute and dict access,
        ``json``, ``prettyJson``), or ``None`` before the first one.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,), (2,)])
        0
        >>> q = ms.toDF().writeStream.format("noop").queryName("query_progress").start()
        >>> q.processAllAvailable()
        >>> q.lastProgress["name"]
        'query_progress'
        >>> q.stop()
        """
        last = self._ex.progress.last()
        return _progress(last) if last is not None else None

    @property
    def recentProgress(self) -> list[Any]:  # noqa: N802
        """The progress of the recent triggers, oldest first, as PySpark's
        ``StreamingQuery.recentProgress`` (a list of ``StreamingQueryProgress``).
        """
        return [_progress(p) for p in self._ex.progress.recent()]

    def awaitTermination(self, timeout: float | None = None) -> bool | None:  # noqa: N802
        """Wait until the query terminates, or for ``timeout`` seconds (a number above 0, else
        PySpark's ``VALUE_NOT_POSITIVE``); with a timeout, whether it terminated. A failed
        query's exception is raised.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most; without it, wait as long as the query runs.

        Returns
        -------
        bool or None
            With a timeout, whether the query terminated; without one, ``None``.

        Raises
        ------
        StreamingQueryException
            The failure of a failed query.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,)])
        0
        >>> q = ms.toDF().writeStream.format("noop").start()
        >>> q.awaitTermination(0.1)
        False
        >>> q.stop()
        >>> q.awaitTermination(0.1)
        True
        """
        timeout = checked_timeout(timeout, allow_zero=False)
        with self._stop_on_interrupt():
            done = self._ex.await_termination(timeout)
        return done if timeout is not None else None

    def processAllAvailable(self) -> None:  # noqa: N802
        """Block until every row available in the sources when it was called has been processed and
        committed, as PySpark's ``StreamingQuery.processAllAvailable`` (meant for tests). A failed
        query's exception is raised; Ctrl-C while waiting stops the query, then goes on.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,), (2,)])
        0
        >>> q = ms.toDF().writeStream.format("memory").queryName("query_all_available").start()
        >>> q.processAllAvailable()
        >>> sorted(spark.table("query_all_available").collect())
        [Row(a=1), Row(a=2)]
        >>> q.stop()
        """
        with self._stop_on_interrupt():
            self._ex.process_all_available()

    @contextlib.contextmanager
    def _stop_on_interrupt(self) -> Iterator[None]:
        """Ctrl-C while waiting on the query stops it cleanly (the batch in flight finishes or is
        abandoned, nothing is reported as a failure), then the interrupt goes on to the caller."""
        try:
            yield
        except KeyboardInterrupt:
            logger.info("query %s: interrupted, stopping", self.name or self.id)
            self._ex.stop()
            logger.info("query %s stopped", self.name or self.id)
            raise

    def stop(self) -> None:
        """Stop the query, as PySpark's ``StreamingQuery.stop``: the Spark jobs of the batch in flight
        are cancelled (that batch runs again from the checkpoint at the next start), then the query's
        thread is waited for, at most ``spark.sql.streaming.stopTimeout`` (0: as long as it takes).

        Raises
        ------
        TimeoutError
            With Spark's message, when the thread still runs after ``spark.sql.streaming.stopTimeout``.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").start()
        >>> q.stop()
        >>> q.isActive, q.exception()
        (False, None)
        """
        self._ex.stop()  # the run's end stops the dashboard it serves

    def exception(self) -> BaseException | None:
        """The failure that ended the query, shaped as PySpark's ``query.exception()`` shapes it
        (``awaitTermination()`` raises the ``STREAM_FAILED`` form instead)."""
        exc = self._ex.exception
        if isinstance(exc, StatestreamStreamingQueryException) and exc.getCondition() == "STREAM_FAILED":
            return query_exception_view(exc, self._ex.query_id, self._ex.run_id, self._ex.query_name)
        return exc

    def explain(self, extended: bool = False) -> None:
        """Print the physical plan of the last micro-batch (``"N/A"`` before the first one), as
        PySpark's ``StreamingQuery.explain``; ``extended=True`` prints the logical plans too.
        """
        print(self._explain_text(extended))  # noqa: T201 - like PySpark, explain prints

    def _explain_text(self, extended: bool = False) -> str:
        """What :meth:`explain` prints (the Connect endpoint sends it to its client)."""
        plan = self._ex.explained_plan()
        return "N/A" if plan is None else explain_string(plan, extended=extended)

    def __repr__(self) -> str:
        return f"<StreamingQuery id={self.id} name={self.name}>"


#: the active runs of every session by query id (Spark keeps them in the SharedState of the
#: SparkContext: one query id runs once, whichever session started it)
_ACTIVE_BY_ID: dict[str, StreamingQuery] = {}
_ACTIVE_LOCK = threading.Lock()


class StreamingQueryManager:
    """``StreamingSession.streams``: the active queries of one session, as PySpark's
    ``StreamingQueryManager``.

    Examples
    --------
    >>> ss = StreamingSession(spark)
    >>> ss.streams.active
    []
    >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("manager_class").start()
    >>> ss.streams.get(q.id) is q
    True
    >>> q.stop()
    """

    def __init__(self, spark: Any = None) -> None:
        #: the session whose queries these are: when statestream.enable serves it, a query handed
        #: to Spark's engine (``handover.py``) is listed too
        self._spark = spark

        self._listeners = StreamingQueryListenerBus()
        #: runs started by this manager and not terminated yet, by run id (their names are taken)
        self._running: dict[str, StreamingQuery] = {}
        self._lock = threading.Condition()
        self._last_terminated: "MicroBatchExecution | None" = None
        #: a query of this session was handed to Spark's engine: waiting, resetting and listening
        #: cover Spark's manager too (the listeners added to it, by identity)
        self._spark_side = False
        self._spark_listeners: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        from pyspark.sql.streaming.query import StreamingQueryManager as _PySpark

        raise missing_member("StreamingQueryManager", _PySpark, name)

    def _start(self, q: StreamingQuery) -> None:
        """Start ``q`` as Spark's ``StreamingQueryManager.startQuery`` does: its id comes from its
        checkpoint; a name already active in this session is refused; an id already active (in
        any session) stops that run first, or is refused when
        ``spark.sql.streaming.stopActiveRunOnRestart`` is false. All of it before anything of
        ``q`` runs: no thread, no batch, no listener event, no sink view."""
        ex = q._ex  # noqa: SLF001
        ex.prepare()
        try:
            with self._lock:
                if q.name is not None and any(other.name == q.name for other in self._running.values()):
                    raise duplicate_query_name_error(q.name)
            with _ACTIVE_LOCK:
                old = _ACTIVE_BY_ID.get(q.id)
            if old is not None:
                conf = ex.session.sparkSession.conf.get("spark.sql.streaming.stopActiveRunOnRestart", "true")
                if str(conf).strip().lower() != "true":
                    raise duplicate_query_id_error(q.id)
                logger.warning("stopping the active run %s of query %s: a new run of it is starting", old.runId, q.id)
                old.stop()
            with self._lock, _ACTIVE_LOCK:  # checked again with both held: a concurrent start
                if q.name is not None and any(other.name == q.name for other in self._running.values()):
                    raise duplicate_query_name_error(q.name)
                if _ACTIVE_BY_ID.get(q.id) is not None:
                    raise concurrent_query_error()
                _ACTIVE_BY_ID[q.id] = q
                self._running[q.runId] = q
        except BaseException:
            ex.discard()
            raise
        try:
            ex.lock_checkpoint()
            ex.start()
        except BaseException:
            self._forget(q)
            ex.discard()
            raise

    def _forget(self, q: StreamingQuery) -> None:
        """``q`` is no longer active: its name and id are free again."""
        with self._lock:
            self._running.pop(q.runId, None)
        with _ACTIVE_LOCK:
            if _ACTIVE_BY_ID.get(q.id) is q:
                del _ACTIVE_BY_ID[q.id]

    def _notify_terminated(self, ex: "MicroBatchExecution") -> None:
        with self._lock:
            q = self._running.get(ex.run_id)
        if q is not None:
            self._forget(q)
        with self._lock:
            self._last_terminated = ex
            self._lock.notify_all()

    @property
    def active(self) -> list[Any]:
        """The runs started and not terminated yet, as Spark's list: a query whose ``stop()``
        timed out is inactive (``isActive`` is false) but listed until its thread ends. On a
        session that statestream.enable serves, the queries handed to Spark's engine follow.

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("manager_active").start()
        >>> [query.name for query in ss.streams.active]
        ['manager_active']
        >>> q.stop()
        """
        with self._lock:
            ours: list[Any] = list(self._running.values())
        return ours + self._spark_engine_queries()

    def _pyspark_manager(self) -> Any:
        """PySpark's own query manager of a session statestream.enable serves (Spark's engine's
        queries: those handed over), else None."""
        if self._spark is None or not getattr(type(self._spark), "_statestream_served", False):
            return None
        from pyspark.sql.session import SparkSession as ClassicSparkSession

        # a cached property of PySpark's class, which the served class overrides
        return vars(ClassicSparkSession)["streams"].__get__(self._spark, ClassicSparkSession)

    def _spark_engine_queries(self) -> list[Any]:
        try:
            manager = self._pyspark_manager()
            return [] if manager is None else list(manager.active)
        except Exception:  # a stopped context: statestream's queries alone
            logger.debug("the queries of Spark's engine cannot be listed", exc_info=True)
            return []

    def _handed_over(self) -> None:
        """A query of this session now runs on Spark's engine (``handover.py``): the listeners
        added so far hear its events too, and ``awaitAnyTermination`` waits for it as well."""
        manager = self._pyspark_manager()
        if manager is None:
            return
        with self._lock:
            if self._spark_side:
                return
            self._spark_side = True
            listeners = self._listeners.listeners
        for listener in listeners:
            self._add_spark_listener(manager, listener)

    def _add_spark_listener(self, manager: Any, listener: Any) -> None:
        manager.addListener(listener)
        with self._lock:
            self._spark_listeners.append(listener)

    def get(self, id: str) -> Any:  # noqa: A002 - PySpark's name
        """The active query whose id is ``id``, or ``None``, as PySpark's ``StreamingQueryManager.get``.

        Parameters
        ----------
        id : str
            A query's ``id`` (not its ``runId``).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> q = ss.memoryStream("a INT").toDF().writeStream.format("noop").queryName("manager_get").start()
        >>> ss.streams.get(q.id).name
        'manager_get'
        >>> q.stop()
        """
        for q in self.active:
            if q.id == id:
                return q
        return None

    def awaitAnyTermination(self, timeout: float | None = None) -> bool | None:  # noqa: N802
        """Wait until a query of this session terminates (since the last ``resetTerminated``);
        raise its exception if it failed. Ctrl-C while waiting stops this session's active
        queries cleanly, as it does in ``query.awaitTermination()``, and the interrupt goes on.
        On a session that statestream.enable serves, a query handed to Spark's engine counts too.
        ``timeout`` (seconds) must be a number of at least 0, as PySpark checks it (else
        ``VALUE_NOT_POSITIVE``).

        Examples
        --------
        >>> ss = StreamingSession(spark)
        >>> ms = ss.memoryStream("a INT")
        >>> ms.add_data([(1,)])
        0
        >>> q = ms.toDF().writeStream.format("noop").start()
        >>> ss.streams.awaitAnyTermination(0.1)
        False
        >>> q.stop()
        >>> ss.streams.awaitAnyTermination(0.1)
        True
        """
        timeout = checked_timeout(timeout, allow_zero=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                with self._lock:
                    # short waits: a Ctrl-C (KeyboardInterrupt) reaches the waiting thread at once
                    left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                    if self._last_terminated is None and left > 0:
                        self._lock.wait(left)
                    ex = self._last_terminated
                    spark_side = self._spark_side
                if ex is not None:
                    break
                if spark_side and self._spark_query_terminated():
                    return True if timeout is not None else None
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except KeyboardInterrupt:
            self._stop_on_interrupt()
            raise
        if ex is not None and ex.exception is not None:
            raise ex.exception
        return (ex is not None) if timeout is not None else None

    def _spark_query_terminated(self) -> bool:
        """Whether a query of Spark's engine terminated since the last reset (its exception,
        Spark's ``StreamingQueryException``, raised)."""
        manager = self._pyspark_manager()
        return manager is not None and bool(manager.awaitAnyTermination(0.01))

    def _stop_on_interrupt(self) -> None:
        """Ctrl-C: every active query of this session stops, its batch in flight cancelled."""
        with self._lock:
            running = list(self._running.values())
        for q in running:
            logger.info("query %s: interrupted, stopping", q.name or q.id)
            q._ex.stop()  # noqa: SLF001
            logger.info("query %s stopped", q.name or q.id)

    def resetTerminated(self) -> None:  # noqa: N802
        """Forget the queries terminated so far: ``awaitAnyTermination`` waits for the next one."""
        with self._lock:
            self._last_terminated = None
            spark_side = self._spark_side
        if spark_side:
            self._pyspark_manager().resetTerminated()

    def addListener(self, listener: Any) -> None:  # noqa: N802
        """A ``pyspark.sql.streaming.StreamingQueryListener`` that hears this session's queries
        (``runtime/listener_bus.py``); on a session that statestream.enable serves, also the
        queries handed to Spark's engine."""
        self._listeners.add(listener)
        with self._lock:
            spark_side = self._spark_side
        if spark_side:
            self._add_spark_listener(self._pyspark_manager(), listener)

    def removeListener(self, listener: Any) -> None:  # noqa: N802
        """Stop ``listener`` hearing this session's queries."""
        self._listeners.remove(listener)
        with self._lock:
            on_spark = any(x is listener for x in self._spark_listeners)
            self._spark_listeners = [x for x in self._spark_listeners if x is not listener]
        if on_spark:
            self._pyspark_manager().removeListener(listener)

    def _wait_for_listener_bus(self, timeout: float = 30.0) -> bool:
        """Internal (tests): wait until every listener event posted so far has been delivered
        (events other than ``onQueryStarted`` arrive on the bus thread, after the fact)."""
        return self._listeners.wait_until_empty(timeout)
