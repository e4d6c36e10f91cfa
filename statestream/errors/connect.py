"""What the Spark Connect endpoint (``statestream connect-server``) refuses in a client's
streaming query: the plan nodes and commands it does not rebuild on statestream yet. Each is a
``NotSupportedYetError``, so the endpoint hands the query to Spark's own engine unless the
client's session sets ``spark.statestream.handOverToSpark`` to ``false``."""

from __future__ import annotations

from statestream.errors.base import NotSupportedYetError

__all__ = ["connect_node_not_supported"]


def connect_node_not_supported(node: str) -> NotSupportedYetError:
    """The refusal of a Connect plan node (``node``: its field name in ``spark.connect.Relation``,
    or a part of one) that statestream does not rebuild yet.

    Examples
    --------
    >>> str(connect_node_not_supported("sort")).split(";")[0]
    "the Spark Connect plan node 'sort' of this streaming query is not rebuilt on statestream yet"
    """
    return NotSupportedYetError(
        f"the Spark Connect plan node {node!r} of this streaming query is not rebuilt on statestream yet; "
        "the endpoint runs such a query on Spark's own engine unless spark.statestream.handOverToSpark is false"
    )
