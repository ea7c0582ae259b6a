"""Every backend × positional method: fast path == dense matrix, the relative property, training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rpevit.core.attention import BACKENDS
from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.checks import dense_reference_error, relative_violation
from rpevit.core.config import model_config
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.position import POSITIONS
from rpevit.core.variants import list_variants, parse_variant

from helpers import trained_like

ROTARY = [name for name, method in POSITIONS.items() if method.mechanism == "rotary"]
BIAS = [name for name, method in POSITIONS.items() if method.mechanism == "bias"]
GATES = [name for name, method in POSITIONS.items() if method.mechanism == "gate"]
SITES = [("softmax", "pre"), ("favor", "pre"), ("favor", "post"), ("relu", "pre"), ("relu", "post")]
GRID = Grid(5, 7, cls=True)
TINY = dict(dim=32, depth=1, heads=4, mlp_dim=32, image_size=28, patch_size=4)


def make_layer(
    backend: str, site: str = "auto", *methods: str | None, dtype=torch.float64, seed=0, favor=None, relu=None
):
    """An attention layer with the given positional methods and random, non-default parameters;
    `favor` / `relu` override those backends' options."""
    torch.manual_seed(seed)
    sites = {} if site == "auto" else {"rotation_site": site}
    config = model_config(
        dim=32,
        heads=4,
        image_size=28,
        patch_size=4,
        favor={**sites, "bias_path": "fft", **(favor or {})},
        relu={**sites, "feature_map": "learned", "bias_path": "fft", **(relu or {})},
    )
    layer = MultiHeadAttention.from_config(config, backend, **{POSITIONS[m].mechanism: m for m in methods if m})
    return trained_like(layer, seed=None, scale=0.3).to(dtype)  # noise from the global RNG seeded above


COMBOS = (
    [(None,)]
    + [(m,) for m in ROTARY + BIAS + GATES]
    + [("rope_axial", "krpe"), ("string_circulant", "alibi2d"), ("rope_mixed", "irpe", "gate_irpe")]
)


@pytest.mark.parametrize("methods", COMBOS, ids=lambda m: "+".join(x or "none" for x in m))
@pytest.mark.parametrize("backend,site", SITES)
def test_fast_path_equals_attention_matrix_times_v(backend, site, methods):
    layer = make_layer(backend, site, *methods, dtype=torch.float32)
    assert dense_reference_error(layer, torch.randn(2, GRID.num_tokens, 32), GRID) <= 1e-5


RELATIVE = [(m,) for m in ROTARY + BIAS] + [("rope_axial", "krpe"), ("string_cayley", "alibi2d")]


@pytest.mark.parametrize("methods", RELATIVE, ids=lambda m: "+".join(m))
@pytest.mark.parametrize("backend,site", [("softmax", "pre"), ("favor", "post"), ("relu", "post")])
def test_relative_property_holds_for_relative_methods(backend, site, methods):
    layer = make_layer(backend, site, *methods)
    x = torch.randn(1, 1, 32, dtype=torch.float64).expand(1, GRID.num_tokens, 32)  # identical content
    with torch.no_grad():
        weights = layer.attention_matrix(x, GRID)[0]
        assert relative_violation(weights, GRID) < 1e-9
        # the check can fail: absolute information (what APE adds) breaks it
        absolute = x + 0.5 * torch.randn(1, GRID.num_tokens, 32, dtype=torch.float64)
        assert relative_violation(layer.attention_matrix(absolute, GRID)[0], GRID) > 1e-2


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("backend,site", [("softmax", "pre"), ("favor", "post"), ("relu", "post")])
def test_gates_fail_the_relative_property(backend, site, gate):
    layer = make_layer(backend, site, gate)
    x = torch.randn(1, 1, 32, dtype=torch.float64).expand(1, GRID.num_tokens, 32)
    with torch.no_grad():
        assert relative_violation(layer.attention_matrix(x, GRID)[0], GRID) > 1e-2


def test_auto_bias_path_is_dense_on_small_grids_and_fft_on_large_ones():
    layer = make_layer("favor", "auto", "krpe", favor={"bias_path": "auto"})
    backend = layer.backend
    assert not backend._use_fft(Grid(7, 7), 8) and backend._use_fft(Grid(64, 64), 8)
    x = torch.randn(1, GRID.num_tokens, 32, dtype=torch.float64)
    forced = make_layer("favor", "auto", "krpe", favor={"bias_path": "fft"})
    with torch.no_grad():
        torch.testing.assert_close(layer(x, GRID), forced(x, GRID), rtol=0, atol=1e-10)  # same attention


def test_favor_with_krpe_converges_to_softmax_with_the_same_bias():
    """E[φ(q)ᵀφ(k)] = exp(qᵀk/√d), so as m grows favor+krpe → softmax(s + B) (Luo et al. 2021)."""
    softmax = make_layer("softmax", "auto", "krpe")
    x = 0.2 * torch.randn(1, GRID.num_tokens, 32, dtype=torch.float64)
    with torch.no_grad():
        exact = softmax.attention_matrix(x, GRID)
        errors = []
        for m in (16, 256, 4096):
            favor = make_layer("favor", "auto", "krpe", favor={"num_features": m})
            favor.load_state_dict(softmax.state_dict(), strict=False)  # same projections and table
            errors.append(float((favor.attention_matrix(x, GRID) - exact).abs().mean() / exact.mean()))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.05


@pytest.mark.parametrize("backend", ["favor", "relu"])
def test_pre_map_rotation_is_not_exactly_relative_in_linear_attention(backend):
    layer = make_layer(backend, "pre", "rope_axial")
    x = torch.randn(1, 1, 32, dtype=torch.float64).expand(1, GRID.num_tokens, 32)
    with torch.no_grad():
        assert relative_violation(layer.attention_matrix(x, GRID)[0], GRID) > 1e-3


def single_method_variants() -> list[str]:
    """Each backend bare and with each positional method alone, plus a few compositions."""
    names = [f"{b}+{p}" for b in BACKENDS for p in ["none", *POSITIONS]]
    return names + ["softmax+rope_axial+ape", "relu+string_circulant+ape", "favor+rope_mixed+ape"]


@pytest.mark.parametrize("variant", single_method_variants())
def test_variant_trains_a_few_steps_and_runs_at_other_resolutions(variant, tiny_dataset):
    assert parse_variant(variant).name in list_variants()
    torch.manual_seed(0)
    model = build_model(variant, **TINY)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = tiny_dataset.train.images[:16].float() / 255
    y = tiny_dataset.train.labels[:16]
    for _ in range(3):
        loss = F.cross_entropy(model(x), y)
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for size in (16, 28, 56):  # 0.5× (rounded to the patch), 1×, 2× the training resolution
            for interpolate in (False, True):
                logits = model(F.interpolate(x[:2], size=(size, size)), interpolate=interpolate)
                assert logits.shape == (2, 10) and torch.isfinite(logits).all()


@pytest.mark.parametrize("backend", ["favor", "relu"])
@pytest.mark.parametrize("rotary", [None] + ROTARY)
def test_linear_backends_finite_under_bf16_with_large_norms(backend, rotary):
    layer = make_layer(backend, "auto", rotary, "krpe", dtype=torch.float32)
    x = 30 * torch.randn(2, GRID.num_tokens, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x, GRID)
    assert torch.isfinite(out).all()


def test_every_listed_variant_builds_and_runs_at_half_native_and_double_resolution():
    images = torch.randn(1, 1, 28, 28)
    sizes = (16, 28, 56)  # 0.5× (rounded to the patch size 4), 1×, 2×
    for variant in list_variants():
        torch.manual_seed(0)
        model = build_model(variant, dim=16, depth=1, heads=2, mlp_dim=16).eval()
        with torch.no_grad():
            for size in sizes:
                logits = model(F.interpolate(images, size=(size, size)), interpolate=size > 28)
                assert logits.shape == (1, 10) and torch.isfinite(logits).all(), (variant, size)


@pytest.mark.parametrize(
    "method,path,allowed",
    [("krpe", "axis", False), ("axial_rpe", "scan", False), ("manhattan", "scan", True), ("axial_rpe", "axis", True)],
)
def test_bias_path_must_fit_the_bias(method, path, allowed):
    """axis needs a separable bias and scan a geometric decay: a mismatch is one clear error at build time."""
    from rpevit.core.attention.linear import bias_paths
    from rpevit.core.errors import UserError

    if allowed:
        assert path in bias_paths(make_layer("favor", "auto", method, favor={"bias_path": path}).bias)
    else:
        with pytest.raises(UserError, match="bias_path"):
            make_layer("favor", "auto", method, favor={"bias_path": path})


@pytest.mark.parametrize("method", BIAS)
@pytest.mark.parametrize("backend,site", [("favor", "pre"), ("favor", "post"), ("relu", "pre"), ("relu", "post")])
def test_every_bias_path_equals_the_dense_path_in_float64(backend, site, method):
    """Layer level, float64: each exact bias path (fft; axis and scan where the bias allows them) gives the
    output of the dense N×N path to 1e-10 relative — round-off only, no looser float32 tolerance to hide in."""
    from rpevit.core.attention.linear import bias_paths

    rotary = "rope_axial" if site == "post" else None  # a post-map site needs a rotation to act on

    def build(path):
        return make_layer(backend, site, rotary, method, **{backend: {"bias_path": path}})

    dense = build("dense")
    x = torch.randn(2, GRID.num_tokens, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    paths = [p for p in bias_paths(dense.bias) if p != "dense"]
    assert ("axis" in paths) == (method in ("manhattan", "axial_rpe")) and ("scan" in paths) == (method == "manhattan")
    with torch.no_grad():
        expected = dense(x, GRID)
        for path in paths:
            layer = build(path)
            layer.load_state_dict(dense.state_dict())
            error = (layer(x, GRID) - expected).abs().max() / expected.abs().max()
            assert error <= 1e-10, (path, float(error))


@pytest.mark.parametrize("method", [None, "krpe", "manhattan"])
@pytest.mark.parametrize("backend", ["favor", "relu"])
def test_linear_layers_under_cpu_bf16_autocast_stay_near_float32(backend, method):
    """CPU bf16 autocast (bf16 projections, features and bias in float32): the output is within 0.05 of the
    float32 one, max abs error relative to the output's max abs (measured ≤ 0.01; bf16 keeps 8 significant bits)."""
    layer = make_layer(backend, "auto", method, dtype=torch.float32)
    x = torch.randn(2, GRID.num_tokens, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = layer(x, GRID)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x, GRID)
    assert torch.isfinite(out).all()
    assert float((out.float() - expected).abs().max() / expected.abs().max()) < 0.05
