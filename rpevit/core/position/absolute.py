"""Absolute position embeddings (Dosovitskiy et al. 2021, ViT): tokens ← tokens + p(r).

`ape` is a learned vector per patch position (and one for CLS); on a grid other than the
trained one its patch part is bicubic-resized (the ViT / DeiT fine-tuning rule).

`ape_sincos` is the fixed 2D sin-cos embedding of MAE (He et al. 2022) / MoCo v3 (Chen et al.
2021): with D = dim, ω_i = 1/10000^(2i/(D/2)) = 10000^(−i/(D/4)), i < D/4,

    p(row, col) = [sin(col·ω), cos(col·ω), sin(row·ω), cos(row·ω)]   (four blocks of D/4 channels)

— the column half first, as in MAE's code (its meshgrid puts w first) and MoCo v3's; CLS gets the
zero vector. Positions are Grid.coords(): integer patch indices from 0, so a patch at (row, col)
gets the same vector on every grid (extrapolation); under Grid(interpolate=True) they are scaled
into the trained range first (position interpolation, Chen et al. 2023). No parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..grid import grid_cached
from ..options import NoOptions


class LearnedAbsolute(nn.Module):
    """Learned APE over the trained patch grid, resized bicubically for other grids."""

    Options = NoOptions

    def __init__(self, options: NoOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__()
        self.trained = (side, side)
        self.patches = nn.Parameter(torch.randn(1, side * side, dim) * 0.02)  # (1, N, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if cls else None
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


def sincos_embedding(coords: torch.Tensor, dim: int) -> torch.Tensor:
    """MAE 2D sin-cos vectors of positions coords (N, 2) = (row, col): (N, dim), dim % 4 == 0."""
    quarter = dim // 4
    omega = 10000.0 ** (-torch.arange(quarter, dtype=coords.dtype, device=coords.device) / quarter)  # (D/4,)
    row = coords[:, 0:1] * omega  # (N, D/4)
    col = coords[:, 1:2] * omega
    return torch.cat((col.sin(), col.cos(), row.sin(), row.cos()), dim=-1)


class SinCosAbsolute(nn.Module):
    """Fixed 2D sin-cos APE (MAE / MoCo v3), recomputed for any grid; CLS gets zeros. No parameters."""

    Options = NoOptions

    def __init__(self, options: NoOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__()
        if dim % 4:
            raise UserError(
                f"ape_sincos needs model.dim divisible by 4 (sin and cos for each of the "
                f"two axes), got model.dim={dim}; choose a model.dim that is."
            )
        self.dim = dim

    def embedding(self, grid, device=None, dtype=torch.float32) -> torch.Tensor:
        """Position vectors of all tokens of the grid, CLS first if present: (1, T, D).

        Computed in float64 and cast to `dtype`; cached per grid shape, scale, device and dtype.
        """

        def build():
            patches = sincos_embedding(grid.coords(device=device, dtype=torch.float64), self.dim)  # (N, D)
            if grid.cls:
                patches = torch.cat((patches.new_zeros(grid.prefix, self.dim), patches))
            return patches.to(dtype)[None]

        key = (
            "ape_sincos",
            self.dim,
            grid.height,
            grid.width,
            grid.cls,
            grid.scale(),
            torch.device(device or "cpu"),
            dtype,
        )
        return grid_cached(key, build)

    def forward(self, tokens, grid):
        """tokens (B, T, D) plus their fixed position vectors."""
        if tokens.shape[-2:] != (grid.num_tokens, self.dim):
            raise ValueError(
                f"SinCosAbsolute expects (B, {grid.num_tokens}, {self.dim}) for a "
                f"{grid.height}×{grid.width} grid, got {tuple(tokens.shape)}"
            )
        return tokens + self.embedding(grid, tokens.device, tokens.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
