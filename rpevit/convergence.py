"""Has a run converged? The plateau rule of the converged study (issue 18): the best validation top-1
gains less than `tolerance` points over the last `fraction` of the epochs."""

from __future__ import annotations

import math
import statistics

PLATEAU_FRACTION = 0.2
PLATEAU_TOLERANCE = 0.2  # points of validation top-1


def plateau_gain(val_acc: list[float], fraction: float = PLATEAU_FRACTION) -> float:
    """Points the best validation top-1 gained over the last ⌈fraction · epochs⌉ epochs:
    100 · (best over all epochs − best before that window). nan with fewer than two epochs."""
    epochs = len(val_acc)
    if epochs < 2:
        return math.nan
    window = max(1, math.ceil(fraction * epochs))
    if window >= epochs:
        window = epochs - 1
    return 100 * (max(val_acc) - max(val_acc[:-window]))


def plateau_met(val_acc: list[float], tolerance: float = PLATEAU_TOLERANCE, fraction: float = PLATEAU_FRACTION) -> bool:
    """True when the best validation top-1 gained less than `tolerance` points over the last epochs."""
    gain = plateau_gain(val_acc, fraction)
    return math.isfinite(gain) and gain < tolerance


CONVERGED_SHARE = 0.9  # a study is called converged when at least this share of its runs meet the plateau rule


def convergence_rows(runs) -> list[dict]:
    """Per finished run, from (record, history rows) pairs: its best validation epoch, the points its
    best validation top-1 gained over the last `PLATEAU_FRACTION` of epochs, and whether it met the
    plateau rule. Runs without a history are left out."""
    rows = []
    for record, history in runs:
        if record.get("status") != "finished" or not history:
            continue
        val = [float(h["val_acc"]) for h in history]
        rows.append(
            {
                "dataset": record["dataset"],
                "variant": record["variant"],
                "seed": record["seed"],
                "epochs": len(val),
                "best epoch": 1 + val.index(max(val)),
                "val gain over last 20% (points)": plateau_gain(val),
                "plateau met": plateau_met(val),
            }
        )
    return rows


def convergence_text(rows: list[dict]) -> str:
    """Markdown: how many runs met the plateau rule, how much they still gained, and what that means
    for reading the comparisons (all computed from `convergence_rows`)."""
    if not rows:
        return "No finished run with a training history yet: convergence cannot be judged."
    gains = sorted(r["val gain over last 20% (points)"] for r in rows)
    met = sum(r["plateau met"] for r in rows)
    last = sum(r["best epoch"] == r["epochs"] for r in rows)
    epochs = sorted({r["epochs"] for r in rows})
    budget = f"{epochs[0]}" if len(epochs) == 1 else f"{epochs[0]}–{epochs[-1]}"
    text = (
        f"**Convergence.** The plateau rule (the best validation top-1 gains less than {PLATEAU_TOLERANCE:g} points "
        f"over the last {PLATEAU_FRACTION:.0%} of epochs) was met by **{met} of {len(rows)} finished runs**; over "
        f"those epochs the best validation top-1 still gained a median of {statistics.median(gains):.2f} points (range "
        f"{gains[0]:.2f} to {gains[-1]:.2f}), and {last} of {len(rows)} runs had their best validation epoch at "
        f"the last one ({budget} epochs). "
    )
    if met >= CONVERGED_SHARE * len(rows):
        return (
            text + f"At least {CONVERGED_SHARE:.0%} of the runs are at a plateau: the comparisons are near convergence."
        )
    return text + (
        f"Fewer than {CONVERGED_SHARE:.0%} of the runs are at a plateau, so the study is **not converged** by its own "
        f"rule: every comparison below holds at this fixed {budget}-epoch budget, and longer training would still "
        "raise the accuracies; whether it would change the gaps between variants is not measured here."
    )
