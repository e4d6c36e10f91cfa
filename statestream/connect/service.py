"""The gRPC face of the endpoint: Spark Connect's service, forwarded to Spark's own Connect server
in the same driver, with the streaming commands taken by statestream.

Every call a client makes is passed on to Spark's Connect server untouched (requests, metadata,
responses, errors with their details): batch work, analysis, configuration, artifacts. Three kinds
of ``ExecutePlan`` command are read first:

- ``write_stream_operation_start`` (``writeStream...start()``): the query is rebuilt and started on
  statestream (:class:`~statestream.connect.client_streams.ClientStreams`); one that statestream
  does not run yet goes on to Spark's engine, with one log line, unless the client's session sets
  ``spark.statestream.handOverToSpark`` to ``false`` (then the refusal is the client's error);
- ``streaming_query_command`` about a query started on statestream: answered from it;
- ``streaming_query_manager_command``: Spark's answer, with statestream's queries added.

An operation answered here keeps its responses until the client releases it (``ReleaseExecute``),
so that a client that lost its stream can reattach (``ReattachExecute``) and read the rest.

Interrupts (``interruptAll``, ``interruptTag``, ``interruptOperation``) go on to Spark's server, and
reach the operations answered here as they reach Spark's: a query started by a matching
operation stops, and a matching wait on a query (``awaitTermination``, ``awaitAnyTermination``)
ends with ``OPERATION_CANCELED``; their ids join Spark's in the answer.
"""

from __future__ import annotations

import datetime
import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import grpc
import pyspark.sql.connect.proto as pb
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from pyspark.errors.exceptions.connect import EXCEPTION_CLASS_MAPPING

from statestream._jvm.connect import ClientSession
from statestream.api.handover import HANDOVER_CONF
from statestream.connect.client_streams import ClientStreams
from statestream.connect.listener_relay import started_event_json
from statestream.connect.messages import reads_a_stream
from statestream.errors import NotSupportedYetError, connect_authentication_failure, connect_node_not_supported, operation_canceled_error

__all__ = ["SERVICE", "StreamingConnectService", "error_status", "interrupt_reaches"]

logger = logging.getLogger(__name__)

#: the gRPC service name of Spark Connect
SERVICE = "spark.connect.SparkConnectService"

#: PySpark's base exception classes -> the JVM class a Connect client maps back to each
_JVM_CLASSES: dict[type, str] = {}
for _java, _connect_class in EXCEPTION_CLASS_MAPPING.items():
    _base = next((c for c in _connect_class.__mro__ if c.__module__ == "pyspark.errors.exceptions.base"), None)
    if _base is not None:
        _JVM_CLASSES.setdefault(_base, _java)


def error_status(exc: BaseException) -> grpc.Status:
    """The gRPC status Spark's Connect server would send for ``exc``: an ``ErrorInfo`` whose JVM
    class, error class, message parameters and SQLSTATE make the client raise the same PySpark
    exception (``AnalysisException``, ``StreamingQueryException``...) with the same condition.

    Examples
    --------
    >>> from pyspark.errors import PySparkValueError
    >>> error_status(ValueError("bad")).code
    <StatusCode.INTERNAL: (13, 'internal')>
    """
    java = getattr(exc, "jvm_class", None) or next((_JVM_CLASSES[c] for c in type(exc).__mro__ if c in _JVM_CLASSES), None)
    if java is None:
        java = "java.lang.IllegalArgumentException" if isinstance(exc, (ValueError, TypeError)) else "org.apache.spark.SparkException"
    if isinstance(exc, NotSupportedYetError):
        java = "java.lang.UnsupportedOperationException"
    metadata = {"classes": json.dumps([java])}
    condition = getattr(exc, "getCondition", lambda: None)()
    if condition:
        metadata["errorClass"] = condition
        metadata["messageParameters"] = json.dumps(getattr(exc, "getMessageParameters", dict)() or {})
        state = getattr(exc, "getSqlState", lambda: None)()
        if state:
            metadata["sqlState"] = state
    info = error_details_pb2.ErrorInfo(reason=java, domain="org.apache.spark", metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    text = str(exc) if condition or java != "org.apache.spark.SparkException" else f"{type(exc).__name__}: {exc}"
    return rpc_status.to_status(status_pb2.Status(code=code_pb2.INTERNAL, message=text, details=[detail]))


@dataclass
class _Operation:
    """An operation of a client answered here that an interrupt can reach: the start of a
    query (``query``: stopped by the interrupt) or a wait on queries (``cancelled``: set by it)."""

    session: tuple[str, str]
    tags: frozenset[str]
    query: Any = None
    cancelled: threading.Event = field(default_factory=threading.Event)


class StreamingConnectService(grpc.GenericRpcHandler):
    """Spark Connect's service: every call forwarded to Spark's Connect server at ``upstream``,
    streaming commands answered by statestream (see the module).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The endpoint's classic session, whose driver runs Spark's Connect server.
    upstream : str
        ``host:port`` of that server.
    url : str
        The endpoint's own ``sc://host:port``.
    token : str, optional
        The authentication token every call must carry (``authorization: Bearer <token>``), as
        Spark's Connect server asks for ``spark.connect.authenticate.token``; the calls passed on
        keep their header, so Spark's server checks it too.

    Examples
    --------
    >>> server = grpc.server(ThreadPoolExecutor(32))  # doctest: +SKIP
    >>> server.add_generic_rpc_handlers([StreamingConnectService(spark, "127.0.0.1:15003", "sc://127.0.0.1:15002")])  # doctest: +SKIP
    """

    def __init__(self, spark: Any, upstream: str, url: str, token: str | None = None) -> None:
        self.spark = spark
        self.token = token
        #: the endpoint's own ``sc://host:port`` (foreachBatch workers join their session there)
        self.url = url
        self._channel = grpc.insecure_channel(
            upstream, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        )
        self._clients: dict[tuple[str, str], ClientStreams] = {}
        #: operation id -> (session id, server-side session id, its responses) of operations answered here
        self._operations: dict[str, tuple[str, str, list[pb.ExecutePlanResponse]]] = {}
        #: operation id -> the operations answered here that an interrupt reaches
        self._interruptible: dict[str, _Operation] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop every statestream query started through this service and close the channel."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for streams in clients:
            for query in streams.queries():
                query.stop()
        self._channel.close()

    # -- gRPC -------------------------------------------------------------------------------

    def service(self, handler_call_details: Any) -> Any:
        """The handler of one call (``grpc.GenericRpcHandler``)."""
        method = handler_call_details.method
        prefix = f"/{SERVICE}/"
        if not method.startswith(prefix):
            return None
        name = method[len(prefix):]
        if self.token is not None:
            headers = dict(handler_call_details.invocation_metadata or ())
            refused = connect_authentication_failure(self.token, headers.get("authorization"))
            if refused is not None:
                return _refusing_handler(name, refused)
        if name == "ExecutePlan":
            return grpc.unary_stream_rpc_method_handler(self._execute_plan)
        if name == "ReattachExecute":
            return grpc.unary_stream_rpc_method_handler(self._reattach_execute)
        if name == "ReleaseExecute":
            return grpc.unary_unary_rpc_method_handler(self._release_execute)
        if name == "ReleaseSession":
            return grpc.unary_unary_rpc_method_handler(self._release_session)
        if name == "Interrupt":
            return grpc.unary_unary_rpc_method_handler(self._interrupt)
        if name == "AddArtifacts":
            return grpc.stream_unary_rpc_method_handler(self._forward_stream_unary(method))
        forward = self._forward_unary(method)
        return grpc.unary_unary_rpc_method_handler(forward)

    # -- forwarding -----------------------------------------------------------------------------

    def _forward_unary(self, method: str) -> Callable[[bytes, Any], bytes]:
        call = self._channel.unary_unary(method)

        def forward(request: bytes, context: Any) -> bytes:
            try:
                return call(request, metadata=_metadata(context))
            except grpc.RpcError as e:
                _abort_like(context, e)
                raise  # not reached: abort raises

        return forward

    def _forward_stream_unary(self, method: str) -> Callable[[Iterator[bytes], Any], bytes]:
        call = self._channel.stream_unary(method)

        def forward(requests: Iterator[bytes], context: Any) -> bytes:
            try:
                return call(requests, metadata=_metadata(context))
            except grpc.RpcError as e:
                _abort_like(context, e)
                raise

        return forward

    def _forward_stream(self, method: str, request: bytes, context: Any) -> Iterator[bytes]:
        try:
            yield from self._channel.unary_stream(method)(request, metadata=_metadata(context))
        except grpc.RpcError as e:
            _abort_like(context, e)

    # -- ExecutePlan and its operations ----------------------------------------------------------

    def _execute_plan(self, raw: bytes, context: Any) -> Iterator[bytes]:
        method = f"/{SERVICE}/ExecutePlan"
        request = pb.ExecutePlanRequest.FromString(raw)
        if not request.operation_id:  # an older client: the operations answered here get one
            request.operation_id = str(uuid.uuid4())
        command = request.plan.command
        kind = command.WhichOneof("command_type") if request.plan.HasField("command") else None
        if kind == "write_stream_operation_start":
            streams = self._streams(request)
            write = command.write_stream_operation_start
            try:
                if not reads_a_stream(write.input):
                    if not streams.streams_through_a_view(write.input):
                        yield from self._forward_stream(method, raw, context)  # Spark's own error
                        return
                    raise connect_node_not_supported("a stream read through a temporary view or SQL")
                query = streams.start(write)
            except NotSupportedYetError as e:
                if not _hands_over(streams):
                    _abort(context, e)
                logger.warning("a Connect client's streaming query runs on Spark's engine: %s", e)
                yield from self._forward_stream(method, raw, context)
                return
            except Exception as e:  # noqa: BLE001 - the client gets it as Spark's server sends errors
                _abort(context, e)
            self._track(request, query=query)
            result = pb.ExecutePlanResponse()
            started = result.write_stream_operation_start_result
            started.query_id.id, started.query_id.run_id = query.id, query.runId
            if query.name:
                started.name = query.name
            now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            started.query_started_event_json = started_event_json(query, now)
            yield from self._answer(request, streams, result)
            return
        if kind == "streaming_query_listener_bus_command":
            bus = command.streaming_query_listener_bus_command
            streams = self._streams(request)
            if bus.WhichOneof("command") == "add_listener_bus_listener":
                yield from self._listener_stream(request, raw, streams, context)
                return
            # removing the last listener ends Spark's stream (forwarded) and the endpoint's
            streams.relay.close_all()
        if kind == "streaming_query_command":
            streams = self._streams(request)
            instance = command.streaming_query_command.query_id
            if streams.owns(instance.id, instance.run_id):
                waiting = self._track(request)
                try:
                    answer = streams.query_command(command.streaming_query_command, lambda: context.is_active() and not waiting.cancelled.is_set())
                    if waiting.cancelled.is_set():
                        raise operation_canceled_error()
                except Exception as e:  # noqa: BLE001
                    _abort(context, e)
                finally:
                    self._untrack(request.operation_id)
                result = pb.ExecutePlanResponse()
                result.streaming_query_command_result.CopyFrom(answer)
                yield from self._answer(request, streams, result)
                return
        if kind == "streaming_query_manager_command":
            streams = self._streams(request)
            manager = command.streaming_query_manager_command
            if manager.WhichOneof("command") == "await_any_termination" and streams.queries():
                result = pb.ExecutePlanResponse()
                wait = manager.await_any_termination
                waiting = self._track(request)
                try:
                    # in slices: a client that went away, or an interrupt, frees the thread
                    deadline = time.monotonic() + wait.timeout_ms / 1000.0 if wait.HasField("timeout_ms") else None
                    done = False
                    while not done and context.is_active() and not waiting.cancelled.is_set():
                        left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                        if left <= 0:
                            break
                        done = bool(streams.streaming.streams.awaitAnyTermination(left))
                    if waiting.cancelled.is_set():
                        raise operation_canceled_error()
                except Exception as e:  # noqa: BLE001
                    _abort(context, e)
                finally:
                    self._untrack(request.operation_id)
                result.streaming_query_manager_command_result.await_any_termination.terminated = done
                yield from self._answer(request, streams, result)
                return
            if manager.WhichOneof("command") == "get_query" and streams.owns(manager.get_query):
                result = pb.ExecutePlanResponse()
                result.streaming_query_manager_command_result.CopyFrom(streams.manager_command(manager, None))
                yield from self._answer(request, streams, result)
                return
            for out in self._forward_stream(method, raw, context):
                response = pb.ExecutePlanResponse.FromString(out)
                if response.HasField("streaming_query_manager_command_result"):
                    merged = streams.manager_command(manager, response.streaming_query_manager_command_result)
                    if merged is not None:
                        response.streaming_query_manager_command_result.CopyFrom(merged)
                        out = response.SerializeToString()
                yield out
            return
        yield from self._forward_stream(method, raw, context)

    def _answer(self, request: pb.ExecutePlanRequest, streams: ClientStreams, result: pb.ExecutePlanResponse) -> Iterator[bytes]:
        """``result`` and the end of the operation, as the responses of ``request``'s operation."""
        done = pb.ExecutePlanResponse()
        done.result_complete.SetInParent()
        yield from self._stream_part(request, streams, [result, done])

    def _listener_stream(self, request: pb.ExecutePlanRequest, raw: bytes, streams: ClientStreams, context: Any) -> Iterator[bytes]:
        """The session's listener stream, owned end to end here: Spark's events (from the same
        command sent on to Spark's server, on an operation of its own) and statestream's, then
        the end of the operation once the client removes its last listener."""
        events = streams.relay.subscribe()
        upstream = pb.ExecutePlanRequest()
        upstream.CopyFrom(request)
        upstream.operation_id = str(uuid.uuid4())
        del upstream.request_options[:]  # not reattachable: this stream is read to its end here
        call = self._channel.unary_stream(f"/{SERVICE}/ExecutePlan")(upstream.SerializeToString(), metadata=_metadata(context))
        added = threading.Event()

        def relay_spark() -> None:
            try:
                for out in call:
                    response = pb.ExecutePlanResponse.FromString(out)
                    if not response.HasField("streaming_query_listener_events_result"):
                        continue
                    result = response.streaming_query_listener_events_result
                    if result.HasField("listener_bus_listener_added"):
                        added.set()
                    for event in result.events:
                        events.put(event)
            except grpc.RpcError:
                logger.debug("Spark's listener stream ended", exc_info=True)
            finally:
                added.set()

        threading.Thread(target=relay_spark, name="statestream-connect-listener", daemon=True).start()
        try:
            added.wait(60)
            first = pb.ExecutePlanResponse()
            first.streaming_query_listener_events_result.listener_bus_listener_added = True
            yield from self._stream_part(request, streams, [first])
            while context.is_active():
                try:
                    event = events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    break
                response = pb.ExecutePlanResponse()
                response.streaming_query_listener_events_result.events.append(event)
                yield from self._stream_part(request, streams, [response])
            done = pb.ExecutePlanResponse()
            done.result_complete.SetInParent()
            yield from self._stream_part(request, streams, [done])
        finally:
            streams.relay.unsubscribe(events)
            call.cancel()

    def _stream_part(self, request: pb.ExecutePlanRequest, streams: ClientStreams, responses: list[pb.ExecutePlanResponse]) -> Iterator[bytes]:
        """More responses of an operation answered here, kept until the client releases them
        when it may reattach."""
        operation = request.operation_id
        server_session = streams.client.server_side_session_id
        for response in responses:
            response.session_id = request.session_id
            response.server_side_session_id = server_session
            response.operation_id = operation
            response.response_id = str(uuid.uuid4())
        if _reattachable(request):
            with self._lock:
                kept = self._operations.setdefault(operation, (request.session_id, server_session, []))
                kept[2].extend(responses)
        for response in responses:
            yield response.SerializeToString()

    def _reattach_execute(self, raw: bytes, context: Any) -> Iterator[bytes]:
        request = pb.ReattachExecuteRequest.FromString(raw)
        with self._lock:
            kept = self._operations.get(request.operation_id)
        if kept is None:
            yield from self._forward_stream(f"/{SERVICE}/ReattachExecute", raw, context)
            return
        with self._lock:  # a release_until may cut the list meanwhile
            responses = list(kept[2])
        ids = [r.response_id for r in responses]
        start = ids.index(request.last_response_id) + 1 if request.last_response_id in ids else 0
        for response in responses[start:]:
            yield response.SerializeToString()

    def _release_execute(self, raw: bytes, context: Any) -> bytes:
        request = pb.ReleaseExecuteRequest.FromString(raw)
        with self._lock:
            kept = self._operations.get(request.operation_id)
            if kept is not None and request.HasField("release_all"):
                del self._operations[request.operation_id]
            elif kept is not None and request.HasField("release_until"):
                ids = [r.response_id for r in kept[2]]
                until = request.release_until.response_id
                if until in ids:
                    del kept[2][: ids.index(until) + 1]
        if kept is None:
            return self._forward_unary(f"/{SERVICE}/ReleaseExecute")(raw, context)
        return pb.ReleaseExecuteResponse(
            session_id=kept[0], server_side_session_id=kept[1], operation_id=request.operation_id
        ).SerializeToString()

    # -- interrupts ---------------------------------------------------------------------------

    def _track(self, request: pb.ExecutePlanRequest, query: Any = None) -> _Operation:
        """Record an operation answered here that interrupts reach (see :class:`_Operation`)."""
        operation = _Operation((request.user_context.user_id, request.session_id), frozenset(request.tags), query)
        with self._lock:
            # a start whose query has ended is out of an interrupt's reach
            for op_id in [o for o, op in self._interruptible.items() if op.query is not None and not op.query.isActive]:
                del self._interruptible[op_id]
            self._interruptible[request.operation_id] = operation
        return operation

    def _interrupt(self, raw: bytes, context: Any) -> bytes:
        """Spark's server interrupts its operations; the matching ones answered here are
        interrupted too, waits first (so a wait on a query the interrupt stops ends cancelled,
        as on Spark's server), and their ids join Spark's answer. As on Spark's server, only
        ``interruptAll`` and ``interruptTag`` stop queries: ``interruptOperation`` reaches a
        running operation (a wait) only."""
        request = pb.InterruptRequest.FromString(raw)
        response = pb.InterruptResponse.FromString(self._forward_unary(f"/{SERVICE}/Interrupt")(raw, context))
        kind = request.interrupt_type
        with self._lock:
            matching = {op_id: op for op_id, op in self._interruptible.items() if interrupt_reaches(request, op_id, op.session, op.tags)}
        interrupted = []
        for op_id, op in matching.items():
            if op.query is None and not op.cancelled.is_set():
                op.cancelled.set()
                interrupted.append(op_id)
        stops = kind != pb.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID
        for op_id, op in matching.items():
            if stops and op.query is not None and op.query.isActive:
                try:
                    op.query.stop()
                except Exception:  # the other queries are stopped whatever one stop raised
                    logger.warning("query %s did not stop cleanly on an interrupt", op.query.id, exc_info=True)
                interrupted.append(op_id)
                self._untrack(op_id)
        response.interrupted_ids.extend(i for i in interrupted if i not in response.interrupted_ids)
        return response.SerializeToString()

    def _untrack(self, operation_id: str) -> None:
        with self._lock:
            self._interruptible.pop(operation_id, None)

    def _release_session(self, raw: bytes, context: Any) -> bytes:
        """A released session's statestream queries stop, as Spark stops a released session's
        queries; the release goes on to Spark's server."""
        request = pb.ReleaseSessionRequest.FromString(raw)
        with self._lock:
            streams = self._clients.pop((request.user_context.user_id, request.session_id), None)
            for operation in [o for o, kept in self._operations.items() if kept[0] == request.session_id]:
                del self._operations[operation]
            for operation in [o for o, op in self._interruptible.items() if op.session[1] == request.session_id]:
                del self._interruptible[operation]
        if streams is not None:
            streams.relay.close_all()
            for query in streams.queries():
                try:
                    query.stop()
                except Exception:  # the release goes on to Spark whatever a stop raised
                    logger.warning("query %s of a released Connect session did not stop cleanly", query.id, exc_info=True)
        return self._forward_unary(f"/{SERVICE}/ReleaseSession")(raw, context)

    def _streams(self, request: pb.ExecutePlanRequest) -> ClientStreams:
        key = (request.user_context.user_id, request.session_id)
        with self._lock:
            streams = self._clients.get(key)
            if streams is None:
                streams = self._clients[key] = ClientStreams(ClientSession(self.spark, *key), self.url, self.token)
            return streams


def _reattachable(request: pb.ExecutePlanRequest) -> bool:
    """Whether the client may reattach to the operation (its responses are then kept until it
    releases them)."""
    return any(o.HasField("reattach_options") and o.reattach_options.reattachable for o in request.request_options)


def interrupt_reaches(request: pb.InterruptRequest, operation_id: str, session: tuple[str, str], tags: frozenset[str]) -> bool:
    """Whether ``request`` reaches the operation ``operation_id`` of ``session`` (user id, session
    id) started with ``tags``: every operation of the session (``interruptAll``), those started
    with the tag (``interruptTag``), or that one (``interruptOperation``).

    Examples
    --------
    >>> request = pb.InterruptRequest(session_id="s", interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_TAG, operation_tag="t1")
    >>> interrupt_reaches(request, "op", ("", "s"), frozenset({"t1"})), interrupt_reaches(request, "op", ("", "s"), frozenset())
    (True, False)
    """
    if session != (request.user_context.user_id, request.session_id):
        return False
    kind = request.interrupt_type
    if kind == pb.InterruptRequest.INTERRUPT_TYPE_ALL:
        return True
    if kind == pb.InterruptRequest.INTERRUPT_TYPE_TAG:
        return request.operation_tag in tags
    return kind == pb.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID and request.operation_id == operation_id


def _refusing_handler(name: str, description: str) -> Any:
    """A handler that ends the call ``name`` with ``UNAUTHENTICATED`` and ``description``, read
    as the method's kind of call (one request or a stream of them)."""

    def refuse(_request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, description)

    if name in ("ExecutePlan", "ReattachExecute"):
        return grpc.unary_stream_rpc_method_handler(refuse)
    if name == "AddArtifacts":
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def _hands_over(streams: ClientStreams) -> bool:
    return str(streams.client.session.conf.get(HANDOVER_CONF, "true")).strip().lower() != "false"


def _metadata(context: Any) -> list[tuple[str, Any]]:
    """The client's call metadata to pass on (its auth token, its user agent...), without what
    gRPC sets for each call itself."""
    return [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":") and k not in ("user-agent", "grpc-accept-encoding")]


def _abort_like(context: Any, error: grpc.RpcError) -> None:
    """End the call with the error Spark's server sent (its code, text and details)."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    if trailing:
        context.set_trailing_metadata(trailing)
    context.abort(error.code(), error.details() if hasattr(error, "details") else str(error))


def _abort(context: Any, exc: BaseException) -> None:
    logger.debug("a Connect client's streaming command failed", exc_info=exc)
    context.abort_with_status(error_status(exc))
