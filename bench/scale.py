"""Scale of state (issue 17, item 3): W2's query as its state grows to 1M, 3M, 10M keys.

    python3 bench/scale.py [--keys 1000000,3000000,10000000] [--engine both|spark|ours]

W2's aggregation (``groupBy("user", window("timestamp", "1 hour"))`` with count, sum, avg and max
of ``amount``, update mode) over input made so that the state ends with exactly ``keys`` keys:
each of five files holds a fifth of the users, new ones (the last of them also the users left
over when ``keys`` is not a multiple of five), so the state grows by about keys / 5 a batch, then
one more file updates keys / 5 users already in the state. The batch time is then read as the state grows, and the last
batch runs against the whole state.

Each engine runs in its own child process (``bench/run.py``'s), with ``BENCH_DRIVER_MEMORY``
(default 4g) for the driver; peak RSS is the whole process tree and, split by process, the
JVM and the Python processes (driver and workers). Results go to
``bench/results/scale-<time>.{json,md,png}``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402 - bench/ is not a package
import run  # noqa: E402

GROWTH_FILES = 5


def generate(keys: int, seed: int = 7) -> Path:
    """W2-shaped files whose users fill a state of exactly ``keys`` keys in five files, then a
    sixth file of users already seen (unless the files are already there)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = run.DATA / f"scale-{keys}"
    if (out / "_DONE").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    rows = max(keys // GROWTH_FILES, 1)
    rng = np.random.default_rng(seed)
    order = rng.permutation(keys)
    mtime0 = time.time() - 600
    width = len(str(keys))
    span_us = 300 * 1_000_000
    for i in range(GROWTH_FILES + 1):
        if i < GROWTH_FILES:
            ids = order[i * rows:(i + 1) * rows] if i < GROWTH_FILES - 1 else order[i * rows:]
        else:
            ids = rng.choice(keys, rows, replace=False)
        n = len(ids)
        users = pc.binary_join_element_wise("u", pc.utf8_lpad(pc.cast(pa.array(ids, pa.int64()), pa.string()), width, "0"), "")
        t_us = run.BASE_EPOCH_S * 1_000_000 + i * span_us + rng.integers(0, span_us, n)
        table = pa.table(
            {
                "timestamp": pa.array(t_us, pa.timestamp("us", tz="UTC")),
                "user": users,
                "amount": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2), pa.float64()),
            }
        )
        path = out / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (mtime0 + i, mtime0 + i))
    (out / "_DONE").write_text(json.dumps({"keys": keys, "rows": rows, "seed": seed}))
    return out


def _jvm_and_python(res: dict[str, Any]) -> tuple[int | None, int | None]:
    by = res.get("peak_rss_mb_by_process") or {}
    jvm = by.get("java")
    py = sum(v for k, v in by.items() if k in ("python", "python (driver)", "python (workers)")) or None
    return jvm, py


def _mb(v: int | None) -> str:
    return "n/a" if v is None else f"{v:,} MB"


def _ratio(a: int | None, b: int | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}"


def markdown(rows: list[dict[str, Any]], where: str) -> str:
    out = [
        f"Measured on {where}.",
        "",
        "| state keys | engine | median batch | last batch (whole state) | total | peak RSS | peak PSS | JVM peak | Python peak | state rows | sink rows |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("ok"):
            out.append(f"| {r['keys']:,} | {r['engine']} | failed: {str(r.get('error'))[:160].replace('|', '/')} |||||||||")
            continue
        if not r.get("batch_ms"):
            out.append(f"| {r['keys']:,} | {r['engine']} | no data batch |||||||||")
            continue
        jvm, py = _jvm_and_python(r)
        out.append(
            f"| {r['keys']:,} | {r['engine']} | {r['median_batch_ms']:,.0f} ms | {r['batch_ms'][-1]:,} ms | {r['total_s']:.1f} s | "
            f"{r['peak_rss_mb']:,} MB | {_mb(r.get('peak_pss_mb'))} | {jvm or 0:,} MB | {py or 0:,} MB | {r.get('state_rows')} | {r.get('output_rows')} |"
        )
    by_keys: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r.get("ok") and r.get("batch_ms"):
            by_keys.setdefault(r["keys"], {})[r["engine"]] = r
    ratios = []
    for k, e in sorted(by_keys.items()):
        if "spark" in e and "ours" in e:
            s, o = e["spark"], e["ours"]
            same = (s.get("output_rows"), s.get("state_rows")) == (o.get("output_rows"), o.get("state_rows"))
            ratios.append(
                f"| {k:,} | {o['median_batch_ms'] / s['median_batch_ms']:.2f} | {o['total_s'] / s['total_s']:.2f} | "
                f"{o['peak_rss_mb'] / s['peak_rss_mb']:.2f} | {_ratio(o.get('peak_pss_mb'), s.get('peak_pss_mb'))} | {'yes' if same else '**no**'} |"
            )
    if ratios:
        out += ["", "| state keys | median ratio ours/Spark | total ratio | peak RSS ratio | peak PSS ratio | same result |", "|---|---|---|---|---|---|", *ratios]
    return "\n".join(out) + "\n"


def chart(rows: list[dict[str, Any]], path: Path) -> bool:
    plt = report.pyplot()
    if plt is None:
        return False
    ok = [r for r in rows if r.get("ok") and r.get("batch_ms")]
    if not ok:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for engine, style, color in (("spark", "o-", "#c0392b"), ("ours", "s-", "#3b6ea8")):
        pts = sorted((r["keys"], r) for r in ok if r["engine"] == engine)
        if not pts:
            continue
        xs = [k / 1e6 for k, _ in pts]
        label = "Spark's engine" if engine == "spark" else "statestream"
        left.plot(xs, [r["median_batch_ms"] / 1000 for _, r in pts], style, color=color, label=f"{label}, median batch")
        left.plot(xs, [r["batch_ms"][-1] / 1000 for _, r in pts], style, color=color, alpha=0.4, label=f"{label}, last batch")
        right.plot(xs, [r["peak_rss_mb"] / 1024 for _, r in pts], style, color=color, label=label)
    left.set_xlabel("state keys (millions)")
    left.set_ylabel("batch time (s)")
    right.set_xlabel("state keys (millions)")
    right.set_ylabel("peak RSS, whole process tree (GB)")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle("W2 as the state grows: statestream vs Spark's engine", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="1000000,3000000,10000000")
    ap.add_argument("--engine", default="both", choices=["spark", "ours", "both"])
    args = ap.parse_args(argv)
    engines = ["spark", "ours"] if args.engine == "both" else [args.engine]
    where = report.machine() + f", driver memory {os.environ.get('BENCH_DRIVER_MEMORY', '4g')}"
    rows = []
    for keys in (int(k) for k in args.keys.split(",")):
        t = time.perf_counter()
        input_dir = generate(keys)
        print(f"{keys:,} keys: input in {input_dir} ({time.perf_counter() - t:.1f} s)", flush=True)
        for engine in engines:
            res = run.run_engine("W2", engine, input_dir)
            res["keys"] = keys
            rows.append(res)
            print(run._fmt(res), flush=True)  # noqa: SLF001 - the runner's own row format
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run.RESULTS.mkdir(parents=True, exist_ok=True)
    md = markdown(rows, where)
    png = run.RESULTS / f"scale-{stamp}.png"
    has_chart = chart(rows, png)
    (run.RESULTS / f"scale-{stamp}.md").write_text(md + (f"\n![W2 as the state grows]({png.name})\n" if has_chart else ""))
    (run.RESULTS / f"scale-{stamp}.json").write_text(json.dumps({"machine": where, "results": rows}, indent=1))
    print()
    print(md)
    print(f"results: {run.RESULTS / f'scale-{stamp}.md'}" + (f", chart: {png}" if has_chart else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
