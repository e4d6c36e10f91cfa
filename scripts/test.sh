#!/usr/bin/env bash
# Run the test suite (default: everything but @slow). `scripts/test.sh --slow` runs the slow cases too.
# Two pytest workers by default (each with its own SparkSession: one per process), a module's
# tests on one worker (they share its oracle runs), in the order tests/conftest.py gives (the long
# modules first); STATESTREAM_TEST_WORKERS=1 runs in one process.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
WORKERS="${STATESTREAM_TEST_WORKERS:-2}"
PARALLEL=()
if [ "$WORKERS" != "1" ] && [ "$WORKERS" != "0" ]; then
  PARALLEL=(-n "$WORKERS" --dist loadscope --no-loadscope-reorder)
fi
if [ "${1:-}" = "--slow" ]; then
  shift
  exec "$VENV/bin/python" -m pytest -m "" ${PARALLEL[@]+"${PARALLEL[@]}"} "$@"
fi
exec "$VENV/bin/python" -m pytest ${PARALLEL[@]+"${PARALLEL[@]}"} "$@"
