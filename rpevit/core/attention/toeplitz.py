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

Memory: the m·(d + 1) channels never exist at once — the FFT product runs inside the chunked
kernel-sum engine of rpevit.core.attention.kernel_sums (FFTOperator is its operator), which streams
chunks of at most FFT_CHUNK_BYTES of spectrum and recomputes them in backward.

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

from ..position.relative import dense_bias, table_shape
from ..precision import autocast_off, compute_dtype_of
from .kernel_sums import (
    DENOMINATOR_EPS,
    KernelOperator,
    chunk_budget,
    convert,
    kernel_sums,
    normalize_with_cls,
)


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


def _check(table, cls_terms, grid, heads):
    if table.dim() != 3 or tuple(table.shape[1:]) != table_shape(grid) or table.shape[0] != heads:
        raise ValueError(
            f"table must be (heads={heads}, {table_shape(grid)[0]}, {table_shape(grid)[1]}) for "
            f"a {grid.height}×{grid.width} grid, got {tuple(table.shape)}"
        )
    if cls_terms is not None and tuple(cls_terms.shape) != (heads, 3):
        raise ValueError(f"cls_terms must be (heads={heads}, 3), got {tuple(cls_terms.shape)}")


def kernel_weights(table: torch.Tensor, cls_terms: torch.Tensor | None, grid):
    """exp(b − M) of the table (h, 2H−1, 2W−1) and of the CLS terms (h, 3; None on a grid without CLS), one shift
    M per head and query kind.

    Patch queries read the table and the patch→CLS term: M_patch = max(table, b_patch→CLS); the CLS query
    reads only CLS→patch and CLS→CLS: M_cls = max of those two (detached; without CLS, M = the table's max).
    A shift common to a query's whole row cancels in its ratio, so these are exact, and a CLS term far above
    the table (exp beyond the dtype's range) no longer underflows the patch rows to zero.
    """
    shift = table.detach().flatten(1).amax(dim=1)  # (h,)
    if not grid.cls:  # no CLS token: no CLS weights to compute
        return torch.exp(table - shift[:, None, None]), None
    cls = table.new_zeros(table.shape[0], 3) if cls_terms is None else cls_terms.to(table.dtype)
    shift = torch.maximum(shift, cls[:, 1].detach())  # patch queries
    cls_shift = torch.maximum(cls[:, 0], cls[:, 2]).detach()  # the CLS query
    shifts = torch.stack((cls_shift, shift, cls_shift), dim=1)  # (h, 3): [CLS→patch, patch→CLS, CLS→CLS]
    return torch.exp(table - shift[:, None, None]), torch.exp(cls - shifts)


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


# --- the FFT operator of the chunked kernel-sum engine ---------------------------------------------

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
    dtype = compute_dtype_of(q_num, k_num, q_den, k_den, v, table, cls_terms)
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
    shifts M as the FFT path (kernel_weights); for inspection and as the reference in tests.
    """
    heads = q_num.shape[1]
    _check(table, cls_terms, grid, heads)
    dtype = compute_dtype_of(q_num, k_num, q_den, k_den, table, cls_terms)
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den = (t.to(dtype) for t in (q_num, k_num, q_den, k_den))
        kernel, cls = kernel_weights(table.to(dtype), None if cls_terms is None else cls_terms.to(dtype), grid)
        weights = dense_bias(kernel, cls, grid)  # (h, T, T): exp(B − M)
        numerator = (q_num @ k_num.transpose(-2, -1)) * weights  # (B, h, T, T)
        denominator = ((q_den @ k_den.transpose(-2, -1)) * weights).sum(-1, keepdim=True)  # (B, h, T, 1)
        return numerator / denominator.clamp_min(eps)
