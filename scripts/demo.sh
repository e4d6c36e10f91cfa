#!/usr/bin/env bash
# Run the seed query (rate source, 20 s watermark, 5 s windows, count) on an embedded local Spark.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec "$VENV/bin/python" -m statestream.commands.demo "$@"
