"""Tests for rpevit.core.attention.linear and rpevit.core.attention.features (FAVOR+ and Performer-ReLU).

The post-map rotation is played by `StandInRope`, an exactly relative 2D RoPE with random
frequencies that (like the real rotary modules) leaves the CLS prefix alone.
"""

import math

import pytest
import torch
from torch import nn

from rpevit.core.attention import BACKENDS, computing_backends
from rpevit.core.attention.features import (
    default_favor_features,
    favor_features,
    favor_log_features,
    orthogonal_gaussian_matrix,
)
from rpevit.core.attention.linear import FavorAttention, ReluAttention
from rpevit.core.checks import relative_violation
from rpevit.core.config import ModelConfig
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid

HEAD_DIM, HEADS = 8, 3
GRID = Grid(5, 7, cls=True)
GRID_NO_CLS = Grid(5, 7, cls=False)
GRID_7 = Grid(7, 7, cls=True)  # the trained grid of the 28-pixel layer configs

FEATURE_SEEDS = [5253820757564114760, 7229531956929275695]  # feature_seed(0, 0, 0), (3, 2, 7)

BACKEND_CASES = {
    "favor": (FavorAttention, {}),
    "relu-identity": (ReluAttention, {"feature_map": "identity"}),
    "relu-random": (ReluAttention, {"feature_map": "random", "num_features": 12}),
    "relu-learned": (ReluAttention, {"feature_map": "learned", "num_features": 10}),
}


def make_config(**overrides):
    return ModelConfig(dim=HEAD_DIM * HEADS, heads=HEADS, **overrides)


def make(cls, **options):
    """A backend of class `cls` with the given options."""
    return cls(cls.Options(**options), HEAD_DIM, HEADS)


def make_backend(case, seed=0, **overrides):
    cls, options = BACKEND_CASES[case]
    torch.manual_seed(seed)
    return make(cls, **{**options, **overrides})


class StandInRope(nn.Module):
    """Exactly relative 2D RoPE on pairs (2c, 2c+1): angle_c(r) = fy_c·row + fx_c·col."""

    def __init__(self, dim, seed=0, scale=1.0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.freqs = torch.randn(dim // 2, 2, generator=generator, dtype=torch.float64) * scale  # (pairs, 2)

    def forward(self, x, grid):
        angles = grid.coords(dtype=torch.float64) @ self.freqs.T  # (N, pairs)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        prefix, patches = x[..., : grid.prefix, :], x[..., grid.prefix :, :]
        even, odd = patches[..., 0::2], patches[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
        return torch.cat([prefix, rotated], dim=-2)

    def rotate_pair(self, q, k, grid):
        return self(q, grid), self(k, grid)


def rotation_matrices(rope, grid, dim):
    """The (N, dim, dim) matrices R_t that `rope` applies to the patch tokens."""
    basis = torch.eye(dim, dtype=torch.float64)[:, None, :].expand(dim, grid.num_tokens, dim)
    columns = rope(basis, grid)[:, grid.prefix :, :]  # (dim, N, dim): [a, t] = R_t e_a
    return columns.permute(1, 2, 0)


def random_qkv(grid, dtype=torch.float32, seed=0, scale=1.0, batch=2):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, HEADS, grid.num_tokens, HEAD_DIM)
    q, k, v = (torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(3))
    return (scale * q).to(dtype), (scale * k).to(dtype), v.to(dtype)


# ---------------------------------------------------------------- registration and defaults


def test_backends_registered_with_interface():
    assert BACKENDS["favor"] is FavorAttention and BACKENDS["relu"] is ReluAttention
    assert FavorAttention.Options().rotation_site == "pre" and ReluAttention.Options().rotation_site == "post"
    assert not FavorAttention.exact and not ReluAttention.exact and BACKENDS["softmax"].exact
    for cls in (FavorAttention, ReluAttention):
        assert cls.mechanisms == ("absolute", "gate", "rotary", "bias")


def test_favor_redraw_is_favor_that_redraws_every_thousand_steps_unless_told():
    """`favor_redraw` differs from `favor` only in its default redraw interval (1,000 steps)."""
    from rpevit.core.attention.linear import FavorRedrawAttention

    assert BACKENDS["favor_redraw"] is FavorRedrawAttention and issubclass(FavorRedrawAttention, FavorAttention)
    assert FavorRedrawAttention.Options().redraw_steps == 1000 and FavorAttention.Options().redraw_steps == 0
    fixed = FavorAttention(FavorAttention.Options(), HEAD_DIM, HEADS).train()
    redrawn = FavorRedrawAttention(FavorRedrawAttention.Options(), HEAD_DIM, HEADS).train()
    first_fixed, first_redrawn = fixed.omega.clone(), redrawn.omega.clone()
    for _ in range(1000):
        assert torch.equal(redrawn.omega, first_redrawn)  # the first 999 steps keep the first draw
        fixed.count_training_step()
        redrawn.count_training_step()
    assert torch.equal(fixed.omega, first_fixed) and not torch.equal(redrawn.omega, first_redrawn)
    assert FavorRedrawAttention(FavorRedrawAttention.Options(redraw_steps=5), HEAD_DIM, HEADS).redraw_steps == 5


def test_default_feature_counts():
    assert [default_favor_features(d) for d in (1, 2, 8, 16, 32, 64)] == [4, 4, 20, 48, 112, 268]
    assert FavorAttention(FavorAttention.Options(), 16, 4).feature_dim() == 48
    assert FavorAttention(FavorAttention.Options(num_features=32), 16, 4).feature_dim() == 32
    assert ReluAttention(ReluAttention.Options(), 16, 4).feature_dim() == 16
    learned = ReluAttention.Options(feature_map="learned", num_features=24)
    assert ReluAttention(learned, 16, 4).feature_dim() == 24


# ---------------------------------------------------------------- 1. fast path == weights @ v


@pytest.mark.parametrize("case", list(BACKEND_CASES))
@pytest.mark.parametrize("grid", [GRID, GRID_NO_CLS], ids=["cls", "no-cls"])
@pytest.mark.parametrize("rotate", [False, True], ids=["plain", "post-rotation"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)], ids=["fp32", "fp64"])
def test_forward_matches_dense_weights(case, grid, rotate, dtype, tol):
    backend = make_backend(case)
    rotation = StandInRope(backend.feature_dim(), seed=1) if rotate else None
    q, k, v = random_qkv(grid, dtype)
    out = backend(q, k, v, grid, feature_rotation=rotation)
    weights = backend.weights(q, k, grid, feature_rotation=rotation)
    assert out.dtype == dtype and weights.dtype == dtype
    assert out.shape == v.shape and weights.shape == (2, HEADS, grid.num_tokens, grid.num_tokens)
    torch.testing.assert_close(out, weights @ v, rtol=tol, atol=tol)
    if not rotate:  # positive features: rows are convex combinations
        assert (weights > 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]), rtol=tol, atol=tol)
    else:
        # the rotation acts on patches only: the CLS row/column of the numerator are unrotated
        plain = backend.weights(q, k, grid)
        p = grid.prefix
        if p:
            torch.testing.assert_close(weights[..., :p, :p], plain[..., :p, :p], rtol=tol, atol=tol)
        assert not torch.allclose(weights[..., p:, p:], plain[..., p:, p:])


@pytest.mark.parametrize("case", ["favor", "relu-random"])
def test_post_map_rotates_numerator_only(case):
    """RoFormer's form: (R_iφ(q_i))ᵀ(R_jφ(k_j)) / φ(q_i)ᵀΣ_j φ(k_j), written out densely."""
    backend = make_backend(case)
    rope = StandInRope(backend.feature_dim(), seed=2)
    q, k, v = random_qkv(GRID, torch.float64)
    phi_q, phi_k = backend.features(q, k)  # (B, h, T, m)
    numerator = rope(phi_q, GRID) @ rope(phi_k, GRID).transpose(-2, -1)
    expected = numerator / (phi_q @ phi_k.sum(dim=-2).unsqueeze(-1))
    torch.testing.assert_close(backend.weights(q, k, GRID, feature_rotation=rope), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(backend(q, k, v, GRID, feature_rotation=rope), expected @ v, rtol=1e-10, atol=1e-10)


def test_relu_feature_formulas():
    q, k, _ = random_qkv(GRID, torch.float64)
    scaled = q * HEAD_DIM**-0.25
    identity = make_backend("relu-identity")
    torch.testing.assert_close(identity.features(q, k)[0], scaled.clamp_min(0) + 1e-3)
    random = make_backend("relu-random")
    assert "projection" in random.state_dict() and random.projection.shape == (12, HEAD_DIM)
    assert not any(p is random.projection for p in random.parameters())
    torch.testing.assert_close(random.features(q, k)[0], (scaled @ random.projection.double().T).clamp_min(0) + 1e-3)
    learned = make_backend("relu-learned")
    weight = learned.projection.weight
    assert weight.requires_grad and weight.shape == (10, HEAD_DIM) and learned.projection.bias is None
    torch.testing.assert_close(learned.features(q, k)[1], (k * HEAD_DIM**-0.25 @ weight.double().T).clamp_min(0) + 1e-3)


@pytest.mark.parametrize("case", list(BACKEND_CASES))
def test_gradients_flow(case):
    backend = make_backend(case)
    q, k, v = (t.requires_grad_() for t in random_qkv(GRID))
    backend(q, k, v, GRID, feature_rotation=StandInRope(backend.feature_dim())).square().sum().backward()
    for tensor in (q, k, v):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0
    if case == "relu-learned":
        assert backend.projection.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- 2. FAVOR+ estimator


def _favor_pairs(d=HEAD_DIM, pairs=6, seed=0, scale=0.4):
    """q, k pairs (P, d) with aligned, anti-aligned and unrelated directions."""
    generator = torch.Generator().manual_seed(seed)
    q, noise, other = (scale * torch.randn(pairs, d, generator=generator, dtype=torch.float64) for _ in range(3))
    mix = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0], dtype=torch.float64)[:pairs, None]
    return q, mix * q + 0.6 * noise + (mix == 0) * other


def _kernel_estimates(q, k, draws, num_features, generator):
    """φ(q̃_p)ᵀφ(k̃_p) without stabilizer or floor, for independent ω draws: (draws, P)."""
    d = q.shape[-1]
    # d | m, so consecutive groups of m rows of one big draw are independent ω draws
    omegas = orthogonal_gaussian_matrix(draws * num_features, d, generator, torch.float64)
    omegas = omegas.reshape(draws, num_features, d)  # (D, m, d)
    phi_q = favor_features(q, omegas, stabilizer=None, eps=0.0)  # (D, P, m)
    phi_k = favor_features(k, omegas, stabilizer=None, eps=0.0)
    return (phi_q * phi_k).sum(-1)


def test_favor_estimator_is_unbiased_and_error_shrinks_like_inverse_sqrt():
    q, k = _favor_pairs()
    target = torch.exp((q * k).sum(-1) / math.sqrt(HEAD_DIM))  # (P,)
    assert target.max() > 1.5 and target.min() < 0.7  # a non-trivial range of kernel values
    generator = torch.Generator().manual_seed(1)
    repeats, draws, m = 32, 32, 16

    def mean_relative_error(num_draws):
        """|mean over num_draws ω draws / target − 1|, averaged over repeats and pairs."""
        estimates = _kernel_estimates(q, k, repeats * num_draws, m, generator)
        means = estimates.reshape(repeats, num_draws, -1).mean(dim=1)  # (R, P)
        return (means / target - 1).abs().mean().item()

    error_d, error_4d = mean_relative_error(draws), mean_relative_error(4 * draws)
    # 1/√D predicts a ratio of 0.5 (0.43-0.61 over 12 generator seeds)
    assert 0.25 * error_d < error_4d < 0.75 * error_d

    large = _kernel_estimates(q, k, 8192, m, generator).mean(dim=0)  # 131k features
    torch.testing.assert_close(large, target, rtol=0.04, atol=0.0)  # observed ≤ 0.023 over 12 seeds


def test_favor_estimator_with_premap_rotation_is_relative_softmax():
    q, k = _favor_pairs()
    grid = Grid(2, 3, cls=False)
    rotations = rotation_matrices(StandInRope(HEAD_DIM, seed=3, scale=1.5), grid, HEAD_DIM)  # (N, d, d)
    r_i, r_j = rotations[0], rotations[5]
    eye = torch.eye(HEAD_DIM, dtype=torch.float64)
    torch.testing.assert_close(r_i.T @ r_i, eye)
    target = torch.exp(((q @ r_i.T) * (k @ r_j.T)).sum(-1) / math.sqrt(HEAD_DIM))
    unrotated = torch.exp((q * k).sum(-1) / math.sqrt(HEAD_DIM))
    assert ((target - unrotated).abs() / target).max() > 0.1  # the rotation matters
    generator = torch.Generator().manual_seed(2)
    estimate = _kernel_estimates(q @ r_i.T, k @ r_j.T, 8192, 16, generator).mean(dim=0)
    torch.testing.assert_close(estimate, target, rtol=0.04, atol=0.0)


# ---------------------------------------------------------------- 3. orthogonal random features


def test_orthogonal_blocks_and_chi_norms():
    d = HEAD_DIM
    generator = torch.Generator().manual_seed(0)
    omega = orthogonal_gaussian_matrix(3 * d - 3, d, generator, torch.float64)  # blocks of 8, 8, 5 rows
    assert omega.shape == (3 * d - 3, d)
    for start in range(0, omega.shape[0], d):
        block = omega[start : start + d]
        gram = block @ block.T
        off_diagonal = gram - torch.diag_embed(torch.diagonal(gram))
        assert off_diagonal.abs().max() < 1e-10 * gram.diagonal().max()
    # across blocks rows are independent, not orthogonal
    assert (omega[:d] @ omega[d : 2 * d].T).abs().max() > 0.1

    rows = orthogonal_gaussian_matrix(40000, d, generator, torch.float64)
    norms = rows.norm(dim=-1)
    chi_mean = math.sqrt(2) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))
    assert abs(norms.mean().item() - chi_mean) < 0.02
    assert abs(norms.mean().item() - math.sqrt(d)) < 0.2  # E χ(8) ≈ 2.74 vs √8 ≈ 2.83
    assert abs((norms**2).mean().item() - d) < 0.1  # E χ² = d
    assert abs((norms**2).var().item() - 2 * d) < 0.6  # Var χ² = 2d
    # directions are uniform (Haar): mean 0, second moment I/d
    unit = rows / norms[:, None]
    assert unit.mean(dim=0).abs().max() < 0.02
    torch.testing.assert_close(unit.T @ unit / len(unit), torch.eye(d, dtype=torch.float64) / d, rtol=0, atol=0.01)


# ---------------------------------------------------------------- 4. key stabilizer


def test_key_stabilizer_cancels_and_per_key_max_would_not():
    backend = make_backend("favor")
    backend.feature_eps = 0.0  # no floor: the stabilizers must cancel exactly
    q, k, v = random_qkv(GRID, torch.float64, scale=2.0)
    weights = backend.weights(q, k, GRID)

    omega = backend.omega.double()
    log_q, log_k = favor_log_features(q, omega), favor_log_features(k, omega)  # (B, h, T, m)
    kernel = torch.exp(log_q) @ torch.exp(log_k).transpose(-2, -1)  # unstabilized (B, h, T, T)
    reference = kernel / kernel.sum(-1, keepdim=True)
    torch.testing.assert_close(weights, reference, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(backend(q, k, v, GRID), reference @ v, rtol=1e-10, atol=1e-12)

    # the bug this guards against: a max per key row rescales every key differently
    per_row_k = torch.exp(log_k - log_k.amax(dim=-1, keepdim=True))
    per_row_q = torch.exp(log_q - log_q.amax(dim=-1, keepdim=True))
    biased = per_row_q @ per_row_k.transpose(-2, -1)
    biased = biased / biased.sum(-1, keepdim=True)
    assert (biased - reference).abs().max() > 0.05

    # with the default floor ε = 1e-6 (relative to the largest feature) the bias stays small
    backend.feature_eps = 1e-6
    torch.testing.assert_close(backend.weights(q, k, GRID), reference, rtol=0, atol=1e-3)


def test_key_stabilizer_is_one_max_per_batch_and_head():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 10, HEAD_DIM, generator=generator, dtype=torch.float64)
    x = x * torch.tensor([0.5, 4.0], dtype=torch.float64)[:, None, None, None]  # very different scales
    omega = orthogonal_gaussian_matrix(20, HEAD_DIM, generator, torch.float64)
    keys = favor_features(x, omega, "key", eps=0.0)  # (B, h, T, m)
    queries = favor_features(x, omega, "query", eps=0.0)
    top = 20**-0.5
    torch.testing.assert_close(keys.amax(dim=(-2, -1)), torch.full((2, 3), top, dtype=torch.float64))
    torch.testing.assert_close(queries.amax(dim=-1), torch.full((2, 3, 10), top, dtype=torch.float64))
    assert keys.amax(dim=-1).min() < 0.99 * top  # keys are not normalised row by row
    log = favor_log_features(x, omega)
    ratio = keys / torch.exp(log)  # exp(−M): constant within each (batch, head)
    torch.testing.assert_close(ratio, ratio[..., :1, :1].expand_as(ratio))


# ---------------------------------------------------------------- 5. redraw policy


def step(backend, q, k, v):
    """One training step's forward of a backend, then the step count the training loop makes."""
    out = backend(q, k, v, GRID)
    backend.count_training_step()
    return out


def test_redraw_policy_and_checkpointing():
    backend = make_backend("favor", redraw_steps=2)
    assert {"omega", "redraw_counter"} <= set(backend.state_dict())
    q, k, v = random_qkv(GRID)
    initial = backend.omega.clone()

    backend.train()
    step(backend, q, k, v)
    assert torch.equal(backend.omega, initial)
    step(backend, q, k, v)  # the 2nd step draws a fresh ω for the next steps
    second = backend.omega.clone()
    assert not torch.equal(second, initial) and int(backend.redraw_counter) == 2
    step(backend, q, k, v)
    assert torch.equal(backend.omega, second)

    saved = {key: value.clone() for key, value in backend.state_dict().items()}
    backend.eval()
    for _ in range(4):
        step(backend, q, k, v)
    assert torch.equal(backend.omega, second) and int(backend.redraw_counter) == 3

    restored = make_backend("favor", seed=7, redraw_steps=2)
    assert not torch.equal(restored.omega, second)
    restored.load_state_dict(saved)
    assert torch.equal(restored.omega, second) and int(restored.redraw_counter) == 3
    restored.eval()
    torch.testing.assert_close(restored(q, k, v, GRID), backend(q, k, v, GRID), rtol=0, atol=0)
    restored.train()
    step(restored, q, k, v)  # step 4 after resume: redraw due
    assert not torch.equal(restored.omega, second) and int(restored.redraw_counter) == 4


def test_redraw_keeps_old_graph_differentiable_and_zero_never_redraws():
    backend = make_backend("favor", redraw_steps=1)
    backend.train()
    q, k, v = (t.requires_grad_() for t in random_qkv(GRID))
    first = backend.omega
    out = step(backend, q, k, v)
    assert backend.omega is not first  # swapped, not written in place
    out.sum().backward()
    assert torch.isfinite(q.grad).all()

    never = make_backend("favor", redraw_steps=0)
    never.train()
    initial = never.omega.clone()
    for _ in range(3):
        step(never, *random_qkv(GRID))
    assert torch.equal(never.omega, initial)


# ---------------------------------------------------------------- 6. precision


@pytest.mark.parametrize("case", list(BACKEND_CASES))
def test_bf16_autocast_large_norms(case):
    backend = make_backend(case)
    rotation = StandInRope(backend.feature_dim())
    q, k, v = random_qkv(GRID, torch.float32, seed=3, scale=30.0)
    q16, k16, v16 = q.bfloat16(), k.bfloat16(), v.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out16 = backend(q16, k16, v16, GRID, feature_rotation=rotation)
        out_fp32_v = backend(q16, k16, v, GRID, feature_rotation=rotation)
    assert out16.dtype == torch.bfloat16 and out_fp32_v.dtype == torch.float32
    assert torch.isfinite(out16).all() and torch.isfinite(out_fp32_v).all()
    # the bf16 call computes in fp32 internally: identical to the fp32 call on the same values
    exact = backend(q16.float(), k16.float(), v16.float(), GRID, feature_rotation=rotation)
    assert torch.equal(out16, exact.bfloat16())

    out32 = backend(q, k, v, GRID, feature_rotation=rotation)
    out64 = backend(q.double(), k.double(), v.double(), GRID, feature_rotation=rotation)
    assert torch.isfinite(out32).all()
    relative = ((out32.double() - out64).norm() / out64.norm()).item()
    assert relative < 1e-4


# ---------------------------------------------------------------- 7. relative property


def _identical_tokens(grid, dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, dim, generator=generator, dtype=torch.float64)
    shape = (1, 1, grid.num_tokens, dim)
    return q.expand(shape), k.expand(shape)


# rpevit.core.checks.relative_violation divides each ratio spread by the largest ratio: ~1e-15 here when
# the property holds. It takes (T, T) with the CLS prefix and reads every valid tuple (the earlier local
# check sampled 20,000); it divides by A[i, i], positive here though post-map weights can be negative.
# The ratios span < 500 here, so < 1e-12 still bounds every ratio's relative error by < 1e-9.


@pytest.mark.parametrize("case", ["favor", "relu-identity", "relu-learned"])
@pytest.mark.parametrize("grid", [GRID_NO_CLS, GRID], ids=["no-cls", "cls"])
@torch.no_grad()
def test_post_map_rotation_is_exactly_relative(case, grid):
    backend = make_backend(case)
    rope = StandInRope(backend.feature_dim(), seed=5)
    q, k = _identical_tokens(grid, HEAD_DIM)
    weights = backend.weights(q, k, grid, feature_rotation=rope)[0, 0]
    patches = weights[grid.prefix :, grid.prefix :]
    assert patches.min() < 0 < patches.max()  # post-map weights can be negative
    assert relative_violation(weights, grid) < 1e-12
    # numerator depends on Δ only; the (unrotated) denominator is the same for every row here
    assert relative_violation(backend.weights(q, k, grid)[0, 0], grid) < 1e-12


@torch.no_grad()
def test_pre_map_relu_is_not_relative():
    backend = make_backend("relu-identity")
    rope = StandInRope(HEAD_DIM, seed=5)
    q, k = _identical_tokens(GRID_NO_CLS, HEAD_DIM)
    weights = backend.weights(rope(q, GRID_NO_CLS), rope(k, GRID_NO_CLS), GRID_NO_CLS)[0, 0]
    assert relative_violation(weights, GRID_NO_CLS) > 0.5  # ~1: far from relative
    # while the same rotation applied post-map is relative
    post = backend.weights(q, k, GRID_NO_CLS, feature_rotation=rope)[0, 0]
    assert relative_violation(post, GRID_NO_CLS) < 1e-12


# ---------------------------------------------------------------- 8. configuration errors


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_features": 7}, "positive even integer"),
        ({"num_features": 0}, "positive even integer"),
        ({"num_features": -4}, "positive even integer"),
        ({"redraw_steps": -1}, "redraw_steps"),
    ],
)
def test_favor_config_errors(overrides, message):
    with pytest.raises(UserError, match=message):
        make(FavorAttention, **overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"feature_map": "random", "num_features": 0}, "positive integer"),
        ({"feature_map": "learned", "num_features": -2}, "positive integer"),
        ({"feature_map": "identity", "num_features": 12}, "'random' or 'learned'"),
    ],
)
def test_relu_config_errors(overrides, message):
    with pytest.raises(UserError, match=message):
        make(ReluAttention, **overrides)


@pytest.mark.parametrize("kind", ["random", "learned"])
def test_odd_feature_count_with_post_rotation(kind):
    backend = make(ReluAttention, feature_map=kind, num_features=7)
    q, k, v = random_qkv(GRID)
    backend(q, k, v, GRID)  # odd m is fine without a post-map rotation
    with pytest.raises(UserError, match="even number of features m.*m=7"):
        backend(q, k, v, GRID, feature_rotation=StandInRope(8))
    with pytest.raises(UserError, match="even number of features"):
        backend.weights(q, k, GRID, feature_rotation=StandInRope(8))


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize(
    "variant, overrides",
    [
        ("favor+ape", {}),
        ("relu+ape", {}),
        ("relu+none", {"relu": {"feature_map": "learned", "num_features": 12}, "pool": "mean"}),
    ],
)
def test_model_end_to_end(variant, overrides):
    from rpevit.core.model import build_model

    torch.manual_seed(0)
    model = build_model(variant, dim=32, depth=2, heads=4, **overrides)
    images = torch.randn(2, 1, 28, 28)
    assert model(images).shape == (2, 10)
    maps = model.attention_maps(images)
    tokens = 49 + (overrides.get("pool", "cls") == "cls")
    assert len(maps) == 2 and maps[0].shape == (2, 4, tokens, tokens)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 4, tokens), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- boundaries found by mutation testing
# (reports/bench/mutation.md): which exact path a bias takes, the compute dtype, ω's seeds, messages


def bias_module(kind):
    """A relative-bias module with random parameters: manhattan (separable, decaying), axial (separable, with
    CLS terms) or krpe (neither)."""
    from rpevit.core.position.relative import KernelizedRPE, KrpeOptions
    from rpevit.core.position.separable import AxialRPE, AxialRPEOptions, ManhattanDecay, ManhattanOptions

    torch.manual_seed(5)
    build = {"manhattan": (ManhattanDecay, ManhattanOptions), "axial": (AxialRPE, AxialRPEOptions)}
    cls, options = build.get(kind, (KernelizedRPE, KrpeOptions))
    module = cls(options(), HEAD_DIM, HEADS, side=5, cls=True)  # a 20-pixel image of 4-pixel patches
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def refuse(name):
    def fail(*args, **kwargs):
        raise AssertionError(f"{name} must not be called on this path")

    return fail


ROUTES = {  # (bias, bias_path): the linear module's functions that path must not call
    ("manhattan", "auto"): ("biased_linear_attention", "biased_linear_weights"),
    ("manhattan", "axis"): ("biased_linear_attention", "biased_linear_weights"),
    ("manhattan", "scan"): ("biased_linear_attention", "biased_linear_weights"),
    ("krpe", "fft"): ("separable_linear_attention", "biased_linear_weights"),
    ("krpe", "dense"): ("separable_linear_attention", "biased_linear_attention"),
}


@pytest.mark.parametrize("bias_kind,path", list(ROUTES))
@pytest.mark.parametrize("case", ["favor", "relu-random"])
def test_each_bias_path_is_the_one_taken(case, bias_kind, path, monkeypatch):
    """Every exact path gives the same numbers, so only a spy tells them apart: a separable bias goes
    axis by axis (never through the 2D FFT or the dense N×N matrix), a non-separable one where its
    bias_path says. The result still equals the dense matrix times v, in float64."""
    from rpevit.core.attention import linear
    from rpevit.core.attention import separable as separable_module

    backend = make_backend(case, bias_path=path).double()
    bias = bias_module(bias_kind).double()
    q, k, v = random_qkv(GRID, torch.float64)
    expected = reference_weights(backend, q, k, bias) @ v
    for name in ROUTES[bias_kind, path]:
        monkeypatch.setattr(linear, name, refuse(name))
    if bias_kind == "manhattan" and path != "auto":  # the configured path goes through, not auto's choice
        monkeypatch.setattr(separable_module, "choose_path", refuse("choose_path"))
    out = backend(q, k, v, GRID, bias)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    if bias_kind == "manhattan":  # `weights` takes the separable route too
        torch.testing.assert_close(backend.weights(q, k, GRID, bias) @ v, expected, rtol=1e-10, atol=1e-10)


def reference_weights(backend, q, k, bias):
    """(φ(q)φ(k)ᵀ ∘ exp(B)) / rowsum, B = bias.dense(grid) with its CLS terms, float64, no shift: an
    independent reference for every bias path (the backend's own features)."""
    phi_q, phi_k = backend.features(q, k)
    kernel = (phi_q @ phi_k.transpose(-2, -1)) * bias.dense(GRID).exp()
    return kernel / kernel.sum(-1, keepdim=True)


def test_layer_weights_match_the_independent_reference_with_cls_terms():
    """The CLS terms of the bias reach every path: weights equal the reference built from bias.dense."""
    for kind, paths in (("krpe", ("fft", "dense")), ("axial", ("axis", "fft", "dense"))):
        for path in paths:
            backend = make_backend("favor", bias_path=path).double()
            bias = bias_module(kind).double()
            assert bias.cls_terms() is not None and float(bias.cls_terms().abs().min()) > 0
            q, k, _ = random_qkv(GRID, torch.float64, seed=5)
            torch.testing.assert_close(
                backend.weights(q, k, GRID, bias), reference_weights(backend, q, k, bias), rtol=1e-10, atol=1e-12
            )


def test_favor_keys_use_the_key_stabilizer_and_redraws_keep_the_dtype():
    from rpevit.core.attention.features import FAVOR_EPS, favor_features

    backend = make(FavorAttention, redraw_steps=1).double()
    q, k, _ = random_qkv(GRID, torch.float64, scale=3.0)
    phi_q, phi_k = backend.features(q, k)
    assert torch.equal(phi_k, favor_features(k, backend.omega, "key", FAVOR_EPS))
    assert torch.equal(phi_q, favor_features(q, backend.omega, "query", FAVOR_EPS))
    backend.train()
    backend.count_training_step()
    assert backend.omega.dtype == torch.float64


def test_auto_compares_costs_with_the_head_dim(monkeypatch):
    """auto asks fft_is_cheaper(grid, m, d) with d = v's last axis (not the heads or token axis)."""
    from rpevit.core.attention import linear

    asked = []
    monkeypatch.setattr(linear, "fft_is_cheaper", lambda grid, m, d: asked.append((grid, m, d)) or False)
    backend = make_backend("favor")
    q, k, v = random_qkv(GRID)
    backend(q, k, v, GRID, bias_module("krpe"))
    assert asked == [(GRID, backend.num_features, HEAD_DIM)]


@pytest.mark.parametrize("bias_kind", [None, "manhattan", "krpe", "krpe-dense"])
@pytest.mark.parametrize("case", ["favor", "relu-learned"])
def test_bf16_inputs_are_computed_in_float32(case, bias_kind):
    """bf16 q, k, v: features, sums and bias run in float32 and only the result is rounded to bf16, so the
    output is the float32 computation on the same bf16 values rounded once (≤ 1 bf16 step of 2⁻⁸ relative,
    where a bf16 computation is off by several); `weights` returns q's dtype."""
    path = {"krpe": "fft", "krpe-dense": "dense"}.get(bias_kind, "auto")
    backend = make_backend(case, bias_path=path)
    bias = bias_module(bias_kind.split("-")[0]) if bias_kind else None
    q, k, v = (t.bfloat16() for t in random_qkv(GRID, scale=2.0))
    with torch.no_grad():
        out = backend(q, k, v, GRID, bias)
        expected = backend(q.float(), k.float(), v.float(), GRID, bias)
        assert out.dtype == torch.bfloat16
        assert float(((out.float() - expected).abs() / expected.abs().clamp_min(1e-3)).max()) <= 2**-8
        weights = backend.weights(q, k, GRID, bias)
        assert weights.dtype == torch.bfloat16
        assert float((weights.float() - backend.weights(q.float(), k.float(), GRID, bias)).abs().max()) <= 2**-9


def test_feature_seed_is_pinned():
    """ω's redraw seeds are part of a run's identity across versions and processes: pinned values."""
    from rpevit.core.attention.linear import feature_seed

    assert [feature_seed(0, 0, 0), feature_seed(3, 2, 7)] == FEATURE_SEEDS
    assert all(0 <= s < 2**63 for s in FEATURE_SEEDS)


def test_redraw_reads_only_seed_layer_and_count():
    """A redraw's ω is orthogonal_gaussian_matrix drawn from feature_seed(seed, layer, count), whatever the
    global RNG holds; a fresh layer draws as seed 0, layer 0; the count is an integer buffer."""
    layers = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        layer = make(FavorAttention, redraw_steps=1)
        layer.train()
        layers.append(layer)
    from rpevit.core.attention.features import orthogonal_gaussian_matrix
    from rpevit.core.attention.linear import feature_seed

    for layer in layers:
        layer.count_training_step()
    assert torch.equal(layers[0].omega, layers[1].omega)
    generator = torch.Generator().manual_seed(feature_seed(0, 0, 1))
    assert torch.equal(layers[0].omega, orthogonal_gaussian_matrix(layers[0].num_features, HEAD_DIM, generator))
    layers[1].place(4, 3)
    layers[1].count_training_step()
    generator = torch.Generator().manual_seed(feature_seed(4, 3, 2))
    assert torch.equal(layers[1].omega, orthogonal_gaussian_matrix(layers[1].num_features, HEAD_DIM, generator))
    assert layers[1].redraw_counter.dtype == torch.long and int(layers[1].redraw_counter) == 2


def test_option_and_bias_messages_in_full():
    with pytest.raises(
        UserError,
        match=r"^model\.favor\.num_features must be a positive even integer .* got 7; "
        r"or leave it null for the default 4·⌈d·ln d/4⌉\.$",
    ):
        make(FavorAttention, num_features=7)
    with pytest.raises(UserError, match=r"^model\.relu\.num_features must be a positive integer, got 0\.$"):
        make(ReluAttention, feature_map="random", num_features=0)
    assert make(ReluAttention, feature_map="random", num_features=1).feature_dim() == 1  # m = 1 is allowed
    backend = make(ReluAttention, feature_map="random", num_features=7)
    with pytest.raises(
        UserError, match=r"this ReluAttention has m=7\. Choose an even m .* or set rotation_site: pre\.$"
    ):
        backend(*random_qkv(GRID), GRID, feature_rotation=StandInRope(8))
    for path, message in [
        (
            "axis",
            r"^bias_path: 'axis' applies a separable bias \(manhattan, axial_rpe\) axis by axis; "
            r"KernelizedRPE is not separable — use auto, fft or dense\.$",
        ),
        ("scan", r"^bias_path: 'scan' applies a separable bias"),
    ]:
        with pytest.raises(UserError, match=message):
            make(FavorAttention, bias_path=path).check_bias(bias_module("krpe"))
    from rpevit.core.position.separable import AxialRPE, AxialRPEOptions

    axial = AxialRPE(AxialRPEOptions(), HEAD_DIM, HEADS, side=5, cls=True)
    make(FavorAttention, bias_path="axis").check_bias(axial)
    with pytest.raises(
        UserError,
        match=r"^bias_path: 'scan' runs recurrences of a geometric decay \(manhattan\); "
        r"AxialRPE has no decay rates — use auto, axis, fft or dense\.$",
    ):
        make(FavorAttention, bias_path="scan").check_bias(axial)


def test_omega_draw_is_pinned():
    """ω from a seeded generator is part of a run's reproducibility across versions: pinned values, float32
    by default, and independent of the global RNG."""
    torch.manual_seed(123)
    omega = orthogonal_gaussian_matrix(10, 4, torch.Generator().manual_seed(0))
    assert omega.dtype == torch.float32
    expected = [
        -2.787138,
        -0.931078,
        -1.077014,
        0.660017,
        0.188385,
        -0.036473,
        1.370271,
        -0.809998,
        -0.128787,
        -2.102469,
    ]
    torch.testing.assert_close(omega[:, 0], torch.tensor(expected), rtol=0, atol=1e-5)
    assert abs(float(omega.sum()) - -3.203151) < 1e-4


@pytest.mark.parametrize("shape", [(7, 8), (3, 7, 8), (2, 3, 7, 8)], ids=["T,d", "h,T,d", "B,h,T,d"])
def test_favor_feature_formula_for_any_leading_shape(shape):
    """m^(−1/2)(exp(ωx/d^¼ − |x|²/(2√d) − M) + ε) with M per token (query), one M per leading index (key) or
    0 (None), for inputs of any leading shape; float64 to 1e-12."""
    from rpevit.core.attention.features import FAVOR_EPS, favor_features

    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    omega = orthogonal_gaussian_matrix(6, 8, torch.Generator().manual_seed(4), torch.float64)
    logits = x @ omega.T / 8**0.25 - (x * x).sum(-1, keepdim=True) / (2 * 8**0.5)
    expected = {
        "query": logits - logits.amax(-1, keepdim=True),
        "key": logits - logits.amax((-2, -1), keepdim=True),
        None: logits,
    }
    for stabilizer, shifted in expected.items():
        out = favor_features(x, omega, stabilizer)
        torch.testing.assert_close(out, (shifted.exp() + FAVOR_EPS) / 6**0.5, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match=r"^stabilizer must be 'query', 'key' or None, got 'row'$"):
        favor_features(x, omega, "row")


def test_layer_refuses_a_post_rotation_of_an_odd_feature_count():
    """MultiHeadAttention checks at build time, before any forward: one message naming backend and m."""
    from rpevit.core.attention.layer import MultiHeadAttention
    from rpevit.core.config import model_config

    config = model_config(
        dim=32,
        heads=4,
        image_size=28,
        patch_size=4,
        relu={"rotation_site": "post", "feature_map": "random", "num_features": 9},
    )
    with pytest.raises(
        UserError,
        match=r"^a 'post' rotation rotates pairs of features, but backend relu has an odd "
        r"number of features m=9; choose an even m or model\.relu\.rotation_site: pre\.$",
    ):
        MultiHeadAttention.from_config(config, "relu", rotary="rope_axial")


@pytest.mark.parametrize("backend", ["favor", "relu"])
def test_layer_hands_a_post_rotation_to_the_backend(backend):
    """At rotation_site post the layer rotates nothing itself and passes its rotary module to the backend:
    its output is the backend's with feature_rotation=layer.rotary, and differs from the unrotated one."""
    from rpevit.core.attention.layer import MultiHeadAttention
    from rpevit.core.config import model_config

    config = model_config(dim=32, heads=4, image_size=28, patch_size=4, **{backend: {"rotation_site": "post"}})
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_config(config, backend, rotary="rope_mixed").double()
    x = torch.randn(2, GRID_7.num_tokens, 32, dtype=torch.float64)
    q, k, v = layer.qkv(x).unflatten(-1, (3, 4, 8)).permute(2, 0, 3, 1, 4)
    with torch.no_grad():
        rotated = layer.proj(layer.backend(q, k, v, GRID_7, feature_rotation=layer.rotary).transpose(1, 2).flatten(2))
        plain = layer.proj(layer.backend(q, k, v, GRID_7).transpose(1, 2).flatten(2))
        out = layer(x, GRID_7)
    torch.testing.assert_close(out, rotated, rtol=1e-10, atol=1e-12)
    assert (out - plain).abs().max() > 1e-4


def test_the_computing_backends_list_each_computation_once():
    """favor_redraw trains differently but computes as favor: timings and checks list favor alone."""
    assert computing_backends() == ["softmax", "favor", "relu"]
    assert issubclass(BACKENDS["favor_redraw"], BACKENDS["favor"]) and "favor_redraw" in BACKENDS
