"""Presets: YAML files → validated dataclasses.

A preset names a grid (datasets × variants × seeds) and the model, data and training settings
shared by every run in it. Every mistake is reported as one UserError naming the key, the bad
value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from .design import Design
from .errors import UserError
from .options import added, neutral
from .params_checks import validate, validate_model  # noqa: F401  (validate_model: part of this module's API)
from .paths import check_name


def _project_root() -> Path:
    """The repository root when rpevit runs from its checkout (editable install), else the cwd."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "params").is_dir() else Path.cwd()


PROJECT_ROOT = _project_root()
PRESETS_DIR = PROJECT_ROOT / "params"


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


DATASET_KEYS = ("image_size", "channels", "num_classes")


@dataclass(frozen=True)
class DataConfig:
    """Where datasets come from and how training images are augmented."""

    root: str | None = neutral(None)
    download: bool = neutral(False)
    # "auto" (the dataset's default), "none", "mnist", "cifar", or steps joined by "+" (e.g. "flip+erase")
    augment: str = "auto"
    split_seed: int = 42
    val_size: int | None = None
    # at most this many training images: a seeded, class-stratified subset (None: all), for CPU budgets
    train_size: int | None = None


@dataclass(frozen=True)
class TrainConfig:
    """Optimization (AdamW, warmup + cosine), devices and measurement settings."""

    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    grad_clip: float | None = 1.0
    device: Literal["auto", "cpu", "cuda"] = neutral("auto")
    amp: Literal["auto", "off", "bf16"] = "auto"
    compile: bool = neutral(False)
    # bitwise-repeatable CUDA runs and resumes: deterministic kernels + cuBLAS's fixed workspace (slower)
    deterministic: bool = neutral(False)
    eval_batch_size: int = neutral(500)
    timing_images: int = neutral(512)
    # learning-rate schedule after warmup: "cosine" to min_lr, or "wsd" (warmup–stable–decay: constant,
    # then linear to min_lr over the last decay_fraction of the epochs) whose runs also yield the
    # shorter `budgets` (epochs) by cool-downs branched from the stable phase (rpevit/budgets.py)
    schedule: Literal["cosine", "wsd"] = added("cosine")
    decay_fraction: float = added(0.25)
    budgets: tuple[int, ...] = added(())

    def check(self, where: str = "train") -> None:
        """Reject values that would crash or silently train garbage (before any training starts)."""

        def bad(key, value, allowed):
            return UserError(f"{where}.{key}: {value!r} is not valid; it must be {allowed}.")

        for key in ("epochs", "batch_size", "eval_batch_size", "timing_images"):
            if getattr(self, key) < 1:
                raise bad(key, getattr(self, key), "a positive integer")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise bad("lr", self.lr, "a finite number > 0")
        if not (math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.lr):
            raise bad("min_lr", self.min_lr, f"a number in [0, lr = {self.lr}]")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise bad("weight_decay", self.weight_decay, "a finite number ≥ 0")
        if not (math.isfinite(self.warmup_epochs) and 0 <= self.warmup_epochs <= self.epochs):
            raise bad("warmup_epochs", self.warmup_epochs, f"a number in [0, epochs = {self.epochs}]")
        if not 0 <= self.label_smoothing < 1:
            raise bad("label_smoothing", self.label_smoothing, "a number in [0, 1)")
        if self.grad_clip is not None and not (math.isfinite(self.grad_clip) and self.grad_clip > 0):
            raise bad("grad_clip", self.grad_clip, "a finite number > 0, or null for no clipping")
        from .budgets import check_schedule

        check_schedule(self, where)


@dataclass(frozen=True)
class EvaluateConfig:
    """Extra evaluations of finished runs: test accuracy at other input resolutions, of every
    variant of the grid or only of those listed in `variants`."""

    resolutions: tuple[int, ...] = ()
    variants: tuple[str, ...] = ()

    def covers(self, variant: str) -> bool:
        """True if runs of this variant are evaluated at the resolutions."""
        from .variants import parse_variant

        return not self.variants or parse_variant(variant).name in {parse_variant(v).name for v in self.variants}


@dataclass(frozen=True)
class Params:
    """One preset: the grid to run and the settings every run shares."""

    name: str
    datasets: tuple[str, ...]
    variants: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    description: str = ""
    # keep each run's record and history under reports/<preset>/records/ (tracked in git), so a
    # fresh clone regenerates the reports without retraining (checkpoints stay in runs/)
    keep_records: bool = False
    # training order of a grid without a design: "variant" (each variant's seeds in turn) or "seed"
    # (every variant of a seed before the next seed: a pilot shows its contrasts after one seed)
    order: Literal["variant", "seed"] = "variant"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    # a study's pre-registered design (rpevit.design): contrasts, margins, stopping rule, budget
    design: Design = field(default_factory=Design)

    def to_dict(self) -> dict:
        """Plain-data form (JSON/YAML-serialisable)."""
        return dataclasses.asdict(self)


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
    from .options import check

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


def preset_path(name_or_path: str | Path) -> Path:
    """Resolve a preset name (`smoke`) or a path (`params/smoke.yaml`) to an existing file."""
    path = Path(name_or_path)
    candidates = (
        [path]
        if path.suffix in (".yaml", ".yml")
        else [path, PRESETS_DIR / f"{path}.yaml", *sorted(PRESETS_DIR.glob(f"*/{path}.yaml"))]
    )
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise UserError(
        f"no preset file {name_or_path!r}; available presets: {', '.join(list_presets())} "
        f"(in {PRESETS_DIR}), or pass a path to a YAML file."
    )


def list_presets() -> list[str]:
    """Names of the presets shipped in params/ (and its folders, e.g. params/pilot/)."""
    return sorted(p.stem for p in [*PRESETS_DIR.glob("*.yaml"), *PRESETS_DIR.glob("*/*.yaml")])


def checked_by(name: str) -> list[str]:
    """The presets in params/ whose design names preset `name` as their longer-budget check
    (design.plateau_check), read from their YAML without validating them; unreadable files are passed over."""
    found = []
    for preset in list_presets():
        try:
            raw = yaml.safe_load(preset_path(preset).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, UserError):
            continue
        design = raw.get("design") if isinstance(raw, dict) else None
        if isinstance(design, dict) and design.get("plateau_check") == name:
            found.append(preset)
    return found


def load_params(name_or_path: str | Path) -> Params:
    """Load and validate a preset YAML; any mistake raises one UserError."""
    path = preset_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (a preset is UTF-8 YAML).") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())}).") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a preset is a mapping of keys (name, datasets, variants, ...).")
    raw = dict(raw)
    raw.setdefault("name", path.stem)
    try:
        check_name("preset", raw["name"])
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    for key in DATASET_KEYS:
        if key in (raw.get("model") or {}):
            raise UserError(f"{path}: model.{key} is set by the dataset; remove it from the preset.")
    try:
        params = build_dataclass(Params, raw)
        validate(
            params,
            read_preset=lambda name: yaml.safe_load(preset_path(name).read_text(encoding="utf-8")),
            load_preset=load_params,
        )
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return params
