#!/usr/bin/env bash
# Run the test suite (default: everything but @slow). `scripts/test.sh --slow` runs the slow cases too.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
if [ "${1:-}" = "--slow" ]; then
  shift
  exec "$VENV/bin/python" -m pytest -m "" "$@"
fi
exec "$VENV/bin/python" -m pytest "$@"
