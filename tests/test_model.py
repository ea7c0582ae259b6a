"""ViT assembly, variant names, grids and the softmax backend against its dense matrix."""

from __future__ import annotations

import pytest
import torch

from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.config import model_config
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.variants import list_variants, parse_variant


def test_variant_names_are_canonical():
    assert parse_variant("softmax").name == "softmax+none"
    assert parse_variant("softmax+none").name == "softmax+none"
    assert parse_variant("softmax+ape").positions == ("ape",)
    assert "softmax+ape" in list_variants() and "softmax+none" in list_variants()
    assert all(parse_variant(v).name == v for v in list_variants())


def test_variant_errors_name_the_part():
    with pytest.raises(UserError, match="unknown attention backend 'vanilla'"):
        parse_variant("vanilla+ape")
    with pytest.raises(UserError, match="unknown positional method 'sincos'"):
        parse_variant("softmax+sincos")
    with pytest.raises(UserError, match="both absolute methods"):
        parse_variant("softmax+ape+ape")


def test_grid_geometry():
    grid = Grid(5, 7, cls=True)
    assert (grid.num_patches, grid.num_tokens, grid.prefix) == (35, 36, 1)
    coords = grid.coords()
    assert coords[8].tolist() == [1.0, 1.0] and coords[6].tolist() == [0.0, 6.0]  # row-major
    offsets = grid.offsets()
    assert offsets[0, 8].tolist() == [1, 1] and offsets[8, 0].tolist() == [-1, -1]
    scaled = Grid(14, 14, trained=(7, 7), interpolate=True).coords()
    assert scaled[-1].tolist() == [6.5, 6.5]


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_forward_shapes_and_other_resolutions(pool):
    torch.manual_seed(0)
    model = build_model("softmax+ape", dim=32, depth=2, heads=4, mlp_dim=64, pool=pool)
    for size in (28, 16, 56):
        assert model(torch.randn(3, 1, size, size)).shape == (3, 10)
    maps = model.attention_maps(torch.randn(2, 1, 28, 28))
    tokens = 49 + (pool == "cls")
    assert len(maps) == 2 and maps[0].shape == (2, 4, tokens, tokens)
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, 4, tokens), atol=1e-5)


def test_ape_is_resized_bicubically_and_exact_on_trained_grid():
    torch.manual_seed(0)
    model = build_model("softmax+ape", dim=32, depth=1, heads=4)
    ape = model.absolute
    assert torch.equal(ape.patch_embedding(Grid(7, 7)), ape.patches)
    assert ape.patch_embedding(Grid(14, 10)).shape == (1, 140, 32)


def test_softmax_fast_path_equals_dense_matrix():
    torch.manual_seed(0)
    config = model_config(dim=32, heads=4)
    layer = MultiHeadAttention.from_config(config, "softmax").double()
    grid = Grid(5, 7, cls=True)
    x = torch.randn(2, grid.num_tokens, 32, dtype=torch.float64)
    q, k, v = layer._heads(x, grid)
    dense = layer.backend.weights(q, k, grid) @ v
    assert torch.allclose(layer.backend(q, k, v, grid), dense, atol=1e-10)


def test_image_not_divisible_by_patch_is_a_user_error():
    model = build_model("softmax+ape", dim=32, depth=1, heads=4)
    with pytest.raises(UserError, match="not divisible by patch_size 4"):
        model(torch.randn(1, 1, 30, 30))


def test_weight_init_is_deterministic():
    torch.manual_seed(3)
    a = build_model("softmax+ape", dim=32, depth=1, heads=4)
    torch.manual_seed(3)
    b = build_model("softmax+ape", dim=32, depth=1, heads=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_parameter_free_position_tensors_are_built_once_per_grid_not_per_layer(monkeypatch):
    """ALiBi tables, iRPE buckets and RoPE-Axial angles come from the one grid cache: a 4-layer
    model builds each once per grid, and a second forward builds nothing."""
    from rpevit.core import grid as grid_module

    builds = []
    real = grid_module.grid_cached

    def counting(key, build):
        return real(key, lambda: builds.append(key[0]) or build())

    for module in ("rpevit.core.position.relative", "rpevit.core.position.rotary"):
        monkeypatch.setattr(f"{module}.grid_cached", counting)
    grid_module._CACHE.clear()
    for variant in ("softmax+alibi2d", "favor+rope_axial", "relu+irpe"):
        model = build_model(variant, dim=32, depth=4, heads=4, mlp_dim=32)
        x = torch.randn(2, 1, 28, 28)
        builds.clear()
        model(x)
        assert len(builds) == 1, (variant, builds)
        model(x)
        assert len(builds) == 1, (variant, builds)


def test_stochastic_depth_drops_whole_samples_keeps_the_mean_and_is_off_in_eval():
    from rpevit.core.model import DropPath

    layer = DropPath(0.25).train()
    branch = torch.ones(20000, 3, 2)
    out = layer(branch)
    per_sample = out.flatten(1)
    assert bool(((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1)).all())  # whole samples
    assert abs(float((per_sample[:, 0] == 0).float().mean()) - 0.25) < 0.02
    assert abs(float(out.mean()) - 1.0) < 0.03  # unbiased: E[out] = branch
    assert torch.equal(layer.eval()(branch), branch)


def test_stochastic_depth_rate_rises_linearly_over_blocks_and_zero_changes_nothing():
    model = build_model("softmax+ape", dim=32, depth=5, heads=2, mlp_dim=64, drop_path=0.2)
    assert [block.drop_path.rate for block in model.blocks] == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    torch.manual_seed(0)
    plain = build_model("softmax+ape", dim=32, depth=2, heads=2, mlp_dim=64).train()
    torch.manual_seed(0)
    zero = build_model("softmax+ape", dim=32, depth=2, heads=2, mlp_dim=64, drop_path=0.0).train()
    images = torch.randn(4, 1, 28, 28)
    assert torch.equal(plain(images), zero(images))
