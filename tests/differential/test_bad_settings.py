"""Bad settings, as Spark's engine meets them (issue 15, item 5): invalid watermark delays, invalid
source options, paths that do not exist, and a checkpoint location that cannot be created.

Each case builds and starts the same query on both engines and records where it failed (the
call that raised: ``withWatermark``, ``load``, ``start``, or the running query) with the
exception's type, error condition and text (paths and ids normalised). statestream must fail at
the same call with the same error, or, where Spark accepts the setting, accept it too and give
the same rows. Where Spark lets a raw JVM exception through (a checkpoint below a file: a
``Py4JJavaError``), statestream raises its ``CheckpointError`` with the same Hadoop text.
A checkpoint directory without write permission cannot be tested here: the tests run as root.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.differential.harness import failure_verdict, write_input_file

SCHEMA = "value LONG"


def _describe(stage: str, exc: BaseException, workdir: Path) -> tuple:
    from pyspark.errors import AnalysisException, IllegalArgumentException, StreamingQueryException

    return (stage, *failure_verdict(exc, workdir, (StreamingQueryException, AnalysisException, IllegalArgumentException)))


def _run(engine: Any, workdir: Path, reader: Callable, transform: Callable, checkpoint: str | None) -> tuple:
    """(failure) or ("ok", rows): the stages run one by one so the failing call is known."""
    stage = "load"
    try:
        df = reader(engine.readStream, workdir)
        stage = "transform"
        df = transform(df)
        stage = "start"
        rows: list = []
        query = (
            df.writeStream.outputMode("append")
            .foreachBatch(lambda b, _id: rows.extend(map(tuple, b.collect())))
            .option("checkpointLocation", checkpoint or str(workdir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        stage = "run"
        assert query.awaitTermination(120), "still running"
        if query.exception() is not None:
            raise query.exception()
        return ("ok", sorted(rows))
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - compared with Spark's
        return _describe(stage, exc, workdir)


def parquet(options: dict[str, str] | None = None, path: str = "input", schema: str | None = SCHEMA) -> Callable:
    def read(rs: Any, workdir: Path) -> Any:
        r = rs.format("parquet")
        if schema:
            r = r.schema(schema)
        for k, v in (options or {}).items():
            r = r.option(k, v)
        return r.load(str(workdir / path))

    return read


def watermarked(delay: str) -> Callable:
    from pyspark.sql import functions as F

    def build(df: Any) -> Any:
        return df.withColumn("t", F.timestamp_seconds("value")).withWatermark("t", delay).select("value")

    return build


def same(df: Any) -> Any:
    return df


#: name: (reader, transform, checkpoint location relative to the work directory or None)
CASES: dict[str, tuple[Callable, Callable, str | None]] = {
    "delay_not_an_interval": (parquet(), watermarked("banana"), None),
    "delay_negative": (parquet(), watermarked("-5 seconds"), None),
    "delay_with_months": (parquet(), watermarked("1 month"), None),
    "max_files_zero": (parquet({"maxFilesPerTrigger": "0"}), same, None),
    "max_files_not_a_number": (parquet({"maxFilesPerTrigger": "many"}), same, None),
    "max_file_age_not_a_duration": (parquet({"maxFileAge": "old"}), same, None),
    "latest_first_not_a_boolean": (parquet({"latestFirst": "maybe"}), same, None),
    "path_missing_with_schema": (parquet(path="no-such-dir"), same, None),
    "path_missing_without_schema": (parquet(path="no-such-dir", schema=None), same, None),
    "checkpoint_below_a_file": (parquet(), same, "a-file/checkpoint"),
}


#: cases where Spark's error is a raw JVM exception: the Hadoop text both must carry
JVM_ERRORS = {"checkpoint_below_a_file": "Parent path is not a directory: <dir>/a-file"}


def _prepare(workdir: Path) -> None:
    from pyspark.sql.types import StructType

    (workdir / "input").mkdir(parents=True, exist_ok=True)
    write_input_file(workdir / "input", 0, [(v,) for v in (1, 2, 3)], StructType.fromDDL(SCHEMA), "parquet", time.time() - 60)
    (workdir / "a-file").write_text("not a directory")


@pytest.mark.parametrize("name", list(CASES))
def test_bad_setting_fails_where_and_as_spark_does(spark, ours, tmp_path, name):
    reader, transform, checkpoint = CASES[name]
    results = []
    for tag, engine in (("spark", spark), ("statestream", ours())):
        workdir = tmp_path / tag
        _prepare(workdir)
        results.append(_run(engine, workdir, reader, transform, str(workdir / checkpoint) if checkpoint else None))
    expected, actual = results
    if name in JVM_ERRORS:
        # Spark lets a Hadoop exception through py4j (a Py4JJavaError carrying a JVM stack);
        # statestream raises its CheckpointError with the same Hadoop text, at the same call
        assert expected[:2] == (actual[0], "Py4JJavaError") and actual[1] == "CheckpointError", (expected[:3], actual)
        assert JVM_ERRORS[name] in expected[3] and JVM_ERRORS[name] in actual[3], (expected, actual)
        return
    assert actual == expected, f"{name}:\n  spark:       {expected}\n  statestream: {actual}"
