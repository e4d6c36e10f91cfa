"""Reading Spark Connect's plan messages: whether a plan reads a stream, and expressions with
their column references by name."""

from __future__ import annotations

from typing import Any

import pyspark.sql.connect.proto as pb

__all__ = ["bound_names", "reads_a_stream", "without_plan_ids"]


def reads_a_stream(message: Any) -> bool:
    """Whether a Connect plan message (a ``Relation`` or any part of one) holds a streaming read.

    Examples
    --------
    >>> import pyspark.sql.connect.proto as pb
    >>> rel = pb.Relation(read=pb.Read(data_source=pb.Read.DataSource(format="rate"), is_streaming=True))
    >>> reads_a_stream(rel), reads_a_stream(pb.Relation(range=pb.Range(end=3)))
    (True, False)
    """
    if isinstance(message, pb.Read) and message.is_streaming:
        return True
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        if any(reads_a_stream(v) for v in _values(value)):
            return True
    return False


#: the expression forms that name a column of one DataFrame by its plan id (``df["x"]``)
_BOUND = (pb.Expression.UnresolvedAttribute, pb.Expression.UnresolvedStar, pb.Expression.UnresolvedRegex)


def without_plan_ids(expression: pb.Expression) -> pb.Expression:
    """A copy of ``expression`` whose column references (``unresolved_attribute``,
    ``unresolved_star``, ``unresolved_regex``) name no DataFrame plan id: read by name.

    Examples
    --------
    >>> import pyspark.sql.connect.proto as pb
    >>> e = pb.Expression(unresolved_attribute=pb.Expression.UnresolvedAttribute(unparsed_identifier="x", plan_id=7))
    >>> without_plan_ids(e).unresolved_attribute.HasField("plan_id")
    False
    """
    copy = pb.Expression()
    copy.CopyFrom(expression)
    _clear_plan_ids(copy)
    return copy


def bound_names(message: Any) -> set[str]:
    """The names (lower case) of the column references in ``message`` bound to a DataFrame by its
    plan id (``df["k"]``).

    Examples
    --------
    >>> import pyspark.sql.connect.proto as pb
    >>> a = pb.Expression(unresolved_attribute=pb.Expression.UnresolvedAttribute(unparsed_identifier="K", plan_id=7))
    >>> bound_names(pb.Expression(alias=pb.Expression.Alias(expr=a, name=["x"])))
    {'k'}
    """
    found = set()
    if isinstance(message, pb.Expression.UnresolvedAttribute) and message.HasField("plan_id"):
        found.add(message.unparsed_identifier.lower())
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        for v in _values(value):
            found |= bound_names(v)
    return found


def _clear_plan_ids(message: Any) -> None:
    if isinstance(message, _BOUND) and message.HasField("plan_id"):
        message.ClearField("plan_id")
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        for v in _values(value):
            _clear_plan_ids(v)


def _values(value: Any) -> list[Any]:
    """The messages of a message field's value: itself, or each of a repeated field's."""
    return [value] if hasattr(value, "ListFields") else list(value)
