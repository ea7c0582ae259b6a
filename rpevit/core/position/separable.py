"""Separable relative biases: b_h(Δ) = r_h[Δrow] + c_h[Δcol].

Both members are ordinary `RelativeBias` modules — softmax adds the gathered table as a logit bias
and the 2D-FFT path of linear attention reads `table(grid)` unchanged — and in addition expose
the two per-axis factors,

    factors(grid) -> (row_logits (h, 2H−1), col_logits (h, 2W−1)),  table == row[:, :, None] + col[:, None, :]

(r(Δrow) at [Δrow + H−1], c(Δcol) at [Δcol + W−1], the layout of relative.table_shape), so that
linear attention can apply exp(b) = exp(r) ⊗ exp(c) one axis at a time without the N×N or the
(2H−1)×(2W−1) kernel (rpevit.core.attention.separable).

- `ManhattanDecay` ("manhattan"): b_h(Δ) = −λ_h·(|Δrow| + |Δcol|), the spatial decay of RMT (Fan et
  al., CVPR 2024, "RMT: Retentive Networks Meet Vision Transformers", Manhattan-distance spatial
  decay γ^(|Δx| + |Δy|) = exp(−λ(|Δx| + |Δy|))). λ_h > 0 per head, by default the ALiBi slopes
  (relative.alibi_slopes), as alibi2d uses them for ‖Δ‖₂. `decay_rates()` gives λ (h,) and
  `axis_rates(grid)` the per-axis rates (h, 2) actually applied (they differ under position
  interpolation), which the recurrence ("scan") path of linear attention consumes.
- `AxialRPE` ("axial_rpe"): b_h(Δ) = t_h,row[Δrow] + t_h,col[Δcol], two learnable tables,
  (2S−1) + (2S−1) numbers per head for the trained S×S grid instead of krpe's (2S−1)².

CLS: the three logits [CLS→patch, patch→CLS, CLS→CLS] of the other bias methods. The fixed decay
has none (cls_terms() is None: CLS attends and is attended to without bias, as alibi2d); the
learnable members carry a zero-initialised `cls_bias` (heads, 3) when the tokens lead with a CLS (`cls`), as krpe.
Learnable tensors are tagged no_weight_decay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..options import neutral
from .relative import RelativeBias, alibi_slopes, offset_axes


def _cls_bias(cls: bool, heads: int):
    """A zero-initialised learnable (heads, 3) CLS logit triple when the tokens lead with a CLS (`cls`), else None."""
    if not cls:
        return None
    bias = nn.Parameter(torch.zeros(heads, 3))
    bias.no_weight_decay = True
    return bias


def _table(factors):
    row, col = factors
    return row[:, :, None] + col[:, None, :]


@dataclass(frozen=True)
class ManhattanOptions:
    """manhattan: fixed ALiBi-slope decay rates, or learnable ones (log-parametrised, same init)."""

    learnable: bool = False


class ManhattanDecay(RelativeBias):
    """manhattan: b_h(Δ) = −λ_h·(|Δrow| + |Δcol|) (RMT's Manhattan spatial decay, Fan et al. 2024).

    exp(b) = γ_h^|Δrow|·γ_h^|Δcol|, γ_h = e^(−λ_h): separable, and each factor is a geometric decay,
    applied in linear attention by first-order recurrences or per-axis products. λ_h = the ALiBi
    slopes 2^(−8h/n) (relative.alibi_slopes) by default — a fixed, non-persistent buffer, no
    parameters, cls_terms() None. With options.learnable, λ_h = exp(`log_rates`) (positive for any
    value of the parameter; initialised at the ALiBi slopes) and a learnable `cls_bias` (heads, 3)
    with a CLS token (`cls`). Any grid: the closed form extends; with position interpolation the
    offsets are scaled by grid.scale() (Δrow·s_row, Δcol·s_col), i.e. the per-axis rates become
    λ_h·s_row and λ_h·s_col (`axis_rates`).
    """

    Options = ManhattanOptions

    def __init__(self, options: ManhattanOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(heads)
        self.learnable = bool(options.learnable)
        slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32)  # (heads,)
        if self.learnable:
            self.log_rates = nn.Parameter(slopes.log())
            self.log_rates.no_weight_decay = True
            self.cls_bias = _cls_bias(cls, heads)
        else:
            self.register_buffer("slopes", slopes, persistent=False)
            self.cls_bias = None

    def decay_rates(self) -> torch.Tensor:
        """λ_h > 0: (heads,)."""
        return self.log_rates.exp() if self.learnable else self.slopes

    def axis_rates(self, grid) -> torch.Tensor:
        """The rates along each axis on this grid, [λ_h·s_row, λ_h·s_col]: (heads, 2)."""
        rates = self.decay_rates()
        scale_rows, scale_cols = grid.scale()  # Python numbers: no host→device copy per forward
        return torch.stack((rates * scale_rows, rates * scale_cols), dim=-1)

    def factors(self, grid):
        """(−λ_h·|Δrow·s_row| (heads, 2H−1), −λ_h·|Δcol·s_col| (heads, 2W−1))."""
        rates = self.decay_rates()
        rows, cols = offset_axes(grid, device=rates.device, dtype=torch.float64, scaled=True)
        return (-rates[:, None] * rows.abs().to(rates.dtype), -rates[:, None] * cols.abs().to(rates.dtype))

    def table(self, grid):
        """−λ_h·(|Δrow| + |Δcol|) over the grid's (possibly scaled) offsets: (heads, 2H−1, 2W−1)."""
        return _table(self.factors(grid))

    def cls_terms(self):
        """The learned CLS logits (heads, 3); None (= 0) for fixed rates or without a CLS token."""
        return self.cls_bias

    def extra_repr(self) -> str:
        return f"heads={self.heads}, learnable={self.learnable}"


@dataclass(frozen=True)
class AxialRPEOptions:
    """axial_rpe on grids other than the trained one: each axis table clamped to the trained offsets
    (iRPE rule) or resized bicubically (Swin rule), as krpe. Evaluation only: result-neutral."""

    extrapolation: Literal["clamp", "interpolate"] = neutral("clamp")


class AxialRPE(RelativeBias):
    """axial_rpe: b_h(Δ) = t_h,row[Δrow] + t_h,col[Δcol], two learnable tables per head.

    Parameters: `row_table`, `col_table` (heads, 2S−1) over the trained S×S grid (S = image_size //
    patch_size), truncated-normal init with std 0.02 as krpe; `cls_bias` (heads, 3), zero init,
    with a CLS token (`cls`). All tagged no_weight_decay.

    Other grids (options.extrapolation), krpe's policy applied to each axis:
    - "clamp": offsets clamped into the trained range (a larger grid reuses the edge values, a
      smaller one reads the central part exactly);
    - "interpolate": each table resized bicubically (align_corners=False) to 2H−1 / 2W−1 — exactly
      krpe's 2D bicubic resize of the summed table, since bicubic weights act per axis and sum to 1.
    The trained grid reads the tables unchanged; a grid in position-interpolation mode
    (grid.interpolate) larger than the trained one is resized whatever the policy.
    """

    POLICIES = ("clamp", "interpolate")
    INIT_STD = 0.02
    Options = AxialRPEOptions

    def __init__(self, options: AxialRPEOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(heads)
        if options.extrapolation not in self.POLICIES:
            raise UserError(
                f"axial_rpe.extrapolation: {options.extrapolation!r} is not valid; expected one of "
                f"{', '.join(repr(p) for p in self.POLICIES)}."
            )
        self.trained = (side, side)
        self.policy = options.extrapolation
        self.row_table = nn.Parameter(torch.empty(heads, 2 * side - 1))
        self.col_table = nn.Parameter(torch.empty(heads, 2 * side - 1))
        for table in (self.row_table, self.col_table):
            nn.init.trunc_normal_(table, std=self.INIT_STD, a=-2 * self.INIT_STD, b=2 * self.INIT_STD)
            table.no_weight_decay = True
        self.cls_bias = _cls_bias(cls, heads)

    @staticmethod
    def _resize(table: torch.Tensor, length: int) -> torch.Tensor:
        """Bicubic (align_corners=False) resize of (heads, L) tables to (heads, length)."""
        return F.interpolate(table[None, :, None], size=(1, length), mode="bicubic", align_corners=False)[0, :, 0]

    @staticmethod
    def _clamp(table: torch.Tensor, size: int, trained: int) -> torch.Tensor:
        offsets = torch.arange(-(size - 1), size, device=table.device).clamp(-(trained - 1), trained - 1)
        return table[:, offsets + trained - 1]

    def factors(self, grid):
        """(row logits (heads, 2H−1), column logits (heads, 2W−1)) by the extrapolation policy."""
        trained_h, trained_w = self.trained
        if (grid.height, grid.width) == self.trained:
            return self.row_table, self.col_table
        if self.policy == "interpolate" or grid.scale() != (1.0, 1.0):
            return self._resize(self.row_table, 2 * grid.height - 1), self._resize(self.col_table, 2 * grid.width - 1)
        return self._clamp(self.row_table, grid.height, trained_h), self._clamp(self.col_table, grid.width, trained_w)

    def table(self, grid):
        """t_row[Δrow] + t_col[Δcol] over the grid's offsets: (heads, 2H−1, 2W−1)."""
        return _table(self.factors(grid))

    def cls_terms(self):
        """The learned CLS logits (heads, 3), or None without a CLS token."""
        return self.cls_bias

    def extra_repr(self) -> str:
        return f"heads={self.heads}, trained={self.trained}, extrapolation={self.policy!r}"
