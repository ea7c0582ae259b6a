"""Tests for rpevit.core.position.relative: the relative-bias modules krpe, alibi2d and irpe.

Table/dense consistency, ALiBi slopes, iRPE buckets, krpe extrapolation policies, position
interpolation, and the relative-property test of docs/methods.md §5 in softmax attention.
"""

import math

import pytest
import torch

from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.checks import relative_violation
from rpevit.core.config import model_config
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.position import build_position
from rpevit.core.position.relative import IRPE, Alibi2D, KernelizedRPE, alibi_slopes, piecewise_index

from helpers import log_ratio_spread, trained_like

F64 = torch.float64
HEADS = 4
CLASSES = {"krpe": KernelizedRPE, "alibi2d": Alibi2D, "irpe": IRPE}


def config(**overrides):
    """28×28 images, patch 4: a 7×7 trained grid."""
    return model_config(**{"dim": 32, "heads": HEADS, "image_size": 28, "patch_size": 4, **overrides})


def make(name, seed=0, **overrides):
    """Random, asymmetric values in every parameter (so nothing is accidentally symmetric or zero)."""
    return trained_like(
        build_position(name, config(**overrides), 8, HEADS).double(), seed=seed, scale=1.0, mode="replace"
    )


# 5. table / dense consistency -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["krpe", "alibi2d", "irpe"])
@pytest.mark.parametrize("cls", [True, False])
def test_dense_gathers_the_table_and_the_cls_border(name, cls):
    module = make(name)
    grid = Grid(5, 7, cls=cls)
    table, dense = module.table(grid), module.dense(grid)
    assert table.shape == (HEADS, 9, 13) and dense.shape == (HEADS, grid.num_tokens, grid.num_tokens)
    p = grid.prefix
    for i in range(grid.num_patches):
        for j in range(grid.num_patches):
            (row_i, col_i), (row_j, col_j) = divmod(i, 7), divmod(j, 7)
            assert torch.equal(dense[:, p + i, p + j], table[:, row_j - row_i + 4, col_j - col_i + 6])
    if cls:
        terms = module.cls_terms()
        terms = torch.zeros(HEADS, 3, dtype=F64) if terms is None else terms
        assert torch.equal(dense[:, 0, 1:], terms[:, 0, None].expand(HEADS, 35))  # CLS → patch
        assert torch.equal(dense[:, 1:, 0], terms[:, 1, None].expand(HEADS, 35))  # patch → CLS
        assert torch.equal(dense[:, 0, 0], terms[:, 2])  # CLS → CLS


def test_parameters_and_weight_decay_tags():
    krpe, alibi, irpe = (build_position(n, config(), 8, HEADS) for n in ("krpe", "alibi2d", "irpe"))
    assert krpe.bias_table.shape == (HEADS, 13, 13) and krpe.cls_bias.shape == (HEADS, 3)
    assert 0 < krpe.bias_table.abs().max() <= 0.04 and krpe.cls_bias.abs().max() == 0  # trunc-normal std 0.02
    assert sum(p.numel() for p in alibi.parameters()) == 0 and "slopes" not in alibi.state_dict()
    assert irpe.bucket_table.shape == (HEADS, 50) and irpe.bucket_table.abs().max() == 0
    for module in (krpe, irpe):
        assert all(getattr(p, "no_weight_decay", False) for p in module.parameters())
    mean_pool = config(pool="mean")
    assert build_position("krpe", mean_pool, 8, HEADS).cls_terms() is None
    assert build_position("irpe", mean_pool, 8, HEADS).bucket_table.shape == (HEADS, 49)


# 6. alibi2d --------------------------------------------------------------------------------------


def test_alibi_slopes():
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    # 6 heads: the 4-head slopes, then every other 8-head slope (2^-1, 2^-3)
    assert alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert alibi_slopes(12) == [2.0**-k for k in range(1, 9)] + [2.0 ** -(k / 2) for k in (1, 3, 5, 7)]
    assert alibi_slopes(1) == [2.0**-8]


def test_alibi_table_is_minus_slope_times_distance_and_symmetric():
    module = build_position("alibi2d", config(heads=6), 8, 6).double()
    grid = Grid(5, 7, cls=True)
    table = module.table(grid)
    slopes = torch.tensor(alibi_slopes(6), dtype=F64)
    for a in range(9):
        for b in range(13):
            torch.testing.assert_close(table[:, a, b], -slopes * math.hypot(a - 4, b - 6), rtol=0, atol=1e-15)
    assert torch.equal(table, table.flip(-2, -1)) and torch.equal(table, table.flip(-1))
    assert module.cls_terms() is None and torch.equal(module.dense(grid)[:, 0], torch.zeros(6, 36, dtype=F64))
    assert module.table(Grid(40, 3)).shape == (6, 79, 5)  # any grid, no parameters


# 7. irpe buckets ----------------------------------------------------------------------------------


def g_by_hand(x, alpha=1.9, beta=3.8, gamma=15.2):
    if abs(x) <= alpha:
        return round(x)
    return int(
        math.copysign(min(beta, round(alpha + math.log(abs(x) / alpha) / math.log(gamma / alpha) * (beta - alpha))), x)
    )


def test_piecewise_index_at_hand_checked_points():
    # |x| ≤ α: round(x); 5 → round(1.9 + ln(5/1.9)/ln 8·1.9) = round(2.784) = 3; 3 → round(2.317) = 2;
    # 4 → round(2.580) = 3; 20 → round(4.05) = 4, capped at β = 3.8 → bucket ⌊3.8⌋ = 3
    points = torch.tensor([0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 20, -20, 1000], dtype=F64)
    expected = [0, 1, -1, 2, -2, 2, -2, 3, -3, 3, -3, 3, -3, 3]
    assert piecewise_index(points, 1.9, 3.8, 15.2).tolist() == expected
    assert [g_by_hand(x) for x in points.tolist()] == expected  # the formula itself (int() truncates 3.8)
    xs = torch.linspace(-40, 40, 801, dtype=F64)
    assert piecewise_index(xs, 1.9, 3.8, 15.2).tolist() == [int(g_by_hand(x)) for x in xs.tolist()]


def test_irpe_bucket_counts():
    product, euclidean = (
        build_position("irpe", config(), 8, HEADS),
        build_position("irpe", config(irpe={"buckets": "euclidean"}), 8, HEADS),
    )
    assert product.num_buckets == 49 and product.bucket_table.shape[1] == 50  # + the CLS skip bucket
    assert euclidean.num_buckets == 4 and euclidean.bucket_table.shape[1] == 5
    big = Grid(30, 30)  # offsets up to ±29 reach every bucket
    assert product.buckets(big).unique().tolist() == list(range(49))
    assert euclidean.buckets(big).unique().tolist() == [0, 1, 2, 3]
    assert product.buckets(Grid(5, 7)).unique().numel() == 49  # g(±4) = ±3: a 5×7 grid already reaches all
    # the bucket of every offset follows the formula
    buckets = product.buckets(Grid(9, 9))
    for a in range(17):
        for b in range(17):
            assert buckets[a, b] == (g_by_hand(a - 8) + 3) * 7 + g_by_hand(b - 8) + 3
    distances = euclidean.buckets(Grid(9, 9))
    assert distances[8, 8] == 0 and distances[9, 9] == 1 and distances[8, 16] == 3 and distances[12, 8] == 3


def test_irpe_cls_terms_are_the_skip_bucket():
    module = make("irpe", seed=3)
    terms = module.cls_terms()
    assert terms.shape == (HEADS, 3) and torch.equal(terms, module.bucket_table[:, 49:50].expand(HEADS, 3))
    dense = module.dense(Grid(5, 7))
    assert torch.equal(dense[:, 0, :], module.bucket_table[:, 49, None].expand(HEADS, 36))
    with pytest.raises(Exception, match=r"model\.irpe\.buckets: 'cross' is not valid"):
        build_position("irpe", config(irpe={"buckets": "cross"}), 8, HEADS)


# 8. krpe extrapolation -------------------------------------------------------------------------


def test_krpe_clamp_policy():
    module = make("krpe", seed=5)
    trained = module.bias_table  # (h, 13, 13) for the 7×7 trained grid
    assert module.table(Grid(7, 7)) is trained
    big = module.table(Grid(12, 12))  # (h, 23, 23): offsets ±11 clamped to ±6
    assert big.shape == (HEADS, 23, 23)
    for a in range(23):
        for b in range(23):
            ta, tb = min(max(a - 11, -6), 6) + 6, min(max(b - 11, -6), 6) + 6
            assert torch.equal(big[:, a, b], trained[:, ta, tb])
    assert torch.equal(big[:, 0, 0], trained[:, 0, 0]) and torch.equal(big[:, 22, 11], trained[:, 12, 6])
    # a smaller grid reads the central part exactly
    assert torch.equal(module.table(Grid(5, 7)), trained[:, 2:11, :])
    assert torch.isfinite(module.dense(Grid(12, 12))).all()


def test_krpe_interpolate_policy():
    module = make("krpe", seed=6, krpe={"extrapolation": "interpolate"})

    def smooth(r, c):
        return 0.3 * r[:, None] - 0.2 * c[None, :] + 0.5 * torch.sin(0.2 * r[:, None] + 0.1 * c[None, :])

    offsets = torch.arange(-6, 7, dtype=F64)
    with torch.no_grad():
        module.bias_table.copy_(smooth(offsets, offsets) * torch.arange(1, HEADS + 1, dtype=F64)[:, None, None])
    big = module.table(Grid(12, 12))
    assert big.shape == (HEADS, 23, 23)
    torch.testing.assert_close(big[:, 11, 11], module.bias_table[:, 6, 6], rtol=0, atol=1e-12)  # the centre
    # bicubic resize (align_corners=False) evaluates the trained table at Δ·13/23; the next-best
    # mapping, align_corners=True (Δ·6/11), would be off by > 0.08 here
    new = torch.arange(-11, 12, dtype=F64) * 13 / 23
    interior = slice(3, 20)
    torch.testing.assert_close(big[0, interior, interior], smooth(new, new)[interior, interior], rtol=0, atol=0.04)
    assert big[0].diff(dim=0).abs().max() < 0.4 and big[0].diff(dim=1).abs().max() < 0.4  # smooth: no jumps
    small = module.table(Grid(5, 7))
    assert small.shape == (HEADS, 9, 13) and torch.isfinite(module.dense(Grid(5, 7))).all()
    assert not torch.equal(small, module.bias_table[:, 2:11, :])  # resized, not cropped
    with pytest.raises(UserError, match=r"model\.krpe\.extrapolation: 'wrap' is not valid"):
        config(krpe={"extrapolation": "wrap"})


# position interpolation --------------------------------------------------------------------------


def test_position_interpolation_scales_offsets_for_alibi_and_irpe_and_resizes_krpe():
    grid = Grid(14, 14, trained=(7, 7), interpolate=True)
    plain = Grid(14, 14, trained=(7, 7))
    alibi = build_position("alibi2d", config(), 8, HEADS).double()
    slopes = torch.tensor(alibi_slopes(HEADS), dtype=F64)
    torch.testing.assert_close(alibi.table(grid)[:, -1, -1], -slopes * math.hypot(6.5, 6.5), rtol=0, atol=1e-12)
    torch.testing.assert_close(alibi.table(plain)[:, -1, -1], -slopes * math.hypot(13, 13), rtol=0, atol=1e-12)
    irpe = build_position("irpe", config(), 8, HEADS)
    # scale 7/14: column offset 1 becomes 0.5 → g = 0 (round half to even) instead of g(1) = 1
    scaled, unscaled = irpe.buckets(grid), irpe.buckets(plain)
    assert scaled[13, 14] == 3 * 7 + 3 and unscaled[13, 14] == 3 * 7 + 4
    assert not torch.equal(scaled, unscaled)
    krpe = make("krpe")  # policy "clamp": extrapolation clamps, interpolation mode resizes the table
    resized = make("krpe", krpe={"extrapolation": "interpolate"}).table(plain)
    torch.testing.assert_close(krpe.table(grid), resized)
    assert not torch.equal(krpe.table(grid), krpe.table(plain))


# 9. the relative-property test (docs/methods.md §5) in softmax attention --------------------------


def softmax_layer(name, **overrides):
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_config(
        config(**overrides) if overrides else config(), "softmax", bias=name
    ).double()
    if layer.bias is not None:
        trained_like(layer.bias, seed=1, scale=1.0, mode="replace")  # random, asymmetric table / buckets / CLS terms
    return layer


@pytest.mark.parametrize(
    "name,overrides",
    [("krpe", {}), ("alibi2d", {}), ("irpe", {}), ("irpe", {"irpe": {"buckets": "euclidean"}})],
    ids=["krpe", "alibi2d", "irpe-product", "irpe-euclidean"],
)
@torch.no_grad()
def test_relative_property_in_softmax_attention(name, overrides):
    grid = Grid(5, 7, cls=True)
    layer = softmax_layer(name, **overrides)
    if name == "krpe":
        table = layer.bias.table(grid)
        assert (table - table.flip(-2, -1)).abs().max() > 0.5  # asymmetric
    content = 3 * torch.randn(1, 1, 32, dtype=F64, generator=torch.Generator().manual_seed(2))
    same = content.expand(1, grid.num_tokens, -1)  # every token identical
    weights = layer.attention_matrix(same, grid)  # (1, h, T, T)
    # rpevit.core.checks.relative_violation is ~1e-16 here. It divides by the largest ratio (these span up to
    # ~400); the log form (helpers.py) holds every offset to the same relative bound whatever the span
    assert relative_violation(weights, grid) < 1e-12 and log_ratio_spread(weights, grid) < 1e-11
    patches = weights[..., 1:, 1:].log()
    assert (patches.amax(-1) - patches.amin(-1)).min() > 1e-2  # not vacuous: weights vary with Δ
    # fails with absolute information: a per-position random vector added to the tokens
    ape = torch.randn(1, grid.num_tokens, 32, dtype=F64, generator=torch.Generator().manual_seed(3))
    assert relative_violation(layer.attention_matrix(same + ape, grid), grid) > 1e-2


def test_layer_forward_and_gradients_reach_the_bias():
    grid = Grid(5, 7, cls=True)
    for name in ("krpe", "irpe"):
        layer = softmax_layer(name)
        x = torch.randn(2, grid.num_tokens, 32, dtype=F64, generator=torch.Generator().manual_seed(4))
        out = layer(x, grid)
        torch.testing.assert_close(
            out,
            layer.proj((layer.attention_matrix(x, grid) @ layer._heads(x, grid)[2]).transpose(1, 2).reshape(x.shape)),
        )
        out.square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().max() > 0 for p in layer.bias.parameters())


# boundaries found by mutation testing (reports/bench/mutation.md) -------------------------------------


@pytest.mark.parametrize("name", ["krpe", "axial_rpe"])
def test_learned_tables_start_as_truncated_normal(name):
    """N(0, 0.02²) truncated at ±2σ (the Swin / iRPE init): std and mean near it, every value inside ±2σ."""
    torch.manual_seed(0)
    module = build_position(name, config(image_size=224, patch_size=4, heads=16), 8, 16)
    values = torch.cat([p.detach().flatten() for n, p in module.named_parameters() if n != "cls_bias"])
    assert values.numel() >= 3552 and float(values.abs().max()) <= 0.04
    assert abs(float(values.mean())) < 0.002 and 0.014 < float(values.std()) < 0.020  # truncation: σ·0.88


def test_alibi_tables_are_cached_per_head_count_and_exact():
    """Two ALiBi modules of different head counts on one grid get their own tables: −slope_h·‖Δ‖₂ in float32."""
    grid = Grid(3, 4)
    for heads in (2, 4):
        module = build_position("alibi2d", config(heads=heads), 8, heads)
        rows = torch.arange(-2, 3, dtype=F64)[:, None]
        cols = torch.arange(-3, 4, dtype=F64)[None, :]
        slopes = torch.tensor(alibi_slopes(heads), dtype=F64)[:, None, None]
        table = module.table(grid)
        assert table.dtype == torch.float32 and table.shape == (heads, 5, 7)
        torch.testing.assert_close(table.double(), -slopes * (rows**2 + cols**2).sqrt(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"^heads must be positive, got 0$"):
        alibi_slopes(0)


@pytest.mark.parametrize("name", ["krpe", "alibi2d", "irpe", "manhattan", "axial_rpe"])
def test_bias_modules_name_their_heads(name):
    assert f"heads={HEADS}" in repr(build_position(name, config(), 8, HEADS))


def test_dense_bias_names_the_table_shape_it_needs():
    from rpevit.core.position.relative import dense_bias

    with pytest.raises(ValueError, match=r"^a 3×4 grid needs a table \(heads, 5, 7\), got \(2, 5, 6\)$"):
        dense_bias(torch.zeros(2, 5, 6), None, Grid(3, 4))
    with_none = dense_bias(torch.zeros(2, 5, 7, dtype=F64), None, Grid(3, 4))
    assert with_none.dtype == F64 and torch.equal(with_none, torch.zeros_like(with_none))
    mixed = dense_bias(torch.zeros(2, 5, 7, dtype=F64), torch.ones(2, 3), Grid(3, 4))
    assert mixed.dtype == F64 and float(mixed[:, 0].sum()) == 2 * 13
