"""Pure rules of ``plan/bindings.py``: the metadata ``withWatermark`` gives its output, and the
registry that remembers which DataFrame a handed-out column reference came from."""

from __future__ import annotations

from statestream.plan.bindings import Binding, BindingRegistry, event_time_metadata
from statestream.plan.logical import TIME_WINDOW_KEY, WATERMARK_DELAY_KEY

# -- event_time_metadata ------------------------------------------------------------------------


def test_marks_only_the_event_time_column():
    assert event_time_metadata([{}, {}, {}], 1, 600_000) == {1: {WATERMARK_DELAY_KEY: 600_000}}


def test_moves_the_marker_off_every_other_column_and_keeps_their_other_keys():
    md = [{WATERMARK_DELAY_KEY: 5_000, TIME_WINDOW_KEY: True}, {}, {WATERMARK_DELAY_KEY: 5_000, "comment": "x"}]
    assert event_time_metadata(md, 1, 10_000) == {
        0: {TIME_WINDOW_KEY: True},
        1: {WATERMARK_DELAY_KEY: 10_000},
        2: {"comment": "x"},
    }


def test_redefining_the_delay_on_the_same_column_replaces_it():
    md = [{WATERMARK_DELAY_KEY: 5_000, TIME_WINDOW_KEY: True}]
    assert event_time_metadata(md, 0, 0) == {0: {WATERMARK_DELAY_KEY: 0, TIME_WINDOW_KEY: True}}


def test_unchanged_columns_are_not_listed():
    assert event_time_metadata([{WATERMARK_DELAY_KEY: 7}, {"a": 1}], 0, 7) == {}


def test_input_metadata_is_not_mutated():
    md = [{WATERMARK_DELAY_KEY: 1}, {}]
    event_time_metadata(md, 1, 2)
    assert md == [{WATERMARK_DELAY_KEY: 1}, {}]


# -- BindingRegistry ----------------------------------------------------------------------------


class Token:
    """Stands in for a JVM object: ``same`` compares tokens by identity, keys may collide."""


def same(a: object, b: object) -> bool:
    return a is b


def test_lookup_needs_key_and_same_object():
    reg: BindingRegistry[str] = BindingRegistry()
    t1, t2 = Token(), Token()
    reg.remember(42, t1, Binding("words", "timestamp"))
    assert reg.lookup(42, t1, same) == Binding("words", "timestamp")
    assert reg.lookup(42, t2, same) is None  # an identity-hash collision is not a match
    assert reg.lookup(43, t1, same) is None


def test_colliding_keys_keep_both_bindings():
    reg: BindingRegistry[str] = BindingRegistry()
    t1, t2 = Token(), Token()
    reg.remember(7, t1, Binding("a", "x"))
    reg.remember(7, t2, Binding("b", "y"))
    assert reg.lookup(7, t1, same) == Binding("a", "x")
    assert reg.lookup(7, t2, same) == Binding("b", "y")
    assert len(reg) == 2


def test_capacity_forgets_the_oldest_references():
    reg: BindingRegistry[str] = BindingRegistry(capacity=2)
    tokens = [Token() for _ in range(3)]
    for i, t in enumerate(tokens):
        reg.remember(i, t, Binding("p", f"c{i}"))
    assert len(reg) == 2
    assert reg.lookup(0, tokens[0], same) is None  # falls back to resolution by name
    assert reg.lookup(2, tokens[2], same) == Binding("p", "c2")


def test_foreign_is_true_only_for_references_of_other_dataframes():
    reg: BindingRegistry[object] = BindingRegistry()
    grouped, before = object(), object()
    assert not reg.foreign(grouped)
    reg.remember(1, Token(), Binding(grouped, "word"))
    assert not reg.foreign(grouped)  # its own columns resolve by name to the same attribute
    reg.remember(2, Token(), Binding(before, "timestamp"))
    assert reg.foreign(grouped)
