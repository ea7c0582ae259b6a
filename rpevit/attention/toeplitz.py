"""Relative-bias kernels inside linear attention by 2D FFT (Luo et al., NeurIPS 2021, "Stable,
Fast and Accurate: Kernelized Attention with Relative Positional Encoding").

With weights c_ij = exp(b(Δ_ij)), Δ_ij = r_j − r_i, kernelized attention becomes

    out_i = ψ(q_i)ᵀ[Σ_j c_ij ψ(k_j) v_jᵀ] / max(φ(q_i)ᵀ[Σ_j c_ij φ(k_j)], ε)

(ψ = numerator features, φ = denominator features; ψ = φ unless a post-map rotation rotates
the numerator only). Over the patch keys both brackets are 2D correlations of the H×W grid of
G_j = ψ(k_j) ⊗ v_j (m·d channels) and of φ(k_j) (m channels) with the kernel exp(b): the
N×N matrix [c_ij] is block-Toeplitz with Toeplitz blocks. We embed it in a circulant: the
kernel, flipped, is laid out on a P×Q torus with offset n at index n mod P (wrap-around), the
channels are zero-padded to P×Q, multiplied in the rfft2 domain and cropped back to H×W.
Offsets ri − rj span 2H−1 values, so P ≥ 2H−1, Q ≥ 2W−1 already avoid aliasing (the tight
circulant embedding; a kernel/signal linear convolution would need ≥ (2H−1)+(H−1)); P and Q
are rounded up to 5-smooth sizes for fast FFTs. Cost O(N log N·m·d) time.

Memory (issue 13, item 3): the m·(d + 1) channels never exist at once. `kernel_sums` streams
chunks of (batch·head, feature) slabs — at most FFT_CHUNK_BYTES of padded spectrum — through the
FFT product and contracts each with ψ(q) at once; its backward (`_KernelSums`, a custom autograd
Function) recomputes each chunk instead of keeping the spectra and per-query sums, so autograd saves
only q, k, v and the kernel: O(N·(m + d)) per head instead of ≈ 5·N·m·d. Measured on the 2-core
CPU (one layer with projections, N = 4,096, 8 heads, d = 32, fwd+bwd, 1 thread) against the
unchunked path: m = 32 — 7.4 s → 2.4 s, saved for backward 1,256 → 55 MB, peak RSS 3.5 GB → 205
MB; m = 112 — 36.9 s → 7.8 s, 4,381 → 179 MB, 12.3 GB → 309 MB (the unchunked path's GiB-sized
buffers missed every cache). The same engine runs the separable kernels of
rpevit.attention.separable.

CLS breaks the Toeplitz structure; it is a rank-one border handled in O(N): the CLS query
reads every patch key with weight exp(b_cls→patch) and itself with exp(b_cls→cls) (plain
sums), and every patch query gets the extra key term exp(b_patch→cls)·ψ(k_cls) ⊗ v_cls.

Numerics: everything runs in max(float32, input dtype) (complex64 / complex128 FFTs) with
autocast disabled. Weights are exp(b − M) with ONE detached M per head, the max over that head's
whole table and, with CLS, its CLS terms — every weight of an attention row carries the same
e^(−M), so it cancels exactly in the ratio while keeping all weights ≤ 1 (no overflow for any
table). DENOMINATOR_EPS = 1e-12 clamps the denominator: an underflow / round-off guard only.
Precision limit of the shared shift: FFT round-off is absolute (≈ machine ε × the head's largest
weight), so a query row whose largest bias lies `gap` below the head's max M gets relative error
≈ ε·e^gap — about 1e-3 at gap 10 in float32, negligible in float64 until gap ≈ 25. Rows stay
finite for any table. ALiBi never has a gap (b(0) = 0 is the max and every row sees Δ = 0); a
learned table only does if some row's best offset is far below the head's best.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..position.relative import dense_bias, table_shape
from ..precision import autocast_off, compute_dtype

DENOMINATOR_EPS = 1e-12


def fft_size(n: int) -> int:
    """The smallest 5-smooth integer (2^a·3^b·5^c) ≥ n: a fast FFT length."""
    size = max(1, n)
    while True:
        rest = size
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return size
        size += 1


FFT_OVERHEAD = 1.2


def fft_is_cheaper(grid, m: int, d: int) -> bool:
    """Whether the FFT path is expected to beat the dense N×N path for this grid.

    FFT: forward and inverse real FFTs of C = m·d + m channels on the P×Q torus, ≈ 3·C·PQ·log2(PQ)
    multiply-adds, times FFT_OVERHEAD; dense: the T×T kernel matrices, ≈ T²·(2m + d). Both give
    the same attention exactly. FFT_OVERHEAD is measured, not derived: with the chunked FFT path
    (reports/bench/cpu_bias.md: `rpevit bench bias --sides 32,64`, 2-core CPU, torch 2.13) its time
    per counted multiply-add was 0.4× (relu, N = 4,096) to 1.8× (favor, N = 1,024) the dense path's;
    1.2 picks the measured faster path in every krpe cell there (dense at N = 1,024, FFT at 4,096,
    where it is also 18–60× smaller). The unchunked FFT path of rpevit 0.1 needed 4.
    """
    rows, cols = fft_size(2 * grid.height - 1), fft_size(2 * grid.width - 1)
    fft = FFT_OVERHEAD * 3 * (m * d + m) * rows * cols * math.log2(rows * cols)
    dense = grid.num_tokens**2 * (2 * m + d)
    return fft < dense


def _compute_dtype(*tensors) -> torch.dtype:
    """max(float32, the dtypes of the given tensors; None entries ignored)."""
    return compute_dtype(*(t.dtype for t in tensors if t is not None))


def _check(table, cls_terms, grid, heads):
    if table.dim() != 3 or tuple(table.shape[1:]) != table_shape(grid) or table.shape[0] != heads:
        raise ValueError(
            f"table must be (heads={heads}, {table_shape(grid)[0]}, {table_shape(grid)[1]}) for "
            f"a {grid.height}×{grid.width} grid, got {tuple(table.shape)}"
        )
    if cls_terms is not None and tuple(cls_terms.shape) != (heads, 3):
        raise ValueError(f"cls_terms must be (heads={heads}, 3), got {tuple(cls_terms.shape)}")


def kernel_weights(table: torch.Tensor, cls_terms: torch.Tensor | None, grid):
    """exp(b − M) of the table (h, 2H−1, 2W−1) and of the CLS terms (h, 3), M one max per head.

    M (detached) covers the whole table and, when the grid has CLS, the CLS terms (0 if None).
    """
    cls = table.new_zeros(table.shape[0], 3) if cls_terms is None else cls_terms.to(table.dtype)
    shift = table.detach().flatten(1).amax(dim=1)  # (h,)
    if grid.cls:
        shift = torch.maximum(shift, cls.detach().amax(dim=1))
    return torch.exp(table - shift[:, None, None]), torch.exp(cls - shift[:, None])


def circulant_torus(kernel: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The kernel (h, 2H−1, 2W−1) laid out on the P×Q torus as a convolution kernel: (h, P, Q).

    y[n] = Σ_m t[n − m]·x[m] on the torus (indices mod P, Q) equals the correlation
    y[r_i] = Σ_j kernel[r_j − r_i + (H−1, W−1)]·x[r_j] on the zero-padded H×W grid: t[n] = b(−n), so
    the kernel is flipped, padded and rolled so that offset n sits at index n mod P (wrap-around).
    """
    rows, cols = fft_size(2 * height - 1), fft_size(2 * width - 1)
    flipped = kernel.flip(-2, -1)  # index a ↔ n = a − (H−1)
    torus = F.pad(flipped, (0, cols - (2 * width - 1), 0, rows - (2 * height - 1)))  # (h, P, Q)
    return torch.roll(torus, shifts=(-(height - 1), -(width - 1)), dims=(-2, -1))


def toeplitz_correlate(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y[.., r_i] = Σ_j kernel[.., r_j − r_i + (H−1, W−1)]·x[.., r_j] by FFT.

    x (B, h, C, H, W); kernel (h, 2H−1, 2W−1) (offset Δ at [Δrow + H−1, Δcol + W−1]) → (B, h, C, H, W).
    All channels at once (no chunking): the reference form of the FFT product.
    """
    height, width = x.shape[-2:]
    rows, cols = fft_size(2 * height - 1), fft_size(2 * width - 1)
    kernel_f = torch.fft.rfft2(circulant_torus(kernel, height, width))  # (h, P, Q/2+1)
    x_f = torch.fft.rfft2(x, s=(rows, cols))  # (B, h, C, P, Q/2+1), zero-padded
    y = torch.fft.irfft2(x_f * kernel_f[None, :, None], s=(rows, cols))  # (B, h, C, P, Q)
    return y[..., :height, :width]


# --- chunked kernel sums: bounded memory and a backward of their own --------------------------------

FFT_CHUNK_BYTES = 8 << 20
"""Budget of the FFT path's padded complex spectrum per chunk on CPU: 8 MiB.

The m·(d + 1) channels of the per-query sums are processed in chunks of whole (batch·head, feature)
slabs so that one chunk's spectrum, gc·lc·(d+1)·P·(Q/2+1) complex numbers, stays ≤ this budget;
the other buffers of a chunk (input grid, product, cropped output) are of the same order, so a
chunk's working set stays within a few budgets whatever N, m, d, B and h are. Measured on the
2-core CPU (torch 2.13, N = 4,096, d = 32, one chunk's rfft2 · product · irfft2): 2, 4 and 8 MiB
spectra ran at 30, 29 and 37 µs per channel; the unchunked path's GiB-scale tensors were 3–5×
slower per channel over a whole forward+backward (cache misses).
"""
ACCELERATOR_CHUNK_BYTES = 512 << 20
"""Chunk budget on non-CPU devices (CUDA): large, so each kernel launch sees ≥ 10⁷ elements. Not
measured (no GPU at hand when written): a device-independent starting point, not a tuned value."""


def chunk_budget(device: torch.device, cpu_bytes: int) -> int:
    """The chunk budget in bytes: `cpu_bytes` on CPU, ACCELERATOR_CHUNK_BYTES elsewhere."""
    return cpu_bytes if device.type == "cpu" else ACCELERATOR_CHUNK_BYTES


class KernelOperator:
    """A linear map y = K x of grids x (gc, C, H, W), the same K for every channel of one head.

    Instances carry the grid as `height`, `width`, and the memory `layout` in which `kernel_sums`
    builds the channel grids they receive (the logical shape is always (gc, C, H, W)):
    "channels_first" — memory (gc, C, H, W), for 2D FFTs over the trailing dims; "rows_first" —
    memory (gc, H, C, W), so a product along the rows (W) is one GEMM over (H·C, W) and a product
    along the columns (H) one GEMM over (H, C·W), both without copies.
    Subclasses implement the map, its transpose and the gradient of ⟨p, K x⟩ with respect to their
    parameters; `kernel_sums` streams chunks of channels through them. `heads` (gc,) long: the head
    of each slab of the chunk. `state` is what `prepare` made of the parameters (under no_grad).
    """

    layout = "channels_first"

    def bytes_per_channel(self, height: int, width: int, dtype: torch.dtype) -> int:
        """Working memory of one channel, compared with the chunk budget."""
        raise NotImplementedError

    def prepare(self, params):
        return params

    def forward(self, x, heads, state, keep: bool):
        """(K x, cache for `backward`'s parameter gradients, or None if not `keep`)."""
        raise NotImplementedError

    def backward(self, p, x, heads, state, cache, grads):
        """Kᵀ p; when `grads` (from `new_grads`) is given, also add ∂⟨p, K x⟩/∂params into it."""
        raise NotImplementedError

    def new_grads(self, state, params) -> list:
        return [torch.zeros_like(param) for param in params]

    def finish_grads(self, grads, state, params) -> tuple:
        return tuple(grads)


class FFTOperator(KernelOperator):
    """The block-Toeplitz map of a kernel by rfft2 on the P×Q torus; parameter: the torus (h, P, Q)
    (`circulant_torus`). Kᵀ multiplies by the conjugate spectrum; the gradient of ⟨p, t ⊛ x⟩ with
    respect to the torus t is the circular cross-correlation Σ_channels p ⋆ x, summed over channels
    in the frequency domain and inverted once per head at the end."""

    def __init__(self, height: int, width: int):
        self.height, self.width = height, width
        self.size = (fft_size(2 * height - 1), fft_size(2 * width - 1))

    def bytes_per_channel(self, height, width, dtype):
        rows, cols = self.size
        return rows * (cols // 2 + 1) * 2 * torch.finfo(dtype).bits // 8

    def prepare(self, params):
        (torus,) = params
        return torch.fft.rfft2(torus)  # (h, P, Q/2+1)

    def forward(self, x, heads, state, keep):
        x_f = torch.fft.rfft2(x, s=self.size)  # (gc, C, P, Q/2+1)
        product = x_f * state[heads][:, None] if keep else x_f.mul_(state[heads][:, None])
        y = torch.fft.irfft2(product, s=self.size)[..., : self.height, : self.width]
        return y, (x_f if keep else None)

    def backward(self, p, x, heads, state, cache, grads):
        p_f = torch.fft.rfft2(p, s=self.size)
        if grads is not None:  # ⟨p, t ⊛ x⟩ = Σ_s t[s]·(p ⋆ x)[s]; DFT(p ⋆ x) = P·conj(X)
            grads[0].index_add_(0, heads, (p_f * cache.conj()).sum(1))
        dx = torch.fft.irfft2(p_f.mul_(state[heads][:, None].conj()), s=self.size)
        return dx[..., : self.height, : self.width]

    def new_grads(self, state, params):
        return [torch.zeros_like(state)]

    def finish_grads(self, grads, state, params):
        return (torch.fft.irfft2(grads[0], s=self.size),)


def _chunks(slabs: int, features: int, per_feature: int, budget: int):
    """(g0, g1, l0, l1) ranges over slabs × features with ≤ `budget` bytes each (≥ one feature)."""
    lc = max(1, min(features, budget // max(1, per_feature)))
    gc = max(1, budget // max(1, features * per_feature)) if lc == features else 1
    for g0 in range(0, slabs, gc):
        for l0 in range(0, features, lc):
            yield g0, min(slabs, g0 + gc), l0, min(features, l0 + lc)


_ORDER = {"channels_first": (0, 1, 2, 3, 4), "rows_first": (0, 3, 1, 2, 4)}  # memory order of (gc, lc, E, H, W)


def _outer(k_num, values, k_den, layout):
    """Channels (gc, lc, E, H, W) of G_j = ψ(k_j) ⊗ [v_j, 1], with φ(k_j) in the last channel, stored
    in the operator's memory layout (a permuted view when "rows_first")."""
    order, inverse = _ORDER[layout], [_ORDER[layout].index(i) for i in range(5)]
    # the product of the permuted factors is contiguous in the layout's memory order; its inverse
    # permutation is the (gc, lc, E, H, W) view (no `out=` into a permuted view: a graph break)
    x = torch.mul(k_num[:, :, None].permute(*order), values[:, None].permute(*order)).permute(*inverse)
    if k_den is not None:
        x[:, :, -1] = k_den
    return x


class _KernelSums(torch.autograd.Function):
    """[Σ_j K_ij ψ(q_i)ᵀψ(k_j) v_j ; Σ_j K_ij φ(q_i)ᵀφ(k_j)] over patch tokens, in chunks.

    Forward: for each chunk of (slab, feature) pairs, the channels ψ(k)_l ⊗ [v, 1] (φ(k)_l in the
    last) go through K and are contracted with ψ(q)_l (φ(q)_l for the last) at once; only the
    (gc, lc, d+1, H, W) chunk exists at a time. Backward recomputes each chunk: S = K X gives
    ∂ψ(q), ∂φ(q); Kᵀ P with P = ψ(q) ⊗ [∂num, ∂den] gives ∂ψ(k), ∂φ(k), ∂v; the operator adds its
    parameter gradients. Only the inputs are saved for backward (O(N·(m + d)) per slab).
    """

    @staticmethod
    def forward(ctx, op, budget, heads, q_num, k_num, q_den, k_den, v, *params):
        shared = q_den is None
        batch, height, width = q_num.shape[0], op.height, op.width
        state = op.prepare(params)
        q_t, k_t, qd_t, kd_t, values = _slabs(q_num, k_num, q_den, k_den, v, height, width, op.layout)
        slabs, m, d = q_t.shape[0], q_t.shape[1], v.shape[-1]
        out = q_num.new_zeros(slabs, d + 1, height, width)
        per_feature = (d + 1) * op.bytes_per_channel(height, width, q_num.dtype)
        for g0, g1, l0, l1 in _chunks(slabs, m, per_feature, budget):
            idx = torch.arange(g0, g1, device=q_num.device) % heads
            x = _outer(k_t[g0:g1, l0:l1], values[g0:g1], None if shared else kd_t[g0:g1, l0:l1], op.layout)
            y = op.forward(x.flatten(1, 2), idx, state, keep=False)[0].unflatten(1, (l1 - l0, d + 1))
            # contract with ψ(q) at once (addcmul per feature: no chunk-sized temporary). ψ ≡ φ: the
            # last channel, ψ(k)·1 contracted with ψ(q), is the denominator
            for i, l in enumerate(range(l0, l1)):
                if shared:
                    out[g0:g1].addcmul_(q_t[g0:g1, l, None], y[:, i])
                else:
                    out[g0:g1, :d].addcmul_(q_t[g0:g1, l, None], y[:, i, :d])
                    out[g0:g1, d].addcmul_(qd_t[g0:g1, l], y[:, i, d])
        ctx.op, ctx.budget, ctx.heads, ctx.shared = op, budget, heads, shared
        ctx.save_for_backward(q_num, k_num, q_den, k_den, v, *params)
        out = out.flatten(-2).unflatten(0, (batch, -1))  # (B, h, d+1, N)
        return out[:, :, :d].transpose(-2, -1), out[:, :, d]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_num, grad_den):
        # in the forward's precision even when backward() is called inside an autocast region
        with autocast_off(ctx.saved_tensors[0].device):
            return _KernelSums._gradients(ctx, grad_num, grad_den)

    @staticmethod
    def _gradients(ctx, grad_num, grad_den):
        q_num, k_num, q_den, k_den, v, *params = ctx.saved_tensors
        op, shared, heads = ctx.op, ctx.shared, ctx.heads
        need = ctx.needs_input_grad[3:]
        need_q, need_k = need[0] or need[2], need[1] or need[3] or need[4]
        need_params = any(need[5:])
        height, width = op.height, op.width
        state = op.prepare(params)
        q_t, k_t, qd_t, kd_t, values = _slabs(q_num, k_num, q_den, k_den, v, height, width, op.layout)
        slabs, m, d = q_t.shape[0], q_t.shape[1], v.shape[-1]
        grad_num = torch.zeros_like(v) if grad_num is None else grad_num
        grad_den = v.new_zeros(v.shape[:-1]) if grad_den is None else grad_den
        go = torch.cat((grad_num.transpose(-2, -1), grad_den.unsqueeze(-2)), dim=-2)  # (B, h, d+1, N)
        go = go.reshape(slabs, d + 1, height, width)
        dq, dqd = torch.zeros_like(q_t), (None if shared else torch.zeros_like(q_t))
        dk, dkd = torch.zeros_like(k_t), (None if shared else torch.zeros_like(k_t))
        dv = torch.zeros_like(values)
        grads = op.new_grads(state, params) if need_params else None
        per_feature = (d + 1) * op.bytes_per_channel(height, width, q_num.dtype)
        for g0, g1, l0, l1 in _chunks(slabs, m, per_feature, ctx.budget):
            idx = torch.arange(g0, g1, device=q_num.device) % heads
            kn, qn, g_out = k_t[g0:g1, l0:l1], q_t[g0:g1, l0:l1], go[g0:g1]
            x = _outer(kn, values[g0:g1], None if shared else kd_t[g0:g1, l0:l1], op.layout)
            cache = None
            if need_q or need_params:
                y, cache = op.forward(x.flatten(1, 2), idx, state, keep=need_params)
                y = y.unflatten(1, (l1 - l0, d + 1))
                if need_q:
                    if shared:
                        dq[g0:g1, l0:l1] = (y * g_out[:, None]).sum(2)
                    else:
                        dq[g0:g1, l0:l1] = (y[:, :, :d] * g_out[:, None, :d]).sum(2)
                        dqd[g0:g1, l0:l1] = y[:, :, -1] * g_out[:, None, -1]
                del y
            if need_k or need_params:
                p = _outer(qn, g_out, None if shared else qd_t[g0:g1, l0:l1] * g_out[:, None, -1], op.layout)
                dx = op.backward(p.flatten(1, 2), x.flatten(1, 2), idx, state, cache, grads)
                dx = dx.unflatten(1, (l1 - l0, d + 1))
                if shared:
                    dk[g0:g1, l0:l1] = (dx * values[g0:g1, None]).sum(2)
                else:
                    dk[g0:g1, l0:l1] = (dx[:, :, :d] * values[g0:g1, None, :d]).sum(2)
                    dkd[g0:g1, l0:l1] = dx[:, :, -1]
                for i in range(l1 - l0):
                    dv[g0:g1].addcmul_(kn[:, i, None], dx[:, i])
        param_grads = op.finish_grads(grads, state, params) if need_params else (None,) * len(params)

        def back(t, like):  # (slabs, C, H, W) → like (B, h, N, C)
            return None if t is None else t.flatten(-2).transpose(-2, -1).reshape(like.shape)

        dv = dv[:, :d]
        return (
            None,
            None,
            None,
            back(dq, q_num),
            back(dk, k_num),
            None if shared else back(dqd, q_den),
            None if shared else back(dkd, k_den),
            back(dv, v),
            *param_grads,
        )


def _slabs(q_num, k_num, q_den, k_den, v, height, width, layout):
    """Copies (B·h, C, H, W) of ψ(q), ψ(k), φ(q), φ(k) (None if shared) and [v, 1] in `layout`."""

    def grid_form(t):
        if t is None:
            return None
        t = t.flatten(0, 1).unflatten(1, (height, width))  # (G, H, W, C)
        if layout == "rows_first":
            return t.permute(0, 1, 3, 2).contiguous().permute(0, 2, 1, 3)  # memory (G, H, C, W)
        return t.permute(0, 3, 1, 2).contiguous()  # memory (G, C, H, W)

    ones = v.new_ones(v.shape[:-1] + (1,))
    return (
        grid_form(q_num),
        grid_form(k_num),
        grid_form(q_den),
        grid_form(k_den),
        grid_form(torch.cat((v, ones), dim=-1)),
    )


def kernel_sums(op: KernelOperator, params, q_num, k_num, q_den, k_den, v, budget: int):
    """Σ_j K_ij ψ(q_i)ᵀψ(k_j) v_j (B, h, N, d) and Σ_j K_ij φ(q_i)ᵀφ(k_j) (B, h, N, 1) over the patches.

    q_num, k_num (ψ), q_den, k_den (φ): (B, h, N, m) patch tokens only; v (B, h, N, d); K = the
    operator with `params` (tensors, differentiable), applied in chunks of ≤ `budget` bytes of the
    operator's working memory. ψ ≡ φ (the same tensors) shares the channels: the denominator is the
    sum with value 1, one extra channel per feature. Gradients by the chunks' own backward.
    """
    shared = q_num is q_den and k_num is k_den
    num, den = _KernelSums.apply(
        op, budget, q_num.shape[1], q_num, k_num, None if shared else q_den, None if shared else k_den, v, *params
    )
    return num, den.unsqueeze(-1)


def normalize_with_cls(
    numerator, denominator, q_num, k_num, q_den, k_den, v, cls_weights, grid, eps: float = DENOMINATOR_EPS
) -> torch.Tensor:
    """out = numerator / max(denominator, eps) after adding the CLS rank-one border: (B, h, T, d).

    numerator (B, h, N, d) and denominator (B, h, N, 1): the patch queries' sums over the patch keys;
    q_num … v: all T tokens; cls_weights: the weights exp(b − M) of [CLS→patch, patch→CLS, CLS→CLS],
    either (h, 3) or a triple of tensors broadcastable to (1, h, 1, 1), (1, h, N, 1), (1, h, 1, 1)
    (per-query shifts). Patch queries get exp(b_patch→cls)·ψ(q_i)ᵀψ(k_cls)·v_cls (and likewise in
    the denominator); the CLS query reads every patch key with weight exp(b_cls→patch) and itself
    with exp(b_cls→cls).
    """
    p = grid.prefix
    if p:
        if torch.is_tensor(cls_weights):
            cls_weights = [cls_weights[:, i, None, None][None] for i in range(3)]  # (1, h, 1, 1) each
        c_to_patch, patch_to_c, c_to_c = cls_weights
        k_patch, kd_patch, v_patch = k_num[:, :, p:], k_den[:, :, p:], v[:, :, p:]
        q_patch, qd_patch = q_num[:, :, p:], q_den[:, :, p:]
        k_cls, kd_cls, v_cls = k_num[:, :, :1], k_den[:, :, :1], v[:, :, :1]  # (B, h, 1, ·)
        numerator = numerator + patch_to_c * (q_patch @ k_cls.transpose(-2, -1)) * v_cls
        denominator = denominator + patch_to_c * (qd_patch @ kd_cls.transpose(-2, -1))
        q_cls, qd_cls = q_num[:, :, :1], q_den[:, :, :1]  # (B, h, 1, m)
        cls_num = (
            c_to_patch * (q_cls @ k_patch.transpose(-2, -1)) @ v_patch
            + c_to_c * (q_cls @ k_cls.transpose(-2, -1)) * v_cls
        )  # (B, h, 1, d)
        cls_den = c_to_patch * (qd_cls @ kd_patch.transpose(-2, -1)).sum(-1, keepdim=True) + c_to_c * (
            qd_cls @ kd_cls.transpose(-2, -1)
        )  # (B, h, 1, 1)
        numerator = torch.cat((cls_num, numerator), dim=2)
        denominator = torch.cat((cls_den, denominator), dim=2)
    return numerator / denominator.clamp_min(eps)


def convert(q_num, k_num, q_den, k_den, v, dtype):
    """The five attention inputs in `dtype`, keeping ψ ≡ φ (the same tensor objects) when it holds."""
    shared = q_num is q_den and k_num is k_den
    q_num, k_num, v = q_num.to(dtype), k_num.to(dtype), v.to(dtype)
    if shared:
        return q_num, k_num, q_num, k_num, v
    return q_num, k_num, q_den.to(dtype), k_den.to(dtype), v


def biased_linear_attention(
    q_num, k_num, q_den, k_den, v, grid, table, cls_terms, eps: float = DENOMINATOR_EPS
) -> torch.Tensor:
    """Linear attention with relative weights exp(b(Δ)) in O(N log N·m·d): (B, h, T, d).

    q_num, k_num (ψ) and q_den, k_den (φ): (B, h, T, m); v: (B, h, T, d); table (h, 2H−1, 2W−1);
    cls_terms (h, 3) = [CLS→patch, patch→CLS, CLS→CLS] or None (= 0). Output in the compute
    dtype max(float32, inputs). The FFT products run in chunks (FFT_CHUNK_BYTES of spectrum on CPU)
    with their own backward, so memory is O(N·(m + d)) per head beyond one chunk.
    """
    heads, tokens, m = q_num.shape[1:]
    if tokens != grid.num_tokens:
        raise ValueError(
            f"a {grid.height}×{grid.width} grid (cls={grid.cls}) has {grid.num_tokens} tokens, got {tokens}"
        )
    _check(table, cls_terms, grid, heads)
    dtype = _compute_dtype(q_num, k_num, q_den, k_den, v, table, cls_terms)
    p, height, width = grid.prefix, grid.height, grid.width
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den, v = convert(q_num, k_num, q_den, k_den, v, dtype)
        kernel, cls = kernel_weights(table.to(dtype), None if cls_terms is None else cls_terms.to(dtype), grid)
        patch = [t[:, :, p:] for t in (q_num, k_num, q_den, k_den, v)]
        if q_num is q_den and k_num is k_den:
            patch[2], patch[3] = patch[0], patch[1]
        numerator, denominator = kernel_sums(
            FFTOperator(height, width),
            [circulant_torus(kernel, height, width)],
            *patch,
            budget=chunk_budget(q_num.device, FFT_CHUNK_BYTES),
        )
        return normalize_with_cls(numerator, denominator, q_num, k_num, q_den, k_den, v, cls, grid, eps)


def biased_linear_weights(
    q_num, k_num, q_den, k_den, grid, table, cls_terms, eps: float = DENOMINATOR_EPS
) -> torch.Tensor:
    """The dense A (B, h, T, T) with biased_linear_attention(..., v, ...) = A v, built as N×N.

    A_ij = c_ij ψ(q_i)ᵀψ(k_j) / max(Σ_l c_il φ(q_i)ᵀφ(k_l), ε), c = exp(B − M) with the same
    per-head shift M as the FFT path; for inspection and as the reference in tests.
    """
    heads = q_num.shape[1]
    _check(table, cls_terms, grid, heads)
    dtype = _compute_dtype(q_num, k_num, q_den, k_den, table, cls_terms)
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den = (t.to(dtype) for t in (q_num, k_num, q_den, k_den))
        kernel, cls = kernel_weights(table.to(dtype), None if cls_terms is None else cls_terms.to(dtype), grid)
        weights = dense_bias(kernel, cls if grid.cls else None, grid)  # (h, T, T): exp(B − M)
        numerator = (q_num @ k_num.transpose(-2, -1)) * weights  # (B, h, T, T)
        denominator = ((q_den @ k_den.transpose(-2, -1)) * weights).sum(-1, keepdim=True)  # (B, h, T, 1)
        return numerator / denominator.clamp_min(eps)
