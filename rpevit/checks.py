"""Numerical property checks shared by the tests and the derivation notebook (docs/methods.md §5)."""

from __future__ import annotations

import torch

from .grid import Grid


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
    """Largest |fast path − A·v| of an attention layer (rpevit.attention.layer.MultiHeadAttention),
    relative to max(1, |A·v|): the backend's own computation against the dense matrix it reports."""
    q, k, v = layer._heads(x, grid)
    fast = layer.backend(q, k, v, grid, **layer._backend_kwargs())
    dense = layer.attention_matrix(x, grid) @ v
    return float((fast - dense).abs().max()) / max(1.0, float(dense.abs().max()))
