#!/usr/bin/env bash
# Install torch==VERSION into a Python environment without ever pulling CUDA wheels on a
# machine that has no NVIDIA GPU.
#   NVIDIA GPU (nvidia-smi works): the CUDA build from PyPI, plus the matching torchvision.
#   no GPU: the CPU build "VERSION+cpu" — from a local wheel if pip's find-links has one,
#           else from PyTorch's CPU index. torchvision is not installed (optional in rpevit).
set -euo pipefail
py=${1:?usage: install_torch.sh PYTHON VERSION TORCHVISION_VERSION}
version=${2:?torch version}
vision=${3:?torchvision version}

if "$py" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  echo "torch $version is already installed"
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "NVIDIA GPU found: installing the CUDA build of torch $version and torchvision $vision"
  exec "$py" -m pip install "torch==$version" "torchvision==$vision"
fi
echo "no NVIDIA GPU: installing the CPU build torch $version+cpu"
"$py" -m pip install "torch==$version+cpu" 2>/dev/null \
  || exec "$py" -m pip install "torch==$version+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
