#!/usr/bin/env bash
# Install torch==VERSION into a Python environment without ever pulling CUDA wheels on a
# machine that has no NVIDIA GPU, and never leaving a CPU build on a machine that has one.
#   NVIDIA GPU (nvidia-smi -L works): the CUDA build from PyPI plus the matching torchvision,
#           then a check that torch sees the GPU (an error if it does not).
#   no GPU: the CPU build "VERSION+cpu" — from a local wheel if pip's find-links has one,
#           else from PyTorch's CPU index. torchvision is not installed (optional in rpevit).
# install_torch.sh --decide PYTHON VERSION prints the decision only (keep | cuda | cpu).
set -euo pipefail
decide_only=0
if [ "${1:-}" = "--decide" ]; then
  decide_only=1
  shift
fi
py=${1:?usage: install_torch.sh [--decide] PYTHON VERSION TORCHVISION_VERSION}
version=${2:?torch version}

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# keep: the right build is installed; cuda / cpu: the build to install
decide() {
  local installed wanted
  installed=$("$py" -c "import torch; print(torch.__version__)" 2>/dev/null || true)
  if has_gpu; then wanted=cuda; else wanted=cpu; fi
  if [ "${installed%%+*}" != "$version" ]; then
    echo "$wanted"
  elif [ "$wanted" = cuda ] && [ "${installed#*+}" = cpu ]; then
    echo cuda # a CPU build on a GPU machine would train on the CPU without a word
  else
    echo keep
  fi
}

cuda_check() {
  "$py" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" || {
    echo "error: torch $("$py" -c 'import torch; print(torch.__version__)') is installed but sees no CUDA GPU" \
      "although nvidia-smi lists one: check the NVIDIA driver (nvidia-smi) against the CUDA version of" \
      "this torch build (python -c 'import torch; print(torch.version.cuda)')." >&2
    exit 1
  }
}

decision=$(decide)
if [ "$decide_only" = 1 ]; then
  echo "$decision"
  exit 0
fi
vision=${3:?torchvision version}
case "$decision" in
  keep)
    echo "torch $version is already installed"
    if has_gpu; then cuda_check; fi
    ;;
  cuda)
    echo "NVIDIA GPU found: installing the CUDA build of torch $version and torchvision $vision"
    # pip counts an installed "VERSION+cpu" as torch==VERSION: remove it first
    "$py" -m pip uninstall --quiet --yes torch torchvision >/dev/null 2>&1 || true
    "$py" -m pip install "torch==$version" "torchvision==$vision"
    cuda_check
    echo "torch $version sees the GPU: $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
    ;;
  cpu)
    echo "no NVIDIA GPU: installing the CPU build torch $version+cpu"
    "$py" -m pip install "torch==$version+cpu" 2>/dev/null \
      || exec "$py" -m pip install "torch==$version+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
    ;;
esac
