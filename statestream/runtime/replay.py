"""A query's recorded input batches, run again by another query: the what-if replay's engine side.

``statestream watermark replay`` (``tools/watermark_replay.py``) starts the query once more, on a
throwaway checkpoint, with ``spark.statestream.replay.offsetsFrom`` naming the recorded one. Its
micro-batch loop then takes each data batch's end offsets from the recorded offset log, in order,
instead of asking the sources, so the replay reads exactly the recorded ranges; the watermark,
the late rows and the state follow from the query as it is now (another watermark delay). The
batches that run only because the watermark moved are the replay's own. The sources are never
told that a batch is done (no ``commit``), so a file source's ``cleanSource`` leaves the input
alone, and nothing is written to the recorded checkpoint.

Plain Python over the recorded offsets: testable without Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeqLog

__all__ = ["REPLAY_CONF", "REPLAY_DELAY_CONF", "RecordedBatches"]

#: statestream's internal conf: the checkpoint whose recorded batches a replay runs again
REPLAY_CONF = "spark.statestream.replay.offsetsFrom"
#: statestream's internal conf: the delay every ``withWatermark`` of the replayed query takes
#: instead of its own
REPLAY_DELAY_CONF = "spark.statestream.replay.watermarkDelay"


@dataclass
class RecordedBatches:
    """The end offsets (and processing times) of a checkpoint's recorded batches, handed out
    one data batch at a time.

    Examples
    --------
    >>> r = RecordedBatches([(0, [1], 100), (1, [1], 200), (2, [3], 300)])
    >>> r.next_batch([None]), r.next_batch([1]), r.next_batch([3])
    (([1], 100, 0), ([3], 300, 2), None)
    """

    #: (recorded batch id, end offsets, batch timestamp ms), in batch order
    batches: list[tuple[int, list[Any], int]]
    #: index of the last batch handed out
    position: int = field(default=-1)

    @classmethod
    def load(cls, checkpoint: str) -> "RecordedBatches":
        """The recorded batches of ``checkpoint``'s offset log."""
        log = OffsetSeqLog(CheckpointFileManager(checkpoint).child("offsets"))
        out = []
        for batch_id, entry in log.get_range(None, None):
            timestamp = entry.metadata.batch_timestamp_ms if entry.metadata is not None else 0
            out.append((batch_id, list(entry.offsets), int(timestamp)))
        return cls(out)

    def next_batch(self, start: list[Any]) -> tuple[list[Any], int, int] | None:
        """The next recorded batch with data after ``start`` (the replay's current offsets):
        its end offsets, timestamp and recorded batch id; None when every recorded batch ran.
        A recorded batch without new data (one the watermark alone ran) is passed over."""
        for i in range(self.position + 1, len(self.batches)):
            batch_id, ends, timestamp = self.batches[i]
            if ends != list(start):
                self.position = i
                return ends, timestamp, batch_id
        self.position = len(self.batches) - 1
        return None
