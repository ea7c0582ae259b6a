"""Positional methods, grouped by the mechanism through which attention consumes them.

absolute: added to tokens before the blocks.        forward(tokens, grid) -> tokens
rotary:   orthogonal maps of q, k (or φ(q), φ(k)).  forward(x (B,h,T,d), grid) -> x, patches only
bias:     a kernel over offsets, b_h(Δ).            dense(grid) -> (h, T, T) logit bias
gate:     absolute scaling of q and k (seed 001).   forward(q, k, grid) -> (q, k)

Every builder is called as builder(model_config, dim, heads). Adding a method = one entry here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .absolute import LearnedAbsolute, SinCosAbsolute
from .gates import IRPEGate, StringGate2D
from .relative import IRPE, Alibi2D, KernelizedRPE
from .rotary import CayleyString, CirculantString, RoPEAxial, RoPEMixed

MECHANISMS = ("rotary", "bias", "gate", "absolute")  # the order positions take in a variant name


@dataclass(frozen=True)
class PositionMethod:
    """A positional method: its mechanism, its module builder and a one-line description."""

    mechanism: str
    build: Callable
    summary: str
    relative: bool
    follows_grid_scale: bool = True  # reacts to position interpolation (grid.interpolate)


POSITIONS: dict[str, PositionMethod] = {
    "ape": PositionMethod("absolute", LearnedAbsolute,
                          "learned absolute embedding (ViT), bicubic-resized on new grids", False,
                          follows_grid_scale=False),
    "krpe": PositionMethod("bias", KernelizedRPE,
                           "learnable relative bias table per head (Swin; Luo et al. 2021 kernelized RPE in "
                           "linear attention, by 2D FFT)", True),
    "alibi2d": PositionMethod("bias", Alibi2D,
                              "2D ALiBi (CROMA, Fuller et al. 2023): b = −m_h·‖Δ‖₂, ALiBi slopes, no parameters",
                              True),
    "irpe": PositionMethod("bias", IRPE,
                           "iRPE bias mode (Wu et al. 2021): learnable bias per piecewise offset bucket "
                           "(product or euclidean) + CLS skip bucket", True),
    "ape_sincos": PositionMethod("absolute", SinCosAbsolute,
                                 "fixed 2D sin-cos embedding (MAE / MoCo v3), recomputed for any grid", False),
    "gate_irpe": PositionMethod("gate", IRPEGate,
                                "seed 001's IRPE-Gate: q, k scaled per channel by exp(row + col tables); "
                                "absolute, not relative", False, follows_grid_scale=False),
    "gate_string": PositionMethod("gate", StringGate2D,
                                  "seed 001's STRINGGate2D: q, k scaled per channel by exp(projected "
                                  "learnable 2D Fourier features); absolute, not relative", False),
    "rope_axial": PositionMethod("rotary", RoPEAxial,
                                 "RoPE-Axial (Heo et al. 2024): fixed per-axis frequencies θ^(-4k/d)", True),
    "rope_mixed": PositionMethod("rotary", RoPEMixed,
                                 "RoPE-Mixed (Heo et al. 2024): learnable mixed-axis frequencies per head",
                                 True),
    "string_circulant": PositionMethod("rotary", CirculantString,
                                       "Circulant-STRING (Schenck et al. 2025): exp of learnable circulant "
                                       "generators, applied by FFT", True),
    "string_cayley": PositionMethod("rotary", CayleyString,
                                    "Cayley-STRING (Schenck et al. 2025): RoPE-Mixed after a learnable "
                                    "orthogonal Cayley basis change", True),
}
