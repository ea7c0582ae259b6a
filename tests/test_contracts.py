"""Contracts of the numerical core that the mutation review found no test holding (reports/bench/mutation.md):
each test states a documented promise — a dtype, a device, a chunk budget, a path choice, a shape — that a
surviving mutant broke on some valid input. Meta-device tensors stand in for a GPU on this CPU-only machine."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rpevit.core.attention import kernel_sums as ks
from rpevit.core.attention.separable import SCAN_MIN_SIDE, choose_path, decay_logits
from rpevit.core.attention.toeplitz import fft_is_cheaper
from rpevit.core.config import model_config
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.position import build_position
from rpevit.core.position.relative import dense_bias, offset_axes, piecewise_index
from rpevit.core.position.rotary import pair_rotation_matrices

META = torch.device("meta")


def test_the_chunk_budget_off_the_cpu_is_the_accelerator_one():
    assert ks.chunk_budget(META, 1) == ks.ACCELERATOR_CHUNK_BYTES
    assert ks.chunk_budget(torch.device("cpu"), 12345) == 12345


def test_convert_keeps_shared_features_shared_through_a_cast():
    """ψ ≡ φ stays the same tensor objects after a dtype cast, so one gradient sum reaches the features."""
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.bfloat16) for _ in range(3))
    out = ks.convert(q, k, q, k, v, torch.float32)
    assert out[0] is out[2] and out[1] is out[3] and out[0].dtype == torch.float32


@pytest.mark.parametrize(
    "variant, path", [("relu+krpe", "fft"), ("relu+manhattan", "axis"), ("relu+manhattan", "scan")]
)
def test_kernel_sums_share_psi_and_phi_and_chunk_by_the_features_bytes(monkeypatch, variant, path):
    """ψ ≡ φ reaches the operator as one set of features (one gradient sum over d + 1 channels), and the
    forward and backward chunk a feature as its d + 1 channels of the operator's bytes (the memory budget)."""
    calls, chunked = [], []
    apply, chunks = ks._KernelSums.apply, ks._chunks
    monkeypatch.setattr(ks._KernelSums, "apply", lambda *args: calls.append(args) or apply(*args))
    monkeypatch.setattr(ks, "_chunks", lambda *args: chunked.append(args) or chunks(*args))
    model = build_model(variant, image_size=12, patch_size=1, dim=8, heads=2, depth=1, mlp_dim=8)
    model.blocks[0].attn.backend.bias_path = path
    model(torch.randn(2, 1, 12, 12)).sum().backward()
    assert calls and all(args[5] is None and args[6] is None for args in calls)  # q_den, k_den: shared
    op, d = calls[0][0], calls[0][7].shape[-1]
    expected = (d + 1) * op.bytes_per_channel(op.height, op.width, torch.float32)
    assert len(chunked) == 2 * len(calls) and {per_feature for _, _, per_feature, _ in chunked} == {expected}


def test_the_auto_path_rules_at_their_edges():
    assert choose_path(Grid(SCAN_MIN_SIDE, 1), decay=True) == "scan"  # a Grid is metadata: a cheap call
    assert not fft_is_cheaper(Grid(1, 128, cls=False), 16, 4)  # an exact tie keeps the dense path


def test_decay_logits_follow_the_rates_device_and_dtype():
    rows, cols = decay_logits(torch.ones(2, device=META, dtype=torch.bfloat16), Grid(3, 4))
    assert rows.device == cols.device == META and rows.dtype == cols.dtype == torch.bfloat16
    assert rows.shape == (2, 5) and cols.shape == (2, 7)


def test_softmax_weights_of_bf16_queries_are_float32_softmax_rounded_once():
    attention = build_model("softmax+none", image_size=56, patch_size=4, dim=16, heads=2, depth=1).blocks[0].attn
    grid = Grid(14, 14)
    torch.manual_seed(0)  # softmax in bf16 itself differs by one bf16 step in 7 of these 310,472 weights
    q, k = (torch.randn(2, 4, grid.num_tokens, 8).bfloat16() for _ in range(2))
    found = attention.backend.weights(q, k, grid)
    logits = q @ k.transpose(-2, -1) / math.sqrt(8)  # bf16, as the backend forms them
    assert found.dtype == torch.bfloat16 and torch.equal(found, torch.softmax(logits.float(), -1).bfloat16())


def test_gate_scales_come_on_the_device_and_in_the_dtype_asked():
    """The iRPE gate moves its tables to the device and dtype asked; the STRING gate computes in the dtype asked."""
    config = model_config(dim=16, heads=2)
    gate = build_position("gate_irpe", config, 8, 2)
    assert all(s.device == META and s.dtype == torch.float32 for s in gate.scales(Grid(7, 7), device=META))
    for name in ("gate_irpe", "gate_string"):
        scales = build_position(name, config, 8, 2).scales(Grid(7, 7), dtype=torch.bfloat16)
        assert all(s.dtype == torch.bfloat16 for s in scales), name


def test_dense_bias_keeps_its_tables_dtype_whatever_the_cls_terms():
    grid = Grid(3, 3)
    table = torch.randn(2, 5, 5)
    for dtype in (torch.bfloat16, torch.float32):
        bias = dense_bias(table.to(dtype), torch.randn(2, 3, dtype=torch.float64), grid)
        assert bias.dtype == dtype and bias.shape == (2, grid.num_tokens, grid.num_tokens)


def test_offset_axes_are_integer_offsets_unless_asked_to_scale():
    grid = Grid(14, 14, trained=(7, 7), interpolate=True)
    rows, cols = offset_axes(grid)
    assert torch.equal(rows, torch.arange(-13, 14, dtype=torch.float64)) and torch.equal(rows, cols)
    assert offset_axes(Grid(3, 3), dtype=torch.long)[0].dtype == torch.long


def test_piecewise_buckets_round_in_float64_whatever_the_offsets_dtype():
    """A .5 boundary of the log branch: float32 and bf16 offsets bucket as their exact float64 values do."""
    for x in (torch.tensor([3.6638689]), torch.tensor([3.671875], dtype=torch.bfloat16)):
        assert torch.equal(piecewise_index(x, 1.9, 3.8, 15.2), piecewise_index(x.double(), 1.9, 3.8, 15.2))


def test_alibi_slopes_are_float32_whatever_the_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        alibi = build_position("alibi2d", model_config(dim=16, heads=2), 8, 2)
    finally:
        torch.set_default_dtype(previous)
    assert alibi.slopes.dtype == torch.float32


def test_pair_rotations_follow_their_angles_dtype_and_device():
    assert pair_rotation_matrices(torch.zeros(3, 2, dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert pair_rotation_matrices(torch.zeros(3, 2, device=META)).device == META


def test_circulant_string_keeps_an_odd_dimension():
    module = build_position("string_circulant", model_config(dim=10, heads=2), 5, 2)
    for grid in (Grid(3, 3), Grid(3, 3, cls=False)):
        x = torch.randn(2, 2, grid.num_tokens, 5)
        assert module(x, grid).shape == x.shape


@pytest.mark.parametrize("bias", ["krpe", "manhattan"])
def test_linear_weights_cast_a_bias_of_another_dtype_to_the_queries_dtype(bias):
    """As the forward does (tests/test_dtypes.py): float32 queries with a float64 bias give float32 weights,
    equal to those of the bias rounded to float32 first."""
    layer = build_model(f"relu+{bias}", image_size=16, patch_size=4, dim=16, heads=2, depth=1).blocks[0].attn
    grid = Grid(4, 4, cls=True)
    q, k = (torch.randn(2, 2, grid.num_tokens, 8) for _ in range(2))
    wide = copy.deepcopy(layer.bias).double()
    found = layer.backend.weights(q, k, grid, bias=wide)
    assert found.dtype == torch.float32
    assert torch.equal(found, layer.backend.weights(q, k, grid, bias=copy.deepcopy(wide).float()))
