#!/usr/bin/env bash
# The prepared GPU sitting, run on the lent machine by the device tool from the repository root
# (docs/scaling.md): the GPU image's own torch, rpevit from the checkout, data from the carried
# ./data folder, results into $OUT. Usage: bash scripts/gpu_sitting.sh PRESET [MINUTES]
set -euo pipefail
preset=${1:?usage: gpu_sitting.sh PRESET [MINUTES]}
minutes=${2:-8}
export PYTHONPATH=. PYTHONUNBUFFERED=1
out=${OUT:-/tmp/sitting-out}
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv,noheader || true
python3 -m rpevit status "$preset" | head -3
python3 -m rpevit gpu-sitting "$preset" --minutes "$minutes" --out "$out" --data-root data 2>&1 | tee "$out/sitting.log"
