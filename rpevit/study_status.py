"""Where a study stands (`python -m rpevit status PRESET`), read from its records and run locks:
finished runs, the runs in flight and their epochs, what it still wants and the training time that
will take at the pace of its finished runs (time_limit.expected_seconds); for a designed study also
its complete primary seeds, the stopping rule's half-widths, its budgets and its longer-budget check.
Read-only: it trains, repairs and writes nothing."""

from __future__ import annotations

from . import design
from .catalog import grid, in_flight_and_records
from .params import Params, load_params
from .progress import label
from .run import Run
from .time_limit import epochs_done, expected_seconds
from .variants import parse_variant


def wanted(params: Params, current: list[dict], busy: set) -> tuple[list, list]:
    """(the runs the preset wants now, in flight included; the runs that wait on runs in flight), in
    training order. A designed study: design.decide says train (or the run is in flight), or wait
    (the stopping rule or the primary grid decides after the runs in flight); else every run of the
    grid without a current record is wanted."""
    done = {(r["dataset"], r["variant"], r["seed"]) for r in current}
    places = [place for place in grid(params) if place not in done]
    if not params.design.active:
        return places, []
    verdicts = {place: "train" if place in busy else design.decide(params, place, current, busy)[0] for place in places}
    return [p for p in places if verdicts[p] == "train"], [p for p in places if verdicts[p] == "wait"]


def remaining_hours(params: Params, places, pace_records: list[dict], runs_root=None) -> tuple[float, int]:
    """(training hours the `places` are expected to take, one after another, at the pace of
    `pace_records`, with the epochs their checkpoints hold subtracted; how many of them have no pace
    to go on and are not counted)."""
    seconds, unknown = 0.0, 0
    for place in places:
        expected = expected_seconds(Run(params, *place, runs_root=runs_root), pace_records)
        if expected is None:
            unknown += 1
        else:
            seconds += expected
    return seconds / 3600, unknown


def _expected(params: Params, places, pace_records: list[dict], runs_root=None) -> str:
    """Words: the training hours `places` take at the pace of `pace_records` (remaining_hours)."""
    hours, unknown = remaining_hours(params, places, pace_records, runs_root)
    if places and unknown == len(places):
        return "no finished run yet to take a pace from"
    return f"≈ {hours:.1f} training hours at the median pace of the finished runs, one run after another" + (
        f" (and {unknown} runs with no finished run of their variant or dataset to take a pace from)" if unknown else ""
    )


def _design_lines(params: Params, current: list[dict]) -> list[str]:
    """Per dataset: complete primary seeds, what the stopping rule needs and its half-widths; the budgets."""
    rules, lines = params.design, []
    primary = {parse_variant(v).name for v in rules.primary}
    for dataset in params.datasets:
        mine = [r for r in current if r["dataset"] == dataset]
        progress = design.primary_progress(params, mine)
        analysed = design.complete_seed_records(params, mine)
        accuracy = {
            (r["variant"], r["seed"]): r["top1"]
            for r in analysed
            if r.get("status") == "finished" and r["variant"] in primary
        }
        widths = design.half_widths(rules, accuracy) if progress.complete >= 2 else {}
        shown = "; ".join(f"{name} {width:.2f}" for name, width in widths.items())
        lost = f"; lost seeds: {sorted(progress.lost)}" if progress.lost else ""
        lines.append(
            f"{dataset}: {progress.complete} complete primary seeds, the stopping rule needs {progress.needed} "
            f"({rules.stopping.min_seeds}–{rules.stopping.max_seeds}){lost}"
            + (
                f"; {rules.stopping.confidence:.0%} half-widths (target ≤ {rules.stopping.half_width:g} points): "
                + shown
                if shown
                else ""
            )
        )
    finished = [r for r in current if r.get("status") == "finished"]
    spent = {
        part: design.training_hours(r for r in finished if (r["variant"] in primary) == (part == "primary"))
        for part in ("primary", "secondary")
    }
    if rules.secondary_budget_hours is not None:
        lines.append(
            f"budget: primary {spent['primary']:.1f} of {rules.budget_hours:g} training hours, secondary "
            f"{spent['secondary']:.1f} of {rules.secondary_budget_hours:g}"
        )
    elif rules.budget_hours is not None:
        lines.append(f"budget: {spent['primary'] + spent['secondary']:.1f} of {rules.budget_hours:g} training hours")
    return lines


def status_lines(params: Params, runs_root=None, reports_root=None, pace_records=()) -> list[str]:
    """The status of a preset, one fact a line. `pace_records`: finished records of another preset
    that trains the same variants (a longer-budget check's study) to take the pace from as well."""
    busy, current = in_flight_and_records(params, runs_root, reports_root)
    finished = [r for r in current if r.get("status") == "finished"]
    diverged = sum(r.get("status") == "diverged" for r in current)
    places = grid(params)
    lines = [
        f"{params.name}: {len(finished)} of {len(places)} runs finished"
        + (f", {diverged} diverged" if diverged else "")
        + (" (a designed study: at most that many)" if params.design.active else "")
    ]
    for place in sorted(busy):
        run = Run(params, *place, runs_root=runs_root)
        lines.append(f"in flight: {label(*place)}, {epochs_done(run)} of {run.train_config.epochs} epochs done")
    if params.design.active:
        lines += _design_lines(params, current)
    left, waiting = wanted(params, current, busy)
    pace = finished + list(pace_records)
    lines.append(
        f"left: {len(left)} runs ({sum(p in busy for p in left)} in flight); {_expected(params, left, pace, runs_root)}"
    )
    if waiting:
        lines.append(
            f"waiting: {len(waiting)} more runs the design decides on after the runs in flight; if all of them "
            f"train, {_expected(params, waiting, pace, runs_root)}"
        )
    if params.design.plateau_check:
        check = load_params(params.design.plateau_check)
        lines += [
            f"  {line}"
            for line in status_lines(check, runs_root, reports_root, pace_records=finished + list(pace_records))
        ]
    return lines
