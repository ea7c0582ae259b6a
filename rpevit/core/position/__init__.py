"""Positional methods, grouped by the mechanism through which attention consumes them.

absolute: added to tokens before the blocks.        forward(tokens, grid) -> tokens
rotary:   orthogonal maps of q, k (or φ(q), φ(k)).  rotate_pair(q, k, grid) -> (q, k), patches only
bias:     a kernel over offsets, b_h(Δ).            table(grid), cls_terms(), dense(grid) -> (h, T, T)
gate:     absolute scaling of q and k (seed 001).   forward(q, k, grid) -> (q, k)

Every method is an nn.Module class built as Method(options, dim, heads, side=S, cls=True): its
options (`Method.Options`, rpevit.core.options), width and heads, the trained patch grid's side S and
whether the tokens lead with a CLS. `build_position` is the by-name factory on top, reading these from a
model config. Adding a method = one class satisfying its mechanism's protocol and one entry in POSITIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from .absolute import LearnedAbsolute, SinCosAbsolute
from .gates import IRPEGate, StringGate2D
from .relative import IRPE, Alibi2D, KernelizedRPE
from .rotary import CayleyString, CirculantString, RoPEAxial, RoPEMixed
from .separable import AxialRPE, ManhattanDecay

MECHANISMS = ("rotary", "bias", "gate", "absolute")  # the order positions take in a variant name


class _Method(Protocol):
    Options: ClassVar[type]


@runtime_checkable
class AbsoluteMethod(_Method, Protocol):
    """Added to the tokens (B, T, D) entering the first block."""

    def forward(self, tokens, grid): ...


@runtime_checkable
class RotaryMethod(_Method, Protocol):
    """Orthogonal, position-dependent maps R(r) of q and k: R(r)ᵀR(r′) depends on r′ − r only."""

    def rotate_pair(self, q, k, grid): ...

    def rotation_matrices(self, coords): ...


@runtime_checkable
class BiasMethod(_Method, Protocol):
    """A relative logit bias b_h(Δ): a (h, 2H−1, 2W−1) table over offsets plus CLS terms."""

    def table(self, grid): ...

    def cls_terms(self): ...

    def dense(self, grid): ...


@runtime_checkable
class GateMethod(_Method, Protocol):
    """Per-position scaling of q and k (absolute)."""

    def forward(self, q, k, grid): ...


PROTOCOLS = {"absolute": AbsoluteMethod, "rotary": RotaryMethod, "bias": BiasMethod, "gate": GateMethod}


@dataclass(frozen=True)
class PositionMethod:
    """A positional method: its mechanism, its module class, a one-line description, whether it is
    relative (passes docs/methods.md §5) and whether it follows position interpolation."""

    mechanism: str
    build: Callable
    summary: str
    relative: bool
    follows_grid_scale: bool = True  # reacts to position interpolation (grid.interpolate)


def build_position(name: str, config, dim: int, heads: int):
    """Positional method `name` with its options, grid side and CLS read from a ModelConfig (the by-name
    factory over the class)."""
    side, cls = config.image_size // config.patch_size, config.pool == "cls"
    return POSITIONS[name].build(config.options_for(name), dim, heads, side=side, cls=cls)


POSITIONS: dict[str, PositionMethod] = {
    "ape": PositionMethod(
        "absolute",
        LearnedAbsolute,
        "learned absolute embedding (ViT), bicubic-resized on new grids",
        False,
        follows_grid_scale=False,
    ),
    "krpe": PositionMethod(
        "bias",
        KernelizedRPE,
        "learnable relative bias table per head (Swin; Luo et al. 2021 kernelized RPE in linear attention, by 2D FFT)",
        True,
    ),
    "alibi2d": PositionMethod(
        "bias", Alibi2D, "2D ALiBi (CROMA, Fuller et al. 2023): b = −m_h·‖Δ‖₂, ALiBi slopes, no parameters", True
    ),
    "irpe": PositionMethod(
        "bias",
        IRPE,
        "iRPE bias mode (Wu et al. 2021): learnable bias per piecewise offset bucket "
        "(product or euclidean) + CLS skip bucket",
        True,
    ),
    "manhattan": PositionMethod(
        "bias",
        ManhattanDecay,
        "Manhattan-distance decay b_h = −λ_h(|Δrow| + |Δcol|) (RMT, Fan et al. 2024), ALiBi "
        "slopes, optionally learnable; separable: applied axis by axis in linear attention",
        True,
    ),
    "axial_rpe": PositionMethod(
        "bias",
        AxialRPE,
        "axial learnable table b_h = t_row[Δrow] + t_col[Δcol]; separable: applied axis by axis in linear attention",
        True,
    ),
    "ape_sincos": PositionMethod(
        "absolute", SinCosAbsolute, "fixed 2D sin-cos embedding (MAE / MoCo v3), recomputed for any grid", False
    ),
    "gate_irpe": PositionMethod(
        "gate",
        IRPEGate,
        "seed 001's IRPE-Gate: q, k scaled per channel by exp(row + col tables); absolute, not relative",
        False,
        follows_grid_scale=False,
    ),
    "gate_string": PositionMethod(
        "gate",
        StringGate2D,
        "seed 001's STRINGGate2D: q, k scaled per channel by exp(projected "
        "learnable 2D Fourier features); absolute, not relative",
        False,
    ),
    "rope_axial": PositionMethod(
        "rotary", RoPEAxial, "RoPE-Axial (Heo et al. 2024): fixed per-axis frequencies θ^(-4k/d)", True
    ),
    "rope_mixed": PositionMethod(
        "rotary", RoPEMixed, "RoPE-Mixed (Heo et al. 2024): learnable mixed-axis frequencies per head", True
    ),
    "string_circulant": PositionMethod(
        "rotary",
        CirculantString,
        "Circulant-STRING (Schenck et al. 2025): exp of learnable circulant generators, applied by FFT",
        True,
    ),
    "string_cayley": PositionMethod(
        "rotary",
        CayleyString,
        "Cayley-STRING (Schenck et al. 2025): RoPE-Mixed after a learnable orthogonal Cayley basis change",
        True,
    ),
}
