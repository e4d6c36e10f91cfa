"""The whole picture in one command: every workload on both engines, a table and a chart.

    scripts/bench.sh                    # every workload at its report size, then the trickle
    scripts/bench.sh --quick            # small sizes, about 17 minutes: checks that everything runs
    scripts/bench.sh --workloads W1,W9  # some workloads only
    scripts/bench.sh --publish          # also put the table and chart into docs/benchmarks.md
    scripts/bench.sh --repeat 3         # each workload three times, each engine's median run kept
    python3 bench/report.py --rebuild R.json [B.json ...] [--publish]
                                        # the table and chart again from saved results, later
                                        # files' (workload, engine) results replacing earlier ones

Each workload runs three ways, each in its own child process with a fresh JVM (see
``bench/run.py``): on Spark's own Structured Streaming engine, on statestream, and as Spark's
batch-only *floor* (the same query as one batch job per input file, with no state, AQE and
broadcast joins off as in the streaming engines' batches). Then
``bench/trickle.py`` runs the processing-time trickle on both engines.

Written to ``bench/results/report-<time>.{md,png,json}``; with ``--publish`` also to
``docs/bench/latest.md`` and ``docs/bench/latest.png``, and docs/benchmarks.md's table between its
``bench:start`` and ``bench:end`` markers is replaced.

The table's columns, per workload:

* total and median ratio ours/Spark (issue 17's goal beside it): wall time from ``start()`` to
  the end of the run, and the median data batch;
* ours/floor and Spark/floor: how far each engine is from the stateless batch jobs;
* peak RSS ratio: the child's whole process tree;
* worst batch / median, on each engine: over the data batches after the warm-up ones (the first
  tenth, at least the first), the slowest over their median, so a maintenance pause (a snapshot, a
  retention pass) shows here; n/a with fewer than four such batches;
* same result: whether both engines gave the same sink rows and the same state rows at the end.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import run  # noqa: E402 - bench/ is not a package
import trickle  # noqa: E402

#: (rows per file, files) of each workload in the report. W6, W7 and W7a run smaller than the
#: others: at a million rows a file Spark's engine took 11 minutes on W6 and would take about 20
#: minutes a batch on W7 (bench/README.md), which would make the report hours longer.
REPORT_SIZES: dict[str, tuple[int, int]] = {
    "W1": (1_000_000, 10),
    "W2": (1_000_000, 10),
    "W3": (1_000_000, 10),
    "W4": (1_000_000, 10),
    "W5": (1_000_000, 10),
    "W6": (200_000, 4),
    "W7": (100_000, 3),
    "W7a": (20_000, 3),
    "W9": (20, 250),
}
#: the small end (issue 51, item 3): each family's workload at 1,000 rows a batch over 20 batches,
#: where start-up and the first batch weigh most; named after the workload with an ``s``
SMALL_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W7a")
REPORT_SIZES |= {f"{wl}s": (1_000, 20) for wl in SMALL_WORKLOADS}
QUICK_SIZES: dict[str, tuple[int, int]] = {wl: (20_000, 3) for wl in REPORT_SIZES} | {"W9": (20, 30), "W7a": (5_000, 3)}
QUICK_SIZES |= {f"{wl}s": (1_000, 3) for wl in SMALL_WORKLOADS}
#: issue 17's goals on total wall time, ours/Spark (new workloads: 1.0; Python state: 0.3)
GOALS = {"W1": 0.8, "W2": 0.5, "W3": 1.0, "W4": 0.7, "W5": 1.0, "W6": 1.0, "W7": 0.3, "W7a": 0.3, "W9": 0.5}
GOALS |= {f"{wl}s": 1.0 for wl in SMALL_WORKLOADS}  # issue 51: a small job is not slower
DESCRIPTIONS = {
    "W1": "windowed count, 20 s watermark (the seed query)",
    "W2": "count/sum/avg/max by user and hour (1M users)",
    "W3": "dropDuplicates with a watermark",
    "W4": "session windows, append",
    "W5": "stddev, collect_set, percentile_approx, HLL, max_by",
    "W6": "stream-stream join, impressions with clicks",
    "W7": "transformWithStateInPandas, timers",
    "W7a": "applyInPandasWithState, timeouts",
    "W9": "W1's query on tiny batches",
}
DESCRIPTIONS |= {f"{wl}s": f"{wl} small: 1,000 rows a batch" for wl in SMALL_WORKLOADS}


def base_workload(name: str) -> str:
    """The workload of ``run.py`` a report row runs (``W2s``, the small end of W2: ``W2``)."""
    return name[:-1] if name.endswith("s") and name[:-1] in SMALL_WORKLOADS else name


def worst_over_median(batch_ms: list[int]) -> float | None:
    """Over the data batches after the warm-up ones (the first tenth, at least the first), the
    slowest over their median (None: fewer than four of them). The JVM compiles its hot code
    over the first batches on both engines (W9's first twenty run up to twice the median), which
    is not what this looks for: a maintenance pause."""
    after = batch_ms[max(1, len(batch_ms) // 10):]
    if len(after) < 4:
        return None
    return max(after) / statistics.median(after)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of one engine's runs of a workload, the one with the median total (a failed one if none ran)."""
    ok = sorted((r for r in runs if r.get("ok")), key=lambda r: r["total_s"])
    # of an even count, the faster of the middle two
    return ok[(len(ok) - 1) // 2] if ok else runs[0]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarise(workload: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of the report from a workload's results on the three engines."""
    by = {r["engine"]: r for r in results if r.get("ok")}
    s, o, f = by.get("spark"), by.get("ours"), by.get("floor")
    row: dict[str, Any] = {"workload": workload, "goal": GOALS.get(workload), "description": DESCRIPTIONS.get(workload, "")}
    first = results[0] if results else {}
    row["size"] = f"{first.get('files')} x {first.get('rows_per_file'):,}" if first.get("files") else ""
    row["failed"] = {r["engine"]: r.get("error") for r in results if not r.get("ok")}
    if s and o:
        row.update(
            spark_total_s=s["total_s"],
            ours_total_s=o["total_s"],
            total_ratio=ratio(o["total_s"], s["total_s"]),
            median_ratio=ratio(o["median_batch_ms"], s["median_batch_ms"]),
            rss_ratio=ratio(o.get("peak_rss_mb"), s.get("peak_rss_mb")),
            same_result=(s.get("output_rows"), s.get("state_rows")) == (o.get("output_rows"), o.get("state_rows")),
            rows_and_state=(o.get("output_rows"), o.get("state_rows")),
        )
    for name, side in (("ours", o), ("spark", s)):
        if side:
            row[f"{name}_worst_over_median"] = worst_over_median(side.get("batch_ms") or [])
            if f:
                row[f"{name}_over_floor"] = ratio(side["total_s"], f["total_s"])
    if f:
        row["floor_total_s"] = f["total_s"]
    return row


def machine() -> str:
    """A line naming the machine, the software and the commit the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = float("nan")
    import pyspark

    described = commit()
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GB RAM, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, PySpark {pyspark.__version__}, `local[2]`, 4 state partitions; "
        f"statestream {described or 'unknown'}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )


def _x(v: float | None, goal: float | None = None) -> str:
    if v is None:
        return "n/a"
    text = f"{v:.2f}"
    return f"**{text}**" if goal is not None and v <= goal else text


def markdown(rows: list[dict[str, Any]], trickle_results: dict[str, dict[str, Any]], where: str, chart: str | None) -> str:
    """The report as Markdown: the machine, the workload table, the trickle, the chart."""
    out = [
        f"Measured on {where}.",
        "",
        "Ratios are statestream / Spark's engine (below 1: statestream is faster); **bold** where the "
        "goal of issue 17 is met. Floor: the same query as Spark batch jobs, one per input file, with "
        "no state (AQE and broadcast joins off, as in the streaming engines' batches). Worst/median: over "
        "the data batches after the warm-up (the first tenth, at least the first), the slowest over their "
        "median (n/a: fewer than four).",
        "",
        "| workload | files x rows | Spark total | ours total | total ratio (goal) | median ratio | ours/floor | Spark/floor | peak RSS ratio | worst/median ours, Spark | same result |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "total_ratio" not in r:
            failed = "; ".join(f"{k}: {v}" for k, v in r["failed"].items())[:200].replace("|", "\\|")
            out.append(f"| {r['workload']} | {r['size']} | failed: {failed} |||||||||")
            continue
        same = "yes" if r["same_result"] else f"**no** {r['rows_and_state']}"
        out.append(
            f"| {r['workload']}: {r['description']} | {r['size']} | {r['spark_total_s']:.1f} s | {r['ours_total_s']:.1f} s | "
            f"{_x(r['total_ratio'], r['goal'])} ({r['goal']}) | {_x(r['median_ratio'])} | {_x(r.get('ours_over_floor'))} | "
            f"{_x(r.get('spark_over_floor'))} | {_x(r['rss_ratio'])} | {_x(r.get('ours_worst_over_median'))}, "
            f"{_x(r.get('spark_worst_over_median'))} | {same} |"
        )
    s, o = trickle_results.get("spark"), trickle_results.get("ours")
    if s and o and all(x.get(k) for x in (s, o) for k in ("p50_ms", "p95_ms")):
        out += [
            "",
            f"Trickle (`bench/trickle.py`: a 1 s processing-time trigger, one 20-row file a second, "
            f"{o['batches']} batches): p50 Spark {s['p50_ms']:.0f} ms, ours {o['p50_ms']:.0f} ms "
            f"(ratio {o['p50_ms'] / s['p50_ms']:.2f}); p95 Spark {s['p95_ms']:.0f} ms, ours {o['p95_ms']:.0f} ms "
            f"(ratio {o['p95_ms'] / s['p95_ms']:.2f}).",
        ]
    if chart:
        out += ["", f"![statestream / Spark per workload]({chart})"]
    return "\n".join(out) + "\n"


def pyplot() -> Any:
    """matplotlib's pyplot without a display, or None (with a note) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no chart: matplotlib is not installed (scripts/bench.sh installs it: pip install -e '.[bench]')")
        return None
    return plt


def commit() -> str:
    """The checked-out commit, ``-dirty`` when the tree has changes ('' outside git)."""
    return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def chart(rows: list[dict[str, Any]], path: Path, where: str) -> bool:
    """A bar chart of ours/Spark per workload (total and median batch), with the goals and 1.0."""
    plt = pyplot()
    if plt is None:
        return False
    rows = [r for r in rows if "total_ratio" in r]
    if not rows:
        return False
    names = [r["workload"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 2), 4.5), dpi=110)
    width = 0.38
    ax.bar([i - width / 2 for i in x], [r["total_ratio"] for r in rows], width, label="total wall time", color="#3b6ea8")
    ax.bar([i + width / 2 for i in x], [r["median_ratio"] or 0 for r in rows], width, label="median batch", color="#9cc0e6")
    for i, r in enumerate(rows):
        if r["goal"] is not None:
            ax.hlines(r["goal"], i - 0.45, i + 0.45, colors="#c0392b", linewidth=2, label="goal" if i == 0 else None)
        ax.annotate(f"{r['total_ratio']:.2f}", (i - width / 2, r["total_ratio"]), ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("statestream / Spark's engine (lower is faster)")
    ax.set_title("statestream vs Spark Structured Streaming, per workload", fontsize=11)
    top = max(max(r["total_ratio"], r["median_ratio"] or 0, r["goal"] or 0) for r in rows)
    ax.set_ylim(0, max(1.2, top) * 1.22)
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    fig.text(0.01, 0.01, where.replace("`", ""), fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return True


def publish(md_text: str, png: Path | None) -> None:
    """Copy the report to docs/bench/latest.* and replace the table of docs/benchmarks.md (the
    documentation site's page) between its markers."""
    docs = ROOT / "docs" / "bench"
    docs.mkdir(parents=True, exist_ok=True)
    if png is not None:
        (docs / "latest.png").write_bytes(png.read_bytes())

    def linked(target: str) -> str:
        return md_text.replace(f"]({png.name})", f"]({target})") if png is not None else md_text

    (docs / "latest.md").write_text(linked("latest.png"))
    page = ROOT / "docs" / "benchmarks.md"
    text = page.read_text()
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    if start not in text or end not in text or text.index(start) > text.index(end):
        print("docs/benchmarks.md has no bench:start marker followed by a bench:end marker; not changed")
        return
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{linked('bench/latest.png')}{end}{tail}")


def write_report(rows: list[dict[str, Any]], results: list[dict[str, Any]], trickle_results: dict[str, Any], where: str, quick: bool) -> tuple[str, Path | None]:
    """Write ``bench/results/report-<time>.{md,png,json}``; returns the Markdown and the chart."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run.RESULTS.mkdir(parents=True, exist_ok=True)
    png = run.RESULTS / f"report-{stamp}.png"
    try:
        has_chart = chart(rows, png, where)
    except Exception as exc:  # noqa: BLE001 - the table and the figures matter more than the chart
        print(f"no chart: {type(exc).__name__}: {exc}")
        has_chart = False
    md_text = markdown(rows, trickle_results, where, png.name if has_chart else None)
    md = run.RESULTS / f"report-{stamp}.md"
    md.write_text(md_text)
    (run.RESULTS / f"report-{stamp}.json").write_text(
        json.dumps({"machine": where, "quick": quick, "rows": rows, "results": results, "trickle": trickle_results}, indent=1, default=str)
    )
    print()
    print(md_text)
    print(f"report: {md}" + (f", chart: {png}" if has_chart else ""))
    return md_text, png if has_chart else None


def rebuild(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], str, bool]:
    """Rows, results, trickle, machine and quick flag from saved report or ``run.py`` results;
    a later file's (workload, engine) result replaces an earlier one's."""
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[str] = []
    trickle_results: dict[str, Any] = {}
    where, quick = "", False
    for path in paths:
        saved = json.loads(Path(path).read_text())
        where = saved.get("machine") or where
        quick = saved.get("quick", quick)
        trickle_results = saved.get("trickle") or trickle_results
        for r in saved.get("results", []):
            if r["workload"] not in order:
                order.append(r["workload"])
            by_key[(r["workload"], r["engine"])] = r
    rows = [summarise(wl, [by_key[(wl, e)] for e in ("spark", "ours", "floor") if (wl, e) in by_key]) for wl in order]
    if len(paths) > 1:
        described = commit()
        where += f"; results of {len(paths) - 1} later run(s) merged in, up to statestream {described or 'unknown'}"
    return rows, list(by_key.values()), trickle_results, where, quick


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(REPORT_SIZES), help="comma-separated, default all")
    ap.add_argument("--quick", action="store_true", help="small sizes: checks that everything runs, not a measurement")
    ap.add_argument("--repeat", type=int, default=1, help="run each workload this many times; each engine's median run (by total) is reported")
    ap.add_argument("--no-trickle", action="store_true", help="leave out the processing-time trickle")
    ap.add_argument("--publish", action="store_true", help="write docs/bench/latest.* and README.md's table")
    ap.add_argument("--rebuild", nargs="+", metavar="JSON", help="no runs: the report from these saved results")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.rebuild:
        rows, results, trickle_results, where, quick = rebuild(args.rebuild)
        where = where or machine()
    else:
        sizes = QUICK_SIZES if args.quick else REPORT_SIZES
        workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in workloads if w not in sizes]
        if unknown or not workloads:
            ap.error(f"unknown or no workload(s) {', '.join(unknown)}; known: {', '.join(sizes)}")
        if args.publish and (args.quick or set(workloads) != set(REPORT_SIZES)):
            ap.error("--publish needs every workload at its report size (not --quick, not a subset)")
        where, quick = machine(), args.quick
        results, rows = [], []
        trickle_results = {}
        partial = run.RESULTS / f"report-partial-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}.json"
        for wl in workloads:
            rows_per_file, files = sizes[wl]
            runs = [run.run_workload(base_workload(wl), ["spark", "ours", "floor"], rows_per_file, files) for _ in range(args.repeat)]
            for r in (r for one in runs for r in one):
                r["workload"] = wl  # the report's name (``W2s``), so that a rebuild keeps the sizes apart
            res = [median_run([r for one in runs for r in one if r["engine"] == e]) for e in ("spark", "ours", "floor")]
            results.extend(r for one in runs for r in one)
            rows.append(summarise(wl, res))
            run.save_results(results, partial, machine=where, quick=quick)  # kept if a later workload fails
        if not args.no_trickle:
            trickle_results = trickle.run_trickle(["spark", "ours"], batches=15 if quick else 60)
    if args.publish and quick:
        ap.error("--publish refuses a quick run's figures")
    md_text, png = write_report(rows, results, trickle_results, where, quick)
    if args.publish:
        publish(md_text, png)
        print("published to docs/bench/latest.md and README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
