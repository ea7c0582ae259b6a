"""Exact linear attention with a separable relative bias, applied axis by axis.

When the bias is additive over the axes, b_h(Δ) = r_h[Δrow] + c_h[Δcol], the weights factor,
exp(b) = exp(r)·exp(c), and the N×N patch block of [c_ij] is the Kronecker product R ⊗ C of an H×H
and a W×W Toeplitz matrix, R[i, j] = exp(r[j − i]), C[i, j] = exp(c[j − i]) (query i, key j,
Δ = r_j − r_i as everywhere in rpevit). The per-query sums of relative-bias linear attention,

    S_i = Σ_j c_ij ψ(k_j) ⊗ [v_j, 1]      (m·(d + 1) numbers per query; the 1 gives the denominator)

are then C applied along every grid row and R along every grid column. Materialising S for all N
queries at once is what made the prototype 220× slower than plain linear attention (memory
traffic). Here nothing of size N·m·d ever exists: `kernel_sums.kernel_sums` streams chunks of
(batch·head, feature) slabs — (gc, lc, d + 1, H, W) channels, ≤ AXIS_CHUNK_BYTES — through the two
axis products and contracts each chunk with ψ(q) (φ(q) for the denominator channel) at once, and
its backward recomputes the chunks instead of letting autograd keep them (only q, k, v and the
factors are saved: O(N·(m + d)) per head).

Paths (`separable_linear_attention(..., path=...)`):
- "axis": the two small dense Toeplitz products per chunk, x·Cᵀ along the rows and R·x along the
  columns, each one batched GEMM on a cache-resident chunk (N·(H + W) multiply-adds per channel);
  any separable table. The gradients of R and C (hence of the logits, through autograd's gather +
  exp) are two more GEMM contractions per chunk, computed only when the logits need them.
- "scan": geometric decays, b = −λ_row·|Δrow| − λ_col·|Δcol| (Manhattan decay): exp(b) =
  γ_row^|Δrow|·γ_col^|Δcol| is applied by first-order recurrences forward and backward along each
  axis, y = a + c − x with a[t] = x[t] + γ·a[t−1] and c[t] = x[t] + γ·c[t+1] — O(1) work per
  element whatever the grid. Its backward runs the same recurrences on the gradient (the kernel is
  symmetric) and gets ∂/∂γ from the differentiated recurrences a′[t] = a[t−1] + γ·a′[t−1],
  b′[t] = c[t+1] + γ·b′[t+1], so autograd never stores a step. Needs λ ≥ 0.
- "fft": the table r ⊕ c through the general 2D-FFT path (toeplitz.biased_linear_attention).
- "dense": the N×N weights (`weights`) times v.
- "auto": `choose_path` — dense up to N = 256, axis beyond, fft beyond ≈ 600×600; scan never on
  the measured CPU.

Measured (2-core Xeon with AVX-512, torch 2.13, float32; one attention layer — qkv and output
projections, 8 heads, d = 32, B = 1, CLS — forward+backward; CPU time of one thread, the minimum of
2–3 runs, because the machine was shared with other jobs (load 4–7) and wall-clock times
of two threads swung by 2–5×):

    N = 4,096               relu (m = 32)              favor (m = 112)
                         time       saved  peak     time       saved  peak
    plain linear         88 ms      37 MB   89 MB   175 ms     132 MB  221 MB
    axial_rpe, axis      545 (6.2×) 55      126     1651 (9.5×) 180    252
    manhattan, axis      458 (5.2×) 54      127     1380 (7.9×) 179    268
    manhattan learnable  548 (6.3×) 55      122     1692 (9.7×) 180    278
    manhattan, scan      1918 (22×) 54      138     6768 (39×)  178    272
    krpe, chunked FFT    2360 (27×) 55      205     7773 (44×)  179    309
    krpe, unchunked FFT  7441 (85×) 1256    3504    36882 (211×) 4381  12278

("saved": bytes autograd keeps for backward, as rpevit.lab.bench.throughput; "peak": peak RSS growth over one
forward+backward.) The GEMMs dominate (≈ 80% at m = 112) and run at ≈ 90 GFLOP/s per core on
2 MiB chunks; the scan loses because each of its 4·64 steps per product is a separate kernel call
and the steps along the rows need a transposed copy; blocked (chunkwise) recurrences with 8- or
16-wide intra-block GEMMs were no faster than the 64×64 GEMMs either.

CLS stays the rank-one border (kernel_sums.normalize_with_cls). Numerics follow toeplitz.py and
kernel_sums.py — compute dtype max(float32, inputs), autocast off, denominator clamped at
DENOMINATOR_EPS — but the shift that keeps exp(b) ≤ 1 is per query, not per head: for query i the
patch logits r[Δrow] + c[Δcol]
peak at M_i = max_j r[rj − ri] + max_j c[cj − ci] (a row max of R's and of C's logits), and with a
CLS token M_i also covers the patch→CLS term (the CLS query uses max of its two terms). Each M_i
is detached and cancels in its own row's ratio, so R = exp(r − row max) ≤ 1, C ≤ 1, every row's
largest weight is 1, and no row underflows however far its logits sit below the head's maximum
(the FFT path shifts once per head for all patch rows, so a patch row far below the table's maximum
sits at the FFT's absolute round-off). The
GEMM and scan paths add non-negative weights times the channel values, so their round-off is
relative to each row's own sums.
"""

from __future__ import annotations

import math

import torch

from ..position.relative import dense_bias
from ..precision import autocast_off, compute_dtype_of
from .kernel_sums import DENOMINATOR_EPS, KernelOperator, chunk_budget, convert, kernel_sums, normalize_with_cls
from .toeplitz import biased_linear_attention

PATHS = ("auto", "axis", "scan", "fft", "dense")

AXIS_CHUNK_BYTES = 2 << 20
"""Chunk budget of the axis (GEMM) path on CPU: one chunk's channel grid ≤ 2 MiB (lc·(d + 1)·H·W
floats), so the chunk and its products stay in the measured CPU's 2 MiB L2 per core. Measured (one
layer fwd+bwd, N = 4,096, 1 thread): m = 32 — 1, 2, 4, 8 MiB: 584, 574, 595, 721 ms; m = 112 —
2, 4, 8 MiB: 1.92, 2.17, 2.48 s."""
SCAN_CHUNK_BYTES = 4 << 20
"""Chunk budget of the scan path on CPU: 4 MiB (measured at N = 4,096, m = 32: 4 MiB 2.1 s, 16 MiB 2.4 s,
64 MiB 3.6 s CPU time fwd+bwd — larger chunks amortize the per-step calls but leave the cache)."""

DENSE_MAX_TOKENS = 256
"""auto: at most this many patches use the N×N weights. Measured (fwd+bwd, B = 8, 8 heads, d = 32,
1 thread): dense beat the chunked axis path up to N ≈ 300 for m = 32 (N = 256: 92 vs 168 ms; N =
400: 374 vs 289 ms) and up to N ≈ 1,700 by the fitted cost model for m = 112 — but the N×N path
keeps B·h·T² numbers per tensor, so it is capped here for every m."""
SCAN_MIN_SIDE = 1 << 30
"""auto: the scan path for decay kernels from this grid side on — never, on the measured CPU. Bare
attention fwd+bwd, m = d = 32, 8 heads, 1 thread: side 64 axis 0.43 s vs scan 2.18 s; side 128
2.63 s vs 7.91 s. Each recurrence step is a separate kernel call, and the steps along the rows
need a transposed copy; the scan's cost per element is constant while the GEMMs' grows with H + W,
so the gap shrinks ≈ 1.7× per doubling of the side — a crossover near side 500, beyond the FFT
path's (below). The scan remains selectable with path="scan"."""
FFT_PER_AXIS = 4.8
"""auto: one counted unit of the FFT path, 3·(2H−1)(2W−1)·log2((2H−1)(2W−1)) per channel, costs
this many units of the axis path, N·(H + W) per channel. Measured at 64×64 (one layer fwd+bwd minus
plain linear attention, 1 thread): chunked FFT 6.1× (m = 32) and 6.3× (m = 112) slower than axis;
the crossover this implies is near side 600."""


def _check_factors(row_logits, col_logits, grid, heads):
    rows, cols = 2 * grid.height - 1, 2 * grid.width - 1
    if row_logits.shape != (heads, rows) or col_logits.shape != (heads, cols):
        raise ValueError(
            f"a {grid.height}×{grid.width} grid needs row logits (heads={heads}, {rows}) and "
            f"column logits ({heads}, {cols}), got {tuple(row_logits.shape)} and "
            f"{tuple(col_logits.shape)}"
        )


def axis_rates(decay: torch.Tensor, heads: int) -> torch.Tensor:
    """Decay rates per head and axis (h, 2) [λ_row, λ_col] from λ (h,) (both axes) or (h, 2)."""
    if tuple(decay.shape) not in ((heads,), (heads, 2)):
        raise ValueError(f"decay rates must be (heads={heads},) or ({heads}, 2), got {tuple(decay.shape)}")
    return decay[:, None].expand(-1, 2) if decay.dim() == 1 else decay


def decay_logits(decay: torch.Tensor, grid):
    """Row logits −λ_row·|Δrow| (h, 2H−1) and column logits −λ_col·|Δcol| (h, 2W−1)."""
    rates = axis_rates(decay, decay.shape[0])
    # integer offsets first, then one rounding to the rates' dtype: an arange in bf16 itself accumulates
    # its step and is off by 2 past 256 (−300 where −298 is meant)
    rows = torch.arange(-(grid.height - 1), grid.height, device=decay.device).abs().to(decay.dtype)
    cols = torch.arange(-(grid.width - 1), grid.width, device=decay.device).abs().to(decay.dtype)
    return -rates[:, :1] * rows, -rates[:, 1:] * cols


def toeplitz_matrix(logits: torch.Tensor, size: int) -> torch.Tensor:
    """M[h, i, j] = logits[h, j − i + size − 1]: (h, size, size) from (h, 2·size − 1)."""
    index = torch.arange(size, device=logits.device)
    return logits[:, index[None, :] - index[:, None] + size - 1]


def weights(
    q_num, k_num, q_den, k_den, grid, row_logits, col_logits, cls_terms=None, eps: float = DENOMINATOR_EPS
) -> torch.Tensor:
    """The dense attention matrix A (B, h, T, T), out = A v, of the table r ⊕ c (the test reference).

    A_ij = c_ij ψ(q_i)ᵀψ(k_j) / max(Σ_l c_il φ(q_i)ᵀφ(k_l), ε), c_ij = exp(b_ij − M_i) with B from
    relative.dense_bias(r ⊕ c, CLS terms) and a detached per-query shift M_i = max_j b_ij (cancels in
    the ratio; unlike toeplitz.biased_linear_weights' one shift for all patch rows of a head, no row can
    underflow). Same
    matrix as biased_linear_weights with table[h, a, b] = row_logits[h, a] + col_logits[h, b].
    """
    heads = q_num.shape[1]
    _check_factors(row_logits, col_logits, grid, heads)
    if cls_terms is not None and tuple(cls_terms.shape) != (heads, 3):
        raise ValueError(f"cls_terms must be (heads={heads}, 3), got {tuple(cls_terms.shape)}")
    dtype = compute_dtype_of(q_num, k_num, q_den, k_den, row_logits, col_logits, cls_terms)
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den = (t.to(dtype) for t in (q_num, k_num, q_den, k_den))
        table = row_logits.to(dtype)[:, :, None] + col_logits.to(dtype)[:, None, :]
        bias = dense_bias(table, None if cls_terms is None or not grid.cls else cls_terms.to(dtype), grid)
        kernel = torch.exp(bias - bias.detach().amax(-1, keepdim=True))  # (h, T, T), row max 1
        numerator = (q_num @ k_num.transpose(-2, -1)) * kernel  # (B, h, T, T)
        denominator = ((q_den @ k_den.transpose(-2, -1)) * kernel).sum(-1, keepdim=True)
        return numerator / denominator.clamp_min(eps)


# --- operators --------------------------------------------------------------------------------------


class _GridOperator(KernelOperator):
    """A kernel applied to an H×W grid of channels in place ("rows_first" layout)."""

    layout = "rows_first"

    def __init__(self, height: int, width: int):
        self.height, self.width = height, width

    def bytes_per_channel(self, height, width, dtype):
        return height * width * torch.finfo(dtype).bits // 8


class AxisOperator(_GridOperator):
    """K = R ⊗ C by two dense products per chunk: u = x·Cᵀ along each grid row, y = R·u along each
    column. Parameters R (h, H, H), C (h, W, W). In the "rows_first" layout (memory (gc, H, C, W))
    each product is one batched GEMM without copies: (H·C, W)·Cᵀ and R·(H, C·W); the parameter
    gradients too: ∂R = p·uᵀ over (H, C·W), ∂C = (Rᵀp)ᵀ·x over (H·C, W)."""

    def forward(self, x, heads, state, keep):
        rows, cols = state[0][heads], state[1][heads]  # (gc, H, H), (gc, W, W)
        gc, channels, height, width = x.shape
        x = x.transpose(1, 2).reshape(gc, height * channels, width)  # a view in the rows_first layout
        u = torch.bmm(x, cols.transpose(-2, -1))  # (gc, H·C, W)
        y = torch.bmm(rows, u.view(gc, height, channels * width))  # (gc, H, C·W)
        return y.view(gc, height, channels, width).transpose(1, 2), (u if keep else None)

    def backward(self, p, x, heads, state, cache, grads):
        rows, cols = state[0][heads], state[1][heads]
        gc, channels, height, width = p.shape
        p = p.transpose(1, 2).reshape(gc, height, channels * width)
        p_rows = torch.bmm(rows.transpose(-2, -1), p)  # Rᵀ p: (gc, H, C·W)
        if grads is not None:
            u = cache.view(gc, height, channels * width)
            x = x.transpose(1, 2).reshape(gc, height * channels, width)
            grads[0].index_add_(0, heads, torch.bmm(p, u.transpose(-2, -1)))  # Σ_c,w p[h, c, w]·u[r, c, w]
            grads[1].index_add_(0, heads, torch.bmm(p_rows.view(gc, height * channels, width).transpose(-2, -1), x))
        dx = torch.bmm(p_rows.view(gc, height * channels, width), cols)  # (Rᵀp)·C = Cᵀ along rows
        return dx.view(gc, height, channels, width).transpose(1, 2)


def _scan_major(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x with `dim` moved first (a view), copied if its slices are not contiguous: every recurrence
    step then reads and writes contiguous memory (a strided step touches one float per cache line)."""
    moved = x.movedim(dim, 0)
    return moved if moved[0].is_contiguous() else moved.contiguous()


def _inclusive(x: torch.Tensor, g: torch.Tensor, reverse: bool) -> torch.Tensor:
    """s[t] = x[t] + γ·s[t∓1] along dim 0 (one fused multiply-add per step, written in place)."""
    out = torch.empty_like(x)
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    previous = None
    for t in steps:
        if previous is None:
            out[t].copy_(x[t])
        else:
            torch.addcmul(x[t], out[previous], g, out=out[t])
        previous = t
    return out


def geometric(x: torch.Tensor, gamma: torch.Tensor, dim: int) -> torch.Tensor:
    """y[t] = Σ_s γ^|t−s|·x[s] along `dim` by two first-order recurrences; γ (x.shape[0],).

    y = a + c − x with a[t] = x[t] + γ·a[t−1] (forward) and c[t] = x[t] + γ·c[t+1] (backward).
    """
    major = _scan_major(x, dim)  # (L, gc, ...)
    g = gamma.view(-1, *([1] * (x.dim() - 2)))
    a, c = _inclusive(major, g, reverse=False), _inclusive(major, g, reverse=True)
    return a.add_(c).sub_(major).movedim(0, dim)


def geometric_grad(p: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, dim: int) -> torch.Tensor:
    """∂/∂γ ⟨p, geometric(x, γ)⟩ per slab (x.shape[0],): ⟨p, K′x⟩, K′[t, s] = |t−s|·γ^(|t−s|−1).

    By the differentiated recurrences a′[t] = a[t−1] + γ·a′[t−1] and b′[t] = c[t+1] + γ·b′[t+1]
    (a, c the inclusive scans of `geometric`; b[t] = c[t+1]·γ is its exclusive backward part).
    """
    major = _scan_major(x, dim)
    g = gamma.view(-1, *([1] * (x.dim() - 2)))
    a, c = _inclusive(major, g, reverse=False), _inclusive(major, g, reverse=True)
    slope = torch.zeros_like(major)
    length = major.shape[0]
    for t in range(1, length):
        torch.addcmul(a[t - 1], slope[t - 1], g, out=slope[t])
    backward = torch.zeros_like(major[0])
    for t in range(length - 2, -1, -1):
        backward = torch.addcmul(c[t + 1], backward, g)
        slope[t].add_(backward)
    return (p.movedim(dim, 0) * slope).transpose(0, 1).flatten(1).sum(1)


class DecayOperator(_GridOperator):
    """K = γ_row^|Δrow| ⊗ γ_col^|Δcol| by recurrences (`geometric`) along each axis; parameters
    γ_row, γ_col (h,). K is symmetric, so Kᵀ runs the same recurrences on the gradient. Layout
    "rows_first": the steps along the columns read contiguous (C, W) slices."""

    def forward(self, x, heads, state, keep):
        g_row, g_col = state[0][heads], state[1][heads]
        u = geometric(x, g_col, dim=-1)
        return geometric(u, g_row, dim=-2), (u if keep else None)

    def backward(self, p, x, heads, state, cache, grads):
        g_row, g_col = state[0][heads], state[1][heads]
        p_rows = geometric(p, g_row, dim=-2)
        if grads is not None:  # y = K_row (K_col x): ∂γ_row = ⟨p, K′_row u⟩, ∂γ_col = ⟨K_row p, K′_col x⟩
            grads[0].index_add_(0, heads, geometric_grad(p, cache, g_row, dim=-2))
            grads[1].index_add_(0, heads, geometric_grad(p_rows, x, g_col, dim=-1))
        return geometric(p_rows, g_col, dim=-1)


# --- the attention ----------------------------------------------------------------------------------


def choose_path(grid, decay: bool) -> str:
    """The "auto" rule (measured on the 2-core CPU; the same rule elsewhere, not measured there):

    - N ≤ DENSE_MAX_TOKENS: "dense" (the N×N weights);
    - decay kernels with max(H, W) ≥ SCAN_MIN_SIDE: "scan" (never, on the measured CPU);
    - "fft" when FFT_PER_AXIS × the FFT path's count is below the axis path's N·(H + W) (grids
      beyond ≈ 600×600), else "axis".
    """
    if grid.num_patches <= DENSE_MAX_TOKENS:
        return "dense"
    if decay and max(grid.height, grid.width) >= SCAN_MIN_SIDE:
        return "scan"
    rows, cols = 2 * grid.height - 1, 2 * grid.width - 1
    fft = 3 * rows * cols * math.log2(rows * cols)
    axis = grid.num_patches * (grid.height + grid.width)
    return "fft" if FFT_PER_AXIS * fft < axis else "axis"


def _host_readable(tensor: torch.Tensor) -> bool:
    """True where reading a value costs no device sync and no graph break (a CPU tensor, eager)."""
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


# long: one algorithm read top to bottom beside its equations (the four bias paths share its set-up)
def separable_linear_attention(
    q_num,
    k_num,
    q_den,
    k_den,
    v,
    grid,
    row_logits=None,
    col_logits=None,
    cls_terms=None,
    *,
    decay=None,
    path: str = "auto",
    eps: float = DENOMINATOR_EPS,
) -> torch.Tensor:
    """Linear attention with the separable relative bias b_h(Δ) = r_h[Δrow] + c_h[Δcol]: (B, h, T, d).

    q_num, k_num (ψ) and q_den, k_den (φ): (B, h, T, m); v (B, h, T, d); row_logits (h, 2H−1) with
    r(Δrow) at [Δrow + H−1], col_logits (h, 2W−1) likewise (the layout of relative.table_shape, so
    table = row[:, :, None] + col[:, None, :]); cls_terms (h, 3) = [CLS→patch, patch→CLS, CLS→CLS]
    or None (= 0). `decay`: rates λ (h,) or (h, 2) = [λ_row, λ_col] ≥ 0 when the bias is the
    Manhattan decay −λ_row·|Δrow| − λ_col·|Δcol| (enables the "scan" path; the logits, if not given,
    are built from it; the sign is checked on CPU only — on an accelerator reading it would stall
    the device each layer, and the callers' rates are positive by construction). `path`: "auto"
    (choose_path), "axis", "scan", "fft" or "dense". Output in
    the compute dtype max(float32, inputs); identical results on every path up to round-off.
    """
    heads, tokens, m = q_num.shape[1:]
    if tokens != grid.num_tokens:
        raise ValueError(
            f"a {grid.height}×{grid.width} grid (cls={grid.cls}) has {grid.num_tokens} tokens, got {tokens}"
        )
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    if decay is not None:
        decay = axis_rates(decay, heads)
        if row_logits is None or col_logits is None:
            row_logits, col_logits = decay_logits(decay, grid)
    if row_logits is None or col_logits is None:
        raise ValueError("give row_logits and col_logits, or decay rates")
    _check_factors(row_logits, col_logits, grid, heads)
    if cls_terms is not None and tuple(cls_terms.shape) != (heads, 3):
        raise ValueError(f"cls_terms must be (heads={heads}, 3), got {tuple(cls_terms.shape)}")
    if decay is not None and _host_readable(decay) and bool((decay < 0).any()):
        raise ValueError("decay rates must be λ ≥ 0 (the scan recurrences and the decay bias need them)")
    if path == "auto":
        path = choose_path(grid, decay is not None)
    if path == "scan" and decay is None:
        raise ValueError("the scan path needs decay rates λ ≥ 0")
    dtype = compute_dtype_of(q_num, k_num, q_den, k_den, v, row_logits, col_logits, cls_terms)
    row_logits, col_logits = row_logits.to(dtype), col_logits.to(dtype)
    cls_terms = None if cls_terms is None else cls_terms.to(dtype)
    if path == "dense":
        with autocast_off(q_num.device):
            q_num, k_num, q_den, k_den, v = convert(q_num, k_num, q_den, k_den, v, dtype)
            return weights(q_num, k_num, q_den, k_den, grid, row_logits, col_logits, cls_terms, eps) @ v
    if path == "fft":
        table = row_logits[:, :, None] + col_logits[:, None, :]
        return biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms, eps)
    p, height, width = grid.prefix, grid.height, grid.width
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den, v = convert(q_num, k_num, q_den, k_den, v, dtype)
        cls = row_logits.new_zeros(heads, 3) if cls_terms is None else cls_terms
        if path == "scan":  # λ ≥ 0: every query's largest patch weight is γ⁰ = 1 at Δ = 0
            row_max = row_logits.new_zeros(heads, height)
            col_max = col_logits.new_zeros(heads, width)
        else:
            rows, cols = toeplitz_matrix(row_logits, height), toeplitz_matrix(col_logits, width)  # (h, H, H), (h, W, W)
            row_max, col_max = rows.detach().amax(-1), cols.detach().amax(-1)  # per query row / column
            rows, cols = torch.exp(rows - row_max[..., None]), torch.exp(cols - col_max[..., None])  # ≤ 1
        # per-query shifts M_i (detached; they cancel in each query's ratio): the largest logit of the row
        patch_max = (row_max[:, :, None] + col_max[:, None, :]).flatten(1)  # (h, N)
        scale = None
        cls_weights = None
        if grid.cls:
            shift = torch.maximum(patch_max, cls[:, 1:2].detach())  # patch queries: patches and the CLS key
            cls_shift = torch.maximum(cls[:, 0], cls[:, 2]).detach()  # the CLS query
            scale = torch.exp(patch_max - shift)[None, :, :, None]  # (1, h, N, 1), ≤ 1
            cls_weights = (
                torch.exp(cls[:, 0] - cls_shift)[None, :, None, None],
                torch.exp(cls[:, 1:2] - shift)[None, :, :, None],
                torch.exp(cls[:, 2] - cls_shift)[None, :, None, None],
            )
        patch = [t[:, :, p:] for t in (q_num, k_num, q_den, k_den, v)]
        if q_num is q_den and k_num is k_den:
            patch[2], patch[3] = patch[0], patch[1]
        if path == "scan":
            gammas = torch.exp(-decay.to(dtype))  # (h, 2)
            op, params, budget = DecayOperator(height, width), [gammas[:, 0], gammas[:, 1]], SCAN_CHUNK_BYTES
        else:
            op, params, budget = AxisOperator(height, width), [rows, cols], AXIS_CHUNK_BYTES
        numerator, denominator = kernel_sums(op, params, *patch, budget=chunk_budget(q_num.device, budget))
        if scale is not None:
            numerator, denominator = numerator * scale, denominator * scale
        return normalize_with_cls(numerator, denominator, q_num, k_num, q_den, k_den, v, cls_weights, grid, eps)
