"""A model on a device computes every tensor on that device, on every path: checked on this CPU-only machine
with PyTorch's `meta` device (shapes and dtypes, no data). A model moved to `meta` runs forward, backward and
evaluation on another grid (interpolated and not) while a dispatch mode records every op that reads or makes a
tensor elsewhere; a `torch.arange(…)` or `torch.eye(…)` that forgot its `device=` makes a CPU tensor there (on a
GPU, a CPU tensor beside CUDA ones: an error or a silent copy per step). 0-d tensors (Python scalars lifted by
torch) are exempt, as torch moves them itself."""

from __future__ import annotations

import pytest
import torch
from test_dtypes import SIZE, variants
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from rpevit.core.attention.linear import bias_paths
from rpevit.core.model import build_model

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


class Elsewhere(TorchDispatchMode):
    """Records every op that reads or makes a tensor of one or more dimensions off `device`."""

    def __init__(self, device: str):
        super().__init__()
        self.device, self.found = device, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves((args, kwargs, out)):
            if isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and tensor.device.type != self.device:
                self.found.add((str(func), str(tensor.device)))
        return out


def _paths(model) -> list[str]:
    """The bias paths of a linear backend's layer (auto and each exact one), else the backend's own."""
    layer = model.blocks[0].attn
    if layer.bias is None or not hasattr(layer.backend, "bias_path"):
        return ["own"]
    return ["auto", *bias_paths(layer.bias)]


def _run_everywhere(model, dtype, side: int) -> None:
    """Train step (forward, backward) at the trained size, then evaluation on a larger grid both ways."""
    images = torch.empty(2, 1, side, side, device="meta", dtype=dtype)
    model.train()
    model(images).float().sum().backward()
    model.eval()
    larger = torch.empty(2, 1, side + 8, side + 8, device="meta", dtype=dtype)
    with torch.no_grad():
        for interpolate in (False, True):
            model(larger, interpolate=interpolate)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", variants())
def test_a_model_on_a_device_computes_every_tensor_there(variant, dtype):
    torch.manual_seed(0)
    model = build_model(variant, **SIZE).to(device="meta", dtype=DTYPES[dtype])
    for path in _paths(model):
        if path != "own":
            model.blocks[0].attn.backend.bias_path = path
        with Elsewhere("meta") as probe:
            _run_everywhere(model, DTYPES[dtype], SIZE["image_size"])
        assert not probe.found, (path, sorted(probe.found))


def test_the_probe_sees_a_tensor_made_off_the_device():
    """The check itself: an `arange` without `device=` beside a meta tensor is found."""
    with Elsewhere("meta") as probe:
        torch.empty(3, device="meta")[torch.arange(2)]
    assert probe.found and all(device == "cpu" for _, device in probe.found)
