"""Presets: YAML files → validated dataclasses.

A preset names a grid (datasets × variants × seeds) and the model, data and training settings
shared by every run in it. Every mistake is reported as one UserError naming the key, the bad
value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from .errors import UserError

def _project_root() -> Path:
    """The repository root when rpevit runs from its checkout (editable install), else the cwd."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "params").is_dir() else Path.cwd()


PROJECT_ROOT = _project_root()
PRESETS_DIR = PROJECT_ROOT / "params"


@dataclass(frozen=True)
class ModelConfig:
    """ViT architecture and the options of every attention backend and positional method."""

    patch_size: int = 4
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_dim: int = 128
    pool: Literal["cls", "mean"] = "cls"
    dropout: float = 0.0
    # linear backends: where a rotary method acts — on q, k ("pre") or on φ(q), φ(k) ("post");
    # "auto" = the backend's default (favor: pre, relu: post)
    rotation_site: Literal["auto", "pre", "post"] = "auto"
    # favor: number of random features m (None = the documented default) and redraw policy
    favor_features: int | None = None
    favor_redraw_steps: int = 0
    # relu: φ(x) = ReLU(x) ("identity", seed 000) or ReLU(Wx) with W random-orthogonal or learned (seed 001)
    relu_features: Literal["identity", "random", "learned"] = "identity"
    relu_num_features: int | None = None
    # rotary: RoPE-Axial base θ (frequencies θ^(−4k/d)); RoPE-Mixed initial magnitudes use rope_mixed_theta
    rope_theta: float = 100.0
    rope_mixed_theta: float = 10.0
    # relative bias in favor/relu: the 2D-FFT path (O(N log N)), the dense N×N path, or "auto" =
    # whichever costs fewer multiply-adds for the grid (dense on small grids, FFT on large ones)
    bias_path: Literal["auto", "fft", "dense"] = "auto"
    # krpe on grids other than the trained one: offsets clamped into the trained range (iRPE rule)
    # or the table bicubic-resized to (2H−1)×(2W−1) (Swin rule)
    krpe_extrapolation: Literal["clamp", "interpolate"] = "clamp"
    # irpe offset buckets: per-axis product (49) or Euclidean distance (4), plus one CLS skip bucket
    irpe_method: Literal["product", "euclidean"] = "product"
    # gate_string (seed 001 STRINGGate2D): number of learnable 2D Fourier frequencies
    gate_string_rank: int = 8
    # set from the dataset by the study runner, not in presets
    image_size: int = 28
    channels: int = 1
    num_classes: int = 10


DATASET_KEYS = ("image_size", "channels", "num_classes")


@dataclass(frozen=True)
class DataConfig:
    """Where datasets come from and how training images are augmented."""

    root: str | None = None
    download: bool = False
    augment: Literal["auto", "none", "mnist", "cifar"] = "auto"
    split_seed: int = 42
    val_size: int | None = None


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
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: Literal["auto", "off", "bf16"] = "auto"
    compile: bool = False
    eval_batch_size: int = 500
    timing_images: int = 512


@dataclass(frozen=True)
class EvaluateConfig:
    """Extra evaluations of finished runs: test accuracy at other input resolutions."""

    resolutions: tuple[int, ...] = ()


@dataclass(frozen=True)
class Params:
    """One preset: the grid to run and the settings every run shares."""

    name: str
    datasets: tuple[str, ...]
    variants: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)

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
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string",
            type(None): "null"}.get(tp, getattr(tp, "__name__", str(tp)))


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
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    if unknown:
        raise UserError(f"unknown key {prefix}{unknown[0]}; allowed keys: {', '.join(names)}.")
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in values.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required key is missing
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                   and f.name not in kwargs]
        raise UserError(f"{where or 'preset'}: missing required key(s) {', '.join(missing)}.") from exc


def model_config(**config) -> ModelConfig:
    """A validated ModelConfig from keyword arguments (used by build_model)."""
    return build_dataclass(ModelConfig, config, "model")


def validate_model(model: ModelConfig, where: str = "model") -> None:
    """Check the architecture's arithmetic: dims divisible, image divisible by patch."""
    if model.dim % model.heads:
        raise UserError(f"{where}.dim={model.dim} must be divisible by {where}.heads={model.heads}.")
    for key in ("patch_size", "dim", "depth", "heads", "mlp_dim"):
        if getattr(model, key) < 1:
            raise UserError(f"{where}.{key} must be a positive integer, got {getattr(model, key)}.")
    if not 0.0 <= model.dropout < 1.0:
        raise UserError(f"{where}.dropout must be in [0, 1), got {model.dropout}.")


def _validate(params: Params) -> None:
    from .data import DATASETS
    from .variants import parse_variant

    for name in params.datasets:
        if name not in DATASETS:
            raise UserError(f"datasets: unknown dataset {name!r}; choose from {', '.join(DATASETS)}.")
    for variant in params.variants:
        try:
            parse_variant(variant)
        except UserError as exc:
            raise UserError(f"variants: {exc}") from None
    if not params.datasets or not params.variants or not params.seeds:
        raise UserError("datasets, variants and seeds must each list at least one entry.")
    validate_model(params.model)
    if params.train.epochs < 1 or params.train.batch_size < 1:
        raise UserError("train.epochs and train.batch_size must be positive integers.")


def preset_path(name_or_path: str | Path) -> Path:
    """Resolve a preset name (`smoke`) or a path (`params/smoke.yaml`) to an existing file."""
    path = Path(name_or_path)
    candidates = [path] if path.suffix in (".yaml", ".yml") else [path, PRESETS_DIR / f"{path}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise UserError(f"no preset file {name_or_path!r}; available presets: {', '.join(list_presets())} "
                    f"(in {PRESETS_DIR}), or pass a path to a YAML file.")


def list_presets() -> list[str]:
    """Names of the presets shipped in params/."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_params(name_or_path: str | Path) -> Params:
    """Load and validate a preset YAML; any mistake raises one UserError."""
    path = preset_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}).") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a preset is a mapping of keys (name, datasets, variants, ...).")
    raw = dict(raw)
    raw.setdefault("name", path.stem)
    for key in DATASET_KEYS:
        if key in (raw.get("model") or {}):
            raise UserError(f"{path}: model.{key} is set by the dataset; remove it from the preset.")
    try:
        params = build_dataclass(Params, raw)
        _validate(params)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return params


# settings that do not change what a run learns: paths, measurement sizes, the device / compile
# choice (recorded in each run record) and the eval-only KRPE extrapolation policy
RESULT_NEUTRAL = {"root", "download", "eval_batch_size", "timing_images", "device", "compile",
                  "krpe_extrapolation"}


def fingerprint(*configs) -> str:
    """Short stable hash of the settings that change a run's result (not paths or timing sizes).

    A finished run is reused only if its fingerprint matches the preset's.
    """
    parts = [{k: v for k, v in dataclasses.asdict(c).items() if k not in RESULT_NEUTRAL} for c in configs]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
