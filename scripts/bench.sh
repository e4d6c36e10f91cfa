#!/usr/bin/env bash
# Every benchmark workload on Spark's engine, on statestream and as Spark's stateless batch floor,
# then the processing-time trickle; writes a Markdown table and a PNG chart to bench/results/
# (--publish: also docs/bench/latest.* and docs/benchmarks.md's table). --quick: small sizes, about 17 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
if ! "$VENV/bin/python" -c "import matplotlib, psutil" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q -e "$ROOT[bench]"
fi
exec "$VENV/bin/python" bench/report.py "$@"
