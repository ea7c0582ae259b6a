"""A pre-registered design's decisions (its configuration: rpevit.lab.design): per-seed contrasts and their
half-widths, the primary grid's progress under the stopping rule, what the design does with a run now
(`decide`: train, wait or skip — stopping rule, budgets, the longer-budget check first), the complete
seeds the analysis reads, and the training hours a budget counts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..design import Contrast, Design
from ..result import results
from ..schema import DIVERGED, epoch_cost
from ..schema import finished as finished_runs
from ..store.run import Run


def per_seed_contrast(contrast: Contrast, accuracy: dict) -> dict[int, float]:
    """Per seed with every term finished: Σ coefficient · top-1 in points. `accuracy` maps
    (variant, seed) → top-1 fraction."""
    from ...core.variants import parse_variant

    terms = {parse_variant(v).name: c for v, c in contrast.terms.items()}
    seeds = set.intersection(*({s for (v, s) in accuracy if v == name} for name in terms))
    return {s: 100 * sum(c * accuracy[(v, s)] for v, c in terms.items()) for s in sorted(seeds)}


def half_widths(design: Design, accuracy: dict) -> dict[str, float]:
    """Per primary contrast: the half-width (points) of its t-interval over the seeds done so far."""
    from ...core.stats import t_interval

    widths = {}
    for contrast in design.contrasts:
        values = list(per_seed_contrast(contrast, accuracy).values())
        interval = t_interval(values, design.stopping.confidence) if len(values) >= 2 else None
        widths[contrast.name] = math.inf if interval is None else interval["high"] - interval["mean"]
    return widths


class PrimaryProgress(NamedTuple):
    """Where the primary grid of one dataset stands: `usable` seeds in order (the preset's seeds less
    the `lost` ones, whose primary run diverged), how many of them are `complete` (every primary
    variant finished, counted from the first up) and how many the stopping rule `needed`."""

    complete: int
    needed: int
    usable: tuple
    lost: dict  # seed → the primary variant that diverged


def primary_progress(params, records: list[dict]) -> PrimaryProgress:
    """The primary grid's progress from one dataset's current records (finished and diverged): the
    stopping rule asks for min_seeds, then one more while a contrast's half-width is above the target,
    up to max_seeds. A seed whose primary run diverged is lost (not retried): the rule and the
    analysis go on with the next seed, seeds being exchangeable."""
    design, rule = params.design, params.design.stopping
    primary, found = list(design.primary), results(records)
    lost = {r.seed: r.variant for r in found if r.status == DIVERGED and r.variant in primary}
    accuracy = {(r.variant, r.seed): r.top1 for r in finished_runs(found)}
    usable = tuple(seed for seed in params.seeds if seed not in lost)
    complete = 0
    for seed in usable[: rule.max_seeds]:
        if not all((v, seed) in accuracy for v in primary):
            break
        complete += 1
    if complete < rule.min_seeds:
        return PrimaryProgress(complete, min(rule.min_seeds, len(usable)), usable, lost)
    done = {k: a for k, a in accuracy.items() if k[0] not in primary or k[1] in usable[:complete]}
    wide = [name for name, w in half_widths(design, done).items() if w > rule.half_width]
    needed = min(rule.max_seeds, complete + 1, len(usable)) if wide else complete
    return PrimaryProgress(complete, needed, usable, lost)


def decide(run: Run, finished: list[dict], busy=frozenset(), secondary_held: str = "") -> tuple[str, str]:
    """What its preset's design does with `run` now: ("train", ""); ("wait", why) while runs that another
    process is training (`busy`: their places) decide whether it trains; ("skip", why) when the
    stopping rule or the budget rules it out, or — for a secondary run — `secondary_held` says why
    secondary runs may not start yet (the plateau check still wants runs: wanted.secondary_held).

    A primary run beyond the seeds the stopping rule needs waits for earlier primary seeds still in
    flight. A primary seed is trained whole: a new one starts only while the budget left covers the
    mean cost of the complete ones, and a started one is finished. A secondary run waits while the
    primary grid is unsettled (the rule wants more seeds than are complete) and primary runs are in
    flight: primary seeds train first, so the budget goes to them first. A primary run of a lost seed
    (another primary run diverged there: primary_progress) is skipped. A secondary variant is trained
    whole: the budget decides whether a variant starts, and a started one (a run finished, diverged or
    in flight) trains all its seeds, so the budget may be passed by the rest of the variants started."""
    params, (dataset, variant, seed) = run.params, run.place
    design = params.design
    primary = list(design.primary)
    current = [r for r in results(finished) if r.dataset == dataset]
    mine = finished_runs(current)
    complete, needed, usable, lost = primary_progress(params, current)
    flying = sorted((usable.index(s), v) for d, v, s in busy if d == dataset and v in primary and s in usable)
    if variant in primary:
        if seed in lost:
            return "skip", f"seed {seed} is lost: {lost[seed]} diverged there, so the next seed stands in"
        index = usable.index(seed)
        if index >= needed:
            earlier = [(i, v) for i, v in flying if i < index]
            if earlier:
                i, v = earlier[0]
                return "wait", f"{v} seed {usable[i]} is in flight; the stopping rule decides after it"
            return "skip", f"the stopping rule needs {needed} primary seeds"
        started = any(r.variant in primary and r.seed == seed for r in mine) or any(i == index for i, _ in flying)
        return ("train", "") if started else _affordable(params, mine, usable[:complete])
    if secondary_held:
        return "skip", secondary_held
    started = any(r.variant == variant for r in current) or any(d == dataset and v == variant for d, v, _ in busy)
    if not started and (why := _secondary_budget_spent(design, mine, primary)):
        return "skip", why
    if complete < needed and flying:
        i, v = flying[0]
        return "wait", f"the primary grid comes first ({v} seed {usable[i]} is in flight)"
    return "train", ""


def seeds_text(params, current: list[dict]) -> str:
    """Words: how many complete primary seeds one dataset's current records (finished and diverged)
    hold, and why the primary grid stands there (why_it_stands)."""
    progress = primary_progress(params, current)
    complete = progress.usable[: progress.complete]
    done = f"{len(complete)} complete primary seed{'s' * (len(complete) != 1)}" + (
        f" ({', '.join(str(s) for s in complete)})" if complete else ""
    )
    if progress.lost:
        lost = ", ".join(str(s) for s in sorted(progress.lost))
        done += f"; seed{'s' * (len(progress.lost) > 1)} {lost} lost (a primary run diverged)"
    reason, training = _standing(params, current)
    return f"{done} so far; {reason}" if training else f"{done}; {reason}"


def why_it_stands(params, current: list[dict]) -> str:
    """Words: why one dataset's primary grid stands where its current records put it: the stopping
    rule's target met, its maximum, no seed left, the budget spent, or still training."""
    return _standing(params, current)[0]


def _standing(params, current: list[dict]) -> tuple[str, bool]:
    """(why_it_stands's words, whether the primary grid is still training)."""

    progress = primary_progress(params, current)
    rule = params.design.stopping
    complete = progress.usable[: progress.complete]
    target = f"every {100 * rule.confidence:g} % half-width ≤ {rule.half_width:g} points, or {rule.max_seeds} seeds"
    current = results(current)
    accuracy = {(r.variant, r.seed): r.top1 for r in finished_runs(current) if r.seed in complete}
    widths = half_widths(params.design, accuracy).values()
    if rule.fixed and len(complete) >= rule.max_seeds:
        return f"the design's fixed {rule.max_seeds} seeds are complete", False
    if len(complete) >= rule.min_seeds and all(w <= rule.half_width for w in widths):
        return f"the stopping rule's target ({target}) is met", False
    if len(complete) >= rule.max_seeds:
        return f"the stopping rule ({target}) ended at its maximum", False
    if len(complete) >= len(progress.usable):
        return f"the stopping rule ({target}) wanted more, but no seed of the preset is left", False
    dataset = current[0].dataset if current else params.datasets[0]
    primary = params.design.primary[0]  # stored canonical
    verdict, why = decide(Run(params, dataset, primary, progress.usable[len(complete)]), current)
    if verdict == "skip":
        return f"the stopping rule ({target}) wanted more, but {why}", False
    return f"the stopping rule ({target}) wants more: the study is still training", True


def training_hours(records) -> float:
    """Summed training hours of finished runs, read from their records alone: epochs × CPU seconds per
    epoch (wall seconds in records from before those were kept) plus the epoch seconds of their cool-down
    branches (train.budgets), the measure a stated CPU budget counts from histories (`inherited_seconds` apart)."""
    return (
        sum(
            (r.train_cpu_seconds_per_epoch or r.train_seconds_per_epoch or 0) * (r.epochs or 0)
            + branch_seconds(r.budgets)
            for r in results(records)
        )
        / 3600
    )


def branch_seconds(branches: dict | None) -> float:
    """The epoch seconds of a run's cool-down branches (a record's or checkpoint's `budgets`/`branches`)."""
    return sum(epoch_cost(row) for branch in (branches or {}).values() for row in branch.get("history", []))


def _secondary_budget_spent(design: Design, mine: list[dict], primary) -> str:
    """Why no new secondary variant may start ('' while one may): its own budget (secondary runs'
    hours) or, without one, the shared budget (every run's hours) is spent."""
    if design.secondary_budget_hours is not None:
        spent = training_hours(r for r in mine if r.variant not in primary)
        if spent >= design.secondary_budget_hours:
            return f"the secondary budget of {design.secondary_budget_hours:g} training hours is spent ({spent:.1f} h)"
    elif design.budget_hours is not None and (spent := training_hours(mine)) >= design.budget_hours:
        return f"the design's budget of {design.budget_hours:g} training hours is spent ({spent:.1f} h)"
    return ""


def _affordable(params, mine: list[dict], complete: tuple) -> tuple[str, str]:
    """Whether a new primary seed may start: the budget's hours so far (every run's, or the primary
    runs' when secondary variants have their own budget) plus the mean cost of a complete primary
    seed (`complete`: the complete seeds) stay within budget_hours."""
    design = params.design
    if design.budget_hours is None:
        return "train", ""
    primary = list(design.primary)
    counted = mine if design.secondary_budget_hours is None else [r for r in mine if r.variant in primary]
    spent = training_hours(counted)
    per_seed = training_hours(r for r in mine if r.variant in primary and r.seed in complete) / max(1, len(complete))
    if spent + per_seed > design.budget_hours or spent >= design.budget_hours:
        return "skip", (
            f"the budget left ({design.budget_hours - spent:.1f} of {design.budget_hours:g} training hours) "
            f"does not cover another primary seed (≈ {per_seed:.1f} h each so far)"
        )
    return "train", ""


def complete_seed_records(params, records: list[dict]) -> list[dict]:
    """The records a design's analysis uses: a primary variant's runs only of the complete primary
    seeds (every primary variant finished; the seeds the stopping rule counts), so every primary
    contrast rests on the same balanced seeds. Without a design, all of them."""
    found = results(records)
    if not params.design.active:
        return found
    primary = set(params.design.primary)
    by_dataset = {}
    for dataset in {r.dataset for r in found}:
        progress = primary_progress(params, [r for r in found if r.dataset == dataset])
        by_dataset[dataset] = set(progress.usable[: progress.complete])
    return [r for r in found if r.variant not in primary or r.seed in by_dataset[r.dataset]]
