#!/usr/bin/env bash
# `make test`'s two pytest sessions side by side: the test suite (tests/) in the foreground, and every
# notebook under nbval in the background with its output held back and printed after the suite. Both are
# mostly one-thread work, so on a 2-core machine (this project's CI) each gets a core and the wall time is
# the longer of the two instead of their sum. One torch thread each: two sessions at two threads thrash.
# Exits non-zero when either session fails.
# Usage: bash scripts/test_side_by_side.sh PYTHON
set -uo pipefail
py=${1:?usage: bash scripts/test_side_by_side.sh PYTHON}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
held=$(mktemp)
trap 'rm -f "$held"' EXIT
# nbval runs copies of notebooks/ (stored output-free) that carry the references of their marked cells
# (tests/nbval_references/), written into the git-ignored .nbval/ by scripts/nbval_references.py
"$py" scripts/nbval_references.py --into .nbval || exit 1
nbval=(--nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg .nbval)
"$py" -m pytest -q --durations=10 -p no:cacheprovider "${nbval[@]}" >"$held" 2>&1 &
notebooks=$!
"$py" -m pytest -q --durations=15 tests
suite=$?
echo "waiting for the notebooks (nbval, running beside the suite since it started)…"
wait "$notebooks"
notebooks_exit=$?
echo "== the notebooks under nbval =="
cat "$held"
echo "test suite: exit $suite; notebooks: exit $notebooks_exit"
[ "$suite" -eq 0 ] && [ "$notebooks_exit" -eq 0 ]
