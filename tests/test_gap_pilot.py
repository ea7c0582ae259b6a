"""The gap pilot's report: gaps per budget from the records and their branches, the pre-registered
go/no-go rule and the factorial's seed count."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from rpevit.analysis import gap_pilot
from rpevit.lab.result import results


def _record(variant, seed, top1_by_budget):
    budgets = {str(b): {"top1": t / 100} for b, t in top1_by_budget.items() if b != 32}
    return {
        "variant": variant,
        "seed": seed,
        "status": "finished",
        "epochs": 32,
        "top1": top1_by_budget[32] / 100,
        "budgets": budgets,
    }


def _found(favor_gap_32, relu_gap_32):
    found = []
    for seed, wobble in ((1, 0.0), (2, 0.4)):
        soft = {8: 80.0, 16: 84.0, 32: 86.0}
        found.append(_record("softmax+ape", seed, soft))
        found.append(_record("favor+ape", seed, {8: 79.0, 16: 83.0, 32: 86.0 + favor_gap_32 + wobble}))
        found.append(_record("relu+ape", seed, {8: 80.0, 16: 84.0, 32: 86.0 + relu_gap_32 - wobble}))
    return found


def test_gaps_per_budget_come_from_records_and_their_branches():
    top1 = gap_pilot.budget_top1(_found(-2.0, -0.5))
    rows = {(r["backend"], r["epochs"]): r for r in gap_pilot.gap_rows(top1, [8, 16, 32], [1, 2])}
    assert rows[("favor", 8)]["mean gap"] == pytest.approx(-1.0)
    assert rows[("favor", 32)]["mean gap"] == pytest.approx(-1.8) and rows[("favor", 32)]["seeds"] == 2
    assert rows[("favor", 32)]["SD"] == pytest.approx(0.4 / math.sqrt(2))
    assert rows[("relu", 32)]["gaps (per seed)"] == "−0.50, −0.90"


def test_go_no_go_is_the_pre_registered_rule():
    for favor, relu, go in ((-2.0, -0.5, True), (-1.0, -0.5, False), (0.5, -1.6, True)):
        rows = gap_pilot.gap_rows(gap_pilot.budget_top1(_found(favor, relu)), [8, 16, 32], [1, 2])
        line = gap_pilot.decision(rows, 32, complete=True)
        assert line.startswith("**GO**" if go else "**NO-GO**"), line
    assert gap_pilot.decision(gap_pilot.gap_rows({}, [32], [1, 2]), 32, True).startswith("**Go/no-go: not decided")


def test_seed_count_reaches_a_quarter_of_the_gap():
    n = gap_pilot.seeds_needed(2.0, 1.0)
    half_width = lambda k: scipy_stats.t.ppf(0.975, k - 1) / math.sqrt(k)  # noqa: E731
    assert half_width(n) <= 0.5 < half_width(n - 1)
    assert gap_pilot.seeds_needed(0.01, 1.0) is None
    rows = gap_pilot.gap_rows(gap_pilot.budget_top1(_found(-2.0, -0.5)), [32], [1, 2])
    text = gap_pilot.factorial_seeds(rows, 32)
    assert "G = 1.80 points" in text and "0.83" in text  # √2 × 0.28 < 0.83: the floor holds


def test_the_report_is_written_from_the_records(tmp_path, monkeypatch):
    from rpevit.lab import catalog

    monkeypatch.setattr(catalog, "study_records", lambda params, reports_root=None: results(_found(-2.0, -0.5)))
    lines = gap_pilot.write_report("canvas_gap_pilot", reports_root=tmp_path)
    text = (tmp_path / "canvas_gap_pilot" / "README.md").read_text()
    assert text == "\n".join(lines) + "\n" and "6 of 6 runs finished" in text
    assert "**GO**: favor is behind softmax by 1.80 points at 32 epochs" in text
    assert "| favor+ape | 2 | 79.00 | 83.00 | 84.40 |" in text  # the per-run table, budgets from the branches
    assert (tmp_path / "canvas_gap_pilot" / "pilot_gaps.csv").is_file()


def test_a_no_go_names_the_next_pilot_of_the_pre_registered_order():
    rows = gap_pilot.gap_rows(gap_pilot.budget_top1(_found(-1.0, -0.5)), [8, 16, 32], [1, 2])
    after_40 = gap_pilot.decision(rows, 32, True, "fashion_mnist_canvas40")
    after_56 = gap_pilot.decision(rows, 32, True, "fashion_mnist_canvas56")
    assert "params/canvas56_gap_pilot.yaml" in after_40 and "feature-count dial" in after_56
    assert "no pilot opened a gap" in gap_pilot.decision(rows, 32, True, "something_else")


def test_the_56_pilot_is_the_40_pilot_on_the_larger_canvas():
    """Pre-registered to differ from the 40×40 pilot only in its task."""
    import dataclasses

    from rpevit.lab.params import load_params

    forty, fifty_six = load_params("canvas_gap_pilot"), load_params("canvas56_gap_pilot")
    assert fifty_six.datasets == ("fashion_mnist_canvas56",)
    same = ("variants", "seeds", "model", "train", "data", "order", "keep_records")
    assert {k: getattr(fifty_six, k) for k in same} == {k: getattr(forty, k) for k in same}
    renamed = dataclasses.replace(fifty_six, name=forty.name, description=forty.description, datasets=forty.datasets)
    assert renamed == forty
