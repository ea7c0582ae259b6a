"""The numerical core's dtype promises, held in floating point.

- A float64 model computes in float64 end to end, for every backend and positional method, on its own
  grid and on another one with and without position interpolation: no floating tensor of any other dtype
  is made on the way (an int64 offset axis scaled by a Python float would make float32 — the ALiBi and
  Manhattan tables once could drop to ≈ 1e-7 that way).
- Mixed inputs follow one documented rule on every path: a backend computes in its queries' dtype (≥
  float32) and casts a bias of another dtype to it, as the softmax backend casts its mask.
- Initial values equal their float64 computation rounded once (RoPE-Mixed's frequencies).
- A table resized to its own length comes back unchanged.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rpevit.core.attention import BACKENDS
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.position import POSITIONS
from rpevit.core.position.gates import resize_table
from rpevit.core.position.rotary import rope_mixed_init
from rpevit.core.position.separable import AxialRPE
from rpevit.core.variants import parse_variant

SIZE = {"image_size": 16, "dim": 16, "depth": 1, "heads": 2, "mlp_dim": 32, "patch_size": 4}
BIASES = [name for name, method in POSITIONS.items() if method.mechanism == "bias"]


def variants() -> list[str]:
    """Every backend with each positional method it can consume, and with none."""
    names = []
    for backend in BACKENDS:
        for position in ("none", *POSITIONS):
            try:
                names.append(parse_variant(f"{backend}+{position}").name)
            except UserError:
                continue
    return names


class OtherDtypes(TorchDispatchMode):
    """Records every op that makes a floating tensor of a dtype other than float64."""

    def __init__(self):
        super().__init__()
        self.found: set[tuple[str, str]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.dtype != torch.float64:
                self.found.add((str(func), str(tensor.dtype)))
        return out


@pytest.mark.parametrize("side", [16, 24], ids=["trained_grid", "larger_grid"])
@pytest.mark.parametrize("interpolate", [False, True], ids=["extrapolate", "interpolate"])
@pytest.mark.parametrize("variant", variants())
def test_a_float64_model_computes_in_float64_end_to_end(variant, interpolate, side):
    torch.manual_seed(0)
    model = build_model(variant, **SIZE).double().eval()
    images = torch.randn(2, 1, side, side, dtype=torch.float64)
    with OtherDtypes() as probe, torch.no_grad():
        out = model(images, interpolate=interpolate)
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    assert not probe.found, sorted(probe.found)


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_bias_of_another_dtype_is_cast_to_the_queries_dtype_on_every_path(backend, bias):
    """float32 q, k, v with a float64 bias: float32 out on every path, equal to the bias rounded to float32
    first (it once raised on the linear FFT and dense paths and was cast on the others)."""
    torch.manual_seed(1)
    model = build_model(f"{backend}+{bias}", **SIZE)
    layer = model.blocks[0].attn
    grid = Grid(4, 4, cls=True)
    q, k, v = (torch.randn(2, 2, grid.num_tokens, 8) for _ in range(3))
    paths = (
        ["auto"]
        if backend == "softmax"
        else ["auto", "fft", "dense", *(["axis"] if hasattr(layer.bias, "factors") else [])]
    )
    wide = copy.deepcopy(layer.bias).double()
    for path in paths:
        if backend != "softmax":
            layer.backend.bias_path = path
        out = layer.backend(q, k, v, grid, bias=wide)
        same = layer.backend(q, k, v, grid, bias=copy.deepcopy(wide).float())
        assert out.dtype == torch.float32 and torch.equal(out, same), path


def test_rope_mixed_initial_frequencies_are_their_float64_values_rounded_once():
    """ω_k = θ^(−4k/dim) along a random angle φ per head, computed here in NumPy's float64 from the same
    draw of φ, then rounded once: a float32 intermediate flips the last bit of some of them."""
    dim, heads, theta = 64, 6, 10.0
    torch.manual_seed(7)
    freqs = rope_mixed_init(dim, heads, theta)
    torch.manual_seed(7)
    phi = torch.rand(heads, 1, dtype=torch.float64).numpy() * 2 * math.pi
    pairs = dim // 2
    first, second = (pairs + 1) // 2, pairs // 2
    magnitudes = np.array(
        [theta ** (-4.0 * k / dim) for k in range(first)] + [theta ** (-4.0 * k / dim) for k in range(second)]
    )
    direction = np.concatenate([np.repeat(phi, first, axis=1), np.repeat(phi + math.pi / 2, second, axis=1)], axis=1)
    expected = np.stack([magnitudes * np.sin(direction), magnitudes * np.cos(direction)]).astype(np.float32)
    assert freqs.dtype == torch.float32 and np.array_equal(freqs.numpy(), expected)


def test_a_table_resized_to_its_own_length_comes_back_unchanged():
    table = torch.randn(3, 9, dtype=torch.float64)
    assert torch.equal(AxialRPE._resize(table, 9), table)
    gate = torch.randn(2, 7, 4, dtype=torch.float64)
    assert torch.equal(resize_table(gate, 7), gate)
    # an interpolated grid taller than the trained one but as wide: the column table is resized to its own length
    model = build_model("favor+axial_rpe", **SIZE).double()
    bias = model.blocks[0].attn.bias
    grid = Grid(8, 4, cls=True, trained=(4, 4), interpolate=True)
    row, col = bias.factors(grid)
    assert row.shape[1] == 15 and torch.equal(col, bias.col_table)
