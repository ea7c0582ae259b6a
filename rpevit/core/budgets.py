"""Learning-rate schedules, and budget branches: one run that yields several training budgets.

`cosine`: linear warmup, then cosine decay to min_lr (Loshchilov & Hutter 2017, SGDR eq. 5 without
restarts). `wsd`: warmup–stable–decay (Hu et al. 2024, MiniCPM §4.1): linear warmup, a constant
learning rate, then a linear decay to min_lr over the last `decay_fraction` of the epochs. Under WSD
the learning rate of the stable phase does not depend on the total budget, so a shorter budget b is
the same run up to epoch b − decay(b) followed by its own cool-down (Hägele et al. 2024, "Scaling
Laws and Compute-Optimal Training Beyond Fixed Training Durations", §3): `run_due_branches` trains
that cool-down from the stable phase's state, tests the budget's best-validation weights, and puts
everything back exactly as it was, so the main run goes on bit for bit as if no branch had been
taken. A branch result is kept in the checkpoint, so a kill inside a cool-down repeats only it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from .errors import UserError


def warmup_cosine(warmup_steps: int, total_steps: int, lr: float, min_lr: float) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then cosine decay to min_lr/lr."""
    floor = min_lr / lr

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def warmup_stable_decay(
    warmup_steps: int, total_steps: int, decay_steps: int, lr: float, min_lr: float
) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, constant 1, then linear to min_lr/lr over the last
    `decay_steps` (the value after step s applies to step s + 1, as LambdaLR counts)."""
    floor = min_lr / lr
    decay_start = total_steps - decay_steps

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start + 1) / max(1, decay_steps))
        return 1.0 + (floor - 1.0) * progress

    return factor


def decay_epochs(budget: int, fraction: float) -> int:
    """Epochs of a budget's cool-down: its decay_fraction, rounded, at least one."""
    return max(1, round(budget * fraction))


def branch_epoch(budget: int, fraction: float) -> int:
    """The stable-phase epoch after which budget `budget`'s cool-down starts."""
    return budget - decay_epochs(budget, fraction)


def stable_end(train_cfg) -> int | None:
    """Under WSD, the epoch after which the run's own decay starts: its state there is the state of every
    longer budget of the same seed at that epoch (the stable phase does not depend on the total); None
    for a cosine schedule."""
    return branch_epoch(train_cfg.epochs, train_cfg.decay_fraction) if train_cfg.schedule == "wsd" else None


def lr_factor(train_cfg, steps_per_epoch: int, epochs: int | None = None) -> Callable[[int], float]:
    """The run's LR multiplier per step (for `epochs`, default the run's own), by train.schedule."""
    epochs = train_cfg.epochs if epochs is None else epochs
    warmup = max(1, round(train_cfg.warmup_epochs * steps_per_epoch))
    total = epochs * steps_per_epoch
    if train_cfg.schedule == "wsd":
        decay = decay_epochs(epochs, train_cfg.decay_fraction) * steps_per_epoch
        return warmup_stable_decay(warmup, total, decay, train_cfg.lr, train_cfg.min_lr)
    return warmup_cosine(warmup, total, train_cfg.lr, train_cfg.min_lr)


def check_schedule(train_cfg, where: str = "train") -> None:
    """One UserError for a schedule, decay fraction or budget list that cannot be trained as asked."""
    fraction, budgets = train_cfg.decay_fraction, tuple(train_cfg.budgets)
    if not (math.isfinite(fraction) and 0 < fraction < 1):
        raise UserError(f"{where}.decay_fraction: {fraction!r} is not valid; it must be a number in (0, 1).")
    if budgets and train_cfg.schedule != "wsd":
        raise UserError(
            f"{where}.budgets: {list(budgets)} needs {where}.schedule: wsd (a cosine schedule's learning rate "
            "depends on the total budget, so shorter budgets cannot branch from it)."
        )
    if train_cfg.schedule != "wsd":
        return
    for budget in (*budgets, train_cfg.epochs):
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= train_cfg.epochs:
            raise UserError(
                f"{where}.budgets: {budget!r} is not valid; each budget must be a whole number of epochs in "
                f"1..{train_cfg.epochs - 1} (shorter than {where}.epochs = {train_cfg.epochs})."
            )
        start = branch_epoch(budget, fraction)
        if start < train_cfg.warmup_epochs:
            raise UserError(
                f"{where}: the {budget}-epoch budget's cool-down would start at epoch {start}, "
                f"inside the {train_cfg.warmup_epochs:g}-epoch warmup; use longer budgets or a shorter warmup."
            )
    if train_cfg.epochs in budgets or len(set(budgets)) != len(budgets):
        raise UserError(
            f"{where}.budgets: {list(budgets)} lists a budget twice or the run's own {train_cfg.epochs} epochs; "
            "list each shorter budget once."
        )


def due_branches(train_cfg, epoch: int, done) -> list[int]:
    """The budgets whose cool-down starts after `epoch` and has no result in `done` yet, shortest first."""
    return sorted(
        b for b in train_cfg.budgets if branch_epoch(b, train_cfg.decay_fraction) == epoch and str(b) not in done
    )


def run_due_branches(state, run, train_epoch: Callable, validate: Callable, test: Callable) -> bool:
    """Train, validate and test every budget whose cool-down branches after the state's epoch, then
    restore the state (weights, optimizer, schedule, data generator, random state) exactly.

    `train_epoch(state, epoch)` trains one epoch and returns its row's training fields,
    `validate(model)` the validation fields, `test(model)` the test fields of the weights loaded;
    each budget's result goes into `state.branches[str(budget)]`. True if a branch ran."""
    train_cfg = run.train_config
    due = due_branches(train_cfg, state.epoch, state.branches)
    for budget in due:
        saved = _snapshot(state)
        try:
            schedule = lr_factor(train_cfg, state.steps_per_epoch, budget)
            state.scheduler = torch.optim.lr_scheduler.LambdaLR(state.optimizer, schedule)
            state.scheduler.load_state_dict(saved["scheduler"])
            for group in state.optimizer.param_groups:  # the constructor set the first step's
                group["lr"] = group["initial_lr"] * schedule(state.scheduler.last_epoch)
            history, best = list(state.history), copy.deepcopy(state.best)
            print(
                f"[{run.label}] budget {budget} epochs: cool-down from epoch {state.epoch} to {budget} "
                "(kept only when it ends: a stop before then trains it again)",
                flush=True,
            )
            for epoch in range(state.epoch, budget):
                row = {"epoch": epoch + 1, **train_epoch(state, epoch), **validate(state.model)}
                print(
                    f"[{run.label}] budget {budget} cool-down epoch {epoch + 1}/{budget} val acc {row['val_acc']:.4f}"
                    + (f" | {row['seconds']:.1f}s" if "seconds" in row else ""),
                    flush=True,
                )
                history.append(row)
                if row["val_acc"] > best["val_acc"]:
                    weights = {k: v.detach().cpu().clone() for k, v in state.model.state_dict().items()}
                    best = {"val_acc": row["val_acc"], "epoch": row["epoch"], "state": weights}
            state.model.load_state_dict(best["state"])
            state.branches[str(budget)] = {
                "epochs": budget,
                "best_epoch": best["epoch"],
                "best_val_acc": best["val_acc"],
                **test(state.model),
                "history": history[saved["epoch"] :],
            }
            print(
                f"[{run.label}] budget {budget} epochs (cool-down from epoch {saved['epoch']}): "
                f"test top-1 {state.branches[str(budget)]['top1']:.4f}",
                flush=True,
            )
        finally:
            _restore(state, saved)
    return bool(due)


def _snapshot(state) -> dict:
    """Everything a cool-down changes, copied."""
    device = state.generator.device
    return {
        "epoch": state.epoch,
        "model": {k: v.detach().clone() for k, v in state.model.state_dict().items()},
        "optimizer": copy.deepcopy(state.optimizer.state_dict()),
        "scheduler": state.scheduler.state_dict(),
        "scheduler_object": state.scheduler,
        "generator": state.generator.get_state(),
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def _restore(state, saved: dict) -> None:
    """The state as `_snapshot` found it."""
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler = saved["scheduler_object"]
    state.scheduler.load_state_dict(saved["scheduler"])
    state.generator.set_state(saved["generator"])
    torch.set_rng_state(saved["rng"])
    if saved["cuda_rng"] is not None:
        torch.cuda.set_rng_state(saved["cuda_rng"], state.generator.device)
    state.epoch = saved["epoch"]
