"""Presets: YAML files → validated dataclasses.

A preset names a grid (datasets × variants × seeds) and the model, data and training settings
shared by every run in it. Every mistake is reported as one UserError naming the key, the bad
value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from ..core.config import ModelConfig, build_dataclass
from ..core.errors import UserError
from ..core.options import added, neutral
from .design import Design
from .params_checks import validate
from .paths import check_name


def _project_root() -> Path:
    """The repository root when rpevit runs from its checkout (editable install), else the cwd."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "params").is_dir() else Path.cwd()


PROJECT_ROOT = _project_root()
PRESETS_DIR = PROJECT_ROOT / "params"


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
    # with compile: capture only these backends' steps (empty: every backend's); on this CPU compiling
    # pays for FAVOR+ and costs ReLU (reports/bench/cpu_train_levers.md)
    compile_backends: tuple[str, ...] = neutral(())
    # bitwise-repeatable CUDA runs and resumes: deterministic kernels + cuBLAS's fixed workspace (slower)
    deterministic: bool = neutral(False)
    eval_batch_size: int = neutral(500)
    timing_images: int = neutral(512)
    # learning-rate schedule after warmup: "cosine" to min_lr, or "wsd" (warmup–stable–decay: constant,
    # then linear to min_lr over the last decay_fraction of the epochs) whose runs also yield the
    # shorter `budgets` (epochs) by cool-downs branched from the stable phase (rpevit/core/budgets.py)
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
        from ..core.attention import BACKENDS

        unknown = [b for b in self.compile_backends if b not in BACKENDS]
        if unknown:
            raise bad("compile_backends", unknown[0], f"one of the backends {', '.join(BACKENDS)}")
        from ..core.budgets import check_schedule

        check_schedule(self, where)


@dataclass(frozen=True)
class EvaluateConfig:
    """Extra evaluations of finished runs: test accuracy at other input resolutions, of every
    variant of the grid or only of those listed in `variants`."""

    resolutions: tuple[int, ...] = ()
    variants: tuple[str, ...] = ()

    def covers(self, variant: str) -> bool:
        """True if runs of this variant are evaluated at the resolutions."""
        from ..core.variants import parse_variant

        return not self.variants or parse_variant(variant).name in self.variants  # stored canonical


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
    # a study's pre-registered design (rpevit.lab.design): contrasts, margins, stopping rule, budget
    design: Design = field(default_factory=Design)
    # a study that trains only what it changes (a FAVOR+ feature dial): the variants of this preset
    # that it does not list (softmax+ape) are read from that preset's kept records, runs whose keys
    # equal the ones this preset would train (params_checks._check_reference)
    reference: str | None = added(None)
    # a WSD preset whose runs go on from another preset's runs of the same seeds at the end of their
    # stable phase (rpevit/lab/training/continuation.py): a longer budget without training the shared epochs again
    continues: str | None = added(None)
    # the file the preset was read from (load_params sets it; not a key of the preset): a header read later
    # (a pre-registration, a budget) comes from this file, not from whatever a name finds
    source: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        """Variant names are stored canonical (core.variants.parse_variant), here and in the design and the
        evaluation, so nothing downstream canonicalises them again (_canonical: a list validate() will refuse
        is kept as written, for its message)."""
        set_ = object.__setattr__
        set_(self, "variants", _canonical(self.variants))
        if dataclasses.is_dataclass(self.evaluate):
            set_(self, "evaluate", dataclasses.replace(self.evaluate, variants=_canonical(self.evaluate.variants)))
        if dataclasses.is_dataclass(self.design):
            primary, secondary = _canonical(self.design.primary), _canonical(self.design.secondary)
            set_(self, "design", dataclasses.replace(self.design, primary=primary, secondary=secondary))

    def to_dict(self) -> dict:
        """Plain-data form (JSON/YAML-serialisable), without `source`."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "source"}


def _canonical(variants) -> tuple:
    """Each variant name canonical where it parses; the names as written where one does not, or where two
    name one variant (validate() reports either, in the words of the preset)."""
    from ..core.variants import parse_variant

    try:
        canonical = tuple(parse_variant(name).name for name in variants)
    except (UserError, ValueError, TypeError, AttributeError):
        return tuple(variants)
    return canonical if len(set(canonical)) == len(canonical) else tuple(variants)


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
    if "source" in raw:
        raise UserError(f"{path}: `source` is not a preset key (it names the file a preset was read from).")
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
    return dataclasses.replace(params, source=str(path))


_PREREGISTERED = re.compile(r"^# Pre-registered", re.MULTILINE)


def preregistered(preset) -> bool:
    """Whether a preset's header says it was pre-registered (`# Pre-registered …`, committed before its first
    run); False if its file cannot be found. `preset` is a name or a path."""
    try:
        return bool(_PREREGISTERED.search(preset_path(preset).read_text(encoding="utf-8")))
    except (UserError, OSError):
        return False


def check_clean_revision(preset, allow_dirty: bool) -> None:
    """A pre-registered preset trains only from a clean, committed code revision (its records name it): one
    UserError before anything runs when the package has uncommitted changes, unless `allow_dirty`."""
    from .revision import code_revision, short_revision

    current = code_revision()
    if preregistered(preset) and current.endswith("+dirty") and not allow_dirty:
        raise UserError(
            f"{preset} is pre-registered, so its runs train from a clean, committed revision, and the package has "
            f"uncommitted changes ({short_revision(current)}). Commit them first, or pass --allow-dirty "
            "(the records will name the revision +dirty)."
        )
