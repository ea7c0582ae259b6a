"""Every recall pilot of the pre-registered order (campaign.orders.RECALL_ORDER) in one place, and the order's
answer once it has ended: GO at the first pilot whose rule said so, or NO-GO at every step — then the answer
names, per pilot, which K softmax solved (test top-1 ≥ 95 %, at the pilot's epoch budget) and how far the
Performers were from it (mean gap over seeds with its 95 % t-interval, scipy), so "no gap to rescue" is said
with the numbers that support it. `python -m campaign recall-pilot --overview` writes reports/recall_pilots.md
and recall_pilots.png (each Performer's gap against K, one panel per pilot) and puts the answer under the
README's recall lines.
"""

from __future__ import annotations

import math
import statistics

from rpevit.core.data import dataset_info
from rpevit.core.stats import t_interval
from rpevit.lab.store import records
from rpevit.lab.tables import signed

from . import recall_pilot
from .pilot_overview import favor_features
from .recall_pilot import GO_GAP, ORDER, SOLVED, pairs_of

LAYOUTS = {"neighbour": "neighbour", "samecell": "same-cell"}  # the layout's name in prose
OVERVIEW, FIGURE = "recall_pilots.md", "recall_pilots.png"
ANSWER = "**The recall answer**: "
ORDER_TEXT = (
    "2D associative recall: an 8×8 grid of glyph cells holds K key–value pairs and a marked query; the label is "
    "the class of the queried key's value (chance 10 %; rpevit/core/data/recall.py). The pilots' order is fixed "
    f"in params/recall_pilot.yaml's header ({' → '.join(ORDER)}): each later pilot trains only once the one "
    f"before it ended NO-GO. GO at the smallest K where softmax's mean test top-1 is ≥ {SOLVED:g} % and a "
    f"Performer's mean gap is ≤ −{GO_GAP:g} points. `python -m campaign recall-pilot --overview` writes this page."
)


def summaries(reports_root=None) -> list[dict]:
    """recall_pilot.summary of every pilot of the order that has a finished run, in the order."""
    found = [recall_pilot.summary(name, reports_root) for name in ORDER]
    return [s for s in found if s["done"]]


def pilot_clause(found: dict) -> str:
    """One pilot in words: layout, K, FAVOR+'s features (and the K it has fewer features than), which K softmax
    solved with its top-1 per K, and the range of the Performers' mean gaps with the lowest one's interval."""
    params, rows = found["params"], found["rows"]
    ks, features = pairs_of(params), favor_features(params)
    soft = {r["K"]: r["softmax top-1"] for r in rows}
    solved = [k for k in ks if soft.get(k, math.nan) >= SOLVED]
    said = "every K" if solved == ks else ("no K" if not solved else "K = " + ", ".join(map(str, solved)))
    paired = [r for r in rows if not math.isnan(r["mean gap"])]
    names = ", ".join(dict.fromkeys(r["variant"].removesuffix("+ape") for r in paired))
    favor = any(r["variant"].startswith("favor") for r in paired)
    lowest = min(paired, key=lambda r: r["mean gap"])
    low, high = min(r["mean gap"] for r in paired), max(r["mean gap"] for r in paired)
    spread = f"were {signed(low)}" if low == high else f"ran from {signed(low)} to {signed(high)}"
    fewer = [k for k in ks if k > features]
    fewer_text = f", fewer features than pairs at K = {', '.join(map(str, fewer))}" if fewer else ""
    favor_text = f", FAVOR+ m = {features}{fewer_text}" if favor else ""
    layout = LAYOUTS.get(name := dataset_info(params.datasets[0]).recall.layout, name)
    return (
        f"`{params.name}` ({layout} layout, K = {'/'.join(map(str, ks))}{favor_text}, "
        f"{params.train.epochs} epochs): softmax solved {said} ({' / '.join(f'{soft[k]:.1f}' for k in ks)} %); "
        f"the mean gaps of {names} {spread} points (lowest: {lowest['variant'].removesuffix('+ape')} at "
        f"K = {lowest['K']}, {lowest['gap, 95 % interval']})"
    )


def answer(found: list[dict]) -> str:
    """The order's answer in a sentence from its pilots' summaries: '' while a pilot is open or the order has not
    reached its end; the GO pilot's decision on GO; NO-GO at every step otherwise (answer_lines: the numbers)."""
    for pilot in found:
        if pilot["verdict"] == "GO":
            return f"{ANSWER}GO on `{pilot['params'].name}`. {pilot['decision']}"
        if pilot["verdict"] != "NO-GO":
            return ""
    if [p["params"].name for p in found] != list(ORDER):
        return ""
    return (
        f"{ANSWER}all {len(ORDER)} pilots ended NO-GO (no K where softmax reached {SOLVED:g} % left a Performer "
        f"≥ {GO_GAP:g} points behind): which RPE rescues linear attention is not testable on these tasks."
    )


def answer_lines(found: list[dict]) -> list[str]:
    """The answer (or where the order stands), and on NO-GO at every step what each pilot measured (pilot_clause)."""
    said = answer(found)
    if said and all(p["verdict"] == "NO-GO" for p in found):
        return [said, "", *(f"- {pilot_clause(p)}." for p in found)]
    if said:
        return [said]
    open_at = next((p["params"].name for p in found if p["verdict"] not in ("GO", "NO-GO")), "")
    return [f"**The order stands at `{open_at}`**: not yet answered." if open_at else "**No recall pilot has run.**"]


def overview_lines(found: list[dict]) -> list[str]:
    """reports/recall_pilots.md: each pilot's line and decision, the answer (or where the order stands), the
    figure."""
    lines = ["# The recall pilots", "", ORDER_TEXT, "", *answer_lines(found), ""]
    for pilot in found:
        lines += [f"## `{pilot['params'].name}`", "", pilot["line"], "", pilot["decision"], "", pilot["provenance"], ""]
    if found:
        lines += [f"![Each Performer's gap against K, one panel per recall pilot]({FIGURE})"]
    return lines


def gaps_figure(found: list[dict]):
    """One panel per pilot: each Performer's mean gap to softmax against K with its 95 % t-interval over seeds
    (filled where softmax solved that K, hollow where it did not; Performers side by side); the GO line at
    −GO_GAP."""
    from analysis.plots import _mpl
    from analysis.styles import figure_styles

    plt = _mpl()
    fig, axes = plt.subplots(1, len(found), figsize=(4.2 * len(found), 3.6), squeeze=False, sharey=True)
    for axis, pilot in zip(axes[0], found, strict=True):
        params, top1 = pilot["params"], pilot["top1"]
        ks, styles = pairs_of(params), figure_styles(recall_pilot.compared(params))
        performers = recall_pilot.performers(params)
        for place, variant in enumerate(performers):
            dodge = 2 ** (0.08 * (place - (len(performers) - 1) / 2))  # side by side at one K (log axis)
            for k, dataset in zip(ks, params.datasets, strict=True):
                pairs = [s for s in params.seeds if all((dataset, v, s) in top1 for v in (variant, "softmax+ape"))]
                if not pairs:
                    continue
                gaps = [top1[(dataset, variant, s)] - top1[(dataset, "softmax+ape", s)] for s in pairs]
                found_ci = t_interval(gaps)
                solved = statistics.fmean(top1[(dataset, "softmax+ape", s)] for s in pairs) >= SOLVED
                low, high = found_ci["mean"] - found_ci["low"], found_ci["high"] - found_ci["mean"]
                axis.errorbar(
                    [k * dodge],
                    [found_ci["mean"]],
                    yerr=None if math.isnan(low) else [[low], [high]],
                    marker=styles[variant]["marker"],
                    color=styles[variant]["color"],
                    markerfacecolor=styles[variant]["color"] if solved else "white",
                    capsize=3,
                    label=variant if k == ks[0] else None,
                )
        axis.axhline(0, color="grey", linewidth=0.8)
        axis.axhline(-GO_GAP, color="grey", linewidth=0.8, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set(xticks=ks, xticklabels=[str(k) for k in ks], xlabel="K (key–value pairs)")
        axis.set_title(f"{params.name}\n(FAVOR+ m = {favor_features(params)})", fontsize=9)
        axis.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel("Performer − softmax, test top-1 (points)")
    fig.suptitle(
        f"Recall gaps, 95 % t-intervals over seeds (filled: softmax ≥ {SOLVED:g} %; dashed: GO line)", fontsize=9
    )
    fig.tight_layout()
    return fig


def write_overview(reports_root=None) -> list[str]:
    """reports/recall_pilots.md and recall_pilots.png from the pilots' kept records; returns the lines."""
    from analysis.plots import save_png

    folder = reports_root or records.reports_root()
    found = summaries(reports_root)
    lines = overview_lines(found)
    records.write_text(folder / OVERVIEW, "\n".join(lines) + "\n")
    if found:
        save_png(gaps_figure(found), folder / FIGURE)
    return lines
