#!/usr/bin/env bash
# The soak cases (@pytest.mark.soak): the 200-kill torture, the object-store torture, ..., then
# 300 random differential queries (scripts/fuzz.sh). They run
# for tens of minutes, so CI (.ci/run) runs a fixed-seed sample of each instead; run this before
# landing a change to state, checkpoint or runtime code. Extra arguments go to pytest
# (e.g. -k s3). One pytest process: the tortures start their own child processes.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
"$VENV/bin/python" -m pytest -m soak --soak -p no:cacheprovider "$@"
status=$?
# the randomized differential tester's big budget (CI runs 12 cases from seed 0)
"$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" "${STATESTREAM_SOAK_FUZZ_CASES:-300}" || status=$?
exit $status
