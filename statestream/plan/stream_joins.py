"""Joins of two streams: the state watermark rules, and how Spark's ``StreamingSymmetricHashJoinExec``
is planned.

Spark (4.1): a join whose two sides stream is planned as ``StreamingSymmetricHashJoinExec`` with the
equi-join keys and the rest of the condition that ``ExtractEquiJoinKeys`` finds, each side hash
partitioned on its keys into the state partitions. Each side's state may be bounded:

* *key watermark*: a join key carries the event-time marker; both sides drop the keys whose value
  in that position is ``<=`` the operator's eviction watermark;
* *value watermark*: otherwise, for a side that has an event-time column of its own, a conjunct of
  the (non-equi) condition of the form ``a + c1 < b + c2`` (``<``, ``<=``, ``>``, ``>=``) with ``a`` a
  column of that side and ``b`` the event-time column of the other side, solved with ``b`` set to
  the eviction watermark, gives a lower bound below which no row of this side can match again;
  the smallest bound over all conjuncts wins, ``<=``/``>=`` take one millisecond off.

The solver works on a pure description of the condition (``Attr``, ``Lit``, ``Add``, ``Sub``,
``Neg``, ``Opaque`` and ``Comparison``), which ``condition_terms`` reads from Spark's analysed or
optimised expression; so the rules are tested without Spark (``tests/unit/plan/test_stream_join_rules.py``),
and the analysis check (an outer or semi join needs a bound) and the runtime use the same code.
Units follow Spark's solver: timestamps and intervals in microseconds as doubles, a number
literal is read as seconds, the result is truncated to whole milliseconds.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from statestream.errors import stream_join_without_equality_error
from statestream._jvm.calls import clone_session, java_dataframe, jvm_seq, jvm_view
from statestream.operators.stream_join import StreamingSymmetricHashJoinExec, StreamJoinExchangeExec
from statestream.plan.joins import standin_join
from statestream.plan.logical import WATERMARK_DELAY_KEY, AggregationFinality
from statestream.plan.optimizer import rebuild_expression

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator
    from statestream.plan import logical as L

logger = logging.getLogger(__name__)

__all__ = [
    "Attr",
    "Lit",
    "Add",
    "Sub",
    "Neg",
    "Opaque",
    "Comparison",
    "Between",
    "state_value_watermark",
    "one_side_state_watermark",
    "has_valid_watermark_range",
    "join_state_watermark",
    "join_output_watermark",
    "condition_terms",
    "arrow_condition",
    "MATCH_IN_TASKS_CONF",
    "OUTER_EARLY_EMIT_CONF",
    "double_to_long",
    "wrap_long",
    "StreamJoinInfo",
    "stream_join_info",
    "plan_stream_stream_join",
    "STATE_STORE_NAMES",
]

#: Spark's store names of a join (state format 2), in Spark's order.
STATE_STORE_NAMES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")


#: the watermark Spark's analysis check solves conditions with (any value would do)
CHECK_WATERMARK_MS = 1_000_000


# ---------------------------------------------------------------------------------------------
# The pure description of a join condition
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attr:
    """A column of the join's input: ``side`` 0 (left), 1 (right) or ``None`` (neither);
    ``watermarked``: it carries the event-time marker."""

    id: int
    side: int | None
    watermarked: bool = False
    name: str = ""


@dataclass(frozen=True)
class Lit:
    """A literal as Spark's solver reads it, in microseconds; ``None``: a literal the solver
    refuses (an interval with months)."""

    micros: float | None


@dataclass(frozen=True)
class Add:
    left: "Term"
    right: "Term"


@dataclass(frozen=True)
class Sub:
    left: "Term"
    right: "Term"


@dataclass(frozen=True)
class Neg:
    child: "Term"


@dataclass(frozen=True)
class Opaque:
    """Anything else (a function call, a cast to a non-numeric type...): no bound from it."""

    text: str = ""


Term = Union[Attr, Lit, Add, Sub, Neg, Opaque]


@dataclass(frozen=True)
class Comparison:
    """A conjunct ``left op right`` with ``op`` one of ``<``, ``<=``, ``>``, ``>=``."""

    op: str
    left: Term
    right: Term


@dataclass(frozen=True)
class Between:
    """``input BETWEEN lower AND upper`` (an analysed condition may hold it)."""

    input: Term
    lower: Term
    upper: Term


Conjunct = Union[Comparison, Between, Opaque]


def _attrs(t: Term) -> list[Attr]:
    if isinstance(t, Attr):
        return [t]
    if isinstance(t, (Add, Sub)):
        return _attrs(t.left) + _attrs(t.right)
    if isinstance(t, Neg):
        return _attrs(t.child)
    return []


def _collect(t: Term, negate: bool, out: list[tuple[Term, bool]]) -> bool:
    """Flatten ``t`` into signed terms (an attribute or a literal, negated or not); ``False``
    when some part cannot be read (then the conjunct gives no bound)."""
    if isinstance(t, Add):
        return _collect(t.left, negate, out) and _collect(t.right, negate, out)
    if isinstance(t, Sub):
        return _collect(t.left, negate, out) and _collect(t.right, not negate, out)
    if isinstance(t, Neg):
        return _collect(t.child, not negate, out)
    if isinstance(t, Attr):
        out.append((t, negate))
        return True
    if isinstance(t, Lit):
        if t.micros is None:
            return False
        out.append((t, negate))
        return True
    return False


def _less_than_bound(lhs: Term, rhs: Term, find_side: int, watermark_ms: int) -> int | None:
    """The bound ``lhs < rhs`` puts on the column of ``find_side``, with the other side's
    event-time column at ``watermark_ms``; ``None`` if it puts none."""
    attrs = {a.id: a for a in _attrs(lhs) + _attrs(rhs)}
    if sum(1 for a in attrs.values() if a.side == find_side) > 1:
        return None
    if sum(1 for a in attrs.values() if a.side is not None and a.side != find_side) > 1:
        return None
    terms: list[tuple[Term, bool]] = []
    if not _collect(Sub(lhs, rhs), False, terms):
        return None
    unique = list(dict.fromkeys(terms))  # Spark collects the terms into a set
    constraint = [(x, neg) for x, neg in unique if isinstance(x, Attr) and x.side == find_side]
    if len(constraint) != 1 or not constraint[0][1]:
        return None  # no term of this side, or it is not on the greater side of '<'
    rest = [(x, neg) for x, neg in unique if (x, neg) != constraint[0]]
    if not rest:
        return None
    total = 0.0
    for x, neg in rest:
        if isinstance(x, Attr):
            if x.side is None or not x.watermarked:
                return None  # a column whose value is unknown: nothing to solve with
            value = float(watermark_ms) * 1000.0
        else:
            assert isinstance(x, Lit) and x.micros is not None
            value = x.micros
        total += -value if neg else value
    return double_to_long(total / 1000.0)


LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def double_to_long(x: float) -> int:
    """Scala's ``Double.toLong``: truncated towards zero, clamped to the long range, NaN is 0."""
    if math.isnan(x):
        return 0
    if x >= LONG_MAX:
        return LONG_MAX
    if x <= LONG_MIN:
        return LONG_MIN
    return int(x)


def wrap_long(x: int) -> int:
    """``x`` as a JVM long computes it (two's complement, 64 bits): Spark's ``watermark - 1`` and
    ``watermark * 1000`` overflow this way (seen in ``explain()`` before a query starts, where
    the watermark is ``Long.MinValue``)."""
    return (x + 2**63) % 2**64 - 2**63


def state_value_watermark(
    conjuncts: Sequence[Conjunct], find_side: int, watermark_ms: int | None, other_has_watermark: bool = True
) -> int | None:
    """The state value watermark of ``find_side`` (0 left, 1 right): the smallest bound over the
    conjuncts, ``None`` when none bounds that side or there is no watermark yet. The other side
    must have an event-time column (``other_has_watermark``) for a bound to exist."""
    if watermark_ms is None or not conjuncts or not other_has_watermark:
        return None
    found: list[int] = []
    for c in conjuncts:
        v: int | None = None
        if isinstance(c, Comparison):
            if c.op == "<":
                v = _less_than_bound(c.left, c.right, find_side, watermark_ms)
            elif c.op == "<=":
                v = _less_than_bound(c.left, c.right, find_side, watermark_ms)
                v = None if v is None else wrap_long(v - 1)
            elif c.op == ">":
                v = _less_than_bound(c.right, c.left, find_side, watermark_ms)
            elif c.op == ">=":
                v = _less_than_bound(c.right, c.left, find_side, watermark_ms)
                v = None if v is None else wrap_long(v - 1)
        elif isinstance(c, Between):
            v = _less_than_bound(c.lower, c.input, find_side, watermark_ms)
            v = None if v is None else wrap_long(v - 1)
            if v is None:
                v = _less_than_bound(c.input, c.upper, find_side, watermark_ms)
                v = None if v is None else wrap_long(v - 1)
        if v is not None:
            found.append(v)
    return min(found) if found else None


def one_side_state_watermark(
    side: int,
    key_watermark_ordinal: int | None,
    side_has_event_time: bool,
    conjuncts: Sequence[Conjunct],
    eviction_watermark_ms: int | None,
    other_has_event_time: bool = True,
) -> tuple[str, int] | None:
    """How one side's state is bounded for an eviction watermark: ``("key", W)`` (a join key
    carries the event-time marker: rows whose key in that position is ``<= W`` go),
    ``("value", W)`` (rows whose own event-time column is ``<= W`` go), or ``None`` (kept)."""
    if eviction_watermark_ms is None:
        return None
    if key_watermark_ordinal is not None:
        return ("key", eviction_watermark_ms)
    if side_has_event_time:
        w = state_value_watermark(conjuncts, side, eviction_watermark_ms, other_has_event_time)
        return None if w is None else ("value", w)
    return None


def join_state_watermark(info: "StreamJoinInfo", side: int, eviction_ms: int | None) -> tuple[str, int] | None:
    """``one_side_state_watermark`` for a planned join (``StreamJoinInfo``)."""
    et = info.left_event_time if side == 0 else info.right_event_time
    other = info.right_event_time if side == 0 else info.left_event_time
    return one_side_state_watermark(
        side, info.key_watermark_ordinal, et is not None, info.conjuncts, eviction_ms, other is not None
    )


def join_output_watermark(info: "StreamJoinInfo", input_ms: int) -> int:
    """The watermark a join passes on to the operators after it (Spark's
    ``produceOutputWatermark``): the smallest of both state watermarks and its input watermark,
    so the rows it may still emit are never late for them."""
    values = [input_ms]
    for side in (0, 1):
        pred = join_state_watermark(info, side, input_ms)
        if pred is not None:
            values.append(pred[1])
    return min(values)


def has_valid_watermark_range(
    join_type: str, conjuncts: Sequence[Conjunct], left_has_watermark: bool = True, right_has_watermark: bool = True
) -> bool:
    """Spark's analysis check of a stream-stream outer or semi join without an event-time join
    key: a range condition must bound the side whose rows may be emitted unmatched (solved with
    an arbitrary watermark on the other side, which must have an event-time column)."""
    w = CHECK_WATERMARK_MS
    left = state_value_watermark(conjuncts, 0, w, right_has_watermark) is not None
    right = state_value_watermark(conjuncts, 1, w, left_has_watermark) is not None
    if join_type in ("LeftOuter", "LeftSemi"):
        return left
    if join_type == "RightOuter":
        return right
    if join_type == "FullOuter":
        return left or right
    return False


# ---------------------------------------------------------------------------------------------
# Reading Spark's expressions (py4j objects passed in; nothing is imported from PySpark here)
# ---------------------------------------------------------------------------------------------

_NUMERIC_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")
_COMPARISON_OPS = {"LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">", "GreaterThanOrEqual": ">="}


def _jname(e: Any) -> str:
    return str(e.getClass().getSimpleName())


def _type_name(dt: Any) -> str:
    return _jname(dt).rstrip("$")


def _interval_field(v: Any, name: str) -> int:
    """A field of a JVM ``CalendarInterval`` (public final fields, which py4j reads with
    ``get_field``)."""
    from py4j.java_gateway import get_field

    return int(get_field(v, name))


def _literal(e: Any) -> Term:
    t = _type_name(e.dataType())
    v = e.value()
    if v is None:
        return Opaque("null")
    if t == "CalendarIntervalType":
        if _interval_field(v, "months") > 0:
            return Lit(None)
        return Lit(float(_interval_field(v, "days")) * 8.64e10 + float(_interval_field(v, "microseconds")))
    if t == "DayTimeIntervalType":
        return Lit(float(int(v)))
    if t == "DoubleType":
        return Lit(float(v) * 1_000_000.0)
    if t in _NUMERIC_TYPES:
        return Lit(float(str(v)) * 1_000_000.0)
    if t in ("TimestampType", "TimestampNTZType"):
        return Lit(float(int(v)) * 1_000_000.0)
    return Opaque(str(e.toString()))


def _term(e: Any, sides: dict[int, int], watermark_key: str) -> Term:
    kind = _jname(e)
    if kind == "Add":
        return Add(_term(e.left(), sides, watermark_key), _term(e.right(), sides, watermark_key))
    if kind == "Subtract":
        return Sub(_term(e.left(), sides, watermark_key), _term(e.right(), sides, watermark_key))
    if kind in ("TimestampAddInterval", "TimeAdd"):
        return Add(_term(e.start(), sides, watermark_key), _term(e.interval(), sides, watermark_key))
    if kind == "DatetimeSub":
        return Sub(_term(e.left(), sides, watermark_key), _term(e.right(), sides, watermark_key))
    if kind == "UnaryMinus":
        return Neg(_term(e.child(), sides, watermark_key))
    if kind == "CheckOverflow":
        return _term(e.child(), sides, watermark_key)
    if kind == "Cast":
        if _type_name(e.dataType()) in (*_NUMERIC_TYPES, "TimestampType"):
            return _term(e.child(), sides, watermark_key)
        return Opaque(str(e.toString()))
    if kind == "AttributeReference":
        i = int(e.exprId().id())
        return Attr(i, sides.get(i), bool(e.metadata().contains(watermark_key)), str(e.name()))
    if kind == "Literal":
        return _literal(e)
    return Opaque(str(e.toString()))


def condition_terms(condition: Any, left_ids: Sequence[int], right_ids: Sequence[int]) -> tuple[Conjunct, ...]:
    """The conjuncts of a JVM (Catalyst) condition as the solver's pure description; columns are
    placed on a side by their expression ids. ``condition`` may be ``None``."""
    if condition is None:
        return ()
    sides = {i: 0 for i in left_ids}
    sides.update({i: 1 for i in right_ids})
    out: list[Conjunct] = []
    pending = [condition]
    while pending:
        e = pending.pop(0)
        kind = _jname(e)
        if kind == "And":
            pending[0:0] = [e.left(), e.right()]
            continue
        if kind in _COMPARISON_OPS:
            out.append(
                Comparison(_COMPARISON_OPS[kind], _term(e.left(), sides, WATERMARK_DELAY_KEY), _term(e.right(), sides, WATERMARK_DELAY_KEY))
            )
        elif kind == "Between":
            out.append(
                Between(
                    _term(e.input(), sides, WATERMARK_DELAY_KEY),
                    _term(e.lower(), sides, WATERMARK_DELAY_KEY),
                    _term(e.upper(), sides, WATERMARK_DELAY_KEY),
                )
            )
        else:
            out.append(Opaque(str(e.toString())))
    return tuple(out)


#: ``"false"`` makes a stream-stream join match its rows with a Spark join even when its
#: condition has an Arrow form (the general path; tests run both)
MATCH_IN_TASKS_CONF = "spark.statestream.streamJoin.matchInTasks"

#: ``"true"`` (beyond Spark, off by default): an outer join emits a row of its outer side that
#: finds no partner on arrival at once, padded with nulls, and its matches when they come later,
#: rather than the padded row when the watermark evicts it; for users who cannot wait for the
#: watermark and accept a padded row followed by real matches
OUTER_EARLY_EMIT_CONF = "spark.statestream.streamJoin.outerEarlyEmit"

# ---------------------------------------------------------------------------------------------
# The condition as an Arrow predicate (operators/arrow_predicate.py)
# ---------------------------------------------------------------------------------------------

#: Spark types whose Arrow comparison and arithmetic are Spark's, by ``simpleString``
_ARROW_TAGS = {
    "boolean": "bool", "tinyint": "int8", "smallint": "int16", "int": "int32", "bigint": "int64",
    "string": "string", "date": "date", "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz",
}
_INTEGRAL_TAGS = ("int8", "int16", "int32", "int64")
_ARROW_COMPARISONS = {
    "EqualTo": "==", "EqualNullSafe": "<=>", "LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">", "GreaterThanOrEqual": ">=",
}


class _Untranslatable(Exception):
    pass


def arrow_condition(condition: Any, names: dict[int, str], fixed_offset_zone: bool) -> Any | None:
    """The condition as ``operators.arrow_predicate``'s tree over the ``side_column`` names, or
    None when some node has no exact Arrow counterpart (the join then matches with Spark).

    ``fixed_offset_zone``: the session time zone never changes its offset, so that adding a
    day-time interval to a timestamp (Spark adds it to the local date-time) is a plain addition."""
    if condition is None:
        return None
    try:
        return _arrow_node(condition, names, fixed_offset_zone)
    except _Untranslatable:
        return None


def _arrow_tag(e: Any) -> str:
    tag = _ARROW_TAGS.get(str(e.dataType().simpleString()))
    if tag is None:
        raise _Untranslatable
    return tag


def _arrow_node(e: Any, names: dict[int, str], fixed: bool) -> Any:
    kind = _jname(e)
    if kind in ("And", "Or"):
        return (kind.lower(), _arrow_node(e.left(), names, fixed), _arrow_node(e.right(), names, fixed))
    if kind == "Not":
        return ("not", _arrow_node(e.child(), names, fixed))
    if kind in ("IsNull", "IsNotNull"):
        return ("is_null" if kind == "IsNull" else "is_not_null", _arrow_value(e.child(), names, fixed))
    if kind in _ARROW_COMPARISONS:
        _arrow_tag(e.left())  # a comparable type on both sides (the analyser made them equal)
        _arrow_tag(e.right())
        return ("cmp", _ARROW_COMPARISONS[kind], _arrow_value(e.left(), names, fixed), _arrow_value(e.right(), names, fixed))
    if kind == "Literal" and _type_name(e.dataType()) == "BooleanType":
        return _arrow_value(e, names, fixed)
    if kind == "AttributeReference" and _type_name(e.dataType()) == "BooleanType":
        return _arrow_value(e, names, fixed)
    raise _Untranslatable


def _arrow_value(e: Any, names: dict[int, str], fixed: bool) -> Any:
    kind = _jname(e)
    if kind == "AttributeReference":
        _arrow_tag(e)
        name = names.get(int(e.exprId().id()))
        if name is None:
            raise _Untranslatable
        return ("col", name)
    if kind == "Literal":
        t = _type_name(e.dataType())
        v = e.value()
        if t == "DayTimeIntervalType":
            return ("lit", None if v is None else int(v), "duration")
        if t == "CalendarIntervalType":
            if v is None or _interval_field(v, "months") != 0 or _interval_field(v, "days") != 0:
                raise _Untranslatable  # months and days follow the calendar
            return ("lit", _interval_field(v, "microseconds"), "duration")
        tag = _arrow_tag(e)
        if v is None:
            return ("lit", None, tag)
        if tag == "string":
            return ("lit", str(v.toString()), tag)
        if tag == "bool":
            return ("lit", bool(v), tag)
        return ("lit", int(v), tag)
    if kind in ("TimestampAddInterval", "TimeAdd"):
        tag = _arrow_tag(e.start())
        if tag not in ("timestamp", "timestamp_ntz") or (tag == "timestamp" and not fixed):
            raise _Untranslatable
        interval = _arrow_value(e.interval(), names, fixed)
        if interval[0] != "lit" or interval[2] != "duration":
            raise _Untranslatable
        return ("add", _arrow_value(e.start(), names, fixed), interval, True)
    if kind in ("Add", "Subtract"):
        tag = _arrow_tag(e)
        mode = str(e.evalMode().toString())
        if tag not in _INTEGRAL_TAGS or mode not in ("ANSI", "LEGACY"):
            raise _Untranslatable
        op = "add" if kind == "Add" else "sub"
        return (op, _arrow_value(e.left(), names, fixed), _arrow_value(e.right(), names, fixed), mode == "ANSI")
    if kind == "Cast":
        to, frm = _arrow_tag(e), _arrow_tag(e.child())
        if to not in _INTEGRAL_TAGS or frm not in _INTEGRAL_TAGS or _INTEGRAL_TAGS.index(to) < _INTEGRAL_TAGS.index(frm):
            raise _Untranslatable  # only widening integer casts, which cannot fail
        return ("cast", _arrow_value(e.child(), names, fixed), to)
    if kind in _ARROW_COMPARISONS or kind in ("And", "Or", "Not", "IsNull", "IsNotNull"):
        return _arrow_node(e, names, fixed)
    raise _Untranslatable


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


def side_column(side: int, i: int) -> str:
    """The name column ``i`` of a side gets inside the join's Spark plans (names of both sides
    may clash; these never do)."""
    return f"__s{side}_{i}"


@dataclass(frozen=True)
class StreamJoinInfo:
    """What the join operator needs, read once from Spark's plan of the join at planning time.

    Expressions are JVM expressions whose columns are renamed to ``side_column`` names, so they
    apply to the renamed batch DataFrames of both sides at once."""

    join_type: str
    left_names: tuple[str, ...]
    right_names: tuple[str, ...]
    left_schema: Any = field(repr=False)  # StructType of the left side's rows
    right_schema: Any = field(repr=False)
    left_keys: tuple[Any, ...] = field(default=(), repr=False)  # JVM expressions over __s0_* columns
    right_keys: tuple[Any, ...] = field(default=(), repr=False)
    key_types: tuple[Any, ...] = field(default=(), repr=False)  # Spark DataTypes of the keys
    key_nullable: tuple[bool, ...] = ()
    condition: Any = field(default=None, repr=False)  # the non-equi condition (JVM), or None
    left_only: Any = field(default=None, repr=False)  # its deterministic conjuncts on one side
    right_only: Any = field(default=None, repr=False)
    output: tuple[Any, ...] = field(default=(), repr=False)  # JVM named expressions: the join's output
    output_schema: Any = field(default=None, repr=False)  # StructType of the join's output (with metadata)
    conjuncts: tuple[Conjunct, ...] = ()
    key_watermark_ordinal: int | None = None
    left_event_time: int | None = None  # the side's event-time column (first with the marker)
    right_event_time: int | None = None
    left_event_time_is_struct: bool = False
    right_event_time_is_struct: bool = False
    key_watermark_is_struct: bool = False
    # explain() texts
    left_keys_text: str = ""
    right_keys_text: str = ""
    condition_text: str = ""
    left_only_text: str = "None"
    right_only_text: str = "None"
    both_text: str = "None"
    full_text: str = "None"
    key_schema_json: dict = field(default_factory=dict, repr=False)
    value_schema_json: dict = field(default_factory=dict, repr=False)
    #: the condition as an Arrow predicate (``arrow_condition``), None without one or when it
    #: has no exact Arrow form
    arrow_condition: Any = None
    #: the state step matches the rows itself (one Spark job a batch); otherwise a Spark join
    #: matches them first (``operators/stream_join.py``)
    match_in_tasks: bool = False
    #: ``OUTER_EARLY_EMIT_CONF``: beyond Spark, opt-in
    outer_early_emit: bool = False
    #: the positions of each side's input columns the join keeps (:func:`kept_side_columns`);
    #: ``left_schema``/``right_schema`` and the state hold these only
    left_kept: tuple[int, ...] = ()
    right_kept: tuple[int, ...] = ()


def _ids(attrs: Sequence[Any]) -> list[int]:
    return [int(a.exprId().id()) for a in attrs]


def _renamed(expr: Any, names: dict[int, str], jvm: Any, pruned: frozenset[int] = frozenset()) -> Any:
    """``expr`` with every attribute replaced by the unresolved name ``names[id]``; an attribute
    of ``pruned`` (a column no operator reads, see :func:`kept_side_columns`) becomes a null of
    its type."""
    def seq(items: list[Any]) -> Any:
        conv = jvm.scala.jdk.javaapi.CollectionConverters
        return conv.asScala(jvm.java.util.ArrayList(items)).toSeq()

    def fn(e: Any) -> Any:
        if _jname(e) == "AttributeReference":
            if int(e.exprId().id()) in pruned:
                return jvm.org.apache.spark.sql.catalyst.expressions.Literal(None, e.dataType())
            n = names.get(int(e.exprId().id()))
            if n is None:
                msg = f"column {e} of a stream-stream join condition is on neither side"
                raise ValueError(msg)
            return jvm.org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute.quoted(n)
        return None

    return rebuild_expression(expr, fn, seq)


def _split_and(e: Any) -> list[Any]:
    if _jname(e) == "And":
        return _split_and(e.left()) + _split_and(e.right())
    return [e]


def _and_all(parts: list[Any], jvm: Any) -> Any:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = jvm.org.apache.spark.sql.catalyst.expressions.And(out, p)
    return out


def _clean(text: str) -> str:
    import re

    return re.sub(r"#\d+L?", "", text)


def _nodes(plan: Any, name: str) -> list[Any]:
    """The nodes of a Catalyst plan whose class is ``name``, top first (breadth first)."""
    out, pending = [], [plan]
    while pending:
        p = pending.pop(0)
        if _jname(p) == name:
            out.append(p)
        pending.extend(jvm_seq(p.children()))
    return out


def _renames(plan: Any, ids: Sequence[int]) -> list[set[int]]:
    """For each attribute id of ``plan``'s output, the ids it has further down ``plan`` through
    bare renames (``k AS lk``) and unary operators, itself included."""
    seen = [{i} for i in ids]
    current: list[int] = list(ids)
    node = plan
    while True:
        if _jname(node) == "Project":
            renames = {
                int(e.exprId().id()): int(e.child().exprId().id())
                for e in jvm_seq(node.projectList())
                if _jname(e) == "Alias" and _jname(e.child()) == "AttributeReference"
            }
            current = [renames.get(c, c) for c in current]
            for names, c in zip(seen, current):
                names.add(c)
        children = jvm_seq(node.children())
        if len(children) != 1:
            return seen
        node = children[0]


def kept_side_columns(node: "L.Join", root: "L.LogicalPlan | None") -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The positions of each side's columns that reach the join in Spark's optimised plan of the
    whole query (``root``): Spark's column pruning keeps the columns the join's keys and
    condition read and those an operator above it (or the sink) reads; a left semi join's right
    side keeps only the first kind. Each side's state stores those columns only.

    The optimiser may move a side's renaming projection above the join (the plans read here have
    no watermark node to stop it), so a side's column is matched with the join's inputs through
    its renames. ``None`` (keep every column) when the plans cannot be read or the join is not
    found in them."""
    if root is None:
        return None
    if node.find(AggregationFinality):
        # Spark's optimiser folds the finality columns' stand-in literals and prunes them from
        # the join's inputs, but the rows carry their real values: keep every column
        return None
    try:
        analyzed = next(iter(_nodes(java_dataframe(node.template).queryExecution().analyzed(), "Join")), None)
        optimized = java_dataframe(root.template).queryExecution().optimizedPlan()
        if analyzed is None:
            return None
        sides = [_renames(child, _ids(jvm_seq(child.output()))) for child in (analyzed.left(), analyzed.right())]
        for join in _nodes(optimized, "Join"):
            outs = (set(_ids(jvm_seq(join.left().output()))), set(_ids(jvm_seq(join.right().output()))))
            # ours when each input is some of its side's columns; a join inside a side mixes
            # the columns of the two sides
            if all(out and out <= set().union(*side) for out, side in zip(outs, sides)):
                left, right = (tuple(p for p, names in enumerate(side) if names & out) for out, side in zip(outs, sides))
                return left, right
    except Exception:  # not a classic JVM DataFrame, or a plan Spark cannot optimise
        logger.debug("could not read the pruned columns of a stream-stream join", exc_info=True)
    return None


def stream_join_info(node: "L.Join", root: "L.LogicalPlan | None" = None) -> StreamJoinInfo:
    """Read the keys, condition and output of a stream-stream join from Spark's optimised plan
    of the join over stand-ins (``plan/joins.py``): ``ExtractEquiJoinKeys`` as Spark's planner
    applies it, then each side's event-time column and the solver's description of the rest of
    the condition."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    assert node.left is not None and node.right is not None
    # a clone of the template's session with adaptive execution off, as in a micro-batch
    user = node.template.sparkSession
    session = clone_session(user)
    session.conf.set("spark.sql.adaptive.enabled", "false")
    joined, ids = standin_join(node, session)
    jvm = jvm_view(session)
    qe = java_dataframe(joined).queryExecution()
    optimized = qe.optimizedPlan()
    analyzed = qe.analyzed()
    join = next(iter(_nodes(optimized, "Join")), None)
    if join is None:
        msg = "statestream cannot find the join in Spark's plan of a stream-stream join"
        raise RuntimeError(msg)
    extract = getattr(jvm.org.apache.spark.sql.catalyst.planning, "ExtractEquiJoinKeys$").__getattr__("MODULE$")
    found = extract.unapply(join)
    left_ids, right_ids = ids[0], ids[1]
    kept = kept_side_columns(node, root) or (tuple(range(len(left_ids))), tuple(range(len(right_ids))))
    names = {left_ids[p]: side_column(0, q) for q, p in enumerate(kept[0])}
    names.update({right_ids[p]: side_column(1, q) for q, p in enumerate(kept[1])})
    pruned = frozenset(set(left_ids) | set(right_ids)) - frozenset(names)
    if found.isDefined():
        t = found.get()
        lkeys, rkeys = jvm_seq(t._2()), jvm_seq(t._3())  # noqa: SLF001 - a Scala tuple's fields
        other = t._4()  # noqa: SLF001 - a Scala tuple's fields
        other = other.get() if other.isDefined() else None
    else:
        lkeys, rkeys = [], []
        cond = join.condition()
        other = cond.get() if cond.isDefined() else None
    # the split Spark's operator makes of its condition
    left_set, right_set = set(left_ids), set(right_ids)
    lonly, ronly, both = [], [], []
    if other is not None:
        for c in _split_and(other):
            refs = set(_ids(jvm_seq(c.references().toSeq())))
            if c.deterministic() and refs <= left_set:
                lonly.append(c)
            if c.deterministic() and refs <= right_set:
                ronly.append(c)
            if not c.deterministic() or not (refs <= left_set or refs <= right_set):
                both.append(c)
    # the join's output as the user's DataFrame has it: the analysed projection above the join
    top = analyzed
    output_exprs: list[Any] = []
    if _jname(top) == "Project" and _jname(top.child()) == "Join":
        output_exprs = jvm_seq(top.projectList())
    else:
        output_exprs = jvm_seq(top.output())
    read = [e for e in (*lkeys, *rkeys, other) if e is not None]
    if pruned and any(set(_ids(jvm_seq(e.references().toSeq()))) & pruned for e in read):
        # the keys or condition read a column Spark's plan did not keep (not expected): keep all
        kept = (tuple(range(len(left_ids))), tuple(range(len(right_ids))))
        names = {i: side_column(0, p) for p, i in enumerate(left_ids)}
        names.update({i: side_column(1, p) for p, i in enumerate(right_ids)})
        pruned = frozenset()
    schema = node.template.schema
    left_schema = StructType([node.left.schema.fields[p] for p in kept[0]])
    right_schema = StructType([node.right.schema.fields[p] for p in kept[1]])

    def et_index(s: StructType) -> int | None:
        return next((i for i, f in enumerate(s.fields) if WATERMARK_DELAY_KEY in (f.metadata or {})), None)

    key_wm = None
    for keys in (lkeys, rkeys):
        for j, k in enumerate(keys):
            if _jname(k) in ("AttributeReference", "Alias") and bool(k.metadata().contains(WATERMARK_DELAY_KEY)):
                key_wm = j
                break
        if key_wm is not None:
            break
    key_types = tuple(k.dataType() for k in lkeys)
    from pyspark.sql.types import _parse_datatype_json_string

    key_fields = [
        StructField(f"field{j}", _parse_datatype_json_string(k.dataType().json()), bool(k.nullable())) for j, k in enumerate(lkeys)
    ]
    value_schema = StructType(
        [StructField("left", StructType([StructField(f.name, f.dataType, True) for f in left_schema.fields]), True),
         StructField("right", StructType([StructField(f.name, f.dataType, True) for f in right_schema.fields]), True),
         StructField("matched", BooleanType(), True)]
    )
    l_et, r_et = et_index(left_schema), et_index(right_schema)

    def text(exprs: list[Any]) -> str:
        return ", ".join(_clean(str(e.toString())) for e in exprs)

    def opt_text(e: Any) -> str:
        return "None" if e is None else "Some(" + _clean(str(e.toString())) + ")"

    lonly_e, ronly_e, both_e = _and_all(lonly, jvm), _and_all(ronly, jvm), _and_all(both, jvm)
    arrow = arrow_condition(other, names, _fixed_offset_zone(session))
    in_tasks = str(user.conf.get(MATCH_IN_TASKS_CONF, "true")).lower() == "true" and (other is None or arrow is not None)
    return StreamJoinInfo(
        join_type=node.join_type if node.join_type != "Cross" else "Inner",
        left_names=tuple(left_schema.names),
        right_names=tuple(right_schema.names),
        left_schema=left_schema,
        right_schema=right_schema,
        left_keys=tuple(_renamed(k, names, jvm) for k in lkeys),
        right_keys=tuple(_renamed(k, names, jvm) for k in rkeys),
        key_types=key_types,
        key_nullable=tuple(bool(k.nullable()) for k in lkeys),
        condition=None if other is None else _renamed(other, names, jvm),
        left_only=None if lonly_e is None else _renamed(lonly_e, names, jvm),
        right_only=None if ronly_e is None else _renamed(ronly_e, names, jvm),
        output=tuple(_renamed(e, names, jvm, pruned) for e in output_exprs),
        left_kept=kept[0],
        right_kept=kept[1],
        output_schema=schema,
        conjuncts=condition_terms(other, left_ids, right_ids),
        key_watermark_ordinal=key_wm,
        left_event_time=l_et,
        right_event_time=r_et,
        left_event_time_is_struct=l_et is not None and isinstance(left_schema.fields[l_et].dataType, StructType),
        right_event_time_is_struct=r_et is not None and isinstance(right_schema.fields[r_et].dataType, StructType),
        key_watermark_is_struct=key_wm is not None and _type_name(lkeys[key_wm].dataType()) == "StructType",
        left_keys_text=text(lkeys),
        right_keys_text=text(rkeys),
        condition_text=opt_text(other),
        left_only_text=opt_text(lonly_e),
        right_only_text=opt_text(ronly_e),
        both_text=opt_text(both_e),
        full_text=opt_text(other),
        key_schema_json=StructType(key_fields).jsonValue(),
        value_schema_json=value_schema.jsonValue(),
        arrow_condition=arrow,
        match_in_tasks=in_tasks,
        outer_early_emit=str(user.conf.get(OUTER_EARLY_EMIT_CONF, "false")).lower() == "true",
    )


def _fixed_offset_zone(session: Any) -> bool:
    try:
        zone = jvm_view(session).java.time.ZoneId.of(session.conf.get("spark.sql.session.timeZone"))
        return bool(zone.getRules().isFixedOffset())
    except Exception:  # noqa: BLE001 - a zone Java does not parse is not known to be fixed
        return False


def plan_stream_stream_join(
    node: "L.Join",
    plan_child: Callable[["L.LogicalPlan"], "PhysicalOperator"],
    num_partitions: int,
    store_conf: Any = None,
    root: "L.LogicalPlan | None" = None,
) -> "PhysicalOperator":
    """Spark's plan of a join of two streams: ``StreamingSymmetricHashJoin`` over one
    ``Exchange hashpartitioning(keys, N)`` per side (``root``: the whole query, whose plan says
    which columns reach the join)."""
    assert node.left is not None and node.right is not None
    info = stream_join_info(node, root)
    if not info.left_keys:
        # Spark's planner refuses it when the query plans its first batch (the query fails)
        raise stream_join_without_equality_error()
    left = StreamJoinExchangeExec(child=plan_child(node.left), keys_text=info.left_keys_text, num_partitions=num_partitions)
    right = StreamJoinExchangeExec(child=plan_child(node.right), keys_text=info.right_keys_text, num_partitions=num_partitions)
    return StreamingSymmetricHashJoinExec(left=left, right=right, info=info, store_conf=store_conf)
