"""The parts of batch plan reuse that need no Spark: a state step's per-batch fields from a
local property (``StateStep.for_this_task``) and observation values already read."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from statestream.operators.base import batch_args_property
from statestream.operators.state_step import StateStep
from statestream.operators.watermark import observed_values, stats_from_observation


@dataclass(frozen=True)
class _Step(StateStep):
    operator_id: int = 3
    version: int = 0
    w_late_ms: int | None = None

    batch_fields = ("version", "w_late_ms")


class _Task:
    def __init__(self, props: dict) -> None:
        self.props = props

    def getLocalProperty(self, key: str):
        return self.props.get(key)


def _in_task(monkeypatch, props: dict) -> None:
    import pyspark

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: _Task(props)))


def test_a_step_without_a_property_keeps_its_own_fields():
    step = _Step(version=4)
    assert step.for_this_task() is step


def test_a_step_takes_the_batch_fields_from_its_property(monkeypatch):
    key = batch_args_property(3)
    _in_task(monkeypatch, {key: json.dumps({"version": 7, "w_late_ms": 5000})})
    step = _Step(version=1, w_late_ms=0, batch_args_property=key)
    got = step.for_this_task()
    assert (got.version, got.w_late_ms, got.batch_args_property) == (7, 5000, None)


def test_a_job_without_the_property_fails_rather_than_run_another_batchs_version(monkeypatch):
    key = batch_args_property(3)
    _in_task(monkeypatch, {})
    with pytest.raises(RuntimeError, match=r"state operator 3 .*spark\.statestream\.batchArgs\.operator3.* not set"):
        _Step(batch_args_property=key).for_this_task()


def test_a_property_with_fields_the_step_does_not_take_is_refused(monkeypatch):
    key = batch_args_property(3)
    _in_task(monkeypatch, {key: json.dumps({"version": 7, "w_evict_ms": 1})})
    with pytest.raises(RuntimeError, match=r"unexpected batch arguments \['w_evict_ms'\]"):
        _Step(batch_args_property=key).for_this_task()


def test_observation_values_read_by_name_pass_through():
    values = {"min": 1000, "max": 3000, "sum_hi": 0, "sum_mid": 0, "sum_lo": 4000, "count": 2}
    assert observed_values(values) is values
    assert observed_values(None) is None
    assert stats_from_observation(values) == (1000, 3000, 2000.0, 2)


def test_which_plans_may_serve_later_batches():
    from statestream.operators.basic import StreamingRelationExec, UnionExec
    from statestream.operators.dedup import StreamingDeduplicateExec
    from statestream.operators.limit import LocalLimitExec
    from statestream.operators.limit import StreamingGlobalLimitExec
    from statestream.operators.session_window import SessionWindowStateStoreSaveExec
    from statestream.operators.stateful import StateStoreRestoreExec, StateStoreSaveExec
    from statestream.runtime.batch_plan_reuse import reusable_plan

    scan = StreamingRelationExec()
    aggregation = StateStoreSaveExec(child=StateStoreRestoreExec(child=scan))
    assert reusable_plan(scan)  # stateless
    assert reusable_plan(aggregation)
    assert reusable_plan(UnionExec(inputs=(aggregation, scan)))  # the first input runs in the batch's job
    # a union runs a later stateful input on its own while the batch is built: its rows are that batch's
    assert not reusable_plan(UnionExec(inputs=(scan, aggregation)))
    assert reusable_plan(StreamingDeduplicateExec(child=scan))  # its step takes the version and watermarks too
    assert reusable_plan(SessionWindowStateStoreSaveExec(child=scan))
    assert not reusable_plan(StreamingGlobalLimitExec(child=scan))  # its step takes no property
    assert not reusable_plan(LocalLimitExec(child=aggregation))
