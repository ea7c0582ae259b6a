"""rpevit: can relative positional encodings close the gap between softmax ViTs and linear-time
Performer ViTs, and at what cost?  A variant = one attention backend + positional mechanisms."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import UserError
from .model import build_model
from .params import load_params
from .run import Run
from .variants import list_variants, parse_variant

# the training loop and the study runner load on first use (PEP 562), so `import rpevit` loads the
# science core (model, positions, attention, parameters) and not the orchestration around it
_LAZY = {"run_study": ("study", "run_study"), "train_run": ("train", "train_run")}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        value = getattr(import_module(f".{module}", __name__), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Run",
    "UserError",
    "build_model",
    "list_variants",
    "load_params",
    "parse_variant",
    "run_study",
    "train_run",
]
