"""Run services: the one place that turns a preset into a run's pieces.

Every command, benchmark and notebook gets its dataset, its dataset-sized model settings, a
trained run's model and its predictions from here, so each is set up one way only. A run's
identity (its key, config and directories) is the `Run` value of rpevit.lab.store.run.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import time
import uuid
from pathlib import Path

import torch

from ...core.data import Dataset, load_dataset
from ...core.device import resolve_device
from ...core.errors import UserError
from ...core.model import ViT, build_model
from ...core.sizing import check_fits
from ..params import Params, TrainConfig
from ..result import Result, results
from ..schema import finished as finished_runs
from ..schema import is_finished
from ..store import records
from ..store.run import Run, model_config_for


def dataset_for(params: Params, name: str | None = None, device=None) -> Dataset:
    """Load dataset `name` (default: the preset's first) with the preset's data settings."""
    name = name or params.datasets[0]
    return load_dataset(
        name,
        root=params.data.root,
        download=params.data.download,
        device=device or resolve_device(params.train.device),
        split_seed=params.data.split_seed,
        val_size=params.data.val_size,
        train_size=params.data.train_size,
    )


def check_runs_root(root) -> Path:
    """The runs directory, created if needed; one clear error if it cannot be written."""
    root = Path(root or records.runs_root())
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(
            f"runs directory {root} cannot be written ({exc.strerror or exc}); set $RPEVIT_RUNS "
            "to a writable directory (on a cluster: one every worker can reach)."
        ) from None
    return root


SHARED_CHECK_PREFIX = ".rpevit-shared-check-"


def write_check_file(root) -> Path:
    """A uniquely named file in the runs root that other processes (Ray workers, torchrun ranks)
    look for to prove they see the same directory; the caller removes it."""
    path = Path(root) / f"{SHARED_CHECK_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    records.write_text(path, f"{socket.gethostname()} {os.getpid()}\n")
    return path


def sees_check_file(root, name: str) -> bool:
    """True if this process sees the check file `name` in the runs root (the one shared-root check
    of the Ray engine and torchrun); waits up to 5 s, as a network filesystem may show it late."""
    for _ in range(10):
        if (Path(root) / name).is_file():
            return True
        time.sleep(0.5)
    return False


def preflight(params: Params, variants=None, runs_root=None) -> None:
    """Everything checkable before the first epoch: the device exists, the model fits its memory
    (sizing.check_fits), the runs directory is writable and every variant's model builds for every
    dataset (options, arithmetic)."""
    device = resolve_device(params.train.device)
    for dataset in params.datasets:
        check_fits(model_config_for(params, dataset), params.train, device)
    check_runs_root(runs_root)
    state = torch.get_rng_state()
    try:
        for dataset in params.datasets:
            for variant in variants or params.variants:
                build_model(variant, model_config_for(params, dataset))
    finally:
        torch.set_rng_state(state)


def untrained_model(run: Run, device="cpu", config=None) -> ViT:
    """A run's model at initialisation (the same init `train` starts from for this seed); `config`
    replaces the run's model configuration (a benchmark's other image size)."""
    torch.manual_seed(run.seed)
    return build_model(run.variant, config or run.model_config, seed=run.seed).to(device).eval()


def trained_model(run: Run, device=None):
    """(model with the run's best-validation weights in eval mode, its record) for a finished run."""
    params, out_dir = run.params, run.dir
    record = records.read_record(out_dir)
    if not is_finished(record):
        raise UserError(
            f"no finished run of {run.variant} on {run.dataset} (seed {run.seed}) in {out_dir}; "
            f"train it first (python -m rpevit train --params {params.name} --variant {run.variant})."
        )
    if not dataclasses.replace(run, epochs=record["epochs"]).matches(record):
        raise UserError(
            f"the run in {out_dir} was trained with other settings than preset {params.name} has now; "
            f"retrain it (python -m rpevit study {params.name}) before evaluating."
        )
    checkpoint = tested_weights(out_dir, record)
    if checkpoint is None:
        raise UserError(
            f"the run of {run.variant} on {run.dataset} (seed {run.seed}) lost the weights it was tested with, "
            f"so it is unfinished again; run `python -m rpevit study {params.name}` to finish it from its "
            "last good checkpoint."
        )
    return _loaded_model(run, checkpoint["best"]["state"], device), record


def _loaded_model(run: Run, state: dict, device=None) -> ViT:
    """The run's model with weights `state`, on `device` (default: the preset's), in eval mode."""
    model = build_model(run.variant, run.model_config, seed=run.seed)
    model.load_state_dict(state)
    return model.to(device or resolve_device(run.params.train.device)).eval()


def weights_here(params: Params, record: dict, runs_root=None) -> bool:
    """True if a finished run's record and checkpoint are on this machine. A study's kept records
    (keep_records) travel with the repository; checkpoints stay where the run was trained."""
    out_dir = Run.of(params, record, runs_root=runs_root).dir
    return (out_dir / records.RECORD).is_file() and (out_dir / records.CHECKPOINT).is_file()


def kept_weights(run: Run) -> dict | None:
    """The tested weights kept in the repository beside a finished run's kept record (a state dict),
    or None (none kept, or kept for another result)."""
    if not run.params.keep_records:
        return None
    return _weights_kept_for(run, records.read_record(run.kept_dir))


def _weights_kept_for(run: Run, record: dict | None) -> dict | None:
    """The weights kept in run.kept_dir for `record` where it is the run's current finished record, else None."""
    if not run.matches(record) or not is_finished(record):
        return None
    return records.load_kept_weights(run.kept_dir, record)


def inspectable_here(params: Params, record: dict) -> bool:
    """True if a finished run's tested weights can be loaded here: its checkpoint is on this
    machine (weights_here) or the repository keeps them (kept_weights)."""
    return weights_here(params, record) or kept_weights(Run.of(params, record)) is not None


def inspected_model(run: Run, device=None):
    """(model with the run's tested weights in eval mode, its record): from its checkpoint where the
    run is here (trained_model), else — or when that checkpoint lost them — from the weights the
    repository keeps for it."""
    state = kept_weights(run)
    if run.matches(records.read_record(run.dir)) and (run.dir / records.CHECKPOINT).is_file():
        try:
            return trained_model(run, device)
        except UserError:
            if state is None:
                raise
    if state is None:
        raise UserError(
            f"the weights of {run.label} are neither here nor kept in {run.kept_dir}; run "
            f"`python -m rpevit keep-weights {run.params.name}` where it was trained, or train it again."
        )
    return _loaded_model(run, state, device), records.read_record(run.kept_dir)


def weights_wanted(run: Run) -> str:
    """Why the run's kept folder should get its tested weights ('' when it need not): the weights
    there are damaged or made for another result of the run, or they are missing where the run is the
    preset's first seed (the first the design trains) and no seed of its variant and dataset holds
    weights. Reads the kept record without moving anything."""
    if not run.params.keep_records:
        return ""
    record = records.peek_record(run.kept_dir)
    if not run.matches(record) or not is_finished(record):
        return ""
    why = records.kept_weights_problem(run.kept_dir, record)
    if why != "missing":
        return why or ""
    if run.seed != run.params.seeds[0]:
        return ""
    if any(_holds_kept_weights(run.params, seed_dir) for seed_dir in run.kept_dir.parent.glob("seed*")):
        return ""
    return "missing (the preset's first seed keeps its variant's weights)"


def keep_first_weights(run: Run) -> str:
    """The automatic form of keep_weights, called where a finished run's kept record is current: a
    run of the preset's first seed keeps its tested weights beside its kept record unless some seed
    of its variant and dataset has weights kept already, so a fresh clone inspects every trained
    variant even where runs/ is lost; kept weights that are damaged (moved aside) or made for another
    result are written again (weights_wanted). The seed, not the order runs finish in, decides (the
    same files under --engine ray). Returns a line to print ('' when there is nothing to say)."""
    why = weights_wanted(run)
    if not why:
        return ""
    record = records.read_record(run.kept_dir)
    checkpoint = _checkpoint_with_tested_weights(run.dir, record)
    if checkpoint is None:
        return (
            "its checkpoint no longer holds its tested weights, so none are kept for inspection; "
            f"`python -m rpevit keep-weights {run.params.name}` keeps another seed's where its checkpoint is"
        )
    if why.startswith("damaged"):
        records.move_aside(run.kept_dir / records.KEPT_WEIGHTS, why)
    path = records.save_kept_weights(run.kept_dir, record, checkpoint["best"]["state"])
    first = "the preset's first seed; " if run.seed == run.params.seeds[0] else ""
    return f"its tested weights kept in {path} ({first}notebooks 20, 30 and 90 inspect them)"


def _holds_kept_weights(params: Params, kept_dir: Path) -> bool:
    """Whether a kept seed folder holds the weights of its current finished record; it reads another
    run's files without moving anything (that run's own process repairs them)."""
    record = records.peek_record(kept_dir)
    return record is not None and _weights_kept_for(Run.of(params, record), record) is not None


def keep_weights(params: Params, found: list[dict], runs_root=None, reports_root=None) -> list[str]:
    """Keep, beside the kept records of a keep_records preset, the tested weights of one finished run
    per variant and dataset — its lowest seed whose weights are here or already kept — so that a fresh
    clone inspects trained models (notebooks 20, 30, 90). Returns one line per variant and dataset."""
    if not params.keep_records:
        raise UserError(
            f"preset {params.name} does not keep its records (keep_records: false), so it keeps no weights; "
            "its notebooks inspect the runs whose checkpoints are on this machine."
        )

    def loadable(record: dict) -> bool:
        run = Run.of(params, record, runs_root=runs_root, reports_root=reports_root)
        return kept_weights(run) is not None or weights_here(params, record, runs_root)

    chosen = [
        Run.of(params, r, runs_root=runs_root, reports_root=reports_root) for r in inspectable(params, found, loadable)
    ]
    lines = []
    for run in chosen:
        kept = records.read_record(run.kept_dir)
        if records.load_kept_weights(run.kept_dir, kept) is not None and run.matches(kept):
            lines.append(f"{run.label}: weights already kept")
        elif not run.matches(kept) or kept != records.read_record(run.dir):
            lines.append(f"{run.label}: its kept record differs from runs/; run `python -m rpevit study {params.name}`")
        else:
            checkpoint = tested_weights(run.dir, kept)
            if checkpoint is None:
                lines.append(f"{run.label}: its tested weights are lost; run `python -m rpevit study {params.name}`")
                continue
            path = records.save_kept_weights(run.kept_dir, kept, checkpoint["best"]["state"])
            lines.append(f"{run.label}: kept {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    places = {(run.dataset, run.variant) for run in chosen}
    missing = sorted({(r.dataset, r.variant) for r in finished_runs(results(found))} - places)
    where = f"no checkpoint in {Path(runs_root or records.runs_root())}, no weights kept"
    lines += [f"{v} | {d}: no finished run has its weights here ({where})" for d, v in missing]
    return lines or [f"preset {params.name} has no finished run yet: nothing to keep"]


def inspectable(params: Params, found: list[dict], has_weights=None, every_seed: bool = False) -> list[dict]:
    """One finished run per variant and dataset (its lowest seed; `every_seed`: each of its seeds) among
    `found` whose weights can be loaded here (`has_weights(record)`, default inspectable_here: a
    checkpoint here or kept weights), in the preset's order of datasets and variants, then by seed."""
    has_weights = has_weights or (lambda record: inspectable_here(params, record))
    chosen: dict[tuple, Result] = {}
    for r in sorted(finished_runs(results(found)), key=lambda r: r.seed):
        if has_weights(r):
            chosen.setdefault((r.dataset, r.variant) + ((r.seed,) if every_seed else ()), r)
    places = ((d, v) for d in params.datasets for v in params.variants)
    order = {place: i for i, place in enumerate(places)}
    return sorted(chosen.values(), key=lambda r: (order.get((r.dataset, r.variant), len(order)), r.seed))


def weightless_note(params, found: list[dict], has_weights=None) -> str:
    """A line naming the variants (per dataset) with finished runs none of whose weights can be loaded
    here (`has_weights`, default inspectable_here), or '' when every finished variant has one."""
    has_weights = has_weights or (lambda record: inspectable_here(params, record))
    finished = finished_runs(results(found))
    loadable = {(r.dataset, r.variant) for r in finished if has_weights(r)}
    missing = [r for r in sorted(finished, key=lambda r: r.seed) if (r.dataset, r.variant) not in loadable]
    places = list(dict.fromkeys(f"{r.variant} · {r.dataset}" for r in missing))
    if not places:
        return ""
    first = missing[0]
    return (
        f"{len(places)} variant(s) of preset '{params.name}' have finished runs but none whose weights can be "
        f"loaded here ({', '.join(places)}): checkpoints stay where a run was trained, and `python -m rpevit "
        f"keep-weights {params.name}` run there keeps one seed's weights per variant in the repository. To "
        f"inspect one here, train it again: `python -m rpevit train --params {params.name} --variant "
        f"{first.variant} --dataset {first.dataset} --seed {first.seed}`."
    )


def tested_weights(out_dir: Path, record: dict) -> dict | None:
    """The checkpoint holding the weights a finished record was tested with, or None — then the
    record is moved aside (kept), so the run counts as unfinished and resumes from its last good
    checkpoint."""
    checkpoint = _checkpoint_with_tested_weights(out_dir, record)
    if checkpoint is not None:
        return checkpoint
    records.move_aside(
        Path(out_dir) / records.RECORD, "the checkpoint with its tested weights is damaged or missing", tag="unverified"
    )
    return None


def _checkpoint_with_tested_weights(out_dir: Path, record: dict) -> dict | None:
    """The checkpoint in out_dir if its best weights are those `record` was tested with, else None."""
    checkpoint = records.load_checkpoint(Path(out_dir) / records.CHECKPOINT)
    if checkpoint is not None and checkpoint["best"]["epoch"] == record.get("best_epoch"):
        return checkpoint
    return None


def timing_images(dataset: Dataset, train_cfg: TrainConfig, device) -> torch.Tensor:
    """The normalised test images a run's inference is timed on (the first `train.timing_images`)."""
    from ...core.data import normalize

    images = dataset.test.images[: train_cfg.timing_images]
    return normalize(images.float() / 255, dataset.info).to(device)
