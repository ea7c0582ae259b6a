"""The arithmetic of a gap pilot's report (gap_pilot.py), from test top-1 per (variant, seed, budget): each
Performer's gap to softmax per seed and budget (Performer − softmax, same seed, same APE, in points:
negative means softmax ahead), its change between two budgets with a 95 % t-interval over the seeds, each
run's gain between budgets, and the seeds a factorial would need to measure a gap to a quarter of itself."""

from __future__ import annotations

import math
import statistics

from rpevit.core.stats import t_half_width, t_interval
from rpevit.lab.result import results
from rpevit.lab.schema import finished
from rpevit.lab.tables import signed

PERFORMERS = ("favor", "relu")  # the order's pilots (a preset's own: gap_pilot.performers, e.g. favor_redraw too)


def budget_top1(found) -> dict[tuple[str, int, int], float]:
    """(variant, seed, budget epochs) → test top-1 in points, from finished records and their branches."""
    out = {}
    for r in finished(results(found)):
        out[(r.variant, r.seed, r.epochs)] = 100 * r.top1
        for budget, branch in (r.budgets or {}).items():
            out[(r.variant, r.seed, int(budget))] = 100 * branch["top1"]
    return out


def seed_gaps(top1: dict, seeds: list[int], budget: int, backend: str) -> list[float]:
    """Per seed with both runs: the Performer's test top-1 with APE minus softmax's at `budget` epochs."""
    pair = (f"{backend}+ape", "softmax+ape")
    return [
        top1[(pair[0], s, budget)] - top1[(pair[1], s, budget)]
        for s in seeds
        if all((v, s, budget) in top1 for v in pair)
    ]


def gap_rows(top1: dict, budgets: list[int], seeds: list[int], backends=PERFORMERS) -> list[dict]:
    """Per Performer backend and budget: the per-seed gaps with APE, their mean and SD (seeds with both runs)."""
    rows = []
    for backend in backends:
        for budget in budgets:
            gaps = seed_gaps(top1, seeds, budget, backend)
            rows.append(
                {
                    "backend": backend,
                    "epochs": budget,
                    "seeds": len(gaps),
                    "gaps (per seed)": ", ".join(signed(g) for g in gaps) or "—",
                    "mean gap": statistics.fmean(gaps) if gaps else math.nan,
                    "SD": statistics.stdev(gaps) if len(gaps) > 1 else math.nan,
                }
            )
    return rows


def budget_gains(top1: dict, variants: list[str], seeds: list[int], short: int, long: int) -> list[float]:
    """Per run of `variants` with both budgets: its test top-1 at `long` epochs minus at `short`."""
    return [
        top1[(v, s, long)] - top1[(v, s, short)]
        for v in variants
        for s in seeds
        if (v, s, long) in top1 and (v, s, short) in top1
    ]


def budget_change_rows(top1: dict, variants: list[str], seeds: list[int], short: int, long: int) -> list[dict]:
    """Per variant: the change of test top-1 from `short` to `long` epochs, paired by seed."""
    rows = []
    for variant in variants:
        changes = budget_gains(top1, [variant], seeds, short, long)
        rows.append(
            {
                "variant": variant,
                f"top-1 at {short}": percent(present_mean([top1.get((variant, s, short)) for s in seeds])),
                f"top-1 at {long}": percent(present_mean([top1.get((variant, s, long)) for s in seeds])),
                f"change {short}→{long} (per seed)": ", ".join(signed(c) for c in changes) or "—",
            }
        )
    return rows


def gap_changes(top1: dict, seeds: list[int], short: int, long: int, backend: str) -> list[float]:
    """Per seed with all four runs: the gap with APE at `long` epochs minus the gap at `short`."""
    both = [s for s in seeds if seed_gaps(top1, [s], short, backend) and seed_gaps(top1, [s], long, backend)]
    return [
        late - early for early, late in zip(seed_gaps(top1, both, short, backend), seed_gaps(top1, both, long, backend))
    ]


def gap_change_rows(top1: dict, seeds: list[int], short: int, long: int, backends=PERFORMERS) -> list[dict]:
    """Per Performer backend: the change of the gap with APE from `short` to `long` epochs, paired by seed."""
    return [
        {
            "gap": f"{backend} − softmax",
            f"change {short}→{long} (per seed)": ", ".join(map(signed, gap_changes(top1, seeds, short, long, backend)))
            or "—",
        }
        for backend in backends
    ]


def trend_line(
    top1: dict, variants: list[str], seeds: list[int], short: int, long: int, backends=PERFORMERS, tested=False
) -> str:
    """Does the gap open with training? Each gap's change from `short` to `long` epochs (mean over seeds,
    95 % t-interval) and how much the runs still gain: what a go/no-go read at `long` epochs cannot see.
    Where a study's pre-registered primary contrasts test these changes (`tested`), the sentence gives their
    means only and points to that test: an unadjusted interval read there would contradict the family's."""
    parts = []
    for backend in backends:
        changes = gap_changes(top1, seeds, short, long, backend)
        if len(changes) > 1:
            ci = t_interval(changes)
            verdict = "widened" if ci["high"] < 0 else "narrowed" if ci["low"] > 0 else "inconclusive"
            interval = f"[{signed(ci['low'])}, {signed(ci['high'])}]"
            parts.append(
                f"{backend} {signed(ci['mean'])} ({ci['n']} seeds)"
                if tested
                else f"{backend} {signed(ci['mean'])} {interval} ({ci['n']} seeds, {verdict})"
            )
    gains = budget_gains(top1, variants, seeds, short, long)
    if not parts or not gains:
        return ""
    every = all(c < 0 for b in backends for c in gap_changes(top1, seeds, short, long, b))
    how = (
        "mean over seeds; tested, as pre-registered, by the primary contrasts below"
        if tested
        else "mean over seeds with a 95 % t-interval; descriptive, outside the go/no-go rule"
    )
    return (
        f"Does the gap open with training? From {short} to {long} epochs the gap (Performer − softmax) changed by "
        f"{' and '.join(parts)} points ({how})"
        + (", negative in every seed of every Performer" if every else "")
        + f"; each run gained {min(gains):+.2f} to {max(gains):+.2f} points of top-1 between those budgets. "
        f"Whether a budget beyond {long} epochs opens a gap is not tested here."
    )


def seeds_needed(gap: float, sd: float, confidence: float = 0.95, cap: int = 200) -> int | None:
    """The smallest n ≥ 2 with t(1 − α/2, n − 1)·sd/√n ≤ |gap|/4 (a difference of differences measured to a
    quarter of the gap), None if no n ≤ cap reaches it."""
    target = abs(gap) / 4
    for n in range(2, cap + 1):
        if t_half_width(sd, n, confidence) <= target:
            return n
    return None


def percent(value: float | None) -> str:
    """An accuracy as printed in every table here: two decimals (86.00, not 86), '—' when missing."""
    return "—" if value is None or math.isnan(value) else f"{value:.2f}"


def present_mean(values) -> float:
    found = [v for v in values if v is not None]
    return statistics.fmean(found) if found else math.nan
