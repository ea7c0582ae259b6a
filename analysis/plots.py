"""The notebooks' figures: each function takes computed rows (records, histories, check results,
benchmark rows) and returns one figure; the notebooks narrate and hand it to `report.Report.figure`.

Every variant is drawn in its one look (`analysis.styles`), accuracy is always in %, and
curves over seeds are drawn as the mean with a band from the lowest to the highest seed.
"""

from __future__ import annotations

import statistics

import numpy as np

from rpevit.lab.result import results

from .convergence import PLATEAU_FRACTION
from .styles import figure_styles, plotly_style, variant_legend, variant_style

BAND_ALPHA = 0.15
SEED_BAND = "line: mean over seeds; band: lowest … highest seed"


def _mpl():
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, dpi: int = 110) -> None:
    """Write a figure a report keeps beside its markdown (reports/<preset>/pilot_curves.png,
    reports/gap_pilots.png) as PNG, then close it."""
    fig.savefig(path, dpi=dpi)
    _mpl().close(fig)


def over_seeds(series: dict) -> dict[str, dict]:
    """{variant: [{x: y} per seed]} → {variant: {"x", "mean", "low", "high", "seeds"}}: at each x, the
    mean and the range over the seeds that have it (x sorted)."""
    out = {}
    for variant, seeds in series.items():
        xs = sorted({x for seed in seeds for x in seed})
        values = [[seed[x] for seed in seeds if x in seed] for x in xs]
        out[variant] = {
            "x": xs,
            "mean": [statistics.fmean(v) for v in values],
            "low": [min(v) for v in values],
            "high": [max(v) for v in values],
            "seeds": len(seeds),
        }
    return out


def _band(axis, line: dict, style: dict, **kwargs) -> None:
    """The mean of `line` (from over_seeds) in the variant's style, its seed range as a band."""
    axis.plot(line["x"], line["mean"], **{**style, **kwargs})
    if line["seeds"] > 1:
        axis.fill_between(line["x"], line["low"], line["high"], color=style["color"], alpha=BAND_ALPHA, lw=0)


def _rgba(colour: str, alpha: float) -> str:
    from matplotlib.colors import to_rgb

    red, green, blue = (round(255 * c) for c in to_rgb(colour))
    return f"rgba({red},{green},{blue},{alpha})"


def _plotly_band(fig, line: dict, style: dict, name: str, row=None, col=None, showlegend=True) -> None:
    """The plotly counterpart of _band: a mean trace in the variant's look and a filled seed range."""
    import plotly.graph_objects as go

    where = {} if row is None else {"row": row, "col": col}
    look = plotly_style(style)
    if line["seeds"] > 1:
        fig.add_trace(
            go.Scatter(
                x=line["x"] + line["x"][::-1],
                y=line["high"] + line["low"][::-1],
                fill="toself",
                fillcolor=_rgba(look["line"]["color"], BAND_ALPHA),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
            ),
            **where,
        )
    fig.add_trace(
        go.Scatter(
            x=line["x"],
            y=line["mean"],
            mode="lines+markers",
            name=name,
            legendgroup=name,
            showlegend=showlegend,
            **look,
        ),
        **where,
    )


# --------------------------------------------------------------------------- 10: training curves

CURVE_PANELS = (
    ("train_loss", "train loss", 1),
    ("val_loss", "validation loss", 1),
    ("val_acc", "validation top-1 %", 100),
)


def curve_bands(histories: list[tuple[str, int, list[dict]]]) -> dict[str, dict[str, dict]]:
    """{panel key: over_seeds(...)} of (variant, seed, history rows) triples, accuracy in %."""
    panels = {}
    for key, _, scale in CURVE_PANELS:
        series: dict[str, list[dict]] = {}
        for variant, _, history in histories:
            series.setdefault(variant, []).append({int(row["epoch"]): scale * row[key] for row in history})
        panels[key] = over_seeds(series)
    return panels


def _split_collapsed(histories, collapsed) -> tuple[list, list]:
    """(the runs that did not collapse, those that did), from (variant, seed, history) triples."""
    fell = [h for h in histories if (h[0], h[1]) in collapsed]
    return [h for h in histories if (h[0], h[1]) not in collapsed], fell


COLLAPSED_NOTE = "collapsed runs: own panel, not in the mean"


IN_FLIGHT_NOTE = "dotted, hollow: a run still training (per seed, its epochs so far; in no gap)"


def _draw_in_flight(axes, in_flight, styles: dict) -> None:
    """Each unfinished run's epochs so far on the three curve panels: a dotted line per seed with its
    variant's colour (`styles`: figure_styles) and hollow marker."""
    for axis, (key, _, scale) in zip(axes, CURVE_PANELS):
        for variant, _, history in in_flight:
            style = {**styles[variant], "linestyle": ":", "markerfacecolor": "none"}
            values = [scale * float(row[key]) for row in history]
            axis.plot([int(row["epoch"]) for row in history], values, **style, markersize=3, linewidth=1.2)


def training_curves(histories: list[tuple[str, int, list[dict]]], title: str = "", collapsed=frozenset(), in_flight=()):
    """Train loss, validation loss and validation top-1 % vs epoch: per variant the mean over its
    seeds with the seed range as a band, integer epochs, one legend entry per variant. Runs named in
    `collapsed` ((variant, seed), convergence.collapsed_runs) are left out of the means and drawn one
    by one in a fourth panel, so a run falling to chance neither drags its variant's mean down nor
    squeezes the other curves. `in_flight` ((variant, seed, history) of unfinished runs) are drawn
    dotted, one line per seed, apart from the means."""
    from matplotlib.ticker import MaxNLocator

    plt = _mpl()
    healthy, fell = _split_collapsed(histories, collapsed)
    bands = curve_bands(healthy)
    variants = list(dict.fromkeys(v for v, _, _ in [*histories, *in_flight]))
    styles = figure_styles(variants)
    panels = len(CURVE_PANELS) + bool(fell)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.6), layout="constrained")
    for axis, (key, label, _) in zip(axes, CURVE_PANELS):
        for variant in variants:
            if variant in bands[key]:
                _band(axis, bands[key][variant], styles[variant], markersize=3.5, linewidth=1.2)
        axis.set_title(label)
    _draw_in_flight(axes, in_flight, styles)
    if fell:
        axis = axes[-1]
        for variant, seed, history in fell:
            epochs = [int(row["epoch"]) for row in history]
            axis.plot(epochs, [100 * row["val_acc"] for row in history], **styles[variant], markersize=3.5)
            axis.annotate(
                f"seed {seed}",
                (epochs[-1], 100 * history[-1]["val_acc"]),
                fontsize=7,
                xytext=(0, 4),
                textcoords="offset points",
                ha="right",
                va="bottom",
            )
        axis.set_title("collapsed runs: validation top-1 %")
    for axis in axes:
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    seeds = max((line["seeds"] for line in bands["val_acc"].values()), default=1)
    notes = [SEED_BAND] * (seeds > 1) + [COLLAPSED_NOTE] * bool(fell) + [IN_FLIGHT_NOTE] * bool(in_flight)
    legend_title = "\n".join(notes) or None
    variant_legend(fig, variants, loc="outside right upper", title=legend_title, title_fontsize=7)
    fig.suptitle(title)
    return fig


def training_curves_interactive(histories: list[tuple[str, int, list[dict]]], title: str = "", collapsed=frozenset()):
    """The plotly version of `training_curves` (hover for values; click a legend entry to hide it);
    each collapsed run is a trace of its own in every panel, hidden until its legend entry is clicked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    healthy, fell = _split_collapsed(histories, collapsed)
    bands = curve_bands(healthy)
    variants = list(dict.fromkeys(v for v, _, _ in healthy))
    styles = figure_styles([*variants, *(v for v, _, _ in fell)])
    fig = make_subplots(rows=1, cols=len(CURVE_PANELS), subplot_titles=[label for _, label, _ in CURVE_PANELS])
    for column, (key, _, scale) in enumerate(CURVE_PANELS, start=1):
        for variant in variants:
            _plotly_band(fig, bands[key][variant], styles[variant], variant, 1, column, showlegend=column == 1)
        for variant, seed, history in fell:
            name = f"{variant} seed {seed} (collapsed)"
            fig.add_trace(
                go.Scatter(
                    x=[int(row["epoch"]) for row in history],
                    y=[scale * row[key] for row in history],
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=column == 1,
                    visible="legendonly",
                    **plotly_style(styles[variant]),
                ),
                row=1,
                col=column,
            )
        fig.update_xaxes(title_text="epoch", tickformat="d", row=1, col=column)
    note = f"; {COLLAPSED_NOTE} (click to show)" if fell else ""
    fig.update_layout(height=480, title=f"{title} ({SEED_BAND}{note})", legend={"font": {"size": 10}})
    return fig


# --------------------------------------------------------------------------- 40: accuracy vs cost


def budget_curves(pairs: list[dict], title: str = ""):
    """The longer-budget check (convergence.budget_check_curves): one panel per variant, validation
    top-1 % vs epoch of each paired seed at the study's budget (dashed, hollow end marker) and at the
    check's (solid), each run's best epoch marked; the last 20 % of the longer runs shaded (the window
    of the plateau rule)."""
    from matplotlib.ticker import MaxNLocator

    plt = _mpl()
    variants = list(dict.fromkeys(p["variant"] for p in pairs))
    columns = min(3, len(variants))
    rows = -(-len(variants) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.6 * columns, 3.4 * rows), layout="constrained", squeeze=False, sharey=True
    )
    seeds = sorted({p["seed"] for p in pairs})
    shades = {seed: 1.0 - 0.45 * i / max(1, len(seeds) - 1) for i, seed in enumerate(seeds)}
    for axis, variant in zip(axes.flat, variants):
        colour = variant_style(variant)["color"]
        for pair in (p for p in pairs if p["variant"] == variant):
            alpha = shades[pair["seed"]]
            for values, dash, label in (("short", "--", "study"), ("long", "-", "check")):
                curve = pair[values]
                epochs = range(1, len(curve) + 1)
                axis.plot(
                    epochs,
                    curve,
                    linestyle=dash,
                    color=colour,
                    alpha=alpha,
                    linewidth=1.2,
                    label=f"seed {pair['seed']}, {len(curve)} epochs ({label})",
                )
                best = int(np.argmax(curve))
                axis.plot(
                    best + 1,
                    curve[best],
                    marker="o" if values == "long" else "D",
                    color=colour,
                    alpha=alpha,
                    markerfacecolor=colour if values == "long" else "white",
                    markersize=5,
                )
        longest = max(len(p["long"]) for p in pairs if p["variant"] == variant)
        axis.axvspan(longest * (1 - PLATEAU_FRACTION), longest, color="0.85", alpha=0.5, lw=0)
        axis.set_title(variant, fontsize=10)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")
    for axis in axes[:, 0]:
        axis.set_ylabel("validation top-1 %")
    for axis in list(axes.flat)[len(variants) :]:
        axis.set_visible(False)
    low = min(min(p["short"][len(p["short"]) // 4 :] + p["long"][len(p["long"]) // 4 :]) for p in pairs)
    high = max(max(p["short"] + p["long"]) for p in pairs)
    axes[0, 0].set_ylim(low - 0.5, high + 0.3)
    fig.suptitle(
        title or "Validation top-1 at both budgets, paired by seed",
        fontsize=10,
    )
    return fig


def pilot_gaps_figure(series: list[dict], threshold: float, title: str = ""):
    """The gap pilots' answer at a glance: one panel per Performer backend, its test top-1 minus softmax's
    (points) at each budget of each pilot — every seed a small dot, the mean over seeds a line — with 0 and
    the pre-registered GO line at −`threshold`. `series`: {"pilot", "backend", "gaps": {epochs: [per seed]}}."""
    plt = _mpl()
    backends = list(dict.fromkeys(s["backend"] for s in series))
    pilots = list(dict.fromkeys(s["pilot"] for s in series))
    colours = {pilot: plt.get_cmap("tab10")(i) for i, pilot in enumerate(pilots)}
    fig, axes = plt.subplots(
        1, len(backends), figsize=(4.8 * len(backends) + 2.2, 3.8), layout="constrained", squeeze=False, sharey=True
    )
    for axis, backend in zip(axes[0], backends):
        for line in (s for s in series if s["backend"] == backend):
            budgets = sorted(e for e, gaps in line["gaps"].items() if gaps)
            means = [statistics.fmean(line["gaps"][e]) for e in budgets]
            colour, shift = colours[line["pilot"]], 1 + 0.04 * (pilots.index(line["pilot"]) - len(pilots) / 2)
            axis.plot([e * shift for e in budgets], means, marker="o", color=colour, label=line["pilot"])
            for e in budgets:
                seeds = line["gaps"][e]
                axis.plot([e * shift] * len(seeds), seeds, "o", color=colour, alpha=0.35, markersize=3.5)
        axis.axhline(0, color="0.3", linewidth=0.8)
        axis.axhline(-threshold, color="tab:red", linestyle="--", linewidth=1, label=f"GO: −{threshold:g}")
        axis.set_xscale("log", base=2)
        ticks = sorted({e for s in series for e in s["gaps"]})
        axis.set_xticks(ticks, [str(e) for e in ticks])
        axis.set_xlabel("budget (epochs)")
        axis.set_title(f"{backend} − softmax (with APE)", fontsize=10)
        axis.grid(alpha=0.3)
    axes[0, 0].set_ylabel("test top-1 gap, points")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="outside right upper", fontsize=8, title="line: mean; dots: seeds", title_fontsize=7
    )
    fig.suptitle(title or "Performer − softmax per budget, every gap pilot (negative: softmax ahead)", fontsize=10)
    return fig


# --------------------------------------------------------------------------- 50: resolution


def resolution_bands(found: list[dict], mode: str) -> dict[str, dict]:
    """over_seeds of test top-1 % vs input resolution in one position mode; a variant without
    positions to rebuild has one mode only, which stands for both."""
    series: dict[str, list[dict]] = {}
    for r in results(found):
        evaluations = [e for e in r.resolution_eval if e["mode"] == mode] or r.resolution_eval
        series.setdefault(r.name, []).append({e["resolution"]: 100 * e["top1"] for e in evaluations})
    return over_seeds(series)


def resolution_figure(found: list[dict], title: str = ""):
    """Test top-1 % vs input resolution, extrapolated and interpolated positions side by side; the
    training resolution marked; a legend entry for every variant."""
    plt = _mpl()
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.6), sharey=True, layout="constrained")
    found = results(found)
    trained = found[0].resolution_eval[0]["trained_resolution"]
    seeds, styles = 1, figure_styles([r.name for r in found])
    for axis, mode in zip(axes, ("extrapolate", "interpolate")):
        for variant, line in resolution_bands(found, mode).items():
            _band(axis, line, styles[variant])
            seeds = max(seeds, line["seeds"])
        axis.axvline(trained, color="grey", linewidth=0.8)
        axis.set_title(mode)
        axis.set_xlabel("input resolution (pixels)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("test top-1 %")
    grey = (plt.Line2D([], [], color="grey", linewidth=0.8), f"training resolution ({trained} px)")
    variant_legend(
        fig,
        [r.variant for r in found],
        extra=[grey],
        loc="outside right upper",
        title=SEED_BAND if seeds > 1 else None,
        title_fontsize=7,
    )
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- 00: derivation checks


def relative_offsets_figure(maps: dict, violations: dict, grid):
    """A[i, i+Δ]/A[i, i] by offset Δ for each case of `maps` ({label: offset_maps(...)}): top, the
    mean over queries (log ratio, or the ratio for signed weights); bottom, log₁₀ of the spread
    over queries on one shared scale (docs/methods.md §5)."""
    from matplotlib.ticker import MaxNLocator

    plt = _mpl()
    labels = list(maps)
    high = max(1.0, max(np.nanmax(spread) for _, spread, _ in maps.values()))
    fig, axes = plt.subplots(2, len(labels), figsize=(2.9 * len(labels), 5.4), squeeze=False, layout="constrained")
    extent = (-(grid.width - 1) - 0.5, grid.width - 0.5, grid.height - 0.5, -(grid.height - 1) - 0.5)
    bottom = None
    for column, label in enumerate(labels):
        mean, spread, signed = maps[label]
        top = axes[0, column].imshow(mean, cmap="viridis", extent=extent)
        fig.colorbar(top, ax=axes[0, column], shrink=0.8)
        bottom = axes[1, column].imshow(spread, cmap="magma", extent=extent, vmin=-17, vmax=high)
        kind = "ratio (signed weights)" if signed else "log ratio"
        axes[0, column].set_title(f"{label}\n{kind}\nviolation {violations[label]:.0e}", fontsize=7.5)
        axes[1, column].set_xlabel("Δcol")
    if bottom is not None:
        fig.colorbar(bottom, ax=axes[1, :].tolist(), shrink=0.8, label="log₁₀ spread")
    for axis in axes.flat:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("mean over queries\nΔrow")
    axes[1, 0].set_ylabel("spread over queries\nΔrow")
    fig.suptitle("A[i, i+Δ] / A[i, i] by offset Δ (identical tokens, head 0)", fontsize=10)
    return fig


def favor_error_figure(rows: list[dict], slopes: dict[str, float], head_dim: int):
    """FAVOR+ mean relative error of φ(q)ᵀφ(k) against the number of features m (log-log), orthogonal
    and i.i.d. ω with their fitted slopes, and a 1/√m reference through the first i.i.d. point."""
    from matplotlib.ticker import FixedLocator, NullLocator

    plt = _mpl()
    fig, axis = plt.subplots(figsize=(5.6, 4.0), layout="constrained")
    for kind, marker in (("orthogonal", "o"), ("iid", "s")):
        mine = [r for r in rows if r["features"] == kind]
        axis.loglog(
            [r["m"] for r in mine],
            [r["mean relative error"] for r in mine],
            marker=marker,
            label=f"{kind} ω (slope {slopes[kind]:.2f})",
        )
    ms = np.array(sorted({r["m"] for r in rows}), dtype=float)
    anchor = next(r["mean relative error"] for r in rows if r["features"] == "iid")
    axis.loglog(ms, anchor * np.sqrt(ms[0] / ms), "k--", lw=1, label="∝ 1/√m")
    errors = [r["mean relative error"] for r in rows]
    axis.xaxis.set_major_locator(FixedLocator(ms))
    axis.xaxis.set_major_formatter(lambda value, _: f"{value:g}")
    axis.yaxis.set_major_locator(FixedLocator(np.geomspace(min(errors), max(errors), 5)))
    axis.yaxis.set_major_formatter(lambda value, _: f"{value:.2g}")
    axis.xaxis.set_minor_locator(NullLocator())
    axis.yaxis.set_minor_locator(NullLocator())
    axis.set_xlabel("number of features m")
    axis.set_ylabel("mean relative error of φ(q)ᵀφ(k)")
    axis.grid(alpha=0.3)
    axis.set_title(f"FAVOR+ estimator error, d = {head_dim}", fontsize=10)
    axis.legend(fontsize=8)
    return fig
