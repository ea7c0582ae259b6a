"""The notebooks' figures (analysis.plots): seed bands, accuracy in %, integer epochs, one look per
variant in matplotlib and plotly alike, accuracy vs cost faceted by backend with its time axes
from the speed benchmark only, and a resolution legend naming every variant."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from analysis import cost_plots, plots  # noqa: E402
from analysis.report import variant_style  # noqa: E402
from analysis.styles import BACKEND_COLOURS, figure_styles  # noqa: E402

VARIANTS = ["softmax+ape", "favor+rope_mixed", "favor+rope_mixed+ape", "relu+krpe"]


def _history(seed: int, epochs: int = 3):
    return [
        {"epoch": e, "train_loss": 1.0 / e + seed, "val_loss": 1.2 / e, "val_acc": 0.5 + 0.1 * e + 0.01 * seed}
        for e in range(1, epochs + 1)
    ]


def _record(variant: str, seed: int, top1: float):
    return {
        "dataset": "fashion_mnist",
        "variant": variant,
        "seed": seed,
        "top1": top1,
        "flops_per_image": 2e7 if variant.startswith("softmax") else 1.5e7,
        "train_seconds_per_epoch": 99.0,  # a busy machine's timing: must never reach the figure
        "ms_per_image_batched": 99.0,
        "resolution_eval": [
            {"resolution": r, "mode": m, "trained_resolution": 28, "top1": top1 - abs(r - 28) / 100}
            for r in (20, 28, 36)
            for m in ("extrapolate", "interpolate")
        ],
    }


def test_over_seeds_mean_and_range():
    line = plots.over_seeds({"a": [{1: 1.0, 2: 2.0}, {1: 3.0, 2: 4.0}, {1: 2.0}]})["a"]
    assert line == {"x": [1, 2], "mean": [2.0, 3.0], "low": [1.0, 2.0], "high": [3.0, 4.0], "seeds": 3}


def test_training_curves_band_percent_integer_epochs_and_one_entry_per_variant():
    histories = [(v, s, _history(s)) for v in VARIANTS for s in (0, 1, 2)]
    bands = plots.curve_bands(histories)
    accuracy = bands["val_acc"]["softmax+ape"]
    assert accuracy["mean"][0] == pytest.approx(61.0) and accuracy["low"][0] == pytest.approx(60.0)  # in %
    fig = plots.training_curves(histories, "t")
    axes = fig.axes
    assert len(axes[0].lines) == len(VARIANTS)  # one mean line per variant, not one per run
    assert len(axes[0].collections) == len(VARIANTS)  # and its seed band
    fig.canvas.draw()
    ticks = [t for t in axes[0].get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert axes[2].get_title() == "validation top-1 %"
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == VARIANTS
    assert "band" in legend.get_title().get_text()
    plt.close(fig)


def test_variants_that_share_their_encoding_are_told_apart_by_the_backends_colour():
    """A pilot's lines (softmax, FAVOR+, ReLU, each + ape) would all take ape's colour: there each takes its
    backend's, in the plot and its legend alike; a figure whose encodings differ keeps the encoding's colour."""
    pilot = ["softmax+ape", "favor+ape", "relu+ape"]
    styles = figure_styles(pilot)
    assert len({s["color"] for s in styles.values()}) == 3 and {s["color"] for s in styles.values()} <= set(
        BACKEND_COLOURS
    )
    assert [s["marker"] for s in styles.values()] == [variant_style(v)["marker"] for v in pilot]
    assert figure_styles(VARIANTS) == {v: variant_style(v) for v in VARIANTS}
    assert figure_styles(["favor+ape", "favor+ape"]) == {"favor+ape": variant_style("favor+ape")}
    fig = plots.training_curves([(v, 0, _history(0)) for v in pilot], "t")
    legend = {t.get_text(): h.get_color() for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
    assert legend == {v: styles[v]["color"] for v in pilot}
    assert [line.get_color() for line in fig.axes[2].lines] == [styles[v]["color"] for v in pilot]
    plt.close(fig)


def test_a_run_in_flight_is_drawn_dotted_per_seed_apart_from_the_means():
    histories = [("softmax+ape", s, _history(s)) for s in (0, 1)]
    flying = [("favor+ape", s, _history(s)[:2]) for s in (0, 1)]
    fig = plots.training_curves(histories, "t", in_flight=flying)
    flying_colour = figure_styles(["softmax+ape", "favor+ape"])["favor+ape"]["color"]
    for axis in fig.axes[:3]:
        dotted = [line for line in axis.lines if line.get_linestyle() == ":"]
        assert len(dotted) == 2 and all(len(line.get_xdata()) == 2 for line in dotted)  # a line per seed
        assert {line.get_color() for line in dotted} == {flying_colour}
        assert len(axis.lines) == 3  # softmax's mean, not mixed with them
    assert list(fig.axes[2].lines[-1].get_ydata()) == pytest.approx([100 * r["val_acc"] for r in _history(1)[:2]])
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["softmax+ape", "favor+ape"]
    assert "still training" in legend.get_title().get_text()
    plt.close(fig)


def test_a_collapsed_run_is_drawn_apart_and_left_out_of_its_variants_mean():
    histories = [(v, s, _history(s)) for v in VARIANTS for s in (0, 1)]
    fallen = _history(2)[:2] + [dict(_history(2)[2], val_acc=0.1)]  # 72 % at epoch 2, then chance
    histories.append(("favor+rope_mixed", 2, fallen))
    fig = plots.training_curves(histories, "t", collapsed={("favor+rope_mixed", 2)})
    assert len(fig.axes) == 4 and fig.axes[3].get_title() == "collapsed runs: validation top-1 %"
    assert [line.get_ydata()[-1] for line in fig.axes[3].lines] == pytest.approx([10.0])
    mean = next(line for line in fig.axes[2].lines if line.get_color() == variant_style("favor+rope_mixed")["color"])
    assert min(mean.get_ydata()) > 50  # seeds 0 and 1 only
    assert "own panel" in fig.legends[0].get_title().get_text()
    plt.close(fig)
    assert len(plots.training_curves(histories[:-1], "t", collapsed=set()).axes) == 3
    interactive = plots.training_curves_interactive(histories, "t", collapsed={("favor+rope_mixed", 2)})
    apart = [t for t in interactive.data if t.name == "favor+rope_mixed seed 2 (collapsed)"]
    assert len(apart) == 3 and all(t.visible == "legendonly" for t in apart) and apart[2].y[-1] == pytest.approx(10)
    from analysis.convergence import collapsed_runs

    assert collapsed_runs(histories, "fashion_mnist") == {("favor+rope_mixed", 2)}


def test_the_pilots_gap_figure_draws_each_seed_each_mean_and_the_go_line_per_backend():
    series = [
        {"pilot": "a", "backend": "favor", "gaps": {8: [1.0, 0.5], 16: [0.2, -0.4], 32: [-1.0, -0.2]}},
        {"pilot": "b", "backend": "favor", "gaps": {8: [0.8], 16: [0.1], 32: []}},  # a budget without pairs: no point
        {"pilot": "a", "backend": "relu", "gaps": {8: [-0.7, 0.6], 16: [0.3, 0.3], 32: [-0.6, -0.5]}},
    ]
    fig = plots.pilot_gaps_figure(series, threshold=1.5)
    favor, relu = fig.axes
    assert [favor.get_title(), relu.get_title()] == ["favor − softmax (with APE)", "relu − softmax (with APE)"]
    means = [line for line in favor.lines if line.get_label() in ("a", "b")]
    assert [list(m.get_ydata()) for m in means] == [pytest.approx([0.75, -0.1, -0.6]), [0.8, 0.1]]
    dots = sorted(y for line in favor.lines if line.get_alpha() == 0.35 for y in line.get_ydata())
    assert dots == sorted([1.0, 0.5, 0.2, -0.4, -1.0, -0.2, 0.8, 0.1])  # every seed of every pilot
    go = [line for line in relu.lines if line.get_label() == "GO: −1.5"]
    assert len(go) == 1 and list(go[0].get_ydata()) == [-1.5, -1.5]
    assert [t.get_text() for t in favor.get_xticklabels()] == ["8", "16", "32"]
    plt.close(fig)


def test_plotly_figures_use_each_variants_one_look():
    histories = [(v, s, _history(s)) for v in VARIANTS for s in (0, 1)]
    fig = plots.training_curves_interactive(histories, "t")
    means = {t.name: t for t in fig.data if t.mode == "lines+markers" and t.showlegend}
    assert list(means) == VARIANTS
    for variant, trace in means.items():
        style = variant_style(variant)
        assert trace.marker.color == trace.line.color == style["color"]
    assert means["favor+rope_mixed+ape"].marker.symbol == "square-open"
    assert means["favor+rope_mixed"].marker.symbol == "square" and means["relu+krpe"].marker.symbol == "triangle-up"
    assert fig.layout.xaxis.tickformat == "d"
    assert sum(t.fill == "toself" for t in fig.data) == 3 * len(VARIANTS)  # a band per variant and panel


def test_accuracy_vs_cost_faceted_by_backend_with_benchmark_times_only():
    done = [_record(v, s, 0.8 + 0.01 * s) for v in VARIANTS for s in (0, 1, 2)]
    speed = [
        {"variant": v, "round": r, "ms_per_image_batched": 0.5 + r, "train_seconds_per_image": 0.001}
        for v in VARIANTS
        for r in (0, 1, 2)
    ]
    points = cost_plots.accuracy_cost_points(done, speed)
    assert len(points) == len(VARIANTS)  # one point per variant, not per run
    point = next(p for p in points if p["variant"] == "softmax+ape")
    assert point["top-1 %"] == pytest.approx(81.0) and (point["low"], point["high"]) == pytest.approx((80.0, 82.0))
    assert point["ms_per_image_batched"] == 1.5 and point["train_ms_per_image"] == pytest.approx(1.0)  # medians
    fig = cost_plots.accuracy_vs_cost(points, "t")
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles == ["softmax", "favor", "relu"] and len(fig.axes) == 9  # 3 costs × 3 backends
    labels = {t.get_text() for a in fig.axes for t in a.texts}
    assert {"ape", "rope_mixed", "rope_mixed+ape", "krpe"} <= labels
    for axis in fig.axes:
        for line in axis.lines:
            assert 99.0 not in list(line.get_xdata())  # the runs' own timings never plotted
    plt.close(fig)

    bare = cost_plots.accuracy_cost_points(done, None)
    assert all("ms_per_image_batched" not in p for p in bare)
    fig = cost_plots.accuracy_vs_cost(bare, "t", no_bench="No speed benchmark for p")
    assert len(fig.axes) == 3 and {a.get_xlabel() for a in fig.axes} == {"matmul MFLOPs / image"}
    assert any("No speed benchmark" in t.get_text() for t in fig.texts)
    plt.close(fig)
    interactive = cost_plots.accuracy_vs_cost_interactive(bare, "t")
    assert interactive.layout.xaxis.title.text == "matmul MFLOPs / image"
    trace = next(t for t in interactive.data if t.name == "relu+krpe")
    assert trace.marker.color == variant_style("relu+krpe")["color"] and trace.marker.symbol == "triangle-up"


def test_resolution_legend_names_every_variant():
    found = [_record(v, s, 0.8) for v in VARIANTS for s in (0, 1)]
    fig = plots.resolution_figure(found, "t")
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == VARIANTS + ["training resolution (28 px)"]
    markers = [h.get_marker() for h in legend.legend_handles[: len(VARIANTS)]]
    assert markers == [variant_style(v)["marker"] for v in VARIANTS]
    plt.close(fig)


def test_accuracy_vs_cost_names_the_dataset_when_there_are_several():
    done = [_record("softmax+ape", 0, 0.8), {**_record("softmax+ape", 0, 0.9), "dataset": "mnist5k"}]
    points = cost_plots.accuracy_cost_points(done, None)
    assert len(points) == 2
    fig = cost_plots.accuracy_vs_cost(points, "t")
    assert {t.get_text() for t in fig.axes[0].texts} == {"ape · fashion_mnist", "ape · mnist5k"}
    plt.close(fig)


def test_accuracy_vs_cost_says_each_seed_count_when_they_differ():
    """Primary variants with 8 seeds beside secondary ones with 3: the title cannot say one count."""
    done = [_record("softmax+ape", s, 0.8) for s in range(8)] + [_record("softmax+krpe", s, 0.8) for s in range(3)]
    fig = cost_plots.accuracy_vs_cost(cost_plots.accuracy_cost_points(done, None), "t")
    assert {t.get_text() for t in fig.axes[0].texts} == {"ape (8)", "krpe (3)"}
    assert "their number in brackets" in fig._suptitle.get_text() and "8 seeds" not in fig._suptitle.get_text()
    plt.close(fig)
    fig = cost_plots.accuracy_vs_cost(cost_plots.accuracy_cost_points(done[:8], None), "t")
    assert "mean over 8 seeds" in fig._suptitle.get_text() and {t.get_text() for t in fig.axes[0].texts} == {"ape"}
    plt.close(fig)


def test_accuracy_vs_cost_labels_never_overlap_and_a_long_bar_is_cut_with_its_end_written():
    """Crowded points get labels at least LABEL_GAP of the axis apart; a collapsed run is left out of
    its variant's mean (and said so); a seed range far below the rest is cut at the axis with its low end."""
    done = [_record(v, s, 0.90 + 0.0001 * s) for v in VARIANTS for s in (0, 1, 2)]
    done += [_record("relu+krpe", 3, 0.70)]  # one bad seed: its range reaches 70 %
    done += [_record("favor+rope_mixed", 9, 0.10)]  # collapsed
    points = cost_plots.accuracy_cost_points(done, None, collapsed={("favor+rope_mixed", 9)})
    favor = next(p for p in points if p["variant"] == "favor+rope_mixed")
    assert favor["collapsed"] == 1 and favor["low"] > 89
    fig = cost_plots.accuracy_vs_cost(points, "t")
    for axis in fig.axes:
        low, high = axis.get_ylim()
        assert low > 80  # not stretched to the cut range
        labels = [t for t in axis.texts if not t.get_text().startswith("↓")]
        heights = sorted(t.xyann[1] for t in labels)
        assert all(b - a >= cost_plots.LABEL_GAP * (high - low) - 1e-9 for a, b in zip(heights, heights[1:]))
        assert all(low <= h <= high for h in heights)
    texts = {t.get_text() for a in fig.axes for t in a.texts}
    assert "↓ 70.0" in texts and any("[1 collapsed, left out]" in t for t in texts)
    plt.close(fig)


def test_label_heights_keep_their_order_and_stay_inside():
    heights = cost_plots.label_heights([5.0, 5.0, 5.0, 1.0], 0.0, 6.0, 1.0)
    assert heights[3] == min(heights)  # the lowest point keeps the lowest label
    ordered = sorted(heights)
    assert all(b - a >= 1.0 - 1e-12 for a, b in zip(ordered, ordered[1:]))
    assert 0.0 <= min(heights) and max(heights) <= 6.0
    assert cost_plots.label_heights([], 0, 1, 0.1) == []
