"""Tests for rpevit.core.position.gates: seed 001's IRPE-Gate and STRINGGate2D are identity at init,
scale patch q/k by positive position-dependent per-channel factors, FAIL the relative-property
test of docs/methods.md §5 (with a control that passes), and behave as documented inside linear
attention; other grids, autocast, gradients, weight-decay tags."""

import math

import pytest
import torch
import torch.nn.functional as F

from rpevit.core.attention import build_backend
from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.checks import relative_violation
from rpevit.core.config import model_config
from rpevit.core.errors import UserError
from rpevit.core.grid import Grid
from rpevit.core.position.gates import IRPEGate, StringGate2D

from helpers import log_ratio_spread, trained_like

GATES = [IRPEGate, StringGate2D]
NAMES = {IRPEGate: "gate_irpe", StringGate2D: "gate_string"}
CONFIG = model_config(dim=32, heads=4, image_size=28, patch_size=4)  # head_dim 8, trained grid 7×7
HEAD_DIM, HEADS = 8, 4
F64 = torch.float64
NOISE = 0.3  # trained-looking parameters: every parameter gets + NOISE·N(0, 1), never the identity init


def make(cls, seed=0, dtype=F64, trained=True):
    torch.manual_seed(seed)
    gate = cls(cls.Options(), HEAD_DIM, HEADS, side=7, cls=True).to(dtype)
    return trained_like(gate, seed=seed + 1, scale=NOISE) if trained else gate


def qk(grid, batch=2, seed=0, dtype=F64):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, HEADS, grid.num_tokens, HEAD_DIM)
    return torch.randn(shape, generator=generator, dtype=dtype), torch.randn(shape, generator=generator, dtype=dtype)


# 1. identity at init; positive per-channel, position-dependent scaling after training ----------


@pytest.mark.parametrize("cls", GATES)
def test_identity_at_init(cls):
    grid = Grid(7, 7)
    gate = make(cls, trained=False)
    q, k = qk(grid)
    gq, gk = gate(q, k, grid)
    assert torch.equal(gq, q) and torch.equal(gk, k)


@pytest.mark.parametrize("cls", GATES)
@pytest.mark.parametrize("with_cls", [True, False])
def test_trained_gate_scales_patches_per_channel_and_leaves_cls(cls, with_cls):
    grid = Grid(5, 7, cls=with_cls)
    gate = make(cls)
    q, k = qk(grid)
    gq, gk = gate(q, k, grid)
    assert gq.shape == q.shape and gq.dtype == q.dtype
    p = grid.prefix
    if with_cls:
        assert torch.equal(gq[:, :, 0], q[:, :, 0]) and torch.equal(gk[:, :, 0], k[:, :, 0])
    scale_q, scale_k = gate.scales(grid, dtype=F64)  # (h, N, d)
    assert scale_q.shape == (HEADS, grid.num_patches, HEAD_DIM)
    for scale, before, after in ((scale_q, q, gq), (scale_k, k, gk)):
        assert (scale > 0).all()
        # the ratio after/before is the scale: the same for every batch item (content-independent)
        torch.testing.assert_close(after[:, :, p:], before[:, :, p:] * scale, rtol=1e-12, atol=0)
        assert (scale.amax(1) - scale.amin(1)).min() > 1e-3  # every channel varies with position
        assert (scale.amax(2) - scale.amin(2)).min() > 1e-3  # per channel, not one scalar per token
    assert (scale_q - scale_k).abs().max() > 1e-2  # separate query and key gates


def test_irpe_gate_is_exp_of_row_plus_col_tables():
    gate = make(IRPEGate)
    grid = Grid(7, 7)  # the trained grid: tables used as they are
    scale_q, scale_k = gate.scales(grid, dtype=F64)
    for row, col in [(0, 0), (2, 5), (6, 6)]:
        index = row * 7 + col
        torch.testing.assert_close(scale_q[:, index], torch.exp(gate.row_q[:, row] + gate.col_q[:, col]).detach())
        torch.testing.assert_close(scale_k[:, index], torch.exp(gate.row_k[:, row] + gate.col_k[:, col]).detach())


def test_irpe_gate_tables_are_resized_linearly_on_new_grids():
    gate = make(IRPEGate)
    grid = Grid(14, 4)
    scale_q, _ = gate.scales(grid, dtype=F64)
    log_q = scale_q.log().reshape(HEADS, 14, 4, HEAD_DIM)

    # by hand: align_corners=False samples the 7-entry table at x = (i + ½)·7/n − ½, clamped to [0, 6]
    def linear(table, n):
        out = []
        for i in range(n):
            x = min(max((i + 0.5) * 7 / n - 0.5, 0.0), 6.0)
            lo = min(int(math.floor(x)), 5)
            w = x - lo
            out.append((1 - w) * table[:, lo] + w * table[:, lo + 1])
        return torch.stack(out, dim=1).detach()  # (h, n, d)

    rows, cols = linear(gate.row_q, 14), linear(gate.col_q, 4)
    torch.testing.assert_close(log_q, rows[:, :, None] + cols[:, None], rtol=0, atol=1e-12)


def test_string_gate_is_exp_of_projected_fourier_features():
    gate = make(StringGate2D)
    assert gate.rank == model_config().options_for("gate_string").rank
    grid = Grid(5, 7)
    scale_q, scale_k = gate.scales(grid, dtype=F64)
    omega, phi = gate.frequencies.detach(), gate.phases.detach()
    for row, col in [(0, 0), (3, 6), (4, 2)]:
        r = torch.tensor([row / 6, col / 6], dtype=F64)  # trained 7×7 grid spans [0, 1]²
        angles = omega @ r + phi
        f = torch.cat((angles.sin(), angles.cos()))  # (2R,)
        torch.testing.assert_close(scale_q[:, row * 7 + col], torch.exp(gate.proj_q.detach() @ f))
        torch.testing.assert_close(scale_k[:, row * 7 + col], torch.exp(gate.proj_k.detach() @ f))
    # larger grids extrapolate (r̂ > 1); position interpolation scales back into the trained range
    big = Grid(14, 14, trained=(7, 7))
    assert gate.positions(big, dtype=F64).max() == pytest.approx(13 / 6)
    squeezed = Grid(14, 14, trained=(7, 7), interpolate=True)
    assert gate.positions(squeezed, dtype=F64).max() == pytest.approx(6.5 / 6)


def test_string_gate_rank_from_options_and_errors():
    gate = StringGate2D(StringGate2D.Options(rank=3), HEAD_DIM, HEADS, side=7, cls=True)
    assert gate.frequencies.shape == (3, 2) and gate.proj_q.shape == (HEADS, HEAD_DIM, 6)
    with pytest.raises(UserError, match=r"model\.gate_string\.rank must be a positive integer"):
        StringGate2D(StringGate2D.Options(rank=0), HEAD_DIM, HEADS, side=7, cls=True)


def test_wrong_shape_is_rejected():
    gate = make(IRPEGate)
    q, k = qk(Grid(5, 7))
    with pytest.raises(ValueError, match="expects"):
        gate(q, k, Grid(5, 6))


# 2. the relative-property test of docs/methods.md §5 ---------------------------------------------
# rpevit.core.checks.relative_violation: ~1e-15 here when the property holds, ~1 for the trained gates.
# log_ratio_spread (helpers.py) keeps the log-form bounds these tests had before: the shared check
# normalises by the largest ratio, and the affine control's ratios span ~1e6.


def softmax_layer(cls, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention.from_config(CONFIG, "softmax", gate=NAMES[cls]).double()


def identical_tokens(grid, seed=2):
    content = 3 * torch.randn(1, 1, CONFIG.dim, dtype=F64, generator=torch.Generator().manual_seed(seed))
    return content.expand(1, grid.num_tokens, -1)  # every token identical


@pytest.mark.parametrize("cls", GATES)
@torch.no_grad()
def test_gates_fail_the_relative_property_test(cls):
    grid = Grid(5, 7, cls=True)
    layer = softmax_layer(cls)
    same = identical_tokens(grid)
    # control: at the identity init there is no positional information and the property holds
    weights = layer.attention_matrix(same, grid)
    assert relative_violation(weights, grid) < 1e-12 and log_ratio_spread(weights, grid) < 1e-13
    trained_like(layer.gate, seed=3, scale=NOISE)
    weights = layer.attention_matrix(same, grid)
    assert relative_violation(weights, grid) > 1e-2  # absolute: it fails, by a clear margin
    patches = weights[..., 1:, 1:].log()
    assert (patches.amax(-1) - patches.amin(-1)).min() > 1e-3  # and the gate does act


@torch.no_grad()
def test_irpe_gate_passes_only_in_its_affine_corner():
    """Log-scale tables affine in the index with opposite query/key slopes give a_c(r_i) b_c(r_j) =
    exp(λ_c·(r_j − r_i) + const): relative. The test detects it, so its failures above are real."""
    grid = Grid(5, 7, cls=True)  # rows resized from the 7-row tables: linear resizing keeps them affine
    layer = softmax_layer(IRPEGate)
    gate = layer.gate
    g = torch.Generator().manual_seed(4)
    index = torch.arange(7, dtype=F64)[None, :, None]  # (1, S, 1)
    for table_q, table_k in ((gate.row_q, gate.row_k), (gate.col_q, gate.col_k)):
        slope = 0.1 * torch.randn(HEADS, 1, HEAD_DIM, generator=g, dtype=F64)
        table_q.copy_(-slope * index + 0.2 * torch.randn(HEADS, 1, HEAD_DIM, generator=g, dtype=F64))
        table_k.copy_(slope * index + 0.2 * torch.randn(HEADS, 1, HEAD_DIM, generator=g, dtype=F64))
    weights = layer.attention_matrix(identical_tokens(grid), grid)
    assert relative_violation(weights, grid) < 1e-12 and log_ratio_spread(weights, grid) < 1e-11
    patches = weights[..., 1:, 1:].log()
    assert (patches.amax(-1) - patches.amin(-1)).min() > 1e-2  # non-trivial: weights vary with offset
    gate.row_q[:, 3] += 0.5  # bend one query table away from affine: the property breaks
    assert relative_violation(layer.attention_matrix(identical_tokens(grid), grid), grid) > 1e-2


# 3. what the gates do inside linear attention (the statement in the module docstring) -----------


def relu_backend(eps=0.0):
    backend = build_backend("relu", model_config(dim=32, heads=4, relu={"feature_map": "identity"}), HEAD_DIM, HEADS)
    backend.feature_eps = eps
    return backend


def test_linear_relu_per_channel_gate_kernel_and_scalar_cancellation():
    grid = Grid(5, 7, cls=False)
    backend = relu_backend()
    gate = make(IRPEGate)
    q, k = qk(grid)
    a, b = gate.scales(grid, dtype=F64)  # (h, N, d)
    # identity ReLU features (ε = 0): φ(a ⊙ q)ᵀφ(b ⊙ k) = Σ_c a_c(r_i) b_c(r_j) φ_c(q_i) φ_c(k_j)
    phi_q, phi_k = F.relu(q * HEAD_DIM**-0.25), F.relu(k * HEAD_DIM**-0.25)
    kernel = torch.einsum("hic,hjc,bhic,bhjc->bhij", a, b, phi_q, phi_k)
    torch.testing.assert_close(
        backend.weights(*gate(q, k, grid), grid), kernel / kernel.sum(-1, keepdim=True), rtol=1e-12, atol=1e-14
    )
    keys_only = backend.weights(q, gate(q, k, grid)[1], grid)
    # per channel, the query gate does NOT cancel
    assert (backend.weights(*gate(q, k, grid), grid) - keys_only).abs().max() > 1e-3
    # a SCALAR query gate (one value per token, constant over channels) cancels exactly
    with torch.no_grad():
        gate.row_q.copy_(gate.row_q[..., :1].expand_as(gate.row_q))
        gate.col_q.copy_(gate.col_q[..., :1].expand_as(gate.col_q))
    torch.testing.assert_close(backend.weights(*gate(q, k, grid), grid), keys_only, rtol=1e-12, atol=1e-14)
    # ... leaving a key-side prior: with identical content every query row is the same
    same_q, same_k = q[:, :, :1].expand_as(q), k[:, :, :1].expand_as(k)
    rows = backend.weights(*gate(same_q, same_k, grid), grid)
    torch.testing.assert_close(rows, rows[:, :, :1].expand_as(rows), rtol=1e-12, atol=1e-14)


def test_linear_favor_scalar_query_gate_does_not_cancel():
    grid = Grid(5, 7, cls=False)
    torch.manual_seed(0)
    backend = build_backend("favor", CONFIG, HEAD_DIM, HEADS).double()
    gate = make(IRPEGate)
    with torch.no_grad():
        gate.row_q.copy_(gate.row_q[..., :1].expand_as(gate.row_q))
        gate.col_q.copy_(gate.col_q[..., :1].expand_as(gate.col_q))
    q, k = qk(grid)
    gated_q, gated_k = gate(q, k, grid)
    assert (backend.weights(gated_q, gated_k, grid) - backend.weights(q, gated_k, grid)).abs().max() > 1e-3


# 4. other grids, backends, autocast, gradients, weight decay ------------------------------------


@pytest.mark.parametrize("cls", GATES)
@pytest.mark.parametrize("backend", ["softmax", "favor", "relu"])
def test_other_grids_and_backends(cls, backend):
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_config(CONFIG, backend, gate=NAMES[cls])
    trained_like(layer.gate, seed=1, scale=NOISE)
    for grid in (Grid(4, 4), Grid(10, 8), Grid(10, 8, cls=False), Grid(14, 14, trained=(7, 7), interpolate=True)):
        x = torch.randn(2, grid.num_tokens, CONFIG.dim)
        out = layer(x, grid)
        assert out.shape == x.shape and torch.isfinite(out).all()
        a, b = layer.gate.scales(grid)
        assert a.shape == (HEADS, grid.num_patches, HEAD_DIM) and torch.isfinite(a).all() and (b > 0).all()


@pytest.mark.parametrize("cls", GATES)
def test_autocast_bf16_is_finite_and_keeps_dtypes(cls):
    grid = Grid(5, 7)
    gate = make(cls, dtype=torch.float32)
    q, k = qk(grid, dtype=torch.float32)
    reference = gate(q, k, grid)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out32 = gate(q, k, grid)
        out16 = gate(q.bfloat16(), k.bfloat16(), grid)
    assert out32[0].dtype == torch.float32 and out16[0].dtype == torch.bfloat16
    torch.testing.assert_close(out32, reference)  # scales computed in fp32 with autocast off
    for o, r in zip(out16, reference):
        assert torch.isfinite(o).all()
        torch.testing.assert_close(o.float(), r, rtol=0.02, atol=0.02)
    torch.manual_seed(0)
    layer = trained_like(MultiHeadAttention.from_config(CONFIG, "softmax", gate=NAMES[cls]), seed=1, scale=NOISE)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(torch.randn(2, grid.num_tokens, CONFIG.dim), grid)
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("cls", GATES)
def test_gradients_reach_gate_parameters(cls):
    grid = Grid(5, 7)
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_config(CONFIG, "softmax", gate=NAMES[cls])
    x = torch.randn(2, grid.num_tokens, CONFIG.dim)
    weight = torch.randn(2, grid.num_tokens, CONFIG.dim)
    # at init the log-scale tables / projections already get gradient
    (layer(x, grid) * weight).sum().backward()
    initial = [layer.gate.proj_q, layer.gate.proj_k] if cls is StringGate2D else list(layer.gate.parameters())
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in initial)
    # once trained, every parameter (incl. STRING's frequencies and phases) does
    layer.zero_grad()
    trained_like(layer.gate, seed=1, scale=NOISE)
    (layer(x, grid) * weight).sum().backward()
    params = list(layer.gate.parameters())
    assert params and all(
        p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0 for p in params
    )


def test_weight_decay_tags():
    irpe = IRPEGate(IRPEGate.Options(), HEAD_DIM, HEADS, side=7, cls=True)
    assert all(getattr(p, "no_weight_decay", False) for p in irpe.parameters())
    string = StringGate2D(StringGate2D.Options(), HEAD_DIM, HEADS, side=7, cls=True)
    assert string.frequencies.no_weight_decay and string.phases.no_weight_decay
    assert not getattr(string.proj_q, "no_weight_decay", False)  # linear maps are decayed (documented)
    assert not getattr(string.proj_k, "no_weight_decay", False)


# boundaries found by mutation testing (reports/bench/mutation.md) -------------------------------------


def test_string_gate_init_distribution_rank_and_position_scale():
    """ω ~ N(0, π²) per component, φ ~ U[0, 2π) (checked on rank 4,000), rank 1 allowed, and positions scaled
    so the trained grid spans [0, 1]² — also for a 2×2 trained grid."""
    from rpevit.core.position.gates import STRING_FREQUENCY_STD, GateStringOptions

    torch.manual_seed(0)
    wide = StringGate2D(GateStringOptions(rank=4000), HEAD_DIM, HEADS, side=7, cls=True)
    assert abs(float(wide.frequencies.detach().std()) / STRING_FREQUENCY_STD - 1) < 0.05
    phases = wide.phases.detach()
    assert 0 <= float(phases.min()) < 0.01 and 2 * math.pi - 0.01 < float(phases.max()) < 2 * math.pi
    assert StringGate2D(GateStringOptions(rank=1), HEAD_DIM, HEADS, side=7, cls=True).rank == 1
    small = StringGate2D(GateStringOptions(), HEAD_DIM, HEADS, side=2, cls=True)
    positions = small.positions(Grid(2, 2, cls=False), None, F64)
    assert torch.equal(positions, torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=F64))


@pytest.mark.parametrize("cls", GATES)
def test_gate_messages_and_repr(cls):
    gate = make(cls)
    grid = Grid(7, 7)
    q, k = qk(grid)
    name = type(gate).__name__
    with pytest.raises(
        ValueError, match=rf"^{name} expects q of shape \(B, 4, 50, 8\) for a 7×7 grid, got \(2, 4, 50, 7\)"
    ):
        gate(q[..., :7], k, grid)
    with pytest.raises(
        ValueError, match=rf"^{name} expects k of shape \(B, 4, 50, 8\) for a 7×7 grid, got \(2, 3, 50, 8\)"
    ):
        gate(q, k[:, :3], grid)
    with pytest.raises(ValueError, match=rf"^{name} expects q of shape"):
        gate(q[0], k, grid)
    assert repr(gate).startswith(f"{name}(dim=8, heads=4")
    if cls is IRPEGate:
        assert "trained=7×7" in repr(gate)


@pytest.mark.parametrize("cls", GATES)
def test_gate_computes_in_the_wider_of_q_and_k(cls):
    """float32 q with float64 k (or the reverse): the scales and products are float64, each output keeps its
    input's dtype, and equals the all-float64 result rounded once."""
    gate = make(cls)
    q, k = qk(Grid(7, 7), seed=3)
    q, k = q.float().double(), k.float().double()
    q_ref, k_ref = gate(q, k, Grid(7, 7))
    for narrow in ("q", "k"):
        q_in, k_in = (q.float(), k) if narrow == "q" else (q, k.float())
        q_out, k_out = gate(q_in, k_in, Grid(7, 7))
        assert q_out.dtype == q_in.dtype and k_out.dtype == k_in.dtype
        assert torch.equal(q_out, q_ref.to(q_in.dtype)) and torch.equal(k_out, k_ref.to(k_in.dtype))


@pytest.mark.parametrize("cls", GATES)
def test_float32_gate_on_float64_inputs_computes_in_float64(cls):
    """Parameters in float32, q and k in float64: every scale is computed in float64 (the parameters cast
    up), equal to the same gate held in float64 to 1e-12 — float32 arithmetic anywhere would be ≈ 1e-7 off."""
    narrow = make(cls, dtype=torch.float32)
    wide = make(cls, dtype=torch.float32).double()
    q, k = qk(Grid(7, 7), seed=4)
    with torch.no_grad():
        for out, expected in zip(narrow(q, k, Grid(7, 7)), wide(q, k, Grid(7, 7))):
            assert out.dtype == F64
            torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
