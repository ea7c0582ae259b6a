"""What is measured on a model's attention maps: the CLS row (or the mean attention each patch
receives) on the patch grid (`query_maps`) and Dosovitskiy et al.'s mean attention distance
(`mean_attention_distance`, `attention_distance`, against `uniform_attention_distance`)."""

from __future__ import annotations

import torch


def query_maps(maps: list[torch.Tensor], grid) -> list[torch.Tensor]:
    """Per layer (B, heads, H, W): the CLS query's row over the patches, or (no CLS) the mean
    attention each patch receives."""
    p = grid.prefix
    out = []
    for weights in maps:  # (B, h, T, T)
        rows = weights[:, :, 0, p:] if p else weights.mean(dim=2)
        out.append(rows.reshape(*rows.shape[:2], grid.height, grid.width))
    return out


def mean_attention_distance(weights: torch.Tensor, grid) -> torch.Tensor:
    """(B, heads): mean over patch queries of Σ_j w_ij ‖r_i − r_j‖ (in patches), w = |A| over the
    patch keys, renormalised per row (|A| because post-map rotations give signed weights)."""
    p = grid.prefix
    patches = weights[:, :, p:, p:].abs()  # (B, h, N, N)
    patches = patches / patches.sum(-1, keepdim=True).clamp_min(1e-30)
    distance = grid.offsets().double().norm(dim=-1).to(patches.dtype)  # (N, N)
    return (patches * distance).sum(-1).mean(-1)


def uniform_attention_distance(grid) -> float:
    """The mean attention distance of uniform attention over the patches of `grid`."""
    return grid.offsets().double().norm(dim=-1).mean().item()


def attention_distance(maps: list[torch.Tensor], grid) -> tuple[torch.Tensor, bool]:
    """((layers, heads) mean attention distance averaged over the images, whether any weight is negative)."""
    per_head = torch.stack([mean_attention_distance(w, grid).mean(0) for w in maps])
    return per_head, any(bool((w < 0).any()) for w in maps)
