"""Every batch's progress, kept in the checkpoint (``<checkpoint>/progress/``).

Spark keeps the recent progress of a query in memory only (``numRecentProgressUpdates``, 100):
a restart, or a look at a stopped query, has no history. statestream writes each executed
batch's progress (the JSON of ``StreamingQueryProgress``) here, so the dashboard and the command
line show the whole history, across restarts.

Layout: ``<batchId>.json`` per batch as it finishes (one small write, like the commit log's);
every :data:`COMPACT_EVERY` batches the files of that block are merged into
``<first>-<last>.jsonl`` (one progress per line) and deleted, so the directory holds at most
``COMPACT_EVERY`` small files plus one per block. Blocks wholly older than ``retain`` batches
are deleted. A rerun batch (after a crash) writes its file again: the last write wins. Nothing
here is read by the engine: a damaged or missing file costs history, never a batch.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from statestream.checkpoint.files import CheckpointFileManager

__all__ = ["COMPACT_EVERY", "DEFAULT_RETAIN", "ProgressLog"]

log = logging.getLogger(__name__)

COMPACT_EVERY = 100
DEFAULT_RETAIN = 10_000
_BATCH = re.compile(r"^(\d+)\.json$")
_BLOCK = re.compile(r"^(\d+)-(\d+)\.jsonl$")


class ProgressLog:
    """The progress history of one checkpoint."""

    def __init__(self, files: CheckpointFileManager, retain: int = DEFAULT_RETAIN) -> None:
        self.files = files
        self.retain = max(retain, COMPACT_EVERY)

    def add(self, progress: dict[str, Any]) -> None:
        """Record one batch's progress (never raises: history is not worth a failed batch)."""
        try:
            batch_id = int(progress["batchId"])
            self.files.write_atomic(f"{batch_id}.json", json.dumps(progress, separators=(",", ":"), default=str).encode())
            if (batch_id + 1) % COMPACT_EVERY == 0:
                self._compact(batch_id + 1 - COMPACT_EVERY, batch_id)
        except (OSError, KeyError, TypeError, ValueError):
            log.warning("could not record the progress of batch %s in %s", progress.get("batchId"), self.files.display(), exc_info=True)

    def _compact(self, first: int, last: int) -> None:
        entries = []
        for b in range(first, last + 1):
            try:
                entries.append(self.files.read_bytes(f"{b}.json").decode())
            except FileNotFoundError:
                continue  # a batch id without a run of its own (a repartition batch), or pruned
        self.files.write_atomic(f"{first}-{last}.jsonl", "\n".join(entries).encode())
        for b in range(first, last + 1):
            self.files.delete(f"{b}.json")
        for name in self.files.list():
            m = _BLOCK.match(name)
            if m and int(m.group(2)) <= last - self.retain:
                self.files.delete(name)

    def truncate_after(self, batch_id: int) -> None:
        """Forget the progress of the batches after ``batch_id`` (a rollback): a block that
        holds some of them is split back into files of the batches it keeps."""
        if not self.files.exists():
            return
        for name in self.files.list():
            m = _BATCH.match(name)
            if m and int(m.group(1)) > batch_id:
                self.files.delete(name)
            m = _BLOCK.match(name)
            if m and int(m.group(2)) > batch_id:
                for line in self.files.read_bytes(name).decode().splitlines():
                    try:
                        b = int(json.loads(line)["batchId"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if b <= batch_id:
                        self.files.write_atomic(f"{b}.json", line.encode())
                self.files.delete(name)

    def read(self, after: int | None = None) -> list[dict[str, Any]]:
        """Every recorded progress with a batch id above ``after`` (all when None), by batch id;
        unreadable entries are skipped with a warning."""
        if not self.files.exists():
            return []
        by_batch: dict[int, dict[str, Any]] = {}
        names = self.files.list()
        for name in sorted(names):
            m = _BLOCK.match(name)
            if not m or (after is not None and int(m.group(2)) <= after):
                continue
            for line in self.files.read_bytes(name).decode().splitlines():
                self._take(line, name, by_batch)
        for name in names:
            m = _BATCH.match(name)
            if m and (after is None or int(m.group(1)) > after):
                try:
                    self._take(self.files.read_bytes(name).decode(), name, by_batch)
                except FileNotFoundError:
                    continue  # compacted meanwhile: the block has it
        return [by_batch[b] for b in sorted(by_batch) if after is None or b > after]

    def _take(self, text: str, name: str, out: dict[int, dict[str, Any]]) -> None:
        try:
            entry = json.loads(text)
            out[int(entry["batchId"])] = entry
        except (ValueError, KeyError, TypeError):
            log.warning("skipping an unreadable progress entry in %s", self.files.display(name))
