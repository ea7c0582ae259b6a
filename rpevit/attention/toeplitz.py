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
are rounded up to 5-smooth sizes for fast FFTs. Cost O(N log N·m·d) time, O(N·m·d) memory.

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


FFT_OVERHEAD = 4.0


def fft_is_cheaper(grid, m: int, d: int) -> bool:
    """Whether the FFT path is expected to beat the dense N×N path for this grid.

    FFT: forward and inverse real FFTs of C = m·d + m channels on the P×Q torus, ≈ 3·C·PQ·log2(PQ)
    multiply-adds, times FFT_OVERHEAD; dense: the T×T kernel matrices, ≈ T²·(2m + d). Both give
    the same attention exactly. FFT_OVERHEAD = 4 is measured, not derived: on a 2-core CPU
    (`rpevit bench attention`, torch 2.13) the FFT path's complex element-wise work on padded
    m·d-channel tensors ran 1.7× (relu, m = 32) to 8× (favor, m = 112) slower per counted
    multiply-add than the dense path's matrix products, so the FFT path is chosen only on large
    grids (N in the thousands).
    """
    rows, cols = fft_size(2 * grid.height - 1), fft_size(2 * grid.width - 1)
    fft = FFT_OVERHEAD * 3 * (m * d + m) * rows * cols * math.log2(rows * cols)
    dense = grid.num_tokens ** 2 * (2 * m + d)
    return fft < dense


def _compute_dtype(*tensors) -> torch.dtype:
    """max(float32, the dtypes of the given tensors; None entries ignored)."""
    return compute_dtype(*(t.dtype for t in tensors if t is not None))


def _check(table, cls_terms, grid, heads):
    if table.dim() != 3 or tuple(table.shape[1:]) != table_shape(grid) or table.shape[0] != heads:
        raise ValueError(f"table must be (heads={heads}, {table_shape(grid)[0]}, {table_shape(grid)[1]}) for "
                         f"a {grid.height}×{grid.width} grid, got {tuple(table.shape)}")
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


def toeplitz_correlate(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """y[.., r_i] = Σ_j kernel[.., r_j − r_i + (H−1, W−1)]·x[.., r_j] by FFT.

    x (B, h, C, H, W); kernel (h, 2H−1, 2W−1) (offset Δ at [Δrow + H−1, Δcol + W−1]) → (B, h, C, H, W).
    """
    height, width = x.shape[-2:]
    rows, cols = fft_size(2 * height - 1), fft_size(2 * width - 1)
    # as a convolution y[n] = Σ_m k[n − m] x[m], k[n] = kernel[−n]: flip, then put offset n at n mod P
    flipped = kernel.flip(-2, -1)  # index a ↔ n = a − (H−1)
    torus = F.pad(flipped, (0, cols - (2 * width - 1), 0, rows - (2 * height - 1)))  # (h, P, Q)
    torus = torch.roll(torus, shifts=(-(height - 1), -(width - 1)), dims=(-2, -1))
    kernel_f = torch.fft.rfft2(torus)  # (h, P, Q/2+1)
    x_f = torch.fft.rfft2(x, s=(rows, cols))  # (B, h, C, P, Q/2+1), zero-padded
    y = torch.fft.irfft2(x_f * kernel_f[None, :, None], s=(rows, cols))  # (B, h, C, P, Q)
    return y[..., :height, :width]


def biased_linear_attention(q_num, k_num, q_den, k_den, v, grid, table, cls_terms,
                            eps: float = DENOMINATOR_EPS) -> torch.Tensor:
    """Linear attention with relative weights exp(b(Δ)) in O(N log N·m·d): (B, h, T, d).

    q_num, k_num (ψ) and q_den, k_den (φ): (B, h, T, m); v: (B, h, T, d); table (h, 2H−1, 2W−1);
    cls_terms (h, 3) = [CLS→patch, patch→CLS, CLS→CLS] or None (= 0). Output in the compute
    dtype max(float32, inputs).
    """
    heads, tokens, m = q_num.shape[1:]
    d = v.shape[-1]
    if tokens != grid.num_tokens:
        raise ValueError(f"a {grid.height}×{grid.width} grid (cls={grid.cls}) has {grid.num_tokens} tokens, "
                         f"got {tokens}")
    _check(table, cls_terms, grid, heads)
    dtype = _compute_dtype(q_num, k_num, q_den, k_den, v, table, cls_terms)
    p, height, width = grid.prefix, grid.height, grid.width
    with autocast_off(q_num.device):
        q_num, k_num, q_den, k_den, v = (t.to(dtype) for t in (q_num, k_num, q_den, k_den, v))
        kernel, cls = kernel_weights(table.to(dtype), None if cls_terms is None else cls_terms.to(dtype), grid)
        # patch keys: G_j = ψ(k_j) ⊗ v_j and φ(k_j), stacked as channels on the H×W grid
        k_patch, kd_patch, v_patch = k_num[:, :, p:], k_den[:, :, p:], v[:, :, p:]  # (B, h, N, ·)
        outer = (k_patch.unsqueeze(-1) * v_patch.unsqueeze(-2)).flatten(-2)  # (B, h, N, m·d)
        channels = torch.cat((outer, kd_patch), dim=-1).transpose(-2, -1)  # (B, h, m·d + m, N)
        sums = toeplitz_correlate(channels.unflatten(-1, (height, width)), kernel)  # (B, h, C, H, W)
        sums = sums.flatten(-2).transpose(-2, -1)  # (B, h, N, m·d + m)
        context = sums[..., :m * d].unflatten(-1, (m, d))  # Σ_j c_ij ψ(k_j) v_jᵀ: (B, h, N, m, d)
        normalizer = sums[..., m * d:]  # Σ_j c_ij φ(k_j): (B, h, N, m)
        q_patch, qd_patch = q_num[:, :, p:], q_den[:, :, p:]
        numerator = (q_patch.unsqueeze(-2) @ context).squeeze(-2)  # (B, h, N, d)
        denominator = (qd_patch * normalizer).sum(-1, keepdim=True)  # (B, h, N, 1)
        if p:
            c_to_patch, patch_to_c, c_to_c = (cls[:, i, None, None][None] for i in range(3))  # (1, h, 1, 1)
            k_cls, kd_cls, v_cls = k_num[:, :, :1], k_den[:, :, :1], v[:, :, :1]  # (B, h, 1, ·)
            # patch queries: + exp(b_patch→cls)·ψ(q_i)ᵀψ(k_cls)·v_cls, and likewise in the denominator
            numerator = numerator + patch_to_c * (q_patch @ k_cls.transpose(-2, -1)) * v_cls
            denominator = denominator + patch_to_c * (qd_patch @ kd_cls.transpose(-2, -1))
            # the CLS query: plain weighted sums over the patch keys, plus itself
            q_cls, qd_cls = q_num[:, :, :1], q_den[:, :, :1]  # (B, h, 1, m)
            cls_num = (c_to_patch * (q_cls @ k_patch.transpose(-2, -1)) @ v_patch
                       + c_to_c * (q_cls @ k_cls.transpose(-2, -1)) * v_cls)  # (B, h, 1, d)
            cls_den = (c_to_patch * (qd_cls @ kd_patch.transpose(-2, -1)).sum(-1, keepdim=True)
                       + c_to_c * (qd_cls @ kd_cls.transpose(-2, -1)))  # (B, h, 1, 1)
            numerator = torch.cat((cls_num, numerator), dim=2)
            denominator = torch.cat((cls_den, denominator), dim=2)
        return numerator / denominator.clamp_min(eps)


def biased_linear_weights(q_num, k_num, q_den, k_den, grid, table, cls_terms,
                          eps: float = DENOMINATOR_EPS) -> torch.Tensor:
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
