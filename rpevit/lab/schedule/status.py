"""Where a study stands (`python -m rpevit status PRESET`), from its records and run locks: finished
runs, the runs in flight and their epochs, what it still wants and how long that takes at the pace of
the finished runs (time_limit.expected_seconds); for a designed study also its complete primary
seeds, the stopping rule's half-widths, its budgets, the runs waiting on the stopping rule or held
for its longer-budget check, and that check's own status; what installed hooks add (rpevit.lab.hooks);
kept weights that are missing or damaged, and how many finished records come from other code revisions.
It trains nothing and writes no result."""

from __future__ import annotations

from .. import hooks
from ..params import Params, load_params
from ..progress import label
from ..result import results
from ..revision import code_revision, short_revision
from ..schema import DIVERGED
from ..schema import finished as finished_runs
from ..store import records
from ..store.catalog import grid, grid_runs
from ..store.costs import train_costs
from ..store.run import Run
from ..training.runs import weights_wanted
from . import policy
from .time_limit import epochs_done, expected_total
from .wanted import primary_settled, snapshot, wanted


def _runs(count: int) -> str:
    return f"{count} run{'s' * (count != 1)}"


def remaining_hours(runs: list[Run], pace: list[dict], costs=None) -> tuple[float, int]:
    """(hours the `runs` are expected to take, one after another, at the pace of the finished
    records `pace` — scaled by the side-by-side benchmark's `costs` for a variant not run yet
    (time_limit.seconds_per_epoch) — the epochs their checkpoints hold subtracted; how many of them
    have no pace to go on and are not counted)."""
    seconds, unknown = expected_total(runs, pace, costs)
    return seconds / 3600, unknown


def _expected(runs: list[Run], pace: list[dict], costs=None) -> str:
    """Words: the hours `runs` take at the pace of `pace` (remaining_hours)."""
    hours, unknown = remaining_hours(runs, pace, costs)
    if runs and unknown == len(runs):
        return "no finished run on their dataset yet to take a pace from"
    paced = {(r.dataset, r.variant) for r in results(pace)}
    scaled = bool(costs) and any((run.dataset, run.variant) not in paced and run.variant in costs for run in runs)
    return (
        f"≈ {hours:.1f} hours if they all train, one after another (validation, testing and evaluation "
        "included), at the median pace of the finished runs"
        + (", scaled by the side-by-side speed benchmark for variants not run yet" if scaled else "")
        + (f"; {unknown} more with no finished run on their dataset to go on" if unknown else "")
    )


def _design_lines(params: Params, current: list[dict]) -> list[str]:
    """Per dataset: complete primary seeds, what the stopping rule needs, its half-widths and the budgets."""
    rules, lines = params.design, []
    primary = set(rules.primary)  # stored canonical
    for dataset in params.datasets:
        mine = [r for r in results(current) if r.dataset == dataset]
        progress = policy.primary_progress(params, mine)
        accuracy = {
            (r.variant, r.seed): r.top1
            for r in finished_runs(policy.complete_seed_records(params, mine))
            if r.variant in primary
        }
        rule = rules.stopping
        widths = policy.half_widths(rules, accuracy) if progress.complete >= 2 and not rule.fixed else {}
        target = f"{rule.confidence:.0%} half-widths (target ≤ {rule.half_width:g} points): "
        needs = (
            f"of the design's fixed {rule.max_seeds} (no stopping rule)"
            if rule.fixed
            else f"the stopping rule needs {progress.needed} ({rule.min_seeds}–{rule.max_seeds})"
        )
        lines.append(
            f"{dataset}: {progress.complete} complete primary seeds, {needs}"
            + (f"; lost seeds: {sorted(progress.lost)}" if progress.lost else "")
            + (
                f"; settled: no more primary runs — {policy.why_it_stands(params, mine)}"
                if mine and primary_settled(params, mine)
                else ""
            )
            + (f"; {target}" + "; ".join(f"{name} {w:.2f}" for name, w in widths.items()) if widths else "")
        )
        finished = finished_runs(mine)
        spent = {
            part: policy.training_hours(r for r in finished if (r.variant in primary) == (part == "primary"))
            for part in ("primary", "secondary")
        }
        if rules.secondary_budget_hours is not None:
            lines.append(
                f"{dataset} budget: primary {spent['primary']:.1f} of {rules.budget_hours:g} training hours, "
                f"secondary {spent['secondary']:.1f} of {rules.secondary_budget_hours:g}"
            )
        elif rules.budget_hours is not None:
            total = spent["primary"] + spent["secondary"]
            lines.append(f"{dataset} budget: {total:.1f} of {rules.budget_hours:g} training hours")
    return lines


def status_lines(params: Params, runs_root=None, reports_root=None) -> list[str]:
    """The status of a preset, one fact a line (module docstring); a design's longer-budget check's
    lines follow, indented."""
    seen = snapshot(params, runs_root, reports_root)
    busy, current = seen.busy, list(seen.records)
    finished = finished_runs(current)
    diverged = sum(r.status == DIVERGED for r in current)
    total = len(grid(params))
    lines = [
        f"{params.name}: "
        + (
            f"{_runs(len(finished))} finished, of at most {total} the design may train"
            if params.design.active
            else f"{len(finished)} of {total} runs finished"
        )
        + (f", {diverged} diverged" if diverged else "")
    ]
    lines += hooks.status(params, runs_root, reports_root)  # e.g. a pre-registered budget, runs kept elsewhere
    for place in sorted(busy):
        run = Run(params, *place, runs_root=runs_root)
        lines.append(f"in flight: {label(*place)}, {epochs_done(run)} of {run.train_config.epochs} epochs done")
    if params.design.active:
        lines += _design_lines(params, current)
    groups, pace = wanted(params, seen), list(seen.pace)
    costs, left = train_costs(params, reports_root), groups.left
    stopped = not busy and hooks.refusal(params, runs_root, reports_root)  # a start gate refuses, none in flight
    if stopped and left:
        lines.append(f"left: {_runs(len(left))}, which a start gate refuses: {stopped}")
    else:
        lines.append(
            f"left: {_runs(len(left))} ({sum(p in busy for p in left)} in flight); "
            + _expected([Run(params, *place, runs_root=runs_root) for place in left], pace, costs)
            if left
            else "left: no runs"
        )
    if groups.waiting:
        lines.append(
            f"waiting: {len(groups.waiting)} more runs that the stopping rule, the budget or the primary grid "
            "decides on after the runs in flight"
        )
    if groups.held:
        lines.append(
            f"held: {len(groups.held)} secondary runs until the longer-budget check has its runs; "
            f"{_expected([Run(params, *place, runs_root=runs_root) for place in groups.held], pace, costs)}"
            + (
                f" (the secondary budget caps them at {params.design.secondary_budget_hours:g} training hours)"
                if params.design.secondary_budget_hours is not None
                else ""
            )
        )
    lines += _stable_line(params, runs_root) + _kept_weights_lines(params, runs_root, reports_root)
    lines += _revision_line(finished)
    if params.design.plateau_check:
        lines += [
            f"  {line}" for line in status_lines(load_params(params.design.plateau_check), runs_root, reports_root)
        ]
    return lines


def _stable_line(params: Params, runs_root=None) -> list[str]:
    """Under WSD: how many runs keep the stable checkpoint a longer budget goes on from (continuation.py)."""
    if params.train.schedule != "wsd":
        return []
    runs = grid_runs(params, runs_root)
    kept = sum((run.dir / records.STABLE_CHECKPOINT).is_file() for run in runs)
    return [f"stable checkpoints here (for a longer budget, `continues:`): {kept} of {len(runs)} runs"]


def _kept_weights_lines(params: Params, runs_root=None, reports_root=None) -> list[str]:
    """The kept weights that are missing or damaged (runs.weights_wanted), grouped by why: those the
    next study writes again from checkpoints here, and those whose checkpoints are not here."""
    found: dict[tuple[bool, str], list[str]] = {}
    for place in grid(params) if params.keep_records else ():
        run = Run(params, *place, runs_root=runs_root, reports_root=reports_root)
        if why := weights_wanted(run):
            here = run.matches(records.peek_record(run.dir)) and (run.dir / records.CHECKPOINT).is_file()
            found.setdefault((here, why), []).append(run.label)
    return [
        f"kept weights {why}: {', '.join(labels)} — "
        + (
            "the next study writes them again from their checkpoints here"
            if here
            else f"their checkpoints are not here: run `python -m rpevit study {params.name}` where they were trained"
        )
        for (here, why), labels in found.items()
    ]


def _revision_line(finished: list[dict]) -> list[str]:
    """How many finished records come from other code revisions than this one (rpevit.lab.revision)."""
    if not finished:
        return []
    current = short_revision(code_revision())
    other = [r for r in finished if r.code_revision != code_revision()]
    unknown = sum(not r.code_revision for r in finished)
    if not other:
        return [f"code revision: every finished record comes from the current one ({current})"]
    return [
        f"code revision: {len(other)} of {len(finished)} finished records come from other code revisions than "
        f"the current one ({current})" + (f", {unknown} of them of unknown revision" if unknown else "")
    ]
