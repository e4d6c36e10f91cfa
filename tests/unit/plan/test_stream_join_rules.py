"""Pure tests of the stream-stream join rules (no Spark session): the state watermark Spark's solver
derives from a join condition (``plan/stream_joins.py``), the analysis check of outer and semi
joins built on it, and the watermark a join passes on to the operators after it
(``plan/incremental.py``). The figures were checked against Spark 4.1.4's explain of the same
conditions (``tests/differential/test_stream_joins.py`` compares whole runs).
"""

from __future__ import annotations

import pytest

from statestream.operators.base import StatefulOperatorStateInfo
from statestream.operators.stream_join import StreamingSymmetricHashJoinExec, StreamJoinExchangeExec
from statestream.operators.watermark import EventTimeWatermarkExec
from statestream.plan import analysis as A
from statestream.plan.incremental import IncrementalExecution, input_watermarks
from statestream.plan.stream_joins import (
    Add,
    Attr,
    Between,
    Comparison,
    Lit,
    Neg,
    Opaque,
    StreamJoinInfo,
    Sub,
    has_valid_watermark_range,
    join_output_watermark,
    join_state_watermark,
    one_side_state_watermark,
    state_value_watermark,
)
from tests.unit.plan.test_join_rules import FakeInspector, join, refusal, stream

LTS = Attr(1, 0, True, "lts")  # the left side's event-time column
RTS = Attr(2, 1, True, "rts")  # the right side's
LV = Attr(3, 0, False, "lv")  # a plain left column
RV = Attr(4, 1, False, "rv")
SEC = 1_000_000.0  # one second in the solver's unit (µs)
W = 1_714_564_790_000  # an eviction watermark (ms)

#: rts BETWEEN lts AND lts + 5 seconds, as Spark's optimiser leaves it: two conjuncts
RANGE = (Comparison(">=", RTS, LTS), Comparison("<=", RTS, Add(LTS, Lit(5 * SEC))))


# ------------------------------------------------------------------------------ the solver


def test_a_time_range_bounds_both_sides():
    # Spark's explain for W: left value predicate lts <= (W - 5001) ms, right rts <= (W - 1) ms
    assert state_value_watermark(RANGE, 0, W) == W - 5001
    assert state_value_watermark(RANGE, 1, W) == W - 1


def test_strict_comparisons_take_no_millisecond_off():
    cond = (Comparison(">", RTS, LTS), Comparison("<", RTS, Add(LTS, Lit(5 * SEC))))
    assert state_value_watermark(cond, 0, W) == W - 5000
    assert state_value_watermark(cond, 1, W) == W


def test_the_smallest_bound_wins():
    cond = (*RANGE, Comparison("<=", RTS, Add(LTS, Lit(60 * SEC))))
    assert state_value_watermark(cond, 0, W) == W - 60001


def test_a_comparison_in_the_wrong_direction_bounds_nothing():
    # rts > lts says nothing about how old a left row may be
    assert state_value_watermark((Comparison(">", RTS, LTS),), 0, W) is None
    assert state_value_watermark((Comparison(">", RTS, LTS),), 1, W) == W


def test_subtraction_and_negation_are_collected_with_their_signs():
    # lts >= rts - 2 s  <=>  rts <= lts + 2 s
    cond = (Comparison(">=", LTS, Sub(RTS, Lit(2 * SEC))),)
    assert state_value_watermark(cond, 0, W) == W - 2001
    neg = (Comparison("<", Neg(Sub(LTS, RTS)), Lit(2 * SEC)),)  # -(lts - rts) < 2 s  <=>  rts < lts + 2 s
    assert state_value_watermark(neg, 0, W) == W - 2000


def test_equal_terms_are_collected_once():
    # Spark collects the terms into a set: `lts + 1 s + 1 s` counts one second
    cond = (Comparison("<", RTS, Add(Add(LTS, Lit(SEC)), Lit(SEC))),)
    assert state_value_watermark(cond, 0, W) == W - 1000


def test_the_result_is_truncated_towards_zero():
    cond = (Comparison("<", RTS, Add(LTS, Lit(1500.0))),)  # 1.5 ms
    assert state_value_watermark(cond, 0, 0) == -1  # -1.5 ms -> -1, not -2


def test_conditions_the_solver_cannot_read_give_no_bound():
    months = (Comparison("<=", RTS, Add(LTS, Lit(None))),)  # an interval with months
    assert state_value_watermark(months, 0, W) is None
    two_left = (Comparison("<", RTS, Add(LTS, LV)),)  # two columns of the left side
    assert state_value_watermark(two_left, 0, W) is None
    unwatermarked = (Comparison("<", RV, LTS),)  # the other side's column has no watermark
    assert state_value_watermark(unwatermarked, 0, W) is None
    opaque = (Comparison("<", RTS, Add(LTS, Opaque("abs(x)"))),)
    assert state_value_watermark(opaque, 0, W) is None
    assert state_value_watermark((Opaque("k = rk"),), 0, W) is None
    assert state_value_watermark(RANGE, 0, None) is None  # no watermark yet
    assert state_value_watermark(RANGE, 0, W, other_has_watermark=False) is None


def test_long_overflow_as_on_the_jvm():
    # before a query starts Spark plans with Long.MinValue: the bound clamps to Long.MinValue and
    # `- 1` wraps around to Long.MaxValue (Spark's explain then shows `lts <= -1000`)
    lo = -(2**63)
    assert state_value_watermark(RANGE, 0, lo) == 2**63 - 1
    assert state_value_watermark(RANGE, 1, lo) == 2**63 - 1


def test_between_is_solved_on_its_lower_bound_first():
    cond = (Between(RTS, LTS, Add(LTS, Lit(5 * SEC))),)
    assert state_value_watermark(cond, 1, W) == W - 1
    assert state_value_watermark(cond, 0, W) == W - 5001


def test_one_side_state_watermark_prefers_a_watermarked_key():
    assert one_side_state_watermark(0, 1, True, RANGE, W) == ("key", W)
    assert one_side_state_watermark(0, None, True, RANGE, W) == ("value", W - 5001)
    assert one_side_state_watermark(0, None, False, RANGE, W) is None  # the side has no event time
    assert one_side_state_watermark(0, None, True, RANGE, None) is None


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("join_type", "cond", "accepted"),
    [
        ("LeftOuter", RANGE, True),
        ("RightOuter", RANGE, True),
        ("FullOuter", RANGE, True),
        ("LeftSemi", RANGE, True),
        # only the right side is bounded (rts >= lts)
        ("LeftOuter", (Comparison(">=", RTS, LTS),), False),
        ("LeftSemi", (Comparison(">=", RTS, LTS),), False),
        ("RightOuter", (Comparison(">=", RTS, LTS),), True),
        ("FullOuter", (Comparison(">=", RTS, LTS),), True),  # one bounded side is enough
        ("FullOuter", (Opaque("k = rk"),), False),
        ("Inner", RANGE, False),  # never asked: inner joins need no bound
    ],
)
def test_which_conditions_bound_an_outer_or_semi_join(join_type, cond, accepted):
    assert has_valid_watermark_range(join_type, cond) is accepted


def test_the_analysis_check_solves_the_condition():
    use = A.JoinConditionUse
    unsolvable = (Comparison(">", RTS, LTS),)  # compares across the sides, bounds no left row
    plain = join(stream(True), stream(True), "LeftOuter")
    assert refusal(plain, inspector=FakeInspector({id(plain): [use(False, True, unsolvable)]})) is not None
    assert refusal(plain, inspector=FakeInspector({id(plain): [use(False, True, RANGE)]})) is None
    # the right side has no watermark: nothing to solve with
    one = join(stream(True), stream(False), "LeftOuter")
    assert refusal(one, inspector=FakeInspector({id(one): [use(False, True, RANGE)]})) is not None


# ------------------------------------------------------------------------------ watermark propagation


def _info(**kw) -> StreamJoinInfo:
    base = dict(join_type="Inner", left_names=("k", "lts"), right_names=("rk", "rts"), left_schema=None, right_schema=None,
                conjuncts=RANGE, left_event_time=1, right_event_time=1)
    base.update(kw)
    return StreamJoinInfo(**base)


def _join_plan(info: StreamJoinInfo) -> StreamingSymmetricHashJoinExec:
    left = StreamJoinExchangeExec(child=EventTimeWatermarkExec(column="lts", delay_ms=10_000, node_id="l"))
    right = StreamJoinExchangeExec(child=EventTimeWatermarkExec(column="rts", delay_ms=10_000, node_id="r"))
    return StreamingSymmetricHashJoinExec(left=left, right=right, info=info)


def test_a_join_passes_on_its_smallest_state_watermark():
    info = _info()
    assert join_state_watermark(info, 0, W) == ("value", W - 5001)
    assert join_state_watermark(info, 1, W) == ("value", W - 1)
    assert join_output_watermark(info, W) == W - 5001
    keyed = _info(key_watermark_ordinal=1)
    assert join_output_watermark(keyed, W) == W
    unbounded = _info(conjuncts=())
    assert join_output_watermark(unbounded, W) == W


def test_operators_above_a_join_get_the_join_s_output_watermark():
    from statestream.operators.dedup import DeduplicationInfo, StreamingDeduplicateExec

    join_op = _join_plan(_info())
    dedup = StreamingDeduplicateExec(child=join_op, info=DeduplicationInfo(key_indices=(0,), key_names=("k",), within_watermark=False, output_schema=None))
    found = input_watermarks(dedup, W)
    assert found[id(join_op.info)] == W
    assert found[id(dedup.info)] == W - 5001
    assert input_watermarks(dedup, None) == {}
    # no watermark yet (0): Spark does not propagate it, every operator gets 0 (not 0 - 5001)
    zero = input_watermarks(dedup, 0)
    assert zero[id(join_op.info)] == 0 and zero[id(dedup.info)] == 0

    inc = IncrementalExecution("/tmp/x", "run", 3, 2, "append", late_watermark_ms=W - 1000, eviction_watermark_ms=W)
    planned = inc.apply(dedup)
    j = planned.child
    assert isinstance(j, StreamingSymmetricHashJoinExec)
    assert (j.event_time_watermark_for_late_events, j.event_time_watermark_for_eviction) == (W - 1000, W)
    assert j.state_watermarks == (("value", W - 5001), ("value", W - 1))
    assert j.state_info == StatefulOperatorStateInfo("/tmp/x", "run", 1, 3, 2)
    assert (planned.event_time_watermark_for_late_events, planned.event_time_watermark_for_eviction) == (W - 6001, W - 5001)


def test_a_join_without_watermarks_gets_none():
    info = _info(left_event_time=None, right_event_time=None, conjuncts=())
    plain = StreamingSymmetricHashJoinExec(left=StreamJoinExchangeExec(), right=StreamJoinExchangeExec(), info=info)
    planned = IncrementalExecution("/tmp/x", "run", 0, 2, "append", 0, 0).apply(plain)
    assert planned.event_time_watermark_for_eviction is None
    assert planned.state_watermarks == (None, None)
    assert not planned.should_run_another_batch(10)


# ------------------------------------------------------------------------------ the state step


def _step_input(rows: list[dict]):
    import pyarrow as pa

    from statestream.operators.aggregate import PARTITION_ID_COLUMN

    ts = pa.timestamp("us", tz="UTC")
    side_row = lambda s: pa.struct([pa.field(f"__s{s}_0", pa.int64()), pa.field(f"__s{s}_1", ts)])  # noqa: E731
    schema = pa.schema(
        [
            pa.field("__kind", pa.int32()), pa.field("__side", pa.int32()), pa.field("__k0", pa.int64()),
            pa.field("__l", side_row(0)), pa.field("__r", side_row(1)), pa.field("__late", pa.bool_()),
            pa.field("__pre", pa.bool_()), pa.field(PARTITION_ID_COLUMN, pa.int32()), pa.field("__rid", pa.int64()),
            pa.field("__idx", pa.int64()), pa.field("__pnew", pa.bool_()),
        ]
    )
    full = []
    for r in rows:
        row = {f.name: None for f in schema}
        row.update(r)
        row[PARTITION_ID_COLUMN] = 0
        full.append(row)
    return schema, side_row, pa.Table.from_pylist(full, schema=schema)


def _new(side: int, k: int, seconds: int, rid: int, late: bool = False) -> dict:
    import datetime as dt

    t = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)
    row = {f"__s{side}_0": k, f"__s{side}_1": t}
    return {"__kind": 0, "__side": side, "__k0": k, "__l" if side == 0 else "__r": row, "__late": late, "__pre": True, "__rid": rid}


def _marker(side: int, k: int, rid: int | None = None, idx: int | None = None, partner_new: bool = True) -> dict:
    return {"__kind": 1, "__side": side, "__k0": k, "__rid": rid, "__idx": idx, "__pnew": partner_new}


def test_partition_routes_follow_spark_s_hash():
    from statestream.operators.partition_routes import _murmur3_int, partition_routes

    # Spark: SELECT hash(0), hash(1), hash(42), hash(-1)
    assert [_murmur3_int(v) for v in (0, 1, 42, -1)] == [933211791, -559580957, 29417773, -1604776387]
    for n in (1, 2, 5, 200):
        routes = partition_routes(n)
        assert [_murmur3_int(r) % n for r in routes] == list(range(n))


def test_join_state_step_keeps_matches_and_pads_evicted_unmatched_rows(tmp_path):
    """Left outer, two batches without Spark: new rows and the markers of emitted pairs go into
    the stores (``matched`` from the markers), then the state watermarks evict: the unmatched left
    row comes out padded with nulls, the evicted right row is counted as removed."""
    import datetime as dt

    import pyarrow as pa

    from statestream.operators.stream_join import JoinStateStep

    rows = [_new(0, 1, 0, 0), _new(0, 2, 1, 1), _new(1, 1, 2, 2), _new(1, 3, 0, 3, late=True), _marker(0, 1, rid=0), _marker(1, 1, rid=2)]
    schema, side_row, table = _step_input(rows)
    key_schema = pa.schema([pa.field("__k0", pa.int64())])
    row_schemas = (pa.schema(list(side_row(0))), pa.schema(list(side_row(1))))
    out_schema = pa.schema(list(side_row(0)) + list(side_row(1)))
    step = JoinStateStep(
        state_root=str(tmp_path), run_id="r", operator_id=0, version=0, join_type="LeftOuter", input_schema=schema,
        key_schema=key_schema, row_schemas=row_schemas, output_schema=out_schema,
        event_times=((1, False), (1, False)),
    )
    out, m = step.process(0, table.to_batches())
    assert out.num_rows == 0
    assert (m["numUpdatedStateRows"], m["numTotalStateRows"], m["numRowsDroppedByWatermark"], m["numRemovedStateRows"]) == (3, 3, 1, 0)
    assert m["numStateStoreInstances"] == 4

    second = JoinStateStep(**{**step.__dict__, "version": 1, "state_watermarks": (("value", 1_714_521_601_500), ("value", 1_714_521_605_000))})
    _, _, empty = _step_input([])
    out, m = second.process(0, empty.to_batches())
    assert out.to_pylist() == [
        {"__s0_0": 2, "__s0_1": dt.datetime(2024, 5, 1, 0, 0, 1, tzinfo=dt.timezone.utc), "__s1_0": None, "__s1_1": None}
    ]
    assert (m["numUpdatedStateRows"], m["numTotalStateRows"], m["numRemovedStateRows"]) == (0, 0, 1)


def test_join_state_step_indexes_stay_dense_per_key(tmp_path):
    """Three rows of one key, the middle one evicted: the two left keep indexes 0 and 1 and
    ``keyToNumValues`` says 2 (Spark's layout of the two stores)."""
    import pyarrow as pa

    from statestream.operators.stream_join import JoinStateStep, _providers

    rows = [_new(0, 7, 10, 0), _new(0, 7, 0, 1), _new(0, 7, 20, 2)]
    schema, side_row, table = _step_input(rows)
    key_schema = pa.schema([pa.field("__k0", pa.int64())])
    row_schemas = (pa.schema(list(side_row(0))), pa.schema(list(side_row(1))))
    step = JoinStateStep(
        state_root=str(tmp_path), run_id="r", operator_id=0, version=0, join_type="Inner", input_schema=schema,
        key_schema=key_schema, row_schemas=row_schemas, output_schema=pa.schema(list(side_row(0)) + list(side_row(1))),
        event_times=((1, False), (1, False)),
    )
    step.process(0, table.to_batches())
    _, _, empty = _step_input([])
    evicting = JoinStateStep(**{**step.__dict__, "version": 1, "state_watermarks": (("value", 1_714_521_600_000), None)})
    _, m = evicting.process(0, empty.to_batches())
    assert (m["numRemovedStateRows"], m["numTotalStateRows"]) == (1, 2)
    providers = _providers(str(tmp_path), "r", 0, 0, key_schema, row_schemas, None)
    kwi = providers["left-keyWithIndexToValue"].get_read_store(2).table()
    assert sorted(zip(kwi.column("index").to_pylist(), [v["__s0_0"] for v in kwi.column("value").to_pylist()])) == [(0, 7), (1, 7)]
    k2n = providers["left-keyToNumValues"].get_read_store(2).table()
    assert k2n.to_pylist() == [{"__k0": 7, "value": 2}]
