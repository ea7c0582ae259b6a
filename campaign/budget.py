"""A preset's pre-registered CPU budget and the training time spent against it.

A pilot states its budget in its header (`# Budget: ≤ N one-thread CPU hours …`, committed before its
first run); the time spent is the epoch seconds of its runs — finished ones with their cool-down
branches (rpevit/core/budgets.py), and the checkpointed epochs of unfinished ones. `study` starts
no run once the budget is spent (a run already started, with a checkpoint, is finished, and a pilot's
verdict waits for it: `runs_in_flight`); `status`
and the pilot's report say how much is used. An epoch counts its process's CPU seconds
(schema.epoch_cost), which other work on the machine does not inflate; histories written before those
were recorded count their wall seconds.
"""

from __future__ import annotations

import re

from rpevit.core.errors import UserError
from rpevit.lab.params import preset_path
from rpevit.lab.schedule.policy import branch_seconds
from rpevit.lab.schema import epoch_cost
from rpevit.lab.store import records
from rpevit.lab.store.catalog import current_record, grid_runs, run_history, unfinished_runs
from rpevit.lab.store.run import Run
from rpevit.lab.training.continuation import inherited_seconds

from .parking import parked_checkpoint, read_state

_BUDGET = re.compile(r"^# Budget: ≤ (\d+(?:\.\d+)?) one-thread CPU hours", re.MULTILINE)


def stated_budget(preset) -> float | None:
    """The one-thread CPU hours a preset's pre-registration allows (its header's `# Budget: ≤ N
    one-thread CPU hours` line), None if it states none or its file cannot be found; `preset` is a
    name or a path."""
    try:
        text = preset_path(preset).read_text(encoding="utf-8")
    except (UserError, OSError):
        return None
    found = _BUDGET.search(text)
    return float(found.group(1)) if found else None


def training_hours(params, runs_root=None, reports_root=None, finished_only=False) -> tuple[float, float]:
    """(hours, of them in runs still training): the epoch seconds of the preset's runs — finished ones with
    their cool-down branches, and the checkpointed epochs (and cool-downs already branched) of unfinished
    ones, here in runs/ or parked (not read with `finished_only`)."""
    done = training = 0.0
    for run in grid_runs(params, runs_root, reports_root):
        record = current_record(run)
        if record is not None:
            done += run_seconds(run_history(run), record.get("budgets"), record.get("continued_from"))
        elif not finished_only:
            training += _in_flight_seconds(run)
    return (done + training) / 3600, training / 3600


def _in_flight_seconds(run: Run) -> float:
    """Epoch seconds of an unfinished run so far (in_flight_state)."""
    return run_seconds(*in_flight_state(run))


def in_flight_state(run: Run) -> tuple[list[dict], dict | None, dict | None]:
    """(history, cool-down branches, continued_from) of an unfinished run so far: its checkpoint and history
    here, or the checkpoint parked in reports/<preset>/parked/ (which holds its own history) where that is
    further on — so a fresh clone counts what another checkout trained. Files are read without judging them
    (nothing for what cannot be read)."""
    here = run.dir / records.CHECKPOINT
    held, history = (read_state(here), records.read_history(run.dir)) if here.is_file() else ({}, [])
    parked = read_state(parked_checkpoint(run))
    if len(parked.get("history", [])) > len(history):
        held, history = parked, parked["history"]
    return history, held.get("branches"), held.get("continued_from")


def run_seconds(history: list[dict], branches: dict | None, continued_from: dict | None = None) -> float:
    """Epoch seconds of a run's history and of its cool-down branches' histories, less those another
    preset's run spent (the epochs and cool-downs it went on from: continuation.py)."""
    own = sum(epoch_cost(row) for row in history) + branch_seconds(branches)
    return own - inherited_seconds(history, branches, continued_from)


def budget_line(hours: float, running: float, budget: float | None, complete: bool = False) -> str:
    """Training time (so far, unless the preset's every run has finished: `complete`) against the stated
    budget, saying plainly when it is spent or exceeded."""
    spent = f"Training time {'in all' if complete else 'so far'}: {hours:.1f} hours of epoch time (cool-downs included"
    spent += f"; {running:.1f} of them in runs still training)" if running else ")"
    if budget is None:
        return spent + "; the preset states no CPU budget."
    if hours > budget:
        over = hours - budget
        return spent + f", **over** its pre-registered budget of {budget:g} one-thread CPU hours by {over:.1f}."
    return spent + f", of its pre-registered budget of {budget:g} one-thread CPU hours."


def runs_in_flight(params, runs_root=None, reports_root=None) -> list[Run]:
    """The preset's started, unfinished runs: a checkpoint here, or a copy another checkout parked in
    reports/<preset>/parked/ (parking.py). A spent budget finishes them (`study` resumes a started run),
    so a pilot is not read as ended while any is in flight."""
    return [
        run
        for run in unfinished_runs(params, runs_root, reports_root)
        if (run.dir / records.CHECKPOINT).is_file() or parked_checkpoint(run).is_file()
    ]


def budget_spent(params, preset=None, runs_root=None, reports_root=None) -> str | None:
    """Why the preset may start no more training — its stated budget is spent — or None."""
    budget = stated_budget(preset or params.source or params.name)
    if budget is None:
        return None
    hours, _ = training_hours(params, runs_root, reports_root)
    if not over_budget(params, hours, budget, runs_root, reports_root):
        return None
    return (
        f"{params.name}: its pre-registered budget of {budget:g} one-thread CPU hours is spent ({hours:.1f} hours "
        "of epoch time); nothing more is trained. Its report says what was reached."
    )


def over_budget(params, hours: float, budget: float, runs_root=None, reports_root=None) -> bool:
    """True when `hours` of training (training_hours) have reached the `budget` and a run of the preset is
    left to train: no new run starts (within it, or with nothing left — a finished study still writes its
    summary — False)."""
    return hours >= budget and bool(unfinished_runs(params, runs_root, reports_root))
