"""The live dashboard (issue 16, item 8) in a real browser: headless Chromium (Debian's package,
which the test command installs) loads the page of a running query, and the charts hold the
figures of every batch's progress, across a restart (the history is kept in the checkpoint).
A screenshot is kept as a test artifact (``test-artifacts/dashboard.png``, or under
``$STATESTREAM_TEST_ARTIFACTS``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from html import unescape
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.progress_log import ProgressLog
from tests.differential.harness import write_input_file
from tests.spark_confs import session_confs

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is not installed: scripts/test.sh installs it (apt-get install chromium)"
    return path


def browse(chromium: str, url: str, tmp_path: Path, *extra: str) -> str:
    """The page's DOM after its scripts ran (virtual time lets its polling run at once)."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    run = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=15000", *extra, url],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def data_of(dom: str, element_id: str) -> dict[str, object]:
    """The ``data-*`` attributes of one element of the dumped DOM, JSON-decoded."""
    m = re.search(rf'<div id="{element_id}"[^>]*>', dom)
    assert m, f"no element {element_id} in the page"
    return {k: json.loads(unescape(v)) for k, v in re.findall(r'data-([a-z]+)="([^"]*)"', m.group(0))}


def _windowed(df):
    return (
        df.withColumn("t", F.timestamp_seconds("v")).withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "5 seconds")).agg(F.count("*").alias("n"))
    )


def _start(ss, input_dir: Path, checkpoint: Path):
    return (
        _windowed(ss.readStream.format("parquet").schema("v LONG").option("maxFilesPerTrigger", 1).load(str(input_dir)))
        .writeStream.outputMode("update").foreachBatch(lambda df, b: None).option("checkpointLocation", str(checkpoint)).start()
    )


def test_dashboard_of_a_running_query_in_chromium(spark, chromium, tmp_path):
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    schema = StructType.fromDDL("v LONG")
    input_dir, checkpoint = tmp_path / "in", tmp_path / "ck"
    input_dir.mkdir()
    batches = [[(1,), (2,), (3,)], [(6,), (7,), (12,)], [(14,), (21,)], [(30,), (31,), (2,)], [(45,)]]
    for i, b in enumerate(batches[:3]):
        write_input_file(input_dir, i, b, schema, "parquet", 1_700_000_000 + i)
    with session_confs(spark, {"spark.statestream.lateness.enabled": "true"}):
        first = _start(ss, input_dir, checkpoint)  # a first run: its history must survive the restart
    first.processAllAvailable()
    first.stop()
    earlier = [p for p in first.recentProgress]
    quiet = tmp_path / "ck-first-run"  # no row came late in the first run
    shutil.copytree(checkpoint, quiet)
    for i, b in enumerate(batches[3:], start=3):
        write_input_file(input_dir, i, b, schema, "parquet", 1_700_000_000 + i)
    with session_confs(spark, {"spark.statestream.ui.port": "0", "spark.statestream.lateness.enabled": "true"}):
        query = _start(ss, input_dir, checkpoint)
    try:
        query.processAllAvailable()
        url = query.dashboardUrl
        assert url and url.startswith("http://127.0.0.1:"), url
        progress = earlier + [p for p in query.recentProgress]
        dom = browse(chromium, url, tmp_path, "--dump-dom")
        artifacts = Path(os.environ.get("STATESTREAM_TEST_ARTIFACTS", ROOT / "test-artifacts"))
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "dashboard.png"
        browse(chromium, url, tmp_path, f"--screenshot={shot}", "--window-size=1400,1500")
    finally:
        query.stop()
    assert shot.exists() and shot.stat().st_size > 20_000, "no screenshot, or an empty page"
    ids = [p["batchId"] for p in progress]
    assert len({p["runId"] for p in progress}) == 2 and ids == sorted(set(ids))
    assert json.loads(unescape(re.search(r'<body[^>]*data-batches="([^"]*)"', dom).group(1))) == ids
    assert data_of(dom, "inputRows")["series"] == {"input rows": [p["numInputRows"] for p in progress]}
    assert sum(p["numInputRows"] for p in progress) == sum(len(b) for b in batches)
    rates = data_of(dom, "rates")["series"]
    assert rates["process rate"] == [p["processedRowsPerSecond"] for p in progress]
    assert data_of(dom, "stateRows")["series"] == {"0: stateStoreSave": [p["stateOperators"][0]["numRowsTotal"] for p in progress]}
    assert data_of(dom, "lateRows")["series"] == {"0: stateStoreSave": [p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in progress]}
    assert sum(data_of(dom, "lateRows")["series"]["0: stateStoreSave"]) == 1  # (2,) came after the watermark passed it
    sizes = data_of(dom, "stateMemory")["series"]
    state = [p["stateOperators"][0] for p in progress]
    assert sizes == {
        "0: stateStoreSave current version": [s["customMetrics"]["stateOnCurrentVersionSizeBytes"] for s in state],
        "0: stateStoreSave in memory": [s["memoryUsedBytes"] for s in state],
    }
    assert max(sizes["0: stateStoreSave current version"]) > 0
    assert data_of(dom, "watermark")["watermarks"] == [p["eventTime"]["watermark"] for p in progress]
    # the gap starts with the watermark: Spark's epoch 0 before it is "no watermark", not a gap
    started = [p["batchId"] for p in progress if p["eventTime"]["watermark"] != "1970-01-01T00:00:00.000Z"]
    assert started and started[0] > ids[0] and data_of(dom, "watermark")["shown"] == ids[ids.index(started[0]):]
    gaps = data_of(dom, "watermark")["series"]["watermark gap"]
    assert gaps[: ids.index(started[0])] == [None] * ids.index(started[0]) and None not in gaps[ids.index(started[0]) :]
    assert data_of(dom, "lateRows")["empty"] is False
    # the lateness histogram (statestream's, from the history) sums every batch's buckets
    history = ProgressLog(CheckpointFileManager(str(checkpoint)).child("progress")).read()
    [lateness] = data_of(dom, "lateness")["series"].values()
    records = [next(iter(e["lateness"].values())) for e in history]
    assert lateness["delayMs"] == 10_000 and lateness["ahead"] == sum(r["ahead"] for r in records)
    assert sum(n for _, n in lateness["buckets"]) == sum(n for r in records for _, n in r["buckets"]) > 0
    assert lateness["ahead"] + sum(n for _, n in lateness["buckets"]) == sum(len(b) for b in batches)
    # a foreachBatch sink reports numOutputRows -1 (as on Spark): shown as n/a
    assert progress[-1]["sink"]["numOutputRows"] == -1
    assert re.search(r"<td>sink rows</td><td>n/a</td>", dom), re.search(r'<div id="last">.*?</table>', dom, re.S).group(0)
    duration = data_of(dom, "duration")["series"]
    assert "addBatch" in duration and duration["addBatch"] == [p["durationMs"]["addBatch"] for p in progress]
    # the command line serves the same history of the stopped query
    served = subprocess.Popen(
        [str(Path(os.sys.executable).parent / "statestream"), "ui", str(checkpoint), "--port", "0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = served.stdout.readline()
        cli_url = re.search(r"(http://\S+/)", line).group(1)
        entries = json.loads(urllib.request.urlopen(cli_url + "api/progress", timeout=30).read())
        assert [e["batchId"] for e in entries] == ids
    finally:
        served.terminate()
        served.wait(30)
    # a history with no late row: the chart says "none" instead of an axis around nothing
    served = subprocess.Popen(
        [str(Path(os.sys.executable).parent / "statestream"), "ui", str(quiet), "--port", "0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        quiet_url = re.search(r"(http://\S+/)", served.stdout.readline()).group(1)
        quiet_dom = browse(chromium, quiet_url, tmp_path, "--dump-dom")
        browse(chromium, quiet_url, tmp_path, f"--screenshot={artifacts / 'dashboard-no-late-rows.png'}", "--window-size=1400,1500")
    finally:
        served.terminate()
        served.wait(30)
    assert data_of(quiet_dom, "lateRows")["empty"] is True
    assert data_of(quiet_dom, "lateRows")["series"] == {"0: stateStoreSave": [p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in earlier]}
    assert data_of(quiet_dom, "inputRows")["empty"] is False
