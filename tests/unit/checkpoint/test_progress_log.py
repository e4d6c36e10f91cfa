"""The progress history in the checkpoint: one file per batch, blocks of 100 merged, old blocks
dropped, a rerun's progress replacing the first one, damage costing history only."""

from __future__ import annotations

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.progress_log import COMPACT_EVERY, ProgressLog


def test_blocks_retention_and_reads(tmp_path):
    history = ProgressLog(CheckpointFileManager(str(tmp_path)), retain=200)
    for b in range(350):
        history.add({"batchId": b, "numInputRows": b})
    names = sorted(p.name for p in tmp_path.iterdir())
    # 0-99 is dropped (older than 200 batches before 299), blocks 100-199 and 200-299 stay
    assert [n for n in names if n.endswith(".jsonl")] == ["100-199.jsonl", "200-299.jsonl"]
    assert len([n for n in names if n.endswith(".json")]) == 50
    assert [p["batchId"] for p in history.read()] == list(range(100, 350))
    assert [p["batchId"] for p in history.read(after=297)] == list(range(298, 350))
    history.add({"batchId": 349, "numInputRows": -1})  # a rerun of the last batch
    assert history.read(after=348) == [{"batchId": 349, "numInputRows": -1}]
    assert COMPACT_EVERY == 100


def test_damage_costs_history_not_batches(tmp_path, caplog):
    history = ProgressLog(CheckpointFileManager(str(tmp_path)))
    history.add({"batchId": 0})
    (tmp_path / "1.json").write_text("{not json")
    history.add({"numInputRows": 3})  # no batch id: logged, not raised
    assert [p["batchId"] for p in history.read()] == [0]
    assert "unreadable progress entry" in caplog.text and "could not record the progress" in caplog.text


def test_a_rollback_forgets_later_batches(tmp_path):
    history = ProgressLog(CheckpointFileManager(str(tmp_path)))
    for b in range(250):
        history.add({"batchId": b})
    history.truncate_after(150)
    assert [p["batchId"] for p in history.read()] == list(range(151))
    for b in range(151, 200):  # the rerun: its block is made again from the kept files and its own
        history.add({"batchId": b, "again": True})
    assert [p["batchId"] for p in history.read()] == list(range(200))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-99.jsonl", "100-199.jsonl"]
