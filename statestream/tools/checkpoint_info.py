"""What a checkpoint holds, for ``statestream checkpoint inspect``: the query id, the batches its
logs record, the watermark, and per stateful operator its stores, partitions, state rows (as of
the last committed batch) and files on disk. Read through the engine's own log and state classes,
in this process, without Spark."""

from __future__ import annotations

import datetime as dt
from typing import Any

from statestream.checkpoint.commits import CommitLog
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.metadata import StreamMetadata
from statestream.checkpoint.offsets import OffsetSeqLog
from statestream.state.provider import StateStoreProvider, stored_schemas
from statestream.state.schema import read_all_operator_metadata
from statestream.state.store import StateStoreId

__all__ = ["describe_checkpoint"]


def _tree_size(fm: CheckpointFileManager, rel: str) -> tuple[int, int]:
    """(files, bytes) under ``rel``."""
    import pyarrow.fs as pafs

    base = fm.path(rel)
    info = fm.fs.get_file_info(base)
    if info.type != pafs.FileType.Directory:
        return 0, 0
    files = size = 0
    for entry in fm.fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if entry.type == pafs.FileType.File:
            files += 1
            size += int(entry.size or 0)
    return files, size


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
        files, size = _tree_size(fm, f"state/{op_id}")
        stores: list[dict[str, Any]] = []
        for store in md.state_store_info:
            rows = 0
            if last is not None:
                for partition in range(store.num_partitions):
                    sid = StateStoreId(state_root, op_id, partition, store.store_name)
                    schemas = stored_schemas(sid)
                    if schemas is not None:
                        rows += StateStoreProvider(sid, *schemas).get_read_store(last + 1, begins_at=None).table().num_rows
            stores.append({"name": store.store_name, "partitions": store.num_partitions, "rows": rows})
        operators.append({
            "operatorId": op_id, "operatorName": md.operator_name, "stores": stores,
            "stateRows": sum(s["rows"] for s in stores), "files": files, "bytes": size,
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
