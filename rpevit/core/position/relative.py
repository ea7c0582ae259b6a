"""Relative-bias positional methods: a translation-invariant kernel b_h(Δ) over patch offsets.

Every member computes one table per head,

    b_h(Δ),  Δ = r_j − r_i ∈ [−(H−1), H−1] × [−(W−1), W−1]   (query i, key j),

stored as a tensor (heads, 2H−1, 2W−1) with b_h(Δ) at [Δrow + H−1, Δcol + W−1], plus three
scalars per head for the CLS token, [CLS→patch, patch→CLS, CLS→CLS] (query→key). Backends
consume it in one of two ways (docs/methods.md §3):

- softmax: logits s_ij + b_h(Δ_ij) — `dense(grid)` gathers the (heads, T, T) float attn_mask;
- linear:  weights exp(b_h(Δ_ij)) multiply φ(q_i)ᵀφ(k_j) — rpevit.core.attention.toeplitz reads
  `table(grid)` and `cls_terms()` and applies the kernel by a 2D FFT convolution (Luo et al. 2021).

Members (one class each, all sharing `RelativeBias`):

- `KernelizedRPE` ("krpe"): a learnable table (Luo et al. 2021; Swin's relative position bias,
  Liu et al. 2021, Eq. 4: Attention = SoftMax(QKᵀ/√d + B)V with B gathered from a table B̂).
- `Alibi2D` ("alibi2d"): b_h(Δ) = −m_h·‖Δ‖₂ (CROMA, Fuller et al. 2023; slopes of ALiBi, Press
  et al. 2022).
- `IRPE` ("irpe"): b_h(Δ) = p_h[bucket(Δ)] with iRPE's piecewise index (Wu et al. 2021, Eq. 18).

Position interpolation: when `grid.interpolate` is set with a `grid.trained` size, alibi2d and
irpe evaluate their closed forms at scaled offsets (Δrow·s_row, Δcol·s_col) with
(s_row, s_col) = grid.scale() (Chen et al. 2023), exactly as the rotary methods scale positions;
the table keeps its integer-offset layout, so both backends consume it unchanged. krpe ignores
the flag and follows its own extrapolation policy (options.extrapolation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..grid import grid_cached
from ..options import NoOptions, neutral


def table_shape(grid) -> tuple[int, int]:
    """(2H−1, 2W−1): the offset range of a grid."""
    return 2 * grid.height - 1, 2 * grid.width - 1


def offset_axes(grid, device=None, dtype=torch.float64, scaled: bool = False):
    """Row offsets (2H−1,) and column offsets (2W−1,) of the table, scaled by grid.scale() if asked."""
    rows = torch.arange(-(grid.height - 1), grid.height, device=device, dtype=dtype)
    cols = torch.arange(-(grid.width - 1), grid.width, device=device, dtype=dtype)
    if scaled:
        scale_rows, scale_cols = grid.scale()
        rows, cols = rows * scale_rows, cols * scale_cols
    return rows, cols


def dense_bias(table: torch.Tensor, cls_terms: torch.Tensor | None, grid) -> torch.Tensor:
    """The (heads, T, T) logit bias of a table (heads, 2H−1, 2W−1) and CLS terms (heads, 3) or None.

    Patch block: B[h, p+i, p+j] = table[h, Δrow + H−1, Δcol + W−1] with Δ = r_j − r_i from
    grid.offsets(); with a CLS token (p = 1) its row is CLS→patch (CLS→CLS at [0, 0]) and its
    column patch→CLS; cls_terms None means 0 there.
    """
    heads = table.shape[0]
    if tuple(table.shape[1:]) != table_shape(grid):
        raise ValueError(
            f"a {grid.height}×{grid.width} grid needs a table (heads, {table_shape(grid)[0]}, "
            f"{table_shape(grid)[1]}), got {tuple(table.shape)}"
        )
    offsets = grid.offsets(device=table.device)  # (N, N, 2)
    index = (offsets[..., 0] + grid.height - 1) * (2 * grid.width - 1) + offsets[..., 1] + grid.width - 1
    patches = table.flatten(1)[:, index]  # (h, N, N)
    if not grid.cls:
        return patches
    if cls_terms is None:
        cls_terms = table.new_zeros(heads, 3)
    cls_terms = cls_terms.to(table.dtype)
    n = grid.num_patches
    to_patches = cls_terms[:, 0, None, None].expand(heads, 1, n)  # CLS query → patch keys
    to_cls = cls_terms[:, 1, None, None].expand(heads, n, 1)  # patch queries → CLS key
    corner = cls_terms[:, 2, None, None]  # (h, 1, 1)
    top = torch.cat((corner, to_patches), dim=2)  # (h, 1, T)
    rest = torch.cat((to_cls, patches), dim=2)  # (h, N, T)
    return torch.cat((top, rest), dim=1)


class RelativeBias(nn.Module):
    """Base class of the "bias" mechanism: a per-head kernel over offsets plus CLS terms.

    Subclasses implement `table(grid)` and, if they have CLS terms, `cls_terms()`.
    """

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def table(self, grid) -> torch.Tensor:
        """b_h(Δ) for every offset of `grid`: (heads, 2H−1, 2W−1), at [Δrow + H−1, Δcol + W−1]."""
        raise NotImplementedError

    def cls_terms(self) -> torch.Tensor | None:
        """Logits [CLS→patch, patch→CLS, CLS→CLS] (query→key) per head: (heads, 3), or None (= 0)."""
        return None

    def dense(self, grid) -> torch.Tensor:
        """The (heads, T, T) logit bias of `grid` (T = grid.num_tokens), CLS border included."""
        return dense_bias(self.table(grid), self.cls_terms() if grid.cls else None, grid)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"


@dataclass(frozen=True)
class KrpeOptions:
    """KRPE on grids other than the trained one: offsets clamped into the trained range (iRPE rule)
    or the table bicubic-resized to (2H−1)×(2W−1) (Swin rule). Evaluation only: result-neutral."""

    extrapolation: Literal["clamp", "interpolate"] = neutral("clamp")


@dataclass(frozen=True)
class IrpeOptions:
    """iRPE offset buckets: per-axis product (49) or Euclidean distance (4), plus a CLS skip bucket."""

    buckets: Literal["product", "euclidean"] = "product"


class KernelizedRPE(RelativeBias):
    """krpe: a learnable relative-position table b_h(Δ) (Luo et al. 2021; Swin, Liu et al. 2021, Eq. 4).

    Softmax: softmax(qkᵀ/√d + B)v with B_ij = b_h(r_j − r_i); linear attention: weights
    exp(b_h(Δ_ij))·φ(q_i)ᵀφ(k_j), normalised per row ("Stable, Fast and Accurate: Kernelized
    Attention with Relative Positional Encoding", Luo et al., NeurIPS 2021).

    Parameters: `bias_table` (heads, 2S−1, 2S−1) over the trained S×S grid, S = image_size //
    patch_size, truncated-normal init with std 0.02 (Swin's init); `cls_bias` (heads, 3) = the
    logits [CLS→patch, patch→CLS, CLS→CLS], zero init, present only with a CLS token (`cls`).
    Both are tagged no_weight_decay.

    Other grids (options.extrapolation):
    - "clamp" (iRPE's rule): offsets are clamped into the trained range, so a larger grid reuses
      the edge values for its far offsets and a smaller grid reads the central part exactly.
    - "interpolate" (Swin's fine-tuning rule): the table is resized bicubically
      (align_corners=False) to (2H−1, 2W−1) — up for larger grids, down for smaller ones — which
      maps offset Δ to about Δ·(2S−1)/(2H−1) of the trained table; the centre Δ = 0 is kept.
    The trained grid itself always reads the table unchanged. A grid in position-interpolation
    mode (grid.interpolate, the "interpolate" mode of multi-resolution evaluation) larger than the
    trained one is resized; smaller grids keep the exact central part, as for the other methods.
    """

    POLICIES = ("clamp", "interpolate")
    INIT_STD = 0.02

    Options = KrpeOptions

    def __init__(self, options: KrpeOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(heads)
        self.trained = (side, side)
        self.policy = options.extrapolation
        self.bias_table = nn.Parameter(torch.empty(heads, 2 * side - 1, 2 * side - 1))
        nn.init.trunc_normal_(self.bias_table, std=self.INIT_STD, a=-2 * self.INIT_STD, b=2 * self.INIT_STD)
        self.bias_table.no_weight_decay = True
        self.cls_bias = nn.Parameter(torch.zeros(heads, 3)) if cls else None
        if self.cls_bias is not None:
            self.cls_bias.no_weight_decay = True

    def table(self, grid):
        """The learned table, clamped or resized to the grid's offsets: (heads, 2H−1, 2W−1)."""
        trained_h, trained_w = self.trained
        if (grid.height, grid.width) == self.trained:
            return self.bias_table
        if self.policy == "interpolate" or grid.scale() != (1.0, 1.0):
            resized = F.interpolate(self.bias_table[None], size=table_shape(grid), mode="bicubic", align_corners=False)
            return resized[0]
        device = self.bias_table.device
        rows = torch.arange(-(grid.height - 1), grid.height, device=device).clamp(-(trained_h - 1), trained_h - 1)
        cols = torch.arange(-(grid.width - 1), grid.width, device=device).clamp(-(trained_w - 1), trained_w - 1)
        return self.bias_table[:, rows + trained_h - 1][:, :, cols + trained_w - 1]

    def cls_terms(self):
        """The learned CLS logits (heads, 3), or None without a CLS token."""
        return self.cls_bias

    def extra_repr(self) -> str:
        return f"heads={self.heads}, trained={self.trained}, extrapolation={self.policy!r}"


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi head slopes (Press et al. 2022): 2^(−8h/n), h = 1..n for n a power of 2.

    Otherwise: the slopes of the closest lower power of 2, c, followed by every other slope of
    2c (its 1st, 3rd, …), n − c of them (the rule of the ALiBi reference code).
    """
    if heads < 1:
        raise ValueError(f"heads must be positive, got {heads}")
    closest = 2 ** int(math.floor(math.log2(heads)))
    slopes = [2.0 ** (-8.0 * h / closest) for h in range(1, closest + 1)]
    if closest == heads:
        return slopes
    return slopes + alibi_slopes(2 * closest)[0::2][: heads - closest]


class Alibi2D(RelativeBias):
    """alibi2d: b_h(Δ) = −m_h·‖Δ‖₂ (CROMA, Fuller et al., NeurIPS 2023, 2D-ALiBi; ALiBi, Press et al. 2022).

    m_h are the ALiBi slopes (`alibi_slopes`): 2^(−8h/n) for n heads a power of 2, else the
    interleaving rule. No parameters (the slopes are a non-persistent buffer, so they follow
    .to(device/dtype)); extends to any grid. CLS terms are zero: the CLS token attends and is
    attended to without bias (cls_terms() is None). With position interpolation the offsets are
    scaled by grid.scale() before the norm.
    """

    Options = NoOptions

    def __init__(self, options: NoOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(heads)
        self.register_buffer(
            "slopes", torch.tensor(alibi_slopes(heads), dtype=torch.float32), persistent=False
        )  # (heads,)

    def table(self, grid):
        """−m_h·‖Δ‖₂ over the grid's (possibly scaled) offsets: (heads, 2H−1, 2W−1)."""

        def build():
            rows, cols = offset_axes(grid, device=self.slopes.device, dtype=torch.float64, scaled=grid.interpolate)
            distance = torch.sqrt(rows[:, None] ** 2 + cols[None, :] ** 2)  # (2H−1, 2W−1)
            return -self.slopes[:, None, None] * distance.to(self.slopes.dtype)

        key = ("alibi2d", self.heads, *grid.table_key, self.slopes.device, self.slopes.dtype)
        return grid_cached(key, build)


def piecewise_index(x: torch.Tensor, alpha: float, beta: float, gamma: float) -> torch.Tensor:
    """iRPE's piecewise index g(x) (Wu et al. 2021, Eq. 18), as a long tensor in [−⌊β⌋, ⌊β⌋].

    g(x) = round(x) for |x| ≤ α, else sign(x)·min(β, round(α + ln(|x|/α)/ln(γ/α)·(β − α))).
    Rounding is torch.round (half to even, as iRPE); the cap min(β, ·) of an integer is ⌊β⌋ —
    iRPE clips to β and then truncates with its integer cast, which gives the same ⌊β⌋.
    """
    x = x.to(torch.float64)
    magnitude = x.abs()
    far = alpha + torch.log(magnitude.clamp_min(alpha) / alpha) / math.log(gamma / alpha) * (beta - alpha)
    far = torch.sign(x) * far.round().clamp_max(math.floor(beta))
    return torch.where(magnitude <= alpha, x.round(), far).to(torch.long)


class IRPE(RelativeBias):
    """irpe, bias mode: e_ij = q_i·k_j/√d + p_h[bucket(Δ_ij)] (Wu et al., ICCV 2021, "Rethinking and
    Improving Relative Position Encoding for Vision Transformer"; piecewise index g of Eq. 18).

    g = `piecewise_index` with α = 1.9, β = 3.8, γ = 15.2 (ratio 1.9: α = 1.9, β = 2α, γ = 8α).
    options.buckets:
    - "product": bucket = (g(Δrow) + ⌊β⌋)·(2⌊β⌋ + 1) + g(Δcol) + ⌊β⌋ — 7 × 7 = 49 buckets.
    - "euclidean": bucket = g(‖Δ‖₂) ∈ {0, …, ⌊β⌋} — 4 buckets. (g is applied to the exact
      distance; iRPE rounds the distance first and allocates 2⌊β⌋ + 1 = 7 ids, 3 unreachable.)
    `num_buckets` counts these offset buckets; with a CLS token (`cls`) one extra skip bucket
    (index num_buckets) holds the bias of every pair involving CLS, so cls_terms() = that value
    three times. `bucket_table` (heads, num_buckets + skip) is zero-initialised (as iRPE) and
    tagged no_weight_decay. iRPE writes offsets as r_i − r_j; with Δ = r_j − r_i the product
    buckets are relabelled, which changes nothing for a learned table. With position
    interpolation the offsets are scaled by grid.scale() before g.
    """

    ALPHA, BETA, GAMMA = 1.9, 3.8, 15.2
    METHODS = ("product", "euclidean")

    Options = IrpeOptions

    def __init__(self, options: IrpeOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(heads)
        self.method = options.buckets
        side = math.floor(self.BETA)
        self.num_buckets = (2 * side + 1) ** 2 if self.method == "product" else side + 1
        self.skip = 1 if cls else 0
        self.bucket_table = nn.Parameter(torch.zeros(heads, self.num_buckets + self.skip))
        self.bucket_table.no_weight_decay = True

    def index(self, x: torch.Tensor) -> torch.Tensor:
        """g(x) with this module's α, β, γ."""
        return piecewise_index(x, self.ALPHA, self.BETA, self.GAMMA)

    def buckets(self, grid) -> torch.Tensor:
        """Bucket id of every offset of `grid`: (2H−1, 2W−1) long in [0, num_buckets)."""

        def build():
            rows, cols = offset_axes(
                grid, device=self.bucket_table.device, dtype=torch.float64, scaled=grid.interpolate
            )
            if self.method == "euclidean":
                return self.index(torch.sqrt(rows[:, None] ** 2 + cols[None, :] ** 2))
            side = math.floor(self.BETA)
            return (self.index(rows)[:, None] + side) * (2 * side + 1) + self.index(cols)[None, :] + side

        key = ("irpe", self.method, *grid.table_key, self.bucket_table.device)
        return grid_cached(key, build)

    def table(self, grid):
        """The bucket values over the grid's offsets: (heads, 2H−1, 2W−1)."""
        return self.bucket_table[:, self.buckets(grid)]

    def cls_terms(self):
        """The skip bucket for all three CLS pairs: (heads, 3), or None without a CLS token."""
        if not self.skip:
            return None
        return self.bucket_table[:, self.num_buckets, None].expand(self.heads, 3)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, method={self.method!r}, num_buckets={self.num_buckets}, skip={self.skip}"
