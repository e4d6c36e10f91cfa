"""The ``statestream`` command line through its real entry point (the console script the package
installs): ``checkpoint inspect``, ``state show`` and ``state diff`` over a checkpoint a query
just wrote, checked against the Spark-compatible state reader over the same checkpoint and
against the checkpoint's own logs; ``--help`` everywhere; a clear error for a missing one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.differential.harness import run_stream

SCRIPT = Path(sys.executable).parent / "statestream"


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    assert SCRIPT.exists(), f"the console script {SCRIPT} is not installed (pip install -e .)"
    run = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    if check:
        assert run.returncode == 0, f"statestream {' '.join(args)} exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    return run


def _windowed(df):
    return (
        df.withColumn("t", F.timestamp_seconds("v")).withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "5 seconds")).agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    )


@pytest.fixture(scope="module")
def checkpoint(spark, tmp_path_factory) -> str:
    from statestream import StreamingSession

    batches = [[(1,), (2,), (3,)], [(6,), (7,), (12,)], [(14,), (21,)], [(30,), (31,)]]
    run = run_stream(StreamingSession(spark), _windowed, batches, "v LONG", "update", tmp_path_factory.mktemp("cli"))
    return run.checkpoint


def test_help_everywhere():
    for args in ([], ["checkpoint"], ["checkpoint", "inspect"], ["checkpoint", "repartition"], ["checkpoint", "rollback"], ["checkpoint", "check"], ["late-rows"], ["ui"], ["state"], ["state", "show"], ["state", "diff"], ["demo"]):
        out = cli(*args, "--help").stdout
        assert out.startswith("usage: statestream"), (args, out)


def test_inspect(checkpoint):
    info = json.loads(cli("checkpoint", "inspect", checkpoint, "--json").stdout)
    commits = sorted(int(n) for n in os.listdir(Path(checkpoint) / "commits") if n.isdigit())
    assert info["commits"] == [commits[0], commits[-1]] and info["lastCommittedBatch"] == commits[-1]
    last_commit = json.loads((Path(checkpoint) / "commits" / str(commits[-1])).read_text().splitlines()[1])
    assert info["watermarkMs"] == last_commit["nextBatchWatermarkMs"] > 0
    [op] = info["operators"]
    assert (op["operatorId"], op["operatorName"], [s["name"] for s in op["stores"]]) == (0, "stateStoreSave", ["default"])
    text = cli("checkpoint", "inspect", checkpoint).stdout
    assert "stateStoreSave" in text and f"0..{commits[-1]} committed" in text


def test_state_show_equals_the_state_reader(spark, checkpoint):
    from statestream import StreamingSession

    reader = StreamingSession(spark).read.format("statestore").load(checkpoint).collect()
    shown = json.loads(cli("state", "show", checkpoint, "--json", "--limit", "0").stdout)
    as_rows = sorted((r["key.window.start"], r["value.count"], r["value.sum"], r["partition_id"]) for r in shown)
    expected = sorted((r.key.window.start.isoformat(), r.value["count"], r.value["sum"], r.partition_id) for r in reader)
    assert [(s[:19], *rest) for s, *rest in as_rows] == [(s[:19], *rest) for s, *rest in expected]
    assert expected, "no state: the comparison proves nothing"
    info = json.loads(cli("checkpoint", "inspect", checkpoint, "--json").stdout)
    assert info["operators"][0]["stateRows"] == len(expected)
    one = shown[0]
    kept = json.loads(cli("state", "show", checkpoint, "--json", "--where", f"value.sum={one['value.sum']}").stdout)
    assert one in kept and all(r["value.sum"] == one["value.sum"] for r in kept)


def test_state_diff_is_the_change_feed(spark, checkpoint):
    from statestream import StreamingSession

    feed = StreamingSession(spark).read.format("statestore").option("readChangeFeed", True).option("changeStartBatchId", 2).load(checkpoint)
    expected = sorted((r.batch_id, r.change_type, r.key.window.start.isoformat()[:19]) for r in feed.collect())
    rows = json.loads(cli("state", "diff", checkpoint, "--from", "1", "--json", "--limit", "0").stdout)
    assert sorted((r["batch_id"], r["change_type"], r["key.window.start"][:19]) for r in rows) == expected
    assert any(t == "delete" for _, t, _ in expected), "no removal: the diff's deletes went untested"


def test_errors_name_what_is_wrong(tmp_path, checkpoint):
    missing = cli("checkpoint", "inspect", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 2 and "no checkpoint at" in missing.stderr and "nowhere" in missing.stderr
    bad = cli("state", "show", checkpoint, "--batch", "99", check=False)
    assert bad.returncode == 2 and "STDS_COMMITTED_BATCH_UNAVAILABLE" in bad.stderr
    where = cli("state", "show", checkpoint, "--where", "nosuch=1", check=False)
    assert where.returncode != 0 and "no column 'nosuch'" in where.stderr


def test_repartition_killed_midway_leaves_a_checkpoint_that_restarts_right(spark, tmp_path):
    """``checkpoint repartition`` killed (SIGKILL, the whole process group) after it wrote one new
    partition's snapshot: the old state still reads as before, a repartition to another count
    is refused with Spark's error, and the query's next start finishes the repartition and goes
    on with results equal to Spark's uninterrupted run."""
    import dataclasses

    from statestream import StreamingSession
    from tests.differential.harness import StreamRun, assert_same_batches

    batches = [[(1,), (2,), (3,)], [(6,), (7,), (12,)], [(14,), (21,)], [(30,), (31,)], [(45,)]]
    ours = StreamingSession(spark)
    work = tmp_path / "w"
    first = run_stream(ours, _windowed, batches[:2], "v LONG", "update", tmp_path, workdir=work)
    checkpoint = first.checkpoint
    before = cli("state", "show", checkpoint, "--json").stdout
    last = max(int(n) for n in os.listdir(Path(checkpoint) / "commits") if n.isdigit())
    repartition_batch = last + 1
    killed = subprocess.run(
        ["bash", "-c", f'export STATESTREAM_TEST_CRASH_PGID=$$; exec "{SCRIPT}" checkpoint repartition "{checkpoint}" --partitions 3 --master "local[2]"'],
        capture_output=True, text=True, timeout=180, start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.getcwd(), "STATESTREAM_TEST_CRASH_AT": f"repartition_snapshot_written:{repartition_batch}:1"},
    )
    assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr[-3000:])
    assert (Path(checkpoint) / "offsets" / str(repartition_batch)).exists()
    assert not (Path(checkpoint) / "commits" / str(repartition_batch)).exists()
    assert (Path(checkpoint) / "state" / "0" / "1" / f"{repartition_batch + 1}.snapshot").exists(), "the kill came before any snapshot"
    assert cli("state", "show", checkpoint, "--json").stdout == before
    other = cli("checkpoint", "repartition", checkpoint, "--partitions", "5", check=False)
    assert other.returncode == 2 and "STATE_REPARTITION_INVALID_CHECKPOINT.LAST_BATCH_ABANDONED_REPARTITION" in other.stderr, other.stderr

    rest = run_stream(ours, _windowed, batches[2:], "v LONG", "update", tmp_path, workdir=work)
    assert (Path(checkpoint) / "commits" / str(repartition_batch)).exists()
    assert {r.numPartitions for r in ours.read.format("state-metadata").load(checkpoint).collect()} == {3}
    expected = run_stream(spark, _windowed, batches, "v LONG", "update", tmp_path / "spark")
    got = first.batches + rest.batches
    assert repartition_batch not in [b.batch_id for b in got]
    renumbered = [dataclasses.replace(b, batch_id=i) for i, b in enumerate(got)]
    assert_same_batches(expected, StreamRun("StreamingSession (repartition killed, finished at start)", renumbered))
    done = ours.checkpointManager.repartition(checkpoint, 2)  # in this process: the command line's JVM start costs CI time
    assert (done.old_partitions, done.new_partitions, done.base_batch) == (3, 2, got[-1].batch_id)


def _file_sink_run(engine, input_dir: Path, out: Path, checkpoint: Path) -> None:
    query = (
        _windowed(engine.readStream.format("parquet").schema("v LONG").option("maxFilesPerTrigger", 1).load(str(input_dir)))
        .writeStream.outputMode("append").format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint)).start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_rollback_with_a_file_sink(spark, tmp_path):
    """``checkpoint rollback --file-sink``: the output read through its log is what batch N had
    written, the data files of later batches are gone, and the restarted query ends with the
    output of Spark's uninterrupted run."""
    from pyspark.sql.types import StructType

    from statestream import StreamingSession
    from tests.differential.harness import write_input_file

    batches = [[(1,), (2,), (3,)], [(6,), (7,), (12,)], [(14,), (21,)], [(30,), (31,)], [(45,)], [(70,)]]
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    for i, b in enumerate(batches):
        write_input_file(input_dir, i, b, StructType.fromDDL("v LONG"), "parquet", 1_700_000_000 + i)
    ours = StreamingSession(spark)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    _file_sink_run(ours, input_dir, out, checkpoint)
    _file_sink_run(spark, input_dir, tmp_path / "spark-out", tmp_path / "spark-ck")
    everything = sorted(map(str, spark.read.parquet(str(out)).collect()))
    assert everything == sorted(map(str, spark.read.parquet(str(tmp_path / "spark-out")).collect()))
    sink_log = sorted(int(n) for n in os.listdir(out / "_spark_metadata") if n.isdigit())
    to_batch = sink_log[len(sink_log) // 2]
    as_of = sorted(map(str, spark.read.parquet(*[
        json.loads(line)["path"] for b in sink_log if b <= to_batch
        for line in (out / "_spark_metadata" / str(b)).read_text().splitlines()[1:]
    ]).collect())) if to_batch >= 0 else []
    data_files = lambda: sorted(p.name for p in out.glob("*.parquet"))  # noqa: E731
    files_before = data_files()

    done = json.loads(cli("checkpoint", "rollback", str(checkpoint), "--to-batch", str(to_batch), "--file-sink", str(out), "--json").stdout)
    assert done["lastCommittedBatch"] == to_batch and done["sinkFilesRemoved"] > 0
    assert done["sinkLogEntriesRemoved"] and min(next(iter(done["sinkLogEntriesRemoved"].values()))) == to_batch + 1
    assert sorted(map(str, spark.read.parquet(str(out)).collect())) == as_of
    assert len(data_files()) == len(files_before) - done["sinkFilesRemoved"]

    _file_sink_run(ours, input_dir, out, checkpoint)
    assert sorted(map(str, spark.read.parquet(str(out)).collect())) == everything
    refused = cli("checkpoint", "rollback", str(checkpoint), "--to-batch", "999", check=False)
    assert refused.returncode == 2 and "batch 999 is not a committed batch" in refused.stderr


QUERIES_MODULE = '''
from pyspark.sql import functions as F


def _stream(ss):
    return ss.readStream.format("parquet").schema("v LONG").load("{input}")


def same(ss):
    return (
        _stream(ss).withColumn("t", F.timestamp_seconds("v")).withWatermark("t", "10 seconds")
        .groupBy(F.window("t", "5 seconds")).agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        .writeStream.outputMode("update")
    )


def changed(ss):
    return (
        _stream(ss).withColumn("t", F.timestamp_seconds("v")).withWatermark("t", "20 seconds")
        .groupBy(F.window("t", "5 seconds")).agg(F.count("*").alias("n"), F.avg("v").alias("a"))
        .writeStream.outputMode("append")
    )
'''


def test_check_and_late_rows(spark, checkpoint, tmp_path):
    """``checkpoint check``: the same query is compatible; through the entry point, a changed
    aggregate is refused with Spark's class and the fix (exit 1), beside the watermark, output
    mode and partition differences Spark lets through. ``late-rows`` shows a ledger."""
    import pyarrow as pa

    from statestream.operators.late_rows import write_late_rows

    (tmp_path / "deploy_queries.py").write_text(QUERIES_MODULE.replace("{input}", str(Path(checkpoint).parent / "input")))
    env_path = f"{tmp_path}{os.pathsep}{os.getcwd()}"

    def check(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SCRIPT), "checkpoint", "check", checkpoint, "--master", "local[1]", *args],
            capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": env_path},
        )

    import sys

    from statestream import StreamingSession

    sys.path.insert(0, str(tmp_path))
    try:
        import deploy_queries  # the same query, checked in this process (one JVM start less)

        same = StreamingSession(spark).checkpointManager.check(checkpoint, deploy_queries.same)
    finally:
        sys.path.remove(str(tmp_path))
    assert same.compatible and same.differences == [], same.to_json()
    changed = check("--query", "deploy_queries:changed", "--partitions", "5", "--json")
    assert changed.returncode == 1, changed.stdout + changed.stderr[-2000:]
    report = json.loads(changed.stdout)
    kinds = {d["kind"]: d for d in report["differences"]}
    assert report["compatible"] is False and set(kinds) == {"value schema", "partitions", "output mode", "watermark"}, kinds
    assert kinds["value schema"]["error_class"] == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" and "new checkpoint" in kinds["value schema"]["fix"]
    assert "checkpoint repartition" in kinds["partitions"]["fix"] and not kinds["partitions"]["refusesRestart"]

    ledger = tmp_path / "late"
    rows = pa.table({"v": pa.array([3, 4], pa.int64()), "k": ["a", "b"]})
    write_late_rows(str(ledger), 0, "dedupe", 7, 1, 12_000, rows)
    shown = json.loads(cli("late-rows", str(ledger), "--json").stdout)
    assert [(r["batch"], r["v"], r["k"], r["_operator"]) for r in shown] == [(7, 3, "a", "dedupe"), (7, 4, "b", "dedupe")]
    assert "1970-01-01 00:00:12+00:00" in cli("late-rows", str(ledger), "--batch", "7").stdout
    missing = cli("late-rows", str(ledger), "--operator", "3", check=False)
    assert missing.returncode == 2 and "has no rows of operator 3" in missing.stderr


def _join(df):
    left = df.where(F.col("v") % 2 == 0).select(F.col("v").alias("lv"), (F.col("v") % 3).alias("k"))
    right = df.where(F.col("v") % 2 == 1).select(F.col("v").alias("rv"), (F.col("v") % 3).alias("k"))
    return left.join(right, "k")


def test_a_join_checkpoint_asks_for_a_side_and_counts_each_store(spark, tmp_path):
    """``state show`` on a stream-stream join: without a side it says that a join's state is kept
    per side and names the flag (it used to report an unreadable schema, as if the checkpoint
    were damaged); ``--join-side`` shows the side as the reader's ``joinSide`` option does.
    ``checkpoint inspect`` gives each of the four stores its own files and bytes."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    run = run_stream(ss, _join, [[(1,), (2,), (4,)], [(5,), (7,)]], "v LONG", "append", tmp_path)
    asked = cli("state", "show", run.checkpoint, check=False)
    assert asked.returncode != 0 and "--join-side left or --join-side right" in asked.stderr, asked.stderr
    assert "STDS_" not in asked.stderr
    for side in ("left", "right"):
        shown = json.loads(cli("state", "show", run.checkpoint, "--join-side", side, "--json", "--limit", "0").stdout)
        reader = ss.read.format("statestore").option("joinSide", side).load(run.checkpoint).collect()
        assert sorted(json.dumps(r, sort_keys=True) for r in shown) == sorted(
            json.dumps({f"{part}.{k}": v for part in ("key", "value") for k, v in r[part].asDict().items()} | {"partition_id": r.partition_id}, sort_keys=True)
            for r in reader
        )
        assert shown, "no state on this side: the comparison proves nothing"
    wrong = cli("state", "show", run.checkpoint, "--state-var", "x", check=False)
    assert wrong.returncode != 0 and "--state-var is for a transformWithState operator" in wrong.stderr
    nowhere = cli("state", "show", run.checkpoint, "--operator", "4", check=False)
    assert nowhere.returncode != 0 and "no stateful operator 4; its operators are 0 (symmetricHashJoin)" in nowhere.stderr

    [op] = json.loads(cli("checkpoint", "inspect", run.checkpoint, "--json").stdout)["operators"]
    assert len(op["stores"]) == 4 and all(s["files"] > 0 and s["bytes"] > 0 for s in op["stores"]), op
    state_dir = Path(run.checkpoint) / "state" / "0"
    for store in op["stores"]:
        under = [p for p in state_dir.glob(f"*/{store['name']}/**/*") if p.is_file()]
        assert (store["files"], store["bytes"]) == (len(under), sum(p.stat().st_size for p in under)), store
    assert sum(s["files"] for s in op["stores"]) < op["files"]  # the operator's metadata is its own
    table = cli("checkpoint", "inspect", run.checkpoint).stdout
    assert all(str(s["bytes"]) in table for s in op["stores"])


class _TwoVariables:
    """A transformWithState processor with a value state ``count`` and a list state ``ids``."""

    @staticmethod
    def make(variables: int):
        from pyspark.sql import Row
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class Processor(StatefulProcessor):
            def init(self, handle):
                self.count = handle.getValueState("count", "n LONG")
                self.ids = handle.getListState("ids", "id LONG") if variables > 1 else None

            def handleInputRows(self, key, rows, timerValues):
                n = self.count.get()[0] if self.count.exists() else 0
                for row in rows:
                    n += 1
                    if self.ids is not None:
                        self.ids.appendValue((row.v,))
                self.count.update((n,))
                yield Row(k=key[0], n=n)

            def close(self):
                pass

        return Processor()


@pytest.mark.parametrize("variables", [1, 2])
def test_a_transform_with_state_checkpoint_takes_its_variable(spark, tmp_path, variables):
    """``state show`` on a transformWithState: with one state variable it shows that one (the
    reader's ``stateVarName``, which the command-line user never typed, used to be asked for);
    with two it names both and the flag; ``--state-var`` picks one."""
    from statestream import StreamingSession
    from tests.differential.test_random_queries import PROVIDER, ROCKSDB
    from tests.spark_confs import session_confs

    ss = StreamingSession(spark)

    def build(df):
        return df.withColumn("k", F.col("v") % 2).groupBy("k").transformWithState(_TwoVariables.make(variables), "k LONG, n LONG", "update", "None")

    with session_confs(spark, {PROVIDER: ROCKSDB}):
        run = run_stream(ss, build, [[(1,), (2,), (3,)], [(4,)]], "v LONG", "update", tmp_path)
    expected = sorted((r.partition_id, r.key[0], r.value[0]) for r in ss.read.format("statestore").option("stateVarName", "count").load(run.checkpoint).collect())
    assert expected, "no state: the comparison proves nothing"
    if variables == 1:
        shown = json.loads(cli("state", "show", run.checkpoint, "--json").stdout)
    else:
        asked = cli("state", "show", run.checkpoint, check=False)
        assert asked.returncode != 0 and "variables count, ids: choose one with --state-var NAME" in asked.stderr.replace("ids, count", "count, ids"), asked.stderr
        shown = json.loads(cli("state", "show", run.checkpoint, "--state-var", "count", "--json").stdout)
        ids = json.loads(cli("state", "show", run.checkpoint, "--state-var", "ids", "--json", "--limit", "0").stdout)
        assert len(ids) == 4
    columns = sorted(shown[0])
    key_col, value_col = next(c for c in columns if c.startswith("key")), next(c for c in columns if c.startswith("value"))
    assert sorted((r["partition_id"], r[key_col], r[value_col]) for r in shown) == expected
