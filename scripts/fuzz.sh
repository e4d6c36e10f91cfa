#!/usr/bin/env bash
# The randomized differential tester with a bigger budget than CI's fixed-seed sample:
#   scripts/fuzz.sh [N [SEED]]   (default: 200 cases from a random seed, printed first)
# A failure shrinks to a small case and prints it with its input batches; the same N and SEED
# replay the run. Extra arguments after SEED go to pytest. A run without a difference is added to
# fuzz-ledger.tsv (date, commit, seed, cases, families): the cases of many runs add up there
# (scripts/fuzz.sh --tally prints the sum).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
if [ "${1:-}" = "--tally" ]; then
  exec awk -F'\t' 'NR > 1 { n += $4; runs++ } END { printf "%d cases in %d runs without a difference (fuzz-ledger.tsv)\n", n, runs }' "$ROOT/fuzz-ledger.tsv"
fi
N="${1:-200}"
SEED="${2:-$(( (RANDOM << 15) | RANDOM ))}"
shift $(( $# > 2 ? 2 : $# ))
echo "random queries: $N cases, seed $SEED (replay: scripts/fuzz.sh $N $SEED)"
export STATESTREAM_FUZZ_LEDGER="${STATESTREAM_FUZZ_LEDGER:-$ROOT/fuzz-ledger.tsv}"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -q tests/differential/test_random_queries.py \
  --fuzz-examples "$N" --fuzz-seed "$SEED" "$@"
