"""Variant names: `<backend>+<position>[+<position>…]`, e.g. `favor+rope_mixed+ape`.

A variant is one attention backend plus at most one positional method per mechanism
(docs/architecture.md §2). `<backend>+none` (or the bare backend) has no positional information at all.
Positions are written in the canonical mechanism order rotary, bias, gate, absolute.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .attention import BACKENDS
from .errors import UserError
from .position import MECHANISMS, POSITIONS


@dataclass(frozen=True)
class Variant:
    """A parsed variant: backend name and positional method names in canonical order."""

    backend: str
    positions: tuple[str, ...]

    @property
    def name(self) -> str:
        """Canonical name, e.g. `relu+string_circulant+ape` or `softmax+none`."""
        return "+".join((self.backend,) + (self.positions or ("none",)))

    def method(self, mechanism: str) -> str | None:
        """The position name used for `mechanism`, if any."""
        return next((p for p in self.positions if POSITIONS[p].mechanism == mechanism), None)

    @property
    def relative(self) -> bool:
        """True if every positional method in it is relative (and there is at least one)."""
        return bool(self.positions) and all(POSITIONS[p].relative for p in self.positions)


def parse_variant(name: str) -> Variant:
    """Parse and validate a variant name; errors name the part and the allowed choices."""
    parts = [p.strip() for p in str(name).split("+")]
    backend, positions = parts[0], [p for p in parts[1:] if p != "none"]
    if backend not in BACKENDS:
        raise UserError(
            f"unknown attention backend {backend!r} in variant {name!r}; choose from {', '.join(BACKENDS)}."
        )
    for position in positions:
        if position not in POSITIONS:
            raise UserError(
                f"unknown positional method {position!r} in variant {name!r}; choose from none, {', '.join(POSITIONS)}."
            )
    by_mechanism: dict[str, str] = {}
    for position in positions:
        mechanism = POSITIONS[position].mechanism
        if mechanism in by_mechanism:
            raise UserError(
                f"variant {name!r} combines {by_mechanism[mechanism]} and {position}, both "
                f"{mechanism} methods; use at most one method per mechanism."
            )
        if mechanism not in BACKENDS[backend].mechanisms:
            raise UserError(f"variant {name!r}: backend {backend} cannot consume {mechanism} methods.")
        by_mechanism[mechanism] = position
    ordered = tuple(by_mechanism[m] for m in MECHANISMS if m in by_mechanism)
    return Variant(backend, ordered)


def list_variants() -> list[str]:
    """Every valid variant name: each backend × at most one method per mechanism."""
    choices = [[None] + [p for p, m in POSITIONS.items() if m.mechanism == mechanism] for mechanism in MECHANISMS]
    names = []
    for backend in BACKENDS:
        for combo in itertools.product(*choices):
            positions = [p for p in combo if p is not None]
            if all(POSITIONS[p].mechanism in BACKENDS[backend].mechanisms for p in positions):
                names.append(Variant(backend, tuple(positions)).name)
    return names
