"""Figures of the claims: the forest plot (one panel per source and measure, each on its own x scale,
verdict and effect in words beside every row) and seed 000's speedup sweep."""

from __future__ import annotations

import math

import numpy as np

from .narration import SIGN, effect_words, interval_reading, performer_vs_exact, time_multiple, verdict_text
from .registry import ALPHA, CONTRADICTED, INCONCLUSIVE, NO_DATA, NOT_TESTABLE, SUPPORTED, TOP1, UNDECIDED
from .speed import CROSSOVER_TOKENS, TIME_X

VERDICT_STYLES = {  # verdict → (colour, marker)
    SUPPORTED: ("tab:green", "o"),
    CONTRADICTED: ("tab:red", "X"),
    INCONCLUSIVE: ("tab:orange", "s"),
    UNDECIDED: ("tab:purple", "D"),
}
BAND, REGION = "#cfe3f5", "#e8f2e1"


def _panels(rows: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """The rows grouped by (source, measure), in the order of the table."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["source"], row["measure"]), []).append(row)
    return [(str(source), measure, panel) for (source, measure), panel in groups.items()]


def _limits(panel: list[dict], origin: float = 0.0) -> tuple[float, float]:
    """This panel's own x range: every interval, effect and margin, and `origin`, with some room (±1
    around it when the panel has none of them)."""
    empty = not any(math.isfinite(r.get("effect", math.nan)) or r.get("margin") for r in panel)
    values = [origin - 1.0, origin + 1.0] if empty else []
    values += [origin] + [r[k] for r in panel for k in ("low", "high", "effect") if math.isfinite(r.get(k, math.nan))]
    values += [origin + s * r["margin"] for r in panel if r.get("margin") for s in (-1, 1)]
    low, high = min(values), max(values)
    pad = 0.08 * (high - low or 2.0)
    return low - pad, high + pad


def _as_time_multiple(row: dict) -> dict:
    """A time claims row drawn in the one time unit: a's time × b's (1 + effect/100), the band around 1."""
    out = dict(row)
    for key in ("effect", "low", "high"):
        if math.isfinite(row.get(key, math.nan)):
            out[key] = time_multiple(row[key])
    out["margin"] = row["margin"] / 100 if row.get("margin") else row.get("margin")
    return out


def _axis_label(panel: list[dict], measure: str) -> str:
    if measure != TOP1:
        return "inference time per image × softmax's (> 1: slower; a = Performer)"
    if all(performer_vs_exact(r["comparison"]) for r in panel):
        differences = any(r["comparison"].differences for r in panel)
        return f"effect in points of test top-1: {SIGN}" + (
            "; (a − b) − (c − d) rows: that gap's change" if differences else ""
        )
    return "effect a − b in points of test top-1 (positive: a, the claim's first variant, ahead)"


def _row(axis, y: float, row: dict, limits: tuple[float, float], origin: float = 0.0, words: str = "") -> None:
    """One claims row at height y: its band around `origin` (no effect: 0; time multiples: 1), the
    effect with its interval, and the verdict with `words` (default: effect_words of the row)."""
    margin, key = row.get("margin"), row["verdict"]
    if row["kind"] == "equal" and margin:
        axis.fill_betweenx([y - 0.42, y + 0.42], origin - margin, origin + margin, color=BAND, lw=0)
    elif row["kind"] == "at_least" and margin is not None:
        axis.fill_betweenx([y - 0.42, y + 0.42], origin - margin, limits[1], color=REGION, lw=0)
        axis.plot([origin - margin] * 2, [y - 0.42, y + 0.42], color="tab:green", lw=0.8)
    if key in (NO_DATA, NOT_TESTABLE) or not math.isfinite(row.get("effect", math.nan)):
        axis.text(
            sum(limits) / 2,
            y,
            verdict_text(row),
            ha="center",
            va="center",
            fontsize=7.5,
            color="0.35",
            style="italic",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
        return
    colour, marker = VERDICT_STYLES[key]
    if math.isfinite(row.get("low", math.nan)):
        axis.plot([row["low"], row["high"]], [y, y], color=colour, lw=2.2)
    axis.plot(row["effect"], y, marker=marker, color=colour, markersize=7, markeredgecolor="black", markeredgewidth=0.5)
    axis.annotate(
        f"{key} · {words or effect_words(row)}" + (f" ({row['reason']})" if row.get("reason") else ""),
        (1.01, y),
        xycoords=axis.get_yaxis_transform(),
        va="center",
        fontsize=7,
        color=colour if key != INCONCLUSIVE else "#b35900",
        annotation_clip=False,
    )


def forest_figure(rows: list[dict], title: str = ""):
    """A forest plot of the claims rows: one panel per source and measure, each on its own x scale, so
    that the ±margin bands stay visible; per (claim, dataset) the effect and its interval coloured and
    marked by verdict, the verdict and the effect in words to the right, the equivalence band (±margin)
    of `equal` claims, the non-inferior region (≥ −margin) of `at_least` claims, and the zero line.
    Rows without data say why. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    panels = _panels(rows) or [("no claims", TOP1, [])]
    datasets = len({r["dataset"] for r in rows}) > 1
    heights = [len(panel) + 1.6 for _, _, panel in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(13, 0.3 * sum(heights) + 1.6),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
        layout="constrained",
    )
    for axis, (source, measure, panel) in zip(axes[:, 0], panels):
        origin = 0.0 if measure == TOP1 else 1.0  # time: multiples of softmax's time, 1 = as fast
        drawn = panel if measure == TOP1 else [_as_time_multiple(r) for r in panel]
        limits = _limits(drawn, origin)
        positions = list(range(len(panel)))[::-1]
        for y, row, original in zip(positions, drawn, panel):
            words = effect_words(original)
            if original["verdict"] == INCONCLUSIVE and not original.get("reason"):
                words += f"\n({interval_reading(original)})"  # why it is inconclusive, on its own line
            _row(axis, y, row, limits, origin, words)
        axis.axvline(origin, color="black", lw=0.8)
        axis.set_xlim(*limits)
        axis.set_ylim(-0.7, max(len(panel), 1) - 0.3)
        labels = [r["claim"] + (f" · {r['dataset']}" if datasets else "") for r in panel]
        axis.set_yticks(positions, labels, fontsize=8)
        axis.tick_params(axis="x", labelsize=8)
        axis.grid(axis="x", alpha=0.3)
        axis.set_title(f"{source}{'' if measure == TOP1 else ' — inference time'}", fontsize=9, loc="left")
        axis.set_xlabel(_axis_label(panel, measure), fontsize=8)
        if not panel:
            axis.text(0, 0, "no claims", ha="center", va="center", fontsize=8, color="0.45")
    handles = [
        Line2D([], [], color=c, marker=m, lw=2, markeredgecolor="black", markeredgewidth=0.5, label=k)
        for k, (c, m) in VERDICT_STYLES.items()
    ]
    handles += [
        Patch(color=BAND, label="equivalence band (±margin): `equal` claims"),
        Patch(color=REGION, label="non-inferior region (≥ −margin): `at_least` claims"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=6, fontsize=7.5, frameon=False)
    interval = f"{100 * (1 - ALPHA):.0f}% interval for greater/less, {100 * (1 - 2 * ALPHA):.0f}% for equal/at_least"
    fig.suptitle(f"{title}{' — ' if title else ''}claims: effect a − b with its {interval}; {SIGN}", fontsize=9.5)
    return fig


def time_ratio_figure(rows: list[dict], tokens: int = CROSSOVER_TOKENS, title: str = ""):
    """Each Performer's inference time as a multiple of softmax's (> 1: slower) vs tokens (log-log)
    with its interval, 1× and the claimed crossover marked; each backend in its variant's look (with
    APE, as every figure draws it). Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    from ..styles import plain_log_ticks, variant_style

    fig, axis = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["tokens"])
        y = np.array([r[TIME_X] for r in mine])
        errors = [y - [r["low"] for r in mine], [r["high"] for r in mine] - y]
        style = variant_style(f"{backend}+ape")
        axis.errorbar([r["tokens"] for r in mine], y, yerr=errors, capsize=3, label=f"{backend}+ape", **style)
    axis.axhline(1.0, color="black", lw=0.8)
    axis.axvline(tokens, color="grey", lw=0.8, ls="--", label=f"claimed crossover ({tokens} tokens)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    ticks = sorted({r["tokens"] for r in rows})
    axis.set_xticks(ticks, [str(t) for t in ticks], minor=False)
    axis.set_xticks([], minor=True)
    plain_log_ticks(axis)
    axis.set_xlabel("tokens (patch 8 → 1 on 32×32 images)")
    axis.set_ylabel("Performer time / softmax time (× softmax; > 1: slower)")
    axis.set_title(title or f"Inference time × softmax's, {100 * (1 - ALPHA):.0f}% intervals")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    return fig


def answer_figure(rows: list[dict], params):
    """The answer in one figure: a designed preset's pre-registered contrasts only — per Performer
    backend its gap to softmax with APE and with the relative encoding, and how much of the gap the
    encoding closes — each with its interval, margin band and verdict (Holm within that family), as
    the forest plot draws them. Returns the matplotlib figure (None without a design)."""
    from .registry import design_source

    if not params.design.active:
        return None
    source = design_source(params)
    primary = [r for r in rows if r["source"] == source]
    fig = forest_figure(primary, f"{params.name}: the pre-registered answer")
    fig.set_size_inches(13, 0.42 * len(primary) + 2.2)
    return fig
