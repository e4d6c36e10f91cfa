"""When a batch skips the partial aggregation (``runtime.partial_aggregation``) and which
aggregations then skip it (``operators.aggregate.skips_partial``): pure rules, no Spark."""

from __future__ import annotations

import pytest

from statestream.operators.aggregate import PARTIAL_KEPT, PARTIAL_SKIPPABLE, PARTIAL_SKIPPABLE_FED_BY_SOURCE, skips_partial
from statestream.operators.context import SKIP_ALL, SKIP_NONE, SKIP_SOURCE_FED
from statestream.runtime.partial_aggregation import (
    MIN_KEYS_PER_ROW,
    MIN_ROWS,
    SKIP_PARTIAL_CONF,
    skip_partial_setting,
)
from statestream.runtime.partial_aggregation import skip_partial_aggregation as decide

#: a plan with one aggregation that reads a source's rows
FED = {PARTIAL_SKIPPABLE_FED_BY_SOURCE}


def skip_partial_aggregation(last, setting, skippable=FED, **kwargs):
    return decide(last, setting, skippable, **kwargs)


def progress(rows: int, *updated: int, name: str = "stateStoreSave") -> dict:
    return {"numInputRows": rows, "stateOperators": [{"operatorName": name, "numRowsUpdated": u} for u in updated]}


def test_auto_skips_when_the_last_batch_had_nearly_a_key_per_row():
    assert skip_partial_aggregation(progress(1_000_000, 630_000), "auto") == SKIP_SOURCE_FED


def test_auto_keeps_the_step_when_keys_repeat():
    # W1: five windows from a million rows
    assert skip_partial_aggregation(progress(1_000_000, 5), "auto") == SKIP_NONE
    just_under = int(MIN_KEYS_PER_ROW * 1_000_000) - 1
    assert skip_partial_aggregation(progress(1_000_000, just_under), "auto") == SKIP_NONE
    assert skip_partial_aggregation(progress(1_000_000, just_under + 1), "auto") == SKIP_SOURCE_FED


def test_auto_keeps_the_step_on_small_batches_and_the_first_batch():
    assert skip_partial_aggregation(progress(MIN_ROWS - 1, MIN_ROWS - 1), "auto") == SKIP_NONE
    assert skip_partial_aggregation(progress(MIN_ROWS, MIN_ROWS), "auto") == SKIP_SOURCE_FED
    assert skip_partial_aggregation(None, "auto") == SKIP_NONE
    assert skip_partial_aggregation({}, "auto") == SKIP_NONE
    assert skip_partial_aggregation(progress(0), "auto", min_rows=0) == SKIP_NONE


def test_auto_needs_every_aggregation_to_have_its_keys():
    assert skip_partial_aggregation(progress(1_000_000, 900_000, 10), "auto") == SKIP_NONE
    assert skip_partial_aggregation(progress(1_000_000, 900_000, 800_000), "auto") == SKIP_SOURCE_FED


def test_auto_reads_only_aggregations():
    # a deduplication stores a key per row too, but has no partial step to skip
    assert skip_partial_aggregation(progress(1_000_000, 900_000, name="dedupe"), "auto") == SKIP_NONE
    mixed = progress(1_000_000, 900_000)
    mixed["stateOperators"].append({"operatorName": "dedupe", "numRowsUpdated": 3})
    assert skip_partial_aggregation(mixed, "auto") == SKIP_SOURCE_FED


def test_the_thresholds_can_be_given():
    assert skip_partial_aggregation(progress(10, 3), "auto", min_rows=1, min_keys_per_row=0.3) == SKIP_SOURCE_FED
    assert skip_partial_aggregation(progress(10, 2), "auto", min_rows=1, min_keys_per_row=0.3) == SKIP_NONE


def test_a_request_no_aggregation_follows_keeps_the_shape():
    # the plan template of a batch that would skip nothing is the one of a batch that keeps all
    assert skip_partial_aggregation(progress(1_000_000, 900_000), "auto", {PARTIAL_SKIPPABLE}) == SKIP_NONE
    assert skip_partial_aggregation(progress(1_000_000, 900_000), "auto", {PARTIAL_KEPT}) == SKIP_NONE
    assert skip_partial_aggregation(progress(1_000_000, 900_000), "auto", set()) == SKIP_NONE
    assert skip_partial_aggregation(None, "true", {PARTIAL_KEPT}) == SKIP_NONE
    assert skip_partial_aggregation(None, "true", {PARTIAL_KEPT, PARTIAL_SKIPPABLE}) == SKIP_ALL
    assert skip_partial_aggregation(progress(1_000_000, 900_000), "auto", {PARTIAL_SKIPPABLE, PARTIAL_SKIPPABLE_FED_BY_SOURCE}) == SKIP_SOURCE_FED


def test_the_request_values_are_apart_from_the_aggregations_marks():
    assert not {SKIP_NONE, SKIP_SOURCE_FED, SKIP_ALL} & {PARTIAL_KEPT, PARTIAL_SKIPPABLE, PARTIAL_SKIPPABLE_FED_BY_SOURCE}


def test_true_and_false_do_not_look_at_the_last_batch():
    assert skip_partial_aggregation(None, "true") == SKIP_ALL
    assert skip_partial_aggregation(progress(1_000_000, 5), "true") == SKIP_ALL
    assert skip_partial_aggregation(progress(1_000_000, 1_000_000), "false") == SKIP_NONE


@pytest.mark.parametrize(
    "value, expected",
    [(None, "auto"), ("auto", "auto"), ("TRUE", "true"), (" false ", "false")],
)
def test_the_setting(value, expected):
    assert skip_partial_setting(lambda key, default: value if value is not None else default) == expected


def test_a_bad_setting_names_the_conf():
    with pytest.raises(ValueError, match=SKIP_PARTIAL_CONF.replace(".", r"\.") + ".*auto, true or false.*'sometimes'"):
        skip_partial_setting(lambda key, default: "sometimes")


@pytest.mark.parametrize(
    "partial_skip, requested, skips",
    [
        (PARTIAL_KEPT, SKIP_ALL, False),
        (PARTIAL_KEPT, SKIP_SOURCE_FED, False),
        (PARTIAL_SKIPPABLE, SKIP_ALL, True),
        (PARTIAL_SKIPPABLE, SKIP_SOURCE_FED, False),
        (PARTIAL_SKIPPABLE_FED_BY_SOURCE, SKIP_ALL, True),
        (PARTIAL_SKIPPABLE_FED_BY_SOURCE, SKIP_SOURCE_FED, True),
        (PARTIAL_SKIPPABLE_FED_BY_SOURCE, SKIP_NONE, False),
    ],
)
def test_which_aggregations_skip(partial_skip, requested, skips):
    assert skips_partial(partial_skip, requested) is skips
