"""The Connect endpoint's pure parts: reading plan messages, function names, the error a client
gets, the refusal's text and the command line (no Spark)."""

from __future__ import annotations

import json

import pytest

import pyspark.sql.connect.proto as pb
from google.rpc import error_details_pb2, status_pb2
from pyspark.errors import AnalysisException

from statestream.commands.cli import build_parser
from statestream.connect.expressions import _identifier
from statestream.connect.messages import reads_a_stream, without_plan_ids
from statestream.connect.service import error_status, interrupt_reaches
from statestream.errors import NotSupportedYetError, connect_authentication_failure, connect_node_not_supported


def _attribute(name: str, plan_id: int | None = None) -> pb.Expression:
    attribute = pb.Expression.UnresolvedAttribute(unparsed_identifier=name)
    if plan_id is not None:
        attribute.plan_id = plan_id
    return pb.Expression(unresolved_attribute=attribute)


def _stream(fmt: str = "rate") -> pb.Relation:
    return pb.Relation(read=pb.Read(data_source=pb.Read.DataSource(format=fmt), is_streaming=True))


def test_a_streaming_read_anywhere_makes_a_streaming_plan():
    static = pb.Relation(range=pb.Range(end=3))
    join = pb.Relation(join=pb.Join(left=static, right=pb.Relation(filter=pb.Filter(input=_stream(), condition=_attribute("x")))))
    assert reads_a_stream(join)
    assert not reads_a_stream(pb.Relation(join=pb.Join(left=static, right=static)))
    # a batch read of the same source is not a stream
    batch = pb.Relation(read=pb.Read(data_source=pb.Read.DataSource(format="json")))
    assert not reads_a_stream(batch)
    union = pb.Relation(set_op=pb.SetOperation(left_input=static, right_input=_stream()))
    assert reads_a_stream(union)


def test_plan_ids_are_dropped_at_every_depth_and_the_original_is_kept():
    call = pb.Expression.UnresolvedFunction(function_name="==", arguments=[_attribute("a", 1), _attribute("b", 2)])
    star = pb.Expression(unresolved_star=pb.Expression.UnresolvedStar(plan_id=3))
    e = pb.Expression(alias=pb.Expression.Alias(expr=pb.Expression(unresolved_function=call), name=["eq"]))
    cleared = without_plan_ids(e)
    args = cleared.alias.expr.unresolved_function.arguments
    assert [a.unresolved_attribute.unparsed_identifier for a in args] == ["a", "b"]
    assert not any(a.unresolved_attribute.HasField("plan_id") for a in args)
    assert not without_plan_ids(star).unresolved_star.HasField("plan_id")
    assert e.alias.expr.unresolved_function.arguments[0].unresolved_attribute.plan_id == 1


def test_operator_names_are_quoted_for_call_function():
    assert _identifier("count") == "count"
    assert _identifier("%") == "`%`"
    assert _identifier("==") == "`==`"
    assert _identifier("a`b") == "`a``b`"


def _info(status) -> error_details_pb2.ErrorInfo:
    """The ``ErrorInfo`` a client reads from the status' details."""
    detail = [m for k, m in status.trailing_metadata if k == "grpc-status-details-bin"][0]
    proto = status_pb2.Status.FromString(detail)
    info = error_details_pb2.ErrorInfo()
    proto.details[0].Unpack(info)
    return info


def test_a_spark_error_reaches_the_client_with_its_class_and_condition():
    class FromTheJvm(AnalysisException):  # what a captured JVM error answers
        def getCondition(self):
            return "UNRESOLVED_COLUMN.WITH_SUGGESTION"

        def getMessageParameters(self):
            return {"objectName": "`x`", "proposal": "`y`"}

        def getSqlState(self):
            return "42703"

    exc = FromTheJvm("[UNRESOLVED_COLUMN.WITH_SUGGESTION] ...")
    info = _info(error_status(exc))
    assert json.loads(info.metadata["classes"]) == ["org.apache.spark.sql.AnalysisException"]
    assert info.metadata["errorClass"] == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    assert json.loads(info.metadata["messageParameters"]) == {"objectName": "`x`", "proposal": "`y`"}
    assert info.metadata["sqlState"] == "42703"


def test_python_errors_and_refusals_map_to_the_jvm_classes_a_client_knows():
    assert json.loads(_info(error_status(ValueError("bad"))).metadata["classes"]) == ["java.lang.IllegalArgumentException"]
    refusal = connect_node_not_supported("sort")
    assert isinstance(refusal, NotSupportedYetError)
    info = _info(error_status(refusal))
    assert json.loads(info.metadata["classes"]) == ["java.lang.UnsupportedOperationException"]
    assert "'sort'" in error_status(refusal).details
    assert "spark.statestream.handOverToSpark" in str(refusal)
    other = error_status(KeyError("k"))
    assert json.loads(_info(other).metadata["classes"]) == ["org.apache.spark.SparkException"]
    assert other.details.startswith("KeyError: ")


def test_connect_server_command_line():
    args = build_parser().parse_args(["connect-server", "--port", "0", "--conf", "spark.sql.shuffle.partitions=3"])
    assert (args.host, args.port, args.master, args.conf) == ("127.0.0.1", 0, "local[*]", ["spark.sql.shuffle.partitions=3"])


@pytest.mark.parametrize(
    ("header", "refusal"),
    [(None, "No authentication token provided"), ("Bearer other", "Invalid authentication token"), ("s3cret", "Invalid authentication token"), ("Bearer s3cret", None)],
)
def test_a_call_carries_the_token_as_sparks_server_asks(header, refusal):
    assert connect_authentication_failure("s3cret", header) == refusal


def _interrupt(kind: str, **fields: str) -> pb.InterruptRequest:
    request = pb.InterruptRequest(session_id="s1", interrupt_type=getattr(pb.InterruptRequest, f"INTERRUPT_TYPE_{kind}"), **fields)
    request.user_context.user_id = "u"
    return request


@pytest.mark.parametrize(
    ("request_", "reached"),
    [
        (_interrupt("ALL"), {"a", "b", "c"}),
        (_interrupt("TAG", operation_tag="t1"), {"a"}),
        (_interrupt("TAG", operation_tag="none"), set()),
        (_interrupt("OPERATION_ID", operation_id="b"), {"b"}),
    ],
    ids=["all", "tag", "unknown_tag", "operation"],
)
def test_an_interrupt_reaches_the_operations_of_its_session(request_, reached):
    operations = {"a": (("u", "s1"), frozenset({"t1"})), "b": (("u", "s1"), frozenset()), "c": (("u", "s1"), frozenset({"t2"})), "d": (("u", "s2"), frozenset({"t1"}))}
    assert {op for op, (session, tags) in operations.items() if interrupt_reaches(request_, op, session, tags)} == reached
