"""Seed 001's positional gates: ABSOLUTE, position-dependent per-channel scalings of q and k.

Seed 001 ("Improving efficient Vision Transformers with RPEs", §5.1 and §5.3) calls these relative
encodings; they are not. Each patch token's query and key are multiplied, channel by channel, by a
positive scale that depends on that token's OWN position r_i = (row, col):

    q_i ← a(r_i) ⊙ q_i,   k_j ← b(r_j) ⊙ k_j,   a = exp(log-scale_q(r)), b = exp(log-scale_k(r)) > 0

(CLS, the prefix token, is never scaled). The gate is applied before any rotation and before the
kernel feature map of linear attention (attention/layer.py). What attention then sees:

- softmax: the logit becomes Σ_c a_c(r_i) b_c(r_j) q_ic k_jc / √d = q_iᵀ diag(a(r_i) ⊙ b(r_j)) k_j / √d.
  For a scalar gate (a = g_q·1, b = g_k·1) that is g_q(r_i) g_k(r_j)·q_i·k_j/√d: an absolute
  per-position temperature. Per channel, the positional factor a_c(r_i) b_c(r_j) =
  exp(u_c(r_i) + v_c(r_j)) is a product of a function of r_i and a function of r_j; it depends on
  r_j − r_i alone iff u_c(r) = −λ_c·r + α_c and v_c(r) = λ_c·r + β_c (log-scales affine in the
  position with opposite slopes — then the factor is exp(λ_c·(r_j − r_i) + const), an exponential
  in the offset). That is a measure-zero corner of IRPEGate's tables and, apart from constant
  log-scales, not something StringGate2D's sin/cos features produce; for generic (trained) parameters
  both gates fail the relative-property test of docs/methods.md §5 (tests/test_gates.py shows both the
  failure and the affine corner where it passes).
- FAVOR+: φ is not homogeneous (φ(x̃) ∝ exp(ωᵀx̃ − ‖x̃‖²/2)), so nothing cancels, not even a scalar
  query gate: E[φ(q̃_i)ᵀφ(k̃_j)] = exp(q̃_iᵀk̃_j/√d) = exp(Σ_c a_c(r_i) b_c(r_j) q_ic k_jc/√d), the
  same absolutely-tempered logit as softmax + gate, estimated by random features.
- Performer-ReLU, φ(x) = ReLU(d^(−1/4)·W x) + ε. With ε = 0 φ is positively homogeneous, so a
  SCALAR gate factors out: φ(g_q q_i) = g_q(r_i) φ(q_i) cancels between the numerator and the row
  normalizer, leaving A_ij = g_k(r_j) φ(q_i)ᵀφ(k_j) / Σ_l g_k(r_l) φ(q_i)ᵀφ(k_l): a key-side prior,
  rank one (every query sees the same positional weights). Seed 001's gates are PER CHANNEL, and
  then the query gate does not cancel. With W = I (identity features) ReLU commutes with a positive
  diagonal scaling, ReLU(a ⊙ x) = a ⊙ ReLU(x), so
      φ(q̃_i)ᵀφ(k̃_j) = Σ_c a_c(r_i) b_c(r_j) φ_c(q_i) φ_c(k_j):
  the query gate re-weights the channels per query; for identical content the positional kernel
  Σ_c w_c a_c(r_i) b_c(r_j) (w_c = φ_c(q)φ_c(k) ≥ 0) is non-negative, separable, of rank ≤ d and not
  Toeplitz in general. It collapses to the rank-one key-side prior only where a(r_i) is constant
  over the channels with φ_c(q_i) > 0. With a projection W (relu "random"/"learned", as in seed 001)
  the diagonal gate does not commute with W: φ(W(a(r_i) ⊙ q_i)) is a position-dependent feature map
  W·diag(a(r_i)), and only a common scalar factor cancels. With the backend's ε = 1e-3 the scalar
  cancellation is approximate, up to O(ε) relative terms.
In every case the extra cost is elementwise, O(N·d): linear attention stays linear.

- `IRPEGate` (gate_irpe, seed 001 §5.1 "IRPE-Gate", a multiplicative stand-in for iRPE):
  separate learned row and column tables for queries and for keys, each (heads, S, head_dim) over
  the trained S×S grid (S = image_size / patch_size):
      a(r) = exp(row_q[row] + col_q[col]),   b(r) = exp(row_k[row] + col_k[col]).
  Tables start at zero (identity gate) and are excluded from weight decay (like APE tables). On an
  H×W grid other than the trained one each table is resized along its axis by linear interpolation
  (F.interpolate 'linear', align_corners=False: entries sit at patch centres and the table spans
  the image, the same field-of-view rule as ape's bicubic resize; edges are clamped). The grid's
  `interpolate` flag changes nothing here — a table cannot extrapolate.
- `StringGate2D` (gate_string, seed 001 §5.3 "STRINGGate2D"): R low-rank 2D Fourier features of
  the normalised patch position with learnable frequencies ω_k ∈ R² and phases φ_k,
      f(r̂) = [sin(ω_kᵀr̂ + φ_k), cos(ω_kᵀr̂ + φ_k)]_{k<R} ∈ R^(2R),
  projected per head by learned bias-free maps P_q, P_k ∈ R^(d×2R) to per-channel log-scales:
      a(r) = exp(P_q f(r̂)),   b(r) = exp(P_k f(r̂)).
  R = options.rank (default 8). ω, φ are shared by the heads
  of a layer; ω ~ N(0, STRING_FREQUENCY_STD²) per component, φ ~ U[0, 2π); P_q = P_k = 0 at init
  (identity gate; ω and φ receive gradient once P moves). Positions r̂ = Grid.coords() / (S − 1):
  integer patch indices scaled so the trained grid spans [0, 1]² exactly; a larger grid
  extrapolates beyond 1 (the features are defined everywhere) and Grid(interpolate=True) scales
  positions back into the trained range first. ω, φ are excluded from weight decay (decaying ω
  would flatten the features, like RoPE frequencies); P_q, P_k are ordinary linear weights and ARE
  decayed, which pulls the gate towards the identity.

Scales are computed in float32 (float64 for float64 inputs) with autocast disabled, applied in that
dtype and cast back to q's/k's dtype; patches are re-joined to CLS with torch.cat, never by
in-place slice assignment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..options import NoOptions
from ..precision import autocast_off, compute_dtype

# ω ~ N(0, π²) per axis on positions in [0, 1]: |ω_k| mostly between ~π/2 (a quarter period across
# the image) and ~3π (a period every ~4 patches on a 7×7 grid), below the 7×7 Nyquist rate 6π.
STRING_FREQUENCY_STD = math.pi


class PositionalGate(nn.Module):
    """Base class: q_i ← a(r_i) ⊙ q_i, k_j ← b(r_j) ⊙ k_j on patch tokens; prefix (CLS) untouched.

    Subclasses implement `log_scales(grid, device, dtype)` → (log a, log b), each (heads, N, dim).
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.dim, self.heads = dim, heads

    def log_scales(self, grid, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel log-scales of queries and keys at the grid's patches: (heads, N, dim) each."""
        raise NotImplementedError

    def scales(self, grid, device=None, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The positive scales a(r), b(r) at the grid's patches: (heads, N, dim) each."""
        log_q, log_k = self.log_scales(grid, device, dtype)
        return log_q.exp(), log_k.exp()

    def _check(self, x: torch.Tensor, grid, name: str) -> None:
        if x.ndim != 4 or x.shape[1] != self.heads or x.shape[2] != grid.num_tokens or x.shape[3] != self.dim:
            raise ValueError(
                f"{type(self).__name__} expects {name} of shape (B, {self.heads}, "
                f"{grid.num_tokens}, {self.dim}) for a {grid.height}×{grid.width} grid, "
                f"got {tuple(x.shape)}"
            )

    def forward(self, q: torch.Tensor, k: torch.Tensor, grid) -> tuple[torch.Tensor, torch.Tensor]:
        """Gated (q, k), each (B, heads, T, dim) in its input dtype."""
        self._check(q, grid, "q")
        self._check(k, grid, "k")
        prefix = grid.prefix
        with autocast_off(q.device):
            dtype = compute_dtype(q.dtype, k.dtype)
            log_q, log_k = self.log_scales(grid, q.device, dtype)  # (h, N, d) each
            gated_q = (q[:, :, prefix:].to(dtype) * log_q.exp()).to(q.dtype)  # (B, h, N, d)
            gated_k = (k[:, :, prefix:].to(dtype) * log_k.exp()).to(k.dtype)
        if prefix:
            gated_q = torch.cat((q[:, :, :prefix], gated_q), dim=2)
            gated_k = torch.cat((k[:, :, :prefix], gated_k), dim=2)
        return gated_q, gated_k

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}"


def resize_table(table: torch.Tensor, length: int) -> torch.Tensor:
    """Linearly resize a (heads, S, dim) table along its position axis to (heads, length, dim).

    align_corners=False: entries are patch centres over the same image extent; edges are clamped.
    """
    if table.shape[1] == length:
        return table
    resized = F.interpolate(table.transpose(1, 2), size=length, mode="linear", align_corners=False)
    return resized.transpose(1, 2)  # (h, length, d)


class IRPEGate(PositionalGate):
    """Seed 001's IRPE-Gate (absolute): a(r) = exp(row_q[row] + col_q[col]), b(r) = exp(row_k[row] + col_k[col])."""

    Options = NoOptions

    def __init__(self, options: NoOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        self.trained = (side, side)
        # (h, S, d) each; zero = identity gate
        self.row_q = nn.Parameter(torch.zeros(heads, side, dim))
        self.col_q = nn.Parameter(torch.zeros(heads, side, dim))
        self.row_k = nn.Parameter(torch.zeros(heads, side, dim))
        self.col_k = nn.Parameter(torch.zeros(heads, side, dim))
        for table in (self.row_q, self.col_q, self.row_k, self.col_k):
            table.no_weight_decay = True

    @staticmethod
    def _combine(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """rows (h, H, d) + cols (h, W, d) → (h, H·W, d), row-major."""
        heads, height, dim = rows.shape
        return (rows[:, :, None, :] + cols[:, None, :, :]).reshape(heads, height * cols.shape[1], dim)

    def log_scales(self, grid, device, dtype):
        """row + col tables (resized linearly on new grids): (heads, N, dim) for q and for k."""

        def table(param, length):
            return resize_table(param.to(device=device, dtype=dtype), length)

        log_q = self._combine(table(self.row_q, grid.height), table(self.col_q, grid.width))
        log_k = self._combine(table(self.row_k, grid.height), table(self.col_k, grid.width))
        return log_q, log_k

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, trained={self.trained[0]}×{self.trained[1]}"


@dataclass(frozen=True)
class GateStringOptions:
    """Number R of learnable 2D Fourier frequencies of the STRING gate."""

    rank: int = 8

    def check(self, where: str) -> None:
        if self.rank < 1:
            raise UserError(f"{where}.rank must be a positive integer, got {self.rank}.")


class StringGate2D(PositionalGate):
    """Seed 001's STRINGGate2D (absolute): a(r) = exp(P_q f(r̂)), b(r) = exp(P_k f(r̂)), f = 2D Fourier features."""

    Options = GateStringOptions

    def __init__(self, options: GateStringOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        options.check("model.gate_string")
        rank = self.rank = options.rank
        self.position_scale = 1.0 / max(side - 1, 1)  # trained grid → [0, 1]²
        self.frequencies = nn.Parameter(torch.randn(rank, 2) * STRING_FREQUENCY_STD)  # ω_k = (ω_row, ω_col)
        self.phases = nn.Parameter(torch.rand(rank) * (2 * math.pi))  # φ_k
        self.frequencies.no_weight_decay = True
        self.phases.no_weight_decay = True
        # (h, d, 2R) per-head projections of the features to log-scales; zero = identity gate
        self.proj_q = nn.Parameter(torch.zeros(heads, dim, 2 * rank))
        self.proj_k = nn.Parameter(torch.zeros(heads, dim, 2 * rank))

    def positions(self, grid, device=None, dtype=torch.float32) -> torch.Tensor:
        """Normalised positions r̂ = Grid.coords() / (S − 1): (N, 2) (row, col)."""
        return grid.coords(device=device, dtype=dtype) * self.position_scale

    def features(self, positions: torch.Tensor) -> torch.Tensor:
        """f(r̂) = [sin(ω_kᵀr̂ + φ_k), cos(ω_kᵀr̂ + φ_k)]: positions (N, 2) → (N, 2R)."""
        dtype = positions.dtype
        angles = positions @ self.frequencies.to(dtype).T + self.phases.to(dtype)  # (N, R)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)

    def log_scales(self, grid, device, dtype):
        """P_q f(r̂), P_k f(r̂): (heads, N, dim) each."""
        f = self.features(self.positions(grid, device, dtype))  # (N, 2R)
        log_q = torch.einsum("nf,hdf->hnd", f, self.proj_q.to(dtype))
        log_k = torch.einsum("nf,hdf->hnd", f, self.proj_k.to(dtype))
        return log_q, log_k

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, rank={self.rank}"
