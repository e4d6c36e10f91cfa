"""The streaming side of one Spark Connect client session: its queries started on statestream,
and the answers to the commands its ``StreamingQuery`` and ``spark.streams`` objects send.

A client's ``DataStreamWriter.start()`` arrives as a ``WriteStreamOperationStart`` command; its
plan is rebuilt on a :class:`~statestream.StreamingSession` over the client's server-side session
(:class:`~statestream.connect.plan_reader.ConnectPlanReader`), and the writer's settings are the
same calls on statestream's writer. The query's later commands (``StreamingQueryCommand``: status,
progress, stop, ``awaitTermination``...) name it by id and are answered from statestream's
``StreamingQuery`` in the result messages Spark's Connect server sends.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import pyspark.sql.connect.proto as pb

from statestream._jvm.connect import ClientSession
from statestream.api.session import StreamingSession
from statestream.connect.foreach_batch import ForeachBatchWorker
from statestream.connect.listener_relay import ListenerRelay
from statestream.connect.plan_reader import ConnectPlanReader
from statestream.errors import connect_node_not_supported

__all__ = ["ClientStreams"]

logger = logging.getLogger(__name__)


class ClientStreams:
    """One Connect client session's statestream queries.

    Parameters
    ----------
    client : statestream._jvm.connect.ClientSession
        The client's server-side session.
    url : str
        The endpoint's ``sc://host:port``.
    token : str, optional
        The endpoint's authentication token, which its foreachBatch workers present.

    Examples
    --------
    >>> streams = ClientStreams(ClientSession(spark, user_id, session_id), "sc://127.0.0.1:15002")  # doctest: +SKIP
    >>> query = streams.start(request.plan.command.write_stream_operation_start)  # doctest: +SKIP
    >>> streams.owns(query.id)  # doctest: +SKIP
    True
    """

    def __init__(self, client: ClientSession, url: str, token: str | None = None) -> None:
        self.client = client
        #: the endpoint's address (a foreachBatch worker joins the session there) and its token
        self.url = url
        self.token = token
        self.streaming = StreamingSession(client.session)
        #: the events of this session's statestream queries, for its listener streams
        self.relay = ListenerRelay()
        self.streaming.streams.addListener(self.relay)
        self._queries: dict[str, Any] = {}
        self._lock = threading.Lock()

    def owns(self, query_id: str, run_id: str | None = None) -> bool:
        """Whether the query of id ``query_id`` (and run ``run_id``, when given) was started
        here (on statestream)."""
        with self._lock:
            query = self._queries.get(query_id)
        return query is not None and (not run_id or query.runId == run_id)

    def streams_through_a_view(self, relation: pb.Relation) -> bool:
        """Whether a plan with no streaming read still reads a stream (a temporary view or SQL
        over one, planned by Spark's server)."""
        return bool(self.client.dataframe(relation.SerializeToString()).isStreaming)

    def queries(self) -> list[Any]:
        """The queries started here, in the order they started."""
        with self._lock:
            return list(self._queries.values())

    def start(self, write: pb.WriteStreamOperationStart) -> Any:
        """Rebuild and start a client's streaming write on statestream.

        Raises
        ------
        NotSupportedYetError
            A plan node or a writer setting that statestream does not take over Connect yet
            (the endpoint then hands the query to Spark's engine).
        """
        if write.HasField("foreach_writer"):
            raise connect_node_not_supported("write_stream_operation_start.foreach_writer")
        function = write.foreach_batch if write.HasField("foreach_batch") else None
        if function is not None and function.WhichOneof("function") != "python_function":
            raise connect_node_not_supported(f"write_stream_operation_start.foreach_batch.{function.WhichOneof('function')}")
        # a reader of its own for each start: its plan-id map is this plan's
        df = ConnectPlanReader(self.client, self.streaming).read(write.input)
        writer = df.writeStream
        worker = None
        if function is not None:
            python = function.python_function
            worker = ForeachBatchWorker(self.client, self.url, python.command, python.python_ver, token=self.token)
            writer = writer.foreachBatch(worker)
        if write.format:
            writer = writer.format(write.format)
        writer = writer.options(**dict(write.options))
        if write.partitioning_column_names:
            writer = writer.partitionBy(*write.partitioning_column_names)
        if write.clustering_column_names:
            writer = writer.clusterBy(*write.clustering_column_names)
        trigger = write.WhichOneof("trigger")
        if trigger == "processing_time_interval":
            writer = writer.trigger(processingTime=write.processing_time_interval)
        elif trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        elif trigger == "once":
            writer = writer.trigger(once=True)
        elif trigger == "continuous_checkpoint_interval":
            writer = writer.trigger(continuous=write.continuous_checkpoint_interval)
        if write.output_mode:
            writer = writer.outputMode(write.output_mode)
        if write.query_name:
            writer = writer.queryName(write.query_name)
        sink = write.WhichOneof("sink_destination")
        if sink == "table_name":
            query = writer.toTable(write.table_name)
        else:
            query = writer.start(write.path) if sink == "path" else writer.start()
        with self._lock:
            self._queries[query.id] = query
        if worker is not None:
            threading.Thread(target=_close_when_done, args=(query, worker), name=f"statestream-fb-{query.id}", daemon=True).start()
        return query

    def query_command(self, command: pb.StreamingQueryCommand, alive: Callable[[], bool] = lambda: True) -> pb.StreamingQueryCommandResult:
        """The answer to a command about one of this session's queries (:meth:`owns` its id),
        as Spark's Connect server answers it. A failed query's ``awaitTermination`` raises its
        exception, which the endpoint sends as an error; ``alive`` says whether the client still
        waits for the answer."""
        with self._lock:
            query = self._queries[command.query_id.id]
        result = pb.StreamingQueryCommandResult()
        result.query_id.id, result.query_id.run_id = query.id, query.runId
        kind = command.WhichOneof("command")
        if kind == "status":
            status = query.status
            result.status.status_message = status["message"]
            result.status.is_data_available = status["isDataAvailable"]
            result.status.is_trigger_active = status["isTriggerActive"]
            result.status.is_active = query.isActive
        elif kind == "last_progress":
            last = query.lastProgress
            result.recent_progress.recent_progress_json.extend([last.json] if last is not None else [])
        elif kind == "recent_progress":
            result.recent_progress.recent_progress_json.extend(p.json for p in query.recentProgress)
        elif kind == "stop":
            query.stop()
        elif kind == "process_all_available":
            query.processAllAvailable()
        elif kind == "explain":
            result.explain.result = query._explain_text(command.explain.extended)  # noqa: SLF001
        elif kind == "exception":
            exc = query.exception()
            if exc is not None:
                result.exception.exception_message = f"org.apache.spark.sql.streaming.StreamingQueryException: {exc}"
                condition = getattr(exc, "getCondition", lambda: None)()
                if condition:
                    result.exception.error_class = condition
        elif kind == "await_termination":
            wait = command.await_termination
            # in slices: a client that went away (Ctrl-C), or an interrupt, frees the thread
            deadline = time.monotonic() + wait.timeout_ms / 1000.0 if wait.HasField("timeout_ms") else None
            while alive():
                left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if left <= 0 or query.awaitTermination(left):
                    break
            result.await_termination.terminated = not query.isActive
        return result

    def manager_command(self, command: pb.StreamingQueryManagerCommand, spark: pb.StreamingQueryManagerCommandResult | None) -> pb.StreamingQueryManagerCommandResult | None:
        """The answer to a ``spark.streams`` command, with this session's statestream queries
        added to Spark's answer ``spark`` (the same command run by Spark's Connect server, for
        the queries on Spark's engine); None when the command concerns Spark's engine only
        (listeners, and a ``get`` of a query not started here)."""
        kind = command.WhichOneof("command")
        if kind == "active":
            result = pb.StreamingQueryManagerCommandResult()
            result.active.CopyFrom(spark.active if spark is not None else result.active)
            for query in self.queries():
                if query.isActive:
                    result.active.active_queries.add(id=_instance_id(query), name=query.name or "")
            return result
        if kind == "get_query" and self.owns(command.get_query):
            with self._lock:
                query = self._queries[command.get_query]
            result = pb.StreamingQueryManagerCommandResult()
            result.query.id.CopyFrom(_instance_id(query))
            if query.name:
                result.query.name = query.name
            return result
        if kind == "reset_terminated":
            self.streaming.streams.resetTerminated()
            return spark
        return None


def _close_when_done(query: Any, worker: ForeachBatchWorker) -> None:
    """Stop a query's foreachBatch worker once the query has ended."""
    try:
        query.awaitTermination()
    except Exception:  # a failed query ends too; its error is the client's to read
        logger.debug("query %s ended with an error", query.id, exc_info=True)
    finally:
        worker.close()


def _instance_id(query: Any) -> pb.StreamingQueryInstanceId:
    return pb.StreamingQueryInstanceId(id=query.id, run_id=query.runId)
