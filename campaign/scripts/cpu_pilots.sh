#!/usr/bin/env bash
# The gap pilots on this CPU in their pre-registered order, one thread per runner (docs/running.md, "The
# gap pilots"): start it twice, a few seconds apart, for two runners side by side. Each pass trains the
# pilot the order stands at (`python -m campaign gap-pilot --standing`); when that pilot has nothing left to
# start here (its last runs train in the other runner), it waits and asks again, so a NO-GO hands the
# runners on to the next pilot without anyone. It ends on a GO (the factorial is pre-registered next) or
# when every pilot has ended NO-GO. Extra arguments go to `study`, e.g. --capture-only favor.
# Usage: bash campaign/scripts/cpu_pilots.sh [STUDY ARGUMENTS…]   (PYTHON, WAIT_SECONDS to override)
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1
py=${PYTHON:-.venv/bin/python}
wait_seconds=${WAIT_SECONDS:-600}
while true; do
  pilot=$("$py" -m campaign gap-pilot --standing)  # an error here stops the runner (set -e)
  [ -n "$pilot" ] || break
  echo "the order stands at $pilot"
  "$py" -m rpevit study "$pilot" --no-progress "$@"
  # study returned: every run of the pilot has finished or trains in the other runner
  if [ "$("$py" -m campaign gap-pilot --standing)" = "$pilot" ]; then
    echo "$pilot has nothing left to start here: asking again in $wait_seconds s"
    sleep "$wait_seconds"
  fi
done
echo "the pilots' order has ended (python -m campaign gap-pilot --overview says where)"
