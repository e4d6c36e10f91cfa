"""The ``statestream`` command line.

    statestream run JOB.py [ARG...]                      an unmodified PySpark job, its streams on statestream
    statestream demo [--seconds N]                       the seed query on a local Spark
    statestream checkpoint inspect CHECKPOINT [--json]   operators, stores, partitions, batches, rows, files
    statestream checkpoint repartition CHECKPOINT --partitions N [--master M]   rewrite the state into N partitions
    statestream checkpoint rollback CHECKPOINT --to-batch N [--file-sink PATH]   make batch N the last committed
    statestream checkpoint check CHECKPOINT --query MODULE:FUNCTION   can a changed query restart from it?
    statestream late-rows LEDGER [--operator N] [--batch B]   the rows a watermark dropped (opt-in ledger)
    statestream ui CHECKPOINT [--port P]                 a live dashboard of the query's progress history
    statestream state show CHECKPOINT [--operator N] [--store S | --join-side SIDE | --state-var V | --timers]
                           [--batch B] [--where COL=VALUE]... [--json]
    statestream state diff CHECKPOINT --from A --to B [...]   what batches A+1..B changed (the change feed)

Reading state here runs in this process, through the same code as the Spark-compatible
``statestore`` reader (``tools.state_reader``), without starting Spark. Tables are aligned text
for a terminal; ``--json`` prints JSON for scripts (one document; rows as a list).
"""
# ruff: noqa: T201 - a command line prints

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from statestream.errors import StatestreamError

__all__ = ["main"]


def _leaves(prefix: str, scalar: Any, out: dict[str, Any]) -> None:
    """``scalar``'s leaves under dotted names (``key.window.start``), a null struct's as nulls; a
    repeated field name (an average's ``count`` beside a count's) gets ``#position``."""
    import pyarrow as pa

    if not pa.types.is_struct(scalar.type):
        out[prefix] = scalar.as_py()
        return
    seen: set[str] = set()
    for j, field in enumerate(scalar.type):
        name = field.name if field.name not in seen else f"{field.name}#{j}"
        seen.add(field.name)
        child = scalar[j] if scalar.is_valid else pa.scalar(None, type=field.type)
        _leaves(f"{prefix}.{name}", child, out)


def _rows(table: Any) -> list[dict[str, Any]]:
    """A reader table's rows, the key and value structs flattened to dotted columns."""
    names = table.schema.names
    columns = [table.column(n).combine_chunks() for n in names]
    rows = []
    for i in range(table.num_rows):
        row: dict[str, Any] = {}
        for name, column in zip(names, columns):
            _leaves(name, column[i], row)
        rows.append(row)
    return rows


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _table(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_text(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_json_default))


# -- progress ----------------------------------------------------------------------------------


class _Steps:
    """Progress of a command's slow steps on stderr (stdout keeps the result): on a terminal one
    line redrawn with a bar and the elapsed time, elsewhere a line per step.

    >>> steps = _Steps(stream=sys.stdout, clock=iter([0.0, 0.0, 2.5, 4.0]).__next__)
    >>> steps.step(0, 2, "starting Spark")
    [          ] 0/2 starting Spark (0 s)
    >>> steps.step(1, 2, "splitting")
    [#####     ] 1/2 splitting (2 s)
    >>> steps.done()
    done in 4 s
    """

    def __init__(self, stream: Any = None, clock: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock if clock is not None else time.monotonic
        self.started = self.clock()
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, done: int, total: int, what: str) -> None:
        """Before a step: ``done`` of ``total`` steps are behind, ``what`` runs now."""
        filled = 10 * done // max(total, 1)
        line = f"[{'#' * filled}{' ' * (10 - filled)}] {done}/{total} {what} ({self.clock() - self.started:.0f} s)"
        if self.live:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        """After the last step."""
        self.stream.write(("\r\033[K" if self.live else "") + f"done in {self.clock() - self.started:.0f} s\n")
        self.stream.flush()


# -- commands ----------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    from statestream.tools.checkpoint_info import describe_checkpoint  # lazy: `statestream --help` stays fast

    info = describe_checkpoint(args.checkpoint)
    if args.json:
        _print_json(info)
        return 0
    print(f"checkpoint  {info['checkpoint']}")
    print(f"query id    {info['id']}")
    committed = info["commits"]
    print(f"batches     {'none committed' if not committed else f'{committed[0]}..{committed[1]} committed'}"
          + (f", batch {info['uncommittedBatch']} planned and not committed" if info["uncommittedBatch"] is not None else ""))
    print(f"watermark   {info['watermark'] or 'none'}")
    print(f"on disk     {info['files']} files, {info['bytes']} bytes")
    print()
    rows = [
        {"operator": op["operatorId"], "name": op["operatorName"], "store": s["name"], "partitions": s["partitions"],
         "rows": s["rows"], "files": s["files"], "bytes": s["bytes"]}
        for op in info["operators"] for s in op["stores"]
    ]
    print(_table(rows) if rows else "(no stateful operator)")
    return 0


def _read_options(args: argparse.Namespace) -> dict[str, Any]:
    """The reader's options for the flags given, with the choice a store needs made or asked
    for in the flags' terms: a join's side, a transformWithState's variable (its only one by
    default)."""
    from statestream.tools.checkpoint_info import state_choices  # lazy: `statestream --help` stays fast

    options: dict[str, Any] = {"operatorId": args.operator}
    try:
        choices = state_choices(args.checkpoint, args.operator)
    except LookupError as exc:
        raise SystemExit(f"statestream state {args.action}: {exc}; choose one with --operator") from None
    what = f"operator {args.operator} ({choices.operator_name})" if choices is not None else f"operator {args.operator}"
    if args.join_side is not None and choices is not None and choices.kind != "join":
        raise SystemExit(f"statestream state {args.action}: --join-side is for a stream-stream join; {what} is not one")
    if (args.state_var is not None or args.timers) and choices is not None and choices.kind != "python":
        flag = "--state-var" if args.state_var is not None else "--timers"
        raise SystemExit(f"statestream state {args.action}: {flag} is for a transformWithState operator; {what} is not one")
    if args.store is not None:
        options["storeName"] = args.store
    if args.join_side is not None:
        options["joinSide"] = args.join_side
    if args.state_var is not None:
        options["stateVarName"] = args.state_var
    if args.timers:
        options["readRegisteredTimers"] = "true"
    chosen = args.store is not None or args.join_side is not None or args.state_var is not None or args.timers
    if chosen or choices is None:
        return options
    if choices.kind == "join":
        raise SystemExit(
            f"statestream state {args.action}: {what} is a stream-stream join, whose state is kept per input side: "
            "choose one with --join-side left or --join-side right"
        )
    if choices.kind == "python" and len(choices.names) == 1:
        options["stateVarName"] = choices.names[0]
    elif choices.kind == "python" and choices.names:
        raise SystemExit(
            f"statestream state {args.action}: {what} keeps its state in the processor's variables "
            f"{', '.join(choices.names)}: choose one with --state-var NAME, or read its timers with --timers"
        )
    return options


def _filter(rows: list[dict[str, Any]], wheres: list[str]) -> list[dict[str, Any]]:
    for where in wheres:
        column, sep, wanted = where.partition("=")
        if not sep:
            raise SystemExit(f"--where takes COLUMN=VALUE, not {where!r}")
        if rows and column not in rows[0]:
            raise SystemExit(f"--where: no column {column!r}; the columns are {', '.join(rows[0])}")
        rows = [r for r in rows if _text(r.get(column)) == wanted]
    return rows


def _show_rows(rows: list[dict[str, Any]], args: argparse.Namespace) -> int:
    rows = _filter(rows, args.where)
    shown = rows[: args.limit] if args.limit else rows
    if args.json:
        _print_json(shown)
    else:
        print(_table(shown))
        if len(shown) < len(rows):
            more = len(rows) - len(shown)
            print(f"({more} more row{'' if more == 1 else 's'}; --limit 0 shows all)")
    return 0


def _sort_key(row: dict[str, Any]) -> list[str]:
    return [_text(v) for v in row.values()]


def _state_show(args: argparse.Namespace) -> int:
    from statestream.tools.state_reader import read_state_table  # lazy: `statestream --help` stays fast

    options = _read_options(args)
    if args.batch is not None:
        options["batchId"] = args.batch
    rows = sorted(_rows(read_state_table(options, args.checkpoint)), key=_sort_key)
    return _show_rows(rows, args)


def _state_diff(args: argparse.Namespace) -> int:
    from statestream.tools.state_reader import read_state_table  # lazy: `statestream --help` stays fast

    options = dict(_read_options(args), readChangeFeed="true", changeStartBatchId=args.start + 1)
    if args.end is not None:
        options["changeEndBatchId"] = args.end
    rows = _rows(read_state_table(options, args.checkpoint))
    rows.sort(key=lambda r: [r["batch_id"], *_sort_key(r)])
    return _show_rows(rows, args)


def _demo(args: argparse.Namespace) -> int:
    from statestream.commands.demo import main as demo_main  # lazy: `statestream --help` stays fast

    argv = [] if args.seconds is None else ["--seconds", str(args.seconds)]
    return demo_main(argv)


def _connect_server(args: argparse.Namespace) -> int:
    """``statestream connect-server``: the endpoint runs until Ctrl-C."""
    from statestream.connect import ConnectEndpoint  # lazy: `statestream --help` stays fast

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf takes KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    endpoint = ConnectEndpoint(host=args.host, port=args.port, master=args.master, conf=conf).start()
    print(f"statestream Spark Connect endpoint: {endpoint.url} (Spark's own Connect server: {endpoint.upstream_url})", flush=True)
    try:
        endpoint.wait()
    except KeyboardInterrupt:
        endpoint.stop()
    return 0


def _spark(args: argparse.Namespace) -> Any:
    """The Spark session a command's job runs on: ``--master`` (default ``local[*]``), UI off."""
    from pyspark.sql import SparkSession

    from statestream.api.session import use_driver_python  # lazy: `statestream --help` stays fast

    spark = (
        SparkSession.builder.master(args.master).appName(f"statestream checkpoint {args.action}")
        .config("spark.ui.enabled", "false").getOrCreate()
    )
    use_driver_python(spark)
    return spark


def _repartition(args: argparse.Namespace) -> int:
    from statestream.runtime.state_repartition import plan_repartition, repartition_state  # lazy: `statestream --help` stays fast

    plan_repartition(args.checkpoint, args.partitions, not args.skip_failed_batch)  # refusals before Spark starts
    steps = _Steps()
    steps.step(0, 1, f"starting Spark ({args.master})")
    spark = _spark(args)
    result = repartition_state(spark, args.checkpoint, args.partitions, not args.skip_failed_batch,
                               progress=lambda done, total, what: steps.step(done, total, what) if done < total else steps.done())
    summary: dict[str, Any] = {
        "checkpoint": result.checkpoint,
        "repartitionBatchId": result.repartition_batch,
        "baseBatchId": result.base_batch,
        "fromPartitions": result.old_partitions,
        "toPartitions": result.new_partitions,
        "rowsMoved": [{"operatorId": op, "storeName": store, "rows": n} for (op, store), n in sorted(result.rows.items())],
    }
    if args.json:
        _print_json(summary)
    else:
        print(
            f"repartitioned {result.checkpoint} from {result.old_partitions} to {result.new_partitions} partitions "
            f"(batch {result.repartition_batch}, based on batch {result.base_batch}); the next start runs with {result.new_partitions}"
        )
        print(_table(summary["rowsMoved"], ["operatorId", "storeName", "rows"]))
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from statestream.tools.rollback import rollback_checkpoint  # lazy: `statestream --help` stays fast

    result = rollback_checkpoint(args.checkpoint, args.to_batch, tuple(args.file_sink))
    summary = {
        "checkpoint": result.checkpoint,
        "lastCommittedBatch": result.to_batch,
        "batchesRemoved": result.batches_removed,
        "stateFilesRemoved": result.state_files_removed,
        "sourceLogEntriesRemoved": {str(k): v for k, v in result.source_log_entries_removed.items()},
        "sinkLogEntriesRemoved": result.sink_log_entries_removed,
        "sinkFilesRemoved": result.sink_files_removed,
        "lateRowBatchesRemoved": result.late_row_batches_removed,
    }
    if args.json:
        _print_json(summary)
    else:
        removed = result.batches_removed
        span = f"batches {removed[0]}..{removed[-1]}" if removed else "no batch"
        print(f"rolled {result.checkpoint} back to batch {result.to_batch}: removed {span}, {result.state_files_removed} state files"
              + (f", {result.sink_files_removed} sink files" if result.sink_files_removed else "")
              + (f", the late rows of {result.late_row_batches_removed} batches" if result.late_row_batches_removed else "")
              + "; the next start reprocesses from there")
    return 0


def _query_on_spark(args: argparse.Namespace, doing: str) -> tuple[Any, "_Steps", Any]:
    """What ``check``, ``watermark replay`` and ``restate`` start with: the ``--query`` builder,
    the progress steps (Spark started, then ``doing``) and a StreamingSession on ``--master``."""
    from statestream.api.session import StreamingSession  # lazy: `statestream --help` stays fast
    from statestream.tools.compatibility import load_query_builder  # lazy: `statestream --help` stays fast

    build = load_query_builder(args.query)
    steps = _Steps()
    steps.step(0, 2, f"starting Spark ({args.master})")
    session = StreamingSession(_spark(args))
    steps.step(1, 2, doing)
    return build, steps, session


def _check(args: argparse.Namespace) -> int:
    from statestream.tools.compatibility import check_compatibility  # lazy: `statestream --help` stays fast

    build, steps, session = _query_on_spark(args, f"planning {args.query} against the checkpoint")
    report = check_compatibility(session, args.checkpoint, build, args.partitions)
    steps.done()
    if args.json:
        _print_json(report.to_json())
    elif not report.differences:
        print(f"compatible: the query can restart from {report.checkpoint}")
    else:
        print(("compatible, with differences" if report.compatible else "NOT compatible") + f": {report.checkpoint}")
        for d in report.differences:
            where = f" (operator {d.operator_id})" if d.operator_id is not None else ""
            print(f"\n- {d.kind}{where}{': ' + d.error_class if d.error_class else ''}\n  {d.message}\n  fix: {d.fix}")
    return 0 if report.compatible else 1


def _late_rows(args: argparse.Namespace) -> int:
    import pyarrow.dataset as ds

    from statestream.checkpoint.files import CheckpointFileManager  # lazy: `statestream --help` stays fast

    root = CheckpointFileManager(args.path)
    if not root.exists():
        raise FileNotFoundError(f"no late-row ledger at {args.path} (is spark.statestream.lateRows.path set to it?)")
    op = root.child(f"operator={args.operator}")
    if not op.exists():
        raise FileNotFoundError(f"the ledger at {args.path} has no rows of operator {args.operator}: operators {sorted(root.list())}")
    table = ds.dataset(op.path(), format="parquet", partitioning="hive", filesystem=op.fs).to_table()
    if args.batch is not None:
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table.column("batch"), args.batch))
    rows = sorted(_rows(table), key=lambda r: (r.get("batch", 0), json.dumps(r, default=_json_default, sort_keys=True)))
    return _show_rows([{"batch": r.pop("batch"), **r} for r in rows], args)


def _ui(args: argparse.Namespace) -> int:
    import time

    from statestream.checkpoint.files import CheckpointFileManager  # lazy: `statestream --help` stays fast
    from statestream.tools.dashboard import serve_dashboard  # lazy: `statestream --help` stays fast

    if not CheckpointFileManager(args.checkpoint).exists():
        raise FileNotFoundError(f"no checkpoint at {args.checkpoint}")
    server = serve_dashboard(args.checkpoint, args.port, args.host)
    print(f"statestream dashboard of {args.checkpoint}: {server.url} (Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _watermark_advise(args: argparse.Namespace) -> int:
    from statestream.checkpoint.files import CheckpointFileManager  # lazy: `statestream --help` stays fast
    from statestream.tools.lateness_advisor import advise, format_delay  # lazy: `statestream --help` stays fast

    if not CheckpointFileManager(args.checkpoint).exists():
        raise FileNotFoundError(f"no checkpoint at {args.checkpoint}")
    if not 0 < args.completeness <= 100:
        raise ValueError(f"--completeness is a percentage above 0 and at most 100, not {args.completeness}")
    advice = advise(args.checkpoint, round(args.completeness / 100, 12), args.since)
    if args.json:
        print(json.dumps([a.to_json() for a in advice], indent=2))
        return 0
    for a in advice:
        print(f"input {a.node_id}, {a.rows:,} rows over {a.batches} batches")
        print(f"  delay in force  {format_delay(a.delay_ms)}: kept {a.kept_share:.2%} of the rows ({a.rows - a.kept_rows:,} late)")
        print(
            f"  advised delay   {format_delay(a.advised_delay_ms)}: keeps {a.advised_kept_share:.2%} "
            f"(asked for {a.completeness:.2%}; the delay is exact to within 19%)"
        )
        when = "later" if a.closes_later_ms >= 0 else "earlier"
        batches = f", about {abs(a.closes_later_batches):g} batches" if a.closes_later_batches is not None else ""
        print(f"  cost            windows close {format_delay(abs(a.closes_later_ms))} {when} in event time{batches}")
        if a.extra_state_rows is not None:
            print(f"                  state rows {a.extra_state_rows:+,} (estimate)")
    return 0


def _watermark_replay(args: argparse.Namespace) -> int:
    from statestream.tools.watermark_replay import replay  # lazy: `statestream --help` stays fast

    build, steps, session = _query_on_spark(args, f"replaying the recorded batches of {args.checkpoint} with a delay of {args.delay}")
    report = replay(session, args.checkpoint, build, args.delay, args.to)
    steps.done()
    if args.json:
        _print_json(report.to_json())
        return 0
    rec, rep = report.totals("recorded"), report.totals("replayed")

    def shown(v: int) -> str:
        return "n/a" if v < 0 else f"{v:,}"

    print(f"{report.checkpoint}: the recorded run, and its replay with a delay of {report.delay}")
    print(f"  {'':22}{'recorded':>14}{'replayed':>14}")
    for label, key in (("batches", "batches"), ("input rows", "input_rows"), ("output rows", "output_rows"),
                       ("rows dropped as late", "dropped_rows"), ("state rows at the end", "state_rows")):
        print(f"  {label:22}{shown(rec[key]):>14}{shown(rep[key]):>14}")
    if report.windows:
        s = report.window_shifts()
        print(f"  {len(report.windows)} windows: {s['later']} close later, {s['earlier']} earlier, {s['same']} at the same data batch, "
              f"{s['one_run_only']} in one run only")
    if report.output:
        print(f"the replay's output rows: {report.output}")
    return 0


def _restate(args: argparse.Namespace) -> int:
    from statestream.tools.restate import restate  # lazy: `statestream --help` stays fast

    build, steps, session = _query_on_spark(args, f"restating {args.checkpoint} from the ledger {args.ledger}")
    df = restate(session, args.checkpoint, build, args.ledger)
    if args.to:
        df.write.mode("overwrite").parquet(args.to)
        steps.done()
        print(f"{df.sparkSession.read.parquet(args.to).count()} restated rows written to {args.to}")
        return 0
    rows = [r.asDict(recursive=True) for r in df.collect()]
    steps.done()
    return _show_rows(rows, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="statestream", description="statestream: look at and operate a streaming query's checkpoint.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="run an unmodified PySpark program with its streaming queries on statestream",
        description="Run a PySpark program as `python JOB.py ARG...` would (sys.argv, __main__, exit status, Ctrl-C), "
        "with every SparkSession it makes serving readStream, streams and the state readers with statestream. "
        "`statestream run -m MODULE ARG...` runs a module. A session whose conf spark.statestream.enabled is false is "
        "left to Spark's engine.",
    )
    run.add_argument("program", metavar="JOB.py", help="the program (or -m MODULE)")
    run.add_argument("arguments", nargs=argparse.REMAINDER, metavar="ARG", help="its arguments")
    run.set_defaults(run=_run)

    demo = commands.add_parser("demo", help="run the seed query on a local Spark (Ctrl-C stops it)")
    demo.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    demo.set_defaults(run=_demo)

    connect = commands.add_parser(
        "connect-server", help="a Spark Connect endpoint whose streaming queries run on statestream (Ctrl-C stops it)",
        description="Start a driver with Spark's Connect server, and an endpoint in front of it: Spark Connect clients "
        "(SparkSession.builder.remote('sc://HOST:PORT')) run their jobs unchanged, batch work on Spark and streaming "
        "queries on statestream.",
    )
    connect.add_argument("--host", default="127.0.0.1", help="the address clients reach (default: loopback only)")
    connect.add_argument("--port", type=int, default=15002, help="the port clients reach (default 15002; 0: any free port)")
    connect.add_argument("--master", default="local[*]", help="the driver's master (default local[*])")
    connect.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf of the driver (repeatable)")
    connect.set_defaults(run=_connect_server)

    checkpoint = commands.add_parser("checkpoint", help="a checkpoint as a whole")
    checkpoint_commands = checkpoint.add_subparsers(dest="action", required=True, metavar="ACTION")
    inspect = checkpoint_commands.add_parser("inspect", help="operators, stores, partitions, batches, state rows and files")
    inspect.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inspect.set_defaults(run=_inspect)
    repartition = checkpoint_commands.add_parser(
        "repartition", help="rewrite a stopped query's state into N partitions (its next start runs with N)",
        description="Rewrite the state of a stopped query into N partitions with a Spark job, as a batch of its own "
        "(no input, no output); the next start of the query runs with N. Interrupted, it leaves the old state usable, "
        "and running it again (or starting the query) finishes it.",
    )
    repartition.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    repartition.add_argument("--partitions", type=int, required=True, metavar="N", help="the new number of state partitions")
    repartition.add_argument("--skip-failed-batch", action="store_true",
                             help="base on the last committed batch even if a later batch failed (its output may be written twice)")
    repartition.add_argument("--master", default="local[*]", help="the Spark master the job runs on (default local[*])")
    repartition.add_argument("--json", action="store_true", help="print JSON instead of text")
    repartition.set_defaults(run=_repartition)
    rollback = checkpoint_commands.add_parser(
        "rollback", help="make batch N the last committed one (the next start reprocesses after it)",
        description="Make batch N the last committed batch of a stopped query: the offset and commit logs, the state "
        "files, the file sources' logs and (with --file-sink) a file sink's log and the data files only later batches "
        "wrote go back to batch N. The next start reprocesses from there. Interrupted, it leaves a marker that stops "
        "the query from starting until it is run again.",
    )
    rollback.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    rollback.add_argument("--to-batch", type=int, required=True, metavar="N", help="the batch that becomes the last committed one")
    rollback.add_argument("--file-sink", action="append", default=[], metavar="PATH",
                          help="the output directory of a file sink of the query, rolled back too; repeatable")
    rollback.add_argument("--json", action="store_true", help="print JSON instead of text")
    rollback.set_defaults(run=_rollback)
    check = checkpoint_commands.add_parser(
        "check", help="can a changed query restart from this checkpoint? (exit 0: yes, 1: no)",
        description="Plan the query that --query builds against the checkpoint, as its first batch would, writing "
        "nothing, and list each difference (operators, state schemas, sources, partitions, output mode, watermarks) with "
        "Spark's error class where Spark refuses the restart, and the fix. Exit status 0 when it can restart, 1 when not.",
    )
    check.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    check.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                       help="a function of a StreamingSession that returns the new streaming DataFrame (or its writeStream with the output mode set)")
    check.add_argument("--partitions", type=int, default=None, help="the spark.sql.shuffle.partitions the deploy sets (compared with the checkpoint's)")
    check.add_argument("--master", default="local[*]", help="the Spark master that plans the query (default local[*])")
    check.add_argument("--json", action="store_true", help="print JSON instead of text")
    check.set_defaults(run=_check)

    ui = commands.add_parser("ui", help="a live dashboard of a query's progress, from its checkpoint",
                             description="Serve a web page with the charts of Spark UI's Structured Streaming tab for the "
                             "query of CHECKPOINT: its whole progress history (kept in the checkpoint), updated live while it runs.")
    ui.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    ui.add_argument("--port", type=int, default=4050, help="the port (default 4050; 0: any free port)")
    ui.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1, this machine only)")
    ui.set_defaults(run=_ui)

    late = commands.add_parser("late-rows", help="the rows a watermark dropped (the late-row ledger)",
                               description="The rows that an operator dropped as late, from the late-row ledger a query "
                               "writes when spark.statestream.lateRows.path is set: each with the batch and the watermark that dropped it.")
    late.add_argument("path", help="the ledger's directory (spark.statestream.lateRows.path)")
    late.add_argument("--operator", type=int, default=0, help="the stateful operator's id (default 0)")
    late.add_argument("--batch", type=int, default=None, help="only this batch's rows")
    late.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE", help="keep rows whose COLUMN shows as VALUE; repeatable")
    late.add_argument("--limit", type=int, default=50, help="rows to print (default 50; 0: all)")
    late.add_argument("--json", action="store_true", help="print JSON instead of a table")
    late.set_defaults(run=_late_rows)

    watermark = commands.add_parser("watermark", help="the watermark delay: what the recorded lateness says")
    watermark_commands = watermark.add_subparsers(dest="action", required=True, metavar="ACTION")
    advise = watermark_commands.add_parser(
        "advise", help="the least delay that keeps a share of each input's rows, and its cost",
        description="Read the lateness each watermark input recorded in the query's progress history and give, for each, "
        "the least delay that would have kept --completeness percent of its rows, beside the delay in force and the share "
        "it kept, with how much later windows would close and an estimate of the state rows it adds.",
    )
    advise.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    advise.add_argument("--completeness", type=float, default=99.9, metavar="PERCENT", help="the share of rows to keep (default 99.9)")
    advise.add_argument("--since", type=int, default=None, metavar="BATCH", help="read the batches from this one on (default: all recorded)")
    advise.add_argument("--json", action="store_true", help="print JSON instead of text")
    advise.set_defaults(run=_watermark_advise)
    replay = watermark_commands.add_parser(
        "replay", help="run the recorded batches again with another delay, beside the recorded run",
        description="Run the recorded input batches of CHECKPOINT again (their offsets from the offset log) through the "
        "query that --query builds, with every watermark delay set to --delay, as a shadow query on a throwaway "
        "checkpoint; the recorded checkpoint is only read. Prints both runs side by side: input, output and late rows, "
        "state rows. A memory source cannot be replayed.",
    )
    replay.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    replay.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                        help="a function of a StreamingSession that returns the streaming DataFrame (or its writeStream with the output mode set)")
    replay.add_argument("--delay", required=True, help="the watermark delay to replay with (e.g. '30 seconds')")
    replay.add_argument("--to", default=None, metavar="DIR", help="keep the replay's checkpoint and its output rows (Parquet) under DIR")
    replay.add_argument("--master", default="local[*]", help="the Spark master the replay runs on (default local[*])")
    replay.add_argument("--json", action="store_true", help="print JSON instead of text")
    replay.set_defaults(run=_watermark_replay)

    restate = commands.add_parser(
        "restate", help="an aggregation's results corrected with the late rows of the ledger",
        description="For each window or key of the aggregation whose rows came late (kept in the late-row ledger, "
        "spark.statestream.lateRows.path), the corrected result: its last emitted buffers merged with every late row, "
        "finished by the query's own final step, with emitted_batch (the batch of its last emission) and revision.",
    )
    restate.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
    restate.add_argument("--ledger", required=True, metavar="PATH", help="the late-row ledger (spark.statestream.lateRows.path)")
    restate.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                         help="a function of a StreamingSession that returns the query's streaming DataFrame (as it ran)")
    restate.add_argument("--to", default=None, metavar="DIR", help="write the restated rows there as Parquet instead of printing them")
    restate.add_argument("--master", default="local[*]", help="the Spark master the restatement runs on (default local[*])")
    restate.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE", help="keep rows whose COLUMN shows as VALUE; repeatable")
    restate.add_argument("--limit", type=int, default=50, help="rows to print (default 50; 0: all)")
    restate.add_argument("--json", action="store_true", help="print JSON instead of a table")
    restate.set_defaults(run=_restate, action="restate")

    state = commands.add_parser("state", help="the rows of a state store")
    state_commands = state.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("checkpoint", help="the query's checkpoint location (a path or a URI)")
        p.add_argument("--operator", type=int, default=0, help="the stateful operator's id (default 0)")
        p.add_argument("--store", default=None, help="the store's name (default: the operator's default store)")
        p.add_argument("--join-side", choices=("left", "right"), default=None, help="a stream-stream join's input side (a join needs one)")
        p.add_argument("--state-var", default=None, metavar="NAME",
                       help="a transformWithState processor's state variable (default: its only one)")
        p.add_argument("--timers", action="store_true", help="a transformWithState operator's registered timers")
        p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                       help="keep rows whose COLUMN (e.g. key.window.start) shows as VALUE; repeatable")
        p.add_argument("--limit", type=int, default=50, help="rows to print (default 50; 0: all)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    show = state_commands.add_parser("show", help="the store's rows as of a batch (default: the last committed)")
    common(show)
    show.add_argument("--batch", type=int, default=None, help="the batch id (default: the last committed)")
    show.set_defaults(run=_state_show)

    diff = state_commands.add_parser("diff", help="what the batches after --from up to --to changed (updates and deletes)")
    common(diff)
    diff.add_argument("--from", dest="start", type=int, required=True, help="the state as of this batch is the base")
    diff.add_argument("--to", dest="end", type=int, default=None, help="the last batch whose changes to show (default: the last committed)")
    diff.set_defaults(run=_state_diff)
    return parser


def _run(args: argparse.Namespace) -> int:
    """``statestream run`` (``main`` hands the program to the launcher before parsing; this is
    reached only for a bare ``statestream run``)."""
    from statestream.commands.launcher import main as python_main  # lazy: `statestream --help` stays fast

    return python_main([args.program, *args.arguments])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and len(argv) > 1 and argv[1] not in ("-h", "--help"):
        # the program's own arguments (``-m``, its flags) are not statestream's to parse
        from statestream.commands.launcher import main as python_main  # lazy: `statestream --help` stays fast

        return python_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)

    try:
        return int(args.run(args) or 0)
    except (FileNotFoundError, ValueError, RuntimeError, StatestreamError) as exc:
        print(f"statestream: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
