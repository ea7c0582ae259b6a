"""Tests for rpevit.core.attention.toeplitz: the O(N log N) FFT path of relative-bias linear attention.

The reference is built independently here: the full (T, T) bias gathered by explicit loops over
token pairs, then (ψQψKᵀ ∘ exp(B)) V / row sums of (φQφKᵀ ∘ exp(B)), in float64.
"""

import math

import pytest
import torch

from rpevit.core.attention import toeplitz
from rpevit.core.attention.features import favor_features, orthogonal_gaussian_matrix
from rpevit.core.attention.toeplitz import biased_linear_attention, biased_linear_weights, fft_size, toeplitz_correlate
from rpevit.core.grid import Grid

from helpers import LargestTensor

F64 = torch.float64
BATCH, HEADS, M, D = 2, 3, 6, 5


def gen(seed):
    return torch.Generator().manual_seed(seed)


def reference_bias(table, cls_terms, grid):
    """(h, T, T) bias by explicit loops: B[i, j] = b(r_j − r_i) for patches, CLS terms on the border."""
    heads, tokens, p, width = table.shape[0], grid.num_tokens, grid.prefix, grid.width
    cls_terms = torch.zeros(heads, 3, dtype=table.dtype) if cls_terms is None else cls_terms
    bias = torch.zeros(heads, tokens, tokens, dtype=table.dtype)
    for i in range(tokens):
        for j in range(tokens):
            if p and i == 0:
                bias[:, i, j] = cls_terms[:, 2] if j == 0 else cls_terms[:, 0]  # CLS→CLS, CLS→patch
            elif p and j == 0:
                bias[:, i, j] = cls_terms[:, 1]  # patch→CLS
            else:
                row_i, col_i = divmod(i - p, width)
                row_j, col_j = divmod(j - p, width)
                bias[:, i, j] = table[:, row_j - row_i + grid.height - 1, col_j - col_i + width - 1]
    return bias


def reference_attention(q_num, k_num, q_den, k_den, v, bias):
    """(ψQψKᵀ ∘ exp(B)) V / rowsum(φQφKᵀ ∘ exp(B)) in float64 (no shift, no clamp)."""
    weights = bias.to(F64).exp()
    numerator = (q_num.to(F64) @ k_num.to(F64).transpose(-2, -1)) * weights
    denominator = ((q_den.to(F64) @ k_den.to(F64).transpose(-2, -1)) * weights).sum(-1, keepdim=True)
    return (numerator @ v.to(F64)) / denominator


def positive_features(shape, seed, kind):
    """'exp': FAVOR-like exp(random) features; 'relu': ReLU(random) + 1e-3."""
    x = torch.randn(*shape, generator=gen(seed), dtype=F64)
    return (0.5 * x).exp() / math.sqrt(shape[-1]) if kind == "exp" else torch.relu(x) + 1e-3


def rotate_per_token(phi, seed):
    """A post-map-like numerator: pairs of features rotated by a random angle per token."""
    angles = torch.rand(*phi.shape[:-1], phi.shape[-1] // 2, generator=gen(seed), dtype=F64) * 2 * math.pi
    even, odd = phi[..., 0::2], phi[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


def make_inputs(grid, kind="exp", post=False, seed=0, heads=HEADS, m=M, d=D):
    """(q_num, k_num, q_den, k_den, v, table, cls_terms) in float64 with an asymmetric random table."""
    shape = (BATCH, heads, grid.num_tokens, m)
    q_den, k_den = positive_features(shape, seed, kind), positive_features(shape, seed + 1, kind)
    q_num, k_num = (rotate_per_token(q_den, seed + 2), rotate_per_token(k_den, seed + 3)) if post else (q_den, k_den)
    v = torch.randn(BATCH, heads, grid.num_tokens, d, generator=gen(seed + 4), dtype=F64)
    table = torch.randn(heads, 2 * grid.height - 1, 2 * grid.width - 1, generator=gen(seed + 5), dtype=F64)
    cls_terms = torch.randn(heads, 3, generator=gen(seed + 6), dtype=F64) if grid.cls else None
    return q_num, k_num, q_den, k_den, v, table, cls_terms


GRIDS = [Grid(5, 7, cls=True), Grid(5, 7, cls=False)]


# 1. FFT path == the dense masked computation ---------------------------------------------------


@pytest.mark.parametrize("grid", GRIDS, ids=["cls", "no_cls"])
@pytest.mark.parametrize("kind", ["exp", "relu"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
def test_fft_path_equals_dense_reference(grid, kind, post):
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, kind, post)
    assert (table - table.flip(-2, -1)).abs().max() > 0.5  # asymmetric: b(Δ) ≠ b(−Δ)
    if post:
        assert (q_num - q_den).abs().max() > 0.1 and (q_num < 0).any()  # numerator ≠ denominator features
    expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, cls_terms, grid))
    out = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    assert out.dtype == F64 and out.shape == (BATCH, HEADS, grid.num_tokens, D)
    assert (out - expected).abs().max() <= 1e-10
    f32 = [t.float() if t is not None else None for t in (q_num, k_num, q_den, k_den, v, table, cls_terms)]
    out32 = biased_linear_attention(*f32[:5], grid, *f32[5:])
    assert out32.dtype == torch.float32
    assert (out32.double() - expected).abs().max() <= 1e-5


def test_cls_border_terms_matter_and_none_means_zero():
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, seed=7)
    with_terms = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    zero_terms = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, torch.zeros_like(cls_terms))
    without = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, None)
    torch.testing.assert_close(without, zero_terms, rtol=0, atol=1e-12)
    assert (with_terms - without)[:, :, 0].abs().max() > 1e-3  # the CLS row changes
    assert (with_terms - without)[:, :, 1:].abs().max() > 1e-3  # and so do the patch rows (patch→CLS)
    expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, None, grid))
    assert (without - expected).abs().max() <= 1e-10


def test_rectangular_grids_of_other_shapes_and_single_rows():
    for height, width in [(1, 6), (6, 1), (3, 11), (8, 2)]:
        grid = Grid(height, width, cls=True)
        q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, "relu", post=True, seed=height)
        expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, cls_terms, grid))
        out = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
        assert (out - expected).abs().max() <= 1e-10, (height, width)


def test_toeplitz_correlate_matches_loops():
    x = torch.randn(1, 2, 3, 4, 6, generator=gen(1), dtype=F64)  # (B, h, C, H, W)
    kernel = torch.randn(2, 7, 11, generator=gen(2), dtype=F64)
    y = toeplitz_correlate(x, kernel)
    expected = torch.zeros_like(x)
    for ri in range(4):
        for ci in range(6):
            for rj in range(4):
                for cj in range(6):
                    expected[..., ri, ci] += kernel[None, :, None, rj - ri + 3, cj - ci + 5] * x[..., rj, cj]
    assert (y - expected).abs().max() <= 1e-12


def test_fft_size_is_smallest_5_smooth():
    assert [fft_size(n) for n in (1, 7, 9, 13, 127, 131, 255)] == [1, 8, 9, 15, 128, 135, 256]


# 2. dense weights: A v == the FFT path, rows sum to one ----------------------------------------


@pytest.mark.parametrize("grid", GRIDS, ids=["cls", "no_cls"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
def test_weights_times_v_equals_fft_path(grid, post):
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, "exp", post, seed=11)
    weights = biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms)
    assert weights.shape == (BATCH, HEADS, grid.num_tokens, grid.num_tokens)
    out = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    assert (weights @ v - out).abs().max() <= 1e-10
    f32 = [t.float() if t is not None else None for t in (q_num, k_num, q_den, k_den, v, table, cls_terms)]
    weights32 = biased_linear_weights(*f32[:4], grid, *f32[5:])
    out32 = biased_linear_attention(*f32[:5], grid, *f32[5:])
    assert (weights32 @ f32[4] - out32).abs().max() <= 1e-5
    if not post:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]), rtol=0, atol=1e-12)
        assert (weights > 0).all()


def test_gradients_match_dense_path():
    grid = GRIDS[0]
    inputs = [t.clone().requires_grad_() for t in make_inputs(grid, "exp", post=True, seed=21)]
    q_num, k_num, q_den, k_den, v, table, cls_terms = inputs
    target = torch.randn(BATCH, HEADS, grid.num_tokens, D, generator=gen(22), dtype=F64)
    fft = (biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms) * target).sum()
    fft_grads = torch.autograd.grad(fft, inputs)
    dense = ((biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms) @ v) * target).sum()
    dense_grads = torch.autograd.grad(dense, inputs)
    for a, b in zip(fft_grads, dense_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    assert table.grad is None and fft_grads[5].abs().max() > 0 and fft_grads[6].abs().max() > 0


# 3. memory / complexity: large grids without any N×N tensor --------------------------------------


@pytest.mark.parametrize("side", [64, 128])
def test_large_grids_never_form_n_by_n(side):
    grid = Grid(side, side, cls=True)
    n, m, d = grid.num_patches, 16, 16
    g = gen(side)
    q = (0.3 * torch.randn(1, 1, grid.num_tokens, m, generator=g)).exp()
    k = (0.3 * torch.randn(1, 1, grid.num_tokens, m, generator=g)).exp()
    v = torch.randn(1, 1, grid.num_tokens, d, generator=g)
    table = torch.randn(1, 2 * side - 1, 2 * side - 1, generator=g)
    cls_terms = torch.randn(1, 3, generator=g)
    with LargestTensor() as probe:
        out = biased_linear_attention(q, k, q, k, v, grid, table, cls_terms)
    channels = m * d + m
    assert probe.largest <= 4.5 * n * channels < n * n  # O(N·m·d): the padded FFT buffers
    assert out.shape == (1, 1, grid.num_tokens, d) and torch.isfinite(out).all()
    # a few rows against direct O(N) sums in float64
    bias = torch.zeros(grid.num_tokens, dtype=F64)
    for i in (0, 1, side + 3, n // 2, n):  # CLS, first patch, interior, middle, last patch
        if i == 0:
            bias = torch.cat((cls_terms[0, 2:3], cls_terms[0, 0].expand(n))).double()
        else:
            row, col = divmod(i - 1, side)
            rows = torch.arange(side).repeat_interleave(side) - row + side - 1
            cols = torch.arange(side).repeat(side) - col + side - 1
            bias = torch.cat((cls_terms[0, 1:2], table[0, rows, cols])).double()
        w = (q[0, 0, i].double() @ k[0, 0].double().T) * bias.exp()  # (T,)
        expected = (w @ v[0, 0].double()) / w.sum()
        assert (out[0, 0, i].double() - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("budget", [1, 28000, 1 << 30], ids=["one_feature", "four_of_six_features", "many_slabs"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
def test_chunk_budget_changes_nothing(budget, post, monkeypatch):
    """Chunks of one feature, of several features, or of several (batch, head) slabs: same outputs and
    gradients as the dense path (the chunked FFT products have their own backward)."""
    monkeypatch.setattr(toeplitz, "FFT_CHUNK_BYTES", budget)
    grid = GRIDS[0]
    inputs = [t.clone().requires_grad_() for t in make_inputs(grid, "relu", post=post, seed=61, m=6)]
    q_num, k_num, q_den, k_den, v, table, cls_terms = inputs
    if not post:
        q_den, k_den = q_num, k_num
    target = torch.randn(BATCH, HEADS, grid.num_tokens, D, generator=gen(62), dtype=F64)
    out = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, cls_terms, grid))
    assert (out - expected).abs().max() <= 1e-10
    leaves = [q_num, k_num] + ([q_den, k_den] if post else []) + [v, table, cls_terms]
    fft_grads = torch.autograd.grad((out * target).sum(), leaves)
    dense = (biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms) @ v * target).sum()
    for a, b in zip(fft_grads, torch.autograd.grad(dense, leaves)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_saved_memory_is_linear_in_features_plus_values():
    """Autograd keeps only q, k, v and the kernel: no padded spectrum and no N·m·d per-query sums."""
    side, m, d = 48, 16, 16
    grid = Grid(side, side, cls=True)
    g = gen(71)
    q = (0.3 * torch.randn(1, 2, grid.num_tokens, m, generator=g)).exp().requires_grad_()
    k = (0.3 * torch.randn(1, 2, grid.num_tokens, m, generator=g)).exp().requires_grad_()
    v = torch.randn(1, 2, grid.num_tokens, d, generator=g, requires_grad=True)
    table = torch.randn(2, 2 * side - 1, 2 * side - 1, generator=g, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = biased_linear_attention(q, k, q, k, v, grid, table, None)
    out.square().sum().backward()
    tokens = 2 * grid.num_tokens
    # (the CLS border's matrix products count views of q, k, v again; the unchunked path saved the padded
    # spectrum and the per-query sums, ≥ 5·tokens·m·d)
    assert sum(saved) <= 6 * tokens * (m + d) + 2 * table.numel() and sum(saved) < tokens * m * d
    assert torch.isfinite(table.grad).all() and table.grad.abs().max() > 0


# 4. large-magnitude tables stay finite (the shared max shift) ----------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_large_magnitude_tables_stay_finite(dtype):
    grid = Grid(5, 7, cls=True)
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, "exp", post=False, seed=31)
    table = torch.rand(table.shape, generator=gen(32), dtype=F64) * 100 - 50  # b ∈ [−50, 50]
    table[:, 0, 0], table[:, -1, -1] = 50.0, -50.0
    cls_terms = torch.tensor([[50.0, -50.0, 50.0]] * HEADS, dtype=F64)
    args = [t.to(dtype) for t in (q_num, k_num, q_den, k_den, v)]
    out = biased_linear_attention(*args, grid, table.to(dtype), cls_terms.to(dtype))
    weights = biased_linear_weights(*args[:4], grid, table.to(dtype), cls_terms.to(dtype))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    # compare with the unshifted float64 reference (e^±50 is representable there). FFT round-off is
    # absolute (≈ machine ε × the head's largest weight), so a row whose largest bias sits `gap` below
    # the head's max has relative error ≈ ε·e^gap: float64 is accurate everywhere here, float32 on
    # the rows with gap ≤ 5 (the documented limitation of one shared shift)
    bias = reference_bias(table, cls_terms, grid)
    expected = reference_attention(q_num, k_num, q_den, k_den, v, bias)
    error = (out.double() - expected).abs().amax(dim=(0, -1))  # (h, T)
    if dtype == F64:
        assert error.max() <= 1e-8
    else:
        gap = torch.maximum(table.flatten(1).amax(1), cls_terms.amax(1))[:, None] - bias.amax(-1)  # (h, T)
        assert (gap <= 5).sum() > 20 and error[gap <= 5].max() <= 1e-3
    torch.testing.assert_close(
        weights.sum(-1).double(), torch.ones(BATCH, HEADS, grid.num_tokens, dtype=F64), rtol=0, atol=1e-5
    )


def test_cls_terms_far_above_the_table_set_the_shift():
    """CLS terms ≈ 800 over a N(0, 1) table: the shared shift must include them (exp(800) overflows
    float64), and the output equals the dense reference with every bias lowered by 800 (same attention)."""
    grid = Grid(5, 7, cls=True)
    q_num, k_num, q_den, k_den, v, table, _ = make_inputs(grid, "exp", post=False, seed=33)
    cls_terms = 800.0 + torch.rand(HEADS, 3, generator=gen(34), dtype=F64)  # each head's max is a CLS term
    out = biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    weights = biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, cls_terms, grid) - 800.0)
    assert torch.isfinite(expected).all()
    assert (out - expected).abs().max() <= 1e-10
    # patch rows see only the CLS key (exp(b − 800) underflows); the CLS row mixes CLS and patches
    torch.testing.assert_close(out[:, :, 1:], v[:, :, :1].expand_as(out[:, :, 1:]), rtol=0, atol=1e-10)
    assert (out[:, :, 0] - v[:, :, 0]).abs().max() > 1e-2
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(BATCH, HEADS, grid.num_tokens, dtype=F64), rtol=0, atol=1e-10
    )


def test_autocast_runs_in_float32():
    grid = GRIDS[0]
    args = [t.float() if t is not None else None for t in make_inputs(grid, "exp", seed=41)]
    expected = biased_linear_attention(*args[:5], grid, *args[5:])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = biased_linear_attention(*(t.bfloat16() for t in args[:5]), grid, *args[5:])
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert (out - expected).abs().max() < 0.1  # only the bf16 rounding of the inputs differs


def test_shape_errors():
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid)
    with pytest.raises(ValueError, match="table"):
        biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table[:, 1:], cls_terms)
    with pytest.raises(ValueError, match="tokens"):
        biased_linear_attention(q_num, k_num, q_den, k_den, v, Grid(5, 7, cls=False), table, None)


# 5. FAVOR+ with a relative bias approaches softmax(s + B) as m grows ---------------------------


def test_favor_with_bias_approaches_softmax_with_bias():
    grid = Grid(3, 4, cls=True)
    d = 8
    q = 0.5 * torch.randn(1, 2, grid.num_tokens, d, generator=gen(51), dtype=F64)
    k = 0.5 * torch.randn(1, 2, grid.num_tokens, d, generator=gen(52), dtype=F64)
    table = torch.randn(2, 5, 7, generator=gen(53), dtype=F64)
    cls_terms = torch.randn(2, 3, generator=gen(54), dtype=F64)
    bias = reference_bias(table, cls_terms, grid)
    exact = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d) + bias, dim=-1)
    errors = []
    for m in (16, 16384):
        torch.manual_seed(55)
        omega = orthogonal_gaussian_matrix(m, d, dtype=F64)
        phi_q, phi_k = favor_features(q, omega, "query", 0.0), favor_features(k, omega, "key", 0.0)
        weights = biased_linear_weights(phi_q, phi_k, phi_q, phi_k, grid, table, cls_terms)
        errors.append((weights - exact).abs().max().item())
    assert errors[1] < 0.03 and errors[1] < errors[0] / 3  # Monte-Carlo error ~ 1/√m


def test_compute_dtype_of_is_at_least_float32_and_keeps_float64():
    from rpevit.core.precision import compute_dtype_of

    half, f64 = torch.zeros(1, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.float64)
    assert compute_dtype_of(half) == torch.float32
    assert compute_dtype_of(half, None, f64) == torch.float64
    assert compute_dtype_of(None) == torch.float32


def test_shape_error_messages_name_the_expected_shapes():
    """Found by mutation testing (reports/bench/mutation.md): the messages must give the (2H−1, 2W−1) table and
    the (heads, 3) cls_terms shapes, and the shape actually received."""
    grid = GRIDS[0]  # 5×7: table (heads, 9, 13)
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid)
    with pytest.raises(ValueError, match=rf"^table must be \(heads={HEADS}, 9, 13\) for a 5×7 grid, got "):
        biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table[:, 1:], cls_terms)
    with pytest.raises(ValueError, match=rf"^cls_terms must be \(heads={HEADS}, 3\), got \({HEADS}, 2\)$"):
        biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms[:, :2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_operator_bytes_per_channel_is_the_spectrum_size(dtype):
    """The chunking budget counts one channel's rfft2 spectrum on the P×Q torus: P·(Q/2+1) complex numbers."""
    operator = toeplitz.FFTOperator(5, 7)
    spectrum = torch.fft.rfft2(torch.zeros(operator.size, dtype=dtype))
    assert operator.bytes_per_channel(5, 7, dtype) == spectrum.numel() * spectrum.element_size()


@pytest.mark.parametrize(
    "m,d,widths",
    [(8, 16, [178, 81, 45, 23, 12]), (32, 32, [None, 239, 133, 67, 35]), (112, 32, [None, 324, 178, 89, 45])],
)
def test_fft_cost_rule_crossovers_are_pinned(m, d, widths):
    """The auto rule's FFT-vs-dense decision (fft_is_cheaper's docstring: 1.2·3·(m·d + m)·PQ·log2 PQ against
    T²·(2m + d)) flips at these widths for heights 4, 8, 16, 32, 64 (None: dense up to width 400); a change of
    the cost model moves them, and reports/bench/cpu_bias.md measured the rule at these constants."""
    from rpevit.core.attention.toeplitz import fft_is_cheaper

    def crossover(height):
        return next((w for w in range(1, 400) if fft_is_cheaper(Grid(height, w), m, d)), None)

    assert [crossover(h) for h in (4, 8, 16, 32, 64)] == widths
    # T counts the CLS token: without it the 16-row crossover for m = d = 32 is the same 133 columns
    assert next(w for w in range(1, 400) if fft_is_cheaper(Grid(16, w, cls=False), 32, 32)) == 133


# boundaries found by mutation testing (reports/bench/mutation.md) -------------------------------------

NAMES = ("q_num", "k_num", "q_den", "k_den", "v", "table", "cls_terms")


def fft_out(q_num, k_num, q_den, k_den, v, grid, table, cls_terms, **kw):
    return biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms, **kw)


def dense_out(q_num, k_num, q_den, k_den, v, grid, table, cls_terms, **kw):
    return biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms, **kw) @ v


@pytest.mark.parametrize(
    "path,wide",
    [(fft_out, n) for n in NAMES] + [(dense_out, n) for n in NAMES if n != "v"],  # v does not enter the weights
    ids=lambda x: getattr(x, "__name__", x),
)
def test_any_float64_input_makes_the_whole_computation_float64(path, wide):
    """max(float32, every input) is the compute dtype: one float64 input among float32 ones gives float64
    results equal to the float64 reference to 1e-12 (float32 round-off anywhere would be ≈ 1e-7)."""
    grid = GRIDS[0]
    inputs = dict(zip(NAMES, make_inputs(grid, post=True, seed=50)))
    inputs = {n: t if n == wide else t.float().double() for n, t in inputs.items()}
    expected = reference_attention(
        *(inputs[n] for n in NAMES[:5]), reference_bias(inputs["table"], inputs["cls_terms"], grid)
    )
    mixed = [t if n == wide else t.float() for n, t in inputs.items()]
    if path is dense_out:
        mixed[4] = mixed[4].double()  # the float64 weights @ v needs v in float64 too
    out = path(*mixed[:5], grid, *mixed[5:])
    assert out.dtype == F64
    assert float((out - expected).abs().max() / expected.abs().max()) <= 1e-12


@pytest.mark.parametrize("path", [fft_out, dense_out], ids=["fft", "dense"])
def test_eps_reaches_both_paths(path):
    """An infinite denominator floor makes every output exactly zero: both paths pass `eps` on."""
    grid = GRIDS[0]
    out = path(*make_inputs(grid, seed=51)[:5], grid, *make_inputs(grid, seed=51)[5:], eps=math.inf)
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("path", [fft_out, dense_out], ids=["fft", "dense"])
@pytest.mark.parametrize("shared", ["query", "key"])
def test_features_shared_on_one_side_only(path, shared):
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, post=True, seed=52)
    q_num, k_num = (q_den, k_num) if shared == "query" else (q_num, k_den)
    expected = reference_attention(q_num, k_num, q_den, k_den, v, reference_bias(table, cls_terms, grid))
    assert (path(q_num, k_num, q_den, k_den, v, grid, table, cls_terms) - expected).abs().max() <= 1e-10


@pytest.mark.parametrize("path", [fft_out, dense_out], ids=["fft", "dense"])
def test_shape_messages(path):
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, seed=53)
    with pytest.raises(ValueError, match=r"^cls_terms must be \(heads=3, 3\), got \(3, 2\)$"):
        path(q_num, k_num, q_den, k_den, v, grid, table, cls_terms[:, :2])
    with pytest.raises(ValueError, match=r"^table must be \(heads=3, 9, 13\) for a 5×7 grid, got \(3, 9, 12\)$"):
        path(q_num, k_num, q_den, k_den, v, grid, table[..., 1:], cls_terms)


@pytest.mark.parametrize("term", [0, 1, 2], ids=["cls_to_patch", "patch_to_cls", "cls_to_cls"])
@pytest.mark.parametrize("path", [fft_out, dense_out], ids=["fft", "dense"])
def test_one_cls_term_far_above_the_rest(path, term):
    """One CLS term 800 above everything else: each query's row is shifted by its own maximum (patch queries:
    table and patch→CLS; the CLS query: CLS→patch and CLS→CLS), so no row underflows to zero. Reference:
    the dense computation with every row shifted by its own maximum (exact: a row's shift cancels)."""
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v, table, cls_terms = make_inputs(grid, post=True, seed=54)
    cls_terms = cls_terms + 800.0 * torch.nn.functional.one_hot(torch.tensor(term), 3).to(F64)
    bias = reference_bias(table, cls_terms, grid)
    expected = reference_attention(q_num, k_num, q_den, k_den, v, bias - bias.amax(-1, keepdim=True))
    out = path(q_num, k_num, q_den, k_den, v, grid, table, cls_terms)
    assert torch.isfinite(out).all()
    assert float((out - expected).abs().max()) <= 1e-10


@pytest.mark.parametrize("path", [fft_out, dense_out], ids=["fft", "dense"])
def test_a_table_beyond_exp_range_without_cls(path):
    """No CLS token, a table 400 above zero (exp overflows float64 at 709 once doubled): the shift is the
    table's maximum, and the result equals the same table lowered by 400 (a constant shift cancels)."""
    grid = GRIDS[1]
    q_num, k_num, q_den, k_den, v, table, _ = make_inputs(grid, post=True, seed=55)
    out = path(q_num, k_num, q_den, k_den, v, grid, table + 400.0, None)
    assert torch.isfinite(out).all()
    assert float((out - path(q_num, k_num, q_den, k_den, v, grid, table, None)).abs().max()) <= 1e-10


@pytest.mark.parametrize("width", [5, 8])  # torus widths fft_size(9) = 9 (odd) and fft_size(15) = 15
def test_toeplitz_correlate_on_odd_tori(width):
    """The reference FFT correlation keeps its torus size on both axes, also where it is odd."""
    x = torch.randn(1, 2, 3, 4, width, generator=gen(56), dtype=F64)
    kernel = torch.randn(2, 7, 2 * width - 1, generator=gen(57), dtype=F64)
    y = toeplitz_correlate(x, kernel)
    rows, cols = torch.meshgrid(torch.arange(4), torch.arange(width), indexing="ij")
    r, c = rows.flatten(), cols.flatten()
    gathered = kernel[:, (r[None, :] - r[:, None]) + 3, (c[None, :] - c[:, None]) + width - 1]  # (h, N_i, N_j)
    expected = torch.einsum("hij,bhcj->bhci", gathered, x.flatten(-2)).unflatten(-1, (4, width))
    assert float((y - expected).abs().max()) <= 1e-10
