"""Pure tests of the join rules (no Spark session): which join types Spark 4.1 accepts with which
side streaming, and with which message it refuses the others (``plan/joins.py``, the join cases of
``plan/analysis.py``); where a filter moves through a join (``plan/optimizer.py``); a semi join's
row bound (``plan/limits.py``). The messages were measured on Spark 4.1.4
(``tests/differential/test_joins.py`` compares them with Spark's engine at ``start()``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from statestream.errors import StatestreamAnalysisException
from statestream.plan import analysis as A
from statestream.plan import optimizer as O
from statestream.plan.joins import (
    JOIN_TYPES,
    check_joins_supported,
    join_type_name,
    needs_stream_stream_bound,
    stream_join_refusal,
)
from statestream.errors.unsupported_operations import stream_stream_bound_message
from statestream.plan.limits import max_rows
from statestream.plan.logical import WATERMARK_DELAY_KEY, BatchRelation, EventTimeWatermark, Join, Limit, LogicalPlan, StreamingRelation

# ------------------------------------------------------------------------------ join types


@pytest.mark.parametrize(
    ("how", "name"),
    [
        (None, "Inner"),
        ("inner", "Inner"),
        ("INNER", "Inner"),
        ("cross", "Cross"),
        ("outer", "FullOuter"),
        ("full", "FullOuter"),
        ("fullouter", "FullOuter"),
        ("full_outer", "FullOuter"),
        ("left", "LeftOuter"),
        ("leftouter", "LeftOuter"),
        ("left_outer", "LeftOuter"),
        ("Left_Outer", "LeftOuter"),
        ("right", "RightOuter"),
        ("rightouter", "RightOuter"),
        ("right_outer", "RightOuter"),
        ("semi", "LeftSemi"),
        ("leftsemi", "LeftSemi"),
        ("left_semi", "LeftSemi"),
        ("anti", "LeftAnti"),
        ("leftanti", "LeftAnti"),
        ("left_anti", "LeftAnti"),
    ],
)
def test_join_type_names_follow_pyspark_aliases(how, name):
    assert join_type_name(how) == name


def test_every_spark_join_type_string_is_known():
    # the list Spark's UNSUPPORTED_JOIN_TYPE error gives as supported
    spark_list = "inner outer full fullouter full_outer leftouter left left_outer rightouter right right_outer leftsemi left_semi semi leftanti left_anti anti cross"
    assert {s.replace("_", "") for s in spark_list.split()} == set(JOIN_TYPES)


# ------------------------------------------------------------------------------ accepted / refused

STREAM_LEFT = (True, False)
STREAM_RIGHT = (False, True)
BOTH = (True, True)

#: the reference table: (join type, sides) -> accepted in append mode (stream-stream outer and
#: semi joins need a watermark bound, checked separately)
ACCEPTED = {
    ("Inner", STREAM_LEFT): True,
    ("Cross", STREAM_LEFT): True,
    ("LeftOuter", STREAM_LEFT): True,
    ("LeftSemi", STREAM_LEFT): True,
    ("LeftAnti", STREAM_LEFT): True,
    ("RightOuter", STREAM_LEFT): False,
    ("FullOuter", STREAM_LEFT): False,
    ("Inner", STREAM_RIGHT): True,
    ("Cross", STREAM_RIGHT): True,
    ("RightOuter", STREAM_RIGHT): True,
    ("LeftOuter", STREAM_RIGHT): False,
    ("LeftSemi", STREAM_RIGHT): False,
    ("LeftAnti", STREAM_RIGHT): False,
    ("FullOuter", STREAM_RIGHT): False,
    ("Inner", BOTH): True,
    ("Cross", BOTH): True,
    ("LeftOuter", BOTH): True,
    ("RightOuter", BOTH): True,
    ("FullOuter", BOTH): True,
    ("LeftSemi", BOTH): True,
    ("LeftAnti", BOTH): False,
}


@pytest.mark.parametrize(("join_type", "sides"), list(ACCEPTED))
def test_which_join_types_spark_accepts_with_which_side_streaming(join_type, sides):
    refusal = stream_join_refusal(join_type, *sides, "append")
    assert (refusal is None) == ACCEPTED[(join_type, sides)], refusal


def test_refusal_messages_are_sparks():
    assert stream_join_refusal("FullOuter", *STREAM_LEFT, "append") == (
        "FullOuter joins with streaming DataFrames/Datasets on the left and a static DataFrame/Dataset on the right is not supported"
    )
    assert stream_join_refusal("FullOuter", *STREAM_RIGHT, "append") == (
        "FullOuter joins with streaming DataFrames/Datasets on the right and a static DataFrame/Dataset on the left is not supported"
    )
    assert stream_join_refusal("LeftOuter", *STREAM_RIGHT, "update") == (
        "LeftOuter join with a streaming DataFrame/Dataset on the right and a static DataFrame/Dataset on the left is not supported"
    )
    assert stream_join_refusal("LeftSemi", *STREAM_RIGHT, "append") == (
        "LeftSemi join with a streaming DataFrame/Dataset on the right and a static DataFrame/Dataset on the left is not supported"
    )
    assert stream_join_refusal("LeftAnti", *BOTH, "append") == (
        "LeftAnti joins with a streaming DataFrame/Dataset on the right are not supported"
    )
    assert stream_join_refusal("RightOuter", *STREAM_LEFT, "append") == (
        "RightOuter join with a streaming DataFrame/Dataset on the left and a static DataFrame/DataSet on the right not supported"
    )
    assert stream_stream_bound_message("LeftOuter") == (
        "Stream-stream LeftOuter join between two streaming DataFrame/Datasets is not supported without a watermark "
        "in the join keys, or a watermark on the nullable side and an appropriate range condition"
    )


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_two_streams_only_in_append_mode(mode):
    for join_type in ("Inner", "LeftOuter", "LeftAnti"):
        assert stream_join_refusal(join_type, *BOTH, mode) == (
            f"Join between two streaming DataFrames/Datasets is not supported in {mode.capitalize()} output mode, "
            "only in Append output mode"
        )
    assert stream_join_refusal("LeftOuter", *STREAM_LEFT, mode) is None  # a static side: any mode


def test_stream_static_joins_are_accepted_in_every_output_mode():
    for mode in ("append", "update", "complete"):
        assert stream_join_refusal("Inner", *STREAM_LEFT, mode) is None
        assert stream_join_refusal("RightOuter", *STREAM_RIGHT, mode) is None


def test_which_stream_stream_joins_need_a_watermark_bound():
    assert [t for t in ("Inner", "Cross", "LeftOuter", "RightOuter", "FullOuter", "LeftSemi") if needs_stream_stream_bound(t, True, True)] == [
        "LeftOuter",
        "RightOuter",
        "FullOuter",
        "LeftSemi",
    ]
    assert not needs_stream_stream_bound("LeftOuter", True, False)


# ------------------------------------------------------------------------------ the analysis walk


@dataclass
class FakeTemplate:
    schema: StructType

    def filter(self, cond: object) -> "FakeTemplate":
        return self


def _schema(*fields: tuple[str, object, dict]) -> FakeTemplate:
    return FakeTemplate(StructType([StructField(n, t, True, md) for n, t, md in fields]))


def stream(watermarked: bool = False) -> LogicalPlan:
    src = StreamingRelation(template=_schema(("k", LongType(), {}), ("ts", TimestampType(), {})))
    if not watermarked:
        return src
    marked = _schema(("k", LongType(), {}), ("ts", TimestampType(), {WATERMARK_DELAY_KEY: 1000}))
    return EventTimeWatermark(template=marked, child=src, column="ts", delay_ms=1000)


def static() -> LogicalPlan:
    return BatchRelation(template=_schema(("k", LongType(), {}), ("name", LongType(), {})))


def join(left: LogicalPlan, right: LogicalPlan, join_type: str) -> Join:
    fields = [(f.name, f.dataType, f.metadata) for c in (left, right) for f in c.schema.fields]
    return Join(template=_schema(*fields), left=left, right=right, join_type=join_type)


class FakeInspector:
    def __init__(self, facts: dict[int, list] | None = None) -> None:
        self._facts = facts or {}

    def facts(self, node: LogicalPlan):
        return self._facts.get(id(node), [])


def refusal(plan: LogicalPlan, mode: str = "append", inspector: FakeInspector | None = None) -> str | None:
    try:
        A.check_for_streaming(plan, mode, {}, inspector=inspector or FakeInspector())
    except StatestreamAnalysisException as e:
        assert e.getCondition() in ("_LEGACY_ERROR_TEMP_3102", "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION")
        return str(e)
    return None


def test_analysis_refuses_the_join_types_spark_refuses():
    assert refusal(join(stream(), static(), "LeftAnti")) is None
    assert refusal(join(static(), stream(), "RightOuter")) is None
    assert refusal(join(stream(), static(), "FullOuter")) == stream_join_refusal("FullOuter", True, False, "append")
    assert refusal(join(static(), stream(), "LeftSemi")) == stream_join_refusal("LeftSemi", False, True, "append")


def test_output_mode_error_comes_before_the_join_error():
    out = refusal(join(stream(), static(), "FullOuter"), "complete")
    assert out is not None and out.startswith("[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION]")


def test_the_lower_join_is_reported_first():
    inner = join(static(), stream(), "LeftOuter")  # refused
    outer = join(inner, static(), "FullOuter")  # refused too, but above
    assert refusal(outer) == stream_join_refusal("LeftOuter", False, True, "append")


def test_stream_stream_outer_join_watermark_bound():
    use = A.JoinConditionUse
    # no watermark at all: refused, whatever the condition says
    plain = join(stream(), stream(), "LeftOuter")
    assert refusal(plain, inspector=FakeInspector({id(plain): [use(False, True)]})) == stream_stream_bound_message("LeftOuter")
    # an event-time join key: accepted
    keyed = join(stream(True), stream(True), "FullOuter")
    assert refusal(keyed, inspector=FakeInspector({id(keyed): [use(True, False)]})) is None
    # left outer: the right side's watermark and a comparison across the sides may bound the left side
    ranged = join(stream(), stream(True), "LeftOuter")
    assert refusal(ranged, inspector=FakeInspector({id(ranged): [use(False, True)]})) is None
    assert refusal(ranged, inspector=FakeInspector({id(ranged): [use(False, False)]})) == stream_stream_bound_message("LeftOuter")
    # right outer needs the left side's watermark
    right = join(stream(), stream(True), "RightOuter")
    assert refusal(right, inspector=FakeInspector({id(right): [use(False, True)]})) == stream_stream_bound_message("RightOuter")
    # a stream-static join is never asked for a bound
    static_side = join(stream(), static(), "LeftOuter")
    assert refusal(static_side, inspector=FakeInspector({id(static_side): [use(False, False)]})) is None


def test_a_stream_stream_join_is_a_stateful_operation_and_a_stream_static_one_is_not():
    assert A.is_stateful_operation(join(stream(), stream(), "Inner"))
    assert not A.is_stateful_operation(join(stream(), static(), "Inner"))


def test_stream_stream_joins_pass_the_start_check():
    """Every join Spark accepts runs now: ``start()`` refuses none of them itself."""
    check_joins_supported(join(stream(), static(), "Inner"))
    for how in ("Inner", "LeftOuter", "RightOuter", "FullOuter", "LeftSemi"):
        check_joins_supported(join(stream(True), stream(True), how))


# ------------------------------------------------------------------------------ filters and limits


def test_which_side_a_filter_above_a_join_moves_into():
    assert O.join_pushable_sides("Inner") == (0, 1)
    assert O.join_pushable_sides("Cross") == (0, 1)
    assert O.join_pushable_sides("LeftOuter") == (0,)
    assert O.join_pushable_sides("LeftSemi") == (0,)
    assert O.join_pushable_sides("LeftAnti") == (0,)
    assert O.join_pushable_sides("RightOuter") == (1,)
    assert O.join_pushable_sides("FullOuter") == ()


@dataclass(frozen=True)
class E:
    """A fake analysed expression over attribute ids."""

    refs: frozenset[int]
    det: bool = True

    @property
    def references(self) -> frozenset[int]:
        return self.refs

    @property
    def deterministic(self) -> bool:
        return self.det

    @property
    def key(self) -> "E":
        return self

    def substitute(self, mapping) -> "E":
        refs: frozenset[int] = frozenset()
        for r in self.refs:
            refs |= mapping[r].references if r in mapping else frozenset({r})
        return E(refs, self.det)


class FakePlanInspector:
    def __init__(self) -> None:
        self.by_node: dict[int, O.NodeFacts] = {}

    def add(self, node: LogicalPlan, *branches) -> None:
        self.by_node[id(node)] = O.NodeFacts(branches=tuple(tuple(b) for b in branches))

    def facts(self, node: LogicalPlan):
        if not node.children:
            return O.NodeFacts(branches=())
        return self.by_node.get(id(node))

    def to_column(self, expr, output):
        return ("col", expr)


def _watermarked_join(join_type: str, inferred: tuple = ()) -> tuple[Join, EventTimeWatermark, FakePlanInspector]:
    """stream (ids 1 k, 2 ts) -> withWatermark(ts) -> join static (ids 5 k, 6 name)."""
    insp = FakePlanInspector()
    w = stream(True)
    assert isinstance(w, EventTimeWatermark)
    insp.add(w, [O.WatermarkStep(2)])
    j = join(w, static(), join_type)
    side0 = [O.JoinStep(frozenset({1, 2}), 0 in O.join_pushable_sides(join_type))]
    if inferred:
        side0.append(O.FilterStep(inferred, inferred=True))
    insp.add(j, side0, [O.JoinStep(frozenset({5, 6}), 1 in O.join_pushable_sides(join_type))])
    return j, w, insp


def test_a_filter_spark_infers_on_the_stream_side_goes_below_the_watermark():
    not_null_k = E(frozenset({1}))
    j, w, insp = _watermarked_join("Inner", inferred=(not_null_k,))
    targets, _ = O.find_pushdowns(j, insp)
    assert [(type(t), t.node, t.child_index, t.predicate) for t in targets] == [(O.Placement, w, 0, not_null_k)]


def test_an_inferred_filter_is_written_where_it_stops_even_without_crossing_anything():
    """No watermark on the stream side: Spark's inferred filter still stands right above the
    source in its plan (and in its codegen stages), so statestream writes it there too."""
    insp = FakePlanInspector()
    src = stream()
    j = join(src, static(), "Inner")
    insp.add(j, [O.JoinStep(frozenset({1, 2}), True), O.FilterStep((E(frozenset({1})),), inferred=True)], [O.JoinStep(frozenset({5, 6}), True)])
    targets, _ = O.find_pushdowns(j, insp)
    assert [(t.node, t.child_index) for t in targets] == [(j, 0)]


def test_a_filter_above_the_join_moves_into_the_side_spark_pushes_it_into():
    from statestream.plan.logical import Stateless

    for join_type, expected in (("Inner", True), ("LeftOuter", True), ("RightOuter", False), ("FullOuter", False)):
        j, w, insp = _watermarked_join(join_type)
        on_stream = E(frozenset({1}))
        f = Stateless(template=j.template, child=j, op="Filter")
        insp.add(f, [O.FilterStep((on_stream,))])
        targets, _ = O.find_pushdowns(f, insp)
        placed = [t for t in targets if t is not None and isinstance(t, O.Placement) and t.node is w]
        assert bool(placed) == expected, join_type
        # the event-time column never moves below its own watermark
        on_time = E(frozenset({2}))
        insp.add(f, [O.FilterStep((on_time,))])
        targets, _ = O.find_pushdowns(f, insp)
        assert not [t for t in targets if isinstance(t, O.Placement)], join_type


def test_push_down_rebuilds_the_join_over_the_filtered_side():
    not_null_k = E(frozenset({1}))
    j, w, insp = _watermarked_join("Inner", inferred=(not_null_k,))
    out = O.push_down_filters(j, insp)
    assert isinstance(out, Join) and out is not j and out.right is j.right
    assert isinstance(out.left, EventTimeWatermark) and out.left.child.op == "Filter"  # type: ignore[union-attr]
    assert isinstance(out.left.child.child, StreamingRelation)  # type: ignore[union-attr]


def test_a_semi_or_anti_join_yields_at_most_its_left_rows():
    limited = Limit(template=_schema(("k", LongType(), {})), child=stream(), n=3)
    for join_type, bound in (("LeftSemi", 3), ("LeftAnti", 3), ("Inner", None), ("LeftOuter", None)):
        assert max_rows(join(limited, static(), join_type)) == bound, join_type
