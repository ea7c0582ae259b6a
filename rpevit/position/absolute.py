"""Absolute position embeddings (Dosovitskiy et al. 2021, ViT): tokens ← tokens + p(r).

`ape` is a learned vector per patch position (and one for CLS); on a grid other than the
trained one its patch part is bicubic-resized (the ViT / DeiT fine-tuning rule).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LearnedAbsolute(nn.Module):
    """Learned APE over the trained patch grid, resized bicubically for other grids."""

    def __init__(self, config, dim: int, heads: int):
        super().__init__()
        side = config.image_size // config.patch_size
        self.trained = (side, side)
        self.patches = nn.Parameter(torch.randn(1, side * side, dim) * 0.02)  # (1, N, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if config.pool == "cls" else None
        self.patches.no_weight_decay = True
        if self.cls is not None:
            self.cls.no_weight_decay = True

    def patch_embedding(self, grid) -> torch.Tensor:
        """Position vectors of the grid's patches: (1, N, D), resized if the grid is new."""
        if (grid.height, grid.width) == self.trained:
            return self.patches
        h, w = self.trained
        table = self.patches.reshape(1, h, w, -1).permute(0, 3, 1, 2)  # (1, D, h, w)
        table = F.interpolate(table, size=(grid.height, grid.width), mode="bicubic", align_corners=False)
        return table.permute(0, 2, 3, 1).reshape(1, grid.num_patches, -1)

    def forward(self, tokens, grid):
        """tokens (B, T, D) plus their position vectors."""
        parts = [self.patch_embedding(grid)]
        if grid.cls:
            parts.insert(0, self.cls)
        return tokens + torch.cat(parts, dim=1).to(tokens.dtype)
