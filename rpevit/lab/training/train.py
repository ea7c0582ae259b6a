"""Training loop (nanoGPT-style, one sitting): AdamW, linear warmup + cosine decay, label
smoothing, gradient clipping; bf16 autocast where `train.amp` asks for it (rpevit.core.device) and
optional graph capture on CUDA (rpevit.core.capture: torch.compile with CUDA graphs).

Protocol of seed 001: validate every epoch, test the best-validation weights. Each epoch ends
with an atomic checkpoint holding everything needed for an exact resume (model, optimizer,
scheduler, data-order generator, RNG states, history, best weights). A non-finite loss stops
the run with a clear message and leaves the last good checkpoint in place.

In parts: `train_run` decides (already done / train) under the run's lock; `_train` sets up or
resumes (`_start`, `_checkpoint_to_resume`, `_resume`), runs the epoch loop (`_train_epoch`,
`_validation`, `_end_epoch` writing the checkpoint) and tests and records (`run_record.record_finished_run`).
Data parallelism (torchrun) is one `distributed.Replica` object: the only process, or a rank
that trains on its shard of every global batch while rank 0 (`replica.is_main`) writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ...core import budgets, capture, metrics
from ...core import data as data_lib
from ...core.device import autocast, deterministic, device_name, precision, resolve_device, true_fp32
from ...core.errors import UserError
from ...core.loop import EpochTotals, Step, adamw, predict, train_epoch
from ...core.model import build_model
from .. import revision
from ..store import records
from ..store.run import Run
from . import continuation, distributed
from .run_record import record_finished_run, write_diverged


class Diverged(RuntimeError):
    """Training produced a non-finite loss."""


def _rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def _checkpoint_device(checkpoint: dict) -> str:
    """The device type a checkpoint was trained on (older ones: told by the generator state's size,
    5,056 bytes for the CPU's Mersenne twister, 16 for CUDA's Philox seed and offset)."""
    return checkpoint.get("device_type") or ("cpu" if checkpoint["generator"].numel() > 16 else "cuda")


def _checkpoint_precision(checkpoint: dict, amp: str) -> str:
    """The precision a checkpoint was trained in (older ones: earlier rpevit took bf16 on any CUDA
    device for amp auto / bf16, fp32 elsewhere)."""
    if "precision" in checkpoint:
        return checkpoint["precision"]
    return "bf16" if _checkpoint_device(checkpoint) == "cuda" and amp in ("auto", "bf16") else "fp32"


def _restore_generator(generator, checkpoint: dict, device, seed: int, label: str) -> None:
    """The data-order generator as the checkpoint left it; from a checkpoint of another device type
    (whose generator state this device cannot take), a fresh stream seeded by (seed, epoch)."""
    trained_on = _checkpoint_device(checkpoint)
    if trained_on == device.type:
        generator.set_state(checkpoint["generator"])
        return
    generator.manual_seed(seed * 1_000_003 + checkpoint["epoch"])
    print(
        f"[{label}] note: the checkpoint was trained on {trained_on}, this process trains on {device.type}: "
        "the data-order generator is reseeded from (seed, epoch), so the run goes on correctly but "
        "not bit for bit as one uninterrupted run would",
        flush=True,
    )


def _compile_ahead(forward, model, dataset, batch_sizes, device, amp: str, replica) -> float:
    """Compile the training graphs before the first timed epoch: a forward and backward of every
    batch size the epochs will see, with the random state forked (dropout masks are drawn and
    forgotten) and the gradients dropped, so training itself is unchanged. Returns the seconds
    spent, reported as the record's compile_seconds instead of inside epoch 1's time."""
    info = dataset.info
    with metrics.Timer(device) as timer, torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for size in batch_sizes:
            x = data_lib.example_images(dataset.train, info, size).to(device)
            y = dataset.train.labels[:size].to(device)
            x, y, _, _ = replica.shard(x, y)
            with autocast(device, amp):
                logits = forward(x)
            F.cross_entropy(logits.float(), y).backward()
        model.zero_grad(set_to_none=True)
    return timer.seconds


# --------------------------------------------------------------------------------------------
# one run: decide (already done / train), then train under the run's lock


def train_run(
    run: Run,
    dataset,
    out_dir: Path | None = None,
    *,
    resume: bool = True,
    progress: bool = False,
    on_epoch_end=None,
) -> dict:
    """Train one run on its loaded dataset, test the best-validation weights, write the record.

    The run directory (default `run.dir`) is locked while training (RunBusy if a live process
    holds it). A finished run with the same settings is returned as it is, never retrained or
    degraded; results made with other settings are moved to `superseded/`, not overwritten.
    `resume` continues from the newest good checkpoint made with the same settings.
    `on_epoch_end(row)` is called after each epoch's checkpoint is safely on disk. A non-finite
    loss writes a `diverged` record and raises.

    Under torchrun the main process (rank 0) holds the lock, decides and writes; every rank
    trains. The other ranks return {"status": "trained", "rank": r} (no record) and raise
    PeerFailed where rank 0 raises (rank 0 prints the error).
    """
    if dataset.info.name != run.dataset:
        raise ValueError(f"the run {run.label} cannot train on the dataset {dataset.info.name}")
    out_dir = Path(out_dir or run.dir)
    replica = distributed.replica()
    if not replica.is_main:
        return _follow(run, dataset, out_dir, resume, progress, replica)
    decided = False  # the other ranks wait for the decision
    try:
        with records.RunLock(out_dir):
            records.clean_temporary(out_dir)
            existing = records.read_record(out_dir)
            if run.matches(existing):
                print(f"[{run.label}] already {existing['status']}: {out_dir / records.RECORD}")
                replica.broadcast(("done", existing))
                decided = True
                return existing
            if existing is not None:
                records.supersede(out_dir, "other settings than the preset has now")
            replica.broadcast(("train", None))
            decided = True
            try:
                return _train(run, dataset, out_dir, resume, progress, on_epoch_end, replica)
            except Diverged as exc:
                write_diverged(run, out_dir, exc)
                raise
    except BaseException as exc:
        if not decided:  # tell the others rank 0 failed
            replica.broadcast(("error", 2 if isinstance(exc, UserError) else 1))
        raise


def _follow(run: Run, dataset, out_dir: Path, resume: bool, progress: bool, replica) -> dict:
    """train_run on a rank > 0: rank 0's decision, then training beside it."""
    decision, payload = replica.broadcast()
    if decision == "done":
        return payload
    if decision == "error":
        raise distributed.PeerFailed(code=payload)
    try:
        return _train(run, dataset, out_dir, resume, progress, None, replica)
    except Diverged:
        raise distributed.PeerFailed(code=1) from None


def _train(run: Run, dataset, out_dir: Path, resume: bool, progress: bool, on_epoch_end, replica) -> dict:
    """Set up (or resume), run the epochs, then test and record (main process) — one loop for one
    process and for every torchrun rank, the differences behind `replica`."""
    train_cfg = run.train_config
    device = replica.device(resolve_device(train_cfg.device))
    with deterministic(train_cfg.deterministic), true_fp32(device, precision(device, train_cfg.amp)):
        dataset = data_lib.on_device(dataset, device)
        checkpoint_path = out_dir / records.CHECKPOINT
        trained_in = precision(device, train_cfg.amp)
        state = set_up(run, dataset, device, checkpoint_path, resume, trained_in, replica)

        compiled = capture.captures(train_cfg, run.parsed.backend)

        def first_image():
            return data_lib.example_images(dataset.train, dataset.info, 1).to(device)

        trainer = replica.wrap(state.model, device, first_image)
        replica.announce(run.label, train_cfg.batch_size)
        forward = capture.capture(trainer, device, world_size=replica.world_size) if compiled else trainer
        compile_seconds = 0.0
        if compiled and state.epoch < train_cfg.epochs:
            last = len(dataset.train) % train_cfg.batch_size
            sizes = [train_cfg.batch_size] + ([last] if last else [])
            compile_seconds = _compile_ahead(forward, state.model, dataset, sizes, device, train_cfg.amp, replica)
        metrics.reset_peak_memory(device)
        for epoch in range(state.epoch, train_cfg.epochs):
            if replica.is_main and _branch(state, forward, run, dataset, device, replica):
                _write_checkpoint(
                    state, run, checkpoint_path, device, trained_in, replica.rng_fields(_rng_state(device))
                )
            totals = _train_epoch(state, forward, run, dataset, device, epoch, progress, replica)
            if totals.diverged:
                kept = (
                    f"the last good checkpoint (epoch {epoch}) is kept at {checkpoint_path}"
                    if epoch
                    else "no epoch had finished, so no checkpoint was written"
                )
                raise Diverged(
                    f"{run.variant} on {run.dataset} (seed {run.seed}): non-finite loss at epoch {epoch + 1}, "
                    f"step {int(totals.first_bad_step) + 1}; {kept}."
                )
            replica.check(state.model)
            rank_fields = replica.rng_fields(_rng_state(device))
            if not replica.is_main:
                continue  # the main process validates and writes; the others go on to the next epoch
            row = {
                "epoch": epoch + 1,
                **totals.row(),
                **_validation(state.model, dataset, train_cfg, device),
                "lr": state.optimizer.param_groups[0]["lr"],
                **totals.times(),
            }
            _end_epoch(state, row, run, checkpoint_path, device, trained_in, rank_fields)
            if on_epoch_end is not None:
                on_epoch_end(row)
        if not replica.is_main:
            return {"status": "trained", "rank": replica.rank}
        return record_finished_run(run, dataset, state, out_dir, device, trained_in, compiled, compile_seconds, replica)


# --------------------------------------------------------------------------------------------
# set-up and checkpoints: everything an exact resume needs


@dataclass
class _State:
    """What a run carries from epoch to epoch — and what its checkpoint holds."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator  # augmentation + data order, on the device
    steps_per_epoch: int
    recipe: str  # the augmentation recipe
    history: list[dict] = field(default_factory=list)
    best: dict = field(default_factory=lambda: {"val_acc": -1.0, "epoch": 0, "state": None})
    epoch: int = 0  # epochs done
    branches: dict = field(default_factory=dict)  # budget (str) → its cool-down's result (budgets.py)
    continued_from: dict | None = None  # the donor run it went on from (continuation.py)
    revisions: list[str] = field(default_factory=list)  # code revisions it ran under, in order (revision.py)
    devices: list[str] = field(default_factory=list)  # the CPUs or GPUs it trained on, in order (core.device)


def _start(run: Run, dataset, device, replica) -> _State:
    """The run's model at initialisation, its optimizer, schedule and data-order generator."""
    train_cfg = run.train_config
    recipe = data_lib.recipe_for(dataset.info, run.params.data.augment)
    torch.manual_seed(run.seed)
    model = build_model(run.variant, run.model_config, seed=run.seed).to(device)
    replica.seed(run.seed)
    optimizer = adamw(model, train_cfg.lr, train_cfg.weight_decay)
    steps_per_epoch = data_lib.num_batches(len(dataset.train), train_cfg.batch_size)
    if train_cfg.budgets and replica.world_size > 1:
        raise UserError("train.budgets (cool-downs branched from one run) train in one process, not under torchrun.")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, budgets.lr_factor(train_cfg, steps_per_epoch))
    generator = torch.Generator(device=device).manual_seed(run.seed)
    return _State(model, optimizer, scheduler, generator, steps_per_epoch, recipe)


def set_up(run: Run, dataset, device, path: Path, resume: bool, computed_in: str, replica) -> _State:
    """A run's state: fresh; resumed from its own checkpoint at `path`; or, for a preset that `continues`
    another and has no checkpoint here yet, going on from the donor run's stable checkpoint (one
    process; rpevit/lab/training/continuation.py)."""
    state = _start(run, dataset, device, replica)
    checkpoint = _checkpoint_to_resume(path, run, replica) if resume else None
    if checkpoint is None and resume and run.params.continues and replica.world_size == 1:
        checkpoint = continuation.inherited_checkpoint(run, state.steps_per_epoch)
    if checkpoint is not None:
        _resume(state, checkpoint, run, device, computed_in, path, replica)
    state.revisions = revision.extended(state.revisions, revision.code_revision())
    state.devices = revision.extended(state.devices, device_name(device))
    return state


def _checkpoint_to_resume(path: Path, run: Run, replica):
    """The checkpoint to resume from, on every process, or None: the main process chooses the newest
    good one made with this run's settings (damaged files moved aside, other settings' checkpoints
    superseded) and names its file; the other ranks read that file."""
    if replica.is_main:
        checkpoint = records.load_checkpoint(path)
        if checkpoint is not None and not run.matches(checkpoint):
            records.supersede(path.parent, f"other settings than this run ({run.label})")
            checkpoint = None
        # load_checkpoint reads checkpoint.pt unless it is missing or damaged (then moved aside)
        source = (
            None if checkpoint is None else str(path if path.is_file() else path.with_name(records.PREVIOUS_CHECKPOINT))
        )
        replica.broadcast((source, None if checkpoint is None else checkpoint["epoch"]))
        return checkpoint
    source, epoch = replica.broadcast()
    if source is None:
        return None
    checkpoint = torch.load(source, map_location="cpu", weights_only=False)
    if checkpoint.get("epoch") != epoch:
        raise RuntimeError(
            f"rank {replica.rank} read epoch {checkpoint.get('epoch')} from {source} where "
            f"rank 0 read epoch {epoch}: every rank must see the same runs directory."
        )
    return checkpoint


def _check_precision(checkpoint: dict, precision: str, amp: str, path: Path) -> None:
    """One clear error where resuming would switch a run's precision (its key does not change)."""
    trained = _checkpoint_precision(checkpoint, amp)
    if trained != precision:
        raise UserError(
            f"{path} was trained in {trained} (on {_checkpoint_device(checkpoint)}) but this process "
            f"would continue in {precision} (train.amp: {amp}): one run must not change precision "
            f"half-way. Resume it on a device where train.amp: {amp} means {trained}, or move {path} "
            "aside to train the run again from the start."
        )


def _resume(state: _State, checkpoint: dict, run: Run, device, precision: str, path: Path, replica) -> None:
    """Continue exactly where the checkpoint stopped: weights, optimizer, schedule, data order, RNG."""
    _check_precision(checkpoint, precision, run.train_config.amp, path)
    state.model.load_state_dict(checkpoint["model"])
    state.optimizer.load_state_dict(checkpoint["optimizer"])
    state.scheduler.load_state_dict(checkpoint["scheduler"])
    _restore_generator(state.generator, checkpoint, device, run.seed, run.label)
    rng = replica.resumed_rng(checkpoint)
    if rng is not None:
        _set_rng_state(rng, device)
    state.history, state.best, state.epoch = checkpoint["history"], checkpoint["best"], checkpoint["epoch"]
    state.branches = checkpoint.get("branches", {})
    state.continued_from = checkpoint.get("continued_from")
    state.revisions = list(checkpoint.get("revisions", [revision.UNRECORDED]))
    state.devices = list(checkpoint.get("devices", [revision.UNRECORDED]))
    if replica.is_main:
        print(f"[{run.label}] resuming after epoch {state.epoch}", flush=True)


def _end_epoch(state: _State, row: dict, run: Run, path: Path, device, precision: str, rank_fields: dict) -> None:
    """Record the epoch: history, best weights, the checkpoint (atomically) and history.csv; at the end of
    a WSD run's stable phase also checkpoint.stable.pt."""
    state.history.append(records.in_history_columns(row, state.history))
    state.epoch = row["epoch"]
    if row["val_acc"] > state.best["val_acc"]:
        state.best = {
            "val_acc": row["val_acc"],
            "epoch": row["epoch"],
            "state": {k: v.detach().cpu().clone() for k, v in state.model.state_dict().items()},
        }
    # at the end of a WSD run's stable phase also checkpoint.stable.pt, for a longer budget to go on from
    stable = state.epoch == budgets.stable_end(run.train_config)
    _write_checkpoint(state, run, path, device, precision, rank_fields, stable=stable)
    print(
        f"[{run.label}] epoch {row['epoch']}/{run.train_config.epochs} "
        f"train loss {row['train_loss']:.4f} acc {row['train_acc']:.4f} | "
        f"val loss {row['val_loss']:.4f} acc {row['val_acc']:.4f} | {row['seconds']:.1f}s",
        flush=True,
    )


def _write_checkpoint(
    state: _State, run: Run, path: Path, device, precision: str, rank_fields: dict, stable: bool = False
) -> None:
    """The checkpoint (atomically; with `stable` also as checkpoint.stable.pt) and history.csv of the
    state as it is."""
    checkpoint = {
        "key": run.key,
        "epoch": state.epoch,
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "generator": state.generator.get_state(),
        "device_type": device.type,
        "precision": precision,
        "rng": _rng_state(device),
        "history": state.history,
        "best": state.best,
        "branches": state.branches,
        "continued_from": state.continued_from,
        "revisions": state.revisions,
        "devices": state.devices,
        **rank_fields,
    }
    records.save_checkpoint(path, checkpoint, stable=stable)
    records.write_csv(path.parent / records.HISTORY, state.history)


# --------------------------------------------------------------------------------------------
# the epoch loop


def _branch(state: _State, forward, run: Run, dataset, device, replica) -> bool:
    """The cool-downs of the shorter budgets that branch after this epoch (budgets.py); True if any ran."""

    def train_epoch(branch_state, epoch):
        totals = _train_epoch(branch_state, forward, run, dataset, device, epoch, False, replica)
        if totals.diverged:
            raise Diverged(f"{run.variant} on {run.dataset} (seed {run.seed}): non-finite loss in a cool-down")
        lr = branch_state.optimizer.param_groups[0]["lr"]
        return {**totals.row(), "lr": lr, **totals.times()}

    def test(model):
        logits, labels = predict(
            model, dataset.test, dataset.info, run.train_config.eval_batch_size, device, run.train_config.amp
        )
        scores = metrics.classification_metrics(logits, labels, metrics.count_parameters(model))
        return {"top1": scores["top1"], "top5": scores["top5"], "test_correct": metrics.correct_string(logits, labels)}

    return budgets.run_due_branches(
        state, run, train_epoch, lambda model: _validation(model, dataset, run.train_config, device), test
    )


def _train_epoch(state: _State, forward, run: Run, dataset, device, epoch: int, progress: bool, replica) -> EpochTotals:
    """One pass over the training set (core.loop.train_epoch), the numbers over the global batches of
    every process; the data order and augmentation from the run's generator."""
    train_cfg, info = run.train_config, dataset.info
    batch_iter = data_lib.batches(
        dataset.train,
        info,
        train_cfg.batch_size,
        shuffle=True,
        generator=state.generator,
        recipe=state.recipe,
        canvas=data_lib.training_canvas(info),
    )
    if progress and replica.is_main:
        from tqdm.auto import tqdm

        batch_iter = tqdm(
            batch_iter,
            total=state.steps_per_epoch,
            leave=False,
            desc=f"{run.variant} {info.name} epoch {epoch + 1}/{train_cfg.epochs}",
        )
    step = Step(train_cfg.label_smoothing, train_cfg.grad_clip or 0.0, train_cfg.amp)
    return train_epoch(
        state.model, state.optimizer, state.scheduler, batch_iter, step, forward=forward, replica=replica
    )


def _validation(model, dataset, train_cfg, device) -> dict:
    """Loss and accuracy on the validation split."""
    val_logits, val_labels = predict(model, dataset.val, dataset.info, train_cfg.eval_batch_size, device, train_cfg.amp)
    return {
        "val_loss": F.cross_entropy(val_logits, val_labels).item(),
        "val_acc": (val_logits.argmax(-1) == val_labels).float().mean().item(),
    }
