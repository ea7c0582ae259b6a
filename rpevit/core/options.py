"""Options owned by a backend or positional method: one small frozen dataclass beside its class.

A component declares `Options` (a frozen dataclass; `NoOptions` when it has none). Presets nest
them under the component's name (`model: {favor: {num_features: 128}, rope_axial: {theta: 100}}`)
and a run's key hashes only the options of its own backend and methods, minus the fields marked
`neutral` (settings that do not change what a run learns, e.g. which exact computation path).
An Options class may define `check(where)` to reject values its type alone allows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NoOptions:
    """A component without options."""


def neutral(default):
    """A dataclass field that does not change a run's result (left out of the run key)."""
    return field(default=default, metadata={"neutral": True})


def added(default):
    """A field added after runs were recorded: it enters the run key only when set to another value
    than `default` (its default reproduces what the older runs did, so their keys stay valid)."""
    return field(default=default, metadata={"added": True})


def result_fields(options) -> dict:
    """The options' fields that change a run's result, as plain data (added fields at their
    default left out)."""
    return {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if not f.metadata.get("neutral") and not (f.metadata.get("added") and getattr(options, f.name) == f.default)
    }


def check(options, where: str) -> None:
    """Run the options' own `check(where)` if they have one (raises UserError)."""
    checker = getattr(options, "check", None)
    if checker is not None:
        checker(where)
