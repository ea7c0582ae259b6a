"""rpevit: can relative positional encodings close the gap between softmax ViTs and linear-time
Performer ViTs, and at what cost?  A variant = one attention backend + positional mechanisms."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import UserError
from .model import build_model
from .params import load_params
from .run import Run
from .study import run_study
from .train import train_run
from .variants import list_variants, parse_variant

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
