"""The canvas answer's pieces (campaign/pilot_answer.py): the seed SD pooled over cells that share a design,
each canvas's task, and accuracy at softmax's training time from side-by-side costs."""

from __future__ import annotations

import csv
import math
import statistics

import pytest
from scipy import stats as scipy_stats

from campaign import pilot_answer
from rpevit.lab.params import load_params


def test_the_pooled_sd_is_the_df_weighted_variance_of_the_cells_with_two_values():
    cells = [[1.0, 2.0], [0.0, 0.5, 1.5], [9.0]]  # the lone value has no variance to give
    pooled = pilot_answer.pooled_sd(cells)
    variance = (1 * statistics.variance(cells[0]) + 2 * statistics.variance(cells[1])) / 3
    assert pooled["sd"] == pytest.approx(math.sqrt(variance)) and pooled["df"] == 3 and pooled["cells"] == 2
    assert pooled["bartlett_p"] == pytest.approx(scipy_stats.bartlett(*cells[:2]).pvalue)
    mean, low, high = pilot_answer.pooled_interval([-1.0, -0.5], pooled)
    half = scipy_stats.t.ppf(0.975, 3) * math.sqrt(variance) / math.sqrt(2)
    assert (mean, low, high) == pytest.approx((-0.75, -0.75 - half, -0.75 + half))
    assert pilot_answer.pooled_sd([[1.0], [2.0]]) is None
    assert pilot_answer.interval_text([-1.0], pooled) == "−1.00 (1 seed, no interval)"


def test_each_canvas_says_how_far_its_object_moves_and_how_favor_draws_its_features():
    assert pilot_answer.canvas_task(load_params("canvas_gap_pilot")) == (
        "40×40 moves the object ±6 px (169 placements shared by train and test)",
        "one fixed ω per layer",
    )
    assert pilot_answer.canvas_task(load_params("canvas56_gap_pilot"))[0].startswith("56×56 moves the object ±14 px")


def test_top1_between_budgets_is_interpolated_on_log_budget_and_never_extrapolated():
    budgets = {16: 85.0, 32: 88.0, 64: 91.0}
    assert pilot_answer.top1_at(budgets, 32) == 88.0
    assert pilot_answer.top1_at(budgets, 32 * math.sqrt(2)) == pytest.approx(89.5)  # halfway in log₂
    assert pilot_answer.top1_at(budgets, 8) is None and pilot_answer.top1_at(budgets, 65) is None


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _top1(favor_at: dict[int, float]) -> dict:
    top1 = {("softmax+ape", 1, 64): 91.0}
    return top1 | {("favor+ape", 1, b): value for b, value in favor_at.items()}


def test_equal_time_reads_the_token_benchmark_of_a_preset_with_the_same_model(tmp_path):
    params = load_params("canvas40_long")  # the 40×40 pilot's model and images: its token rows apply
    _write(
        tmp_path / "bench" / "cpu_tokens.csv",
        [
            {"variant": v, "preset": "canvas_gap_pilot", "train_seconds_per_image": s}
            for v, s in (("softmax+ape", 1.0), ("favor+ape", 2.0), ("softmax+ape", 1.0), ("favor+ape", 2.0))
        ]
        + [{"variant": "favor+ape", "preset": "canvas56_gap_pilot", "train_seconds_per_image": 9.0}],  # another model
    )
    assert pilot_answer.training_costs(tmp_path, params) == {"softmax+ape": 1.0, "favor+ape": 2.0}
    found = pilot_answer.equal_time(
        params, _top1({16: 85.0, 32: 88.0, 64: 91.5}), {"softmax+ape": 1.0, "favor+ape": 2.0}, "favor"
    )
    assert found["epochs"] == 32 and found["top1"] == 88.0 and found["gap"] == -3.0
    line = pilot_answer.equal_time_line(params, _top1({16: 85.0, 32: 88.0, 64: 91.5}), ["favor", "relu"], tmp_path)
    assert line.startswith(pilot_answer.EQUAL_TIME.format(source="bench/cpu_tokens.csv"))
    assert "favor on `canvas40_long` 88.0 vs 91.0 % (−3.00; 32.0 epochs at 2.00× the cost per image)" in line
    assert line.endswith("Not measured side by side on this model, so not compared at equal time: relu.")


def test_the_presets_own_speed_benchmark_comes_before_the_token_benchmark(tmp_path):
    params = load_params("canvas40_long")
    _write(
        tmp_path / "bench" / "cpu_tokens.csv",
        [{"variant": "softmax+ape", "preset": "canvas_gap_pilot", "train_seconds_per_image": 1.0}],
    )
    _write(
        tmp_path / "bench" / "cpu_speed_canvas40_long.csv",
        [
            {"round": r, "variant": v, "train_seconds_per_image": s}
            for r in range(3)
            for v, s in (("softmax+ape", 1.0 + r / 10), ("favor_redraw+ape", 1.6 + r / 10))
        ],
    )
    assert pilot_answer.cost_source(tmp_path, params).as_posix() == "bench/cpu_speed_canvas40_long.csv"
    assert pilot_answer.training_costs(tmp_path, params) == pytest.approx({"softmax+ape": 1.1, "favor_redraw+ape": 1.7})
    assert pilot_answer.cost_source(tmp_path, load_params("canvas_gap_pilot")).as_posix() == "bench/cpu_tokens.csv"


def test_without_softmax_timed_on_the_model_nothing_is_compared(tmp_path):
    line = pilot_answer.equal_time_line(load_params("canvas40_long"), {}, ["favor"], tmp_path)
    assert line.startswith("Equal training time: no side-by-side cost of this pilot's model")


def test_an_equal_time_budget_beyond_the_longest_is_named_not_extrapolated(tmp_path):
    params = load_params("canvas40_long")
    _write(
        tmp_path / "bench" / "cpu_speed_canvas40_long.csv",
        [{"variant": v, "train_seconds_per_image": c} for v, c in (("softmax+ape", 1.0), ("relu+ape", 0.8))],
    )
    top1 = {("softmax+ape", 1, 64): 91.0} | {("relu+ape", 1, b): t for b, t in ((16, 86.0), (32, 89.0), (64, 90.6))}
    line = pilot_answer.equal_time_line(params, top1, ["relu", "favor"], tmp_path)
    assert "Outside the budgets measured at softmax's training time, so not compared: relu (80.0 epochs)." in line
    assert line.endswith("so not compared at equal time: favor.")
    assert "relu on" not in line
