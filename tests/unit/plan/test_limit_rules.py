"""Pure tests of the streaming limit: planning rules (Spark's StreamingGlobalLimitStrategy and
the optimizer rules that merge or drop limits), IncrementalExecution's rules for it, and the
global limit's state step over a real state store directory (no Spark session)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from statestream.operators.aggregate import ShuffleExchangeExec
from statestream.operators.basic import SortExec, StatelessExec, StreamingRelationExec
from statestream.operators.limit import (
    CollectLimitExec,
    GlobalLimitStateStep,
    LocalLimitExec,
    LocalTableScanExec,
    SinglePartitionExchangeExec,
    StreamingGlobalLimitExec,
    StreamingLocalLimitExec,
    TakeOrderedAndProjectExec,
    has_no_stateful_op,
)
from statestream.operators.stateful import StateStoreSaveExec
from statestream.plan import logical as L
from statestream.plan.explain import tree_string
from statestream.plan.incremental import IncrementalExecution, state_writers
from statestream.plan.limits import combine_limits, generates_streaming_appends, max_rows, push_projections_below_limits
from statestream.plan.planner import plan_streaming_query
from statestream.state.provider import clear_provider_cache

WM = {L.WATERMARK_DELAY_KEY: 1000}


@dataclass
class FakeTemplate:
    schema: StructType


def tpl(*names: str) -> FakeTemplate:
    return FakeTemplate(StructType([StructField(n, LongType()) for n in names]))


def source() -> L.StreamingRelation:
    return L.StreamingRelation(template=tpl("value"))


def limit(child: L.LogicalPlan, n: int) -> L.Limit:
    return L.Limit(template=child.template, child=child, n=n)


def project(child: L.LogicalPlan, name: str = "v") -> L.Stateless:
    return L.Stateless(template=tpl(name), child=child, op="Project", description=f"[{name}]", transform=lambda df: df)


def filt(child: L.LogicalPlan) -> L.Stateless:
    return L.Stateless(template=child.template, child=child, op="Filter", description="x", transform=lambda df: df)


def agg(child: L.LogicalPlan, keys: int = 1) -> L.Aggregate:
    return L.Aggregate(template=tpl(*(["value"] * keys), "count"), child=child, grouping=tuple(object() for _ in range(keys)), aggregates=(object(),))


def plan(node: L.LogicalPlan, mode: str = "append"):
    relations = node.find(L.StreamingRelation)
    return plan_streaming_query(node, 2, {id(r): i for i, r in enumerate(relations)}, output_mode=mode)


def names(op) -> list[str]:
    return [type(n).__name__ for n in op.walk()]


# ------------------------------------------------------------------------------------------
# rules over the logical plan
# ------------------------------------------------------------------------------------------


def test_max_rows_follows_spark():
    s = source()
    assert max_rows(s) is None
    assert max_rows(limit(s, 3)) == 3
    assert max_rows(filt(project(limit(s, 3)))) == 3
    assert max_rows(limit(limit(s, 3), 5)) == 3
    assert max_rows(agg(s, keys=0)) == 1
    assert max_rows(agg(limit(s, 4))) == 4  # a grouped aggregate has at most one row per input row
    assert max_rows(agg(s)) is None
    assert max_rows(L.Union(template=s.template, inputs=(limit(s, 2), limit(source(), 3)))) == 5
    wm = L.EventTimeWatermark(template=s.template, child=limit(s, 2), column="value")
    assert max_rows(wm) is None  # Spark's EventTimeWatermark gives no bound


def test_combine_limits_through_projections_only():
    s = source()
    n, child = combine_limits(limit(limit(s, 4), 2))
    assert (n, child) == (2, s)
    n, child = combine_limits(limit(limit(limit(s, 4), 100), 3))
    assert (n, child) == (3, s)
    p = project(limit(s, 5))
    n, child = combine_limits(limit(p, 3))
    assert n == 3 and isinstance(child, L.Stateless) and child.op == "Project" and child.child is s
    f = filt(limit(s, 5))
    n, child = combine_limits(limit(f, 3))
    assert n == 3 and child is f  # a filter keeps the two limits apart


def test_projections_move_below_limits():
    s = source()
    lim = limit(filt(s), 3)
    top = project(project(lim, "a"), "b")
    out = push_projections_below_limits(top)
    assert isinstance(out, L.Limit) and out.n == 3 and out.schema.names == ["b"]
    assert [type(n).__name__ for n in out.walk()] == ["Limit", "Stateless", "Stateless", "Stateless", "StreamingRelation"]
    assert [n.op for n in out.walk() if isinstance(n, L.Stateless)] == ["Project", "Project", "Filter"]
    assert out.child.description == "[b]" and out.child.child.description == "[a]"
    assert next(n for n in out.walk() if isinstance(n, L.StreamingRelation)) is s
    # a filter on a limit stays above it; nothing changes, nothing is rebuilt
    f = filt(limit(s, 3))
    assert push_projections_below_limits(f) is f
    # the two limits become adjacent and merge
    n, child = combine_limits(push_projections_below_limits(limit(project(limit(s, 5)), 9)))
    assert n == 5 and isinstance(child, L.Stateless) and child.child is s


def test_generates_streaming_appends():
    s = source()
    assert generates_streaming_appends(s, "append")
    assert generates_streaming_appends(agg(s), "append")
    assert generates_streaming_appends(s, "complete")
    assert not generates_streaming_appends(agg(s), "complete")
    assert not generates_streaming_appends(L.LogicalPlan(template=tpl("value")), "append")


# ------------------------------------------------------------------------------------------
# planning
# ------------------------------------------------------------------------------------------


def test_plain_limit_plan_and_local_limit_conversion():
    p = plan(limit(source(), 3))
    assert names(p) == ["StreamingGlobalLimitExec", "SinglePartitionExchangeExec", "StreamingLocalLimitExec", "StreamingRelationExec"]
    inc = IncrementalExecution("/ckpt/state", "run", 7, 2, "append", 0, 0).apply(p)
    assert names(inc) == ["StreamingGlobalLimitExec", "SinglePartitionExchangeExec", "LocalLimitExec", "StreamingRelationExec"]
    g = inc
    assert isinstance(g, StreamingGlobalLimitExec) and g.n == 3 and g.output_mode == "append"
    assert g.state_info is not None and (g.state_info.operator_id, g.state_info.store_version, g.state_info.num_partitions) == (0, 7, 2)
    text = tree_string(inc)
    assert text.splitlines()[0] == (
        "StreamingGlobalLimit 3, state info [ checkpoint = file:/ckpt/state, runId = run, opId = 0, ver = 7, "
        "numPartitions = 2] stateStoreCkptIds = None, Append"
    )
    assert "+- Exchange SinglePartition, ENSURE_REQUIREMENTS" in text and "+- *(1) LocalLimit 3" in text


def test_limit_over_aggregation_keeps_the_draining_local_limit_and_ids_in_pre_order():
    w = L.EventTimeWatermark(template=FakeTemplate(StructType([StructField("t", TimestampType(), True, WM)])), child=source(), column="t")
    a = L.Aggregate(
        template=FakeTemplate(StructType([StructField("t", TimestampType(), True, WM), StructField("count", LongType())])),
        child=w,
        grouping=(object(),),
        aggregates=(object(),),
    )
    from unittest import mock

    fake_info = mock.Mock(key_columns=("__k0",), calls=(), grouping_names=("t",))
    with mock.patch("statestream.plan.planner.aggregation_info", return_value=fake_info):
        p = plan(limit(a, 1))
    inc = IncrementalExecution("/s", "r", 0, 2, "append", 0, 0).apply(p)
    assert isinstance(inc.child.child, StreamingLocalLimitExec)  # the state step below must finish its input
    writers = state_writers(inc)
    assert [type(w).__name__ for w in writers] == ["StreamingGlobalLimitExec", "StateStoreSaveExec"]
    assert [w.state_info.operator_id for w in writers] == [0, 1]
    assert not has_no_stateful_op(inc.child.child.child)


def test_limit_below_aggregation_in_complete_mode_is_stateful():
    from unittest import mock

    fake_info = mock.Mock(key_columns=("__k0",), calls=(), grouping_names=("value",))
    with mock.patch("statestream.plan.planner.aggregation_info", return_value=fake_info):
        p = plan(agg(limit(source(), 5)), "complete")
    inc = IncrementalExecution("/s", "r", 0, 2, "complete", 0, 0).apply(p)
    writers = state_writers(inc)
    assert [type(w).__name__ for w in writers] == ["StateStoreSaveExec", "StreamingGlobalLimitExec"]
    assert [w.state_info.operator_id for w in writers] == [0, 1]
    assert writers[1].output_mode == "complete"
    # one partition comes out of the limit: the aggregation's merge after the exchange (which
    # asks for the keys' partitioning itself) is planned as for any other input
    merges = [n for n in inc.walk() if type(n).__name__ == "StreamingAggregateExec" and n.mode == "PartialMerge" and n.step == "exchange"]
    assert len(merges) == 1


def test_limit_after_aggregation_in_complete_mode_is_a_batch_limit():
    from unittest import mock

    fake_info = mock.Mock(key_columns=("__k0",), calls=(), grouping_names=("value",))
    a = agg(source())
    with mock.patch("statestream.plan.planner.aggregation_info", return_value=fake_info):
        p = plan(limit(a, 2), "complete")
        sorted_ = L.Sort(template=a.template, child=a, transform=lambda df: df, description="[value]")
        q = plan(limit(sorted_, 2), "complete")
        r = plan(limit(project(sorted_), 2), "complete")
    assert isinstance(p, CollectLimitExec) and p.drain and p.simple_string() == "CollectLimit 2"
    assert not any(isinstance(n, StreamingGlobalLimitExec) for n in p.walk())
    assert isinstance(q, TakeOrderedAndProjectExec) and isinstance(q.child, type(p.child))
    assert isinstance(r, CollectLimitExec) and not r.drain  # the sort below reads everything; keep its order


def test_limit_zero_is_an_empty_relation():
    p = plan(limit(filt(source()), 0))
    assert isinstance(p, LocalTableScanExec) and p.simple_string() == "LocalTableScan <empty>, [value]"
    assert not any(isinstance(n, StreamingRelationExec) for n in p.walk())


def test_two_limits_apart_share_a_stage():
    p = plan(limit(filt(limit(source(), 5)), 3))
    inc = IncrementalExecution("/s", "r", 0, 2, "append", 0, 0).apply(p)
    # no exchange above the outer local limit: the inner global limit's output is one partition
    assert names(inc)[:3] == ["StreamingGlobalLimitExec", "StreamingLocalLimitExec", "StatelessExec"]
    assert [w.state_info.operator_id for w in state_writers(inc)] == [0, 1]
    assert [w.n for w in state_writers(inc)] == [3, 5]


def test_limit_eliminated_when_child_is_bounded():
    p = plan(limit(project(limit(source(), 2)), 4))
    assert [w.n for w in p.walk() if isinstance(w, StreamingGlobalLimitExec)] == [2]


def test_has_no_stateful_op_stops_at_exchanges():
    save = StateStoreSaveExec(child=StreamingRelationExec())
    assert not has_no_stateful_op(StatelessExec(child=save))
    assert has_no_stateful_op(StatelessExec(child=ShuffleExchangeExec(child=save)))
    assert has_no_stateful_op(SinglePartitionExchangeExec(child=save))
    assert has_no_stateful_op(SortExec(child=StreamingRelationExec()))
    assert not has_no_stateful_op(StatelessExec(child=StreamingGlobalLimitExec(child=StreamingRelationExec())))


def test_update_mode_limit_is_refused_before_planning():
    from statestream.plan.analysis import check_for_streaming

    class NoFacts:
        def facts(self, node):
            return []

    with pytest.raises(Exception, match="Limits are not supported on streaming DataFrames/Datasets in Update output mode"):
        check_for_streaming(limit(source(), 1), "update", inspector=NoFacts())


# ------------------------------------------------------------------------------------------
# the state step
# ------------------------------------------------------------------------------------------


def _batches(*sizes: int, start: int = 0) -> list[pa.RecordBatch]:
    out = []
    for s in sizes:
        out.append(pa.record_batch({"value": pa.array(range(start, start + s), pa.int64())}))
        start += s
    return out


def _step(root: str, version: int, n: int, run_id: str = "run") -> GlobalLimitStateStep:
    return GlobalLimitStateStep(state_root=root, run_id=run_id, operator_id=0, version=version, limit=n)


def _values(out: list[pa.RecordBatch]) -> list[int]:
    return [v for b in out for v in b.column(0).to_pylist()]


def test_state_step_counts_across_batches_and_versions(tmp_path):
    root = str(tmp_path / "state")
    out, m = _step(root, 0, 4).process(0, iter(_batches(2)))
    assert _values(out) == [0, 1]
    assert (m["numOutputRows"], m["numUpdatedStateRows"], m["numTotalStateRows"]) == (2, 1, 1)
    out, m = _step(root, 1, 4).process(0, iter(_batches(3, 1, start=10)))
    assert _values(out) == [10, 11]
    assert (m["numOutputRows"], m["numUpdatedStateRows"], m["numTotalStateRows"]) == (2, 1, 1)
    out, m = _step(root, 2, 4).process(0, iter(_batches(3, start=20)))
    assert out == [] and (m["numOutputRows"], m["numUpdatedStateRows"], m["numTotalStateRows"]) == (0, 0, 1)
    assert sorted(p.name for p in (tmp_path / "state" / "0" / "0").iterdir() if p.suffix == ".delta") == [
        "1.delta",
        "2.delta",
        "3.delta",
    ]


def test_state_step_rerun_of_a_batch_reads_the_version_before_it(tmp_path):
    """A batch run again after a crash opens the same version, so it emits the same number of
    rows and rewrites the same next version: never more than ``n`` in total."""
    root = str(tmp_path / "state")
    _step(root, 0, 3).process(0, iter(_batches(2)))
    out1, _ = _step(root, 1, 3).process(0, iter(_batches(5)))
    clear_provider_cache()
    out2, m = _step(root, 1, 3, run_id="restarted").process(0, iter(_batches(5)))
    assert len(_values(out1)) == len(_values(out2)) == 1
    out3, m = _step(root, 2, 3, run_id="restarted").process(0, iter(_batches(5)))
    assert out3 == [] and m["numTotalStateRows"] == 1


def test_state_step_nothing_emitted_leaves_no_key(tmp_path):
    out, m = _step(str(tmp_path), 0, 5).process(0, iter([]))
    assert out == [] and (m["numUpdatedStateRows"], m["numTotalStateRows"]) == (0, 0)


def test_state_step_refuses_a_partition_other_than_zero(tmp_path):
    with pytest.raises(RuntimeError, match="single partition"):
        _step(str(tmp_path), 0, 5).process(1, iter([]))


# ------------------------------------------------------------------------------------------
# input rows from the scans' metrics
# ------------------------------------------------------------------------------------------


class _Seq:
    def __init__(self, items):
        self._items = items

    def size(self):
        return len(self._items)

    def apply(self, i):
        return self._items[i]


class _Option:
    def __init__(self, value):
        self._value = value

    def isDefined(self):
        return self._value is not None

    def get(self):
        return self

    def value(self):
        return self._value


class _JvmNode:
    def __init__(self, rows=None, *children):
        self._rows = rows
        self._children = children

    def children(self):
        return _Seq(list(self._children))

    def metrics(self):
        return self

    def get(self, name):
        return _Option(self._rows if name == "numOutputRows" else None)


class _FakeResult:
    def __init__(self, plan):
        self._jdf = self
        self._plan = plan

    def queryExecution(self):
        return self

    def executedPlan(self):
        return self._plan


def test_input_rows_by_source_maps_leaves_in_plan_order():
    from statestream.operators.basic import UnionExec
    from statestream.operators.limit import input_rows_by_source, scan_input_rows

    ours = StreamingGlobalLimitExec(
        child=LocalLimitExec(child=UnionExec(inputs=(StreamingRelationExec(source_index=1), StreamingRelationExec(source_index=0))))
    )
    executed = _JvmNode(None, _JvmNode(None, _JvmNode(4096), _JvmNode(None, _JvmNode(3))))
    assert scan_input_rows(_FakeResult(executed)) == [4096, 3]
    assert input_rows_by_source(ours, _FakeResult(executed)) == {1: 4096, 0: 3}
    # a leaf the optimizer removed: the counts cannot be attributed
    assert input_rows_by_source(ours, _FakeResult(_JvmNode(None, _JvmNode(7)))) is None
    # an empty relation (limit(0)) in the plan is a leaf of its own, counted for no source
    with_empty = UnionExec(inputs=(LocalTableScanExec(output=("value",)), StreamingRelationExec(source_index=0)))
    assert input_rows_by_source(with_empty, _FakeResult(_JvmNode(None, _JvmNode(0), _JvmNode(5)))) == {0: 5}
    assert input_rows_by_source(ours, object()) is None
