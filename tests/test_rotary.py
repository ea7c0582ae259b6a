"""Tests for rpevit.core.position.rotary: orthogonality, the relative (group) property, the FFT path of
Circulant-STRING against a dense matrix exponential, the relative-property test of docs/methods.md §5
in softmax attention (and that it fails with absolute embeddings), grids, gradients, autocast."""

import math

import pytest
import scipy.linalg
import torch

from rpevit.core import grid as grid_module
from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.checks import relative_violation
from rpevit.core.config import model_config
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.position import POSITIONS, build_position
from rpevit.core.position.rotary import CIRCULANT_STEP_STD

from helpers import log_ratio_spread, trained_like

METHODS = ["rope_axial", "rope_mixed", "string_circulant", "string_cayley"]
LEARNABLE = ["rope_mixed", "string_circulant", "string_cayley"]
DIM, HEADS = 16, 2
F64 = torch.float64
NOISE = 0.2  # trained-looking parameters: every parameter gets + NOISE·N(0, 1), never the special init


def make(name, dim=DIM, heads=HEADS, seed=0, dtype=F64):
    """A rotary module with random, non-default parameters, in `dtype`."""
    torch.manual_seed(seed)
    module = build_position(name, model_config(dim=dim * heads, heads=heads), dim, heads)
    return trained_like(module.to(dtype), seed=seed + 1, scale=NOISE)


def tokens(grid, dim=DIM, heads=HEADS, batch=3, seed=0, dtype=F64):
    return torch.randn(batch, heads, grid.num_tokens, dim, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def apply_dense(rotations, x, grid):
    """Patches of x rotated by dense matrices rotations (h or 1, N, d, d): (B, h, N, d)."""
    return torch.einsum("hnij,bhnj->bhni", rotations, x[:, :, grid.prefix :])


# 1. shape, norms, prefix ------------------------------------------------------------------------


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("cls", [True, False])
def test_norms_preserved_and_prefix_untouched(name, cls):
    grid = Grid(5, 7, cls=cls)
    module, x = make(name), tokens(grid)
    out = module(x, grid)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=1e-12)
    if cls:
        assert torch.equal(out[:, :, 0], x[:, :, 0])
    assert (out[:, :, grid.prefix :] - x[:, :, grid.prefix :]).abs().max() > 1e-2  # it does rotate


# 2. dense rotations: orthogonal, relative, equal to the fast path -------------------------------


@pytest.mark.parametrize("name", METHODS)
def test_rotation_matrices_orthogonal_relative_and_match_forward(name):
    grid = Grid(5, 7)
    module = make(name)
    coords = grid.coords(dtype=F64)  # (N, 2)
    rotations = module.rotation_matrices(coords)  # (h, N, d, d)
    n = grid.num_patches
    assert rotations.shape[1:] == (n, DIM, DIM) and rotations.dtype == F64
    eye = torch.eye(DIM, dtype=F64)
    torch.testing.assert_close(rotations.transpose(-2, -1) @ rotations, eye.expand_as(rotations), rtol=0, atol=1e-10)
    # R(r)ᵀR(r′) = R(0)ᵀR(r′ − r) for every pair; R(0) = I except for Cayley-STRING, where R(0) = P
    origin = module.rotation_matrices(torch.zeros(1, 2, dtype=F64))  # (h, 1, d, d)
    if name != "string_cayley":
        torch.testing.assert_close(origin, eye.expand_as(origin), rtol=0, atol=1e-12)
    else:
        assert (origin - eye).abs().max() > 1e-2  # the trained basis change P is not the identity
    offsets = (coords[None, :, :] - coords[:, None, :]).reshape(-1, 2)  # r′ − r: (N·N, 2)
    relative = module.rotation_matrices(offsets).unflatten(1, (n, n))  # (h, N, N, d, d)
    pairwise = torch.einsum("hnji,hmjk->hnmik", rotations, rotations)  # R(r_n)ᵀR(r_m)
    expected = origin.transpose(-2, -1)[:, :, None] @ relative
    torch.testing.assert_close(pairwise, expected, rtol=0, atol=1e-10)
    # the fast path equals the dense matrices
    x = tokens(grid)
    torch.testing.assert_close(module(x, grid)[:, :, 1:], apply_dense(rotations, x, grid), rtol=0, atol=1e-12)


def test_rope_axial_layout():
    """Interleaved pairs; first d/4 pairs turn with col at ω_k = θ^(−4k/d), the rest with row."""
    module = build_position("rope_axial", model_config(), 8, 1).double()
    r = module.rotation_matrices(torch.tensor([[2.0, 3.0]], dtype=F64))[0, 0]  # row 2, col 3
    theta = model_config().options_for("rope_axial").theta
    angles = [3.0, 3.0 * theta**-0.5, 2.0, 2.0 * theta**-0.5]
    for c, a in enumerate(angles):
        block = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=F64)
        torch.testing.assert_close(r[2 * c : 2 * c + 2, 2 * c : 2 * c + 2], block, rtol=0, atol=1e-14)
    assert (r.abs() > 1e-12).sum() == 16  # block-diagonal


def test_rope_mixed_init_matches_rope_vit_layout():
    torch.manual_seed(0)
    module = build_position("rope_mixed", model_config(rope_mixed={"theta": 10.0}), 16, 3)
    f_row, f_col = module.freqs.detach().double()  # each (h, 8)
    magnitude = torch.hypot(f_row, f_col)
    expected = 10.0 ** (-4.0 * torch.arange(4, dtype=F64) / 16)
    torch.testing.assert_close(magnitude, torch.cat((expected, expected)).expand(3, 8), rtol=1e-6, atol=0)
    direction = torch.atan2(f_row, f_col)  # φ for pairs 0..3, φ + π/2 for pairs 4..7
    turn = torch.remainder(direction[:, 4:] - direction[:, :4], 2 * math.pi)
    torch.testing.assert_close(turn, torch.full_like(turn, math.pi / 2), rtol=0, atol=1e-6)
    assert direction[:, 0].unique().numel() == 3  # a random angle per head
    assert module.freqs.no_weight_decay
    odd_pairs = build_position("rope_mixed", model_config(), 6, 2)  # dim % 4 == 2 still works
    assert odd_pairs.freqs.shape == (2, 2, 3)


# 3. Circulant-STRING against the dense matrix exponential ---------------------------------------


def test_circulant_fft_path_equals_matrix_exponential():
    grid = Grid(5, 7)
    module, x = make("string_circulant"), tokens(grid)
    columns = module.columns.detach()  # (2, h, d): c_row, c_col
    out = module(x, grid)
    coords = grid.coords(dtype=F64)
    for h in range(HEADS):
        generators = []
        for k in range(2):
            c = scipy.linalg.circulant(columns[k, h].numpy())  # C[j, l] = c[(j − l) mod d]
            generators.append(torch.from_numpy(c - c.T))
        for n in (0, 6, 17, 34):  # a few positions, including the far corner
            row, col = coords[n].tolist()
            generator = row * generators[0] + col * generators[1]
            rotation = torch.from_numpy(scipy.linalg.expm(generator.numpy()))
            torch.testing.assert_close(out[:, h, 1 + n], x[:, h, 1 + n] @ rotation.T, rtol=0, atol=1e-10)
            torch.testing.assert_close(torch.linalg.matrix_exp(generator), rotation, rtol=0, atol=1e-10)


def test_circulant_full_complex_fft_is_real_and_only_antisymmetric_part_matters():
    grid = Grid(5, 7)
    module, x = make("string_circulant"), tokens(grid)
    out = module(x, grid)
    # the full complex path IFFT(exp(Σ r_k μ_k) ⊙ FFT(z)), μ_k = 2i·Im FFT(c_k): imaginary part ~ 0
    mu = 2j * torch.fft.fft(module.columns.detach(), dim=-1).imag  # (2, h, d)
    exponent = torch.einsum("nk,khm->hnm", grid.coords(dtype=F64).to(mu.dtype), mu)  # (h, N, d)
    full = torch.fft.ifft(torch.exp(exponent) * torch.fft.fft(x[:, :, 1:], dim=-1), dim=-1)
    assert full.imag.abs().max() < 1e-12
    torch.testing.assert_close(full.real, out[:, :, 1:], rtol=0, atol=1e-12)
    # adding a symmetric circulant (first column s_j = s_{−j}) to every C_k changes nothing
    s = torch.randn(2, HEADS, DIM, dtype=F64)
    symmetric = s + s.roll(-1, -1).flip(-1)  # s_j + s_{(−j) mod d}
    torch.testing.assert_close(symmetric, symmetric.roll(-1, -1).flip(-1))
    with torch.no_grad():
        module.columns.add_(symmetric)
    torch.testing.assert_close(module(x, grid), out, rtol=0, atol=1e-12)


def test_circulant_init_scale_rotates_without_aliasing():
    torch.manual_seed(0)
    module = build_position("string_circulant", model_config(), 64, 8)
    steps = module.phase_steps(F64)[..., 1:-1]  # per-patch phase steps, DC/Nyquist (always 0) dropped
    assert abs(steps.std().item() - CIRCULANT_STEP_STD) < 0.1 * CIRCULANT_STEP_STD
    assert steps.abs().max() < math.pi  # no frequency aliases between neighbouring patches
    # E[zᵀR(r)z]/‖z‖² = tr R(r)/d: one patch step turns visibly, a 7×7 grid's corner-to-corner offset
    # decorrelates (per frequency, step phases ~ N(0, s²) give E cos = exp(−s²/2) ≈ 0.88 for one step)
    one_step = module.rotation_matrices(torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=F64))
    corner = module.rotation_matrices(torch.tensor([[6.0, 6.0]], dtype=F64))
    trace = lambda r: r.diagonal(dim1=-2, dim2=-1).mean(-1)  # noqa: E731
    assert 0.5 < trace(one_step).mean() < 0.97
    assert trace(corner).abs().mean() < 0.3


# 4. the relative-property test of docs/methods.md §5 in softmax attention -----------------------


def softmax_layer(name, seed=0):
    """A float64 softmax attention layer with the rotary method, trained-looking parameters."""
    torch.manual_seed(seed)
    config = model_config(dim=DIM * HEADS, heads=HEADS)
    layer = MultiHeadAttention.from_config(config, "softmax", rotary=name).double()
    trained_like(layer.rotary, seed=seed + 1, scale=NOISE)
    return layer


@pytest.mark.parametrize("name", METHODS)
@torch.no_grad()
def test_relative_property_in_softmax_attention(name):
    grid = Grid(5, 7, cls=True)
    layer = softmax_layer(name)
    content = 3 * torch.randn(1, 1, DIM * HEADS, dtype=F64, generator=torch.Generator().manual_seed(2))
    same = content.expand(1, grid.num_tokens, -1)  # every token identical
    weights = layer.attention_matrix(same, grid)  # (1, h, T, T)
    # rpevit.core.checks.relative_violation is ~1e-15 here. It divides by the largest ratio and these
    # ratios span up to ~1e6 (rope_mixed), so the log form (helpers.py) keeps the per-offset bound
    assert relative_violation(weights, grid) < 1e-12 and log_ratio_spread(weights, grid) < 1e-11
    # not vacuous: the weights do vary with the offset
    patches = weights[..., 1:, 1:].log()
    assert (patches.amax(-1) - patches.amin(-1)).min() > 1e-2
    # and the check FAILS for absolute information: a per-position vector added to the tokens (APE)
    ape = torch.randn(1, grid.num_tokens, DIM * HEADS, dtype=F64, generator=torch.Generator().manual_seed(3))
    assert relative_violation(layer.attention_matrix(same + ape, grid), grid) > 1e-2


# 5. other grids, extrapolation and position interpolation ---------------------------------------


@pytest.mark.parametrize("name", METHODS)
def test_non_square_larger_grid_and_position_interpolation(name):
    module = make(name)
    big = Grid(12, 9, trained=(7, 7))  # extrapolation: integer positions up to (11, 8)
    x = tokens(big)
    out = module(x, big)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=1e-12)
    dense = apply_dense(module.rotation_matrices(big.coords(dtype=F64)), x, big)
    torch.testing.assert_close(out[:, :, 1:], dense, rtol=0, atol=1e-12)
    corner = module.rotation_matrices(torch.tensor([[11.0, 8.0]], dtype=F64))[:, 0]  # (h, d, d)
    torch.testing.assert_close(out[:, :, -1], torch.einsum("hij,bhj->bhi", corner, x[:, :, -1]))
    # interpolation: the last row/col of a 14×14 grid sits at 6.5 = 13·7/14, inside the 7×7 range
    grid = Grid(14, 14, trained=(7, 7), interpolate=True)
    x = tokens(grid)
    last = module(x, grid)[:, :, -1]
    scaled = module.rotation_matrices(torch.tensor([[6.5, 6.5]], dtype=F64))[:, 0]
    torch.testing.assert_close(last, torch.einsum("hij,bhj->bhi", scaled, x[:, :, -1]), rtol=0, atol=1e-12)
    unscaled = module.rotation_matrices(torch.tensor([[13.0, 13.0]], dtype=F64))[:, 0]
    assert (last - torch.einsum("hij,bhj->bhi", unscaled, x[:, :, -1])).abs().max() > 1e-2
    # a non-square grid under interpolation scales each axis by its own factor (7/14 rows, 7/10 cols)
    grid = Grid(14, 10, cls=False, trained=(7, 7), interpolate=True)
    x = tokens(grid)
    last = module(x, grid)[:, :, -1]
    scaled = module.rotation_matrices(torch.tensor([[6.5, 6.3]], dtype=F64))[:, 0]
    torch.testing.assert_close(last, torch.einsum("hij,bhj->bhi", scaled, x[:, :, -1]), rtol=0, atol=1e-12)


def test_rope_axial_cache_follows_grid_device_dtype_and_inference_mode():
    module = make("rope_axial")
    grids = [
        Grid(5, 7),
        Grid(7, 5),
        Grid(14, 14, trained=(7, 7), interpolate=True),
        Grid(14, 14),
        Grid(5, 7, cls=False),
        Grid(5, 7),
    ]
    for grid in grids:
        for dtype in (F64, torch.float32):
            x = tokens(grid, dtype=dtype)
            expected = apply_dense(module.rotation_matrices(grid.coords(dtype=F64)), x.double(), grid)
            torch.testing.assert_close(
                module(x, grid)[:, :, grid.prefix :].double(), expected, rtol=0, atol=1e-12 if dtype == F64 else 1e-5
            )
    assert len(grid_module._CACHE) <= grid_module.CACHE_SIZE  # the one bounded grid cache
    # a grid first seen under inference_mode must still work in a later training forward
    grid = Grid(3, 4)
    with torch.inference_mode():
        module(tokens(grid), grid)
    x = tokens(grid).requires_grad_()
    module(x * 2, grid).sum().backward()
    assert torch.isfinite(x.grad).all()


# 6. gradients and autocast ----------------------------------------------------------------------


@pytest.mark.parametrize("name", LEARNABLE)
def test_gradients_reach_learnable_frequencies(name):
    grid = Grid(5, 7)
    torch.manual_seed(0)
    config = model_config(dim=DIM * HEADS, heads=HEADS)
    layer = MultiHeadAttention.from_config(config, "softmax", rotary=name)
    trained_like(layer.rotary, seed=1, scale=NOISE)
    x = torch.randn(2, grid.num_tokens, DIM * HEADS, requires_grad=True)
    weight = torch.randn(2, grid.num_tokens, DIM * HEADS)
    (layer(x, grid) * weight).sum().backward()  # no in-place autograd error
    params = list(layer.rotary.parameters())
    assert params and all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    assert all(p.grad.abs().max() > 0 for p in params)
    assert all(getattr(p, "no_weight_decay", False) for p in params)
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", METHODS)
def test_autocast_bf16_keeps_dtype_and_is_finite(name):
    grid = Grid(5, 7)
    module = make(name, dtype=torch.float32)
    x = tokens(grid, dtype=torch.float32)
    reference = module(x, grid)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out32 = module(x, grid)
        out16 = module(x.bfloat16(), grid)
    assert out32.dtype == torch.float32 and out16.dtype == torch.bfloat16
    torch.testing.assert_close(out32, reference)  # rotations run in fp32 with autocast off
    assert torch.isfinite(out16).all()
    torch.testing.assert_close(out16.float(), reference, rtol=0.05, atol=0.05)
    torch.manual_seed(0)
    config = model_config(dim=DIM * HEADS, heads=HEADS)
    layer = MultiHeadAttention.from_config(config, "softmax", rotary=name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(torch.randn(2, grid.num_tokens, DIM * HEADS), grid)
    assert torch.isfinite(out).all()


# 7. errors, registry and the assembled model ----------------------------------------------------


def test_dimension_errors_are_user_errors():
    with pytest.raises(UserError, match="divisible by 4"):
        build_position("rope_axial", model_config(), 6, 2)
    with pytest.raises(UserError, match="model.dim / model.heads"):
        build_model("softmax+rope_axial", dim=24, heads=4)  # head_dim 6
    for name in ("rope_mixed", "string_cayley"):
        with pytest.raises(UserError, match="divisible by 2"):
            build_position(name, model_config(), 5, 2)
    build_position("string_circulant", model_config(), 5, 2)  # any dimension works


def test_wrong_token_count_is_rejected():
    module = make("rope_mixed")
    with pytest.raises(ValueError, match="expects"):
        module(tokens(Grid(5, 7)), Grid(5, 6))


def test_registry_entries():
    for name in METHODS:
        method = POSITIONS[name]
        assert method.mechanism == "rotary" and method.relative and method.summary


@pytest.mark.parametrize("name", METHODS)
def test_models_run_on_other_image_sizes(name):
    torch.manual_seed(0)
    model = build_model(f"softmax+{name}+ape", dim=32, depth=1, heads=2, mlp_dim=32)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert model(torch.randn(2, 1, 56, 40)).shape == (2, 10)
    assert torch.isfinite(model(torch.randn(2, 1, 56, 56), interpolate=True)).all()


def test_cayley_basis_is_the_checked_solve_without_its_host_sync():
    """P from solve_ex (no error check: the check reads the solver's status on the host, a sync per
    step on CUDA) equals linalg.solve's, value and gradient, float64; a bf16 request is solved in
    float32 (no bf16 solver) and returned in bf16."""
    module = make("string_cayley")
    a = module.skew
    s = a - a.transpose(-2, -1)
    eye = torch.eye(DIM, dtype=F64)
    reference = torch.linalg.solve(eye + s, eye - s)
    basis = module.basis(F64)
    torch.testing.assert_close(basis, reference, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(basis.transpose(-2, -1) @ basis, eye.expand_as(basis), rtol=0, atol=1e-12)
    weights = torch.randn_like(basis)
    (grad,) = torch.autograd.grad((basis * weights).sum(), a)
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), a)
    torch.testing.assert_close(grad, grad_reference, rtol=1e-10, atol=1e-12)
    assert grad.abs().max() > 1e-3
    half = make("string_cayley", dtype=torch.float32).basis(torch.bfloat16)
    assert half.dtype == torch.bfloat16


# boundaries found by mutation testing (reports/bench/mutation.md) -------------------------------------


def test_messages_theta_boundary_and_repr():
    with pytest.raises(
        UserError,
        match=r"^rope_axial needs a rotated dimension divisible by 4 \(two axes × interleaved pairs\), got 6\. The "
        r"rotated dimension is the head dimension model\.dim / model\.heads \(or the feature count m at rotation_site "
        r"'post'\); choose model\.dim, model\.heads \(or the feature count\) so that it is\.$",
    ):
        build_position("rope_axial", model_config(dim=12, heads=2), 6, 2)
    with pytest.raises(
        UserError, match=r"^rope_mixed needs a rotated dimension divisible by 2 \(interleaved pairs\), got 5\."
    ):
        build_position("rope_mixed", model_config(dim=10, heads=2), 5, 2)
    from rpevit.core.position.rotary import ThetaOptions

    with pytest.raises(
        UserError,
        match=r"^model\.rope_axial\.theta must be a number > 1 \(frequencies θ\^\(−4c/dim\) "
        r"must decay\), got 1\.0\.$",
    ):
        ThetaOptions(theta=1.0).check("model.rope_axial")
    ThetaOptions(theta=1.5).check("model.rope_axial")  # any θ > 1 decays
    for name in METHODS:
        assert f"(dim={DIM}, heads={HEADS}" in repr(make(name))


def test_rope_mixed_init_directions_are_uniform():
    """φ ~ U[0, 2π) per head (checked on 4,000 heads), magnitudes θ^(−4k/dim)."""
    from rpevit.core.position.rotary import rope_mixed_init

    torch.manual_seed(0)
    freqs = rope_mixed_init(8, 4000, 100.0)  # (2, heads, 4)
    angles = torch.atan2(freqs[1, :, 0], freqs[0, :, 0]) % (2 * math.pi)  # the first pair's direction φ
    from scipy import stats

    assert stats.kstest(angles.numpy() / (2 * math.pi), "uniform").pvalue > 1e-3  # U[0, 3π) would give ≈ 1e-50
    magnitudes = freqs.norm(dim=0)[0]  # (4,): pairs [0, 2) then [2, 4) restart the ladder
    torch.testing.assert_close(magnitudes, torch.tensor([1.0, 100.0**-0.5, 1.0, 100.0**-0.5]), rtol=1e-6, atol=0)


def test_linear_backends_are_the_kernel_approximations():
    from rpevit.core.attention import linear_backends

    assert linear_backends() == ["favor", "relu", "favor_redraw"]


@pytest.mark.parametrize("name", METHODS)
def test_float32_module_on_float64_tokens_rotates_in_float64(name):
    """Parameters in float32, tokens in float64: angles, spectra and Cayley solves run in float64, so the
    rotation keeps every norm to 1e-12 and equals the same module held in float64 (float32 anywhere: ≈ 1e-7)."""
    grid = Grid(3, 4)
    narrow = make(name, dtype=torch.float32)
    z = tokens(grid)
    with torch.no_grad():
        out = narrow(z, grid)
        wide = make(name, dtype=torch.float32).double()(z, grid)
    assert out.dtype == F64
    torch.testing.assert_close(out.norm(dim=-1), z.norm(dim=-1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, wide, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", METHODS)
def test_rotate_pair_of_an_odd_batch(name):
    """rotate_pair rotates q and k in one call: with 3 images each, the halves are q's and k's."""
    module, grid = make(name), Grid(3, 4)
    q, k = tokens(grid, batch=3, seed=1), tokens(grid, batch=3, seed=2)
    with torch.no_grad():
        rq, rk = module.rotate_pair(q, k, grid)
        torch.testing.assert_close(rq, module(q, grid), rtol=0, atol=1e-14)
        torch.testing.assert_close(rk, module(k, grid), rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match=rf"^{type(module).__name__} expects \(B, heads, 13, {DIM}\)"):
        module(q[..., :-1, :], grid)


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 100.0])
def test_cayley_float32_gradient_at_large_skew(scale):
    """Cayley-STRING trained in float32 far from its A = 0 init: with A's entries up to 100·N(0, 1), P stays
    orthogonal to 1e-5 and ∂P/∂A keeps 1e-4 relative accuracy against float64 (I + S is well conditioned:
    its singular values are √(1 + λ²)). The bound is relative because the gradient itself shrinks
    (≈ 50 at 0.1, ≈ 3e-3 at 100) as P saturates: the Cayley map, not rounding."""
    torch.manual_seed(0)
    wide = make("string_cayley")
    with torch.no_grad():
        wide.skew.copy_(scale * torch.randn_like(wide.skew))
    narrow = make("string_cayley", dtype=torch.float32)
    with torch.no_grad():
        narrow.skew.copy_(wide.skew)
    weights = torch.randn(HEADS, DIM, DIM, dtype=F64)
    basis = narrow.basis(torch.float32)
    eye = torch.eye(DIM)
    torch.testing.assert_close(basis.transpose(-2, -1) @ basis, eye.expand_as(basis), rtol=0, atol=1e-5)
    (grad,) = torch.autograd.grad((basis * weights.float()).sum(), narrow.skew)
    (reference,) = torch.autograd.grad((wide.basis(F64) * weights).sum(), wide.skew)
    assert (grad.double() - reference).norm() <= 1e-4 * reference.norm()
