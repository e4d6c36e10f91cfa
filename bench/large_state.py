"""A state far larger than memory (issue 51, item 1): W2's query as its state grows to
``--keys`` keys (200M by default), the whole process tree held under ``--memory`` (6g).

    python3 bench/large_state.py [--keys 200000000] [--steps 10] [--engine both|spark|ours]
                                 [--memory 6g] [--partitions 16]

Input (``bench/data/large-<keys>-<steps>/``): ``--steps`` growth files, each adding keys / steps
new users, each followed by an update file touching 1% of the users seen so far (a random
sample), all in one hour so that W2's key (user, hour window) is the user. Both engines run W2's
aggregation (count, sum, avg and max of ``amount`` by user and window, update mode, into a
``foreachBatch`` sink that counts its rows) with Spark's RocksDB provider asked for
(``spark.sql.streaming.stateStore.providerClass``): Spark's engine uses it, statestream takes
it as the request for its layered store (``statestream/state/layered.py``). Then each restarts
its query on the same checkpoint with one more update file and the restart is timed, and the
state is read back with the ``statestore`` reader (its row count).

Each engine runs in a child process placed in a memory cgroup limited to ``--memory`` (cgroup
v1, when ``/sys/fs/cgroup/memory`` is writable): the kernel reclaims the page cache of mapped
state files within the limit, and a process tree that needs more anonymous memory than that is
killed, so a finished run *is* the proof that it fits. The cgroup's peak usage (page cache
included) and the tree's peak RSS (with its file-backed part apart) are reported.

Results: ``bench/results/large-<time>.{json,md,png}``: time per batch against state size for
both engines (update batches and growth batches apart), peak memory, restart time.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402 - bench/ is not a package
import run  # noqa: E402

UPDATE_FRACTION = 0.01
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def _users(ids: Any, width: int) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise("u", pc.utf8_lpad(pc.cast(pa.array(ids, pa.int64()), pa.string()), width, "0"), "")


def generate(keys: int, steps: int, seed: int = 11) -> Path:
    """The input files (see the module docstring) and ``_DONE``, which lists each file with the
    state's size after it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = run.DATA / f"large-{keys}-{steps}"
    if (out / "_DONE").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    width = len(str(keys))
    span_us = 3_000 * 1_000_000  # all rows in the first hour: one window
    mtime0 = time.time() - 3600
    files: list[dict[str, Any]] = []
    seen = 0
    per_step = keys // steps

    def write(name: str, ids: Any, kind: str) -> None:
        n = len(ids)
        t_us = run.BASE_EPOCH_S * 1_000_000 + rng.integers(0, span_us, n)
        table = pa.table(
            {
                "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                "user": _users(ids, width),
                "amount": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2), pa.float64()),
            }
        )
        path = out / name
        pq.write_table(table, path, row_group_size=1 << 20)
        os.utime(path, (mtime0 + len(files), mtime0 + len(files)))
        files.append({"file": name, "kind": kind, "rows": n, "state_keys": seen})

    for step in range(steps):
        count = per_step if step < steps - 1 else keys - seen
        ids = np.arange(seen, seen + count, dtype=np.int64)
        rng.shuffle(ids)
        seen += count
        write(f"part-{2 * step:05d}.parquet", ids, "growth")
        write(f"part-{2 * step + 1:05d}.parquet", rng.choice(seen, max(int(seen * UPDATE_FRACTION), 1), replace=False), "update")
        print(f"  {seen:,} keys written", flush=True)
    # the restart's file: one more update, kept apart until the restart
    write("restart.parquet", rng.choice(seen, max(int(seen * UPDATE_FRACTION), 1), replace=False), "update")
    (out / "_DONE").write_text(json.dumps({"keys": keys, "steps": steps, "seed": seed, "files": files}, indent=1))
    return out


# --------------------------------------------------------------------------------------------
# Child: one engine
# --------------------------------------------------------------------------------------------


def run_child(engine_kind: str, input_dir: Path, partitions: int) -> dict[str, Any]:
    """Run W2 over the input, restart with one more file, read the state back; the figures."""
    from pyspark.sql import functions as F

    os.environ["BENCH_CONF"] = ",".join(
        filter(None, [os.environ.get("BENCH_CONF", ""), f"spark.sql.streaming.stateStore.providerClass={run.ROCKSDB}", f"spark.sql.shuffle.partitions={partitions}"])
    )
    spark = run.child_session(f"statestream-large-{engine_kind}")
    engine = run.engine_for(spark, engine_kind)
    done = json.loads((input_dir / "_DONE").read_text())
    work = Path(tempfile.mkdtemp(prefix=f"large-{engine_kind}-"))
    source = work / "input"
    source.mkdir()
    for f in done["files"][:-1]:
        os.link(input_dir / f["file"], source / f["file"])
    checkpoint = str(work / "checkpoint")
    counts: dict[int, int] = {}

    def sink(df: Any, batch_id: int) -> None:
        counts[int(batch_id)] = df.count()

    def start() -> Any:
        stream = engine.readStream.format("parquet").schema(run.SCHEMAS["W2"]).option("maxFilesPerTrigger", 1).load(str(source))
        return (
            run.build_query("W2")(stream)
            .writeStream.outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    result: dict[str, Any] = {"engine": engine_kind, "keys": done["keys"], "partitions": partitions}
    partial = os.environ.get("LARGE_STATE_PARTIAL")

    def batches(query: Any) -> list[dict[str, Any]]:
        progress = [run._progress_dict(p) for p in (query.recentProgress or [])]  # noqa: SLF001 - the runner's own helper
        data = [p for p in progress if (p.get("numInputRows") or 0) > 0]
        return [
            {
                "kind": f["kind"],
                "input_rows": int(p.get("numInputRows") or 0),
                "ms": int(p.get("batchDuration") or 0),
                "state_rows": ((p.get("stateOperators") or [{}])[0]).get("numRowsTotal"),
                "state_keys_before": f["state_keys"] if f["kind"] == "update" else f["state_keys"] - f["rows"],
            }
            for f, p in zip(done["files"][:-1], data)
        ]

    try:
        t0 = time.perf_counter()
        query = start()
        # the batches so far, written as they end: a run stopped at the parent's time limit
        # still reports how far it got
        while not query.awaitTermination(5):
            if partial:
                Path(partial).write_text(json.dumps({**result, "batches": batches(query), "elapsed_s": round(time.perf_counter() - t0)}))
        result["total_s"] = round(time.perf_counter() - t0, 1)
        result["batches"] = batches(query)
        result["sink_rows"] = sum(counts.values())
        # the restart: one more file, a new run of the query on the same checkpoint
        os.link(input_dir / done["files"][-1]["file"], source / done["files"][-1]["file"])
        t0 = time.perf_counter()
        query = start()
        query.awaitTermination()
        result["restart_total_s"] = round(time.perf_counter() - t0, 1)
        progress = [run._progress_dict(p) for p in (query.recentProgress or [])]  # noqa: SLF001
        data = [p for p in progress if (p.get("numInputRows") or 0) > 0]
        if data:
            result["restart_batch_ms"] = int(data[0].get("batchDuration") or 0)
            result["restart_state_rows"] = ((data[0].get("stateOperators") or [{}])[0]).get("numRowsTotal")
        # the state read back (statestream's reader on its checkpoint, Spark's on Spark's)
        t0 = time.perf_counter()
        reader = engine.read if engine_kind == "ours" else spark.read
        result["read_state_rows"] = reader.format("statestore").load(checkpoint).agg(F.count("*")).collect()[0][0]
        result["read_state_s"] = round(time.perf_counter() - t0, 1)
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which keeps going
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()][:4]
        result.update(ok=False, error=f"{type(exc).__name__}: {' | '.join(lines)[:600]}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


# --------------------------------------------------------------------------------------------
# Parent: cgroup, memory sampling
# --------------------------------------------------------------------------------------------


def _bytes(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _cgroup(limit: int) -> Path | None:
    """A fresh memory cgroup limited to ``limit`` bytes, or None where cgroups are not writable."""
    if not (CGROUP_ROOT / "memory.limit_in_bytes").exists():
        return None
    path = CGROUP_ROOT / f"statestream-bench-{os.getpid()}-{time.monotonic_ns()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
        return path
    except OSError:
        return None


def run_engine(engine_kind: str, input_dir: Path, partitions: int, limit: int, time_limit_s: float | None = None) -> dict[str, Any]:
    """One engine in a child process inside a memory cgroup; its result and peak memory."""
    run.byte_compile_statestream()
    group = _cgroup(limit)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine_kind, str(input_dir), str(partitions)]

    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    partial = Path(tempfile.mkdtemp(prefix="large-state-")) / "partial.json"
    env = {**os.environ, "LARGE_STATE_PARTIAL": str(partial)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT), env=env, preexec_fn=enter)  # a cgroup is entered before exec
    peak = {"rss": 0, "anon": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            procs = run._tree_rss(proc.pid)  # noqa: SLF001 - the runner's sampler
            peak["rss"] = max(peak["rss"], sum(rss for _, rss, _ in procs.values()))
            peak["anon"] = max(peak["anon"], sum(rss - shared for _, rss, shared in procs.values()))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    timed_out = False
    try:
        out, err = proc.communicate(timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
        proc.kill()
        out, err = proc.communicate()
    stop.set()
    sampler.join()
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    res: dict[str, Any]
    if timed_out:
        res = json.loads(partial.read_text()) if partial.exists() else {"engine": engine_kind}
        res.update(ok=False, error=f"stopped at the time limit ({time_limit_s:.0f} s) after {len(res.get('batches', []))} batches")
    elif line is None:
        tail = "\n".join(err.strip().splitlines()[-6:])
        res = {"engine": engine_kind, "ok": False, "error": f"child failed (exit {proc.returncode}):\n{tail}"}
    else:
        res = json.loads(line)
    res["peak_rss_mb"] = round(peak["rss"] / 2**20)
    res["peak_rss_not_file_backed_mb"] = round(peak["anon"] / 2**20)
    res["memory_limit_mb"] = round(limit / 2**20) if group is not None else None
    if group is not None:
        try:
            res["cgroup_peak_mb"] = round(int((group / "memory.max_usage_in_bytes").read_text()) / 2**20)
            res["cgroup_limit_hits"] = int((group / "memory.failcnt").read_text())
        finally:
            try:
                group.rmdir()
            except OSError:
                pass
    return res


def markdown(rows: list[dict[str, Any]], where: str) -> str:
    top = max(r.get("keys", 0) for r in rows)
    lines = [f"# A state far larger than memory: W2 to {top:,} keys", "", where, ""]

    def cell(text: str) -> str:
        return text.replace("|", "/").replace("\n", " ")

    lines += [
        "| engine | keys | total | restart (its batch) | state read back | peak RSS (not file-backed) | cgroup peak / limit |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mem = f"{r.get('peak_rss_mb', 0):,} MB ({r.get('peak_rss_not_file_backed_mb', 0):,} MB) | {r.get('cgroup_peak_mb')} / {r.get('memory_limit_mb')} MB"
        keys = f"{r.get('keys', 0):,}"
        if not r.get("total_s"):
            lines.append(f"| {r['engine']} | {keys} | {cell(r.get('error', 'failed')[:300])} | | | {mem} |")
            continue
        restart = f"{r.get('restart_total_s')} s ({r.get('restart_batch_ms')} ms)" if r.get("restart_total_s") else "-"
        read = f"{r['read_state_rows']:,} rows in {r.get('read_state_s')} s" if r.get("read_state_rows") else cell(r.get("error", "-")[:200])
        lines.append(f"| {r['engine']} | {keys} | {r['total_s']} s | {restart} | {read} | {mem} |")
    for keys in sorted({r.get("keys", 0) for r in rows}):
        same = [r for r in rows if r.get("keys") == keys and r.get("batches")]
        if not same:
            continue
        lines += ["", f"Batch times, {keys:,}-key run (ms):", ""]
        lines += ["| state keys before the batch | kind | rows | " + " | ".join(r["engine"] for r in same) + " |"]
        lines.append("|---|---|---|" + "---|" * len(same))
        for i, b in enumerate(max((r["batches"] for r in same), key=len)):
            cells = [str(r["batches"][i]["ms"]) if i < len(r["batches"]) else "" for r in same]
            lines.append(f"| {b['state_keys_before']:,} | {b['kind']} | {b['input_rows']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def chart(rows: list[dict[str, Any]], path: Path) -> bool:
    plt = report.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in rows:
        for kind, style in (("update", "o-"), ("growth", "s--")):
            pts = [(b["state_keys_before"] / 1e6, b["ms"] / 1000) for b in r.get("batches", []) if b["kind"] == kind]
            if pts:
                label = "statestream" if r["engine"] == "ours" else "Spark (RocksDB)"
                ax.plot(*zip(*pts), style, label=f"{label}, {kind} ({r.get('keys', 0) // 10**6}M-key run)")
    ax.set_xlabel("state keys before the batch (millions)")
    ax.set_ylabel("batch time (s)")
    ax.set_title("W2: batch time as the state grows")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _, engine_kind, input_dir, partitions = argv
        print(json.dumps(run_child(engine_kind, Path(input_dir), int(partitions))), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--engine", default="both", choices=["spark", "ours", "both"])
    ap.add_argument("--memory", default="6g", help="the process tree's memory limit (cgroup)")
    ap.add_argument("--partitions", type=int, default=16, help="spark.sql.shuffle.partitions")
    ap.add_argument("--time-limit", type=float, default=None, help="stop an engine after this many seconds (its batches so far are reported)")
    ap.add_argument("--render", nargs="+", metavar="JSON", help="only write the table and chart of saved results (several runs together)")
    args = ap.parse_args(argv)
    if args.render:
        saved = [json.loads(Path(f).read_text()) for f in args.render]
        rows = [r for d in saved for r in d["results"]]
        return _write(rows, saved[0]["machine"])
    os.environ.setdefault("BENCH_DRIVER_MEMORY", "2g")
    limit = _bytes(args.memory)
    t = time.perf_counter()
    input_dir = generate(args.keys, args.steps)
    print(f"input in {input_dir} ({time.perf_counter() - t:.0f} s)", flush=True)
    where = report.machine().replace("4 state partitions", f"{args.partitions} state partitions") + f", driver memory {os.environ['BENCH_DRIVER_MEMORY']}"
    rows = []
    for engine in (["ours", "spark"] if args.engine == "both" else [args.engine]):
        res = run_engine(engine, input_dir, args.partitions, limit, args.time_limit)
        rows.append(res)
        print(json.dumps({k: v for k, v in res.items() if k != "batches"}), flush=True)
    return _write(rows, where)


def _write(rows: list[dict[str, Any]], where: str) -> int:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run.RESULTS.mkdir(parents=True, exist_ok=True)
    md = markdown(rows, where)
    png = run.RESULTS / f"large-{stamp}.png"
    has_chart = chart(rows, png)
    (run.RESULTS / f"large-{stamp}.md").write_text(md + (f"\n![batch time against state size]({png.name})\n" if has_chart else ""))
    (run.RESULTS / f"large-{stamp}.json").write_text(json.dumps({"machine": where, "results": rows}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
