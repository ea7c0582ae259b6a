"""How far a preset's pre-registered CPU budget goes: the runs left, each at the CPU seconds per trained epoch
its variant's runs took so far (the fastest and the slowest run: CPUs differ between sittings), one after
another in the preset's order under its stopping rule (budget.py: no run starts once the budget is spent; a
started one finishes) — and which seeds would then have all their runs. A forecast to plan sittings by,
computed from the records; not a result."""

from __future__ import annotations

from dataclasses import dataclass

from rpevit.lab.store.catalog import current_record, grid_runs, run_history

from .budget import budget_line, in_flight_state, run_seconds, stated_budget, training_hours


@dataclass(frozen=True)
class Left:
    """A run not finished yet: its variant, seed and the epochs it has trained (history and cool-downs)."""

    variant: str
    seed: int
    epochs: int


def _epochs(history: list[dict], branches: dict | None) -> int:
    return len(history) + sum(len(branch.get("history", [])) for branch in (branches or {}).values())


def measured(params, runs_root=None, reports_root=None) -> tuple[dict[str, list[float]], int, list[Left]]:
    """(CPU seconds per trained epoch of each run so far, per variant; the epochs a finished run trains, its
    cool-downs included; the runs left in the preset's order). A run gone on from another preset's
    (continued_from) gives no rate: part of its epochs were trained there."""
    rates: dict[str, list[float]] = {}
    full, left = 0, []
    for run in grid_runs(params, runs_root, reports_root):
        record = current_record(run)
        if record is not None:
            history, branches, before = run_history(run), record.get("budgets"), record.get("continued_from")
            full = max(full, _epochs(history, branches))
        else:
            history, branches, before = in_flight_state(run)
            left.append(Left(run.variant, run.seed, _epochs(history, branches)))
        if history and before is None:
            rates.setdefault(run.variant, []).append(run_seconds(history, branches) / _epochs(history, branches))
    return rates, full, left


def project(rates: dict[str, float], full: int, left: list[Left], hours: float, budget: float):
    """(hours in all once every run that starts has finished, the seeds that would not have all their runs):
    the runs `left` one after another from `hours` spent, each training the epochs a finished run trains at
    its variant's seconds per epoch; a run not yet started does not start once `budget` hours are spent."""
    spent, short = hours * 3600, set()
    for run in left:
        if run.epochs == 0 and spent >= budget * 3600:
            short.add(run.seed)
        else:
            spent += max(full - run.epochs, 0) * rates[run.variant]
    return spent / 3600, short


def _seeds(seeds: list[int], short: set[int]) -> str:
    whole = [s for s in seeds if s not in short]
    if len(whole) > 2 and whole == list(range(whole[0], whole[-1] + 1)):
        return f"{whole[0]}–{whole[-1]}"
    return ", ".join(map(str, whole)) if whole else "none"


def forecast(rates: dict[str, list[float]], full: int, left: list[Left], hours: float, budget: float, seeds) -> str:
    """The report's forecast sentence (see the module's docstring); '' with nothing left to train."""
    if not left:
        return ""
    unmeasured = sorted({run.variant for run in left} - rates.keys())
    if unmeasured or not full:
        missing = ", ".join(unmeasured) or "every variant"
        return f" No forecast of the runs left yet: {missing} has no finished run or trained epoch to time."
    (fast, fast_short), (slow, slow_short) = (
        project({v: pick(r) for v, r in rates.items()}, full, left, hours, budget) for pick in (min, max)
    )
    more = " (more runs start before the budget is spent at the fastest)" if round(fast, 1) > round(slow, 1) else ""
    paces = "; ".join(f"{v} {min(r) / 60:.1f}–{max(r) / 60:.1f}" for v, r in rates.items())
    if not fast_short and not slow_short:
        seeds_clause = "every seed's runs start within the budget"
    elif fast_short == slow_short:
        seeds_clause = f"no run starts once {budget:g} hours are spent: the seeds with all their runs are "
        seeds_clause += _seeds(seeds, slow_short)
    else:
        seeds_clause = (
            f"no run starts once {budget:g} hours are spent: the seeds with all their runs are "
            f"{_seeds(seeds, slow_short)} at the slowest pace and {_seeds(seeds, fast_short)} at the fastest"
        )
    return (
        f" Forecast (the {len(left)} runs left one after another in the preset's order, each epoch at the CPU "
        f"minutes its variant's runs took so far, fastest–slowest run: {paces}): they would bring the epoch time to "
        f"{fast:.1f} hours at the fastest pace and {slow:.1f} at the slowest{more}; {seeds_clause}. CPUs differ "
        "between sittings: a range to plan by, not a result."
    )


def budget_sentences(params, preset, complete: bool, runs_root=None, reports_root=None) -> str:
    """A report's budget sentences: training time against the budget `preset` states (budget.budget_line),
    then, while runs are left and a budget is stated, the forecast read from the runs."""
    hours, running = training_hours(params, runs_root, reports_root)
    stated = stated_budget(preset)
    left = ""
    if not complete and stated is not None:
        left = forecast(*measured(params, runs_root, reports_root), hours, stated, list(params.seeds))
    return budget_line(hours, running, stated, complete=complete) + left
