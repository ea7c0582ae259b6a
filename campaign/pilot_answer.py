"""The canvas pilots' answer as their records support it: no Performer ≥ 1.5 points behind softmax at the
longest budget, and what the go/no-go line alone hides — softmax's lead in every seed pair, its growth with
training, intervals that pool the seed variance of the cells that share a design, what each canvas task is,
the fixed-feature FAVOR+ setting, and accuracy at equal training time beside equal epochs.

Pooling: every pilot trains the same ViT with the same recipe, seeds and budgets, so the per-seed gaps of
its (pilot, Performer) cells share one within-cell variance; with two seeds a cell alone has df 1 (a 95 %
half-width of 9 SD), pooled over k cells it has df k (Bartlett's test of equal variances says whether the
cells disagree). Equal training time: a Performer's top-1 at the budget that costs what softmax's longest
budget costs, by the side-by-side training cost per image (the preset's own reports/bench/cpu_speed_<preset>.csv
where kept, else reports/bench/cpu_tokens.csv; never a run's own epoch time, which other work on the machine
inflates), interpolated on log₂ budget between the budgets a pilot measured.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from scipy import stats as scipy_stats

from rpevit.core.data import dataset_info
from rpevit.lab.tables import signed

COSTS = Path("bench") / "cpu_tokens.csv"  # under reports/: the side-by-side training cost per image


def pooled_sd(cells: list[list[float]]) -> dict | None:
    """The within-cell SD pooled over cells of ≥ 2 values: {sd, df, cells, bartlett_p}; None if no cell has 2."""
    used = [c for c in cells if len(c) > 1]
    if not used:
        return None
    df = sum(len(c) - 1 for c in used)
    variance = sum((len(c) - 1) * statistics.variance(c) for c in used) / df
    bartlett = scipy_stats.bartlett(*used).pvalue if len(used) > 1 and variance > 0 else math.nan
    return {"sd": math.sqrt(variance), "df": df, "cells": len(used), "bartlett_p": float(bartlett)}


def pooled_interval(values: list[float], pooled: dict, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of one cell's values ± t(df of the pooling)·pooled SD/√n."""
    mean = statistics.fmean(values)
    half = scipy_stats.t.ppf((1 + confidence) / 2, pooled["df"]) * pooled["sd"] / math.sqrt(len(values))
    return mean, mean - half, mean + half


def interval_text(values: list[float], pooled: dict | None) -> str:
    """'−0.73 [−1.33, −0.12] (2 seeds, softmax ahead)' from the pooled SD; one seed or none pooled: no interval."""
    if not values:
        return "—"
    if len(values) < 2 or pooled is None:
        return f"{signed(statistics.fmean(values))} ({len(values)} seed{'s' * (len(values) != 1)}, no interval)"
    mean, low, high = pooled_interval(values, pooled)
    reading = "softmax ahead" if high < 0 else "Performer ahead" if low > 0 else "inconclusive"
    return f"{signed(mean)} [{signed(low)}, {signed(high)}] ({len(values)} seeds, {reading})"


def pooling_note(pooled: dict | None) -> str:
    """How the intervals were pooled, in one clause."""
    if pooled is None:
        return "no cell has two seeds yet, so no interval"
    p = pooled["bartlett_p"]
    test = f"; Bartlett p = {p:.2f}" if not math.isnan(p) else ""
    return (
        f"95 % t-intervals with the seed SD pooled over the {pooled['cells']} cells that have two seeds or more "
        f"(they share model, recipe, seeds and budgets): SD {pooled['sd']:.2f} points, df {pooled['df']}{test}"
    )


def canvas_task(params) -> tuple[str, str]:
    """What a canvas pilot's task is — how far its 28×28 object moves and how many places it can take (the same
    for train and test) — and FAVOR+'s random-feature setting."""
    info = dataset_info(params.datasets[0])
    room = info.image_size - dataset_info(info.canvas_of).image_size if info.canvas_of else 0
    favor = params.model.options_for("favor")
    redraws = "one fixed ω per layer" if favor.redraw_steps == 0 else f"ω redrawn every {favor.redraw_steps} steps"
    placements = f"{(room + 1) ** 2} placements shared by train and test"
    return f"{info.image_size}×{info.image_size} moves the object ±{room // 2} px ({placements})", redraws


def cost_source(reports_root: Path, params) -> Path:
    """Where an equal-time comparison reads its side-by-side costs (under reports/): the preset's own speed
    benchmark (bench/cpu_speed_<preset>.csv, every variant of its model in one process) where it was kept,
    else the token benchmark's rows of a preset with the same model (bench/cpu_tokens.csv)."""
    own = Path("bench") / f"cpu_speed_{params.name}.csv"
    return own if (Path(reports_root) / own).is_file() else COSTS


def training_costs(reports_root: Path, params, source: Path | None = None) -> dict[str, float]:
    """Median training seconds per image of each variant benchmarked side by side on this preset's own model,
    read from `source` (cost_source when not given), or {}."""
    from rpevit.lab.params import load_params

    path = Path(reports_root) / (source or cost_source(reports_root, params))
    if not path.is_file():
        return {}
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    names = {r.get("preset", params.name) for r in rows}  # the preset's own benchmark names no preset
    same = {name for name in names if _same_model(load_params(name), params)}  # each once
    by_variant: dict[str, list[float]] = {}
    for row in rows:
        if row.get("preset", params.name) in same:
            by_variant.setdefault(row["variant"], []).append(float(row["train_seconds_per_image"]))
    return {variant: statistics.median(values) for variant, values in by_variant.items()}


def _same_model(bench, params) -> bool:
    return bench.model == params.model and bench.datasets[0] == params.datasets[0]


def top1_at(budgets: dict[int, float], epochs: float) -> float | None:
    """Top-1 at `epochs` by linear interpolation on log₂ budget between measured budgets ({epochs: top-1});
    None outside their range (no extrapolation)."""
    known = sorted(budgets)
    if not known or not known[0] <= epochs <= known[-1]:
        return None
    if epochs in budgets:
        return budgets[epochs]
    upper = next(b for b in known if b > epochs)
    lower = max(b for b in known if b < epochs)
    weight = (math.log2(epochs) - math.log2(lower)) / (math.log2(upper) - math.log2(lower))
    return budgets[lower] + weight * (budgets[upper] - budgets[lower])


def equal_time(params, top1: dict, costs: dict[str, float], backend: str) -> dict | None:
    """One Performer at softmax's longest budget's training time: {ratio, epochs, top1, softmax, gap} (means over
    seeds), None without both costs or where the equal-time budget falls outside the measured ones."""
    longest, performer = params.train.epochs, f"{backend}+ape"
    if performer not in costs or "softmax+ape" not in costs:
        return None
    ratio = costs[performer] / costs["softmax+ape"]
    epochs = longest / ratio
    seeds = [s for s in params.seeds if (performer, s, longest) in top1 and ("softmax+ape", s, longest) in top1]
    found = [
        top1_at({b: top1[(performer, s, b)] for v, s2, b in top1 if v == performer and s2 == s}, epochs) for s in seeds
    ]
    if not seeds or any(value is None for value in found):
        return None
    softmax = statistics.fmean(top1[("softmax+ape", s, longest)] for s in seeds)
    mean = statistics.fmean(found)
    return {"ratio": ratio, "epochs": epochs, "top1": mean, "softmax": softmax, "gap": mean - softmax}


def equal_time_text(backend: str, found: dict, preset: str) -> str:
    """'favor on `canvas_gap_pilot` 87.0 vs 89.5 % (−2.48; 20.3 epochs at 1.57× the cost per image)'."""
    return (
        f"{backend} on `{preset}` {found['top1']:.1f} vs {found['softmax']:.1f} % ({signed(found['gap'])}; "
        f"{found['epochs']:.1f} epochs at {found['ratio']:.2f}× the cost per image)"
    )


EQUAL_TIME = (
    "At softmax's training time (side-by-side cost per image, reports/{source}; top-1 interpolated on log budget): "
)


def equal_time_line(params, top1: dict, backends, reports_root) -> str:
    """A pilot's own equal-time line: each Performer backend's top-1 at softmax's training time (equal_time),
    and the backends without a side-by-side cost on this model named as such."""
    source = cost_source(reports_root, params)
    costs = training_costs(reports_root, params, source)
    if "softmax+ape" not in costs:
        return f"Equal training time: no side-by-side cost of this pilot's model in reports/{COSTS}, so not compared."
    found = {b: equal_time(params, top1, costs, b) for b in backends if f"{b}+ape" in costs}
    timed = [equal_time_text(b, at, params.name) for b, at in found.items() if at]
    unmeasured = [b for b in backends if f"{b}+ape" not in costs]
    line = EQUAL_TIME.format(source=source.as_posix()) + "; ".join(timed) + "." if timed else ""
    outside = [  # a finished pair whose equal-time budget lies outside the budgets measured: no extrapolation
        f"{b} ({params.train.epochs * costs['softmax+ape'] / costs[f'{b}+ape']:.1f} epochs)"
        for b, at in found.items()
        if at is None and any((f"{b}+ape", s, params.train.epochs) in top1 for s in params.seeds)
    ]
    if outside:
        line += f" Outside the budgets measured at softmax's training time, so not compared: {', '.join(outside)}."
    if unmeasured:
        line += f" Not measured side by side on this model, so not compared at equal time: {', '.join(unmeasured)}."
    return line.strip()
