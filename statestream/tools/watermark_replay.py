"""What-if replay: a query's recorded input batches run again with another watermark delay.

``statestream watermark replay CHECKPOINT --query MODULE:FUNCTION --delay 30s [--to DIR]`` builds
the query from ``MODULE:FUNCTION`` (a function of a ``StreamingSession`` that returns the streaming
DataFrame, or its ``writeStream`` with the output mode set), with every ``withWatermark`` taking
the new delay, and runs it as a shadow query on a throwaway checkpoint (``DIR/checkpoint`` with
``--to``). Its micro-batch loop takes each data batch's offsets from the recorded offset log
(``runtime.replay``), so it reads exactly the recorded input ranges; the file sources' logs are
copied for that. The recorded checkpoint is only read. The report puts the two runs side by side:
rows in, rows out, rows dropped as late, state rows, per batch what each emitted and dropped, and
for a window aggregation each window's closing batch in both runs (read from the state's change
feed: the data batch after which the window left the state). With ``--to``, the replay's output rows go to ``DIR/output/batch=<id>`` as Parquet.

A source that keeps its data in the process (``memoryStream``) cannot be replayed.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import pyarrow.fs as pafs

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.offsets import OffsetSeqLog
from statestream.checkpoint.progress_log import ProgressLog
from statestream.checkpoint.query_record import read_query_record
from statestream.errors import StatestreamError, no_checkpoint_error
from statestream.runtime.replay import REPLAY_CONF, REPLAY_DELAY_CONF
from statestream.tools.state_reader import read_state_table

__all__ = ["BatchFigures", "ReplayReport", "closing_data_batches", "replay", "summarise"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchFigures:
    """One batch of a run: its id, input rows, output rows (-1: the sink did not say), rows
    dropped as late (all state operators) and state rows after it."""

    batch_id: int
    input_rows: int
    output_rows: int
    dropped_rows: int
    state_rows: int


@dataclass(frozen=True)
class ReplayReport:
    """The recorded run and its replay with another delay, batch by batch (each run's own
    batch ids: the replay runs its own batches for the watermark).

    Examples
    --------
    >>> r = ReplayReport("/ck", "30 seconds", [BatchFigures(0, 5, 5, 0, 5)], [BatchFigures(0, 5, 4, 1, 4)])
    >>> r.totals("recorded")["output_rows"], r.totals("replayed")["dropped_rows"]
    (5, 1)
    """

    checkpoint: str
    delay: str
    recorded: list[BatchFigures] = field(default_factory=list)
    replayed: list[BatchFigures] = field(default_factory=list)
    output: str | None = None
    #: a window aggregation's windows (each a JSON text of its state key), with the data batch
    #: (1 for the first) after which each run closed it, None while still open at the end;
    #: empty for other operators, or when a run's state changes are no longer retained
    windows: list[dict[str, Any]] = field(default_factory=list)

    def window_shifts(self) -> dict[str, int]:
        """How many windows close later, earlier, at the same data batch, and only in one run."""
        out = {"later": 0, "earlier": 0, "same": 0, "one_run_only": 0}
        for w in self.windows:
            a, b = w["recorded"], w["replayed"]
            if a is None or b is None:
                out["one_run_only"] += a is not b
                out["same"] += a is None and b is None
            else:
                out["later" if b > a else "earlier" if b < a else "same"] += 1
        return out

    def totals(self, run: str) -> dict[str, int]:
        """Rows in, out (-1 when a batch's sink did not say) and dropped over a run, and its
        last state rows."""
        batches = self.recorded if run == "recorded" else self.replayed
        out = sum(b.output_rows for b in batches)
        return {
            "batches": len(batches),
            "input_rows": sum(b.input_rows for b in batches),
            "output_rows": -1 if any(b.output_rows < 0 for b in batches) else out,
            "dropped_rows": sum(b.dropped_rows for b in batches),
            "state_rows": batches[-1].state_rows if batches else 0,
        }

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (``--json``)."""
        return {
            "checkpoint": self.checkpoint,
            "delay": self.delay,
            "output": self.output,
            "recorded": {"totals": self.totals("recorded"), "batches": [asdict(b) for b in self.recorded]},
            "replayed": {"totals": self.totals("replayed"), "batches": [asdict(b) for b in self.replayed]},
            "windows": self.windows,
        }


def summarise(history: list[dict[str, Any]], output_rows: dict[int, int] | None = None) -> list[BatchFigures]:
    """Each progress entry as :class:`BatchFigures` (``output_rows``: counts that replace the
    sink's figure, by batch id).

    >>> summarise([{"batchId": 3, "numInputRows": 2, "sink": {"numOutputRows": -1},
    ...     "stateOperators": [{"numRowsDroppedByWatermark": 1, "numRowsTotal": 7}]}], {3: 1})
    [BatchFigures(batch_id=3, input_rows=2, output_rows=1, dropped_rows=1, state_rows=7)]
    """
    out = []
    for p in history:
        ops = p.get("stateOperators") or []
        batch_id = int(p["batchId"])
        sink_rows = int((p.get("sink") or {}).get("numOutputRows", -1))
        out.append(
            BatchFigures(
                batch_id=batch_id,
                input_rows=int(p.get("numInputRows", 0)),
                output_rows=(output_rows or {}).get(batch_id, sink_rows),
                dropped_rows=sum(int(o.get("numRowsDroppedByWatermark", 0)) for o in ops),
                state_rows=sum(int(o.get("numRowsTotal", 0)) for o in ops),
            )
        )
    return out


def closing_data_batches(checkpoint: str, history: list[dict[str, Any]]) -> dict[str, int | None] | None:
    """The windows of a window aggregation (the first stateful operator's keys with a
    ``window`` field) by the JSON text of their key, each with the data batch (1 for the first
    batch that read input) after which the run removed it from the state (None: still open);
    None when the operator keeps no windows or its changes are no longer retained."""
    try:
        changes = read_state_table({"readChangeFeed": "true", "changeStartBatchId": 0}, checkpoint)
    except StatestreamError:  # no change feed to read (no state operator, changes not retained): no windows
        log.debug("no state changes to read closing windows from in %s", checkpoint, exc_info=True)
        return None
    key_type = changes.schema.field("key").type
    if not any(key_type.field(i).name == "window" for i in range(key_type.num_fields)):
        return None
    ordinal, seen = {}, 0
    for p in history:
        seen += int(p.get("numInputRows", 0)) > 0
        ordinal[int(p["batchId"])] = seen
    out: dict[str, int | None] = {}
    for row in changes.select(["batch_id", "change_type", "key"]).to_pylist():
        key = json.dumps(row["key"], default=str, sort_keys=True)
        if row["change_type"] == "delete":
            out[key] = ordinal.get(int(row["batch_id"]))
        else:
            out.setdefault(key, None)
    return out


def _copy_source_logs(recorded: CheckpointFileManager, shadow: CheckpointFileManager) -> None:
    """The recorded file sources' logs into the shadow checkpoint: the replay's file sources
    read each batch's files from them."""
    if not recorded.exists("sources"):
        return
    pafs.copy_files(recorded.path("sources"), shadow.path("sources"), source_filesystem=recorded.fs, destination_filesystem=shadow.fs)


def replay(ss: Any, checkpoint: str, build: Callable[[Any], Any], delay: str, to: str | None = None) -> ReplayReport:
    """Run the recorded batches of ``checkpoint`` again through the query ``build(ss)`` returns,
    with every watermark delay set to ``delay`` (``ss``: a StreamingSession); the output rows
    to ``<to>/output`` when ``to`` is given (see the module docstring).

    Raises
    ------
    CheckpointError
        When ``checkpoint`` has no offset log.
    ValueError
        When ``to`` already holds a replay's checkpoint or output.
    """
    fm = CheckpointFileManager(checkpoint)
    if OffsetSeqLog(fm.child("offsets")).get_latest_batch_id() is None:
        raise no_checkpoint_error(fm.display())
    shadow_root = f"{to.rstrip('/')}/checkpoint" if to else tempfile.mkdtemp(prefix="statestream-replay-")
    shadow = CheckpointFileManager(shadow_root)
    if to and (shadow.exists() or CheckpointFileManager(f"{to.rstrip('/')}/output").exists()):
        raise ValueError(f"{to} already holds a replay (checkpoint/ or output/): give --to an empty or new directory")
    _copy_source_logs(fm, shadow)
    spark = ss.sparkSession
    confs = {REPLAY_CONF: fm.uri(), REPLAY_DELAY_CONF: delay}
    previous = {k: spark.conf.get(k, None) for k in confs}
    counts: dict[int, int] = {}
    output = f"{to.rstrip('/')}/output" if to else None

    def sink(df: Any, batch_id: int) -> None:
        if output is not None:
            df.write.mode("overwrite").parquet(f"{output}/batch={batch_id}")
            counts[batch_id] = df.sparkSession.read.parquet(f"{output}/batch={batch_id}").count()
        else:
            counts[batch_id] = df.count()

    try:
        for k, v in confs.items():
            spark.conf.set(k, v)
        query = build(ss)
        writer = query
        if hasattr(query, "writeStream"):  # a DataFrame: in the mode the recorded run wrote in
            writer = query.writeStream.outputMode((read_query_record(fm) or {}).get("outputMode") or "append")
        running = writer.foreachBatch(sink).option("checkpointLocation", shadow_root).start()
        running.processAllAvailable()
        running.stop()
    finally:
        for k, v in previous.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    log.info("replayed %s with a delay of %s into the throwaway checkpoint %s", fm.display(), delay, shadow_root)
    recorded_history = ProgressLog(fm.child("progress")).read()
    replayed_history = ProgressLog(shadow.child("progress")).read()
    windows = []
    closed = closing_data_batches(fm.uri(), recorded_history), closing_data_batches(shadow.uri(), replayed_history)
    if closed[0] is not None and closed[1] is not None:
        for key in sorted(set(closed[0]) | set(closed[1])):
            windows.append({"key": key, "recorded": closed[0].get(key), "replayed": closed[1].get(key)})
    return ReplayReport(
        checkpoint=fm.display(),
        delay=delay,
        recorded=summarise(recorded_history),
        replayed=summarise(replayed_history, counts),
        output=output,
        windows=windows,
    )
