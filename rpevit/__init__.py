"""rpevit: can relative positional encodings close the gap between softmax ViTs and linear-time
Performer ViTs, and at what cost?  A variant = one attention backend + positional mechanisms.

Two layers: the science core (`rpevit.core`: models, attention, positions, data, the training
loop) and the lab around it (`rpevit.lab`: presets, runs, records, studies), with `rpevit.report`
(report folders and the headless notebook runner) on top. The notebooks' tables, claims and figures
are the top-level `analysis` package, outside rpevit. `import rpevit` loads the core only; the lab's
names below load on first use (PEP 562)."""

from __future__ import annotations

__version__ = "0.1.0"

from .core.config import ModelConfig, model_config
from .core.errors import UserError
from .core.model import build_model
from .core.variants import list_variants, parse_variant

_LAZY = {
    "Run": ("lab.store.run", "Run"),
    "load_params": ("lab.params", "load_params"),
    "run_study": ("lab.schedule.study", "run_study"),
    "train_run": ("lab.training.train", "train_run"),
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        value = getattr(import_module(f".{module}", __name__), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ModelConfig",
    "Run",
    "UserError",
    "build_model",
    "list_variants",
    "load_params",
    "model_config",
    "parse_variant",
    "run_study",
    "train_run",
]
