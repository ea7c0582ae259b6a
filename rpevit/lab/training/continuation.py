"""Going on from a shorter budget: a warmup–stable–decay run that starts where another preset's run of
the same seed ended its stable phase (its `checkpoint.stable.pt`), not from initialisation.

Under WSD the learning rate of the stable phase does not depend on the total budget (Hu et al. 2024,
MiniCPM §4.1; Hägele et al. 2024, §3; rpevit/core/budgets.py), and data order, augmentation and random
draws are functions of the seed and the epoch, so a 64-epoch run passes through exactly the state a
32-epoch run of the same seed keeps after its epoch 24 (tests/test_continuation.py: bit for bit on the
CPU). A preset with `continues: <preset>` — the same data, model and training except `train.epochs`
and `train.budgets` — starts each run of its own there. It inherits the epochs before that point, the
cool-downs branched before it and, when the donor run finished, the donor's own budget as one of its
budgets; the record's `continued_from` names them, and a CPU budget leaves them out
(`inherited_seconds`). Without the donor's stable checkpoint on this machine a run starts from
initialisation and computes the same.
"""

from __future__ import annotations

import dataclasses

import torch

from ...core import budgets
from ...core.errors import UserError
from ..params import load_params
from ..schema import epoch_cost, is_finished
from ..store import records
from ..store.catalog import current_record, grid, run_history
from ..store.run import Run


def donor_params(params):
    """The preset `params.continues` names."""
    return load_params(params.continues)


def donor_run(run: Run, donor=None) -> Run:
    """The donor preset's run of this run's dataset, variant and seed; one UserError if its key is not the
    key this run would have with the donor's epochs and budgets (any other setting differs)."""
    donor = donor or donor_params(run.params)
    theirs = Run(donor, run.dataset, run.variant, run.seed, runs_root=run.runs_root, reports_root=run.reports_root)
    train = dataclasses.replace(run.params.train, epochs=donor.train.epochs, budgets=donor.train.budgets)
    mine = dataclasses.replace(run, params=dataclasses.replace(run.params, train=train))
    if mine.key != theirs.key:
        raise UserError(
            f"continues ({donor.name}): its {run.variant} runs use other data, model or training settings than "
            f"this preset's; only train.epochs and train.budgets may differ."
        )
    return theirs


def check_donor_runs(params, runs_root=None, reports_root=None) -> None:
    """Every run of the grid has its donor run with the right key (one UserError before any training)."""
    if not params.continues:
        return
    donor = donor_params(params)
    for place in grid(params):
        donor_run(Run(params, *place, runs_root=runs_root, reports_root=reports_root), donor)


def inherited_checkpoint(run: Run, steps_per_epoch: int) -> dict | None:
    """The donor run's stable checkpoint made this run's: its key, the branches this run lists (the donor's
    own result as the branch of the donor's budget, if the donor finished), the learning rate of this
    run's schedule for the next step, and `continued_from`. None (with a line) if there is none here."""
    donor = donor_params(run.params)
    theirs = donor_run(run, donor).rooted()
    path = theirs.dir / records.STABLE_CHECKPOINT
    if not path.is_file():
        print(f"[{run.label}] no stable checkpoint of {donor.name} here ({path}): training from the start", flush=True)
        return None
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    epoch, listed = checkpoint["epoch"], {str(b) for b in run.train_config.budgets}
    branches = {b: v for b, v in (checkpoint.get("branches") or {}).items() if b in listed}
    record = current_record(theirs)
    if str(donor.train.epochs) in listed and is_finished(record or {}):
        fields = ("best_epoch", "best_val_acc", "top1", "top5", "test_correct")
        after = [row for row in run_history(theirs) if row["epoch"] > epoch]
        branches[str(donor.train.epochs)] = {"epochs": donor.train.epochs, **{k: record[k] for k in fields}}
        branches[str(donor.train.epochs)]["history"] = after
    schedule = budgets.lr_factor(run.train_config, steps_per_epoch)
    step = checkpoint["scheduler"]["last_epoch"]
    for group in checkpoint["optimizer"]["param_groups"]:
        group["lr"] = group["initial_lr"] * schedule(step)
    history = [dict(row) for row in checkpoint["history"]]
    history[-1]["lr"] = checkpoint["optimizer"]["param_groups"][0]["lr"]
    print(f"[{run.label}] going on from {donor.name}'s run at the end of its stable phase", flush=True)
    inherited = {"preset": donor.name, "key": theirs.key, "epoch": epoch, "budgets": sorted(branches, key=int)}
    return {**checkpoint, "key": run.key, "history": history, "branches": branches, "continued_from": inherited}


def inherited_seconds(history: list[dict], branches: dict | None, continued_from: dict | None) -> float:
    """Of a run's epoch seconds (history and cool-downs), those another preset's run spent (continued_from)."""
    if not continued_from:
        return 0.0
    rows = [row for row in history if row["epoch"] <= continued_from["epoch"]]
    rows += [row for b in continued_from["budgets"] for row in (branches or {}).get(b, {}).get("history", [])]
    return sum(epoch_cost(row) for row in rows)
