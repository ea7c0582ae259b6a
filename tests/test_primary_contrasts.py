"""The longer-budget study's pre-registered primary contrasts (params/canvas40_long.yaml): per Performer,
its gap at 64 epochs and the gap's change from 32, paired by seed, with 95 % t-intervals, one family
under Holm over the contrasts that have two seeds or more."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from campaign import gap_pilot, primary_contrasts
from rpevit.lab.params import load_params
from rpevit.lab.result import results
from rpevit.lab.tables import signed

from helpers import canvas40_record

BACKENDS = ["favor", "relu"]
VARIANTS = ("softmax+ape", "favor+ape", "favor_redraw+ape", "relu+ape")


def _top1(favor: dict[int, tuple[float, float]], relu: dict[int, tuple[float, float]]) -> dict:
    """Per seed: each Performer's (gap at 32, gap at 64) against a softmax at 88 and 91 %."""
    top1 = {}
    for seed in favor.keys() | relu.keys():
        top1 |= {("softmax+ape", seed, 32): 88.0, ("softmax+ape", seed, 64): 91.0}
        for backend, gaps in (("favor", favor), ("relu", relu)):
            if seed in gaps:
                top1 |= {(f"{backend}+ape", seed, 32): 88.0 + gaps[seed][0]}
                top1 |= {(f"{backend}+ape", seed, 64): 91.0 + gaps[seed][1]}
    return top1


def _rows(top1, seeds=(1, 2, 3, 4)):
    rows = primary_contrasts.contrast_rows(top1, list(seeds), BACKENDS, 32, 64)
    return {r["contrast"]: r for r in rows}


def test_each_contrast_is_a_paired_t_interval_and_a_two_sided_p_over_its_seeds():
    favor = {1: (-0.5, -2.0), 2: (-0.4, -1.8), 3: (-0.6, -2.3), 4: (-0.5, -1.9)}
    rows = _rows(_top1(favor, {1: (0.0, 0.1), 2: (0.0, -0.1)}))
    gap = rows["favor − softmax at 64"]
    values = [-2.0, -1.8, -2.3, -1.9]
    low, high = scipy_stats.t.interval(0.95, 3, loc=sum(values) / 4, scale=scipy_stats.sem(values))
    assert gap["seeds"] == 4 and gap["low"] == pytest.approx(low) and gap["high"] == pytest.approx(high)
    assert gap["p"] == pytest.approx(scipy_stats.ttest_1samp(values, 0.0).pvalue)
    change = rows["change of favor − softmax, 32→64"]
    assert change["per seed"] == "−1.50, −1.40, −1.70, −1.40" and change["mean"] == pytest.approx(-1.5)
    assert gap["reading"] == "softmax ahead" and change["reading"] == "softmax's lead grew"
    assert rows["relu − softmax at 64"]["seeds"] == 2 and rows["relu − softmax at 64"]["reading"] == "inconclusive"


def test_holm_adjusts_over_the_testable_contrasts_only():
    """A contrast with one seed has no p and leaves the family's size: here 2 of 4 contrasts are testable."""
    favor = {1: (-0.5, -2.0), 2: (-0.4, -1.8), 3: (-0.6, -2.3)}
    rows = _rows(_top1(favor, {1: (0.0, 0.1)}))
    assert math.isnan(rows["relu − softmax at 64"]["p"])
    assert rows["relu − softmax at 64"]["reading"] == primary_contrasts.NOT_YET
    ps = sorted(r["p"] for r in rows.values() if not math.isnan(r["p"]))
    assert len(ps) == 2
    adjusted = sorted(r["p (Holm)"] for r in rows.values() if not math.isnan(r["p"]))
    assert adjusted[0] == pytest.approx(min(1.0, 2 * ps[0]))
    assert adjusted[1] == pytest.approx(max(adjusted[0], ps[1]))
    note = primary_contrasts.family_note(list(rows.values()), complete=False)
    assert "over the 2 of 4 contrasts testable now" in note and "Interim" in note


def test_a_performer_ahead_and_a_shrinking_lead_read_the_other_way():
    favor = {1: (-1.5, 0.6), 2: (-1.4, 0.5), 3: (-1.6, 0.7), 4: (-1.5, 0.6)}
    rows = _rows(_top1(favor, {}))
    assert rows["favor − softmax at 64"]["reading"] == "Performer ahead"
    assert rows["change of favor − softmax, 32→64"]["reading"] == "softmax's lead shrank"


def test_a_difference_the_family_cannot_carry_is_inconclusive():
    """Unadjusted p below 0.05 is not enough: the reading needs Holm's adjusted p below it."""
    favor = {1: (0.0, -0.4), 2: (0.0, -1.0), 3: (0.0, -0.3), 4: (0.0, -0.6)}  # p 0.034, twice: Holm 0.068
    rows = _rows(_top1(favor, {}))
    gap = rows["favor − softmax at 64"]
    assert gap["p"] < 0.05 <= gap["p (Holm)"] and gap["reading"] == "inconclusive"


def test_only_a_preset_that_pre_registered_them_gets_the_section():
    top1 = _top1({1: (-0.5, -2.0), 2: (-0.4, -1.8)}, {})
    summary = {"found": {"top1": top1}, "complete": True}
    assert primary_contrasts.section({**summary, "params": load_params("canvas_gap_pilot")}) == []
    lines = primary_contrasts.section({**summary, "params": load_params("canvas40_long")})
    assert lines[2].startswith("## Primary contrasts") and "| favor − softmax at 64 | 2 | −2.00, −1.80 |" in lines[4]


def test_the_longer_study_report_tests_its_primary_contrasts(tmp_path, monkeypatch):
    from rpevit.lab.store import catalog

    def record(variant, seed, top1_32, top1_64):
        budgets = {"16": {"top1": 0.85}, "32": {"top1": top1_32 / 100}}
        return canvas40_record(variant, seed, top1_64 / 100, budgets=budgets)

    found = [record("softmax+ape", s, 88.0, 91.0) for s in (1, 2, 3)]
    found += [record("favor+ape", s, 87.5, 89.0 - 0.1 * s) for s in (1, 2, 3)]
    monkeypatch.setattr(catalog, "study_records", lambda params, reports_root=None: results(found))
    text = "\n".join(gap_pilot.write_report("canvas40_long", reports_root=tmp_path))
    assert "## Primary contrasts (pre-registered: 6 contrasts, one family under Holm)" in text
    assert "| favor − softmax at 64 | 3 | −2.10, −2.20, −2.30 | −2.20 |" in text
    assert "over the 2 of 6 contrasts testable now" in text and "Interim" in text
    assert primary_contrasts.NOTE in text and gap_pilot.SENSITIVITY_NOTE not in text
    # the README's line: the rule so far (GO: −2.2, its interval below −0.5), each Performer's gap at 64 epochs
    low, high = scipy_stats.t.interval(0.95, 2, loc=-2.2, scale=scipy_stats.sem([-2.1, -2.2, -2.3]))
    assert (
        f"**In one line**: `canvas40_long`, 6 of 20 runs: **GO so far** — gap to softmax at 64 epochs: "
        f"favor −2.20 [{signed(low)}, {signed(high)}] (3 seeds); relu, favor_redraw: no finished pair yet." in text
    )


def test_the_readme_s_long_block_is_filled_from_the_report(tmp_path):
    from campaign import long_study

    readme, report = tmp_path / "README.md", tmp_path / "report.md"
    readme.write_text("top\n<!-- long: x -->\n- old\n<!-- /long -->\nbottom\n")
    report.write_text("# t\n\n**In one line**: `s`, 1 of 2 runs.\n\nmore\n")
    assert long_study.sync_readme(readme, report)
    assert readme.read_text() == "top\n<!-- long: x -->\n- `s`, 1 of 2 runs.\n<!-- /long -->\nbottom\n"
    assert not long_study.sync_readme(readme, report)


def test_the_pooled_reading_pools_each_kind_over_the_performers_cells():
    """Descriptive, beside the family: each kind's seed SD pooled over the Performers' cells (df = seeds − 1
    summed), t-intervals with that df; the rule's thresholds read with them."""
    favor = {1: (-0.5, -2.0), 2: (-0.4, -1.6)}
    relu = {1: (0.0, -0.1), 2: (0.0, -0.5)}
    rows = primary_contrasts.contrast_rows(_top1(favor, relu), [1, 2], BACKENDS, 32, 64)
    gaps = primary_contrasts.pooled_sentences(rows, upper=-0.5)[:2]
    # both gap cells have SD √0.08: pooled SD √0.08, df 2
    half = scipy_stats.t.ppf(0.975, 2) * 0.08**0.5 / 2**0.5
    assert "SD 0.28 points pooled over 2 cells, df 2" in gaps[0]
    favor_interval = f"[{signed(-1.8 - half)}, {signed(-1.8 + half)}]"
    assert f"favor − softmax at 64 −1.80 {favor_interval} (softmax ahead; −1.5 inside it)" in gaps[0]
    assert f"relu − softmax at 64 −0.30 [{signed(-0.3 - half)}, {signed(-0.3 + half)}] (inconclusive)" in gaps[0]
    changes = gaps[1]
    assert "change of favor − softmax, 32→64 −1.35" in changes and "(softmax's lead grew)" in changes
    said = primary_contrasts.pooled_sentences(rows, upper=-0.5)[2]
    assert "met by favor (descriptive" in said
    # one seed per cell: nothing to pool
    one = primary_contrasts.contrast_rows(_top1({1: (-0.5, -2.0)}, {}), [1], BACKENDS, 32, 64)
    assert primary_contrasts.pooled_sentences(one, upper=-0.5) == []
    assert primary_contrasts.pooled_lines(one) == []
    # the study's one line (README) carries the gaps' pooled intervals in short
    clause = primary_contrasts.pooled_clause(rows)
    assert clause == f"seed SD pooled over 2 cells, 0.28 (df 2; descriptive): favor {favor_interval}, " + (
        f"relu [{signed(-0.3 - half)}, {signed(-0.3 + half)}]"
    )
    assert primary_contrasts.pooled_clause(one) == ""


def test_once_the_budget_ends_the_study_its_analyses_read_only_the_seeds_whose_runs_all_finished(tmp_path, monkeypatch):
    """The stopping rule of params/canvas40_long.yaml: "A budget that ends the study analyses the seeds whose
    runs all finished, and says so" — seed 3's softmax and favor runs finished, its relu and favor_redraw runs
    never started: while the study is open its favor pair counts; once the budget ended it, no analysis reads
    seed 3, the table of runs still lists it, and the report says so."""
    from campaign import budget
    from rpevit.lab.store import catalog

    def record(variant, seed, gap):
        budgets = {"16": {"top1": 0.85}, "32": {"top1": 0.88}}
        return canvas40_record(variant, seed, (91.0 + gap) / 100, budgets=budgets)

    found = [record(v, s, 0.0 if v == "softmax+ape" else -0.2 * s) for s in (1, 2) for v in VARIANTS]
    found += [record("softmax+ape", 3, 0.0), record("favor+ape", 3, -3.0)]
    monkeypatch.setattr(catalog, "study_records", lambda params, reports_root=None: results(found))
    open_study = gap_pilot.pilot_records(load_params("canvas40_long"), tmp_path)
    assert "whole_seeds" not in open_study and ("favor+ape", 3, 64) in open_study["top1"]

    monkeypatch.setattr(budget, "training_hours", lambda *a, **k: (60.5, 0.0))  # the 60 hours are spent
    ended = gap_pilot.pilot_records(load_params("canvas40_long"), tmp_path)
    assert ended["whole_seeds"] == [1, 2] and {seed for _, seed, _ in ended["top1"]} == {1, 2}
    assert ended["listed"] == open_study["top1"]
    text = "\n".join(gap_pilot.write_report("canvas40_long", reports_root=tmp_path))
    assert (
        "As pre-registered, with the budget spent the analyses read only the seeds whose runs all finished: "
        "seeds 1, 2; the finished runs of seed 3 are listed, not analysed." in text
    )
    assert "| favor+ape | 3 | 85.00 | 88.00 | 88.00 |" in text  # listed
    assert "| favor − softmax at 64 | 2 | −0.20, −0.40 | −0.30 |" in text  # seed 3's −3.00 not read
    assert "−3.00" not in text.split("## Test top-1 per run")[1].split("## Gap per budget")[1]
