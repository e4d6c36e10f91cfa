"""The wait between triggers (runtime/trigger_executor), without Spark."""

from __future__ import annotations

import pytest

from statestream.runtime.trigger_executor import POLLING_DELAY_S, time_to_next_trigger


def test_without_an_interval_a_batch_is_followed_at_once() -> None:
    assert time_to_next_trigger(0, 0.25, ran_batch=True) == 0.0


def test_without_an_interval_a_trigger_without_data_waits_the_polling_delay() -> None:
    assert time_to_next_trigger(0, 0.0, ran_batch=False) == POLLING_DELAY_S == 0.010


@pytest.mark.parametrize("ran_batch", [True, False])
def test_an_interval_waits_for_what_is_left_of_it(ran_batch: bool) -> None:
    assert time_to_next_trigger(1000, 0.25, ran_batch) == pytest.approx(0.75)


@pytest.mark.parametrize("ran_batch", [True, False])
def test_a_batch_longer_than_its_interval_starts_the_next_trigger_at_once(ran_batch: bool) -> None:
    assert time_to_next_trigger(1000, 1.5, ran_batch) == 0.0
