"""Accuracy against cost (notebook 40): one point per variant — mean test top-1 % over its seeds, the
seed range as its bar — against matmul MFLOPs per image (counted from the records) and, from the
speed benchmark only, inference and training time per image (never the runs' own timings, which are
taken under whatever load the machine had). Collapsed runs (convergence.collapsed_runs) are left out
of the means and counted in the label, as the training curves treat them.
"""

from __future__ import annotations

import statistics

from rpevit.core.variants import parse_variant
from rpevit.lab.result import Result, results

from .styles import plotly_style, positions_key, variant_style

COST_AXES = (
    ("mflops", "matmul MFLOPs / image"),
    ("ms_per_image_batched", "inference ms / image (batched; speed benchmark)"),
    ("train_ms_per_image", "training ms / image (speed benchmark)"),
)
LABEL_GAP = 0.075  # the least vertical distance between two labels, as a share of the axis height
LABEL_ROOM = 0.9  # the label column's width, as a share of the row's data span of x


def bench_costs(speed: list[dict] | None) -> dict[str, dict[str, float]]:
    """{variant: {"ms_per_image_batched", "train_ms_per_image"}}: medians over the rounds of a
    speed benchmark (`claims.read_speed` rows); {} without one."""
    costs: dict[str, dict[str, list[float]]] = {}
    for row in speed or []:
        entry = costs.setdefault(parse_variant(row["variant"]).name, {"ms_per_image_batched": [], "train_ms": []})
        entry["ms_per_image_batched"].append(row["ms_per_image_batched"])
        entry["train_ms"].append(1000 * row["train_seconds_per_image"])
    return {
        v: {
            "ms_per_image_batched": statistics.median(c["ms_per_image_batched"]),
            "train_ms_per_image": statistics.median(c["train_ms"]),
        }
        for v, c in costs.items()
    }


def accuracy_cost_points(done: list[dict], speed: list[dict] | None, collapsed=frozenset()) -> list[dict]:
    """One point per variant (and dataset): mean test top-1 % over its seeds with the seed range, its
    matmul MFLOPs per image and, from the speed benchmark only, its inference and training time per
    image. Runs named in `collapsed` ((variant, seed)) are left out of the mean and range and counted
    in "collapsed"; a variant whose every run collapsed has no point."""
    bench = bench_costs(speed)
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results(done):
        groups.setdefault((r.dataset, r.name), []).append(r)
    points = []
    for (dataset, variant), runs in groups.items():
        kept = [r for r in runs if (r.variant, r.seed) not in collapsed]
        if not kept:
            continue
        top1 = [100 * r.top1 for r in kept]
        points.append(
            {
                "dataset": dataset,
                "variant": variant,
                "backend": parse_variant(variant).backend,
                "top-1 %": statistics.fmean(top1),
                "low": min(top1),
                "high": max(top1),
                "seeds": len(kept),
                "collapsed": len(runs) - len(kept),
                "mflops": kept[0].flops_per_image / 1e6,
                **bench.get(variant, {}),
            }
        )
    return points


def _span(values: list[float]) -> float:
    return (max(values) - min(values)) or 1.0 if values else 1.0


def label_heights(ys: list[float], low: float, high: float, gap: float) -> list[float]:
    """Heights for labels of points at `ys` inside [low, high], each as near its point as it can be
    with at least `gap` between neighbours (in the points' order); the same order as `ys`."""
    order = sorted(range(len(ys)), key=lambda i: -ys[i])
    heights = [min(max(ys[i], low), high) for i in order]
    for _ in range(2):  # push down from the top, then up from the bottom, then down again
        for k in range(1, len(heights)):
            heights[k] = min(heights[k], heights[k - 1] - gap)
        if heights and heights[-1] < low:
            heights[-1] = low
            for k in range(len(heights) - 2, -1, -1):
                heights[k] = max(heights[k], heights[k + 1] + gap)
    out = [0.0] * len(ys)
    for rank, i in enumerate(order):
        out[i] = heights[rank]
    return out


def _point_label(point: dict, with_dataset: bool, uneven: bool) -> str:
    """A point's label inside its backend's column: its positional methods (dataset if several, seed
    count if they differ, collapsed runs left out)."""
    text = positions_key(point["variant"]) + (f" · {point['dataset']}" if with_dataset else "")
    if uneven:
        text += f" ({point['seeds']})"
    if point.get("collapsed"):
        text += f" [{point['collapsed']} collapsed, left out]"
    return text


def _y_limits(points: list[dict]) -> tuple[float, float]:
    """The shared top-1 axis: the means and seed ranges, except a range reaching more than 2 points
    below the lowest mean (its bar is cut and its low end written at the bottom)."""
    floor = min(p["top-1 %"] for p in points) - 2.0
    low = min(max(p["low"], floor) for p in points)
    high = max(p["high"] for p in points)
    pad = 0.08 * ((high - low) or 1.0)
    return low - pad, high + pad


def accuracy_vs_cost(points: list[dict], title: str = "", no_bench: str = ""):
    """Test top-1 % against each cost (rows: MFLOPs and, with a speed benchmark, inference and
    training time), one column per backend; each point a variant, its bar the range over seeds, its
    label (positional methods) in a column right of the data with a leader line, so labels never
    overlap. `no_bench`: the sentence shown instead of the time rows."""
    import matplotlib.pyplot as plt

    axes_used = [(key, label) for key, label in COST_AXES if any(key in p for p in points)]
    backends = list(dict.fromkeys(p["backend"] for p in points))
    fig, axes = plt.subplots(
        len(axes_used),
        len(backends),
        figsize=(5.0 * len(backends), 3.4 * len(axes_used) + 0.7),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    several = len({p["dataset"] for p in points}) > 1
    uneven = len({p["seeds"] for p in points}) > 1
    y_low, y_high = _y_limits(points)
    gap = LABEL_GAP * (y_high - y_low)
    for row, (key, label) in enumerate(axes_used):
        xs = [p[key] for p in points if key in p]
        x_low, x_span = min(xs), _span(xs)
        x_text = x_low + 1.12 * x_span
        for column, backend in enumerate(backends):
            axis = axes[row, column]
            mine = [p for p in points if p["backend"] == backend and key in p]
            heights = label_heights([p["top-1 %"] for p in mine], y_low + gap / 2, y_high - gap / 2, gap)
            for p, height in zip(mine, heights, strict=True):
                style = variant_style(p["variant"])
                shown_low = max(p["low"], y_low)
                axis.errorbar(
                    p[key],
                    p["top-1 %"],
                    yerr=[[p["top-1 %"] - shown_low], [p["high"] - p["top-1 %"]]],
                    color=style["color"],
                    marker=style["marker"],
                    markerfacecolor=style["markerfacecolor"],
                    markersize=7,
                    capsize=2,
                    linestyle="none",
                )
                if p["low"] < y_low:  # the bar goes on below the axis: say where it ends
                    axis.annotate(
                        f"↓ {p['low']:.1f}", (p[key], y_low), xytext=(3, 2), textcoords="offset points", fontsize=7
                    )
                axis.annotate(
                    _point_label(p, several, uneven),
                    (p[key], p["top-1 %"]),
                    xytext=(x_text, height),
                    textcoords="data",
                    fontsize=7,
                    va="center",
                    color="0.15",
                    arrowprops={"arrowstyle": "-", "color": "0.65", "lw": 0.5, "shrinkA": 0, "shrinkB": 4},
                )
            axis.set_xlim(x_low - 0.12 * x_span, x_low + (1.12 + LABEL_ROOM) * x_span)
            axis.set_ylim(y_low, y_high)
            axis.grid(alpha=0.3)
            axis.set_xlabel(label, fontsize=8)
            if row == 0:
                axis.set_title(backend)
        axes[row, 0].set_ylabel("test top-1 %")
    if no_bench:
        fig.text(0.5, -0.02, no_bench, ha="center", va="top", fontsize=8, wrap=True)
    seeds = max((p["seeds"] for p in points), default=1)
    if uneven:
        title += "\n(point: mean over the variant's seeds, their number in brackets; bar: lowest … highest seed)"
    elif seeds > 1:
        title += f"\n(point: mean over {seeds} seeds; bar: lowest … highest seed)"
    fig.suptitle(title)
    return fig


def accuracy_vs_cost_interactive(points: list[dict], title: str = ""):
    """Plotly: test top-1 % against the benchmark's inference time (MFLOPs without a benchmark), one
    trace per variant in its look, the seed range as an error bar."""
    import plotly.graph_objects as go

    key, label = (
        ("ms_per_image_batched", COST_AXES[1][1]) if all("ms_per_image_batched" in p for p in points) else COST_AXES[0]
    )
    several = len({p["dataset"] for p in points}) > 1
    fig = go.Figure()
    for p in points:
        look = plotly_style(variant_style(p["variant"]))
        left_out = f"<br>{p['collapsed']} collapsed run(s) left out" if p.get("collapsed") else ""
        fig.add_trace(
            go.Scatter(
                x=[p[key]],
                y=[p["top-1 %"]],
                mode="markers",
                marker={**look["marker"], "size": 11},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [p["high"] - p["top-1 %"]],
                    "arrayminus": [p["top-1 %"] - p["low"]],
                },
                name=p["variant"] + (f" · {p['dataset']}" if several else ""),
                hovertemplate=(
                    f"{p['variant']} · {p['dataset']}<br>top-1 %{{y:.2f}}% (mean of {p['seeds']} seeds, "
                    f"{p['low']:.2f}…{p['high']:.2f}){left_out}<br>%{{x:.3f}} {label}<br>"
                    f"{p['mflops']:.2f} MFLOPs / image<extra></extra>"
                ),
            )
        )
    fig.update_layout(title=title, xaxis_title=label, yaxis_title="test top-1 %", height=560)
    return fig
