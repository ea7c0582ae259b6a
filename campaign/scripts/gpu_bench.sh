#!/usr/bin/env bash
# The GPU benchmark of packed and graph-captured training (docs/scaling.md), run on a lent machine by the
# device tool from the repository root after the sitting, if device minutes are left (about 5 minutes):
# aggregate training images/s of the six primary variants for K in {1, 8, 32, 64} runs per pack, eager,
# then single and K=32 with and without graph capture for three of them (each captured cell compiles).
# Writes $OUT/bench_pack_gpu.md; commit it as reports/bench/gpu_pack_<device>.md.
# Usage: bash campaign/scripts/gpu_bench.sh [PRESET]
set -uo pipefail
preset=${1:-fmnist_converged}
export PYTHONPATH=. PYTHONUNBUFFERED=1
out=${OUT:-/tmp/bench-out}
mkdir -p "$out"
report="$out/bench_pack_gpu.md"
{
  echo "# Packed and graph-captured training on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "Command: \`bash campaign/scripts/gpu_bench.sh $preset\` ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))."
  echo
  echo "## K runs per pack, eager"
  echo
  timeout 200 python3 -m rpevit bench pack --params "$preset" --device cuda --packs 1,8,32,64 --steps 10 --rounds 3
  echo
  echo "## Graph capture (CUDA graphs), single run and K=32"
  echo
  timeout 240 python3 -m rpevit bench pack --params "$preset" --device cuda --packs 32 --steps 10 --rounds 3 \
    --variants softmax+ape,favor+ape,relu+ape --capture
} 2>&1 | tee "$report"
