"""Offset log, commit log, query metadata and restart planning (no Spark needed)."""

from __future__ import annotations

import os

import pytest

from statestream.checkpoint.commits import CommitLog, CommitMetadata
from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.log import parse_log_version
from statestream.checkpoint.metadata import StreamMetadata
from statestream.checkpoint.offsets import (
    PINNED_CONF_KEYS,
    PINNED_CONF_SESSION_DEFAULTS,
    OffsetSeq,
    OffsetSeqLog,
    OffsetSeqMetadata,
    plan_recovery,
    plan_recovery_from_logs,
    effective_conf,
    restore_pinned_confs,
)
from statestream.errors import CheckpointError

# An offsets file written by Spark 4.1 (file source, update-mode windowed count, 2 partitions).
SPARK_OFFSETS_2 = (
    'v1\n{"batchWatermarkMs":30000,"batchTimestampMs":1795292894281,"conf":{'
    '"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",'
    '"spark.sql.streaming.stateStore.rocksdb.formatVersion":"5",'
    '"spark.sql.streaming.stateStore.encodingFormat":"unsaferow",'
    '"spark.sql.streaming.statefulOperator.useStrictDistribution":"true",'
    '"spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion":"2",'
    '"spark.sql.streaming.multipleWatermarkPolicy":"min",'
    '"spark.sql.streaming.aggregation.stateFormatVersion":"2",'
    '"spark.sql.shuffle.partitions":"2",'
    '"spark.sql.streaming.join.stateFormatVersion":"2",'
    '"spark.sql.streaming.stateStore.compression.codec":"lz4",'
    '"spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan":"false"}}\n'
    '{"logOffset":1}'
).encode()


@pytest.fixture
def ckpt(tmp_path) -> CheckpointFileManager:
    return CheckpointFileManager(str(tmp_path / "cp"))


def _meta(wm: int = 0, ts: int = 1000, **conf: str) -> OffsetSeqMetadata:
    return OffsetSeqMetadata(wm, ts, dict(conf))


# -- MetadataLog basics ---------------------------------------------------------------------------


def test_add_get_and_never_overwrite(ckpt):
    log = CommitLog(ckpt.child("commits"))
    assert log.get(0) is None
    assert log.get_latest() is None
    assert log.add(0, CommitMetadata(5)) is True
    assert log.add(0, CommitMetadata(99)) is False
    assert log.get(0) == CommitMetadata(5)
    assert log.list_batch_ids() == [0]


def test_file_names_are_decimal_batch_ids_and_junk_is_ignored(ckpt):
    log = CommitLog(ckpt.child("commits"))
    for b in (0, 1, 2, 10):
        log.add(b, CommitMetadata(b))
    ckpt.write_atomic("commits/.10.crc", b"x")
    ckpt.write_atomic("commits/notes.txt", b"x")
    assert sorted(os.listdir(ckpt.path("commits"))) == [".10.crc", "0", "1", "10", "2", "notes.txt"]
    assert log.list_batch_ids() == [0, 1, 2, 10]
    assert log.get_latest() == (10, CommitMetadata(10))
    assert log.get_latest_batch_id() == 10


def test_directory_as_string_path(tmp_path):
    log = CommitLog(str(tmp_path / "c"))
    assert log.add(3, CommitMetadata(1))
    assert (tmp_path / "c" / "3").read_bytes() == b'v1\n{"nextBatchWatermarkMs":1}'


def test_get_range_and_holes(ckpt):
    log = CommitLog(ckpt.child("commits"))
    for b in range(5):
        log.add(b, CommitMetadata(b * 10))
    assert [b for b, _ in log.get_range(1, 3)] == [1, 2, 3]
    assert [b for b, _ in log.get_range(None, 1)] == [0, 1]
    assert [b for b, _ in log.get_range(3, None)] == [3, 4]
    assert [b for b, _ in log.get_range(None, None)] == [0, 1, 2, 3, 4]
    ckpt.delete("commits/2")
    with pytest.raises(CheckpointError, match=r"batches \(2\) don't exist"):
        log.get_range(1, 3)
    with pytest.raises(CheckpointError, match=r"batches \(7\) don't exist"):
        log.get_range(7, 7)
    with pytest.raises(ValueError, match="after end batch id"):
        log.get_range(3, 1)


def test_purge_is_idempotent(ckpt):
    log = CommitLog(ckpt.child("commits"))
    for b in range(6):
        log.add(b, CommitMetadata(b))
    log.purge(3)
    assert log.list_batch_ids() == [3, 4, 5]
    log.purge(3)
    log.purge(1)
    assert log.list_batch_ids() == [3, 4, 5]
    log.purge_after(4)
    assert log.list_batch_ids() == [3, 4]
    CommitLog(ckpt.child("nowhere")).purge(10)  # missing directory is fine


def test_negative_batch_id_rejected(ckpt):
    log = CommitLog(ckpt.child("commits"))
    with pytest.raises(ValueError, match="non-negative"):
        log.add(-1, CommitMetadata(0))


# -- versions and corruption ----------------------------------------------------------------------


def test_unsupported_version_names_file_and_both_versions(ckpt):
    ckpt.write_atomic("offsets/0", b"v99999")
    log = OffsetSeqLog(ckpt.child("offsets"))
    with pytest.raises(CheckpointError) as err:
        log.get(0)
    text = str(err.value)
    assert ckpt.path("offsets/0") in text
    assert "maximum supported log version is v1, but encountered v99999" in text
    assert "produced by a newer version of Spark and cannot be read by this version" in text


@pytest.mark.parametrize("first", ["", "1", "v", "v0", "v-1", "vx", "version1"])
def test_malformed_version_line(first):
    with pytest.raises(CheckpointError, match="failed to read correct log version"):
        parse_log_version(first, 1, "/x/offsets/0")


def test_version_line_ok():
    assert parse_log_version("v1", 1, "f") == 1
    assert parse_log_version(" v1 ", 2, "f") == 1


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"v1",
        b'v1\n{"batchWatermarkMs":',
        b'v1\n{"batchWatermarkMs":"x"}\n',
        b'v1\n{"batchWatermarkMs":0}\n{not json',
        b"\xff\xfe",
    ],
)
def test_corrupt_offsets_file_names_the_file(ckpt, content):
    ckpt.write_atomic("offsets/4", content)
    with pytest.raises(CheckpointError) as err:
        OffsetSeqLog(ckpt.child("offsets")).get(4)
    assert ckpt.path("offsets/4") in str(err.value)


@pytest.mark.parametrize("content", [b"", b"v2\n{}", b"v1\n[1]", b'v1\n{"nextBatchWatermarkMs":"a"}'])
def test_corrupt_commit_file_names_the_file(ckpt, content):
    ckpt.write_atomic("commits/1", content)
    with pytest.raises(CheckpointError) as err:
        CommitLog(ckpt.child("commits")).get(1)
    assert ckpt.path("commits/1") in str(err.value)


def test_corrupt_latest_is_an_error_not_a_fallback(ckpt):
    log = CommitLog(ckpt.child("commits"))
    log.add(0, CommitMetadata(1))
    ckpt.write_atomic("commits/1", b"garbage")
    with pytest.raises(CheckpointError):
        log.get_latest()


# -- offset log format ----------------------------------------------------------------------------


def test_offsets_round_trip_spark_file_byte_for_byte(ckpt):
    ckpt.write_atomic("offsets/2", SPARK_OFFSETS_2)
    log = OffsetSeqLog(ckpt.child("offsets"))
    entry = log.get(2)
    assert entry.offsets == [{"logOffset": 1}]
    assert entry.metadata.batch_watermark_ms == 30000
    assert entry.metadata.batch_timestamp_ms == 1795292894281
    assert entry.metadata.conf["spark.sql.shuffle.partitions"] == "2"
    assert log.serialize(entry) == SPARK_OFFSETS_2
    # a fresh entry built from the session values serialises in Spark's key order, too
    session = dict(PINNED_CONF_SESSION_DEFAULTS, **{"spark.sql.shuffle.partitions": "2", "other.key": "x"})
    fresh = OffsetSeq([{"logOffset": 1}], OffsetSeqMetadata.from_session_conf(30000, 1795292894281, session))
    assert log.serialize(fresh) == SPARK_OFFSETS_2


def test_offsets_format_none_offsets_and_no_trailing_newline(ckpt):
    log = OffsetSeqLog(ckpt.child("offsets"))
    entry = OffsetSeq([{"a": 1, "b": [1, 2]}, None, 7, "s"], _meta(15000, 42, **{"spark.sql.shuffle.partitions": "2"}))
    assert log.add(0, entry)
    raw = open(ckpt.path("offsets/0"), "rb").read()
    assert raw == (
        b'v1\n{"batchWatermarkMs":15000,"batchTimestampMs":42,"conf":{"spark.sql.shuffle.partitions":"2"}}\n'
        b'{"a":1,"b":[1,2]}\n-\n7\n"s"'
    )
    assert log.get(0) == entry


def test_offsets_reader_tolerates_trailing_newline_and_empty_metadata(ckpt):
    ckpt.write_atomic("offsets/0", b'v1\n\n{"logOffset":0}\n')
    entry = OffsetSeqLog(ckpt.child("offsets")).get(0)
    assert entry.metadata is None
    assert entry.offsets == [{"logOffset": 0}]


def test_offsets_metadata_defaults_for_missing_fields():
    assert OffsetSeqMetadata.from_json("{}") == OffsetSeqMetadata(0, 0, {})
    assert OffsetSeqMetadata.from_json('{"batchWatermarkMs":5,"extra":1}') == OffsetSeqMetadata(5, 0, {})


def test_commit_format(ckpt):
    log = CommitLog(ckpt.child("commits"))
    log.add(0, CommitMetadata(2000))
    assert open(ckpt.path("commits/0"), "rb").read() == b'v1\n{"nextBatchWatermarkMs":2000}'
    ckpt.write_atomic("commits/1", b"v1\n")
    assert log.get(1) == CommitMetadata(0)


# -- pinned confs ---------------------------------------------------------------------------------


def test_pinned_keys_list():
    assert len(PINNED_CONF_KEYS) == 11
    assert set(PINNED_CONF_KEYS) == set(PINNED_CONF_SESSION_DEFAULTS)


def test_restore_pinned_confs_stored_wins_and_compat_defaults():
    session = dict(PINNED_CONF_SESSION_DEFAULTS, **{"spark.sql.shuffle.partitions": "5"})
    stored = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stateStore.providerClass": "P"}
    effective, warnings = restore_pinned_confs(stored, session)
    assert effective["spark.sql.shuffle.partitions"] == "2"
    assert effective["spark.sql.streaming.stateStore.providerClass"] == "P"
    # missing keys of an old checkpoint get the compatibility defaults, not the session's
    assert effective["spark.sql.streaming.aggregation.stateFormatVersion"] == "1"
    assert effective["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    assert effective["spark.sql.streaming.statefulOperator.useStrictDistribution"] == "false"
    assert effective["spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan"] == "true"
    assert effective["spark.sql.streaming.stateStore.encodingFormat"] == "unsaferow"
    assert effective["spark.sql.streaming.stateStore.compression.codec"] == "lz4"
    # ... except those without one, which keep the session value
    assert effective["spark.sql.streaming.stateStore.rocksdb.formatVersion"] == "5"
    assert any("from '5' to '2'" in w for w in warnings)
    assert any("was not found in the offset log, using default value '1'" in w for w in warnings)


def test_restore_pinned_confs_no_warnings_when_equal():
    effective, warnings = restore_pinned_confs(PINNED_CONF_SESSION_DEFAULTS, PINNED_CONF_SESSION_DEFAULTS)
    assert effective == PINNED_CONF_SESSION_DEFAULTS
    assert warnings == []


# -- stream metadata ------------------------------------------------------------------------------


def test_stream_metadata_created_once(ckpt):
    assert StreamMetadata.read(ckpt) is None
    first = StreamMetadata.get_or_create(ckpt)
    second = StreamMetadata.get_or_create(ckpt.root)
    assert first == second
    raw = open(ckpt.path("metadata"), "rb").read()
    assert raw == b'{"id":"' + first.id.encode() + b'"}'
    with pytest.raises(CheckpointError):
        StreamMetadata("other").write(ckpt)


def test_stream_metadata_reads_spark_file(ckpt):
    ckpt.write_atomic("metadata", b'{"id":"b0736d78-eee3-4eb7-825d-ccc870e716a9"}')
    assert StreamMetadata.get_or_create(ckpt).id == "b0736d78-eee3-4eb7-825d-ccc870e716a9"


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"id":3}'])
def test_stream_metadata_corrupt(ckpt, content):
    ckpt.write_atomic("metadata", content)
    with pytest.raises(CheckpointError, match="metadata"):
        StreamMetadata.read(ckpt)


# -- recovery planning ----------------------------------------------------------------------------


def _seq(off: int, wm: int = 0, ts: int = 100) -> OffsetSeq:
    return OffsetSeq([{"logOffset": off}], _meta(wm, ts, **{"spark.sql.shuffle.partitions": "2"}))


def test_recovery_fresh():
    plan = plan_recovery(None, None, None)
    assert (plan.action, plan.batch_id, plan.watermark_ms) == ("fresh", 0, 0)


def test_recovery_continue_after_committed_batch():
    plan = plan_recovery((3, _seq(3, wm=5000)), _seq(2), (3, CommitMetadata(15000)))
    assert plan.action == "continue"
    assert plan.batch_id == 4
    assert plan.watermark_ms == 15000
    assert plan.start_offsets == _seq(3, wm=5000)
    assert plan.end_offsets is None
    assert plan.conf == {"spark.sql.shuffle.partitions": "2"}
    # the commit never lowers G
    assert plan_recovery((3, _seq(3, wm=5000)), _seq(2), (3, CommitMetadata(0))).watermark_ms == 5000


def test_recovery_rerun_uncommitted_batch():
    plan = plan_recovery((3, _seq(3, wm=15000, ts=777)), _seq(2, wm=5000), (2, CommitMetadata(15000)))
    assert plan.action == "rerun"
    assert plan.batch_id == 3
    assert plan.watermark_ms == 15000
    assert plan.batch_timestamp_ms == 777
    assert plan.start_offsets == _seq(2, wm=5000)
    assert plan.end_offsets == _seq(3, wm=15000, ts=777)
    assert plan.warnings == ()


def test_recovery_rerun_batch_zero_and_lagging_commit():
    plan = plan_recovery((0, _seq(0)), None, None)
    assert (plan.action, plan.batch_id, plan.start_offsets) == ("rerun", 0, None)
    lagging = plan_recovery((5, _seq(5)), _seq(4), (2, CommitMetadata(1)))
    assert lagging.action == "rerun" and lagging.batch_id == 5
    assert "not trailing batchid 5 by one" in lagging.warnings[0]


def test_recovery_missing_previous_offsets():
    with pytest.raises(CheckpointError, match="batch 2 doesn't exist"):
        plan_recovery((3, _seq(3)), None, (2, CommitMetadata(0)))


def test_recovery_from_logs(ckpt):
    offsets = OffsetSeqLog(ckpt.child("offsets"))
    commits = CommitLog(ckpt.child("commits"))
    assert plan_recovery_from_logs(offsets, commits).action == "fresh"
    offsets.add(0, _seq(0))
    commits.add(0, CommitMetadata(2000))
    offsets.add(1, _seq(1, wm=2000))
    plan = plan_recovery_from_logs(offsets, commits)
    assert (plan.action, plan.batch_id, plan.watermark_ms) == ("rerun", 1, 2000)
    commits.add(1, CommitMetadata(30000))
    plan = plan_recovery_from_logs(offsets, commits)
    assert (plan.action, plan.batch_id, plan.watermark_ms) == ("continue", 2, 30000)
    offsets.add(2, _seq(1, wm=30000))
    offsets.purge(2)
    with pytest.raises(CheckpointError, match="batch 1 doesn't exist"):
        plan_recovery_from_logs(offsets, commits)


def test_effective_conf_fresh_and_restart():
    session = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.multipleWatermarkPolicy": None}
    conf, warnings = effective_conf(None, session)
    assert warnings == []
    assert list(conf) == list(PINNED_CONF_KEYS)
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    conf, warnings = effective_conf({"spark.sql.shuffle.partitions": "3"}, {"spark.sql.shuffle.partitions": "5"})
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.sql.streaming.aggregation.stateFormatVersion"] == "1"
    assert conf["spark.sql.streaming.stateStore.rocksdb.formatVersion"] == "5"  # session default
    assert warnings


# -- the file sink's and file source's logs at a restart -------------------------------------------


def test_file_sink_log_behind_the_commits_is_named_at_start(tmp_path):
    """Each batch's sink log entry is written before its commit: a log that ends below the last
    commit lost entries (its output is invisible to readers), and ``start()`` says which."""
    from statestream.sinks.files import FileStreamSink

    ck = tmp_path / "ck"
    commits = CommitLog(CheckpointFileManager(str(ck / "commits")))
    sink = FileStreamSink(None, str(tmp_path / "out"), "parquet")
    for b in range(3):
        sink.log.add(b, [{"path": f"file:/out/part-{b}.parquet", "size": 1, "isDir": False, "modificationTime": 1,
                          "blockReplication": 1, "blockSize": 1, "action": "add"}])
        commits.add(b, CommitMetadata(0))
    sink.on_query_start(str(ck), None)  # in step: fine
    commits.add(3, CommitMetadata(0))
    with pytest.raises(CheckpointError, match=r"ends at batch 2, but the checkpoint .* committed batch 3: the log file .*_spark_metadata/3 is missing"):
        FileStreamSink(None, str(tmp_path / "out"), "parquet").on_query_start(str(ck), None)
    (tmp_path / "out" / "_spark_metadata" / "1").write_bytes(b"v1\n{\"path\":\"file:/out/p\xff")
    with pytest.raises(CheckpointError, match=r"Log file .*_spark_metadata/1 is corrupt"):
        FileStreamSink(None, str(tmp_path / "out"), "parquet").on_query_start(str(ck), None)


def test_first_compaction_to_keep_is_sparks_rule():
    from statestream.checkpoint.file_stream_log import first_compaction_to_keep

    assert first_compaction_to_keep(9, 10, 100) is None  # too short to delete anything
    assert first_compaction_to_keep(108, 10, 100) is None
    assert first_compaction_to_keep(109, 10, 100) == 9  # batches 10..109 stay readable from 9.compact
    assert first_compaction_to_keep(119, 10, 100) == 19
    assert first_compaction_to_keep(29, 10, 2) == 19
    assert first_compaction_to_keep(5, 3, 1) == 2


def test_compactible_log_deletes_expired_entries_after_a_compaction(tmp_path):
    """The files below the compact file that keeps ``min_batches_to_retain`` batches readable
    go once older than the cleanup delay: the log stays bounded, and reads the same."""
    from statestream.checkpoint.file_stream_log import FileStreamSinkLog

    now = [1_000_000.0]
    log = FileStreamSinkLog(str(tmp_path / "log"), default_compact_interval=5, cleanup_delay_ms=60_000,
                            min_batches_to_retain=5, clock=lambda: now[0])

    def entry(b: int) -> dict:
        return {"path": f"file:/out/p{b}", "size": 1, "isDir": False, "modificationTime": 1, "blockReplication": 1, "blockSize": 1, "action": "add"}

    for b in range(15):
        log.add(b, [entry(b)])
    assert len(os.listdir(tmp_path / "log")) == 15  # all younger than the delay
    for name in os.listdir(tmp_path / "log"):
        os.utime(tmp_path / "log" / name, (now[0] - 3600, now[0] - 3600))
    for b in range(15, 20):
        log.add(b, [entry(b)])  # 19 is a compaction: below 14.compact goes
    names = sorted(os.listdir(tmp_path / "log"), key=lambda n: int(n.split(".")[0]))
    assert names[0] == "14.compact" and len(names) == 6
    assert [e["path"] for e in log.all_entries()] == [f"file:/out/p{b}" for b in range(20)]
    kept = FileStreamSinkLog(str(tmp_path / "kept"), default_compact_interval=5, delete_expired=False, min_batches_to_retain=1, cleanup_delay_ms=0)
    for b in range(20):
        kept.add(b, [entry(b)])
    assert len(os.listdir(tmp_path / "kept")) == 20
