"""Tests for rpevit.core.position.absolute: the fixed 2D sin-cos APE (formula, consistency across
grids, CLS, no parameters, errors, cache) and the learned APE (exact on the trained grid,
bicubic-resized on others)."""

import math

import pytest
import torch
import torch.nn.functional as F

from rpevit.core import grid as grid_module
from rpevit.core.config import model_config
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.position import build_position

F64 = torch.float64


# ape_sincos ---------------------------------------------------------------------------------------


def test_sincos_matches_formula_by_hand():
    module = build_position("ape_sincos", model_config(), 8, 2)  # D = 8: ω = (1, 10000^(−1/2) = 0.01)
    grid = Grid(5, 7, cls=False)
    emb = module.embedding(grid, dtype=F64)[0]  # (35, 8)
    s, c = math.sin, math.cos
    for row, col in [(0, 0), (2, 3), (4, 6)]:
        expected = torch.tensor(
            [s(col), s(0.01 * col), c(col), c(0.01 * col), s(row), s(0.01 * row), c(row), c(0.01 * row)], dtype=F64
        )
        torch.testing.assert_close(emb[row * 7 + col], expected, rtol=0, atol=1e-15)


def test_sincos_frequencies_general_dim():
    dim = 32
    emb = build_position("ape_sincos", model_config(), dim, 4).embedding(Grid(3, 9, cls=False), dtype=F64)[0]
    quarter = dim // 4
    row, col = 2, 7
    for i in range(quarter):
        omega = 1 / 10000 ** (2 * i / (dim / 2))
        vector = emb[row * 9 + col]
        assert vector[i].item() == pytest.approx(math.sin(col * omega), abs=1e-14)
        assert vector[quarter + i].item() == pytest.approx(math.cos(col * omega), abs=1e-14)
        assert vector[2 * quarter + i].item() == pytest.approx(math.sin(row * omega), abs=1e-14)
        assert vector[3 * quarter + i].item() == pytest.approx(math.cos(row * omega), abs=1e-14)


def test_sincos_consistent_across_grids_cls_zero_and_added():
    module = build_position("ape_sincos", model_config(), 16, 2)
    small, large = Grid(7, 7), Grid(14, 14)
    e_small = module.embedding(small, dtype=F64)[0]
    e_large = module.embedding(large, dtype=F64)[0]
    assert e_small.shape == (50, 16) and e_large.shape == (197, 16)
    assert torch.equal(e_small[0], torch.zeros(16, dtype=F64)) and torch.equal(e_large[0], torch.zeros(16, dtype=F64))
    for row in range(7):
        for col in range(7):
            torch.testing.assert_close(e_small[1 + row * 7 + col], e_large[1 + row * 14 + col], rtol=0, atol=0)
    # all patch vectors distinct
    assert torch.cdist(e_large[1:], e_large[1:]).add(torch.eye(196, dtype=F64)).min() > 1e-3
    # forward adds them; CLS token unchanged
    tokens = torch.randn(3, 50, 16, dtype=F64)
    out = module(tokens, small)
    torch.testing.assert_close(out, tokens + e_small)
    assert torch.equal(out[:, 0], tokens[:, 0])
    # without CLS
    tokens = torch.randn(2, 49, 16, dtype=F64)
    torch.testing.assert_close(module(tokens, Grid(7, 7, cls=False)), tokens + e_small[1:])


def test_sincos_position_interpolation_and_cache():
    module = build_position("ape_sincos", model_config(), 8, 2)
    grid = Grid(14, 14, cls=False, trained=(7, 7), interpolate=True)
    last = module.embedding(grid, dtype=F64)[0, -1]  # position (13, 13) scaled to (6.5, 6.5)
    s, c = math.sin, math.cos
    expected = torch.tensor([s(6.5), s(0.065), c(6.5), c(0.065), s(6.5), s(0.065), c(6.5), c(0.065)], dtype=F64)
    torch.testing.assert_close(last, expected, rtol=0, atol=1e-15)
    # cache keyed on shape, scale and dtype: different grids never share an entry
    assert not torch.equal(module.embedding(Grid(14, 14, cls=False), dtype=F64)[0, -1], last)
    assert module.embedding(Grid(5, 7), dtype=torch.float32).dtype == torch.float32
    for h in range(1, 12):
        module.embedding(Grid(h, 3))
    assert len(grid_module._CACHE) <= grid_module.CACHE_SIZE  # the one bounded grid cache
    # a grid first seen under inference_mode still works in a later training forward
    grid = Grid(3, 4)
    with torch.inference_mode():
        module(torch.randn(1, 13, 8), grid)
    x = torch.randn(1, 13, 8, requires_grad=True)
    (module(x * 2, grid) ** 2).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_sincos_has_no_parameters_and_requires_dim_divisible_by_4():
    module = build_position("ape_sincos", model_config(), 16, 2)
    assert list(module.parameters()) == [] and module.state_dict() == {}
    with pytest.raises(UserError, match="divisible by 4"):
        build_position("ape_sincos", model_config(), 18, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(torch.randn(2, 50, 16).bfloat16(), Grid(7, 7))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


# ape (learned) --------------------------------------------------------------------------------------


def test_learned_ape_exact_on_trained_grid_and_bicubic_on_new_grids():
    torch.manual_seed(0)
    config = model_config(dim=16, heads=2, image_size=28, patch_size=4)  # trained grid 7×7
    module = build_position("ape", config, 16, 2).double()
    with torch.no_grad():
        module.cls.normal_()
    tokens = torch.randn(2, 50, 16, dtype=F64)
    out = module(tokens, Grid(7, 7))
    expected = tokens + torch.cat((module.cls, module.patches), dim=1)
    assert torch.equal(out, expected)  # the trained grid uses the table as it is
    # a new grid: the patch table resized bicubically (align_corners=False), CLS vector unchanged
    grid = Grid(5, 9)
    tokens = torch.randn(2, 46, 16, dtype=F64)
    out = module(tokens, grid)
    assert out.shape == (2, 46, 16)
    torch.testing.assert_close(out[:, 0], tokens[:, 0] + module.cls[:, 0])
    table = module.patches.detach().reshape(1, 7, 7, 16).permute(0, 3, 1, 2)
    bicubic = F.interpolate(table, size=(5, 9), mode="bicubic", align_corners=False)
    torch.testing.assert_close(
        out[:, 1:] - tokens[:, 1:], bicubic.permute(0, 2, 3, 1).reshape(1, 45, 16).expand(2, -1, -1), rtol=0, atol=1e-12
    )
    bilinear = F.interpolate(table, size=(5, 9), mode="bilinear", align_corners=False)
    assert ((out[:, 1:] - tokens[:, 1:]) - bilinear.permute(0, 2, 3, 1).reshape(1, 45, 16)).abs().max() > 1e-3
    # bicubic weights sum to one: a constant table stays constant on any grid
    with torch.no_grad():
        module.patches.fill_(0.25)
    resized = module.patch_embedding(Grid(10, 12))
    assert resized.shape == (1, 120, 16)
    torch.testing.assert_close(resized, torch.full_like(resized, 0.25), rtol=0, atol=1e-12)


def test_learned_ape_init_pooling_dtype_and_weight_decay():
    """N(0, 0.02²) patch vectors (ViT's init), a CLS vector only with CLS pooling (zeros), both exempt from
    weight decay; the sum keeps the tokens' dtype."""
    torch.manual_seed(1)
    module = build_position("ape", model_config(dim=64, heads=2, image_size=28, patch_size=4), 64, 2)
    assert module.patches.shape == (1, 49, 64) and abs(float(module.patches.detach().std()) - 0.02) < 0.002
    assert torch.equal(module.cls, torch.zeros(1, 1, 64))
    assert module.patches.no_weight_decay is True and module.cls.no_weight_decay is True
    pooled = build_position("ape", model_config(dim=64, heads=2, image_size=28, patch_size=4, pool="mean"), 64, 2)
    assert pooled.cls is None
    assert pooled(torch.zeros(1, 49, 64), Grid(7, 7, cls=False)).shape == (1, 49, 64)
    out = module(torch.zeros(2, 50, 64, dtype=torch.bfloat16), Grid(7, 7))
    assert out.dtype == torch.bfloat16


def test_sincos_shape_message():
    module = build_position("ape_sincos", model_config(), 16, 2)
    with pytest.raises(ValueError, match=r"^SinCosAbsolute expects \(B, 50, 16\) for a 7×7 grid, got \(2, 49, 16\)$"):
        module(torch.zeros(2, 49, 16), Grid(7, 7))
