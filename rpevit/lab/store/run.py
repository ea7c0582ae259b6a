"""A run's identity: one value (`Run`) for preset, dataset, variant, seed and epochs.

Every module that trains, evaluates, finds or keeps one run takes a `Run` instead of loose
(params, dataset, variant, seed, epochs) arguments; from it come the run's settings, its key, its
directories and its label. The key hashes exactly the settings that change a run's result —
data, training, the core architecture and the options of the variant's own backend and methods,
nothing else — so adding an option to one method never invalidates the runs of the others
(docs/architecture.md §4).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ...core.config import ModelConfig, components
from ...core.data import dataset_info
from ...core.options import result_fields
from ...core.variants import Variant, parse_variant
from ..params import Params, TrainConfig
from ..paths import inside
from ..result import Result
from . import records


def model_config_for(params: Params, dataset: str) -> ModelConfig:
    """The preset's model settings sized for a dataset (image size, channels, classes)."""
    info = dataset_info(dataset)
    return dataclasses.replace(
        params.model, image_size=info.image_size, channels=info.channels, num_classes=info.num_classes
    )


def train_config_for(params: Params, epochs: int | None = None) -> TrainConfig:
    """The preset's training settings, with `epochs` overridden when given."""
    return params.train if epochs is None else dataclasses.replace(params.train, epochs=epochs)


# Bump when a change of the training loop, the data pipeline or the model's core changes what a run computes
# (a fix, not a new option): every record made before stops matching its run's key and is trained again. A
# backend or positional method declares the same for its own runs with a class attribute
# `result_revision` (default 1). Revisions of 1 stay out of the key, so no existing key changes.
CORE_RESULT_REVISION = 1


def result_revisions(names) -> dict[str, int]:
    """The declared result revisions above 1: "core" and each named component's (docs/records.md)."""
    declared = {"core": CORE_RESULT_REVISION}
    declared.update({name: getattr(components()[name], "result_revision", 1) for name in names})
    return {name: revision for name, revision in declared.items() if revision > 1}


def _hash(settings) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Run:
    """One run of a preset: dataset, variant (made canonical), seed and an `epochs` override
    (`train --epochs`; None: the preset's), plus the roots its files live under — not part of its
    identity; None: $RPEVIT_RUNS / $RPEVIT_REPORTS (records.runs_root() / reports_root())."""

    params: Params
    dataset: str
    variant: str
    seed: int
    epochs: int | None = None
    runs_root: Path | None = field(default=None, compare=False, repr=False)
    reports_root: Path | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "variant", parse_variant(self.variant).name)

    @classmethod
    def of(cls, params: Params, record: dict, **roots) -> Run:
        """The run a record belongs to (its dataset, variant and seed under preset `params`)."""
        return cls(params, *Result.of(record).place, **roots)

    @property
    def parsed(self) -> Variant:
        return parse_variant(self.variant)

    @property
    def place(self) -> tuple[str, str, int]:
        """(dataset, variant, seed): the run's place in its preset's grid."""
        return self.dataset, self.variant, self.seed

    @property
    def label(self) -> str:
        return f"{self.variant} | {self.dataset} | seed {self.seed}"

    @property
    def model_config(self) -> ModelConfig:
        return model_config_for(self.params, self.dataset)

    @property
    def train_config(self) -> TrainConfig:
        return train_config_for(self.params, self.epochs)

    def _settings(self, fields) -> dict:
        """The run's data, training and model settings, each settings object turned into a dict by
        `fields`; the model as its core architecture plus the options of the variant's own components."""
        parsed, model = self.parsed, self.model_config
        core = {k: v for k, v in fields(dataclasses.replace(model, options={})).items() if k != "options"}
        options = {name: fields(model.options_for(name)) for name in (parsed.backend, *parsed.positions)}
        return {
            "data": fields(self.params.data),
            "model": {**core, "options": options},
            "train": fields(self.train_config),
        }

    @property
    def config(self) -> dict:
        """The full settings of the run as plain data (what its record stores under `config`)."""
        return self._settings(dataclasses.asdict)

    @property
    def key(self) -> str:
        """Identity of the run's result: a record or checkpoint is reused only if its key matches.

        `<variant>|<dataset>|<seed>|v2-<hash>` of the data and training settings and the core
        architecture without their result-neutral fields (paths, device, measurement sizes), plus
        the result fields of the options of the variant's own backend and positional methods, and the
        result revisions declared above 1 (result_revisions).
        """
        settings = self._settings(result_fields)
        revisions = result_revisions((self.parsed.backend, *self.parsed.positions))
        if revisions:  # a declared fix (CORE_RESULT_REVISION, `result_revision`) retires older records
            settings["revisions"] = revisions
        return f"{self.variant}|{self.dataset}|{self.seed}|v2-{_hash(settings)}"

    def matches(self, stored) -> bool:
        """True if a record or checkpoint (a dict with a `key`) was made with this run's settings."""
        return stored is not None and stored.get("key") == self.key

    @property
    def dir(self) -> Path:
        """The run directory in runs/ (its own for an `epochs` override)."""
        return records.run_dir(self.params.name, self.dataset, self.variant, self.seed, self.runs_root, self.epochs)

    def lock(self) -> records.RunLock:
        """The run's lock (records.RunLock on its directory: `with run.lock():`; `.holder()`, `.path`)."""
        return records.RunLock(self.dir)

    @property
    def kept_dir(self) -> Path:
        """Where a preset with keep_records keeps the run's record and history (in reports/)."""
        root = self.reports_root or records.reports_root()
        return inside(root, self.params.name, "records", self.dataset, self.variant, f"seed{self.seed}")

    def rooted(self, runs_root=None, reports_root=None) -> Run:
        """This run with its roots filled in where it has none (the given ones, else the defaults)."""
        return dataclasses.replace(
            self,
            runs_root=Path(self.runs_root or runs_root or records.runs_root()),
            reports_root=Path(self.reports_root or reports_root or records.reports_root()),
        )
