"""Numerical property checks shared by the tests and the derivation notebook (docs/methods.md §5):
the relative property, FAVOR+ as an estimator of exp(qᵀk/√d) and the FFT path of a relative bias in
linear attention against an independent dense reference."""

from __future__ import annotations

import math

import numpy as np
import torch

from .attention.features import favor_features, orthogonal_gaussian_matrix
from .grid import Grid

F64 = torch.float64


def offset_ratios(weights: torch.Tensor, grid: Grid) -> dict[tuple[int, int], torch.Tensor]:
    """For each offset Δ, the ratios A[i, i+Δ] / A[i, i] over every patch query i with i+Δ inside.

    `weights` is one attention matrix (T, T) over grid.num_tokens tokens (CLS rows/cols skipped).
    For a relative method and identical token content these ratios depend on Δ only.
    """
    patches = weights.detach()[grid.prefix :, grid.prefix :]  # (N, N)
    offsets = grid.offsets()  # (N, N, 2): Δ_ij = r_j − r_i
    diagonal = patches.diagonal().unsqueeze(1)  # A[i, i]
    ratios = patches / diagonal
    groups: dict[tuple[int, int], list] = {}
    for (dr, dc), value in zip(offsets.reshape(-1, 2).tolist(), ratios.reshape(-1)):
        groups.setdefault((dr, dc), []).append(value)
    return {delta: torch.stack(values) for delta, values in groups.items()}


def relative_violation(weights: torch.Tensor, grid: Grid) -> float:
    """Largest spread of A[i,j]/A[i,j′] across queries sharing the same offsets, relative to the
    ratios' scale: ~1e-12 (float64) for a relative method, O(1) for an absolute one.

    The §5 identity A[i,j]/A[i,j′] = A[i′,j+t]/A[i′,j′+t] holds for all valid i, i′, j, j′ exactly
    when A[i, i+Δ]/A[i, i] depends on Δ alone, which is what is measured here. `weights` may carry
    leading head/batch dimensions; the worst one is returned.
    """
    if weights.dim() > 2:
        return max(relative_violation(w, grid) for w in weights.reshape(-1, *weights.shape[-2:]))
    groups = offset_ratios(weights, grid)
    scale = max(float(v.abs().max()) for v in groups.values())
    spread = max(float(v.max() - v.min()) for v in groups.values())
    return spread / scale


@torch.no_grad()
def dense_reference_error(layer, x: torch.Tensor, grid: Grid) -> float:
    """Largest |fast path − A·v| of an attention layer (rpevit.core.attention.layer.MultiHeadAttention),
    relative to max(1, |A·v|): the backend's own computation against the dense matrix it reports."""
    q, k, v = layer._heads(x, grid)
    fast = layer.backend(q, k, v, grid, **layer._backend_kwargs())
    dense = layer.attention_matrix(x, grid) @ v
    return float((fast - dense).abs().max()) / max(1.0, float(dense.abs().max()))


def favor_estimator_error(
    d: int, multipliers, pairs: int = 2000, draws: int = 8, qk_scale: float = 0.5, seed: int = 0
) -> list[dict]:
    """The FAVOR+ estimate φ(q)ᵀφ(k) of exp(qᵀk/√d) without stabilizer or ε, for m = multiplier·d
    features, orthogonal vs i.i.d. ω: per (kind, m) the mean relative error over `pairs` random
    (q, k) pairs and `draws` ω draws, the mean signed error (bias) and its standard error (over draws)."""
    generator = torch.Generator().manual_seed(seed)
    q = qk_scale * torch.randn(pairs, d, generator=generator, dtype=F64)
    k = qk_scale * torch.randn(pairs, d, generator=generator, dtype=F64)
    exact = torch.exp((q * k).sum(-1) / math.sqrt(d))
    rows = []
    for multiplier in multipliers:
        m = multiplier * d
        for kind in ("orthogonal", "iid"):
            signed = []
            for _ in range(draws):
                omega = (
                    orthogonal_gaussian_matrix(m, d, generator=generator, dtype=F64)
                    if kind == "orthogonal"
                    else torch.randn(m, d, generator=generator, dtype=F64)
                )
                estimate = (favor_features(q, omega, None, eps=0.0) * favor_features(k, omega, None, eps=0.0)).sum(-1)
                signed.append(estimate / exact - 1)
            signed = torch.stack(signed)  # (draws, pairs)
            rows.append(
                {
                    "features": kind,
                    "m": m,
                    "m/d": multiplier,
                    "mean relative error": signed.abs().mean(dim=1).mean().item(),
                    "mean signed error (bias)": signed.mean().item(),
                    "bias standard error": (signed.mean(dim=1).std() / math.sqrt(draws)).item(),
                }
            )
    return rows


def loglog_slope(rows: list[dict], kind: str) -> float:
    """Fitted slope of log(mean relative error) against log(m) for one ω kind."""
    sub = [r for r in rows if r["features"] == kind]
    return float(np.polyfit(np.log([r["m"] for r in sub]), np.log([r["mean relative error"] for r in sub]), 1)[0])


def dense_biased_linear_reference(q_num, k_num, q_den, k_den, table, cls_terms, grid) -> torch.Tensor:
    """Attention weights A_ij = c_ij ψ(q_i)·ψ(k_j) / Σ_l c_il φ(q_i)·φ(k_l), c = exp(B), with B built
    from scratch (row-major index arithmetic, CLS border by hand: cls_terms[:, 0] CLS query → patch
    keys, [:, 1] patch queries → CLS key, [:, 2] CLS → CLS) — independent of rpevit.core.attention.toeplitz.
    table: (heads, 2H−1, 2W−1) indexed by key − query; grid with CLS."""
    height, width, n_patch = grid.height, grid.width, grid.num_patches
    index = torch.arange(n_patch)
    row, col = index // width, index % width
    d_row = row[None, :] - row[:, None]  # key − query
    d_col = col[None, :] - col[:, None]
    heads = table.shape[0]
    bias = torch.empty(heads, n_patch + 1, n_patch + 1, dtype=table.dtype)
    bias[:, 1:, 1:] = table[:, d_row + height - 1, d_col + width - 1]
    bias[:, 0, 1:] = cls_terms[:, 0, None]
    bias[:, 1:, 0] = cls_terms[:, 1, None]
    bias[:, 0, 0] = cls_terms[:, 2]
    c = torch.exp(bias)
    numerator = (q_num @ k_num.mT) * c
    denominator = ((q_den @ k_den.mT) * c).sum(-1, keepdim=True)
    return numerator / denominator


def fft_vs_dense(
    grid, heads: int, head_dim: int, num_features: int, seed: int = 0, dtypes=(torch.float64, torch.float32)
) -> list[dict]:
    """The FFT path of a relative bias in linear attention (toeplitz.biased_linear_attention) against
    the dense matrix it implies (biased_linear_weights @ v) and against the independent float64
    `dense_biased_linear_reference`, on `grid` (with CLS), an asymmetric random table and random CLS
    terms; for ψ = φ (positive features) and ψ ≠ φ (a signed numerator, as after a post-map
    rotation), in each dtype. Errors are max |Δ| / max |reference|."""
    from .attention.toeplitz import biased_linear_attention, biased_linear_weights

    g = torch.Generator().manual_seed(seed)
    table = torch.randn(heads, 2 * grid.height - 1, 2 * grid.width - 1, generator=g, dtype=F64)
    cls_terms = torch.randn(heads, 3, generator=g, dtype=F64)
    shape = (2, heads, grid.num_tokens)
    q_den = torch.exp(0.5 * torch.randn(*shape, num_features, generator=g, dtype=F64))
    k_den = torch.exp(0.5 * torch.randn(*shape, num_features, generator=g, dtype=F64))
    v = torch.randn(*shape, head_dim, generator=g, dtype=F64)
    q_rot = torch.randn(*shape, num_features, generator=g, dtype=F64)
    k_rot = torch.randn(*shape, num_features, generator=g, dtype=F64)
    rows = []
    for features, (q_num, k_num) in (("ψ = φ", (q_den, k_den)), ("ψ ≠ φ (rotated numerator)", (q_rot, k_rot))):
        reference = dense_biased_linear_reference(q_num, k_num, q_den, k_den, table, cls_terms, grid) @ v
        for dtype in dtypes:
            args = [t.to(dtype) for t in (q_num, k_num, q_den, k_den)]
            with torch.no_grad():
                fft = biased_linear_attention(*args, v.to(dtype), grid, table.to(dtype), cls_terms.to(dtype))
                dense = biased_linear_weights(*args, grid, table.to(dtype), cls_terms.to(dtype)) @ v.to(dtype)
            rows.append(
                {
                    "features": features,
                    "dtype": str(dtype).replace("torch.", ""),
                    "vs dense": ((fft - dense).abs().max() / dense.abs().max()).item(),
                    "vs independent": ((fft.to(F64) - reference).abs().max() / reference.abs().max()).item(),
                }
            )
    return rows
