"""Differential harness: run one streaming query on Spark's engine and on statestream, compare.

The PySpark streaming API and statestream's are the same, so a test writes its query once as a
``build(df) -> DataFrame`` function and :func:`run_stream` drives it on either *engine*: the
``SparkSession`` itself (Spark's own Structured Streaming, the oracle) or
``statestream.StreamingSession(spark)``. Both see the same input files, read one file per micro-batch
(``maxFilesPerTrigger=1``), and both write into a ``foreachBatch`` sink that collects every batch's
rows by batch id. Together with the progress events this gives a :class:`StreamRun`: one
:class:`BatchRecord` per micro-batch (data and no-data batches alike), which
:func:`assert_same_batches` compares field by field.

Why files and ``processAllAvailable()``: Spark decides to run a no-data batch only when the
previous batch moved the watermark and no new data is waiting (reference §3.8). Writing one file and
then waiting until the query is idle reproduces the "each ``[...]`` is processed after the previous
one finished" convention of the conformance scenarios (§10) exactly; writing all files first and
using ``availableNow`` reproduces the back-to-back case (S6).

The harness itself never imports statestream: the engine object is passed in, so the module can be
validated today with Spark on both sides (see ``test_harness.py``).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "BatchRecord",
    "StreamRun",
    "STATE_METRICS",
    "run_stream",
    "run_both",
    "assert_same_batches",
    "assert_equivalent",
    "assert_batch_rows",
    "normalise_progress",
    "engine_name",
    "start_error",
    "error_text",
]

#: The per-operator progress figures that must agree between the engines (reference §8). Timing
#: and memory figures are engine-specific and deliberately left out.
STATE_METRICS: tuple[str, ...] = (
    "numRowsTotal",
    "numRowsUpdated",
    "numRowsRemoved",
    "numRowsDroppedByWatermark",
)

#: Wall seconds spent in ``run_stream`` per engine name over the whole test session, so that the
#: differential tier can report how much of its time is the oracle (see ``conftest.py``).
ENGINE_SECONDS: dict[str, float] = {}
ENGINE_RUNS: dict[str, int] = {}

#: Default per-wait limit; ``STATESTREAM_DIFF_TIMEOUT`` overrides it (seconds).
DEFAULT_TIMEOUT_S = float(os.environ.get("STATESTREAM_DIFF_TIMEOUT", "180"))

Build = Callable[["DataFrame"], "DataFrame"]
InputBatch = Sequence[Any]  # rows as tuples (in schema order) or dicts


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass
class BatchRecord:
    """What one micro-batch produced, as seen from outside the engine.

    ``rows`` come from the ``foreachBatch`` sink (``Row.asDict(recursive=True)``, so a window
    struct becomes a nested dict); everything else comes from the batch's progress event.
    """

    batch_id: int
    rows: list[dict[str, Any]]
    columns: list[tuple[str, str]]
    num_input_rows: int | None
    watermark: str | None
    state: list[dict[str, Any]]
    event_time: dict[str, str] | None = None
    progress: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """The compared progress fields only (for failure messages)."""
        return {
            "batchId": self.batch_id,
            "numInputRows": self.num_input_rows,
            "watermark": self.watermark,
            "eventTime": self.event_time,
            "stateOperators": self.state,
        }


@dataclass
class StreamRun:
    """Every micro-batch of one query run on one engine, in batch-id order."""

    engine: str
    batches: list[BatchRecord]
    progress: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    checkpoint: str = ""

    def rows(self, batch_id: int) -> list[dict[str, Any]]:
        """Rows the sink received for ``batch_id``."""
        for b in self.batches:
            if b.batch_id == batch_id:
                return b.rows
        raise KeyError(f"{self.engine}: no batch {batch_id}; batches: {[b.batch_id for b in self.batches]}")

    def describe(self) -> str:
        """One line per batch; used in failure messages and handy when writing a new test."""
        lines = [f"{self.engine} ({len(self.batches)} batches, {self.wall_seconds:.2f}s):"]
        for b in self.batches:
            lines.append(
                f"  b{b.batch_id}: in={b.num_input_rows} wm={b.watermark} "
                f"state={[_state_brief(s) for s in b.state]} rows={_sorted_rows(b.rows)}"
            )
        return "\n".join(lines)


def _state_brief(s: Mapping[str, Any]) -> str:
    return "{}(total={}, upd={}, rm={}, drop={})".format(
        s.get("operatorName"),
        s.get("numRowsTotal"),
        s.get("numRowsUpdated"),
        s.get("numRowsRemoved"),
        s.get("numRowsDroppedByWatermark"),
    )


# --------------------------------------------------------------------------------------------
# Engines and progress
# --------------------------------------------------------------------------------------------


def engine_name(engine: Any) -> str:
    """``"spark"`` for a SparkSession (the oracle), ``"statestream"`` for one that
    ``statestream.enable`` serves, else the engine's class name."""
    from pyspark.sql import SparkSession

    if isinstance(engine, SparkSession):
        return "statestream" if type(engine.readStream).__module__.startswith("statestream") else "spark"
    return type(engine).__name__


def normalise_progress(p: Any) -> dict[str, Any]:
    """A progress event as a plain dict in Spark's JSON shape.

    PySpark gives ``StreamingQueryProgress`` objects (their ``json`` property is the exact JSON);
    statestream gives dicts already. Strings are accepted too, for engines that hand out JSON text.
    """
    if isinstance(p, Mapping):
        return json.loads(json.dumps(p, default=str))
    if isinstance(p, str):
        return json.loads(p)
    text = getattr(p, "json", None)
    if callable(text):  # an engine exposing json() as a method
        text = text()
    if isinstance(text, str):
        return json.loads(text)
    raise TypeError(f"cannot read a progress event of type {type(p).__name__}: {p!r}")


def _executed(p: Mapping[str, Any]) -> bool:
    """True for the progress of a batch that ran; False for an idle-trigger event.

    Idle events (reference §8) carry the id of the *next* batch and only ``latestOffset`` and
    ``triggerExecution`` durations, so they would otherwise shadow the real batch with that id.
    """
    durations = p.get("durationMs") or {}
    return "addBatch" in durations or "walCommit" in durations


def _state_of(p: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not p:
        return []
    out = []
    for op in p.get("stateOperators") or []:
        rec: dict[str, Any] = {"operatorName": op.get("operatorName")}
        for k in STATE_METRICS:
            rec[k] = op.get(k)
        out.append(rec)
    return out


# --------------------------------------------------------------------------------------------
# Input files
# --------------------------------------------------------------------------------------------


def _arrow_type(dt: Any) -> Any:
    import pyarrow as pa
    from pyspark.sql import types as T

    simple = {
        T.LongType: pa.int64(),
        T.IntegerType: pa.int32(),
        T.ShortType: pa.int16(),
        T.ByteType: pa.int8(),
        T.DoubleType: pa.float64(),
        T.FloatType: pa.float32(),
        T.StringType: pa.string(),
        T.BooleanType: pa.bool_(),
        T.DateType: pa.date32(),
        T.BinaryType: pa.binary(),
    }
    for cls, at in simple.items():
        if isinstance(dt, cls):
            return at
    if isinstance(dt, T.TimestampType):
        # Parquet "adjusted to UTC" timestamps are what Spark reads back as TimestampType.
        return pa.timestamp("us", tz="UTC")
    if isinstance(dt, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    if isinstance(dt, T.ArrayType):
        return pa.list_(_arrow_type(dt.elementType))
    if isinstance(dt, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in dt.fields])
    if isinstance(dt, T.MapType):
        return pa.map_(_arrow_type(dt.keyType), _arrow_type(dt.valueType))
    raise TypeError(f"input files: unsupported column type {dt.simpleString()}")


def _as_dicts(rows: InputBatch, schema: "StructType") -> list[dict[str, Any]]:
    names = schema.fieldNames()
    out = []
    for r in rows:
        if isinstance(r, Mapping):
            out.append({n: r.get(n) for n in names})
        else:
            if not isinstance(r, (tuple, list)):
                r = (r,)  # a bare scalar for a one-column schema
            if len(r) != len(names):
                raise ValueError(f"input row {r!r} does not match schema columns {names}")
            out.append(dict(zip(names, r)))
    return out


def _json_default(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.timezone.utc)
        return v.isoformat()
    if isinstance(v, (_dt.date, decimal.Decimal)):
        return str(v)
    raise TypeError(f"not JSON-serialisable: {v!r}")


def write_input_file(
    directory: Path, index: int, rows: InputBatch, schema: "StructType", file_format: str, mtime: float
) -> Path:
    """Write one input batch as one file, atomically, with modification time ``mtime``.

    The file appears under its final name only when complete (written next to the directory,
    then renamed), because the file source may list the directory at any moment. Its mtime is set
    explicitly: the file source orders new files by modification time, and files written within the
    same clock tick would otherwise tie.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    staging = directory.parent / (directory.name + "-staging")
    staging.mkdir(parents=True, exist_ok=True)
    dicts = _as_dicts(rows, schema)
    name = f"part-{index:05d}.{file_format}"
    tmp = staging / name
    if file_format == "parquet":
        pa_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in schema.fields])
        table = pa.Table.from_pylist(dicts, schema=pa_schema)
        pq.write_table(table, tmp)
    elif file_format == "json":
        with open(tmp, "w", encoding="utf-8") as fh:
            for d in dicts:
                fh.write(json.dumps(d, default=_json_default) + "\n")
    else:
        raise ValueError(f"file_format must be 'parquet' or 'json', got {file_format!r}")
    os.utime(tmp, (mtime, mtime))
    final = directory / name
    os.replace(tmp, final)
    return final


# --------------------------------------------------------------------------------------------
# Running a query
# --------------------------------------------------------------------------------------------


def run_stream(
    engine: Any,
    build: Build,
    batches: Sequence[InputBatch],
    schema: "StructType | str",
    output_mode: str,
    tmp_path: Path | str,
    *,
    style: str = "incremental",
    trigger: Mapping[str, Any] | None = None,
    file_format: str = "parquet",
    options: Mapping[str, str] | None = None,
    query_name: str | None = None,
    workdir: Path | str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    checkpoint_as_uri: bool = False,
    before_file: Callable[[int], None] | None = None,
    source: Callable[[Any], "DataFrame"] | None = None,
    feed: Callable[[int, InputBatch], None] | None = None,
    checkpoint_location: str | None = None,
) -> StreamRun:
    """Run ``build`` over ``batches`` (one input file each) on ``engine`` and record every batch.

    Parameters
    ----------
    engine
        A ``SparkSession`` (Spark's engine) or a ``statestream.StreamingSession``.
    build
        Receives the streaming DataFrame read from the input directory, returns the query.
    batches
        One list of rows per input file, rows as tuples in schema order or dicts.
    schema
        The input schema (``StructType`` or DDL string); passed to the reader as is.
    output_mode
        ``"append"``, ``"update"`` or ``"complete"``.
    style
        ``"incremental"``: start on an empty directory, then per file write it and
        ``processAllAvailable()``, so no-data batches run in between as §3.8 prescribes.
        ``"all_at_once"``: write every file first, run with ``trigger(availableNow=True)`` and
        ``awaitTermination()``; batches then follow each other with no idle gap.
    trigger
        Keyword arguments for ``.trigger(...)`` in the incremental style (default: none, i.e.
        Spark's default processing-time trigger). Ignored in the all-at-once style.
    file_format
        ``"parquet"`` or ``"json"``.
    options
        Extra reader options (``maxFilesPerTrigger`` is always 1).
    workdir
        Directory holding ``input/`` and ``checkpoint/``. By default a fresh one per call; pass
        the same one again to *restart* the query on its checkpoint (new files are numbered after
        the ones already there). The returned run then holds only the batches of this start.
    timeout
        Seconds allowed for each wait (``processAllAvailable`` per file, or the whole
        ``awaitTermination``); on expiry the query is stopped and the test fails, instead of a
        hung engine hanging the suite.
    checkpoint_as_uri
        Give ``checkpointLocation`` as a ``file://`` URI instead of a plain path (the form a
        cluster's shared storage takes: ``hdfs://``, ``s3://``, ...).
    before_file
        Called with the file's index (counted from this start's first file) right before each
        input file is written in the incremental style, after the previous one was processed:
        for changes the query should see between two batches (a static side gaining files).
    source, feed
        Another source than files (a Kafka topic): ``source(engine)`` gives the streaming
        DataFrame ``build`` receives, ``feed(index, batch)`` delivers a batch's rows to it where
        a file would have been written.
    checkpoint_location
        Another checkpoint than ``<workdir>/checkpoint`` (a URI of an object store).
    """
    from pyspark.sql.types import StructType

    if style not in ("incremental", "all_at_once"):
        raise ValueError(f"style must be 'incremental' or 'all_at_once', got {style!r}")
    name = engine_name(engine)
    spark_schema = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    root = Path(workdir) if workdir is not None else Path(tmp_path) / f"{name}-{uuid.uuid4().hex[:8]}"
    input_dir = root / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = root / "checkpoint"
    first = len(list(input_dir.iterdir()))  # files of earlier starts on the same workdir
    # In the past, one second apart per file, and later than any file of an earlier start.
    base_mtime = time.time() - 3600 + first

    collected: dict[int, tuple[list[dict[str, Any]], list[tuple[str, str]]]] = {}

    def sink(df: "DataFrame", batch_id: int) -> None:
        # Runs on the driver for Spark (py4j callback) and in-process for statestream.
        rows = [r.asDict(recursive=True) for r in df.collect()]
        cols = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
        collected[int(batch_id)] = (rows, cols)

    def deliver(i: int, b: InputBatch) -> None:
        if feed is not None:
            feed(i, b)
        else:
            write_input_file(input_dir, i, b, spark_schema, file_format, base_mtime + i)

    if style == "all_at_once":
        for i, b in enumerate(batches, start=first):
            deliver(i, b)

    if source is not None:
        df = build(source(engine))
    else:
        reader = engine.readStream.format(file_format).schema(schema).option("maxFilesPerTrigger", 1)
        for k, v in (options or {}).items():
            reader = reader.option(k, v)
        df = build(reader.load(str(input_dir)))
    writer = (
        df.writeStream.outputMode(output_mode)
        .foreachBatch(sink)
        .option("checkpointLocation", checkpoint_location or (checkpoint.resolve().as_uri() if checkpoint_as_uri else str(checkpoint)))
        .queryName(query_name or f"diff_{name}_{uuid.uuid4().hex[:8]}")
    )
    if style == "all_at_once":
        writer = writer.trigger(availableNow=True)
    elif trigger:
        writer = writer.trigger(**trigger)

    t0 = time.perf_counter()
    query = writer.start()
    try:
        if style == "all_at_once":
            if not query.awaitTermination(timeout):
                raise AssertionError(f"{name}: availableNow query still running after {timeout:.0f} s")
        else:
            if not batches or first:
                # A restart may have work before any new file: re-running an uncommitted batch
                # (§7.5) or a no-data batch owed to the restored watermark.
                _wait_idle(query, timeout, name)
            for i, b in enumerate(batches, start=first):
                if before_file is not None:
                    before_file(i - first)
                deliver(i, b)
                _wait_idle(query, timeout, name)
    finally:
        # Stop before reading progress: after stop() the last batch's event is surely recorded.
        query.stop()
    wall = time.perf_counter() - t0
    ENGINE_SECONDS[name] = ENGINE_SECONDS.get(name, 0.0) + wall
    ENGINE_RUNS[name] = ENGINE_RUNS.get(name, 0) + 1
    exc = query.exception()
    if exc is not None:
        raise AssertionError(f"{name}: query failed: {exc}")

    progress = [normalise_progress(p) for p in (query.recentProgress or [])]
    by_id: dict[int, dict[str, Any]] = {}
    for p in progress:
        bid = p.get("batchId")
        if bid is None:
            continue
        if _executed(p) or int(bid) not in by_id:
            by_id[int(bid)] = p

    records = []
    for bid in sorted(collected):
        rows, cols = collected[bid]
        p = by_id.get(bid)
        records.append(
            BatchRecord(
                batch_id=bid,
                rows=rows,
                columns=cols,
                num_input_rows=None if p is None else p.get("numInputRows"),
                watermark=None if p is None else (p.get("eventTime") or {}).get("watermark"),
                state=_state_of(p),
                event_time=None if p is None else p.get("eventTime"),
                progress=p,
            )
        )
    return StreamRun(engine=name, batches=records, progress=progress, wall_seconds=wall, checkpoint=checkpoint_location or str(checkpoint))


def _wait_idle(query: Any, timeout: float, name: str) -> None:
    """``processAllAvailable()`` with a time limit (it has none of its own)."""
    import threading

    error: list[BaseException] = []

    def wait() -> None:
        try:
            query.processAllAvailable()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(exc)

    t = threading.Thread(target=wait, name="diff-processAllAvailable", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{name}: processAllAvailable() did not return within {timeout:.0f} s")
    if error:
        raise error[0]


def run_both(
    spark: "SparkSession",
    build: Build,
    batches: Sequence[InputBatch],
    schema: "StructType | str",
    output_mode: str,
    tmp_path: Path | str,
    *,
    ours: Any = None,
    **kwargs: Any,
) -> tuple[StreamRun, StreamRun]:
    """Run the same query on Spark's engine (first), then on statestream; return both runs.

    ``ours`` defaults to ``statestream.StreamingSession(spark)`` (imported only here, so the
    harness loads without statestream); an engine object or a zero-argument factory may be given.
    """
    expected = run_stream(spark, build, batches, schema, output_mode, tmp_path, **kwargs)
    actual = run_stream(_resolve_ours(spark, ours), build, batches, schema, output_mode, tmp_path, **kwargs)
    return expected, actual


def _resolve_ours(spark: "SparkSession", ours: Any) -> Any:
    if ours is None:
        from statestream import StreamingSession

        return StreamingSession(spark)
    if callable(ours) and not hasattr(ours, "readStream"):
        return ours()
    return ours


# --------------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------------


def _canon(v: Any, float_tol: float) -> Any:
    """A hashable, orderable stand-in for a value, used to sort rows before matching them.

    Floats are bucketed coarsely here only to put close values next to each other; the real
    tolerance check happens in :func:`_values_equal`.
    """
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, int(v))
    if isinstance(v, float):
        if math.isnan(v):
            return (2, 1, 0.0)  # after every number
        return (2, 0, round(v, 6))
    if isinstance(v, (int, decimal.Decimal)):
        return (2, 0, float(v))
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return (3, v.isoformat())
    if isinstance(v, _dt.date):
        return (3, v.isoformat())
    if isinstance(v, Mapping):
        return (4, tuple((k, _canon(v[k], float_tol)) for k in sorted(v)))
    if isinstance(v, (list, tuple)):
        return (5, tuple(_canon(x, float_tol) for x in v))
    return (6, repr(v))


def _values_equal(a: Any, b: Any, float_tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float, decimal.Decimal)) or not isinstance(b, (int, float, decimal.Decimal)):
            return False
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=float_tol, abs_tol=float_tol)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_values_equal(a[k], b[k], float_tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y, float_tol) for x, y in zip(a, b))
    if isinstance(a, _dt.datetime) and isinstance(b, _dt.datetime):
        return _canon(a, 0) == _canon(b, 0)
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, decimal.Decimal)) and isinstance(b, (int, decimal.Decimal)) and a == b
    )


def _row_key(row: Mapping[str, Any]) -> Any:
    return _canon(dict(row), 0)


def _sorted_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return sorted((dict(r) for r in rows), key=_row_key)


def rows_match(
    expected: Sequence[Mapping[str, Any]], actual: Sequence[Mapping[str, Any]], *, float_tol: float = 1e-9, ordered: bool = False
) -> bool:
    """True if both row lists hold the same rows (as a multiset unless ``ordered``)."""
    if len(expected) != len(actual):
        return False
    if ordered:
        return all(_values_equal(dict(e), dict(a), float_tol) for e, a in zip(expected, actual))
    exp = _sorted_rows(expected)
    act = _sorted_rows(actual)
    if all(_values_equal(e, a, float_tol) for e, a in zip(exp, act)):
        return True
    # Sorting can misalign rows whose floats differ within tolerance: fall back to matching.
    remaining = list(act)
    for e in exp:
        for i, a in enumerate(remaining):
            if _values_equal(e, a, float_tol):
                del remaining[i]
                break
        else:
            return False
    return True


def _fmt_rows(rows: Sequence[Mapping[str, Any]], ordered: bool) -> str:
    shown = [dict(r) for r in rows] if ordered else _sorted_rows(rows)
    if not shown:
        return "    (no rows)"
    lines = [f"    {r}" for r in shown[:50]]
    if len(shown) > 50:
        lines.append(f"    ... {len(shown) - 50} more")
    return "\n".join(lines)


def assert_same_batches(
    expected: StreamRun,
    actual: StreamRun,
    *,
    check_state: bool = True,
    check_columns: bool = True,
    check_event_time: bool = True,
    float_tol: float = 1e-9,
    ordered: bool = False,
) -> None:
    """Fail unless both runs produced the same micro-batches.

    Compared per batch: batch id, the sink's rows (a multiset unless ``ordered``; floats within
    ``float_tol``, timestamps by instant, structs field by field), output columns (names and
    types), ``numInputRows``, the reported watermark, if ``check_event_time`` the whole
    ``eventTime`` object (min/max/avg are part of Spark's contract, reference §3.9 and S40) and, if
    ``check_state``, each state operator's name and row counts (:data:`STATE_METRICS`). The message names the first differing
    batch and shows both row sets and both progress summaries, followed by both runs in brief.
    """
    problems: list[str] = []
    exp_ids = [b.batch_id for b in expected.batches]
    act_ids = [b.batch_id for b in actual.batches]
    if exp_ids != act_ids:
        problems.append(f"batch ids differ: {expected.engine} {exp_ids} vs {actual.engine} {act_ids}")
    act_by_id = {b.batch_id: b for b in actual.batches}
    for e in expected.batches:
        a = act_by_id.get(e.batch_id)
        if a is None:
            continue
        diffs = []
        if not rows_match(e.rows, a.rows, float_tol=float_tol, ordered=ordered):
            diffs.append("rows")
        if check_columns and e.columns != a.columns:
            diffs.append(f"columns {e.columns} vs {a.columns}")
        if e.num_input_rows != a.num_input_rows:
            diffs.append(f"numInputRows {e.num_input_rows} vs {a.num_input_rows}")
        if e.watermark != a.watermark:
            diffs.append(f"watermark {e.watermark} vs {a.watermark}")
        if check_event_time and e.event_time != a.event_time:
            diffs.append(f"eventTime {e.event_time} vs {a.event_time}")
        if check_state and e.state != a.state:
            diffs.append("state operators")
        if diffs:
            problems.append(
                f"batch {e.batch_id}: {', '.join(diffs)}\n"
                f"  {expected.engine} rows:\n{_fmt_rows(e.rows, ordered)}\n"
                f"  {actual.engine} rows:\n{_fmt_rows(a.rows, ordered)}\n"
                f"  {expected.engine} progress: {json.dumps(e.summary(), default=str)}\n"
                f"  {actual.engine} progress: {json.dumps(a.summary(), default=str)}"
            )
    if problems:
        msg = (
            "streams differ\n"
            + "\n".join(problems)
            + "\n\n"
            + expected.describe()
            + "\n"
            + actual.describe()
        )
        raise AssertionError(msg)


def assert_batch_rows(
    run: StreamRun, expected_rows: Sequence[Sequence[Mapping[str, Any]] | None], *, float_tol: float = 1e-9
) -> None:
    """Check a run against hand-written per-batch rows (``None`` = don't check that batch).

    Used to pin the oracle to the reference's §10 outcomes, so that a harness mistake (e.g. a
    missing no-data batch) cannot go unnoticed just because both engines share it.
    """
    ids = [b.batch_id for b in run.batches]
    if len(ids) != len(expected_rows):
        raise AssertionError(
            f"{run.engine}: expected {len(expected_rows)} batches, got {len(ids)}\n{run.describe()}"
        )
    for b, exp in zip(run.batches, expected_rows):
        if exp is None:
            continue
        if not rows_match(exp, b.rows, float_tol=float_tol):
            raise AssertionError(
                f"{run.engine}: batch {b.batch_id} rows differ from the reference\n"
                f"  expected:\n{_fmt_rows(exp, False)}\n  got:\n{_fmt_rows(b.rows, False)}\n{run.describe()}"
            )


def assert_equivalent(
    spark: "SparkSession",
    ours: Any,
    build: Build,
    batches: Sequence[InputBatch],
    schema: "StructType | str",
    output_mode: str,
    tmp_path: Path | str,
    *,
    check_state: bool = True,
    check_event_time: bool = True,
    float_tol: float = 1e-9,
    ordered: bool = False,
    reference: Sequence[Sequence[Mapping[str, Any]] | None] | None = None,
    **kwargs: Any,
) -> tuple[StreamRun, StreamRun]:
    """Run on both engines and assert the same batches; returns both runs for extra checks.

    ``ours`` is the engine, ``None`` (``statestream.StreamingSession(spark)``) or a zero-argument
    callable returning the engine: either of the latter two is resolved only after the oracle ran (and matched ``reference``, if given), so that a missing engine fails the test
    after the oracle part has been exercised.
    """
    expected = run_stream(spark, build, batches, schema, output_mode, tmp_path, **kwargs)
    if reference is not None:
        assert_batch_rows(expected, reference, float_tol=float_tol)
    actual = run_stream(_resolve_ours(spark, ours), build, batches, schema, output_mode, tmp_path, **kwargs)
    assert_same_batches(
        expected,
        actual,
        check_state=check_state,
        check_event_time=check_event_time,
        float_tol=float_tol,
        ordered=ordered,
    )
    return expected, actual


# --------------------------------------------------------------------------------------------
# Analysis-time rejections
# --------------------------------------------------------------------------------------------


def error_text(exc: BaseException) -> str:
    """The comparable part of an exception's message.

    Spark appends the offending logical plan after ``";\\n"`` and PySpark may append a JVM stack
    trace; neither is part of the contract (reference §7.6 quotes the text before them).
    """
    text = str(exc)
    for cut in ("\n\nJVM stacktrace:", ";\n"):
        text = text.split(cut, 1)[0]
    return text.strip()


def normalise_run_text(text: str, workdir: Path) -> str:
    """Ids and paths are run-specific: ``workdir`` (plain or as a ``file:`` URI) becomes
    ``<dir>`` and every UUID ``<uuid>``."""
    root = str(workdir)
    text = text.replace("file://" + root, "<dir>").replace("file:" + root, "<dir>").replace(root, "<dir>")
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)


def failure_verdict(exc: BaseException, workdir: Path, bases: tuple[type, ...] = ()) -> tuple[str, str | None, str]:
    """(exception type, error condition, normalised text) of a failure, comparable across the
    engines: the type is the name of the first of ``bases`` (PySpark's exception classes) that
    ``exc`` is an instance of, else its own; the text stops before the ``=== Streaming Query ===``
    report that ``query.exception()`` appends (it shows Spark's internal logical plan)."""
    kind = type(exc).__name__
    for base in bases:
        if isinstance(exc, base):
            kind = base.__name__
    condition = None
    for getter in ("getCondition", "getErrorClass"):
        fn = getattr(exc, getter, None)
        if callable(fn):
            condition = fn()
            if condition:
                break
    text = error_text(exc).split("\n=== Streaming Query ===", 1)[0]
    return kind, condition, normalise_run_text(text, workdir)


def state_store_error_cause(text: str) -> str:
    """The ``[STATE_STORE...]`` error inside a query failure's text, without its SQLSTATE (the
    wrappers around it differ between the engines)."""
    return text[text.index("[STATE_STORE") :].split(" SQLSTATE")[0]


def start_error(
    engine: Any,
    build: Build,
    schema: "StructType | str",
    output_mode: str,
    tmp_path: Path | str,
    *,
    file_format: str = "parquet",
) -> tuple[str, str] | None:
    """Start ``build``'s query on an empty input directory; return ``(exception type, text)`` if
    ``start()`` raised, else ``None`` (the query is stopped right away).

    The type returned is ``"AnalysisException"`` for any subclass of PySpark's, so statestream's
    Spark-shaped subclasses compare equal to Spark's own.
    """
    from pyspark.errors import AnalysisException

    name = engine_name(engine)
    root = Path(tmp_path) / f"{name}-start-{uuid.uuid4().hex[:8]}"
    (root / "input").mkdir(parents=True)
    try:
        df = build(engine.readStream.format(file_format).schema(schema).load(str(root / "input")))
        query = (
            df.writeStream.outputMode(output_mode)
            .foreachBatch(lambda _df, _id: None)
            .option("checkpointLocation", str(root / "checkpoint"))
            .start()
        )
    except AnalysisException as exc:
        return ("AnalysisException", error_text(exc))
    except Exception as exc:  # noqa: BLE001 - any other failure is compared by type name and text
        return (type(exc).__name__, error_text(exc))
    query.stop()
    return None


# -- runs with offline repartitions (issue 16) ----------------------------------------------------

#: (input files before the repartition, partitions after it)
REPARTITIONS = ((2, 7), (4, 2))


def run_repartitioned(spark, build, batches, schema, mode, workdir: Path, first: int = 4, splits=REPARTITIONS) -> tuple[list, list]:
    """statestream's run of ``build`` with the repartitions of :data:`REPARTITIONS`: (its
    batches, the repartition results)."""
    from statestream import StreamingSession

    ss = StreamingSession(spark)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(first))
    try:
        got, results, done = [], [], 0
        for upto, count in tuple(splits) + ((len(batches), None),):
            run = run_stream(ss, build, batches[done:upto], schema, mode, workdir, workdir=workdir / "w")
            got += run.batches
            done = upto
            if count is not None:
                results.append(ss.checkpointManager.repartition(run.checkpoint, count))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    return got, results


def run_restarted(spark, build, batches, schema, mode, workdir: Path, splits=REPARTITIONS) -> StreamRun:
    """Spark's run of ``build`` stopped and restarted where :func:`run_repartitioned` repartitions."""
    got, done = [], 0
    for upto, _ in tuple(splits) + ((len(batches), None),):
        run = run_stream(spark, build, batches[done:upto], schema, mode, workdir, workdir=workdir / "w")
        got += run.batches
        done = upto
    return StreamRun("spark (restarted)", got, checkpoint=run.checkpoint)


def assert_same_as_uninterrupted(expected: StreamRun, got: list, results: list, first: int = 4, splits=REPARTITIONS) -> None:
    """``got`` skips exactly the repartition batches' ids, and otherwise equals ``expected``."""
    import dataclasses

    skipped = [r.repartition_batch for r in results]
    ids = [b.batch_id for b in got]
    assert not set(skipped) & set(ids), f"a repartition batch ran: {skipped} in {ids}"
    assert [r.base_batch + 1 for r in results] == skipped
    counts = [c for _, c in splits]
    assert [(r.old_partitions, r.new_partitions) for r in results] == list(zip([first] + counts[:-1], counts))
    renumbered = [dataclasses.replace(b, batch_id=i) for i, b in enumerate(got)]
    assert_same_batches(expected, StreamRun(f"StreamingSession (repartitioned {first} -> {' -> '.join(map(str, counts))})", renumbered))
