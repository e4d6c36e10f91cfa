#!/usr/bin/env bash
# Run the test suite (default: everything but @slow). `scripts/test.sh --slow` runs the slow cases too.
# Two pytest workers by default (each with its own SparkSession: one per process), a module's
# tests on one worker (they share its oracle runs), in the order tests/conftest.py gives (the long
# modules first); STATESTREAM_TEST_WORKERS=1 runs in one process.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
# the dashboard's browser test needs Debian's chromium (headless, on loopback)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
# the linter first (pyproject's [tool.ruff]): a second, no Spark; then the type checker on the
# package (pyproject's [tool.mypy]): a few seconds, no Spark; then the docs
"$VENV/bin/ruff" check --quiet statestream tests bench scripts
"$VENV/bin/mypy" --no-error-summary statestream
# the documentation site (mkdocs.yml) in strict mode: a broken link, page or API reference fails
SITE="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$SITE"
rm -rf "$SITE"
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
