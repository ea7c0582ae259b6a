"""Attention backends: each computes attention over (B, heads, T, d) q, k, v and exposes the
dense matrix it implies (`weights`). Adding a backend = one class satisfying `Backend` and one
entry in BACKENDS; `list`, the variant grid, the tests, benchmarks and plot styles follow."""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from .linear import FavorAttention, FavorRedrawAttention, ReluAttention
from .softmax import SoftmaxAttention


@runtime_checkable
class Backend(Protocol):
    """The contract of an attention backend (an nn.Module built as Backend(options, head_dim, heads))."""

    Options: ClassVar[type]  # frozen dataclass of its options (rpevit.core.options)
    exact: ClassVar[bool]  # True: exact softmax attention; False: a linear-time approximation
    mechanisms: ClassVar[tuple[str, ...]]  # the positional mechanisms it consumes
    summary: ClassVar[str]  # one line for `list` and the README
    rotation_site: str  # "pre": rotary methods rotate q, k; "post": the feature maps

    def feature_dim(self) -> int:
        """The dimension a "post" rotation acts on."""

    def forward(self, q, k, v, grid, bias=None, feature_rotation=None):
        """Attention output (B, h, T, d)."""

    def weights(self, q, k, grid, bias=None, feature_rotation=None):
        """The dense matrix A (B, h, T, T) with forward(...) = A v."""


BACKENDS: dict[str, type] = {
    "softmax": SoftmaxAttention,
    "favor": FavorAttention,
    "relu": ReluAttention,
    "favor_redraw": FavorRedrawAttention,
}


def build_backend(name: str, config, head_dim: int, heads: int):
    """Backend `name` with its options from a ModelConfig (the by-name factory over the class)."""
    return BACKENDS[name](config.options_for(name), head_dim, heads)


def exact_backends() -> list[str]:
    """Backends computing exact attention (the baselines a linear backend is compared with)."""
    return [name for name, cls in BACKENDS.items() if cls.exact]


def linear_backends() -> list[str]:
    """Backends approximating attention in linear time."""
    return [name for name, cls in BACKENDS.items() if not cls.exact]


def computing_backends() -> list[str]:
    """Backends whose forward pass computes something of its own: not a registered backend's subclass that
    only trains differently (favor_redraw infers exactly as favor), so timings list each computation once."""
    classes = list(BACKENDS.values())
    return [name for name, cls in BACKENDS.items() if not any(cls is not c and issubclass(cls, c) for c in classes)]
