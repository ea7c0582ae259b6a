"""The recall order's overview and answer (campaign/recall_overview.py), from fabricated records of the three
pre-registered pilots: no answer while a pilot is open, the GO pilot on GO, and on NO-GO at every step the
numbers each pilot measured."""

from __future__ import annotations

import pytest

from campaign import recall_overview, recall_pilot
from rpevit.lab.params import load_params


def _record(dataset, variant, seed, top1):
    return {"dataset": dataset, "variant": variant, "seed": seed, "status": "finished", "top1": top1 / 100}


@pytest.fixture
def pilots_at(monkeypatch):
    """Make every pilot of the order read fabricated records: top1[(pilot, variant, K)] = (seed 1, seed 2) in
    points; a pilot whose name is in `open_pilots` misses its last run; a pilot's reference is read from the
    records fabricated for it."""
    from rpevit.core.data import dataset_info
    from rpevit.lab.result import results
    from rpevit.lab.store import catalog

    def fabricate(top1: dict, open_pilots=()):
        made = {}
        for name in recall_pilot.ORDER:
            params = load_params(name)
            rows = [
                _record(d, v, s, values[i])
                for (pilot, v, k), values in top1.items()
                if pilot == name
                for d in params.datasets
                if dataset_info(d).recall.pairs == k
                for i, s in enumerate(params.seeds)
            ]
            made[name] = rows[:-1] if name in open_pilots else rows
        monkeypatch.setattr(catalog, "study_records", lambda params, **kw: results(made[params.name]))
        monkeypatch.setattr(
            catalog, "reference_records", lambda params, **kw: results(made.get(params.reference or "", []))
        )
        return recall_overview.summaries()

    return fabricate


def _no_go_everywhere() -> dict:
    """Pilot 1: softmax solves no K; pilots 2 and 3: everything solved, the Performers level with softmax."""
    top1 = {}
    for k, soft in ((2, 55.0), (4, 38.0), (8, 29.0)):
        top1 |= {("recall_pilot", "softmax+ape", k): (soft, soft), ("recall_pilot", "favor+ape", k): (soft - 1, soft)}
        top1 |= {("recall_pilot", "relu+ape", k): (soft + 1, soft)}
    for k in (8, 16, 32):
        for v in ("softmax+ape", "favor+ape", "relu+ape"):
            top1[("recall_pilot_samecell", v, k)] = (100.0, 100.0)
        top1[("recall_pilot_favor8", "favor+ape", k)] = (100.0, 99.0 if k == 32 else 100.0)
    return top1


def test_no_go_at_every_step_is_answered_with_each_pilot_s_numbers(pilots_at):
    found = pilots_at(_no_go_everywhere())
    assert [p["verdict"] for p in found] == ["NO-GO"] * 3
    lines = recall_overview.answer_lines(found)
    assert lines[0] == recall_overview.answer(found) and lines[1] == "" and len(lines) == 5
    assert lines[0].startswith(recall_overview.ANSWER + "all 3 pilots ended NO-GO")
    assert "not testable on these tasks" in lines[0]
    said = "\n".join(lines)
    assert "`recall_pilot` (neighbour layout, K = 2/4/8, FAVOR+ m = 48, 40 epochs): softmax solved no K " in said
    assert "(55.0 / 38.0 / 29.0 %); the mean gaps of favor, relu ran from −0.50 to +0.50 points" in said
    assert "`recall_pilot_samecell` (same-cell layout, K = 8/16/32, FAVOR+ m = 48" in said
    assert "FAVOR+ m = 8, fewer features than pairs at K = 16, 32, 40 epochs): softmax solved every K" in said
    assert "the mean gaps of favor ran from −0.50 to +0.00 points (lowest: favor at K = 32, −0.50 [" in said


def test_no_answer_while_a_pilot_is_open_and_the_go_pilot_on_go(pilots_at):
    top1 = _no_go_everywhere()
    found = pilots_at(top1, open_pilots={"recall_pilot_favor8"})
    assert recall_overview.answer(found) == ""
    assert "**The order stands at `recall_pilot_favor8`**" in recall_overview.overview_lines(found)[4]
    top1[("recall_pilot_samecell", "relu+ape", 8)] = (80.0, 70.0)
    found = pilots_at(top1)
    said = recall_overview.answer(found)
    assert said.startswith(recall_overview.ANSWER + "GO on `recall_pilot_samecell`. **GO at K = 8**")


def test_the_overview_is_written_with_its_figure_and_the_readme_takes_its_answer(pilots_at, tmp_path):
    found = pilots_at(_no_go_everywhere())
    lines = recall_overview.write_overview(reports_root=tmp_path)
    assert (tmp_path / recall_overview.OVERVIEW).read_text() == "\n".join(lines) + "\n"
    assert (tmp_path / recall_overview.FIGURE).stat().st_size > 0
    assert lines[4] == recall_overview.answer(found)
    for pilot in found:
        name = pilot["params"].name
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(f"{recall_pilot.ONE_LINE}{pilot['line']}\n")
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- recall: x -->\n<!-- /recall -->\nbottom\n")
    assert recall_pilot.sync_readme(readme, tmp_path)
    block = "".join(f"- {p['line']}\n" for p in found) + f"\n{lines[4]}\n"
    assert readme.read_text() == f"top\n<!-- recall: x -->\n{block}<!-- /recall -->\nbottom\n"
