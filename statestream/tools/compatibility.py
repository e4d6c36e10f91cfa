"""Will a changed query restart from this checkpoint? Answered before the deploy.

``statestream checkpoint check CHECKPOINT --query module:function`` (and
``checkpointManager.check``) plans the new query against the checkpoint of the stopped one, as
its first batch would, without running anything or writing to the checkpoint, and lists each
difference:

* the query itself refused (an output mode or operator Spark does not allow on a stream);
* a source added or removed (the offsets record how many there were);
* a stateful operator added, removed or replaced (the operator metadata);
* a state key or value schema changed incompatibly (the state schema files, Spark's rule),
  and a Python state processor's variables, modes and timers (its restart rules);
* the number of state partitions the deploy asks for (``--partitions``): the checkpoint's count
  stays (Spark pins it) unless the state is repartitioned;
* the output mode and the watermarks of the last run (recorded by statestream at each start),
  which Spark does not check but which change what the query emits.

Each difference carries Spark's error class where Spark refuses the restart with one, and the
fix (a new checkpoint, a repartition, ...). The refusals are the ones a real restart makes: the
first batch's own per-operator step (``runtime.state_checks.check_operator_state``, Spark's
schema rule or a Python state operator's restart rules) runs on the same plan, with
``check_only`` (it writes nothing).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import SHUFFLE_PARTITIONS, OffsetSeqLog, partitions_of_batch
from statestream.checkpoint.query_record import read_query_record
from statestream.errors import IncompatibleRestartError, empty_offset_log_error
from statestream.plan import logical as L
from statestream.plan.analysis import check_for_streaming
from statestream.plan.incremental import state_writers
from statestream.plan.planner import plan_streaming_query
from statestream.runtime.state_checks import check_operator_state, operator_names, schema_check_enabled
from statestream.state import schema as S
from statestream.state.store import StateStoreConf

__all__ = ["CompatibilityReport", "Difference", "check_compatibility", "load_query_builder"]

log = logging.getLogger(__name__)

NEW_CHECKPOINT = "start the changed query on a new checkpoint (its state cannot carry over), or keep the old query"


@dataclass(frozen=True)
class Difference:
    """One difference between the checkpoint's query and the new one."""

    kind: str
    message: str
    fix: str
    #: Spark's error class when Spark refuses the restart for it, else None (the restart runs)
    error_class: str | None = None
    operator_id: int | None = None

    @property
    def refuses_restart(self) -> bool:
        return self.error_class is not None or self.kind in ("query refused", "sources changed")


@dataclass
class CompatibilityReport:
    """The verdict: ``compatible`` unless a difference refuses the restart."""

    checkpoint: str
    differences: list[Difference] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not any(d.refuses_restart for d in self.differences)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "compatible": self.compatible,
            "differences": [dict(asdict(d), refusesRestart=d.refuses_restart) for d in self.differences],
        }


def load_query_builder(spec: str) -> Callable[[Any], Any]:
    """``module:function`` (the module importable from the current directory or the path)."""
    import importlib
    import sys

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--query must be 'module:function', got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} (from --query {spec}): {exc}") from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ValueError(f"{module_name} has no function {attr!r} (from --query {spec})")
    return builder


def check_compatibility(ss: Any, checkpoint: str, build: Callable[[Any], Any], num_partitions: int | None = None) -> CompatibilityReport:
    """Plan the query ``build(ss)`` returns (``ss``: a StreamingSession) (a streaming DataFrame, or its ``writeStream`` with the
    output mode set) against ``checkpoint`` and list the differences (see the module docstring)."""
    fm = CheckpointFileManager(checkpoint)
    report = CompatibilityReport(fm.display())
    offsets = OffsetSeqLog(fm.child("offsets"))
    latest = offsets.get_latest()
    if latest is None:
        raise empty_offset_log_error(fm.display())
    last_committed = CommitLog(fm.child("commits")).get_latest_batch_id()
    entry = latest[1]

    query = build(ss)
    writer = query.writeStream if hasattr(query, "writeStream") else query
    plan, mode = writer._plan, writer._mode  # noqa: SLF001 - the writer's own plan and mode
    spark = ss.sparkSession
    conf = {k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {}
    try:
        check_for_streaming(plan, mode, conf)
    except Exception as exc:  # noqa: BLE001 - reported as start() would raise it
        report.differences.append(_refused(exc))
        return report

    relations = plan.find(L.StreamingRelation)
    if len(relations) != len(entry.offsets):
        report.differences.append(Difference(
            "sources changed",
            f"There are [{len(entry.offsets)}] sources in the checkpoint offsets and now there are [{len(relations)}] sources "
            "requested by the query",
            NEW_CHECKPOINT,
        ))

    pinned = partitions_of_batch(entry) or int(spark.conf.get(SHUFFLE_PARTITIONS))
    if num_partitions is not None and num_partitions != pinned:
        report.differences.append(Difference(
            "partitions",
            f"the checkpoint runs with {pinned} state partitions (Spark pins the count); the deploy's "
            f"{SHUFFLE_PARTITIONS}={num_partitions} would be ignored at restart",
            f"to run with {num_partitions}: statestream checkpoint repartition {fm.display()} --partitions {num_partitions}",
        ))

    try:
        physical = plan_streaming_query(plan, pinned, {id(r): i for i, r in enumerate(relations)}, StateStoreConf(), output_mode=mode)
    except Exception as exc:  # noqa: BLE001 - what the first batch's planning raises
        report.differences.append(_refused(exc))
        return report
    writers = state_writers(physical)
    state_root = fm.child("state").root
    stored_ops = S.read_all_operator_metadata(state_root) if fm.exists("state") else {}
    current = operator_names(writers)
    names = {k: v.operator_name for k, v in stored_ops.items()}
    if stored_ops and names != current:
        try:
            S.check_operator_metadata(names, current)
        except IncompatibleRestartError as exc:
            for op_id in sorted(set(names) | set(current)):
                old, new = names.get(op_id), current.get(op_id)
                if old == new:
                    continue
                kind = "operator added" if old is None else "operator removed" if new is None else "operator replaced"
                what = f"{new}" if old is None else f"{old}" if new is None else f"{old} -> {new}"
                report.differences.append(Difference(kind, f"stateful operator {op_id}: {what}. {exc}", NEW_CHECKPOINT, exc.error_class, op_id))
    else:
        # the first batch's own per-operator step, writing nothing (so the two cannot differ)
        schema_check = schema_check_enabled(spark.conf.get)
        for i, w in enumerate(writers):
            try:
                check_operator_state(state_root, i, w, schema_check=schema_check, check_only=True)
            except IncompatibleRestartError as exc:
                kind = {"STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": "key schema", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE": "value schema"}.get(
                    exc.error_class or "", "state"
                )
                report.differences.append(Difference(kind, f"stateful operator {i} ({w.operator_name}): {exc}", NEW_CHECKPOINT, exc.error_class, i))

    recorded = read_query_record(fm)
    if recorded is not None:
        if recorded.get("outputMode") and recorded["outputMode"] != mode:
            report.differences.append(Difference(
                "output mode",
                f"the last run wrote in {recorded['outputMode']} mode, the new query in {mode} (Spark allows it: the state "
                "carries over, but the sink now receives other rows)",
                "none needed if the sink expects the new mode's rows",
            ))
        new_marks = [{"column": n.column, "delay": n.delay_text} for n in plan.find(L.EventTimeWatermark)]
        if recorded.get("watermarks") is not None and recorded["watermarks"] != new_marks:
            report.differences.append(Difference(
                "watermark",
                f"the last run's watermarks {recorded['watermarks']} are now {new_marks} (Spark allows it: the recorded "
                f"watermark of batch {last_committed} carries on, and the new delay applies from the next batch)",
                "none needed; rows between the old and new delays are dropped or kept from the restart on",
            ))
    return report


def _refused(exc: BaseException) -> Difference:
    condition = getattr(exc, "getCondition", lambda: None)()
    return Difference("query refused", str(exc).splitlines()[0][:500], "change the query: start() would refuse it", condition)
