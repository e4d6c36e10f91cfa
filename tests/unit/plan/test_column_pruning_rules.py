"""Pure tests of the rule that finds aggregate columns no operator reads
(``statestream/plan/column_pruning.py``), no Spark session: operator shapes over attribute ids.

The rule mirrors Spark 4.1's ``ColumnPruning`` through an aggregation as it shows in streaming
batches' plans; ``tests/differential/test_fuzz_findings.py`` runs the same shapes on both engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import LongType, StructField, StructType

from statestream.plan.column_pruning import Named, Operator, _candidates, unread_aggregate_outputs
from statestream.plan.logical import Aggregate, Deduplicate, Stateless, StreamingRelation, Union

SCAN = Operator("LocalRelation", (1, 2, 3))  # k, v, w


def first_aggregation(child: Operator = SCAN) -> Operator:
    """``groupBy(k).agg(sum(v) as 4, max(w) as 5)``."""
    return Operator(
        "Aggregate",
        (1, 4, 5),
        (child,),
        named=(Named(1, frozenset({1})), Named(4, frozenset({2}), True), Named(5, frozenset({3}), True)),
        grouping=frozenset({1}),
    )


def project(child: Operator, *named: Named) -> Operator:
    return Operator("Project", tuple(n.id for n in named), (child,), named=named)


def count_by_key(child: Operator, out: int = 6) -> Operator:
    """``groupBy(k).agg(count(*))`` over ``child`` (key id 1)."""
    return Operator("Aggregate", (out, out + 1), (child,), named=(Named(out, frozenset({1})), Named(out + 1, aggregate=True)), grouping=frozenset({1}))


def test_an_aggregation_at_the_top_keeps_every_column():
    assert unread_aggregate_outputs(first_aggregation()) == {(1, 4, 5): frozenset()}


def test_a_projection_that_leaves_a_column_out_prunes_it():
    top = project(first_aggregation(), Named(1, frozenset({1})), Named(8, frozenset({5})))
    assert unread_aggregate_outputs(top)[(1, 4, 5)] == frozenset({4})


def test_a_second_aggregation_reading_only_the_key_prunes_every_aggregate():
    assert unread_aggregate_outputs(count_by_key(first_aggregation()))[(1, 4, 5)] == frozenset({4, 5})


def test_a_filter_between_passes_what_it_reads():
    filtered = Operator("Filter", (1, 4, 5), (first_aggregation(),), reads=frozenset({4}))
    assert unread_aggregate_outputs(count_by_key(filtered))[(1, 4, 5)] == frozenset({5})


def test_a_projection_whose_output_nobody_needs_reads_nothing():
    # select(k, sum as s) between the aggregations: s is not needed above, so sum is not either
    middle = project(first_aggregation(), Named(1, frozenset({1})), Named(9, frozenset({4})))
    assert unread_aggregate_outputs(count_by_key(middle))[(1, 4, 5)] == frozenset({4, 5})


def test_an_expand_reads_what_its_needed_positions_read():
    # window()'s Expand over the aggregation: position 0 (the window) reads k, position 1 copies max
    expand = Operator("Expand", (10, 11), (first_aggregation(),), columns=(frozenset({1}), frozenset({5})))
    top = Operator("Aggregate", (12, 13), (expand,), named=(Named(12, frozenset({10})), Named(13, aggregate=True)), grouping=frozenset({10}))
    assert unread_aggregate_outputs(top)[(1, 4, 5)] == frozenset({4, 5})
    top_reading_max = Operator("Aggregate", (12, 13), (expand,), named=(Named(12, frozenset({10})), Named(13, frozenset({11}), True)), grouping=frozenset({10}))
    assert unread_aggregate_outputs(top_reading_max)[(1, 4, 5)] == frozenset({4})


def test_a_union_maps_positions_to_each_input():
    other = Operator("LocalRelation", (20, 21, 22))
    union = Operator("Union", (1, 4, 5), (first_aggregation(), other))
    top = project(union, Named(1, frozenset({1})), Named(5, frozenset({5})))
    assert unread_aggregate_outputs(top)[(1, 4, 5)] == frozenset({4})


def test_an_aggregation_reached_twice_keeps_what_either_path_needs():
    agg = first_aggregation()
    left = project(agg, Named(1, frozenset({1})), Named(4, frozenset({4})))
    right = project(agg, Named(1, frozenset({1})), Named(50))  # a literal in sum's place
    union = Operator("Union", (1, 4), (left, right))
    assert unread_aggregate_outputs(union)[(1, 4, 5)] == frozenset({5})


def test_an_unknown_operator_needs_every_column_below_it():
    opaque = Operator("FlatMapGroupsInPandasWithState", (30,), (first_aggregation(),))
    assert unread_aggregate_outputs(opaque)[(1, 4, 5)] == frozenset()


def test_an_aggregation_without_grouping_keys_is_never_pruned():
    total = Operator("Aggregate", (4, 5), (SCAN,), named=(Named(4, frozenset({2}), True), Named(5, frozenset({3}), True)))
    assert unread_aggregate_outputs(project(total, Named(4, frozenset({4}))))[(4, 5)] == frozenset()


def test_a_join_passes_its_condition_to_both_sides():
    other = Operator("LocalRelation", (40, 41))
    join = Operator("Join", (1, 4, 5, 40, 41), (first_aggregation(), other), reads=frozenset({4, 40}))
    top = project(join, Named(41, frozenset({41})))
    assert unread_aggregate_outputs(top)[(1, 4, 5)] == frozenset({5})


# ------------------------------------------------------------------ which aggregations are read


@dataclass(frozen=True)
class Template:
    """A fake template: the schema is all the candidate rule reads."""

    schema: StructType


def _schema(*names: str) -> StructType:
    return StructType([StructField(n, LongType()) for n in names])


def _aggregate() -> Aggregate:
    source = StreamingRelation(template=Template(_schema("k", "v")))
    return Aggregate(template=Template(_schema("k", "s")), child=source, grouping=("k",), aggregates=("sum(v)",))


def test_an_aggregation_below_a_projection_is_a_candidate():
    agg = _aggregate()
    top = Stateless(template=Template(_schema("k")), child=agg)
    assert _candidates(top) == [agg]
    assert _candidates(agg) == []  # the query's output: every column is read


def test_an_aggregation_used_twice_is_not_pruned():
    # Spark's analyser renames the second use's attributes: its plan cannot say what each use reads
    agg = _aggregate()
    union = Union(template=Template(_schema("k", "s")), inputs=(Stateless(template=Template(_schema("k", "s")), child=agg), Stateless(template=Template(_schema("k", "s")), child=agg)))
    assert _candidates(union) == []


def test_an_aggregation_below_a_stand_in_template_is_not_pruned():
    # dropDuplicatesWithinWatermark keyed by a map: its template is its input's, which does not read the keys
    agg = _aggregate()
    below = Stateless(template=Template(_schema("k", "s")), child=agg)
    dedup = Deduplicate(template=below.template, child=below, keys=("s",), within_watermark=True)
    top = Stateless(template=Template(_schema("k")), child=dedup)
    assert _candidates(top) == []
