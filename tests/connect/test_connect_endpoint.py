"""`statestream connect-server` against Spark's own Connect server, from unchanged client code.

One endpoint process serves both: its driver runs Spark's Connect server (streaming on Spark's
engine) behind statestream's endpoint (streaming on statestream). The same client job
(`client_jobs.py`, in a process of its own, as a Connect client is) runs against each, and what
it saw must be the same: the sink's rows, each batch's input rows, watermark and state rows, and
the query object's answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.connect.servers import kill, start_endpoint, with_token

pytest.importorskip("grpc")

JOBS = Path(__file__).with_name("client_jobs.py")
ROOT = Path(__file__).resolve().parents[2]


def _write_input(path: Path) -> None:
    path.mkdir()
    for f in range(3):
        lines = [
            json.dumps({"ts": f"2026-01-01 00:00:{f * 12 + i % 12:02d}", "k": i % 3, "v": i + f * 10})
            for i in range(8)
        ]
        # a late row in the last file: below the watermark the first files set
        if f == 2:
            lines.append(json.dumps({"ts": "2026-01-01 00:00:01", "k": 1, "v": 99}))
        (path / f"part-{f}.json").write_text("\n".join(lines) + "\n")
        os.utime(path / f"part-{f}.json", (1_700_000_000 + f, 1_700_000_000 + f))


#: both servers ask for a token (Spark's ``spark.connect.authenticate.token``); the clients give it
TOKEN = "statestream-test-token"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    log = tmp_path_factory.mktemp("endpoint") / "server.log"
    server, (url, spark_url) = start_endpoint(log, token=TOKEN)
    try:
        yield {"statestream": with_token(url, TOKEN), "spark": with_token(spark_url, TOKEN), "log": log, "bare": (url, spark_url)}
    finally:
        kill(server)


def _run(url: str, job: str, data: Path, checkpoint: Path, *settings: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(JOBS), url, job, str(data), str(checkpoint), *settings],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )


def _both(endpoint: dict, tmp_path: Path, job: str) -> tuple[dict, dict]:
    """What ``job`` saw against Spark's Connect server and against the endpoint, on the same
    input; the endpoint's run must have been statestream's (its own progress history)."""
    data = tmp_path / "in"
    _write_input(data)
    spark = _seen(endpoint["spark"], job, data, tmp_path / "spark-checkpoint")
    ours = _seen(endpoint["statestream"], job, data, tmp_path / "statestream-checkpoint")
    assert (tmp_path / "statestream-checkpoint" / "progress").is_dir()
    return spark, ours


def _seen(url: str, job: str, data: Path, checkpoint: Path) -> dict:
    done = _run(url, job, data, checkpoint)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("job", ["windowed_count", "dedup", "stream_static_join", "stream_stream_join", "stream_stream_join_by_dataframe", "union_of_two_reads", "python_udf", "expression_forms", "apply_in_pandas_with_state", "transform_with_state_pandas", "transform_with_state_initial", "transform_with_state_rows"])
def test_same_answers_as_sparks_connect_server(endpoint, tmp_path, job):
    spark, ours = _both(endpoint, tmp_path, job)
    assert spark["rows"], "the job wrote no rows: it tests nothing"
    assert ours == spark
    assert not (tmp_path / "spark-checkpoint" / "progress").exists()


def test_the_query_object_and_the_query_manager(endpoint, tmp_path):
    spark, ours = _both(endpoint, tmp_path, "query_api")
    assert spark["active"] == ["api"] and spark["activeAfterStop"] == []
    assert ours == spark


def test_a_listener_hears_every_event(endpoint, tmp_path):
    spark, ours = _both(endpoint, tmp_path, "listener")
    assert spark["started"] == ["heard"] and spark["terminated"] == [[None, None]] and spark["progress"]
    assert ours == spark


def test_interrupts_reach_the_endpoints_queries_and_waits(endpoint, tmp_path):
    """interruptTag stops the queries its tag started and ends the waits it tagged (with
    OPERATION_CANCELED), interruptAll stops every query of the session, and interruptOperation
    stops no query, as on Spark's Connect server."""
    data = tmp_path / "in"
    _write_input(data)
    spark = _seen(endpoint["spark"], "interrupts", data, tmp_path / "spark-checkpoint")
    ours = _seen(endpoint["statestream"], "interrupts", data, tmp_path / "statestream-checkpoint")
    assert (tmp_path / "statestream-checkpoint" / "tagged" / "progress").is_dir()  # statestream's queries
    assert spark["by_tag"] == 1 and spark["after_tag"] == [False, True], spark
    assert spark["wait_reached"] and spark["wait"][1] == "OPERATION_CANCELED", spark
    assert spark["after_all"] == [False, False, True], spark
    assert ours == spark


@pytest.mark.parametrize("job", ["foreach_batch", "foreach_batch_failing"])
def test_foreach_batch_runs_the_clients_function(endpoint, tmp_path, job):
    spark, ours = _both(endpoint, tmp_path, job)
    assert spark["written"], "the function wrote nothing: it tests nothing"
    assert ours == spark
    if job == "foreach_batch_failing":
        assert spark["error"] == ["StreamingQueryException", True]


@pytest.mark.parametrize("job", ["sorted_complete", "self_join_by_dataframe", "stream_through_a_view"])
def test_a_query_not_rebuilt_runs_on_sparks_engine(endpoint, tmp_path, job):
    data = tmp_path / "in"
    _write_input(data)
    spark = _seen(endpoint["spark"], job, data, tmp_path / "spark-checkpoint")
    ours = _seen(endpoint["statestream"], job, data, tmp_path / "handed-over")
    assert spark["rows"]
    assert ours == spark
    assert not (tmp_path / "handed-over" / "progress").exists()
    assert "a Connect client's streaming query runs on Spark's engine" in endpoint["log"].read_text()


def test_hand_over_refused_is_the_clients_error(endpoint, tmp_path):
    data = tmp_path / "in"
    _write_input(data)
    done = _run(endpoint["statestream"], "sorted_complete", data, tmp_path / "refused", "spark.statestream.handOverToSpark=false")
    assert done.returncode != 0
    assert "UnsupportedOperationException" in done.stderr or "not rebuilt on statestream yet" in done.stderr
    assert "the Spark Connect plan node 'sort'" in done.stderr


@pytest.mark.parametrize("token", [None, "wrong"], ids=["no_token", "wrong_token"])
def test_a_call_without_the_token_is_refused_as_by_sparks_server(endpoint, tmp_path, token):
    data = tmp_path / "in"
    _write_input(data)
    ours_url, spark_url = endpoint["bare"]
    if token is not None:
        ours_url, spark_url = with_token(ours_url, token), with_token(spark_url, token)
    refused = [_run(url, "windowed_count", data, tmp_path / f"checkpoint-{i}") for i, url in enumerate((spark_url, ours_url))]
    assert all(r.returncode != 0 for r in refused)
    expected = "No authentication token provided" if token is None else "Invalid authentication token"
    for r in refused:
        assert "UNAUTHENTICATED" in r.stderr and expected in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "checkpoint-1").exists()
