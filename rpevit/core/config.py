"""The model's configuration: the ViT's architecture (`ModelConfig`) and each backend's and
positional method's options, built and checked from plain mappings (presets, keyword arguments), so
every mistake is one UserError naming the key, the bad value and what is allowed."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Literal

from .errors import UserError
from .options import added, check


@dataclass(frozen=True)
class ModelConfig:
    """ViT architecture; each backend's and positional method's own options live in `options`.

    `options` maps a component name (e.g. "favor", "rope_axial") to its Options instance; a
    component not listed uses its defaults (`options_for`).
    """

    patch_size: int = 4
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_dim: int = 128
    pool: Literal["cls", "mean"] = "cls"
    dropout: float = 0.0
    # stochastic depth (Huang et al. 2016): residual branches dropped per sample, rate rising
    # linearly from 0 in the first block to this in the last
    drop_path: float = added(0.0)
    options: dict = field(default_factory=dict)
    # set from the dataset by the run services, not in presets
    image_size: int = 28
    channels: int = 1
    num_classes: int = 10

    def options_for(self, name: str):
        """The options of backend or positional method `name` (its defaults unless set)."""
        return self.options.get(name) or options_class(name)()


def components() -> dict[str, type]:
    """Every backend and positional method by name → its module class."""
    from .attention import BACKENDS
    from .position import POSITIONS

    return {**BACKENDS, **{name: method.build for name, method in POSITIONS.items()}}


def options_class(name: str) -> type:
    """The Options dataclass of a backend or positional method."""
    return components()[name].Options


# flat model keys of rpevit ≤ 0.1 → (component, option): named in the error a preset using one gets
LEGACY_MODEL_KEYS = {
    "favor_features": ("favor", "num_features"),
    "favor_redraw_steps": ("favor", "redraw_steps"),
    "relu_features": ("relu", "feature_map"),
    "relu_num_features": ("relu", "num_features"),
    "rope_theta": ("rope_axial", "theta"),
    "rope_mixed_theta": ("rope_mixed", "theta"),
    "bias_path": ("favor|relu", "bias_path"),
    "krpe_extrapolation": ("krpe", "extrapolation"),
    "irpe_method": ("irpe", "buckets"),
    "gate_string_rank": ("gate_string", "rank"),
    "rotation_site": ("favor|relu", "rotation_site"),
}


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string", type(None): "null"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _coerce(value, tp, key: str):
    """Check `value` against the annotation `tp`; return it converted (lists → tuples)."""
    origin = typing.get_origin(tp)
    bad = UserError(f"{key}: {value!r} is not valid; expected {_type_name(tp)}.")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise bad
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, key)
            except UserError:
                continue
        raise bad
    if origin is tuple:
        if isinstance(value, str):
            raise UserError(f"{key}: {value!r} is a single string; it must be a list, e.g. [{value}].")
        items = value if isinstance(value, (list, tuple)) else [value]
        return tuple(_coerce(v, typing.get_args(tp)[0], f"{key}[{i}]") for i, v in enumerate(items))
    if tp is type(None):
        if value is not None:
            raise bad
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise UserError(f"{key}: {value!r} is not valid; expected a mapping.")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, key)
    raise TypeError(f"unsupported annotation {tp}")


def build_dataclass(cls, values, where: str = ""):
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types."""
    prefix = f"{where}." if where else ""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError(f"{where or 'preset'}: expected a mapping of keys, got {values!r}.")
    if cls is ModelConfig:
        return _build_model_config(values, where)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    if unknown and not names:
        raise UserError(f"{where} has no options (got {unknown[0]}); remove {where} from the preset.")
    if unknown:
        raise UserError(f"unknown key {prefix}{unknown[0]}; allowed keys: {', '.join(names)}.")
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in values.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required key is missing
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in kwargs
        ]
        raise UserError(f"{where or 'preset'}: missing required key(s) {', '.join(missing)}.") from exc


def _build_model_config(values: dict, where: str) -> ModelConfig:
    """ModelConfig from a mapping: core keys, plus one nested mapping of options per component."""
    where = where or "model"
    core = [f.name for f in dataclasses.fields(ModelConfig) if f.name != "options"]
    known = components()
    options = {}
    for key, value in values.items():
        if key in core or key == "options":
            continue
        if key in LEGACY_MODEL_KEYS:
            component, option = LEGACY_MODEL_KEYS[key]
            raise UserError(
                f"{where}.{key} is now an option of its method: write {where}: "
                f"{{{component.split('|')[0]}: {{{option}: ...}}}}"
                + (" (or under relu)" if "|" in component else "")
                + "."
            )
        if key not in known:
            raise UserError(
                f"unknown key {where}.{key}; allowed keys: {', '.join(core)}, or the options of a "
                f"backend or positional method under its name: {', '.join(known)}."
            )
        opts = (
            value if dataclasses.is_dataclass(value) else build_dataclass(known[key].Options, value, f"{where}.{key}")
        )
        check(opts, f"{where}.{key}")
        options[key] = opts
    nested = values.get("options") or {}
    for key, opts in nested.items():  # already-built options (dataclasses.replace / asdict round trips)
        if key not in known:
            raise UserError(f"unknown component {key!r} in {where}.options; choose from {', '.join(known)}.")
        opts = opts if dataclasses.is_dataclass(opts) else build_dataclass(known[key].Options, opts, f"{where}.{key}")
        check(opts, f"{where}.{key}")
        options.setdefault(key, opts)
    hints = typing.get_type_hints(ModelConfig)
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in values.items() if k in core}
    return ModelConfig(**kwargs, options=options)


def model_config(**config) -> ModelConfig:
    """A validated ModelConfig from keyword arguments (used by build_model)."""
    return build_dataclass(ModelConfig, config, "model")


def validate_model(model, where: str = "model") -> None:
    """Check the architecture's arithmetic: dims positive and divisible, image divisible by patch."""
    for key in ("patch_size", "dim", "depth", "heads", "mlp_dim"):
        if getattr(model, key) < 1:
            raise UserError(f"{where}.{key} must be a positive integer, got {getattr(model, key)}.")
    if model.dim % model.heads:
        raise UserError(f"{where}.dim={model.dim} must be divisible by {where}.heads={model.heads}.")
    for key in ("dropout", "drop_path"):
        if not 0.0 <= getattr(model, key) < 1.0:
            raise UserError(f"{where}.{key} must be in [0, 1), got {getattr(model, key)}.")
