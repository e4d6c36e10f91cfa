"""A rollback puts a Python state operator's store records back with the batches: a variable
first declared after the target batch begins at the rerun's first version, and a store left
undeclared after it is not frozen any more (its files up to the batch are there)."""

from __future__ import annotations

import json

from statestream.checkpoint.files import CheckpointFileManager
from statestream.state import schema as S
from statestream.tools.rollback import _rollback_python_state_records, _state_files_after


def test_store_records_go_back_with_the_batches(tmp_path):
    state = CheckpointFileManager(str(tmp_path / "state"))
    S.write_operator_properties(state.root, 0, {
        "timeMode": "None",
        S.FIRST_BATCH_PROPERTY: json.dumps({"a": 0, "b": 15, "c": 9}),
        S.DORMANT_PROPERTY: json.dumps({"old": [4, None], "later": [18, None]}),
    })
    (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    _rollback_python_state_records(state, 10)
    assert S.read_stores_first_batch(state.root, 0) == {"a": 0, "b": 11, "c": 9}
    assert S.read_dormant_stores(state.root, 0) == {"old": (4, None)}
    assert S.read_operator_properties(state.root, 0)["timeMode"] == "None"


def test_state_files_after_a_version_follow_the_providers_file_names(tmp_path):
    """Deltas and snapshots above the version in every partition and named store; crc files,
    strays and the operator's own files are not state files."""
    root = tmp_path / "state"
    names = {
        "0/0": ["1.delta", "2.delta", "2.snapshot", "3.delta", ".3.delta.crc", "3.delta.tmp", "x.delta"],
        "0/1/left-keyToNumValues": ["2.delta", "4.snapshot"],
        "0/_metadata": ["schema"],
    }
    for rel, files in names.items():
        (root / rel).mkdir(parents=True)
        for name in files:
            (root / rel / name).write_bytes(b"")
    (root / "notes").mkdir()
    (root / "notes" / "9.delta").write_bytes(b"")
    state = CheckpointFileManager(str(root))
    assert _state_files_after(state, 2) == ["0/0/3.delta", "0/1/left-keyToNumValues/4.snapshot"]
    assert len(_state_files_after(state, 0)) == 6
