"""Tests for separable relative biases: rpevit.core.attention.separable (exact axis-by-axis linear attention)
and rpevit.core.position.separable (manhattan, axial_rpe).

The reference is the dense masked computation in float64: B gathered from the table r ⊕ c by
relative.dense_bias, then (ψQψKᵀ ∘ exp(B)) V / rowsum(φQφKᵀ ∘ exp(B)), with no shift and no clamp.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from rpevit.core.attention import separable as sep
from rpevit.core.attention.kernel_sums import kernel_sums
from rpevit.core.attention.separable import (
    AxisOperator,
    DecayOperator,
    choose_path,
    decay_logits,
    geometric,
    separable_linear_attention,
    weights,
)
from rpevit.core.attention.toeplitz import FFTOperator, biased_linear_weights, circulant_torus
from rpevit.core.checks import relative_violation
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.position.relative import alibi_slopes, dense_bias
from rpevit.core.position.separable import AxialRPE, AxialRPEOptions, ManhattanDecay, ManhattanOptions

from helpers import LargestTensor

F64 = torch.float64
BATCH, HEADS, M, D = 2, 3, 4, 5
GRIDS = [Grid(3, 5, cls=True), Grid(3, 5, cls=False)]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def config(pool="cls", side=7):
    return SimpleNamespace(heads=HEADS, dim=8 * HEADS, patch_size=4, image_size=4 * side, pool=pool)


def make_inputs(grid, post=False, seed=0, heads=HEADS, m=M, d=D):
    """(q_num, k_num, q_den, k_den, v) in float64; ψ ≡ φ (the same tensors) unless `post`."""
    shape = (BATCH, heads, grid.num_tokens, m)
    q_den = (0.5 * torch.randn(*shape, generator=gen(seed), dtype=F64)).exp() / math.sqrt(m)
    k_den = torch.relu(torch.randn(*shape, generator=gen(seed + 1), dtype=F64)) + 1e-3
    if post:  # a post-map-like numerator: signed, different from the denominator features
        q_num = q_den * torch.randn(*shape, generator=gen(seed + 2), dtype=F64)
        k_num = k_den * torch.randn(*shape, generator=gen(seed + 3), dtype=F64)
    else:
        q_num, k_num = q_den, k_den
    v = torch.randn(BATCH, heads, grid.num_tokens, d, generator=gen(seed + 4), dtype=F64)
    return q_num, k_num, q_den, k_den, v


def make_factors(grid, seed=10, heads=HEADS, scale=1.0):
    """Asymmetric random row (h, 2H−1) and column (h, 2W−1) logits and CLS terms (h, 3) or None."""
    row = scale * torch.randn(heads, 2 * grid.height - 1, generator=gen(seed), dtype=F64)
    col = scale * torch.randn(heads, 2 * grid.width - 1, generator=gen(seed + 1), dtype=F64)
    cls = torch.randn(heads, 3, generator=gen(seed + 2), dtype=F64) if grid.cls else None
    return row, col, cls


def reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls):
    """(ψQψKᵀ ∘ exp(B)) V / rowsum(φQφKᵀ ∘ exp(B)), B from the table r ⊕ c, float64, unshifted."""
    bias = dense_bias(row[:, :, None] + col[:, None, :], cls, grid).exp()
    numerator = (q_num @ k_num.transpose(-2, -1)) * bias
    denominator = ((q_den @ k_den.transpose(-2, -1)) * bias).sum(-1, keepdim=True)
    return (numerator @ v) / denominator


# 1. every path == the dense reference (float64, non-square grid, with/without CLS, asymmetric) -----


@pytest.mark.parametrize("grid", GRIDS, ids=["cls", "no_cls"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
@pytest.mark.parametrize("path", ["axis", "fft", "dense", "auto"])
def test_separable_paths_equal_dense_reference(grid, post, path):
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post)
    row, col, cls = make_factors(grid)
    assert (row - row.flip(-1)).abs().max() > 0.5 and (col - col.flip(-1)).abs().max() > 0.5  # b(Δ) ≠ b(−Δ)
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path=path)
    assert out.dtype == F64 and out.shape == (BATCH, HEADS, grid.num_tokens, D)
    assert (out - expected).abs().max() <= 1e-10
    f32 = [t.float() for t in (q_num, k_num, q_den, k_den, v)]
    if not post:
        f32[2], f32[3] = f32[0], f32[1]
    out32 = separable_linear_attention(
        *f32, grid, row.float(), col.float(), None if cls is None else cls.float(), path=path
    )
    assert out32.dtype == torch.float32 and (out32.double() - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("grid", GRIDS, ids=["cls", "no_cls"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
@pytest.mark.parametrize("path", ["scan", "axis", "auto"])
def test_decay_paths_equal_dense_reference(grid, post, path):
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post, seed=20)
    cls = make_factors(grid, seed=21)[2]
    rates = torch.tensor([[0.3, 1.1], [0.05, 0.05], [2.0, 0.7]], dtype=F64)  # (h, 2): λ_row ≠ λ_col
    row, col = decay_logits(rates, grid)
    assert torch.allclose(row[0], -0.3 * torch.tensor([2, 1, 0, 1, 2], dtype=F64))
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=rates, path=path)
    assert (out - expected).abs().max() <= 1e-10
    same = separable_linear_attention(
        q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=rates[:, 0], path=path
    )  # (h,): one rate for both axes
    row, col = decay_logits(rates[:, :1].expand(-1, 2), grid)
    assert (same - reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)).abs().max() <= 1e-10


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_decay_offsets_are_integers_rounded_once_at_any_side(dtype):
    """|Δ| is built as integers and rounded once to the rates' dtype: an arange in bf16 drifts past 256
    (it gave −300 where −298 is meant on a side of 300)."""
    grid = Grid(300, 3, cls=False)
    row, col = decay_logits(torch.ones(2, 2, dtype=dtype), grid)
    offsets = torch.arange(-299, 300).abs()
    assert (
        row.dtype == dtype
        and torch.equal(row[0], -offsets.to(dtype))
        and torch.equal(col[1], -torch.tensor([2, 1, 0, 1, 2]).to(dtype))
    )
    assert float(row[0, 299 - 298]) == -298.0


def test_weights_is_the_dense_matrix_of_the_fast_paths():
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=True, seed=30)
    row, col, cls = make_factors(grid, seed=31)
    matrix = weights(q_num, k_num, q_den, k_den, grid, row, col, cls)
    assert matrix.shape == (BATCH, HEADS, grid.num_tokens, grid.num_tokens)
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path="axis")
    assert (matrix @ v - out).abs().max() <= 1e-10
    reference_matrix = biased_linear_weights(q_num, k_num, q_den, k_den, grid, row[:, :, None] + col[:, None, :], cls)
    assert (matrix - reference_matrix).abs().max() <= 1e-12
    # with the identity as values, a fast path returns its own attention matrix
    eye = torch.eye(grid.num_tokens, dtype=F64).expand(BATCH, HEADS, -1, -1)
    assert (
        separable_linear_attention(q_num, k_num, q_den, k_den, eye, grid, row, col, cls, path="axis") - matrix
    ).abs().max() <= 1e-12


@pytest.mark.parametrize("height,width", [(1, 6), (6, 1), (2, 9), (7, 3)])
def test_other_grid_shapes(height, width):
    grid = Grid(height, width, cls=True)
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=True, seed=height)
    row, col, cls = make_factors(grid, seed=width)
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    for path in ("axis", "fft"):
        out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path=path)
        assert (out - expected).abs().max() <= 1e-10, path
    rates = torch.tensor([0.4, 0.0, 3.0], dtype=F64)  # λ = 0: no decay at all
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=rates, path="scan")
    row, col = decay_logits(rates, grid)
    assert (out - reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)).abs().max() <= 1e-10


@pytest.mark.parametrize("budget", [1, 700, 10**9], ids=["one_feature", "some_features", "many_slabs"])
@pytest.mark.parametrize("op_name", ["axis", "scan", "fft"])
def test_chunking_does_not_change_results(op_name, budget):
    """Chunks of one feature, of several features, and of several (batch, head) slabs agree."""
    grid = Grid(4, 5, cls=False)
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=True, seed=40, m=7)
    row, col, _ = make_factors(grid, seed=41)
    if op_name == "scan":
        rates = torch.tensor([0.2, 0.9, 1.5], dtype=F64)
        row, col = decay_logits(rates, grid)
        op, params = DecayOperator(4, 5), [torch.exp(-rates), torch.exp(-rates)]
    elif op_name == "axis":
        op, params = AxisOperator(4, 5), [sep.toeplitz_matrix(row, 4).exp(), sep.toeplitz_matrix(col, 5).exp()]
    else:
        op, params = FFTOperator(4, 5), [circulant_torus((row[:, :, None] + col[:, None, :]).exp(), 4, 5)]
    num, den = kernel_sums(op, params, q_num, k_num, q_den, k_den, v, budget=budget)
    kernel = dense_bias(row[:, :, None] + col[:, None, :], None, grid).exp()
    expected_num = ((q_num @ k_num.transpose(-2, -1)) * kernel) @ v
    expected_den = ((q_den @ k_den.transpose(-2, -1)) * kernel).sum(-1, keepdim=True)
    assert (num - expected_num).abs().max() <= 1e-10 and (den - expected_den).abs().max() <= 1e-10


def test_geometric_recurrence_matches_matrix():
    x = torch.randn(2, 3, 6, 4, generator=gen(50), dtype=F64)
    gamma = torch.tensor([0.3, 0.9], dtype=F64)
    for dim, size in ((-1, 4), (-2, 6)):
        index = torch.arange(size)
        matrix = gamma[:, None, None] ** (index[None, :] - index[:, None]).abs()  # (2, L, L)
        expected = torch.einsum("gts,gcs...->gct...", matrix, x.movedim(dim, 2)).movedim(2, dim)
        assert (geometric(x, gamma, dim) - expected).abs().max() <= 1e-12


# 2. gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
@pytest.mark.parametrize("path", ["axis", "scan", "fft"])
def test_gradients_match_dense_path(path, post):
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = (t.clone().requires_grad_() for t in make_inputs(grid, post, seed=60))
    if not post:
        q_den, k_den = q_num, k_num
    row, col, cls = (t.clone().requires_grad_() for t in make_factors(grid, seed=61))
    rates = torch.tensor([0.3, 1.2, 0.05], dtype=F64, requires_grad=True)
    target = torch.randn(BATCH, HEADS, grid.num_tokens, D, generator=gen(62), dtype=F64)
    features = [q_num, k_num] + ([q_den, k_den] if post else [])
    if path == "scan":
        leaves = features + [v, rates, cls]
        fast = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=rates, path=path)
        dense = weights(q_num, k_num, q_den, k_den, grid, *decay_logits(rates, grid), cls) @ v
    else:
        leaves = features + [v, row, col, cls]
        fast = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path=path)
        dense = weights(q_num, k_num, q_den, k_den, grid, row, col, cls) @ v
    fast_grads = torch.autograd.grad((fast * target).sum(), leaves)
    dense_grads = torch.autograd.grad((dense * target).sum(), leaves)
    for a, b in zip(fast_grads, dense_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    assert all(g.abs().max() > 0 for g in fast_grads)


@pytest.mark.parametrize("op_name", ["axis", "scan", "fft"])
@pytest.mark.parametrize("post", [False, True], ids=["num=den", "post_map"])
def test_gradcheck_of_the_chunked_function(op_name, post):
    """torch.autograd.gradcheck of kernel_sums' own backward, two chunks per call (budget: 1 feature)."""
    grid = Grid(2, 3, cls=False)
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post, seed=70, heads=2, m=2, d=2)
    if op_name == "axis":
        op = AxisOperator(2, 3)
        params = [torch.rand(2, 2, 2, generator=gen(71), dtype=F64), torch.rand(2, 3, 3, generator=gen(72), dtype=F64)]
    elif op_name == "scan":
        op, params = DecayOperator(2, 3), [torch.tensor([0.3, 0.8], dtype=F64), torch.tensor([0.6, 0.1], dtype=F64)]
    else:
        op, params = FFTOperator(2, 3), [torch.rand(2, 3, 5, generator=gen(73), dtype=F64)]
    tensors = [t.clone().requires_grad_() for t in ([q_num, k_num] + ([q_den, k_den] if post else []) + [v] + params)]

    def function(*args):
        q, k = args[:2]
        qd, kd = (args[2], args[3]) if post else (q, k)
        rest = args[4:] if post else args[2:]
        return kernel_sums(op, list(rest[1:]), q, k, qd, kd, rest[0], budget=1)

    assert torch.autograd.gradcheck(function, tensors, atol=1e-8, fast_mode=op_name == "fft")


# 3. the modules ------------------------------------------------------------------------------------


def manhattan(learnable=False, pool="cls", seed=None):
    module = ManhattanDecay(ManhattanOptions(learnable=learnable), 8, HEADS, side=7, cls=pool == "cls").double()
    if seed is not None:
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=gen(seed), dtype=F64))
    return module


def axial(extrapolation="clamp", pool="cls", seed=None):
    module = AxialRPE(AxialRPEOptions(extrapolation=extrapolation), 8, HEADS, side=7, cls=pool == "cls").double()
    if seed is not None:
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen(seed + p.numel()), dtype=F64))
    return module


def test_module_options_parameters_and_defaults():
    assert ManhattanDecay.Options is ManhattanOptions and AxialRPE.Options is AxialRPEOptions
    fixed, learned, table = manhattan(), manhattan(learnable=True), axial()
    assert sum(p.numel() for p in fixed.parameters()) == 0 and "slopes" not in fixed.state_dict()
    assert fixed.cls_terms() is None
    torch.testing.assert_close(fixed.decay_rates(), torch.tensor(alibi_slopes(HEADS), dtype=F64))
    torch.testing.assert_close(learned.decay_rates(), fixed.decay_rates())  # same init
    assert learned.log_rates.shape == (HEADS,) and learned.cls_bias.shape == (HEADS, 3)
    assert table.row_table.shape == (HEADS, 13) and table.col_table.shape == (HEADS, 13)  # 7×7 trained grid
    assert 0 < table.row_table.abs().max() <= 0.04 and table.cls_bias.abs().max() == 0
    for module in (learned, table):
        assert all(getattr(p, "no_weight_decay", False) for p in module.parameters())
    assert manhattan(True, pool="mean").cls_terms() is None and axial(pool="mean").cls_terms() is None
    with torch.no_grad():
        learned.log_rates.fill_(-30.0)
    assert (learned.decay_rates() > 0).all()  # positive for any parameter value
    with pytest.raises(Exception, match="extrapolation"):
        AxialRPE(AxialRPEOptions(extrapolation="wrap"), 8, HEADS, side=7, cls=True)


@pytest.mark.parametrize(
    "make",
    [manhattan, lambda **k: manhattan(learnable=True, **k), axial],
    ids=["manhattan", "manhattan_learnable", "axial_rpe"],
)
@pytest.mark.parametrize(
    "grid", [Grid(5, 7, cls=True), Grid(7, 7, cls=False), Grid(9, 4, cls=True)], ids=["5x7", "trained", "9x4"]
)
def test_factors_sum_to_the_table_and_dense_gathers_it(make, grid):
    module = make(seed=3)
    row, col = module.factors(grid)
    assert row.shape == (HEADS, 2 * grid.height - 1) and col.shape == (HEADS, 2 * grid.width - 1)
    table = module.table(grid)
    assert torch.equal(table, row[:, :, None] + col[:, None, :])
    cls = module.cls_terms() if grid.cls else None
    assert torch.equal(module.dense(grid), dense_bias(table, cls, grid))


def test_manhattan_is_minus_rate_times_l1_distance():
    module = manhattan()
    grid = Grid(4, 6)
    table = module.table(grid)
    slopes = torch.tensor(alibi_slopes(HEADS), dtype=F64)
    for a in range(7):
        for b in range(11):
            torch.testing.assert_close(table[:, a, b], -slopes * (abs(a - 3) + abs(b - 5)), rtol=0, atol=1e-15)
    torch.testing.assert_close(module.axis_rates(grid), slopes[:, None].expand(-1, 2))
    scaled = Grid(14, 28, trained=(7, 7), interpolate=True)  # scale (1/2, 1/4)
    torch.testing.assert_close(module.axis_rates(scaled), slopes[:, None] * torch.tensor([0.5, 0.25], dtype=F64))
    row, col = module.factors(scaled)
    torch.testing.assert_close((row, col), decay_logits(module.axis_rates(scaled), scaled))


def test_axial_rpe_extrapolation_policies():
    clamp, interp = axial("clamp", seed=5), axial("interpolate", seed=5)
    assert clamp.factors(Grid(7, 7))[0] is clamp.row_table  # the trained grid reads the tables unchanged
    row, col = clamp.factors(Grid(12, 5))  # rows ±11 clamped to ±6; columns: the central part
    for a in range(23):
        assert torch.equal(row[:, a], clamp.row_table[:, min(max(a - 11, -6), 6) + 6])
    assert torch.equal(col, clamp.col_table[:, 2:11])
    # interpolate: each axis resized bicubically == krpe's 2D bicubic resize of the summed table
    big = Grid(12, 9)
    row, col = interp.factors(big)
    trained_table = interp.table(Grid(7, 7))
    resized = torch.nn.functional.interpolate(trained_table[None], size=(23, 17), mode="bicubic", align_corners=False)[
        0
    ]
    torch.testing.assert_close(row[:, :, None] + col[:, None, :], resized, rtol=0, atol=1e-12)
    torch.testing.assert_close(row[:, 11], interp.row_table[:, 6], rtol=0, atol=1e-12)  # the centre is kept
    # position-interpolation mode resizes a larger grid whatever the policy
    scaled = Grid(12, 9, trained=(7, 7), interpolate=True)
    torch.testing.assert_close(clamp.factors(scaled), interp.factors(big))


# 4. relative property (docs/methods.md §5) in every backend form -----------------------------------


@pytest.mark.parametrize(
    "make",
    [lambda: manhattan(), lambda: manhattan(True, seed=7), lambda: axial(seed=7)],
    ids=["manhattan", "manhattan_learnable", "axial_rpe"],
)
def test_relative_property_softmax_and_linear(make):
    module = make()
    grid = Grid(5, 7, cls=True)
    table = module.table(grid)
    bias = module.dense(grid)  # (h, T, T)
    # softmax: identical tokens give identical logits s, so A = softmax(s + B) row-wise
    softmax = torch.softmax(0.3 + bias, dim=-1)
    assert relative_violation(softmax, grid) < 1e-12
    assert (table.amax((1, 2)) - table.amin((1, 2))).min() > 1e-2  # not vacuous
    # linear attention (favor-like exp features, relu features): the fast paths' own matrices
    eye = torch.eye(grid.num_tokens, dtype=F64).expand(1, HEADS, -1, -1)
    row, col = module.factors(grid)
    cls = module.cls_terms()
    for kind, feature in (
        ("favor", torch.rand(1, 1, 1, M, generator=gen(8), dtype=F64).exp()),
        ("relu", torch.relu(torch.randn(1, 1, 1, M, generator=gen(9), dtype=F64)) + 1e-3),
    ):
        phi = feature.expand(1, HEADS, grid.num_tokens, M)
        paths = ["axis", "fft"] + (["scan"] if isinstance(module, ManhattanDecay) else [])
        for path in paths:
            decay = module.axis_rates(grid) if path == "scan" else None
            matrix = separable_linear_attention(phi, phi, phi, phi, eye, grid, row, col, cls, decay=decay, path=path)
            assert relative_violation(matrix, grid) < 1e-10, (kind, path)
    # an absolute perturbation fails it
    noise = torch.randn(grid.num_tokens, grid.num_tokens, generator=gen(10), dtype=F64)
    assert relative_violation(torch.softmax(bias + noise, dim=-1), grid) > 1e-2


# 5. multi-resolution -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [manhattan, axial, lambda **k: axial("interpolate", **k)],
    ids=["manhattan", "axial_clamp", "axial_interpolate"],
)
@pytest.mark.parametrize(
    "grid",
    [Grid(10, 12, cls=True), Grid(4, 4, cls=True), Grid(14, 14, cls=True, trained=(7, 7), interpolate=True)],
    ids=["larger", "smaller", "interpolation_mode"],
)
def test_multi_resolution_forward(make, grid):
    module = make(seed=11)
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=False, seed=12, heads=HEADS)
    row, col = module.factors(grid)
    cls = module.cls_terms()
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    for path in ("axis", "auto"):
        out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path=path)
        assert (out - expected).abs().max() <= 1e-10
    if isinstance(module, ManhattanDecay):
        out = separable_linear_attention(
            q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=module.axis_rates(grid), path="scan"
        )
        assert (out - expected).abs().max() <= 1e-10


# 6. stability and training ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_large_logits_stay_finite(dtype):
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=False, seed=80)
    row, col, cls = make_factors(grid, seed=81, scale=30.0)  # weights e^(±60): overflow without the shift
    cls = torch.tensor([[40.0, -40.0, 60.0]] * HEADS, dtype=F64)
    args = [t.to(dtype) for t in (q_num, k_num, q_den, k_den, v)]
    args[2], args[3] = args[0], args[1]
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    for path in ("axis", "scan", "dense"):
        if path == "scan":
            decay = torch.tensor([40.0, 0.0, 80.0], dtype=F64)  # γ = e^(−80) underflows in float32
            out = separable_linear_attention(*args, grid, None, None, cls.to(dtype), decay=decay.to(dtype), path=path)
            want = reference(q_num, k_num, q_den, k_den, v, grid, *decay_logits(decay, grid), cls)
        else:
            out = separable_linear_attention(*args, grid, row.to(dtype), col.to(dtype), cls.to(dtype), path=path)
            want = expected
        assert torch.isfinite(out).all()
        # per-query shifts: every row is accurate to its own scale, however far its logits sit below the
        # head's largest one (the FFT path's single shift loses such rows in float32, see test_toeplitz)
        tolerance = 1e-10 if dtype == F64 else 1e-4
        assert ((out.double() - want).abs() / want.abs().amax(-1, keepdim=True)).max() <= tolerance, path


def test_few_training_steps_keep_gradients_finite():
    torch.manual_seed(0)
    grid = Grid(6, 5, cls=True)
    modules = [manhattan(learnable=True), axial()]
    q = torch.randn(2, HEADS, grid.num_tokens, M, dtype=F64, requires_grad=True)
    k = torch.randn(2, HEADS, grid.num_tokens, M, dtype=F64, requires_grad=True)
    v = torch.randn(2, HEADS, grid.num_tokens, D, dtype=F64)
    target = torch.randn(2, HEADS, grid.num_tokens, D, dtype=F64)
    params = [q, k] + [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.5)
    for _ in range(4):
        loss = 0
        for module, path in ((modules[0], "scan"), (modules[0], "axis"), (modules[1], "axis")):
            phi_q, phi_k = torch.relu(q) + 1e-3, torch.relu(k) + 1e-3
            decay = module.axis_rates(grid) if path == "scan" else None
            out = separable_linear_attention(
                phi_q, phi_k, phi_q, phi_k, v, grid, *module.factors(grid), module.cls_terms(), decay=decay, path=path
            )
            loss = loss + (out - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
        assert all(p.grad.abs().max() > 0 for m in modules for p in m.parameters())
        optimizer.step()
    assert (modules[0].decay_rates() > 0).all()


def test_autocast_runs_in_float32():
    grid = GRIDS[0]
    q, k, _, _, v = (t.float() for t in make_inputs(grid, seed=90))
    row, col, cls = (t.float() for t in make_factors(grid, seed=91))
    expected = separable_linear_attention(q, k, q, k, v, grid, row, col, cls, path="axis")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q16, k16 = q.bfloat16(), k.bfloat16()
        out = separable_linear_attention(q16, k16, q16, k16, v.bfloat16(), grid, row, col, cls, path="axis")
    assert out.dtype == torch.float32 and (out - expected).abs().max() < 0.1


# 7. memory, dispatch, errors -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["axis", "scan"])
def test_no_per_query_sums_for_all_tokens(path, monkeypatch):
    """Forward and backward on a 32×32 grid, m = d = 16: no tensor beyond the chunk budget, nowhere near
    N·m·d; saved tensors O(N·(m + d))."""
    budget = 1 << 17  # one feature's channels, (d + 1)·N floats, per chunk
    monkeypatch.setattr(sep, "AXIS_CHUNK_BYTES", budget)
    monkeypatch.setattr(sep, "SCAN_CHUNK_BYTES", budget)
    side, m, d = 32, 16, 16
    grid = Grid(side, side, cls=True)
    g = gen(100)
    q = (0.3 * torch.randn(1, 1, grid.num_tokens, m, generator=g)).exp().requires_grad_()
    k = (0.3 * torch.randn(1, 1, grid.num_tokens, m, generator=g)).exp().requires_grad_()
    v = torch.randn(1, 1, grid.num_tokens, d, generator=g, requires_grad=True)
    rates = torch.tensor([0.3], requires_grad=True)
    row, col = (t.detach().requires_grad_() for t in decay_logits(rates.detach(), grid))
    saved = []
    with (
        LargestTensor() as probe,
        torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t),
    ):
        out = separable_linear_attention(
            q, k, q, k, v, grid, row, col, None, decay=rates if path == "scan" else None, path=path
        )
        out.square().sum().backward()
    n = grid.num_patches
    assert probe.largest * 4 <= budget and probe.largest <= n * m * d / 8  # float32 chunks
    assert sum(saved) < 12 * n * (m + d)
    assert torch.isfinite(q.grad).all() and (rates.grad if path == "scan" else row.grad).abs().max() > 0


def test_choose_path_rule():
    assert choose_path(Grid(7, 7), decay=False) == "dense"
    assert choose_path(Grid(16, 16), decay=True) == "dense"
    assert choose_path(Grid(32, 32), decay=True) == "axis"
    assert choose_path(Grid(64, 64), decay=False) == "axis"
    assert choose_path(Grid(64, 64), decay=True) == "axis"
    assert choose_path(Grid(16, 16, cls=False), decay=False) == "dense"  # N = 256
    assert choose_path(Grid(16, 17, cls=False), decay=False) == "axis"


def test_choose_path_fft_crossovers_are_pinned():
    """ "fft" from the width where 4.8·3·(2H−1)(2W−1)·log2((2H−1)(2W−1)) drops below N·(H + W): pinned at
    heights 17, 32, 100 (m and d do not enter the rule)."""

    def crossover(height, m):
        grid = (Grid(height, w, cls=False) for w in range(1, 3000))
        return next(g.width for g in grid if choose_path(g, decay=True) == "fft")

    assert [crossover(h, 32) for h in (17, 32, 100)] == [866, 922, 963]
    assert crossover(32, 8) == 922


def test_errors():
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = make_inputs(grid)
    row, col, cls = make_factors(grid)
    with pytest.raises(ValueError, match="row logits"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row[:, 1:], col, cls)
    with pytest.raises(ValueError, match="path"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path="fast")
    with pytest.raises(ValueError, match="scan"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path="scan")
    with pytest.raises(ValueError, match="scan"):
        separable_linear_attention(
            q_num,
            k_num,
            q_den,
            k_den,
            v,
            grid,
            None,
            None,
            cls,
            decay=torch.tensor([0.1, -0.1, 0.2], dtype=F64),
            path="scan",
        )
    with pytest.raises(ValueError, match="tokens"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, Grid(3, 5, cls=False), row, col, None)


# boundaries found by mutation testing (reports/bench/mutation.md) -------------------------------------

INPUT_NAMES = ("q_num", "k_num", "q_den", "k_den", "v", "row", "col", "cls")


@pytest.mark.parametrize("path", ["axis", "fft", "dense"])
@pytest.mark.parametrize("wide", INPUT_NAMES)
def test_any_float64_input_makes_the_whole_computation_float64(path, wide):
    """The compute dtype is max(float32, every input): one float64 input among float32 ones gives a float64
    result equal to the float64 reference to 1e-12 (float32 round-off anywhere would be ≈ 1e-7)."""
    grid = GRIDS[0]
    inputs = dict(zip(INPUT_NAMES, (*make_inputs(grid, post=True, seed=40), *make_factors(grid, seed=41))))
    inputs = {name: t if name == wide else t.float().double() for name, t in inputs.items()}  # float32 values
    expected = reference(*(inputs[n] for n in INPUT_NAMES[:5]), grid, inputs["row"], inputs["col"], inputs["cls"])
    mixed = [t if name == wide else t.float() for name, t in inputs.items()]
    out = separable_linear_attention(*mixed[:5], grid, *mixed[5:], path=path)
    assert out.dtype == F64
    assert float((out - expected).abs().max() / expected.abs().max()) <= 1e-12


@pytest.mark.parametrize("wide", ["q_num", "k_num", "q_den", "k_den", "v", "decay"])
def test_any_float64_input_of_the_scan_path_makes_it_float64(wide):
    grid = GRIDS[0]
    inputs = dict(zip(INPUT_NAMES[:5], make_inputs(grid, post=True, seed=42)))
    inputs["decay"] = torch.tensor([[0.3, 1.1], [0.05, 0.05], [2.0, 0.7]], dtype=F64)
    inputs = {name: t if name == wide else t.float().double() for name, t in inputs.items()}
    row, col = decay_logits(inputs["decay"], grid)
    expected = reference(*(inputs[n] for n in INPUT_NAMES[:5]), grid, row, col, None)
    mixed = {name: t if name == wide else t.float() for name, t in inputs.items()}
    out = separable_linear_attention(
        *(mixed[n] for n in INPUT_NAMES[:5]), grid, None, None, None, decay=mixed["decay"], path="scan"
    )
    assert out.dtype == F64
    assert float((out - expected).abs().max() / expected.abs().max()) <= 1e-12


@pytest.mark.parametrize("path", ["axis", "scan", "fft", "dense"])
def test_eps_reaches_every_path(path):
    """An infinite denominator floor makes every output exactly zero: each path passes its `eps` on."""
    grid = GRIDS[0]
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    out = separable_linear_attention(*make_inputs(grid, seed=43), grid, decay=rates, path=path, eps=math.inf)
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("path", ["axis", "scan", "fft", "dense"])
@pytest.mark.parametrize("shared", ["query", "key"])
def test_features_shared_on_one_side_only(path, shared):
    """ψ = φ for the queries but not for the keys (or the other way round): not taken for the fully shared case."""
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=True, seed=44)
    if shared == "query":
        q_num = q_den
    else:
        k_num = k_den
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    row, col = decay_logits(rates, grid)
    cls = make_factors(grid, seed=45)[2]
    expected = reference(q_num, k_num, q_den, k_den, v, grid, row, col, cls)
    out = separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, None, None, cls, decay=rates, path=path)
    assert (out - expected).abs().max() <= 1e-10


def test_error_messages_name_the_problem():
    grid = GRIDS[0]
    q_num, k_num, q_den, k_den, v = make_inputs(grid)
    row, col, cls = make_factors(grid)
    with pytest.raises(ValueError, match=r"path must be one of auto, axis, scan, fft, dense, got 'fast'"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path="fast")
    with pytest.raises(ValueError, match=r"^give row_logits and col_logits, or decay rates$"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, None, cls)
    with pytest.raises(ValueError, match=r"^the scan path needs decay rates λ ≥ 0$"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls, path="scan")
    with pytest.raises(ValueError, match=r"^decay rates must be λ ≥ 0 \(the scan recurrences"):
        separable_linear_attention(*make_inputs(grid), grid, decay=torch.tensor([0.1, -0.1, 0.2], dtype=F64))
    with pytest.raises(ValueError, match=r"cls_terms must be \(heads=3, 3\), got \(3, 2\)"):
        separable_linear_attention(q_num, k_num, q_den, k_den, v, grid, row, col, cls[:, :2])
    with pytest.raises(ValueError, match=r"decay rates must be \(heads=3,\) or \(3, 2\), got \(2,\)"):
        separable_linear_attention(*make_inputs(grid), grid, decay=torch.tensor([0.1, 0.2], dtype=F64))


def kernel_sums_case(op_name, shared=None, seed=80):
    """(op, params, q_num, k_num, q_den, k_den, v) for a 3×4 grid without CLS, float64; `shared`: None (ψ ≠ φ),
    "both" (ψ ≡ φ), "query" or "key" (ψ ≡ φ on that side only)."""
    grid = Grid(3, 4, cls=False)
    q_num, k_num, q_den, k_den, v = make_inputs(grid, post=True, seed=seed, m=3, d=2)
    if shared in ("both", "query"):
        q_num = q_den
    if shared in ("both", "key"):
        k_num = k_den
    row, col, _ = make_factors(grid, seed=seed + 1)
    if op_name == "axis":
        op, params = AxisOperator(3, 4), [sep.toeplitz_matrix(row, 3).exp(), sep.toeplitz_matrix(col, 4).exp()]
    elif op_name == "scan":
        op, params = (
            DecayOperator(3, 4),
            [torch.tensor([0.3, 0.8, 0.5], dtype=F64), torch.tensor([0.6, 0.1, 0.9], dtype=F64)],
        )
    else:
        op, params = FFTOperator(3, 4), [circulant_torus((row[:, :, None] + col[:, None, :]).exp(), 3, 4)]
    return op, params, q_num, k_num, q_den, k_den, v


def unshared(tensors):
    """The same values as distinct tensors (no sharing shortcut can apply)."""
    return [t.clone() for t in tensors]


@pytest.mark.parametrize("op_name", ["axis", "scan", "fft"])
@pytest.mark.parametrize("shared", ["both", "query", "key"])
@pytest.mark.parametrize("output", ["numerator", "denominator", "both"])
def test_kernel_sums_gradients_of_each_input_alone(op_name, shared, output):
    """Gradients with only one input requiring them (each in turn), of the numerator, the denominator or
    both, with ψ ≡ φ on both, one or no side: equal to the gradients of the same call on unshared copies
    with every input requiring gradients (the backward computes only what is needed, and computes it right)."""
    op, params, *features = kernel_sums_case(op_name, shared)
    weight_num = torch.randn(BATCH, HEADS, 12, 2, generator=gen(90), dtype=F64)
    weight_den = torch.randn(BATCH, HEADS, 12, 1, generator=gen(91), dtype=F64)

    def loss(num, den):
        return {"numerator": (num * weight_num).sum(), "denominator": (den * weight_den).sum()}.get(
            output, (num * weight_num).sum() + (den * weight_den).sum()
        )

    every = [t.clone().requires_grad_() for t in unshared(features + params)]
    expected = torch.autograd.grad(loss(*kernel_sums(op, every[5:], *every[:5], budget=10**9)), every)
    names = ["q_num", "k_num", "q_den", "k_den", "v"] + [f"param{i}" for i in range(len(params))]
    for index, name in enumerate(names):
        tensors = list(features) + [p.clone() for p in params]
        leaf = tensors[index].clone().requires_grad_()
        tensors = [leaf if t is tensors[index] else t for t in tensors]  # keeps ψ ≡ φ where it was shared
        num, den = kernel_sums(op, tensors[5:], *tensors[:5], budget=1)
        # a shared tensor's gradient is the sum over both of its roles
        total = sum(expected[j] for j in range(5) if features[j] is features[index]) if index < 5 else expected[index]
        (grad,) = torch.autograd.grad(loss(num, den), leaf, allow_unused=True)
        grad = torch.zeros_like(leaf) if grad is None else grad
        torch.testing.assert_close(grad, total, rtol=1e-9, atol=1e-11, msg=f"{name}: {output}, shared {shared}")


@pytest.mark.parametrize("op_name", ["axis", "scan", "fft"])
@pytest.mark.parametrize("shared", ["query", "key"])
def test_kernel_sums_with_features_shared_on_one_side(op_name, shared):
    op, params, *features = kernel_sums_case(op_name, shared, seed=85)
    num, den = kernel_sums(op, params, *features, budget=10**9)
    num_ref, den_ref = kernel_sums(op, params, *unshared(features), budget=10**9)
    assert (num - num_ref).abs().max() <= 1e-12 and (den - den_ref).abs().max() <= 1e-12


@pytest.mark.parametrize("path", ["axis", "scan", "fft", "dense"])
def test_cls_terms_beyond_exp_range_are_shifted_away(path):
    """A CLS→patch term of 800 (exp overflows float64): the CLS query's shift covers it, so the result is
    finite and equals the same attention with the CLS row's terms lowered by 800 (one shift per query)."""
    grid = GRIDS[0]
    inputs = make_inputs(grid, post=True, seed=95)
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    cls = make_factors(grid, seed=96)[2]
    high = cls + torch.tensor([800.0, 0.0, 0.0], dtype=F64)
    lowered = cls - torch.tensor([0.0, 0.0, 800.0], dtype=F64)
    out = separable_linear_attention(*inputs, grid, None, None, high, decay=rates, path=path)
    same = separable_linear_attention(*inputs, grid, None, None, lowered, decay=rates, path=path)
    assert torch.isfinite(out).all()
    assert (out - same).abs().max() <= 1e-10


def test_decay_rates_rebuild_both_axes_when_one_is_missing():
    grid = GRIDS[0]
    inputs = make_inputs(grid, seed=97)
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    row = make_factors(grid, seed=98)[0]
    expected = separable_linear_attention(*inputs, grid, decay=rates, path="axis")
    assert torch.equal(separable_linear_attention(*inputs, grid, row, None, decay=rates, path="axis"), expected)


def test_axial_policy_message_and_factor_dtype():
    with pytest.raises(
        UserError, match=r"^axial_rpe\.extrapolation: 'wrap' is not valid; expected one of 'clamp', 'interpolate'\.$"
    ):
        AxialRPE(AxialRPEOptions(extrapolation="wrap"), 8, HEADS, side=7, cls=True)
    module = ManhattanDecay(ManhattanOptions(), 8, HEADS, side=7, cls=True)  # float32 buffers
    assert all(f.dtype == torch.float32 for f in module.factors(GRIDS[0]))
    assert all(f.dtype == F64 for f in module.double().factors(GRIDS[0]))


@pytest.mark.parametrize("path", ["auto", "axis", "scan", "fft", "dense"])
def test_each_path_is_the_one_taken(path, monkeypatch):
    """All paths give the same numbers, so spies tell them apart: dense builds `weights`, fft calls the FFT
    path, axis and scan run their own operator; auto asks choose_path (dense on this small grid)."""
    calls = []

    def spy(name, function):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)

        monkeypatch.setattr(sep, name, wrapped)

    for name in ("weights", "biased_linear_attention", "AxisOperator", "DecayOperator", "choose_path"):
        spy(name, getattr(sep, name))
    grid = GRIDS[0]
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    separable_linear_attention(*make_inputs(grid, seed=99), grid, decay=rates, path=path)
    expected = {
        "auto": ["choose_path", "weights"],
        "axis": ["AxisOperator"],
        "scan": ["DecayOperator"],
        "fft": ["biased_linear_attention"],
        "dense": ["weights"],
    }
    assert calls == expected[path]


def test_given_logits_win_over_decay_rates():
    """With decay rates and both logits given, the logits are the bias (the rates only enable the scan path)."""
    grid = GRIDS[0]
    inputs = make_inputs(grid, seed=100)
    row, col, cls = make_factors(grid, seed=101)
    rates = torch.tensor([0.3, 0.1, 1.0], dtype=F64)
    out = separable_linear_attention(*inputs, grid, row, col, cls, decay=rates, path="axis")
    assert (out - reference(*inputs, grid, row, col, cls)).abs().max() <= 1e-10


@pytest.mark.parametrize("wide", INPUT_NAMES[:4] + INPUT_NAMES[5:])
def test_weights_of_any_float64_input_are_float64(wide):
    """The dense reference `weights` has the same dtype rule as the fast paths: max(float32, every input)."""
    grid = GRIDS[0]
    inputs = dict(zip(INPUT_NAMES, (*make_inputs(grid, post=True, seed=102), *make_factors(grid, seed=103))))
    inputs.pop("v")
    inputs = {n: t if n == wide else t.float().double() for n, t in inputs.items()}
    values = list(inputs.values())
    expected = weights(*values[:4], grid, *values[4:])
    mixed = [t if n == wide else t.float() for n, t in inputs.items()]
    out = weights(*mixed[:4], grid, *mixed[4:])
    assert out.dtype == F64 and float((out - expected).abs().max()) <= 1e-12
    with pytest.raises(ValueError, match=r"^cls_terms must be \(heads=3, 3\), got \(3, 2\)$"):
        weights(*mixed[:4], grid, *mixed[4:6], mixed[6][:, :2])


@pytest.mark.parametrize("slabs", [1, 3, 8])
@pytest.mark.parametrize("features", [1, 4, 6])
@pytest.mark.parametrize("budget_features", [0.5, 1, 3, 4, 6, 13, 48])
def test_chunks_never_exceed_the_budget_at_any_slab_count(slabs, features, budget_features):
    """The chunk budget at more than one (batch·head) slab: every chunk holds ≤ budget bytes (one feature at
    least), the chunks tile slabs × features once, and none is needlessly small — a budget that doubles (a
    chunk of twice the slabs or features) fails here, which one slab alone cannot show."""
    from rpevit.core.attention.kernel_sums import _chunks

    per_feature = 1000
    budget = int(budget_features * per_feature)
    chunks = list(_chunks(slabs, features, per_feature, budget))
    covered = torch.zeros(slabs, features, dtype=torch.long)
    for g0, g1, l0, l1 in chunks:
        covered[g0:g1, l0:l1] += 1
        size = (g1 - g0) * (l1 - l0) * per_feature
        assert size <= max(budget, per_feature), (g0, g1, l0, l1)
    assert bool((covered == 1).all())
    fits = max(1, budget // per_feature)  # features per chunk the budget allows
    whole_slabs = max(1, budget // (features * per_feature)) if fits >= features else 1
    expected = -(-slabs // whole_slabs) * -(-features // min(fits, features))
    assert len(chunks) == expected
