"""The longer-budget study's own report pieces (campaign/long_study.py): its gap figure beside the pilot it goes
on from, and the pilot's runs it trained again, side by side."""

from __future__ import annotations

from campaign import long_study
from rpevit.lab.params import load_params

from helpers import canvas40_record


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


def test_a_report_reads_the_pilots_records_and_computes_its_contrasts_once(tmp_path, monkeypatch):
    """The figure and the retrained-runs table share one read of the pilot's records; the one line and the
    contrasts table share one computation of the contrasts."""
    from campaign import gap_pilot, primary_contrasts

    reads, computed = [], []
    pilot_records, contrast_rows = gap_pilot.pilot_records, primary_contrasts.contrast_rows
    monkeypatch.setattr(gap_pilot, "pilot_records", lambda *a: reads.append(a) or pilot_records(*a))
    monkeypatch.setattr(primary_contrasts, "contrast_rows", lambda *a: computed.append(a) or contrast_rows(*a))
    folder = tmp_path / "canvas40_long"
    folder.mkdir()
    top1 = {(v, 1, e): 85.0 + e / 10 for v in ("softmax+ape", "favor+ape") for e in (16, 32, 64)}
    summary = {**_summary(top1), "raw_gaps": []}
    summary["found"]["own"] = []
    line = long_study.one_line(summary)
    lines = long_study.section(summary, folder)
    assert len(reads) == 1 and len(computed) == 1
    assert "favor +0.00 (1 seed)" in line and any("favor − softmax at 64" in text for text in lines)


def test_each_seed_pair_is_read_image_by_image_at_the_longest_budget():
    """Per Performer and seed with both runs: the discordant test images, the gap they make, exact McNemar p."""
    from scipy import stats as scipy_stats

    def record(variant, seed, correct):
        return canvas40_record(variant, seed, correct.count("1") / len(correct), test_correct=correct)

    softmax = "1" * 90 + "0" * 10
    favor = "0" * 12 + "1" * 78 + "1" * 2 + "0" * 8  # 12 images only softmax right, 2 only favor right
    own = [record("softmax+ape", 1, softmax), record("favor+ape", 1, favor), record("relu+ape", 2, softmax)]
    summary = {"params": load_params("canvas40_long"), "found": {"own": own}}
    (row,) = long_study.image_pairs(summary)
    assert (row["pair"], row["seed"], row["only the Performer right"], row["only softmax right"]) == (
        "favor − softmax",
        1,
        2,
        12,
    )
    assert row["gap"] == -10.0 and row["McNemar p"] == scipy_stats.binomtest(2, 14).pvalue
    lines = long_study.image_lines(summary)
    assert lines[1] == "## Each seed pair image by image (64 epochs; descriptive)"
    assert "| favor − softmax | 1 | −10.00 | 2 | 12 |" in lines[-1]
    assert long_study.image_lines({**summary, "found": {"own": own[:1]}}) == []
