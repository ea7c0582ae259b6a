"""The longer-budget study's own report pieces (campaign/long_study.py): its gap figure beside the pilot it goes
on from, and the pilot's runs it trained again, side by side."""

from __future__ import annotations

from campaign import long_study
from rpevit.lab.params import load_params


def test_the_pilots_runs_trained_again_are_compared_run_by_run():
    here = {("softmax+ape", 1, 32): 88.83, ("favor+ape", 1, 32): 88.83, ("softmax+ape", 1, 64): 91.15}
    pilot = {("softmax+ape", 1, 32): 89.58, ("favor+ape", 1, 32): 88.53, ("relu+ape", 1, 32): 89.0}
    lines = long_study.retrained(here, pilot, load_params("canvas_gap_pilot"))
    text = "\n".join(lines)
    assert "Over the 2 runs both have" in text and "is −0.75 to +0.30 points (median |difference| 0.52)" in text
    assert "| softmax+ape | 1 | 32 | 89.58 | 88.83 | −0.75 |" in text and "relu" not in text.split("|", 1)[1]
    assert long_study.retrained(here, {("relu+ape", 1, 32): 89.0}, load_params("canvas_gap_pilot")) == []
    assert "repeat `canvas_gap_pilot`'s runs up to its 32 epochs" in text


def _summary(top1: dict) -> dict:
    return {"params": load_params("canvas40_long"), "found": {"top1": top1}, "complete": False}


def test_the_gap_figure_is_drawn_once_a_pair_has_finished(tmp_path):
    folder = tmp_path / "canvas40_long"
    folder.mkdir()
    lines = long_study.section(_summary({}), folder)
    assert lines and not (folder / long_study.FIGURE).exists() and long_study.FIGURE not in "\n".join(lines)
    top1 = {(v, 1, e): 85.0 + e / 10 for v in ("softmax+ape", "favor+ape") for e in (16, 32, 64)}
    lines = long_study.section(_summary(top1), folder)
    assert (folder / long_study.FIGURE).stat().st_size > 0 and f"]({long_study.FIGURE})" in lines[-1]
    # no kept records of the pilot under this reports root: nothing to compare run by run
    assert not any("trained again" in line for line in lines)
    assert long_study.section({**_summary(top1), "params": load_params("canvas_gap_pilot")}, folder) == []
