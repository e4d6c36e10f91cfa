"""Rollback of a stopped query's checkpoint to an earlier committed batch.

``statestream checkpoint rollback CHECKPOINT --to-batch N`` makes batch ``N`` the last committed
batch, so that the next start reprocesses everything after it (after a fix to the query, or
to replay a sink's output). What the project owns goes back with it:

* the offset and commit logs lose the entries after ``N``;
* every state store loses its files of versions after ``N + 1`` (the state batch ``N``
  committed), in every partition, so nothing written later can outrank what a rerun writes;
* each file source's log loses the entries after the one ``offsets/N`` ends at, so the files
  read after ``N`` are discovered again, in the same batches;
* a file sink (``--file-sink PATH``, the query's output directory) loses the log entries of the
  batches after ``N`` and the data files only they listed: readers of the output through its
  ``_spark_metadata`` see exactly what batch ``N`` left.

Other sinks are the user's (``foreachBatch``, Kafka, ...): the reprocessed batches reach them
again with the same batch ids, as after a crash.

A rollback is refused, with what is wrong, when the query runs (the writer lock), when batch
``N`` is not committed or its logs or state files are no longer retained. It first writes a
marker (``.statestream-rollback``); a start refuses a checkpoint with the marker, naming the
command that finishes it, so an interrupted rollback never runs half-done. Running it again
with the same batch finishes it.

The state readers read the state as of any retained batch without changing anything
(``batchId``).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.file_stream_log import METADATA_DIR, FileStreamSinkLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeqLog, partitions_of_batch
from statestream.checkpoint.progress_log import ProgressLog
from statestream.checkpoint.query_record import read_query_record
from statestream.checkpoint.rollback_marker import ROLLBACK_MARKER, check_no_interrupted_rollback
from statestream.checkpoint.writer_lock import CheckpointWriterLock
from statestream.errors import (
    batch_not_committed_error,
    log_not_retained_error,
    no_checkpoint_error,
    not_a_file_sink_error,
    offsets_not_retained_error,
    rollback_interrupted_error,
    state_not_retained_error,
)
from statestream.state import schema as S
from statestream.state.provider import parse_state_file_name
from statestream.state.schema import set_operator_partitions

__all__ = ["ROLLBACK_MARKER", "RollbackResult", "check_no_interrupted_rollback", "rollback_checkpoint"]

log = logging.getLogger(__name__)


@dataclass
class RollbackResult:
    """What a rollback removed."""

    checkpoint: str
    to_batch: int
    batches_removed: list[int] = field(default_factory=list)
    state_files_removed: int = 0
    source_log_entries_removed: dict[int, list[int]] = field(default_factory=dict)
    sink_log_entries_removed: dict[str, list[int]] = field(default_factory=dict)
    sink_files_removed: int = 0
    late_row_batches_removed: int = 0


def _state_files_after(state: CheckpointFileManager, version: int) -> list[str]:
    """The state files (relative to ``state/``) of versions above ``version``, every operator,
    partition and store."""
    out: list[str] = []
    if not state.exists():
        return out

    def scan(rel: str, stores: bool) -> None:
        # a partition holds state files and named stores' directories (any name but its
        # ``_metadata``: a transformWithState variable may be called ``_x`` or ``a.b``); a
        # store holds state files
        for name in state.list(rel):
            path = f"{rel}/{name}"
            parsed = parse_state_file_name(name)  # the provider's rule for a state file
            if parsed is not None:
                if parsed[0] > version:
                    out.append(path)
            elif stores and name != "_metadata":
                scan(path, stores=False)  # a named store (listing a stray file gives nothing)

    for op in state.list():
        if op.isdigit():
            for partition in state.list(op):
                if partition.isdigit():
                    scan(f"{op}/{partition}", stores=True)
    return sorted(out)


def _log_files_after(files: CheckpointFileManager, batch_id: int) -> list[tuple[int, str]]:
    out = []
    for name in files.list() if files.exists() else []:
        stem = name.split(".", 1)[0]
        if stem.isdigit() and name in (stem, f"{stem}.compact") and int(stem) > batch_id:
            out.append((int(stem), name))
    return sorted(out)


def _compactible_entries_as_of(log_: Any, batch_id: int) -> list[dict[str, Any]]:
    """A compactible log's live entries as of ``batch_id``; refuses when a file they need is
    gone (retention deleted it)."""
    out: list[dict[str, Any]] = []
    for b in log_._valid_batches(batch_id):  # noqa: SLF001 - the log's own rule
        entries = log_.get(b)
        if entries is None:
            raise log_not_retained_error(log_.files.display(str(b)), batch_id)
        out.extend(entries)
    return log_.compact_logs(out)


def rollback_checkpoint(checkpoint: str, to_batch: int, file_sinks: Sequence[str] = ()) -> RollbackResult:
    """Make ``to_batch`` the last committed batch of the stopped query at ``checkpoint`` (see
    the module docstring); ``file_sinks``: output directories of file sinks to roll back too."""
    fm = CheckpointFileManager(checkpoint)
    if not fm.exists("offsets") and not fm.exists("commits"):
        raise no_checkpoint_error(fm.display())
    offsets, commits = OffsetSeqLog(fm.child("offsets")), CommitLog(fm.child("commits"))
    resuming = fm.exists(ROLLBACK_MARKER)
    if resuming:
        marked = json.loads(fm.read_bytes(ROLLBACK_MARKER)).get("toBatch")
        if marked != to_batch:
            raise rollback_interrupted_error(fm.display(), marked)
    committed = commits.list_batch_ids()
    if to_batch < 0 or to_batch not in committed:
        raise batch_not_committed_error(to_batch, fm.display(), committed)
    entry = offsets.get(to_batch)
    if entry is None:
        raise offsets_not_retained_error(offsets.path_of(to_batch), to_batch)
    state = fm.child("state")
    _check_state_retained(state, to_batch + 1, partitions_of_batch(entry))
    recorded_sink = (read_query_record(fm) or {}).get("fileSink")
    sinks = list(dict.fromkeys([*file_sinks, *([recorded_sink] if recorded_sink else [])]))
    plans = [_plan_file_sink(sink, to_batch) for sink in sinks]  # refusals before anything changes
    writer = CheckpointWriterLock(fm)
    writer.acquire(f"rollback-{uuid.uuid4()}", str(uuid.uuid4()))
    try:
        if not resuming:
            fm.write_atomic(ROLLBACK_MARKER, json.dumps({"toBatch": to_batch}).encode())
        result = RollbackResult(fm.display(), to_batch)
        later = sorted({b for b in offsets.list_batch_ids() + committed if b > to_batch}, reverse=True)
        for b in later:  # newest first: each step leaves the logs a prefix
            fm.delete(f"commits/{b}")
            fm.delete(f"offsets/{b}")
        result.batches_removed = sorted(later)
        stale = _state_files_after(state, to_batch + 1)
        for rel in stale:
            state.delete(rel)
        result.state_files_removed = len(stale)
        _rewrite_operator_metadata(state, partitions_of_batch(entry))
        _rollback_python_state_records(state, to_batch)
        for i, offset in enumerate(entry.offsets):
            if isinstance(offset, dict) and isinstance(offset.get("logOffset"), int):
                source = fm.child(f"sources/{i}")
                removed = _log_files_after(source, offset["logOffset"])
                for _, name in removed:
                    source.delete(name)
                if removed:
                    result.source_log_entries_removed[i] = [b for b, _ in removed]
        for plan in plans:
            _rollback_file_sink(plan, result)
        _rollback_late_rows(fm, to_batch, result)

        ProgressLog(fm.child("progress")).truncate_after(to_batch)
        fm.delete(ROLLBACK_MARKER)
    finally:
        writer.release()
    log.info("rolled %s back to batch %d: %s", fm.display(), to_batch, result)
    return result


def _check_state_retained(state: CheckpointFileManager, version: int, partitions: int | None) -> None:
    """Every store keeps what loading ``version`` needs: a snapshot at or below it and every
    delta above that snapshot (or all deltas from 1); refuses, naming the first file missing."""
    if not state.exists():
        return
    stores: dict[str, set[str]] = {}
    for rel in _state_files_after(state, 0):
        directory, _, name = rel.rpartition("/")
        stores.setdefault(directory, set()).add(name)
    for directory, names in sorted(stores.items()):
        parts = directory.split("/")
        if partitions is not None and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) >= partitions:
            continue  # a partition a repartition added later (or left over): not read at that batch
        versions = {int(n.split(".")[0]): n for n in names}
        present = [v for v in versions if v <= version]
        if not present:
            continue  # a store that began after that version (or never committed then)
        snapshots = [v for v in present if f"{v}.snapshot" in names]
        start = max(snapshots) if snapshots else min(present) - 1
        missing = [v for v in range(start + 1, version + 1) if f"{v}.delta" not in names]
        if missing and not (snapshots and max(snapshots) == version):
            raise state_not_retained_error(state.display(f"{directory}/{missing[0]}.delta"), version)


def _rewrite_operator_metadata(state: CheckpointFileManager, partitions: int | None) -> None:
    """The operator metadata records the partition count of the batch rolled back to (a
    repartition after it is undone)."""
    if partitions is None or not state.exists():
        return

    set_operator_partitions(state.root, partitions)


@dataclass
class _SinkPlan:
    """What rolling back one file sink removes (worked out before anything is changed)."""

    out: CheckpointFileManager
    log_files: list[tuple[int, str]]
    data_files: list[str]


def _plan_file_sink(path: str, to_batch: int) -> _SinkPlan:
    """A file sink's log files after ``to_batch`` and the data files only they list; refuses a
    directory that is not a file sink's output or a log no longer retained back to the batch."""

    out = CheckpointFileManager(path)
    if not out.exists("_spark_metadata"):
        raise not_a_file_sink_error(out.display())
    sink_log = FileStreamSinkLog(out.child(METADATA_DIR).root)
    later = _log_files_after(sink_log.files, to_batch)
    if not later:
        return _SinkPlan(out, [], [])
    kept = {e["path"] for e in _compactible_entries_as_of(sink_log, to_batch)} if any(b <= to_batch for b in sink_log._batch_files()) else set()  # noqa: SLF001
    written: set[str] = set()
    for b, _name in later:
        written |= {e["path"] for e in (sink_log.get(b) or []) if e.get("action", "add") == "add"}
    return _SinkPlan(out, later, sorted(written - kept))


def _rollback_file_sink(plan: _SinkPlan, result: RollbackResult) -> None:
    """Remove the data files first, then the log files: a rollback interrupted in between is
    run again (its marker) and finds the same log files, whose data files are then gone."""
    if not plan.log_files:
        return
    root = plan.out.uri().rstrip("/") + "/"
    removed = 0
    for uri in plan.data_files:
        rel = uri[len(root):] if uri.startswith(root) else None
        try:
            if rel is not None:
                if plan.out.exists(rel):
                    plan.out.delete(rel)
                    removed += 1
            else:  # a file outside the output directory (an absolute path the log lists)
                import pyarrow.fs as pafs

                fs, file_path = pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)
                fs.delete_file(file_path)
                removed += 1
        except FileNotFoundError:
            log.info("rollback: %s was already gone", uri)
    log_dir = plan.out.child("_spark_metadata")
    for _, name in sorted(plan.log_files, reverse=True):
        log_dir.delete(name)
    result.sink_log_entries_removed[plan.out.display()] = [b for b, _ in plan.log_files]
    result.sink_files_removed += removed


def _rollback_python_state_records(state: CheckpointFileManager, to_batch: int) -> None:
    """A Python state operator's records of its stores (``state.schema``'s first-batch and
    dormant properties) back to ``to_batch``: a store first declared after it begins at the
    rerun's first version (its later files are gone), and a store left undeclared after it is
    no longer recorded as frozen (its files up to the batch are all there)."""
    if not state.exists():
        return

    for op in (n for n in state.list() if n.isdigit()):
        props = S.read_operator_properties(state.root, int(op))
        if props is None:
            continue
        changed = dict(props)
        first = S.read_stores_first_batch(state.root, int(op))
        if first is not None:
            changed[S.FIRST_BATCH_PROPERTY] = json.dumps({n: min(b, to_batch + 1) for n, b in first.items()}, sort_keys=True)
        runs = S.operator_properties_by_run(props)
        if any(b > to_batch for b in runs):  # the runs that started after the batch are undone
            kept_runs = {b: t for b, t in runs.items() if b <= to_batch}
            changed[S.OPERATOR_PROPERTIES_PROPERTY] = json.dumps({str(b): kept_runs[b] for b in sorted(kept_runs)})
        dormant = S.read_dormant_stores(state.root, int(op))
        if dormant:
            kept = {n: list(v) for n, v in dormant.items() if v[0] <= to_batch + 1}
            changed[S.DORMANT_PROPERTY] = json.dumps(kept, sort_keys=True)
        if changed != props:
            S.write_operator_properties(state.root, int(op), changed)


def _rollback_late_rows(fm: CheckpointFileManager, to_batch: int, result: RollbackResult) -> None:
    """The late-row ledger's files of the undone batches (the ledger the last run recorded)."""
    root = (read_query_record(fm) or {}).get("lateRows")
    if not root:
        return
    ledger = CheckpointFileManager(root)
    if not ledger.exists():
        return
    for op in ledger.list():
        if not op.startswith("operator="):
            continue
        for batch in ledger.list(op):
            if batch.startswith("batch=") and batch[len("batch="):].isdigit() and int(batch[len("batch="):]) > to_batch:
                ledger.delete(f"{op}/{batch}")
                result.late_row_batches_removed += 1
