"""Rotary positional methods: orthogonal, position-dependent maps of q and k (or of φ(q), φ(k)).

Each patch token z_i (a (dim,) slice of q or k of one head) is replaced by R(r_i) z_i, with r_i =
(row, col) from `Grid.coords()`; prefix (CLS) tokens pass through unchanged. Every R here satisfies
R(r)ᵀR(r′) = R(0)ᵀR(r′ − r), so q_iᵀk_j only sees the offset r_j − r_i (docs/methods.md §2).

- `RoPEAxial`  — RoPE-Axial (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer",
  naver-ai/rope-vit): interleaved pairs (2c, 2c+1) rotated by angle a_c(r) = ω_c·x for the first
  dim/4 pairs and ω_c·y for the rest, ω_c = θ^(−4c/dim), θ = options.theta; x = col, y = row.
- `RoPEMixed`  — RoPE-Mixed (Heo et al. 2024): a_c(r) = f_x,c·x + f_y,c·y with (f_x, f_y) learnable
  per head (and per layer: each layer builds its own module).
- `CirculantString` — Circulant-STRING (Schenck et al., ICML 2025, "Learning the RoPEs: Better 2D
  and 3D Position Encodings with STRING"): R(r) = exp(Σ_k r_k L_k), L_k = C_k − C_kᵀ with C_k
  circulant (learnable first column c_k), applied through the DFT:
  R(r)z = IFFT(exp(Σ_k r_k μ_k) ⊙ FFT(z)), μ_k = 2i·Im FFT(c_k).
- `CayleyString` — Cayley-STRING (Schenck et al. 2025): R(r) = RoPE-Mixed(r)·P with the learnable
  orthogonal P = (I − S)(I + S)⁻¹, S = A − Aᵀ skew-symmetric per head. R(0) = P ≠ I, yet
  R(r)ᵀR(r′) = PᵀRoPE-Mixed(r′ − r)P still depends on r′ − r only (the trailing Pᵀ of the
  "proper" STRING form PᵀRoPE(r)P cancels in every dot product, so it is not applied).

Angles and rotations are computed in fp32 with autocast disabled (float64 when the input is
float64) and cast back to the input dtype. Patches are re-joined to the prefix with torch.cat,
never by in-place slice assignment (the autograd bug of rope-vit issue 14).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError
from ..grid import grid_cached
from ..options import NoOptions
from ..precision import autocast_off, compute_dtype

# Circulant-STRING init: c_k ~ N(0, σ²) with σ = CIRCULANT_STEP_STD / √(2·dim), so that each
# per-patch phase step θ_{k,m} = 2·Im FFT(c_k)_m ~ N(0, CIRCULANT_STEP_STD²) (Var Im FFT(c)_m =
# σ²·dim/2 for every non-DC, non-Nyquist frequency m). 0.5 rad/patch is close to RoPE-Mixed's
# mean initial magnitude, rotates visibly across a 7×7 / 8×8 grid (≈ 3 rad over 6 patches), and
# a step beyond π (aliasing) has probability ≈ 3·10⁻¹⁰ per frequency.
CIRCULANT_STEP_STD = 0.5


def rotate_pairs(z: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (z_2c, z_2c+1) of z (..., N, d) by angles given as cos, sin (..., N, d/2)."""
    pairs = z.unflatten(-1, (-1, 2))  # (..., N, d/2, 2)
    even, odd = pairs.unbind(-1)  # each (..., N, d/2)
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def pair_rotation_matrices(angles: torch.Tensor) -> torch.Tensor:
    """Dense block-diagonal rotations for interleaved pairs: angles (..., d/2) → (..., d, d)."""
    cos, sin = angles.cos(), angles.sin()
    blocks = torch.stack((torch.stack((cos, -sin), -1), torch.stack((sin, cos), -1)), -2)  # (..., p, 2, 2)
    p = angles.shape[-1]
    eye = torch.eye(p, dtype=angles.dtype, device=angles.device)
    dense = torch.einsum("ab,...aij->...aibj", eye, blocks)  # (..., p, 2, p, 2)
    return dense.reshape(*angles.shape[:-1], 2 * p, 2 * p)


def linear_angles(coords: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Angles a_c(r) = f_row,c·row + f_col,c·col: coords (N, 2), freqs (2, h, p) → (h, N, p)."""
    return torch.einsum("nk,khp->hnp", coords, freqs)


class RotaryPosition(nn.Module):
    """Base class: rotates the patch tokens of x (B, heads, T, dim) by R(r_i), prefix tokens untouched.

    Subclasses implement `rotate(z, coords)` (patches only, in the compute dtype) and
    `rotation_matrices(coords)` (the dense R(r) of each position).
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.dim, self.heads = dim, heads

    def rotate(self, z: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        """R(r_n) z_n for patches z (B, h, N, dim) at coords (N, 2), both in the compute dtype."""
        raise NotImplementedError

    def rotation_matrices(self, coords: torch.Tensor) -> torch.Tensor:
        """Dense R(r) for coords (N, 2): (heads or 1, N, dim, dim) in coords' dtype."""
        raise NotImplementedError

    def rotate_grid(self, z: torch.Tensor, grid) -> torch.Tensor:
        """Rotate the patches z (B, h, N, dim) of `grid` (subclasses may cache per grid)."""
        return self.rotate(z, grid.coords(device=z.device, dtype=z.dtype))

    def forward(self, x: torch.Tensor, grid) -> torch.Tensor:
        """x (B, heads, T, dim) with patch tokens rotated by R(r_i); same shape and dtype."""
        if x.shape[-2] != grid.num_tokens or x.shape[-1] != self.dim:
            raise ValueError(
                f"{type(self).__name__} expects (B, heads, {grid.num_tokens}, {self.dim}) "
                f"for a {grid.height}×{grid.width} grid, got {tuple(x.shape)}"
            )
        prefix = grid.prefix
        with autocast_off(x.device):
            patches = x[:, :, prefix:].to(compute_dtype(x.dtype))  # (B, h, N, dim)
            patches = self.rotate_grid(patches, grid).to(x.dtype)
        return torch.cat((x[:, :, :prefix], patches), dim=2) if prefix else patches

    def rotate_pair(self, q: torch.Tensor, k: torch.Tensor, grid):
        """(R q, R k) with the rotation built once for both (q, k of equal shape)."""
        return self(torch.cat((q, k)), grid).chunk(2)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}"


class PairRotary(RotaryPosition):
    """RoPE in 2D: interleaved pairs (2c, 2c+1) rotated by a_c(r) = f_row,c·row + f_col,c·col."""

    def frequencies(self, dtype: torch.dtype, device) -> torch.Tensor:
        """(f_row, f_col) per pair: (2, heads or 1, dim/2)."""
        raise NotImplementedError

    def angles(self, coords: torch.Tensor) -> torch.Tensor:
        """Rotation angle of each pair at each position: (heads or 1, N, dim/2)."""
        return linear_angles(coords, self.frequencies(coords.dtype, coords.device))

    def rotate(self, z, coords):
        """R(r_n) z_n: each pair turned by its angle."""
        angles = self.angles(coords)
        return rotate_pairs(z, angles.cos(), angles.sin())

    def rotation_matrices(self, coords):
        """Block-diagonal R(r): (heads or 1, N, dim, dim)."""
        return pair_rotation_matrices(self.angles(coords))


def _require_divisible(name: str, dim: int, by: int, why: str) -> None:
    """Raise a UserError naming the method unless dim % by == 0."""
    if dim % by:
        raise UserError(
            f"{name} needs a rotated dimension divisible by {by} ({why}), got {dim}. "
            "The rotated dimension is the head dimension model.dim / model.heads "
            "(or the feature count m at rotation_site 'post'); choose model.dim, "
            "model.heads (or the feature count) so that it is."
        )


@dataclass(frozen=True)
class ThetaOptions:
    """Base θ of the frequencies θ^(−4c/dim) (RoPE-Axial: fixed; RoPE-Mixed / Cayley: initial magnitudes)."""

    theta: float = 100.0

    def check(self, where: str) -> None:
        if not self.theta > 1:
            raise UserError(
                f"{where}.theta must be a number > 1 (frequencies θ^(−4c/dim) must decay), got {self.theta}."
            )


@dataclass(frozen=True)
class MixedOptions(ThetaOptions):
    """RoPE-Mixed initial frequency magnitudes θ^(−4c/dim), θ = 10 (RoPE-ViT)."""

    theta: float = 10.0


class RoPEAxial(PairRotary):
    """RoPE-Axial (Heo et al. 2024): fixed ω_c = θ^(−4c/dim); pairs < dim/4 turn with col, others with row."""

    Options = ThetaOptions

    def __init__(self, options: ThetaOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        _require_divisible("rope_axial", dim, 4, "two axes × interleaved pairs")
        self.theta = options.theta

    def frequencies(self, dtype, device):
        """Fixed (f_row, f_col) = ([0, ω], [ω, 0]), ω_k = θ^(−4k/dim): (2, 1, dim/2).

        Computed on demand in the requested dtype (no buffer, so model.half() cannot round them).
        """
        omega = self.theta ** (-4.0 * torch.arange(self.dim // 4, dtype=dtype, device=device) / self.dim)
        zeros = torch.zeros_like(omega)
        return torch.stack((torch.cat((zeros, omega)), torch.cat((omega, zeros))))[:, None, :]

    def rotate_grid(self, z, grid):
        """Rotate with cos/sin of the fixed angles, built once per grid (shared by every layer)."""

        def build():
            angles = self.angles(grid.coords(device=z.device, dtype=z.dtype))  # (1, N, d/2)
            return angles.cos(), angles.sin()

        key = ("rope_axial", self.dim, self.theta, grid.height, grid.width, grid.scale(), z.device, z.dtype)
        return rotate_pairs(z, *grid_cached(key, build))


def rope_mixed_init(dim: int, heads: int, theta: float) -> torch.Tensor:
    """RoPE-ViT init of (f_row, f_col): (2, heads, dim/2).

    Magnitudes ω_k = θ^(−4k/dim); pairs [0, ⌈p/2⌉) point along a random angle φ per head and pairs
    [⌈p/2⌉, p) along φ + π/2 (p = dim/2; for dim % 4 == 0 exactly rope-vit's init_2d_freqs layout:
    f_x = [ω cos φ, ω cos(φ+π/2)], f_y = [ω sin φ, ω sin(φ+π/2)]).
    """
    pairs = dim // 2
    first, second = (pairs + 1) // 2, pairs // 2

    def magnitude(n):
        return theta ** (-4.0 * torch.arange(n, dtype=torch.float64) / dim)

    magnitudes = torch.cat((magnitude(first), magnitude(second)))  # (p,)
    phi = torch.rand(heads, 1, dtype=torch.float64) * 2 * math.pi  # (h, 1)
    direction = torch.cat((phi.expand(heads, first), (phi + math.pi / 2).expand(heads, second)), dim=1)
    f_col, f_row = magnitudes * direction.cos(), magnitudes * direction.sin()  # each (h, p)
    return torch.stack((f_row, f_col)).float()


class RoPEMixed(PairRotary):
    """RoPE-Mixed (Heo et al. 2024): learnable a_c(r) = f_x,c·x + f_y,c·y per head."""

    Options = MixedOptions

    def __init__(self, options: MixedOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        _require_divisible("rope_mixed", dim, 2, "interleaved pairs")
        # (2, h, dim/2): freqs[0] = f_y (multiplies row), freqs[1] = f_x (multiplies col)
        self.freqs = nn.Parameter(rope_mixed_init(dim, heads, options.theta))
        self.freqs.no_weight_decay = True

    def frequencies(self, dtype, device):
        """Learnable (f_row, f_col): (2, heads, dim/2)."""
        return self.freqs.to(dtype)


def circulant(first_column: torch.Tensor) -> torch.Tensor:
    """Dense circulant matrices C[j, l] = c[(j − l) mod d] from first columns (..., d): (..., d, d)."""
    d = first_column.shape[-1]
    index = (torch.arange(d)[:, None] - torch.arange(d)[None, :]) % d  # (d, d)
    return first_column[..., index.to(first_column.device)]


class CirculantString(RotaryPosition):
    """Circulant-STRING (Schenck et al. 2025): R(r)z = IFFT(exp(Σ r_k μ_k) ⊙ FFT(z)), μ_k = 2i·Im FFT c_k."""

    Options = NoOptions

    def __init__(self, options: NoOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        # (2, h, dim): first columns c_row, c_col of the circulants C_k; only their antisymmetric
        # part (c_j − c_{−j})/2 matters. Scale: see CIRCULANT_STEP_STD.
        self.columns = nn.Parameter(torch.randn(2, heads, dim) * (CIRCULANT_STEP_STD / math.sqrt(2 * dim)))
        self.columns.no_weight_decay = True

    def phase_steps(self, dtype: torch.dtype) -> torch.Tensor:
        """θ_k = μ_k / i = 2·Im FFT(c_k) on the rfft half-spectrum: (2, heads, dim//2 + 1)."""
        return 2 * torch.fft.rfft(self.columns.to(dtype), dim=-1).imag

    def rotate(self, z, coords):
        """R(r_n) z_n through the real FFT (real by construction: the phases are Hermitian)."""
        phases = linear_angles(coords, self.phase_steps(z.dtype))  # (h, N, dim//2 + 1)
        spectrum = torch.fft.rfft(z, dim=-1) * torch.polar(torch.ones_like(phases), phases)  # (B, h, N, ·)
        return torch.fft.irfft(spectrum, n=self.dim, dim=-1)

    def generators(self, dtype: torch.dtype) -> torch.Tensor:
        """Dense skew-symmetric L_k = C_k − C_kᵀ: (2, heads, dim, dim)."""
        c = circulant(self.columns.to(dtype))
        return c - c.transpose(-2, -1)

    def rotation_matrices(self, coords):
        """R(r) = matrix_exp(Σ_k r_k L_k), built densely: (heads, N, dim, dim)."""
        generator = torch.einsum("nk,khij->hnij", coords, self.generators(coords.dtype))  # (h, N, d, d)
        return torch.linalg.matrix_exp(generator.contiguous())  # matrix_exp rejects some strided inputs


class CayleyString(RotaryPosition):
    """Cayley-STRING (Schenck et al. 2025): R(r) = RoPE-Mixed(r)·P, P = (I − S)(I + S)⁻¹, S = A−Aᵀ."""

    Options = MixedOptions

    def __init__(self, options: MixedOptions, dim: int, heads: int, *, side: int, cls: bool):
        super().__init__(dim, heads)
        self.mixed = RoPEMixed(options, dim, heads, side=side, cls=cls)
        # A = 0 at init: P = I and the method starts as RoPE-Mixed; dP/dA ≠ 0 there, so it learns.
        self.skew = nn.Parameter(torch.zeros(heads, dim, dim))  # (h, d, d)
        self.skew.no_weight_decay = True

    def basis(self, dtype: torch.dtype) -> torch.Tensor:
        """The orthogonal P = (I + S)⁻¹(I − S) = (I − S)(I + S)⁻¹ (they commute): (heads, dim, dim)."""
        # solved in float32 at least (no bf16 solver); solve_ex without its error check, which
        # would read the solver's status on the host (a sync each step): I + S is never singular,
        # its eigenvalues are 1 + iλ for the skew-symmetric S
        work = compute_dtype(dtype)
        a = self.skew.to(work)
        s = a - a.transpose(-2, -1)
        eye = torch.eye(self.dim, dtype=work, device=a.device)
        return torch.linalg.solve_ex(eye + s, eye - s, check_errors=False).result.to(dtype)

    def rotate(self, z, coords):
        """RoPE-Mixed(r_n)(P z_n)."""
        mixed = torch.einsum("hij,bhnj->bhni", self.basis(z.dtype), z)  # (B, h, N, d)
        return self.mixed.rotate(mixed, coords)

    def rotation_matrices(self, coords):
        """R(r) = RoPE-Mixed(r)·P: (heads, N, dim, dim)."""
        return self.mixed.rotation_matrices(coords) @ self.basis(coords.dtype)[:, None]
