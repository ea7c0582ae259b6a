"""Result tables computed from run records, and the published numbers checked against the seeds."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from analysis import gap_table, published_results, published_side_by_side, results_table
from rpevit.lab.schema import METRIC_COLUMNS, make_record

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def record(variant, top1, seed=0, dataset="mnist5k"):
    """A finished record with every metric column of the schema (top-1 and friends as given)."""
    metrics = {name: 2.0 for name, _, _ in METRIC_COLUMNS}
    metrics.update(top1=top1, precision=top1, recall=top1, f1=top1, flops_per_image=2e6)
    return make_record(dataset=dataset, variant=variant, seed=seed, status="finished", **metrics)


RECORDS = [
    record("softmax+ape", 0.90),
    record("softmax+ape", 0.80, seed=1),
    record("softmax+rope_mixed", 0.95),
    record("favor+ape", 0.70),
    record("favor+rope_mixed", 0.80),
    record("relu+string_circulant", 0.60),
    {"dataset": "mnist5k", "variant": "relu+ape", "seed": 0, "status": "diverged"},
]


def test_results_table_means_over_seeds():
    rows = {row["variant"]: row for row in results_table(RECORDS)}
    assert rows["softmax+ape"]["top-1 %"] == pytest.approx(85.0)
    assert rows["softmax+ape"]["seeds"] == 2 and rows["softmax+ape"]["top-1 std"] == pytest.approx(7.0710678)
    assert math.isnan(rows["favor+ape"]["top-1 std"]) and rows["favor+ape"]["MFLOPs/img"] == pytest.approx(2.0)
    assert "relu+ape (diverged)" in rows


def test_gap_table_compares_same_positions_and_baseline():
    rows = {row["variant"]: row for row in gap_table(RECORDS)}
    assert set(rows) == {"favor+ape", "favor+rope_mixed", "relu+string_circulant"}
    # one sign everywhere: Performer − softmax, positive = the Performer ahead
    assert rows["favor+rope_mixed"]["Performer − softmax, same positions (points)"] == pytest.approx(-15.0)
    assert rows["favor+rope_mixed"]["Performer − softmax+ape (points)"] == pytest.approx(-5.0)
    assert math.isnan(rows["relu+string_circulant"]["Performer − softmax, same positions (points)"])


def test_published_side_by_side_matches_variant_names():
    rows = published_side_by_side(RECORDS)
    favor = [r for r in rows if r["variant"] == "favor+ape" and r["published dataset"] == "mnist"]
    assert favor and favor[0]["published top-1 %"] == 97.47
    assert favor[0]["ours top-1 % (mnist5k)"] == pytest.approx(70.0)


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed papers' texts are not on this machine (optional)")
def test_published_numbers_appear_in_their_seed_reports():
    texts = {path.name[:3]: path.read_text() for path in SEEDS.glob("*.txt")}
    for row in published_results():
        seed = re.match(r"seed (\d{3})", row["source"]).group(1)
        value = row["value"]
        candidates = {f"{value:.2f}", f"{value:.3f}", f"{value:g}", f"{value:.1f}"}
        assert any(c in texts[seed] for c in candidates), (row["label"], row["table"], value)


def test_results_table_flags_timings_taken_on_a_busy_machine():
    loaded = [
        dict(r, load_average=5.0, cpu_count=2) if r["seed"] == 1 else dict(r, load_average=0.2, cpu_count=2)
        for r in RECORDS
    ]
    rows = {row["variant"]: row for row in results_table(loaded)}
    assert rows["softmax+ape"]["busy timings"] == "1/2" and rows["favor+ape"]["busy timings"] == "0/1"


def test_the_runs_own_timings_are_labelled_as_such_beside_the_benchmarks():
    """The results table's times are each run's own (taken after training, under whatever load): their
    columns say so, so they are not read as the speed benchmark's numbers (the cost figure's)."""
    columns = [column for _, column, _ in METRIC_COLUMNS if "ms/img" in column]
    assert columns and all("in-run timing" in column for column in columns)


def test_planned_line_counts_what_notebook_45_counts():
    from rpevit.lab.params import load_params
    from rpevit.lab.schedule.wanted import planned_line

    smoke = load_params("smoke")
    found = [{"dataset": "mnist5k", "variant": v, "seed": 0, "status": "finished"} for v in smoke.variants[:4]]
    assert planned_line(smoke, found) == f"4 of {len(smoke.variants)} planned runs finished for smoke"
    designed = load_params("fmnist_converged")
    line = planned_line(designed, [])
    assert line.startswith("0 of ") and "could train at most 102)" in line  # its design's count, the grid named apart
