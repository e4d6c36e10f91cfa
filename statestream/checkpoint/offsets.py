"""The offset log (``<checkpoint>/offsets/<N>``) and the restart plan derived from it.

Spark: ``OffsetSeq``, ``OffsetSeqMetadata``, ``OffsetSeqLog`` and
``MicroBatchExecution.populateStartOffsets``.

The offset log is the query's write-ahead log: ``offsets/<N>`` is written *before* batch N runs and
records everything needed to run N again identically after a crash, namely each source's end
offset, the watermark the batch uses (``wm(N)``), the batch's processing time (so
``current_timestamp()`` gives the same answer on re-execution) and the settings that fix the
physical layout of state (pinned confs, such as the number of state partitions).

File format (byte-compatible with Spark 4.1, no trailing newline)::

    v1
    {"batchWatermarkMs":15000,"batchTimestampMs":1795289917926,"conf":{...}}
    {"logOffset":1}
    -

Line 1 is the version; line 2 the compact JSON metadata (an empty line in very old logs); then
one compact JSON offset per source in source order, ``-`` for a source that has no offset yet.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.log import MetadataLog, parse_log_version, split_lines
from statestream.errors.checkpoint import (
    incomplete_offset_log_file_error,
    offset_corrupt_error,
    offset_log_file_without_metadata_error,
    offset_metadata_corrupt_error,
    previous_batch_missing_error,
)

if TYPE_CHECKING:
    from statestream.checkpoint.files import CheckpointFileManager

__all__ = [
    "OffsetSeqMetadata",
    "OffsetSeq",
    "OffsetSeqLog",
    "PINNED_CONF_KEYS",
    "PINNED_CONF_COMPAT_DEFAULTS",
    "PINNED_CONF_SESSION_DEFAULTS",
    "restore_pinned_confs",
    "effective_conf",
    "RecoveryPlan",
    "plan_recovery",
    "plan_recovery_from_logs",
    "SHUFFLE_PARTITIONS",
    "partitions_of_batch",
    "state_partitions_of_batch",
    "is_repartition_batch",
]

logger = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
STATE_STORE_PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
MULTIPLE_WATERMARK_POLICY = "spark.sql.streaming.multipleWatermarkPolicy"
FMGWS_STATE_FORMAT_VERSION = "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"
AGGREGATION_STATE_FORMAT_VERSION = "spark.sql.streaming.aggregation.stateFormatVersion"
JOIN_STATE_FORMAT_VERSION = "spark.sql.streaming.join.stateFormatVersion"
STATE_STORE_COMPRESSION_CODEC = "spark.sql.streaming.stateStore.compression.codec"
ROCKSDB_FORMAT_VERSION = "spark.sql.streaming.stateStore.rocksdb.formatVersion"
USE_STRICT_DISTRIBUTION = "spark.sql.streaming.statefulOperator.useStrictDistribution"
PRUNE_FILTERS_STREAMING_SUBPLAN = "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan"
STATE_STORE_ENCODING_FORMAT = "spark.sql.streaming.stateStore.encodingFormat"

#: The confs Spark 4.1 records in every offset-log entry, in the order its writer emits them (the
#: iteration order of Spark's hash map for this key set, observed in files written by 4.1). Keys
#: outside this list are written after these, sorted.
PINNED_CONF_KEYS: tuple[str, ...] = (
    STATE_STORE_PROVIDER_CLASS,
    ROCKSDB_FORMAT_VERSION,
    STATE_STORE_ENCODING_FORMAT,
    USE_STRICT_DISTRIBUTION,
    FMGWS_STATE_FORMAT_VERSION,
    MULTIPLE_WATERMARK_POLICY,
    AGGREGATION_STATE_FORMAT_VERSION,
    SHUFFLE_PARTITIONS,
    JOIN_STATE_FORMAT_VERSION,
    STATE_STORE_COMPRESSION_CODEC,
    PRUNE_FILTERS_STREAMING_SUBPLAN,
)

#: Values used for pinned keys that an older checkpoint did not record. They describe how the
#: older engine behaved, which is what the existing state was written with; keys without an entry
#: here (partitions, provider, RocksDB format) keep the session's value.
PINNED_CONF_COMPAT_DEFAULTS: dict[str, str] = {
    MULTIPLE_WATERMARK_POLICY: "min",
    FMGWS_STATE_FORMAT_VERSION: "1",
    AGGREGATION_STATE_FORMAT_VERSION: "1",
    JOIN_STATE_FORMAT_VERSION: "1",
    STATE_STORE_COMPRESSION_CODEC: "lz4",
    USE_STRICT_DISTRIBUTION: "false",
    PRUNE_FILTERS_STREAMING_SUBPLAN: "true",
    STATE_STORE_ENCODING_FORMAT: "unsaferow",
}

#: Spark 4.1's session defaults for the pinned keys (what a fresh query records when the user set
#: nothing), as observed in offset files written by 4.1.
PINNED_CONF_SESSION_DEFAULTS: dict[str, str] = {
    STATE_STORE_PROVIDER_CLASS: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    ROCKSDB_FORMAT_VERSION: "5",
    STATE_STORE_ENCODING_FORMAT: "unsaferow",
    USE_STRICT_DISTRIBUTION: "true",
    FMGWS_STATE_FORMAT_VERSION: "2",
    MULTIPLE_WATERMARK_POLICY: "min",
    AGGREGATION_STATE_FORMAT_VERSION: "2",
    SHUFFLE_PARTITIONS: "200",
    JOIN_STATE_FORMAT_VERSION: "2",
    STATE_STORE_COMPRESSION_CODEC: "lz4",
    PRUNE_FILTERS_STREAMING_SUBPLAN: "false",
}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _ordered_conf(conf: Mapping[str, str]) -> dict[str, str]:
    ordered = {k: conf[k] for k in PINNED_CONF_KEYS if k in conf}
    for k in sorted(k for k in conf if k not in ordered):
        ordered[k] = conf[k]
    return ordered


@dataclass(frozen=True)
class OffsetSeqMetadata:
    """Line 2 of an offset-log entry.

    Attributes
    ----------
    batch_watermark_ms:
        ``wm(N)``: the global watermark batch N filters and evicts with.
    batch_timestamp_ms:
        Processing time of batch N, reused verbatim when N is re-executed.
    conf:
        Pinned settings (see :data:`PINNED_CONF_KEYS`), string values.
    """

    batch_watermark_ms: int = 0
    batch_timestamp_ms: int = 0
    conf: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_session_conf(
        cls, batch_watermark_ms: int, batch_timestamp_ms: int, session_conf: Mapping[str, str]
    ) -> "OffsetSeqMetadata":
        """Metadata for a new batch: the pinned keys present in ``session_conf``."""
        conf = {k: str(session_conf[k]) for k in PINNED_CONF_KEYS if k in session_conf}
        return cls(batch_watermark_ms, batch_timestamp_ms, conf)

    def to_json(self) -> str:
        """Compact JSON with Spark's field names and order."""
        return _compact(
            {
                "batchWatermarkMs": int(self.batch_watermark_ms),
                "batchTimestampMs": int(self.batch_timestamp_ms),
                "conf": _ordered_conf(self.conf),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> "OffsetSeqMetadata":
        """Parse line 2. Missing fields take their defaults (0, 0, no conf), unknown ones are
        ignored, as Spark's reader does; a malformed value raises ``ValueError``."""
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ValueError(f"offset metadata is not a JSON object: {text!r}")
        wm = obj.get("batchWatermarkMs", 0)
        ts = obj.get("batchTimestampMs", 0)
        conf = obj.get("conf", {}) or {}
        if isinstance(wm, bool) or not isinstance(wm, int) or isinstance(ts, bool) or not isinstance(ts, int):
            raise ValueError(f"batchWatermarkMs/batchTimestampMs must be integers: {text!r}")
        if not isinstance(conf, dict):
            raise ValueError(f"conf must be a JSON object: {text!r}")
        return cls(wm, ts, {str(k): v if isinstance(v, str) else _compact(v) for k, v in conf.items()})


@dataclass(frozen=True)
class OffsetSeq:
    """One offset-log entry: an end offset per source (``None`` = no offset yet) and metadata.

    Offsets are JSON-serialisable values (the sources' own representation); they are written as
    compact JSON and read back with ``json.loads``, so a source gets back an equal value.
    ``metadata`` is ``None`` only for entries of very old logs whose line 2 is empty.
    """

    offsets: list[Any | None]
    metadata: OffsetSeqMetadata | None = None

    def offset_for(self, index: int) -> Any | None:
        """The offset of source ``index`` (``None`` when absent or when the entry has fewer
        sources, which happens for a source added after the entry was written)."""
        return self.offsets[index] if index < len(self.offsets) else None


class OffsetSeqLog(MetadataLog[OffsetSeq]):
    """``<checkpoint>/offsets``: one :class:`OffsetSeq` per batch, in Spark's v1 text format."""

    VERSION = 1

    def serialize(self, entry: OffsetSeq) -> bytes:
        parts = [f"v{self.VERSION}", entry.metadata.to_json() if entry.metadata is not None else ""]
        parts.extend("-" if o is None else _compact(o) for o in entry.offsets)
        return "\n".join(parts).encode("utf-8")

    def deserialize(self, data: bytes, file: str) -> OffsetSeq:
        lines = split_lines(data, file)
        if not lines:
            raise incomplete_offset_log_file_error(file)
        parse_log_version(lines[0], self.VERSION, file)
        if len(lines) < 2:
            raise offset_log_file_without_metadata_error(file)
        meta_text = lines[1].strip()
        try:
            metadata = OffsetSeqMetadata.from_json(meta_text) if meta_text else None
        except ValueError as exc:
            raise offset_metadata_corrupt_error(file, exc) from exc
        offsets: list[Any | None] = []
        for i, line in enumerate(lines[2:]):
            text = line.strip()
            if text == "-":
                offsets.append(None)
                continue
            try:
                offsets.append(json.loads(text))
            except ValueError as exc:
                raise offset_corrupt_error(file, i, text, exc) from exc
        return OffsetSeq(offsets, metadata)


def restore_pinned_confs(
    stored: Mapping[str, str], session: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The pinned settings a restarted query must run with.

    A query's state layout was fixed by the settings recorded in its offset log, so on restart
    those win over whatever the session says now (e.g. changing ``spark.sql.shuffle.partitions``
    must not re-partition existing state).

    For every key of :data:`PINNED_CONF_KEYS`:

    * recorded in ``stored`` → that value (a warning when the session has a different value);
    * not recorded but has a compatibility default → the default (old checkpoints were written
      by engines that behaved that way), with a warning;
    * otherwise → the session's value (left out if the session has none), with a warning.

    Parameters
    ----------
    stored:
        The ``conf`` of the latest offset-log entry.
    session:
        The current session's values (effective values, defaults included).

    Returns
    -------
    (effective, warnings)
        ``effective`` maps each pinned key to the value to use; ``warnings`` are the messages the
        caller should log at WARNING level (this function does not log them itself, so they are
        not reported twice).
    """
    effective: dict[str, str] = {}
    warnings: list[str] = []
    for key in PINNED_CONF_KEYS:
        if key in stored:
            value = stored[key]
            if key in session and session[key] != value:
                warnings.append(
                    f"Updating the value of conf '{key}' in current session from "
                    f"'{session[key]}' to '{value}'."
                )
            effective[key] = value
        elif key in PINNED_CONF_COMPAT_DEFAULTS:
            value = PINNED_CONF_COMPAT_DEFAULTS[key]
            warnings.append(f"Conf '{key}' was not found in the offset log, using default value '{value}'")
            effective[key] = value
        else:
            current = session.get(key)
            warnings.append(
                f"Conf '{key}' was not found in the offset log. Using existing session conf value "
                f"'{current if current is not None else ''}'."
            )
            if current is not None:
                effective[key] = current
    return effective, warnings


def effective_conf(
    stored: Mapping[str, str] | None, session: Mapping[str, str | None]
) -> tuple[dict[str, str], list[str]]:
    """The pinned confs a run uses, for a fresh start (``stored is None``) or a restart.

    A fresh start takes the session's values; a restart applies :func:`restore_pinned_confs`.
    Either way every key of :data:`PINNED_CONF_KEYS` gets a value: ``None`` session values are
    treated as unset, and a key still without value falls back to Spark 4.1's session default
    (:data:`PINNED_CONF_SESSION_DEFAULTS`).

    Returns
    -------
    (conf, warnings)
        ``conf`` in the order Spark writes it; ``warnings`` to be logged by the caller (empty
        for a fresh start).
    """
    clean = {k: str(v) for k, v in session.items() if v is not None}
    warnings: list[str]
    if stored is None:
        effective, warnings = {k: clean[k] for k in PINNED_CONF_KEYS if k in clean}, []
    else:
        effective, warnings = restore_pinned_confs(stored, clean)
    return {k: effective.get(k, PINNED_CONF_SESSION_DEFAULTS[k]) for k in PINNED_CONF_KEYS}, warnings


@dataclass(frozen=True)
class RecoveryPlan:
    """What the micro-batch loop does first after (re)starting on a checkpoint.

    Attributes
    ----------
    action:
        ``"fresh"`` (no offsets: start at batch 0), ``"rerun"`` (batch ``batch_id`` was
        written to the offset log but not committed: run it again exactly as recorded) or
        ``"continue"`` (batch ``batch_id - 1`` is committed: construct ``batch_id`` normally).
    batch_id:
        The id of the batch to run or construct next.
    watermark_ms:
        The global watermark G to restore into the tracker.
    start_offsets:
        Per-source start offsets of ``batch_id`` (the previous batch's end); ``None`` for a fresh
        start and for re-running batch 0.
    end_offsets:
        ``"rerun"`` only: the recorded entry of the batch (its end offsets and metadata, which
        carries the batch watermark and batch timestamp to reuse).
    conf:
        Pinned confs recorded in the latest entry (empty for a fresh start); feed them to
        :func:`restore_pinned_confs`.
    warnings:
        Anomalies the caller should know about (also logged).
    """

    action: Literal["fresh", "rerun", "continue"]
    batch_id: int
    watermark_ms: int = 0
    start_offsets: OffsetSeq | None = None
    end_offsets: OffsetSeq | None = None
    conf: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def batch_timestamp_ms(self) -> int | None:
        """The recorded processing time of a re-run batch (``None`` otherwise)."""
        if self.action == "rerun" and self.end_offsets is not None and self.end_offsets.metadata is not None:
            return self.end_offsets.metadata.batch_timestamp_ms
        return None


def plan_recovery(
    latest_offsets: tuple[int, OffsetSeq] | None,
    previous_offsets: OffsetSeq | None,
    latest_commit: tuple[int, CommitMetadata] | None,
) -> RecoveryPlan:
    """Decide where a restarted query resumes (Spark's ``populateStartOffsets``).

    Let L be the latest batch id in the offset log and C the latest in the commit log.

    1. No offset entry: fresh start at batch 0 with G = 0.
    2. Otherwise batch L's entry is the truth: G := ``batchWatermarkMs`` of ``offsets/L`` and its
       pinned confs are restored. If L > 0, ``offsets/L-1`` must exist, because it holds the start
       offsets of batch L; without it the data range of L is unknown and the query fails
       (``batch L-1 doesn't exist``).
    3. C == L: batch L finished. The next batch is L+1, starting where L ended
       (``offsets/L``), and G := max(G, ``commits/L.nextBatchWatermarkMs``), i.e. the watermark
       batch L's data produced.
    4. C == L-1, or no commit at all: batch L was planned but not finished. It is run again with
       exactly the offsets, watermark and batch timestamp of ``offsets/L``, from the start
       offsets of ``offsets/L-1`` (state version L), so it produces the same result.
    5. C < L-1 (commit log lags by more than one, which Spark's writer never produces) or C > L
       (commit without offsets): treated as case 4, with a warning, like Spark does.

    Parameters
    ----------
    latest_offsets:
        ``(L, offsets/L)`` or ``None`` for an empty offset log.
    previous_offsets:
        ``offsets/L-1`` (``None`` if it does not exist or L == 0).
    latest_commit:
        ``(C, commits/C)`` or ``None`` for an empty commit log.

    Raises
    ------
    CheckpointError
        ``offsets/L-1`` is missing while L > 0.
    """
    if latest_offsets is None:
        if latest_commit is not None:
            message = (
                f"The commit log has batch {latest_commit[0]} but the offset log is empty; "
                "starting from batch 0"
            )
            logger.warning(message)
            return RecoveryPlan("fresh", 0, warnings=(message,))
        return RecoveryPlan("fresh", 0)
    latest_id, latest = latest_offsets
    if latest_id > 0 and previous_offsets is None:
        raise previous_batch_missing_error(latest_id - 1)
    metadata = latest.metadata or OffsetSeqMetadata()
    watermark = metadata.batch_watermark_ms
    conf = dict(metadata.conf)
    warnings: list[str] = []
    if latest_commit is not None:
        commit_id, commit = latest_commit
        if commit_id == latest_id:
            return RecoveryPlan(
                "continue",
                latest_id + 1,
                watermark_ms=max(watermark, commit.next_batch_watermark_ms),
                start_offsets=latest,
                conf=conf,
            )
        if commit_id < latest_id - 1:
            warnings.append(
                f"Batch completion log latest batch id is {commit_id}, which is not trailing "
                f"batchid {latest_id} by one"
            )
        elif commit_id > latest_id:
            warnings.append(
                f"Batch completion log latest batch id is {commit_id}, which is ahead of the "
                f"offset log's latest batch id {latest_id}; re-running batch {latest_id}"
            )
    for message in warnings:
        logger.warning(message)
    return RecoveryPlan(
        "rerun",
        latest_id,
        watermark_ms=watermark,
        start_offsets=previous_offsets if latest_id > 0 else None,
        end_offsets=latest,
        conf=conf,
        warnings=tuple(warnings),
    )


def plan_recovery_from_logs(offset_log: OffsetSeqLog, commit_log: CommitLog) -> RecoveryPlan:
    """:func:`plan_recovery` over the logs of a checkpoint (reads ``offsets/L``,
    ``offsets/L-1`` and the latest commit)."""
    latest = offset_log.get_latest()
    previous = offset_log.get(latest[0] - 1) if latest is not None and latest[0] > 0 else None
    return plan_recovery(latest, previous, commit_log.get_latest())


#: the pinned conf that is the number of state partitions
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def partitions_of_batch(entry: OffsetSeq | None) -> int | None:
    """The shuffle partitions an offset-log entry pins (None when it records none)."""
    if entry is None or entry.metadata is None:
        return None
    value = entry.metadata.conf.get(SHUFFLE_PARTITIONS)
    return int(value) if value is not None else None


def state_partitions_of_batch(checkpoint: "CheckpointFileManager", operator_id: int, batch_id: int) -> list[int]:
    """The state partitions of ``operator_id`` that hold the state batch ``batch_id`` committed:
    the partition directories found, bounded by the count the batch pinned in its offset entry
    (a repartition to fewer partitions leaves the higher ones with their old files)."""
    op = checkpoint.child(f"state/{operator_id}")
    found = sorted(int(n) for n in op.list() if n.isdigit()) if op.exists() else []
    count = partitions_of_batch(OffsetSeqLog(checkpoint.child("offsets")).get(batch_id))
    return [p for p in found if count is None or p < count]


def is_repartition_batch(offset_log: OffsetSeqLog, batch_id: int) -> bool:
    """Whether ``batch_id`` is a repartition batch: its pinned partition count differs from the
    previous batch's (a query's own batches never change it; it is pinned)."""
    if batch_id <= 0:
        return False
    now, before = partitions_of_batch(offset_log.get(batch_id)), partitions_of_batch(offset_log.get(batch_id - 1))
    return now is not None and before is not None and now != before
