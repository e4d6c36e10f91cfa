"""Restarting a checkpoint with a changed query (reference §6.6, §7.5; scenarios S34, S35).

A query runs to a checkpoint and stops; then a *different* query starts on the same checkpoint
with new input waiting. Spark checks, on the first batch of the new run, that the stateful
operators are the same ones (operator metadata) and that their state schemas are compatible
(schema file), and it refuses a checkpoint written for another number of sources. statestream must
reach the same verdict with the same error: the same exception type, error condition and message
text, once query ids, run ids and paths are normalised.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from tests.differential.conftest import AGAINST_SPARK
from tests.differential.harness import DEFAULT_TIMEOUT_S, engine_name, failure_verdict, write_input_file

SCHEMA = "value LONG"

#: The builders get the main stream and a factory for a second stream over another directory.
Build = Callable[[DataFrame, Callable[[], DataFrame]], DataFrame]


def ev(df: DataFrame) -> DataFrame:
    return df.withColumn("eventTime", F.timestamp_seconds("value"))


def w10(df: DataFrame) -> DataFrame:
    return ev(df).withWatermark("eventTime", "10 seconds")


def cnt_t5(df: DataFrame, _other: Any = None) -> DataFrame:
    """S1's query: 5 s windows counted, 10 s watermark (state value: ``count`` long)."""
    return w10(df).groupBy(F.window("eventTime", "5 seconds")).count()


def win5(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("eventTime", "5 seconds").alias("w")).agg(F.count("*").alias("c1"))


def key_long(df: DataFrame, _other: Any = None) -> DataFrame:
    return df.groupBy((F.col("value") % 10).alias("k")).count()


def key_int(df: DataFrame, _other: Any = None) -> DataFrame:
    return df.groupBy((F.col("value") % 10).cast("int").alias("k")).count()


def key_string(df: DataFrame, _other: Any = None) -> DataFrame:
    return df.groupBy((F.col("value") % 10).cast("string").alias("k")).count()


def sum_long(df: DataFrame, _other: Any = None) -> DataFrame:
    return df.groupBy((F.col("value") % 10).alias("k")).agg(F.sum("value").alias("s"))


def sum_double(df: DataFrame, _other: Any = None) -> DataFrame:
    return df.groupBy((F.col("value") % 10).alias("k")).agg(F.sum(F.col("value").cast("double")).alias("s"))


#: name: (output mode, query of the first run, query of the restart, does Spark refuse it?)
CASES: dict[str, tuple[str, Build, Build, bool]] = {
    # S34: count -> sum, max: value schema with other fields
    "s34_count_to_sum_max": (
        "append",
        cnt_t5,
        lambda df, _o: w10(df).groupBy(F.window("eventTime", "5 seconds")).agg(F.sum("value"), F.max("value")),
        True,
    ),
    # same number of value fields, another type
    "sum_long_to_sum_double": ("update", sum_long, sum_double, True),
    # grouping key of another type
    "key_long_to_key_string": ("update", key_long, key_string, True),
    "key_long_to_key_int": ("update", key_long, key_int, True),
    # an aggregate column the restart leaves out with a select: Spark's optimizer drops it and
    # its buffer, so the state's value schema lost a field
    "aggregate_column_left_out": (
        "update",
        lambda df, _o: df.groupBy((F.col("value") % 10).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s")),
        lambda df, _o: df.groupBy((F.col("value") % 10).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s")).select("k", "n"),
        True,
    ),
    # names are not part of the check: renaming the aggregate column restarts fine
    "count_renamed": (
        "append",
        cnt_t5,
        lambda df, _o: w10(df).groupBy(F.window("eventTime", "5 seconds").alias("win")).agg(F.count("*").alias("n")),
        False,
    ),
    # S35: a stateful operator added below the aggregation
    "s35_dedup_added": (
        "append",
        cnt_t5,
        lambda df, _o: cnt_t5(df.dropDuplicates(["value"])),
        True,
    ),
    # a second aggregation added on top (chained windowed aggregations, allowed in append)
    "aggregation_added": (
        "append",
        lambda df, _o: win5(w10(df)),
        lambda df, _o: win5(w10(df)).groupBy(F.window(F.window_time("w"), "10 seconds")).agg(F.sum("c1").alias("t")),
        True,
    ),
    # the aggregation removed: no stateful operator left
    "aggregation_removed": (
        "append",
        cnt_t5,
        lambda df, _o: w10(df).select("value", "eventTime"),
        True,
    ),
    # S-suite "changing the number of sources": a second stream added by a union
    "source_added": (
        "update",
        key_long,
        lambda df, other: key_long(df.union(other())),
        True,
    ),
    "source_removed": (
        "update",
        lambda df, other: key_long(df.union(other())),
        key_long,
        True,
    ),
    # the same two operators in the other order: operator 0 is now the aggregation, whose key
    # and value are not the deduplication's
    "operator_order_swapped": (
        "append",
        lambda df, _o: cnt_t5(df.dropDuplicates(["value"])),
        lambda df, _o: w10(df).dropDuplicates(["value", "eventTime"]).groupBy(F.window("eventTime", "5 seconds")).count(),
        True,
    ),
}

#: name: (output mode of the first run, of the restart, query): the same query restarted in
#: another output mode
MODE_CASES: dict[str, tuple[str, str, Build]] = {
    "append_to_update": ("append", "update", cnt_t5),
    "update_to_append": ("update", "append", cnt_t5),
    "update_to_complete": ("update", "complete", key_long),
    "complete_to_update": ("complete", "update", key_long),
}

FIRST_RUN = [[10, 11, 12], [25]]
RESTART_RUN = [[40, 3]]


Verdict = tuple[str, str | None, str]


def _describe(exc: BaseException | None, workdir: Path) -> Verdict | None:
    """(exception type, error condition, normalised text) of a failure, or None."""
    if exc is None:
        return None
    from pyspark.errors import AnalysisException, StreamingQueryException

    return failure_verdict(exc, workdir, (StreamingQueryException, AnalysisException))


def _run(
    engine: Any, build: Build, mode: str, workdir: Path, files: list[list[int]], timeout: float, sink: list | None = None
) -> tuple[BaseException | None, BaseException | None]:
    """Start ``build`` on ``workdir``'s checkpoint with ``files`` added to its input and run it to
    the end (availableNow). Returns the failure as the user meets it twice in PySpark: raised by
    ``start()`` or ``awaitTermination()``, and as ``query.exception()`` (``None`` if no failure)."""
    schema = StructType.fromDDL(SCHEMA)
    inputs = [workdir / "input", workdir / "input2"]
    for d in inputs:
        d.mkdir(parents=True, exist_ok=True)
    first = len(list(inputs[0].iterdir()))
    base = time.time() - 3600
    for i, rows in enumerate(files, start=first):
        write_input_file(inputs[0], i, [(v,) for v in rows], schema, "parquet", base + i)
        # the second stream gets a file in each run, so that a union has data on both sides
        write_input_file(inputs[1], i, [(v + 1,) for v in rows], schema, "parquet", base + i)

    def stream(d: Path) -> DataFrame:
        return engine.readStream.format("parquet").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(d))

    try:
        df = build(stream(inputs[0]), lambda: stream(inputs[1]))
        query = (
            df.writeStream.outputMode(mode)
            # collected: Spark 4.1 fails a batch whose state tasks did not all run
            .foreachBatch(lambda df_, id_: (sink if sink is not None else []).append((id_, sorted(map(tuple, df_.collect())))))
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
    except Exception as exc:  # noqa: BLE001 - compared with Spark's
        return exc, exc
    raised = None
    try:
        finished = query.awaitTermination(timeout)
    except Exception as exc:  # noqa: BLE001 - compared with Spark's
        finished, raised = True, exc
    if not finished:
        query.stop()
        raise AssertionError(f"{engine_name(engine)}: query still running after {timeout:.0f} s")
    return raised, query.exception()


def restart_verdict(
    engine: Any, mode: str, first: Build, second: Build, tmp_path: Path, second_mode: str | None = None, sink: list | None = None,
    between: Callable[[Path], None] | None = None,
) -> tuple[Verdict | None, Verdict | None]:
    """Run ``first`` to a checkpoint, then ``second`` on it (in ``second_mode``, by default the
    same output mode); the second start's failure as raised and as ``query.exception()``, and
    the restart's batches (id, sorted rows) appended to ``sink``."""
    workdir = tmp_path / f"{engine_name(engine)}-{uuid.uuid4().hex[:8]}"
    raised, exc = _run(engine, first, mode, workdir, FIRST_RUN, DEFAULT_TIMEOUT_S)
    assert raised is None and exc is None, f"{engine_name(engine)}: the first run failed: {raised or exc}"
    assert (workdir / "checkpoint" / "commits" / "1").exists()
    if between is not None:
        between(workdir)
    raised, exc = _run(engine, second, second_mode or mode, workdir, RESTART_RUN, DEFAULT_TIMEOUT_S, sink)
    return _describe(raised, workdir), _describe(exc, workdir)


@pytest.mark.parametrize("name", list(CASES))
def test_restart_with_changed_query_matches_spark(spark, ours, tmp_path, name):
    mode, first, second, refused = CASES[name]
    expected = restart_verdict(spark, mode, first, second, tmp_path)
    assert (expected[0] is not None) == (expected[1] is not None) == refused, f"Spark's verdict changed for {name}: {expected}"
    reports = []

    def check(workdir: Path) -> None:
        """statestream's compatibility check of the restart, before it runs (issue 16)."""
        engine = ours()

        def build(ss: Any) -> Any:
            stream = lambda d: ss.readStream.format("parquet").schema(SCHEMA).load(str(workdir / d))  # noqa: E731
            return second(stream("input"), lambda: stream("input2")).writeStream.outputMode(mode)

        reports.append(engine.checkpointManager.check(str(workdir / "checkpoint"), build))

    actual = restart_verdict(ours(), mode, first, second, tmp_path, between=check if not AGAINST_SPARK else None)
    assert actual[0] == expected[0], f"{name} ({mode}), raised:\n  spark: {expected[0]}\n  ours:  {actual[0]}"
    if reports:
        [report] = reports
        assert report.compatible == (not refused), f"{name}: the check said compatible={report.compatible}: {report.to_json()}"
        if refused:  # Spark's error (a STREAM_FAILED wrapping it, or start()'s) names the class the check names
            named = [d.error_class for d in report.differences if d.error_class and d.error_class in expected[0][2]]
            assert named or not any(d.error_class for d in report.differences), (
                f"{name}: Spark refuses with {expected[0]}; the check names {report.to_json()}"
            )
    assert actual[1] == expected[1], f"{name} ({mode}), query.exception():\n  spark: {expected[1]}\n  ours:  {actual[1]}"


@pytest.mark.skipif(AGAINST_SPARK, reason="statestream's opt-in repartition on restart")
@pytest.mark.parametrize("name", ["key_long_to_key_string", "aggregation_removed", "source_added"])
def test_a_refused_restart_is_refused_before_the_repartition_on_restart(spark, ours, tmp_path, name):
    """With the repartition on restart asked for (and another partition count), a restart that
    the first batch refuses (a state schema, the stateful operators, the sources) is refused as
    without it, and the checkpoint's state and logs are left as they were: no repartition
    batch, no rewritten state file."""
    from statestream.runtime.microbatch import REPARTITION_ON_RESTART_CONF

    mode, first, second, refused = CASES[name]
    assert refused
    plain = restart_verdict(ours(), mode, first, second, tmp_path)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    seen: dict[str, Any] = {}

    def files(workdir: Path) -> dict[str, int]:
        root = workdir / "checkpoint"
        return {
            str(p.relative_to(root)): p.stat().st_mtime_ns
            for d in ("offsets", "commits", "state") if (root / d).exists()
            for p in (root / d).rglob("*") if p.is_file()
        }

    def ask_for_a_repartition(workdir: Path) -> None:
        seen["workdir"], seen["files"] = workdir, files(workdir)
        spark.conf.set("spark.sql.shuffle.partitions", str(int(before) + 1))
        spark.conf.set(REPARTITION_ON_RESTART_CONF, "true")

    try:
        asked = restart_verdict(ours(), mode, first, second, tmp_path, between=ask_for_a_repartition)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
        spark.conf.unset(REPARTITION_ON_RESTART_CONF)
    assert plain[0] is not None and asked == plain, f"{name}:\n  without the repartition: {plain}\n  with it: {asked}"
    assert files(seen["workdir"]) == seen["files"]


@pytest.mark.parametrize("name", list(MODE_CASES))
def test_restart_in_another_output_mode_matches_spark(spark, ours, tmp_path, name):
    """Spark keeps no output mode in the checkpoint: a restart in another mode is not refused
    by a state check; it runs, and its batches follow the new mode (the state schema of an
    aggregation is the same in every mode)."""
    first_mode, second_mode, build = MODE_CASES[name]
    expected_rows: list = []
    actual_rows: list = []
    expected = restart_verdict(spark, first_mode, build, build, tmp_path, second_mode, expected_rows)
    actual = restart_verdict(ours(), first_mode, build, build, tmp_path, second_mode, actual_rows)
    assert actual == expected, f"{name}:\n  spark: {expected}\n  ours:  {actual}"
    assert actual_rows == expected_rows, f"{name}: the restart's batches differ"
    assert expected == (None, None) and any(rows for _, rows in expected_rows), f"Spark now refuses or empties {name}: {expected}"


#: name: (output mode, query): queries whose state key Spark names differently from the output
SCHEMA_FILE_CASES: dict[str, tuple[str, Build]] = {
    "window_aliased": ("append", lambda df, _o: win5(w10(df))),
    "computed_keys": ("update", lambda df, _o: df.groupBy((F.col("value") % 10).alias("a"), (F.col("value") % 3).alias("b")).count()),
    "column_alias": ("update", lambda df, _o: df.groupBy(F.col("value").alias("v")).agg(F.sum("value"))),
    # Spark's optimizer drops the literal from the grouping keys
    "literal_key": ("update", lambda df, _o: df.groupBy(F.lit(1).alias("one"), "value").count()),
}


@pytest.mark.parametrize("name", list(SCHEMA_FILE_CASES))
def test_state_schema_file_matches_spark(spark, ours, tmp_path, name):
    """The schema file (what the restart check compares with) holds Spark's key and value schemas:
    Spark's grouping attribute names and metadata, byte for byte."""
    mode, build = SCHEMA_FILE_CASES[name]
    files = {}
    for engine in (spark, ours()):
        workdir = tmp_path / f"{engine_name(engine)}-{uuid.uuid4().hex[:8]}"
        raised, exc = _run(engine, build, mode, workdir, FIRST_RUN, DEFAULT_TIMEOUT_S)
        assert raised is None and exc is None, f"{engine_name(engine)}: {raised or exc}"
        files[engine_name(engine)] = (workdir / "checkpoint" / "state" / "0" / "0" / "_metadata" / "schema").read_bytes()
    from statestream.state.schema import decode_schema_file

    expected, actual = (decode_schema_file(b, "schema") for b in files.values())
    assert (actual.key_schema, actual.value_schema) == (expected.key_schema, expected.value_schema)
    assert files["StreamingSession"] == files["spark"]
