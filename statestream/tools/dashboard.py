"""The live dashboard of a query: ``statestream ui CHECKPOINT``, or served by a running query.

A local web page with the charts of Spark UI's Structured Streaming tab, drawn from the progress
history that statestream keeps in the checkpoint (``checkpoint.progress_log``), so it shows a
query's whole history, across restarts, and updates while the query runs: input rate and
process rate, input rows, batch duration split by ``durationMs`` phase, state rows and size
per operator, the watermark and its gap to the batch time, and rows dropped as late.

The page is served on loopback by the standard library's HTTP server; the charts are Plotly's
(its JavaScript bundle comes with the ``plotly`` package, so the page needs no network). The
page asks ``/api/progress?after=<batchId>`` every two seconds for what is new. Each chart also
carries its figures as ``data-x``/``data-series`` attributes, which is what the browser test
reads back.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from statestream.checkpoint.files import CheckpointFileManager
from statestream.checkpoint.progress_log import ProgressLog

__all__ = ["DashboardServer", "plotly_bundle", "serve_dashboard"]

log = logging.getLogger(__name__)


def plotly_bundle() -> Path:
    """Plotly's JavaScript bundle from the ``plotly`` package (``pip install statestream[ui]``)."""
    try:
        import plotly
    except ImportError as exc:
        raise RuntimeError(
            "the dashboard draws its charts with Plotly: install the 'plotly' package (pip install 'statestream[ui]')"
        ) from exc
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.exists():
        raise RuntimeError(f"the plotly package has no {path}: reinstall it")
    return path


class DashboardServer:
    """A dashboard served in a thread of this process; ``stop()`` ends it."""

    def __init__(self, checkpoint: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.checkpoint = checkpoint
        self.history = ProgressLog(CheckpointFileManager(checkpoint).child("progress"))
        bundle = plotly_bundle().read_bytes()
        page = _PAGE.replace("__CHECKPOINT__", json.dumps(CheckpointFileManager(checkpoint).display())).encode()
        history = self.history

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                url = urlparse(self.path)
                if url.path in ("/", "/index.html"):
                    self._send(200, "text/html; charset=utf-8", page)
                elif url.path == "/plotly.min.js":
                    self._send(200, "application/javascript", bundle)
                elif url.path == "/api/progress":
                    after = parse_qs(url.query).get("after", [None])[0]
                    entries = history.read(int(after) if after not in (None, "") else None)
                    self._send(200, "application/json", json.dumps(entries, default=str).encode())
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                log.debug("dashboard: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="statestream-dashboard", daemon=True)
        self._thread.start()
        log.info("statestream dashboard of %s at %s", checkpoint, self.url)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_dashboard(checkpoint: str, port: int = 0, host: str = "127.0.0.1") -> DashboardServer:
    """Serve the dashboard of ``checkpoint`` (loopback by default; port 0: any free port)."""
    return DashboardServer(checkpoint, host, port)


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>statestream: streaming query</title>
<script src="/plotly.min.js"></script>
<style>
 body { font-family: sans-serif; margin: 1em 2em; color: #222; }
 h1 { font-size: 1.3em; margin-bottom: .2em; } .sub { color: #666; margin-bottom: 1em; }
 .grid { display: grid; grid-template-columns: 1fr 1fr; gap: .5em 1.5em; }
 .chart { height: 300px; } table { border-collapse: collapse; font-size: .9em; }
 td, th { border-bottom: 1px solid #ddd; padding: .2em .8em; text-align: right; } th:first-child, td:first-child { text-align: left; }
</style></head>
<body>
<h1>Streaming query <span id="name"></span></h1>
<div class="sub">checkpoint <code id="checkpoint"></code> &middot; id <code id="qid"></code> &middot; run <code id="rid"></code>
 &middot; <span id="status">waiting for the first batch</span></div>
<div class="grid">
 <div id="rates" class="chart"></div><div id="inputRows" class="chart"></div>
 <div id="duration" class="chart"></div><div id="watermark" class="chart"></div>
 <div id="stateRows" class="chart"></div><div id="stateMemory" class="chart"></div>
 <div id="lateRows" class="chart"></div><div id="lateness" class="chart"></div>
 <div id="last"></div>
</div>
<script>
const CHECKPOINT = __CHECKPOINT__;
document.getElementById("checkpoint").textContent = CHECKPOINT;
const history = [];
let lastBatch = null;
const layout = (title, y, batches) => ({title: {text: title, font: {size: 14}}, margin: {l: 70, r: 10, t: 35, b: 40},
  xaxis: {title: {text: "batch"}, tickformat: "d", dtick: batches <= 20 ? 1 : null, automargin: true},
  yaxis: {title: {text: y}, exponentformat: "none", separatethousands: true, rangemode: "tozero", automargin: true},
  legend: {orientation: "h"}});
const ms = (t) => t ? Date.parse(t) : null;
// a watermark of 0 (1970-01-01) is Spark's "no watermark yet", not an event time
const watermarkMs = (p) => { const w = ms((p.eventTime || {}).watermark); return w && w > 0 ? w : null; };
// Spark's -1 (and a figure the progress lacks) is "not available"
const shown = (v) => v === undefined || v === null || v === -1 ? "n/a" : v;

// series: {name: [value per batch]}; options.fromFirstValue drops the batches before the
// first value (a chart that starts when its figure does); a chart with no value but nulls and
// zeros says "none" instead of drawing an axis around nothing
function draw(id, title, y, series, kind, options) {
  let xs = history.map(p => p.batchId);
  let cut = Object.fromEntries(Object.entries(series));
  if ((options || {}).fromFirstValue) {
    const first = xs.findIndex((_, i) => Object.values(series).some(ys => ys[i] !== null && ys[i] !== undefined));
    const from = first < 0 ? xs.length : first;
    xs = xs.slice(from);
    cut = Object.fromEntries(Object.entries(series).map(([n, ys]) => [n, ys.slice(from)]));
  }
  const empty = Object.values(cut).every(ys => ys.every(v => v === null || v === undefined || v === 0));
  const traces = Object.entries(cut).map(([name, ys]) => (
    {x: xs, y: ys, name: name, type: kind === "bar" || kind === "stack" ? "bar" : "scatter", mode: "lines+markers"}));
  const lay = layout(title, y, xs.length);
  if (kind === "stack") lay.barmode = "stack";
  if (empty) {
    lay.yaxis.range = [0, 1];
    lay.yaxis.showticklabels = false;
    lay.annotations = [{text: (options || {}).emptyText || "none", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: {size: 16, color: "#888"}}];
  }
  Plotly.react(id, traces, lay, {displayModeBar: false, responsive: true});
  const el = document.getElementById(id);
  el.dataset.x = JSON.stringify(history.map(p => p.batchId));
  el.dataset.series = JSON.stringify(series);
  el.dataset.shown = JSON.stringify(xs);
  el.dataset.empty = JSON.stringify(empty);
}

function operators() {
  const names = [];
  for (const p of history) (p.stateOperators || []).forEach((o, i) => {
    const n = i + ": " + o.operatorName; if (!names.includes(n)) names.push(n); });
  return names;
}
function perOperator(field) {
  const out = {};
  operators().forEach(n => { const i = parseInt(n); out[n] = history.map(p => ((p.stateOperators || [])[i] || {})[field] ?? null); });
  return out;
}

function render() {
  if (!history.length) return;
  const last = history[history.length - 1];
  document.getElementById("name").textContent = last.name || "";
  document.getElementById("qid").textContent = last.id;
  document.getElementById("rid").textContent = last.runId;
  document.getElementById("status").textContent = history.length + " batches, the last " + last.batchId + " at " + last.timestamp;
  draw("rates", "Input rate and process rate", "rows / s", {
    "input rate": history.map(p => p.inputRowsPerSecond), "process rate": history.map(p => p.processedRowsPerSecond)});
  draw("inputRows", "Input rows", "rows", {"input rows": history.map(p => p.numInputRows)}, "bar");
  const phases = [];
  history.forEach(p => Object.keys(p.durationMs || {}).forEach(k => { if (k !== "triggerExecution" && !phases.includes(k)) phases.push(k); }));
  const durations = {};
  phases.sort().forEach(k => durations[k] = history.map(p => (p.durationMs || {})[k] ?? 0));
  draw("duration", "Batch duration by phase", "ms", durations, "stack");
  draw("watermark", "Watermark gap (batch time - watermark)", "s", {
    "watermark gap": history.map(p => watermarkMs(p) === null ? null : (ms(p.timestamp) - watermarkMs(p)) / 1000)},
    "scatter", {fromFirstValue: true, emptyText: "no watermark yet"});
  document.getElementById("watermark").dataset.watermarks = JSON.stringify(history.map(p => (p.eventTime || {}).watermark || null));
  draw("stateRows", "State rows per operator", "rows", perOperator("numRowsTotal"));
  // the current version's size, and what of it the Python workers hold in their heap (versions
  // kept memory-mapped on local disk, the default, are not counted there)
  const sizes = {};
  Object.entries(perOperator("customMetrics")).forEach(([n, ms]) => sizes[n + " current version"] = ms.map(m => (m || {}).stateOnCurrentVersionSizeBytes ?? null));
  Object.entries(perOperator("memoryUsedBytes")).forEach(([n, ys]) => sizes[n + " in memory"] = ys);
  draw("stateMemory", "State size per operator", "bytes", sizes);
  draw("lateRows", "Rows dropped as late", "rows", perOperator("numRowsDroppedByWatermark"), "bar");
  drawLateness();
  const rows = [["batch", last.batchId], ["input rows", last.numInputRows], ["duration (ms)", last.batchDuration],
    ["watermark", watermarkMs(last) === null ? "none yet" : last.eventTime.watermark], ["sink rows", (last.sink || {}).numOutputRows]];
  document.getElementById("last").innerHTML = "<h3>Last batch</h3><table>" +
    rows.map(([k, v]) => "<tr><td>" + k + "</td><td>" + shown(v) + "</td></tr>").join("") + "</table>";
  document.body.dataset.batches = JSON.stringify(history.map(p => p.batchId));
}

// the rows of every batch by how late they came (statestream's lateness histogram, per
// watermark input): x is the delay that keeps a bucket's rows (its upper edge, in seconds)
const bucketDelayMs = (b) => b <= 0 ? 1 : Math.ceil(Math.pow(2, b / 4));
function drawLateness() {
  const inputs = {};
  for (const p of history) Object.entries(p.lateness || {}).forEach(([node, rec]) => {
    const name = node;
    const input = inputs[name] || (inputs[name] = {buckets: {}, delayMs: rec.delayMs, ahead: 0});
    input.delayMs = rec.delayMs;
    input.ahead += rec.ahead;
    (rec.buckets || []).forEach(([b, n]) => input.buckets[b] = (input.buckets[b] || 0) + n);
  });
  const traces = [], shapes = [], series = {};
  // one category per bucket from the least to the greatest seen (empty ones too), so the axis
  // runs evenly in log steps; the delay's line stands before the first bucket it keeps
  const all = Object.values(inputs).flatMap(input => Object.keys(input.buckets).map(Number));
  const lo = Math.min(...all), hi = Math.max(...all);
  const span = all.length ? Array.from({length: hi - lo + 1}, (_, i) => lo + i) : [];
  const label = (b) => { const s = bucketDelayMs(b) / 1000; return "< " + (s >= 1 ? s.toPrecision(3).replace(/\.?0+$/, "") : String(+s.toPrecision(2))) + " s"; };
  Object.entries(inputs).forEach(([name, input]) => {
    const bs = Object.keys(input.buckets).map(Number).sort((a, b) => a - b);
    series[name] = {delayMs: input.delayMs, ahead: input.ahead, buckets: bs.map(b => [b, input.buckets[b]])};
    traces.push({x: span.map(label), y: span.map(b => input.buckets[b] || 0), name: name, type: "bar"});
    const at = span.findIndex(b => bucketDelayMs(b) > input.delayMs);
    const x = (at < 0 ? span.length : at) - 0.5;
    shapes.push({type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: {dash: "dot", color: "#c00"}});
  });
  const lay = layout("Lateness: rows behind the stream's front (red: the delay)", "rows", 0);
  lay.xaxis = {title: {text: "behind by less than"}, type: "category", automargin: true};
  lay.shapes = shapes;
  const empty = !traces.length || traces.every(t => !t.y.length);
  if (empty) {
    lay.yaxis.range = [0, 1];
    lay.yaxis.showticklabels = false;
    lay.annotations = [{text: traces.length ? "no row behind the front" : "no lateness recorded", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: {size: 16, color: "#888"}}];
  }
  Plotly.react("lateness", traces, lay, {displayModeBar: false, responsive: true});
  const el = document.getElementById("lateness");
  el.dataset.series = JSON.stringify(series);
  el.dataset.empty = JSON.stringify(empty);
}

async function poll() {
  try {
    const r = await fetch("/api/progress" + (lastBatch === null ? "" : "?after=" + lastBatch));
    const entries = await r.json();
    if (entries.length) {
      for (const e of entries) history.push(e);
      lastBatch = history[history.length - 1].batchId;
      render();
    }
    document.body.dataset.loaded = "true";
  } catch (e) { document.getElementById("status").textContent = "cannot reach the dashboard server: " + e; }
  setTimeout(poll, 2000);
}
poll();
</script></body></html>
"""
