"""Column objects bound to the DataFrame they were taken from (``df.col`` / ``df["col"]``).

Why this module exists: in Spark, ``words.timestamp`` is not a name but the *attribute* of
``words``'s plan. Written after ``words.withWatermark("timestamp", ...)``, as Spark's programming
guide does (``groupBy(window(words.timestamp, ...))``), it still refers to the attribute *below*
the watermark, which carries no ``spark.watermarkDelayMs`` metadata (Spark's ``EventTimeWatermark``
keeps the attribute's id and only changes the metadata in its own output). Spark's analyser keeps
the already-resolved reference as it is, so the window key inherits no event-time marker: append
mode is refused and update mode neither drops late rows nor evicts state (verified on Spark 4.1).

statestream decides everything about the event-time key from its templates (``plan/logical.py``),
so the templates must see the same binding:

* ``withWatermark``'s template keeps the attribute ids of its input and changes only the
  metadata (:func:`mark_event_time_keeping_ids`), as Spark's node does; a reference to the
  attribute below the watermark then still resolves above it, without the metadata;
* the column a statestream DataFrame hands out stays a *name* (``col("timestamp")``), because each
  micro-batch replays the user's columns on a fresh DataFrame whose attributes have other ids; the
  DataFrame it came from is remembered here, keyed by the identity of the JVM ``Origin`` object of
  that name reference, which Spark's column-to-expression conversion hands on to the expression it
  makes (a fresh object per call, holding the call's stack trace);
* when an aggregation's template is built, :func:`bind_for_template` swaps each remembered name
  taken from *another* DataFrame for that DataFrame's own attribute, and Spark's analyser decides
  the rest (the metadata the key inherits, or its own error if the attribute is not there).

The pure rules (:func:`event_time_metadata`, :class:`BindingRegistry`) need no JVM; the functions
that touch Spark plans go through py4j and fall back to today's name-based template on any py4j
failure, never on Spark's own analysis errors.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Hashable, Mapping, Sequence, TypeVar

from statestream._jvm.calls import java_column, java_dataframe, java_session, jvm_seq, jvm_view
from statestream.plan.aggregates import column_node
from statestream.plan.logical import WATERMARK_DELAY_KEY
from statestream.plan.optimizer import rebuild_expression

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from statestream.plan.logical import LogicalPlan

logger = logging.getLogger(__name__)

__all__ = [
    "event_time_metadata",
    "Binding",
    "BindingRegistry",
    "remember_binding",
    "bind_for_template",
    "mark_event_time_keeping_ids",
    "SideReference",
    "JoinCondition",
    "replace_at_paths",
    "ambiguous_references",
    "bind_positions",
]

P = TypeVar("P")


def event_time_metadata(
    metadata: Sequence[Mapping[str, Any]], event_time: int, delay_ms: int
) -> dict[int, dict[str, Any]]:
    """The metadata ``withWatermark`` gives its output columns, as ``{position: new metadata}``
    for the positions whose metadata changes.

    Why: Spark's ``EventTimeWatermark`` puts the delay on the event-time column and removes the
    key from every other column (one event-time column per relation); the other metadata keys
    (``spark.timeWindow``...) stay as they are.
    """
    changes: dict[int, dict[str, Any]] = {}
    for i, md in enumerate(metadata):
        if i == event_time:
            new = dict(md)
            new[WATERMARK_DELAY_KEY] = int(delay_ms)
        elif WATERMARK_DELAY_KEY in md:
            new = {k: v for k, v in md.items() if k != WATERMARK_DELAY_KEY}
        else:
            continue
        if new != dict(md):
            changes[i] = new
    return changes


@dataclass(frozen=True)
class Binding(Generic[P]):
    """A name reference handed out by ``plan``'s DataFrame for its column ``name``."""

    plan: P
    name: str


class BindingRegistry(Generic[P]):
    """Remembers which DataFrame each handed-out name reference came from.

    Keys are identities of JVM objects (``System.identityHashCode`` of the reference's ``Origin``),
    confirmed with ``same`` (the JVM ``equals``) because identity hashes may collide; the registry
    keeps the object itself, so its identity cannot be reused while the entry lives. Only the
    ``capacity`` most recent references are kept: an older one falls back to resolution by name,
    which is what statestream did before bindings were kept.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[Hashable, list[tuple[Any, Binding[P]]]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def remember(self, key: Hashable, token: Any, binding: Binding[P]) -> None:
        self._entries.setdefault(key, []).append((token, binding))
        self._entries.move_to_end(key)
        self._size += 1
        while self._size > self._capacity and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self._size -= len(dropped)

    def lookup(self, key: Hashable, token: Any, same: Callable[[Any, Any], bool]) -> Binding[P] | None:
        for stored, binding in self._entries.get(key, ()):
            if same(stored, token):
                return binding
        return None

    def foreign(self, plan: P) -> bool:
        """Whether some remembered reference came from a DataFrame other than ``plan`` (only those
        can resolve differently from a name)."""
        return any(b.plan is not plan for entries in self._entries.values() for _, b in entries)


_REGISTRY: BindingRegistry["LogicalPlan"] = BindingRegistry()


def _jclass(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def remember_binding(column: "Column", plan: "LogicalPlan", name: str) -> "Column":
    """Remember that ``column`` (a name reference just made for ``plan``'s DataFrame) is
    ``plan``'s column ``name``; returns ``column``. References whose origin is not unique to them
    (no captured stack trace) are not remembered: they resolve by name."""
    try:
        node = column_node(column)  # the JVM column node holds the origin
        if _jclass(node) != "UnresolvedAttribute":
            return column
        origin = node.origin()
        if not origin.stackTrace().isDefined():
            return column
        jvm = jvm_view(plan.template.sparkSession)
        _REGISTRY.remember(int(jvm.System.identityHashCode(origin)), origin, Binding(plan, name))
    except Exception:  # py4j / internal API drift: the column resolves by name
        logger.debug("cannot remember the binding of column %r", name, exc_info=True)
    return column


def bind_for_template(column: "Column", grouped: "LogicalPlan") -> "Column":
    """``column`` as Spark would have it when the user applies it to ``grouped``'s DataFrame: each
    name reference handed out by *another* statestream DataFrame becomes that DataFrame's own
    attribute (so Spark's analyser sees, e.g., the timestamp below a watermark, without its
    metadata). ``column`` itself when it holds no such reference, or when the JVM objects cannot
    be read (then the template resolves it by name, as before).

    Only for templates: a batch DataFrame never holds the template's attributes, so the replay
    keeps the user's name references.
    """
    if not len(_REGISTRY) or not _REGISTRY.foreign(grouped):
        return column
    try:
        from pyspark.sql import Column

        session = grouped.template.sparkSession
        jvm = jvm_view(session)
        jss = java_session(session)
        conv = jvm.scala.jdk.javaapi.CollectionConverters
        expr = jss.expression(java_column(column))

        def attribute(e: Any) -> Any | None:
            if _jclass(e) != "UnresolvedAttribute":
                return None
            origin = e.origin()
            binding = _REGISTRY.lookup(int(jvm.System.identityHashCode(origin)), origin, lambda a, b: bool(a.equals(b)))
            if binding is None or binding.plan is grouped:
                return None
            if [str(p) for p in jvm_seq(e.nameParts())] != [binding.name]:
                return None
            bound = jss.expression(java_column(binding.plan.template[binding.name]))
            return bound if _jclass(bound) == "AttributeReference" else None

        new = rebuild_expression(expr, attribute, lambda items: conv.asScala(jvm.java.util.ArrayList(items)).toSeq())
        if new is expr:
            return column
        node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(new)
        return Column(jvm.org.apache.spark.sql.Column(node))
    except Exception:  # py4j / internal API drift: resolve by name as before
        logger.debug("cannot bind a grouping column to its DataFrame", exc_info=True)
        return column


def mark_event_time_keeping_ids(template: "DataFrame", column: str, delay_ms: int) -> "DataFrame | None":
    """``template`` with ``column`` marked as the event time the way Spark's ``EventTimeWatermark``
    marks it: same attributes (same ids), only their metadata changed (:func:`event_time_metadata`).

    Why: a column object taken from the DataFrame below the watermark must still resolve above
    it, to the attribute *without* the marker, as in Spark; ``withMetadata`` would make a new
    attribute (a new id) instead. ``None`` when the plan cannot be built through py4j (the caller
    then marks the column with ``withMetadata``).
    """
    try:
        from pyspark.sql import DataFrame

        session = template.sparkSession
        jvm = jvm_view(session)
        jss = java_session(session)
        plan = java_dataframe(template).queryExecution().analyzed()
        target = jss.expression(java_column(template[column]))
        if _jclass(target) != "AttributeReference":
            return None
        output = jvm_seq(plan.output())
        ids = [int(a.exprId().id()) for a in output]
        event_time = int(target.exprId().id())
        if ids.count(event_time) != 1:
            return None
        changes = event_time_metadata(
            [json.loads(a.metadata().json()) for a in output], ids.index(event_time), delay_ms
        )
        metadata = jvm.org.apache.spark.sql.types.Metadata
        items = [a.withMetadata(metadata.fromJson(json.dumps(changes[i]))) if i in changes else a for i, a in enumerate(output)]
        seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList(items)).toSeq()
        project = jvm.org.apache.spark.sql.catalyst.plans.logical.Project(seq, plan)
        return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(jss, project), session)
    except Exception:  # py4j / internal API drift: the caller uses withMetadata
        logger.debug("cannot mark %r keeping attribute ids", column, exc_info=True)
        return None


@dataclass(frozen=True)
class SideReference:
    """A name reference inside a join condition, handed out by a statestream DataFrame: where it
    sits in the condition's expression tree (child indexes from the root), the column ``name``,
    the DataFrame's plan and the join side that plan belongs to (0 left, 1 right, ``None``: on
    neither side, so it stays a name)."""

    path: tuple[int, ...]
    name: str
    plan: Any
    side: int | None


class JoinCondition:
    """A join condition written with columns of statestream DataFrames (``s.k == t.k``).

    Why: such a column is a *name* (``plan/bindings.py``), and in a join both sides often have a
    column of that name, where Spark would have bound the user's column to the attribute of the
    DataFrame it came from. The condition is converted once to Spark's expression tree, the
    positions of the remembered references are recorded with their side, and each use rebuilds
    it: the template join binds them to their DataFrames' template attributes (Spark's analyser
    then decides, as it would for the user's own columns), each micro-batch binds them to that
    batch's DataFrame of the side they came from. A condition whose references cannot be read
    (py4j drift) is used as written (names).
    """

    def __init__(self, column: "Column", left: "LogicalPlan", right: "LogicalPlan") -> None:
        self.column = column
        self._expr: Any = None
        self.references: tuple[SideReference, ...] = ()
        try:
            self._expr, self.references = _side_references(column, left, right)
        except Exception:  # py4j / internal API drift: the condition resolves by names
            logger.debug("cannot read the references of a join condition", exc_info=True)

    def for_template(self) -> "Column":
        """The condition with each remembered reference bound to its DataFrame's template
        attribute (for the join's template)."""
        if not self.references:
            return self.column
        return self._rebuilt(lambda ref, jss: jss.expression(java_column(ref.plan.template[ref.name])))

    def for_batch(self, left: "DataFrame", right: "DataFrame") -> "Column":
        """The condition bound to one micro-batch's DataFrames of both sides (references from
        neither side stay names)."""
        if not any(r.side is not None for r in self.references):
            return self.column
        sides = (left, right)

        def bound(ref: SideReference, jss: Any) -> Any:
            if ref.side is None:
                return None
            return jss.expression(java_column(sides[ref.side][ref.name]))

        return self._rebuilt(bound, session=left.sparkSession)

    def _rebuilt(self, replacement: Callable[[SideReference, Any], Any], session: Any = None) -> "Column":
        from pyspark.sql import Column

        try:
            session = session or self.column_session()
            jvm = jvm_view(session)
            jss = java_session(session)
            conv = jvm.scala.jdk.javaapi.CollectionConverters
            new_at = {}
            for ref in self.references:
                new = replacement(ref, jss)
                if new is not None:
                    new_at[ref.path] = new
            if not new_at:
                return self.column
            rebuilt = replace_at_paths(self._expr, new_at, lambda items: conv.asScala(jvm.java.util.ArrayList(items)).toSeq())
            node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(rebuilt)
            return Column(jvm.org.apache.spark.sql.Column(node))
        except Exception:  # py4j / internal API drift: use the condition as written
            logger.debug("cannot bind a join condition", exc_info=True)
            return self.column

    def column_session(self) -> Any:
        """The session whose JVM converts the condition (any reference's template session)."""
        return self.references[0].plan.template.sparkSession


def _side_references(column: "Column", left: "LogicalPlan", right: "LogicalPlan") -> tuple[Any, tuple[SideReference, ...]]:
    """The condition's expression tree and its remembered name references (see ``JoinCondition``)."""
    if not len(_REGISTRY):
        return None, ()
    session = left.template.sparkSession
    jvm = jvm_view(session)
    expr = java_session(session).expression(java_column(column))
    left_ids = {id(n) for n in left.walk()}
    right_ids = {id(n) for n in right.walk()}
    found: list[SideReference] = []

    def visit(e: Any, path: tuple[int, ...]) -> None:
        if _jclass(e) == "UnresolvedAttribute":
            origin = e.origin()
            binding = _REGISTRY.lookup(int(jvm.System.identityHashCode(origin)), origin, lambda a, b: bool(a.equals(b)))
            if binding is not None and [str(p) for p in jvm_seq(e.nameParts())] == [binding.name]:
                plan_id = id(binding.plan)
                side = 0 if plan_id in left_ids else 1 if plan_id in right_ids else None
                found.append(SideReference(path, binding.name, binding.plan, side))
            return
        for i, child in enumerate(jvm_seq(e.children())):
            visit(child, (*path, i))

    visit(expr, ())
    return expr, tuple(found)


def replace_at_paths(e: Any, new_at: Mapping[tuple[int, ...], Any], seq: Callable[[list[Any]], Any], path: tuple[int, ...] = ()) -> Any:
    """A JVM expression tree with the nodes at the given paths (child indexes from the root)
    replaced; subtrees holding no such path are kept as they are."""
    if path in new_at:
        return new_at[path]
    if not any(p[: len(path)] == path for p in new_at):
        return e
    kids = jvm_seq(e.children())
    new = [replace_at_paths(k, new_at, seq, (*path, i)) for i, k in enumerate(kids)]
    if all(n is k for n, k in zip(new, kids)):
        return e
    return e.withNewChildren(seq(new))


def ambiguous_references(column: "Column", child: "LogicalPlan") -> tuple[tuple[tuple[int, ...], int], ...]:
    """Where ``column`` holds a remembered name reference whose name ``child``'s output has more
    than once (after a join: ``events.k`` next to ``users.k``): ``(path, position)`` pairs, the
    position being that of the reference's DataFrame attribute in ``child``'s output.

    Why: Spark binds ``events.k`` to ``events``'s attribute, which a join keeps in its output; a
    name would be ambiguous there. The position is the same in the template and in every
    micro-batch's DataFrame of ``child`` (``bind_positions``). Empty when no name repeats, when
    no reference is remembered, or when the plans cannot be read (names are then used)."""
    names = [n.lower() for n in child.schema.names]
    if len(set(names)) == len(names) or not len(_REGISTRY):
        return ()
    try:
        session = child.template.sparkSession
        jvm = jvm_view(session)
        jss = java_session(session)
        output = [int(a.exprId().id()) for a in jvm_seq(java_dataframe(child.template).queryExecution().analyzed().output())]
        found: list[tuple[tuple[int, ...], int]] = []

        def visit(e: Any, path: tuple[int, ...]) -> None:
            if _jclass(e) == "UnresolvedAttribute":
                origin = e.origin()
                binding = _REGISTRY.lookup(int(jvm.System.identityHashCode(origin)), origin, lambda a, b: bool(a.equals(b)))
                parts = [str(p) for p in jvm_seq(e.nameParts())]
                if binding is not None and parts == [binding.name] and names.count(binding.name.lower()) > 1:
                    attribute = jss.expression(java_column(binding.plan.template[binding.name]))
                    if _jclass(attribute) == "AttributeReference" and int(attribute.exprId().id()) in output:
                        found.append((path, output.index(int(attribute.exprId().id()))))
                return
            for i, c in enumerate(jvm_seq(e.children())):
                visit(c, (*path, i))

        visit(jss.expression(java_column(column)), ())
        return tuple(found)
    except Exception:  # py4j / internal API drift: the column resolves by name
        logger.debug("cannot bind a column to its DataFrame's attribute after a join", exc_info=True)
        return ()


def bind_positions(column: "Column", positions: Sequence[tuple[tuple[int, ...], int]], df: "DataFrame") -> "Column":
    """``column`` with the references found by ``ambiguous_references`` replaced by ``df``'s
    output attributes at their positions."""
    if not positions:
        return column
    from pyspark.sql import Column

    session = df.sparkSession
    jvm = jvm_view(session)
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    output = java_dataframe(df).queryExecution().analyzed().output()
    new_at = {path: output.apply(pos) for path, pos in positions}
    expr = java_session(session).expression(java_column(column))
    rebuilt = replace_at_paths(expr, new_at, lambda items: conv.asScala(jvm.java.util.ArrayList(items)).toSeq())
    node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(rebuilt)
    return Column(jvm.org.apache.spark.sql.Column(node))
