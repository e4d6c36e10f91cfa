#!/usr/bin/env bash
# The soak cases (@pytest.mark.soak): the 200-kill torture, the object-store torture, ... They run
# for tens of minutes, so CI (.ci/run) runs a fixed-seed sample of each instead; run this before
# landing a change to state, checkpoint or runtime code. Extra arguments go to pytest
# (e.g. -k s3). One pytest process: the tortures start their own child processes.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec "$VENV/bin/python" -m pytest -m soak --soak -p no:cacheprovider "$@"
