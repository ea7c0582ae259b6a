"""analysis.convergence: the plateau rule per run, and the study's convergence in words."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from analysis.convergence import convergence_rows, convergence_text
from rpevit.lab.result import results


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
    assert "this preset names none" in half and "measures it: below" not in half  # no check to point to
    checked = convergence_text(convergence_rows([_run("a", 0, FLAT), _run("b", 0, RISING)]), checked=True)
    assert "the design's longer-budget check measures it: below" in checked and "names none" not in checked
    assert "cannot be judged" in convergence_text([])


COLLAPSING = [0.76, 0.81, 0.845, 0.83, 0.83, 0.80, 0.49, 0.14, 0.08, 0.10]  # best at epoch 3, then chance


def test_a_collapsed_run_is_named_and_does_not_count_as_at_a_plateau():
    """Validation top-1 falling to chance with a finite loss (favor+gate_string+ape in fmnist_converged):
    its early best epoch leaves no gain over the last epochs, but that is no plateau."""
    runs = [_run("a", 0, FLAT), _run("b", 4, COLLAPSING), _run("c", 0, RISING)]
    rows = convergence_rows([(dict(record, dataset="fashion_mnist"), history) for record, history in runs])
    assert [(r["collapsed"], r["plateau met"]) for r in rows] == [(False, True), (True, False), (False, False)]
    assert rows[1]["val gain over last 20% (points)"] == pytest.approx(0.0) and rows[1]["best epoch"] == 3
    text = convergence_text(rows)
    assert "met by **1 of 3 finished runs**" in text and "**1 of 3 runs collapsed**" in text
    assert "b seed 4, best at epoch 3, 10.0 % at the last" in text
    assert "top-1 of the runs that did not collapse still gained a median of 0.45 points (range 0.00 to 0.90)" in text
    assert "collapsed" not in convergence_text(rows[:1] + rows[2:])
    from analysis.convergence import chance_level, collapsed

    assert chance_level("fashion_mnist") == 0.1 and chance_level("cifar100") == 0.01 and chance_level("d") == 0.0
    assert collapsed([0.845, 0.47], 0.1) and not collapsed([0.845, 0.48], 0.1)  # halfway: 47.25 %
    assert not collapsed([0.09, 0.05], 0.1)  # never above chance: nothing to fall from


def _contrast_design():
    from rpevit.lab.design import Contrast, Design

    gap = Contrast("gap", "equal", {"favor+ape": 1, "softmax+ape": -1})
    return Design(primary=("softmax+ape", "favor+ape"), contrasts=(gap,))


def _records(top1: dict, epochs: int) -> list[dict]:
    return [
        {"dataset": "d", "variant": v, "seed": s, "status": "finished", "top1": a, "epochs": epochs}
        for (v, s), a in top1.items()
    ]


def test_the_budget_check_pairs_seeds_and_calls_a_contrast_moved_beyond_the_studys_half_width():
    from analysis.convergence import budget_check_rows
    from rpevit.core.stats import t_interval

    short = {("softmax+ape", s): 0.90 for s in (1, 2, 3)} | {("favor+ape", 1): 0.89, ("favor+ape", 2): 0.895}
    short[("favor+ape", 3)] = 0.885  # gaps −1.0, −0.5, −1.5 points at the short budget
    long = {("softmax+ape", 1): 0.91, ("favor+ape", 1): 0.912, ("softmax+ape", 2): 0.91, ("favor+ape", 2): 0.91}
    long[("softmax+ape", 3)] = 0.91  # seed 3 lacks favor+ape at the long budget: not paired
    (row,) = budget_check_rows(_contrast_design(), _records(short, 26), _records(long, 52))
    half = t_interval([-1.0, -0.5, -1.5], 0.95)
    assert row["short budget 95% half-width (points)"] == pytest.approx(half["high"] - half["mean"])  # 1.24
    assert row["paired seeds"] == "1, 2" and row["per-seed change (points)"] == "+1.20, +0.50"
    assert row["short budget (points)"] == pytest.approx(-0.75) and row["long budget (points)"] == pytest.approx(0.1)
    assert row["mean change (points)"] == pytest.approx(0.85) and row["reading"] == "holds"  # 0.85 < 1.24
    moved = dict(long) | {("favor+ape", 2): 0.925}  # changes +1.2, +2.0: mean 1.6 > 1.24
    assert budget_check_rows(_contrast_design(), _records(short, 26), _records(moved, 52))[0]["reading"] == "moved"
    # tested against all seeds' spread: σ = SD(−1.0, −0.5, −1.5) = 0.5, df 2, se = σ·√(2/2)
    assert row["tested"] == "no change detected"
    assert row["p (change)"] == pytest.approx(2 * scipy_stats.t.sf(0.85 / 0.5, 2))
    half_change = scipy_stats.t.ppf(0.975, 2) * 0.5
    assert row["95% interval of the change"] == f"[{0.85 - half_change:+.2f}, {0.85 + half_change:+.2f}]"
    far = dict(long) | {("favor+ape", 2): 0.96}  # changes +1.2, +5.0: mean 3.1, t = 6.2
    changed = budget_check_rows(_contrast_design(), _records(short, 26), _records(far, 52))[0]
    assert changed["tested"] == "changed" and changed["p (change)"] < 0.05
    (unpaired,) = budget_check_rows(_contrast_design(), _records(short, 26), [])
    assert unpaired["reading"] == "no paired seed yet" and unpaired["paired seeds"] == "—"


def test_the_budget_check_text_says_how_far_the_check_is_and_what_moved():
    from analysis.convergence import budget_check_text

    rows = [
        {"contrast": "gap A", "reading": "moved", "tested": "changed", "mean change (points)": 1.5,
         "paired seeds": "1, 2", "95% interval of the change": "[+0.50, +2.50]"},
        {"contrast": "gap B", "reading": "holds", "tested": "no change detected", "mean change (points)": 0.1,
         "paired seeds": "1, 2", "95% interval of the change": "[-0.90, +1.10]"},
        {"contrast": "gap C", "reading": "no paired seed yet", "mean change (points)": float("nan")},
    ]  # fmt: skip
    none = budget_check_text(rows[2:], [], "chk", 12, (26, 52))
    assert "none of its 12 runs has finished yet" in none and "holds at 26 epochs only" in none
    runs = convergence_rows([_run("a", s, FLAT) for s in range(3)] + [_run("b", 0, RISING)])
    text = budget_check_text(rows, runs, "chk", 12, (26, 52))
    assert (
        "4 of 12 runs finished; the plateau rule is met by 3 of them "
        "(75%: fewer than the 90% that calls runs converged)" in text
    )
    assert "Of 2 contrasts with paired seeds, 1 moved" in text and "(gap A +1.50 points)" in text
    assert "and 1 held" in text and "2 paired seeds, too few to test a change on its own" in text
    assert "added after the check was registered): 1 of 2 changed (gap A +1.50 points [+0.50, +2.50])." in text
    uneven = [rows[0], {**rows[1], "paired seeds": "1"}]
    text = budget_check_text(uneven, runs, "chk", 12, (26, 52))
    assert "the check has 1–2 paired seeds per contrast, too few" in text
    waiting = budget_check_text(rows[2:], runs, "chk", 12, (26, 52))
    assert waiting.endswith("No contrast has a seed finished at both budgets yet.")


def test_budget_check_reads_the_checks_records_and_histories(tmp_path, monkeypatch):
    """convergence.budget_check on a designed preset linked to its check: the check's planned runs,
    both budgets' epochs, its runs' plateau and the paired rows; None without a check."""
    from test_design import PRIMARY, checked, preset

    from analysis import convergence

    params = checked(tmp_path)  # the study: 2 epochs; its check: 4 epochs, seeds 0-1, 8 runs
    assert convergence.budget_check(preset(tmp_path), []) is None
    short = {(v, s): 0.90 - 0.01 * ("favor" in v) * s for v in PRIMARY for s in (0, 1, 2)}  # gap 0, −1, −2 points
    long = {(v, 0): 0.92 for v in PRIMARY}  # seed 0 finished at the long budget: gap 0
    as_records = [{**r, "dataset": "mnist5k"} for r in _records(long, 4)]
    monkeypatch.setattr(convergence, "study_records", lambda params, reports_root=None: results(as_records))
    monkeypatch.setattr(convergence, "run_history", lambda run: [{"val_acc": v} for v in FLAT])
    text, rows = convergence.budget_check(params, [{**r, "dataset": "mnist5k"} for r in _records(short, 2)])
    assert "at 4 epochs, not 2" in text and "4 of 8 runs finished; the plateau rule is met by 4 of them" in text
    gap, closed = rows  # the study's two contrasts
    assert closed["contrast"] == "closed" and closed["reading"] == "holds"  # (a−b)−(c−d): 0 at both budgets
    assert closed["tested"] == "no change detected"  # no spread to test against
    assert gap["paired seeds"] == "0" and gap["mean change (points)"] == pytest.approx(0.0)
    assert gap["short budget 95% half-width (points)"] == pytest.approx(2.484, abs=1e-3)  # t(0.975, 2) · 1 / √3
    assert gap["reading"] == "holds" and gap["tested"] == "no change detected"
    assert gap["p (change)"] == pytest.approx(1.0)


def test_budget_check_curves_pair_each_check_run_with_its_twin_and_draw_one_panel_per_variant(tmp_path, monkeypatch):
    from test_design import PRIMARY, checked, preset

    from analysis import convergence, plots

    params = checked(tmp_path)  # the study: 2 epochs; its check: 4 epochs
    assert convergence.budget_check_curves(preset(tmp_path)) == []  # no check named
    study = [{**r, "dataset": "mnist5k"} for r in _records({(v, s): 0.9 for v in PRIMARY for s in (0, 1)}, 2)]
    check = [{**r, "dataset": "mnist5k"} for r in _records({(v, 0): 0.9 for v in PRIMARY}, 4)]
    check.append({**check[0], "seed": 1, "status": "diverged"})  # unfinished: no pair
    check.append({**check[0], "seed": 3})  # no twin in the study: no pair
    monkeypatch.setattr(
        convergence, "study_records", lambda p, reports_root=None: results(study if p.name == params.name else check)
    )
    monkeypatch.setattr(
        convergence, "run_history", lambda run: [{"val_acc": 0.8 + 0.01 * e} for e in range(run.params.train.epochs)]
    )
    pairs = convergence.budget_check_curves(params)
    assert [(p["variant"], p["seed"]) for p in pairs] == [(v, 0) for v in PRIMARY]
    assert pairs[0]["short"] == pytest.approx([80.0, 81.0]) and pairs[0]["long"] == pytest.approx([80, 81, 82, 83])
    fig = plots.budget_curves(pairs)
    visible = [axis for axis in fig.axes if axis.get_visible()]
    assert [axis.get_title() for axis in visible] == PRIMARY
    assert len(visible[0].get_lines()) == 4  # two curves and two best-epoch markers


def test_collapsed_runs_are_split_off_for_every_family(monkeypatch):
    """One policy: a run whose validation top-1 fell toward chance is reported apart from the analysed ones."""
    from analysis import convergence
    from rpevit.lab.params import load_params

    histories = {1: [0.80, 0.85, 0.20], 2: [0.80, 0.85, 0.86]}  # seed 1 collapsed (fashion_mnist: chance 0.1)
    monkeypatch.setattr(convergence, "run_history", lambda run: [{"val_acc": v} for v in histories[run.seed]])
    found = [
        {"dataset": "fashion_mnist", "variant": "favor+ape", "seed": s, "status": "finished", "top1": 0.8}
        for s in (1, 2)
    ] + [{"dataset": "fashion_mnist", "variant": "favor+ape", "seed": 3, "status": "diverged"}]
    kept, apart = convergence.split_collapsed(load_params("smoke"), found)
    assert [r["seed"] for r in apart] == [1] and [r["seed"] for r in kept] == [2, 3]


def test_each_variants_change_with_the_longer_budget_is_tested_against_its_seeds_spread():
    from analysis.convergence import variant_change_sentence

    short = _records({("favor+ape", 1): 0.880, ("favor+ape", 2): 0.890, ("favor+ape", 3): 0.885}, 26)
    long = _records({("favor+ape", 1): 0.920, ("favor+ape", 2): 0.930}, 52)  # +4.0 points on both paired seeds
    text = variant_change_sentence(short, long, 52)
    sigma = 0.5  # SD of 88.0, 89.0, 88.5
    half = scipy_stats.t.ppf(0.975, 2) * sigma * math.sqrt(2 / 2)
    assert f"favor+ape +4.00 [+{4 - half:.2f}, +{4 + half:.2f}]" in text and "1 of 1 changed" in text
    assert variant_change_sentence(short, [], 52) == ""  # nothing finished at the longer budget
