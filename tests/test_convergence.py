"""rpevit.convergence: the plateau rule per run, and the study's convergence in words."""

from __future__ import annotations

import pytest

from rpevit.convergence import convergence_rows, convergence_text


def _run(variant, seed, val, status="finished"):
    record = {"dataset": "d", "variant": variant, "seed": seed, "status": status}
    return record, [{"val_acc": v} for v in val]


FLAT = [0.80, 0.85, 0.88, 0.89, 0.900, 0.901, 0.901, 0.900, 0.901, 0.901]  # +0.1 point over the last 2 epochs
RISING = [0.80, 0.85, 0.88, 0.89, 0.890, 0.892, 0.894, 0.896, 0.898, 0.905]  # +0.9 points, best at the last


def test_rows_measure_each_run_and_leave_out_unfinished_or_historyless_runs():
    rows = convergence_rows(
        [_run("a", 1, FLAT), _run("b", 1, RISING), _run("c", 1, FLAT, "diverged"), _run("d", 1, [])]
    )
    assert [(r["variant"], r["best epoch"], r["plateau met"]) for r in rows] == [("a", 6, True), ("b", 10, False)]
    assert rows[0]["val gain over last 20% (points)"] == pytest.approx(0.0)  # best 90.1 % already at epoch 6
    assert rows[1]["val gain over last 20% (points)"] == pytest.approx(0.9)  # 90.5 − 89.6, the best before the window


def test_the_text_calls_a_study_converged_only_when_nine_in_ten_runs_meet_the_rule():
    nine_of_ten = convergence_rows([_run("a", s, FLAT) for s in range(9)] + [_run("b", 0, RISING)])
    text = convergence_text(nine_of_ten)
    assert "met by **9 of 10 finished runs**" in text and "near convergence" in text and "not converged" not in text
    half = convergence_text(convergence_rows([_run("a", 0, FLAT), _run("b", 0, RISING)]))
    assert "met by **1 of 2 finished runs**" in half and "**not converged**" in half
    assert "1 of 2 runs had their best validation epoch at the last one (10 epochs)" in half
    assert "median of 0.45 points (range 0.00 to 0.90)" in half
    assert "cannot be judged" in convergence_text([])
