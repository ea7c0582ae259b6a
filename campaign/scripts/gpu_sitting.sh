#!/usr/bin/env bash
# The prepared GPU sitting, run on the lent machine by the device tool from the repository root
# (docs/scaling.md): the GPU image's own torch, rpevit from the checkout, data from the carried
# ./data folder, unfinished runs from the carried ./staged folder (`gpu-sitting --stage`), results
# into $OUT; first the compile check (tests/test_compile.py) on the GPU.
# When every run of a gap or recall pilot finishes with NO-GO inside the minutes, the next pilot of its
# pre-registered order (`python -m campaign gap-pilot|recall-pilot PRESET --next`) trains in the minutes left.
# Usage: bash campaign/scripts/gpu_sitting.sh PRESET [MINUTES]
set -euo pipefail
preset=${1:?usage: gpu_sitting.sh PRESET [MINUTES]}
minutes=${2:-6}  # plus up to 2.5 min of compile check: a device call of ≤ 10 min
export PYTHONPATH=. PYTHONUNBUFFERED=1
# the carried staged/ (`gpu-sitting --stage`: unfinished runs only) is this sitting's runs/ when present
if [ -z "${RPEVIT_RUNS:-}" ] && [ -d staged/runs ]; then export RPEVIT_RUNS=$PWD/staged/runs; fi
out=${OUT:-/tmp/sitting-out}
mkdir -p "$out"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv,noheader || true
python3 -m rpevit status "$preset" | head -3
# the compile check on this machine's torch and GPU: no graph break, no recompile (about a minute)
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_compile.py 2>&1 | tail -15 | tee "$out/compile_check.log" || true
start=$(date +%s)
while [ -n "$preset" ]; do
  left=$(python3 -c "print(round($minutes - ($(date +%s) - $start) / 60, 2))")
  python3 -c "import sys; sys.exit($left < 1.5)" || { echo "$left minutes left: $preset waits"; break; }
  # SITTING_DEVICE=cpu: a dry run on a machine without CUDA (one runner, sequential engine)
  python3 -m campaign gpu-sitting "$preset" --minutes "$left" --out "$out" --data-root data \
    --device "${SITTING_DEVICE:-cuda}" 2>&1 | tee -a "$out/sitting.log"
  preset=$( (python3 -m campaign gap-pilot "$preset" --next || python3 -m campaign recall-pilot "$preset" --next) \
    2>>"$out/sitting.log" || true)
  if [ -n "$preset" ]; then echo "NO-GO with every run finished: the next pilot, $preset, trains in the minutes left"; fi
done
