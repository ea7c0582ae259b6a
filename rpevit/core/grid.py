"""Patch-grid geometry shared by every positional method.

Tokens are the H×W patches in row-major order (row = i div W, col = i mod W, the order in
which the convolutional patch embedding flattens), optionally preceded by one CLS token.
r_i = (row, col) and the offset Δ_ij = r_j − r_i (docs/methods.md, Notation).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Grid:
    """The token layout of one forward pass: an H×W patch grid, with or without a CLS token.

    `trained` is the grid the model was trained on; `interpolate` asks position-aware modules to
    scale positions into the trained range (Chen et al. 2023 position interpolation) instead of
    extrapolating them.
    """

    height: int
    width: int
    cls: bool = True
    trained: tuple[int, int] | None = None
    interpolate: bool = False

    @property
    def num_patches(self) -> int:
        """N = H·W patch tokens."""
        return self.height * self.width

    @property
    def num_tokens(self) -> int:
        """N plus the CLS token if there is one."""
        return self.num_patches + int(self.cls)

    @property
    def prefix(self) -> int:
        """How many non-patch tokens precede the patches (0 or 1)."""
        return int(self.cls)

    def scale(self) -> tuple[float, float]:
        """Factors (rows, cols) that map positions into the trained range when interpolating."""
        if not self.interpolate or self.trained is None:
            return 1.0, 1.0
        trained_h, trained_w = self.trained
        return (min(1.0, trained_h / self.height), min(1.0, trained_w / self.width))

    @property
    def table_key(self) -> tuple:
        """What a relative table over this grid depends on (for cache keys): its size and, when
        interpolating, its scale."""
        return self.height, self.width, self.interpolate and self.scale()

    def coords(self, device=None, dtype=torch.float32) -> torch.Tensor:
        """Positions r_i = (row, col) of the patches, row-major, scaled if interpolating: (N, 2)."""
        # scaled by Python numbers: a tensor built from host data would be a host→device copy per call
        scale_rows, scale_cols = self.scale()
        rows = torch.arange(self.height, device=device, dtype=dtype) * scale_rows
        cols = torch.arange(self.width, device=device, dtype=dtype) * scale_cols
        return torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)

    def offsets(self, device=None) -> torch.Tensor:
        """Integer offsets Δ_ij = r_j − r_i between patches: (N, N, 2) long (cached per shape)."""
        device = torch.device(device or "cpu")

        def build():
            rows = torch.arange(self.height, device=device)
            cols = torch.arange(self.width, device=device)
            r = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)
            return r[None, :, :] - r[:, None, :]

        return grid_cached(("offsets", self.height, self.width, device), build)


_CACHE: OrderedDict = OrderedDict()
CACHE_SIZE = 64


def grid_cached(key: tuple, build):
    """The one cache of tensors derived from a grid without parameters (offsets, rotation angles of
    fixed frequencies, sin-cos embeddings, ALiBi tables, iRPE buckets): built once per key — which
    names what, the grid's shape/scale, device and dtype — and shared by every layer and forward.
    Inference-mode tensors are kept apart (they cannot be saved for backward); while torch.compile
    traces, nothing is cached (the graph computes it)."""
    if torch.compiler.is_compiling():
        return build()
    key = (*key, torch.is_inference_mode_enabled())
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    value = _CACHE[key] = build()
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value
