"""What a checkpoint holds, for ``statestream checkpoint inspect``: the query id, the batches its
logs record, the watermark, and per stateful operator its stores, each with its partitions, state
rows (as of the last committed batch) and files on disk. Read through the engine's own log and state classes,
in this process, without Spark."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.metadata import StreamMetadata
from statestream.checkpoint.offsets import OffsetSeqLog
from statestream.state.provider import StateStoreProvider, stored_schemas
from statestream.state.schema import operator_properties_of_batch, read_all_operator_metadata, read_operator_properties
from statestream.state.store import StateStoreId
from statestream.tools.python_state_reader import PYTHON_STATE_OPERATORS

__all__ = ["StateChoices", "describe_checkpoint", "state_choices", "store_of_file"]


def _files(fm: CheckpointFileManager, rel: str) -> list[tuple[str, int]]:
    """(path relative to ``rel``, size) of every file under ``rel``."""
    base = fm.path(rel)
    if fm.fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    prefix = base.rstrip("/") + "/"
    return [
        (entry.path[len(prefix):], int(entry.size or 0))
        for entry in fm.fs.get_file_info(pafs.FileSelector(base, recursive=True))
        if entry.type == pafs.FileType.File
    ]


def _tree_size(fm: CheckpointFileManager, rel: str) -> tuple[int, int]:
    """(files, bytes) under ``rel``."""
    files = _files(fm, rel)
    return len(files), sum(size for _, size in files)


def store_of_file(relative: str, store_names: set[str]) -> str | None:
    """The store a file under an operator's state directory belongs to: a named store's files are
    in ``<partition>/<name>/``, the default store's directly in ``<partition>/``; None for the
    operator's own files (``_metadata/``, ...).

    Examples
    --------
    >>> names = {"default", "left-keyToNumValues"}
    >>> store_of_file("0/1.delta", names), store_of_file("3/left-keyToNumValues/2.delta", names)
    ('default', 'left-keyToNumValues')
    >>> store_of_file("_metadata/metadata", names) is None
    True
    """
    parts = relative.split("/")
    if not parts[0].isdigit() or len(parts) < 2:
        return None
    if len(parts) >= 3 and parts[1] in store_names:
        return parts[1]
    return "default" if "default" in store_names else None


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def describe_checkpoint(checkpoint: str) -> dict[str, Any]:
    """The checkpoint's summary as plain data (what ``--json`` prints)."""
    fm = CheckpointFileManager(checkpoint)
    if not fm.exists():
        raise FileNotFoundError(f"no checkpoint at {fm.display()}")
    meta = StreamMetadata.read(fm)
    offsets = OffsetSeqLog(fm.child("offsets")).list_batch_ids()
    commits_log = CommitLog(fm.child("commits"))
    commits = commits_log.list_batch_ids()
    last = commits[-1] if commits else None
    committed = commits_log.get(last) if last is not None else None
    watermark = committed.next_batch_watermark_ms if committed is not None else None
    state_root = fm.child("state").root
    operators = []
    for op_id, md in sorted(read_all_operator_metadata(state_root).items()):
        on_disk = _files(fm, f"state/{op_id}")
        names = {store.store_name for store in md.state_store_info}
        per_store: dict[str | None, list[int]] = {}
        for relative, size in on_disk:
            figures = per_store.setdefault(store_of_file(relative, names), [0, 0])
            figures[0] += 1
            figures[1] += size
        stores: list[dict[str, Any]] = []
        for store in md.state_store_info:
            rows = 0
            if last is not None:
                for partition in range(store.num_partitions):
                    sid = StateStoreId(state_root, op_id, partition, store.store_name)
                    schemas = stored_schemas(sid)
                    if schemas is not None:
                        rows += StateStoreProvider(sid, *schemas).get_read_store(last + 1, begins_at=None).table().num_rows
            files, size = per_store.get(store.store_name, [0, 0])
            stores.append({"name": store.store_name, "partitions": store.num_partitions, "rows": rows, "files": files, "bytes": size})
        operators.append({
            "operatorId": op_id, "operatorName": md.operator_name, "stores": stores,
            "stateRows": sum(s["rows"] for s in stores), "files": len(on_disk), "bytes": sum(size for _, size in on_disk),
        })
    files, size = _tree_size(fm, "")
    return {
        "checkpoint": fm.display(),
        "id": meta.id if meta is not None else None,
        "offsets": [offsets[0], offsets[-1]] if offsets else None,
        "commits": [commits[0], commits[-1]] if commits else None,
        "lastCommittedBatch": last,
        "uncommittedBatch": offsets[-1] if offsets and (last is None or offsets[-1] > last) else None,
        "watermarkMs": watermark,
        "watermark": _iso(watermark) if watermark else None,
        "operators": operators,
        "files": files,
        "bytes": size,
    }


#: the stores of a stream-stream join: two per input side
_JOIN_STORE_SUFFIXES = ("keyToNumValues", "keyWithIndexToValue")


@dataclass(frozen=True)
class StateChoices:
    """What must be chosen to read one operator's state: a stream-stream join's input side, a
    transformWithState's variable, or nothing (one store, or a default among several).

    ``kind`` is ``"join"``, ``"python"`` or ``"stores"``; ``names`` are the join's sides, the
    processor's state variables, or the operator's store names.
    """

    operator_id: int
    operator_name: str
    kind: str
    names: tuple[str, ...]


def state_choices(checkpoint: str, operator_id: int) -> StateChoices | None:
    """The choices for reading ``operator_id``'s state in ``checkpoint``: None when the
    checkpoint records no stateful operator (the reader then says what is missing), a
    ``LookupError`` naming the operators there when ``operator_id`` is not one of them.

    Examples
    --------
    >>> import tempfile
    >>> state_choices(tempfile.mkdtemp(), 0) is None
    True
    """
    fm = CheckpointFileManager(checkpoint)
    if not fm.exists("state"):
        return None
    state_root = fm.child("state").root
    operators = read_all_operator_metadata(state_root)
    if not operators:
        return None
    md = operators.get(operator_id)
    if md is None:
        have = ", ".join(f"{op} ({m.operator_name})" for op, m in sorted(operators.items()))
        raise LookupError(f"the checkpoint has no stateful operator {operator_id}; its operators are {have}")
    stores = tuple(s.store_name for s in md.state_store_info)
    if stores and all(name.startswith(("left-", "right-")) and name.endswith(_JOIN_STORE_SUFFIXES) for name in stores):
        return StateChoices(operator_id, md.operator_name, "join", ("left", "right"))
    if md.operator_name in PYTHON_STATE_OPERATORS:
        recorded = operator_properties_of_batch(read_operator_properties(state_root, operator_id), sys.maxsize)
        if recorded is not None:
            names = tuple(v["stateName"] for v in json.loads(recorded).get("stateVariables", []) if v.get("stateVariableType") != "TimerState")
        else:  # a checkpoint written before the record: the variables' stores
            names = tuple(n for n in stores if n != "default" and not n.startswith("$"))
        return StateChoices(operator_id, md.operator_name, "python", names)
    return StateChoices(operator_id, md.operator_name, "stores", stores)
