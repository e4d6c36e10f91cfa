"""Checks made on the first batch of every run, before any state is touched (Spark: the state
schema check and the operator metadata check that ``IncrementalExecution`` makes when
``isFirstBatch``): a restarted query must have the same stateful operators, with compatible
state schemas, as the run that wrote the checkpoint.

The compatibility check of a deploy (``statestream.tools.compatibility``) runs the same
per-operator step, :func:`check_operator_state` with ``check_only=True``, which writes nothing:
what it reports is what a restart would refuse."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from statestream.errors import IncompatibleRestartError
from statestream.plan.incremental import state_writers
from statestream.state import schema as S

if TYPE_CHECKING:
    from statestream.operators.base import PhysicalOperator

logger = logging.getLogger(__name__)

__all__ = [
    "SCHEMA_CHECK_CONF",
    "check_operator_state",
    "check_operators_unchanged",
    "check_restart_compatible",
    "check_state_on_first_batch",
    "operator_names",
    "schema_check_enabled",
]

#: Spark's switch: off, an incompatible state schema is logged instead of refused
SCHEMA_CHECK_CONF = "spark.sql.streaming.stateStore.stateSchemaCheck"


def schema_check_enabled(conf_get: Callable[[str, str], Any]) -> bool:
    """Whether :data:`SCHEMA_CHECK_CONF` is on (``conf_get``: a session conf's ``get``)."""
    return str(conf_get(SCHEMA_CHECK_CONF, "true")).lower() == "true"


def operator_names(writers: Sequence[Any]) -> dict[int, str]:
    """``{operator id: operator name}`` of a plan's state writers (what the operator metadata
    records)."""
    return {i: w.operator_name for i, w in enumerate(writers)}


def check_operators_unchanged(state_root: str, writers: Sequence[Any]) -> None:
    """Refuse a restart whose stateful operators differ from those the checkpoint's operator
    metadata records (Spark's check of a restart's first batch); a checkpoint without operator
    metadata (never ran a stateful batch, or written before the metadata) passes."""
    existing = S.read_all_operator_metadata(state_root)
    if existing:
        S.check_operator_metadata({k: v.operator_name for k, v in existing.items()}, operator_names(writers))


def _checked(check: Callable[[], None], enabled: bool, quiet: bool) -> None:
    """Run a schema check; with the schema check off its refusal is only logged."""
    try:
        check()
    except IncompatibleRestartError as exc:
        if enabled:
            raise
        if not quiet:
            logger.warning("state schema check disabled; ignoring: %s", exc)


def check_operator_state(
    state_root: str,
    operator_id: int,
    writer: Any,
    *,
    schema_check: bool,
    batch_id: int | None = None,
    num_partitions: int = 0,
    check_only: bool = False,
) -> None:
    """One stateful operator's step of the first batch of a run.

    Its new state schemas are checked against the stored ones (Spark's rule: the key, then the
    value unless the operator does not check it; a Python state operator by its own restart
    rules), raising what the restart raises (only logged with ``schema_check`` off); then the
    state schema file (when there was none), the named stores' schema files and the operator
    metadata (``num_partitions`` partitions) are written; ``batch_id``: the run's first batch
    (what a Python state operator records). ``check_only``: the same checks, nothing written and
    nothing logged (the compatibility check of a deploy; ``batch_id`` is not needed)."""
    if hasattr(writer, "validate_and_write_state_schema"):  # an operator with its own restart rules
        if check_only:  # the check its own validate step makes, without the writes
            _checked(lambda: writer.check_state_schema_compatible(state_root, operator_id), schema_check, quiet=True)
        else:
            assert batch_id is not None, "the first batch's writes need its batch id"
            writer.validate_and_write_state_schema(state_root, operator_id, schema_check, batch_id)
    else:
        key_json, value_json = writer.state_schemas()
        stored = S.read_state_schema(state_root, operator_id)
        if stored is not None:
            check_value = getattr(writer, "check_value_schema", True)
            _checked(lambda: S.check_state_schema(stored, key_json, value_json, check_value), schema_check, quiet=check_only)
        elif not check_only:
            S.write_state_schema(state_root, operator_id, key_json, value_json)
    if check_only:
        return
    for store, (key_json, value_json) in getattr(writer, "store_schemas", dict)().items():
        S.write_store_schema(state_root, operator_id, store, key_json, value_json)
    S.write_operator_metadata(
        state_root,
        S.OperatorStateMetadata(
            operator_id,
            writer.operator_name,
            tuple(
                S.StateStoreMetadata(name, getattr(writer, "num_cols_prefix_key", 0), num_partitions)
                for name in getattr(writer, "state_store_names", ("default",))
            ),
        ),
    )


def check_restart_compatible(state_root: str, plan: "PhysicalOperator", schema_check: bool) -> None:
    """Raise what the first batch of a restart of ``plan`` would refuse it with (the operator
    metadata, then each operator's state schemas), writing nothing. Run before anything that
    changes the state ahead of that batch (the repartition on restart), so that a refused
    restart leaves the checkpoint as it found it."""
    writers = state_writers(plan)
    check_operators_unchanged(state_root, writers)
    for i, w in enumerate(writers):
        check_operator_state(state_root, i, w, schema_check=schema_check, check_only=True)


def check_state_on_first_batch(ex, plan: "PhysicalOperator", batch_id: int) -> None:
    """Verify (restart) then write the operator metadata and state schema files."""
    state_root = ex.fm.child("state").root
    schema_check = schema_check_enabled(ex.session.sparkSession.conf.get)
    writers = state_writers(plan)
    if batch_id > 0:
        check_operators_unchanged(state_root, writers)
    for i, w in enumerate(writers):
        check_operator_state(state_root, i, w, schema_check=schema_check, batch_id=batch_id, num_partitions=ex.num_partitions)
