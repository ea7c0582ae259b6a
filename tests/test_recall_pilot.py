"""The recall pilot's report (campaign/recall_pilot.py): gaps per K with t-intervals, the
pre-registered go/no-go (the smallest K where softmax ≥ 95 % and a Performer ≥ 5 points behind), and the
refusal of a preset that is not a recall pilot."""

from __future__ import annotations

import dataclasses

import pytest
from scipy import stats as scipy_stats

from campaign import recall_pilot
from rpevit.core.errors import UserError
from rpevit.lab.params import load_params

KS = ("recall8_neighbour_k4", "recall8_neighbour_k8")


def _params(**changes):
    base = load_params("smoke")
    fields = {"name": "toy_recall", "datasets": list(KS), "variants": ["softmax+ape", "favor+ape", "relu+ape"]}
    return dataclasses.replace(base, **{**fields, "seeds": [1, 2], **changes})


def _top1(table):
    """{(dataset, variant): (seed 1, seed 2)} → the report's top-1 dictionary."""
    return {(d, v, s): t for (d, v), values in table.items() for s, t in zip((1, 2), values, strict=True)}


def test_gaps_per_k_have_a_t_interval_over_seeds():
    top1 = _top1(
        {
            (KS[0], "softmax+ape"): (99.0, 98.0),
            (KS[0], "favor+ape"): (90.0, 95.0),
            (KS[0], "relu+ape"): (98.0, 98.0),
            (KS[1], "softmax+ape"): (97.0, 97.0),
            (KS[1], "favor+ape"): (60.0, 70.0),
        }
    )
    rows = {(r["K"], r["variant"]): r for r in recall_pilot.pilot_rows(_params(), top1)}
    favor = rows[(4, "favor+ape")]
    assert favor["gaps (per seed)"] == "−9.00, −3.00" and favor["mean gap"] == pytest.approx(-6.0)
    half = scipy_stats.t.ppf(0.975, 1) * 3.0 * 2**0.5 / 2**0.5  # SD of (−9, −3) is 3·√2; /√2 seeds
    assert favor["gap, 95 % interval"] == f"−6.00 [{-6 - half:+.2f}, {-6 + half:+.2f}]".replace("-", "−")
    assert rows[(8, "relu+ape")]["seeds"] == 0 and rows[(8, "relu+ape")]["gap, 95 % interval"] == "—"
    assert not rows[(8, "relu+ape")]["complete"] and rows[(4, "relu+ape")]["complete"]


def test_go_is_the_smallest_k_where_softmax_solves_and_a_performer_falls_5_behind():
    params = _params()
    solved_no_gap = {(KS[0], v): (99.0, 99.0) for v in params.variants}
    gap_at_8 = {
        (KS[1], "softmax+ape"): (96.0, 97.0),
        (KS[1], "favor+ape"): (80.0, 85.0),
        (KS[1], "relu+ape"): (96.0, 96.0),
    }
    line = recall_pilot.decision(recall_pilot.pilot_rows(params, _top1({**solved_no_gap, **gap_at_8})), params)
    assert line.startswith("**GO at K = 8**") and "favor+ape" in line
    # a gap of 4.9 points is not enough; softmax at 94.9 % has not solved the task
    near = {(KS[1], "softmax+ape"): (96.0, 96.0), (KS[1], "favor+ape"): (91.1, 91.1), (KS[1], "relu+ape"): (96.0, 96.0)}
    unsolved = {
        (KS[1], "softmax+ape"): (94.9, 94.9),
        (KS[1], "favor+ape"): (20.0, 20.0),
        (KS[1], "relu+ape"): (20.0, 20.0),
    }
    for table in (near, unsolved):
        line = recall_pilot.decision(recall_pilot.pilot_rows(params, _top1({**solved_no_gap, **table})), params)
        assert line.startswith("**NO-GO**"), line
    assert "softmax solved K = 4, 8" in recall_pilot.decision(
        recall_pilot.pilot_rows(params, _top1({**solved_no_gap, **near})), params
    )
    # a K whose runs have not all finished stops the reading there
    line = recall_pilot.decision(recall_pilot.pilot_rows(params, _top1(solved_no_gap)), params)
    assert line.startswith("**Not decided yet**") and "K = 8" in line


def test_a_preset_that_is_not_a_recall_pilot_is_refused_before_anything_is_written():
    with pytest.raises(UserError, match="recall-pilot reports a recall pilot"):
        recall_pilot.check_is_recall_pilot(load_params("smoke"))
    with pytest.raises(UserError, match="not one"):
        recall_pilot.check_is_recall_pilot(_params(variants=["favor+ape", "relu+ape"]))
    recall_pilot.check_is_recall_pilot(_params())


def test_the_report_is_written_from_the_records_with_its_figures(tmp_path, monkeypatch):
    """`recall-pilot`: README with the go/no-go line, the table (csv, md) and both figures."""
    from rpevit.lab.result import results
    from rpevit.lab.store import catalog

    records = [
        {"dataset": d, "variant": v, "seed": s, "status": "finished", "top1": t / 100, "epochs": 40}
        for d in ("recall8_neighbour_k2",)
        for v, t in (("softmax+ape", 99.0), ("favor+ape", 80.0), ("relu+ape", 97.0))
        for s in (1, 2)
    ]
    monkeypatch.setattr(catalog, "study_records", lambda params, **kw: results(records))
    lines = recall_pilot.write_report("recall_pilot", reports_root=tmp_path)
    folder = tmp_path / "recall_pilot"
    assert (folder / "README.md").read_text() == "\n".join(lines) + "\n"
    assert lines[6].startswith("**GO at K = 2**") and "favor+ape is −19.00" in lines[6]
    assert "6 of 18 runs finished" in lines[2]
    assert lines[4].startswith("Code revisions its finished runs were trained from: `unnamed` (6 runs)")
    for name in ("recall_pilot.csv", "recall_pilot.md", recall_pilot.FIGURE, recall_pilot.CURVES):
        assert (folder / name).stat().st_size > 0


@pytest.mark.parametrize("layout", ["neighbour", "samecell"])
def test_the_places_of_a_recall_image_are_its_query_key_and_value(layout):
    """recall_maps.places finds, in drawn images, the query, the key it copies, that key's value (right of it,
    or in its cell) and the other pairs — checked against the label: the asked value's glyph is its class."""
    import torch

    from campaign.recall_maps import places
    from rpevit.core.data.recall import RecallTask, cells_of, codebook, draw

    task = RecallTask(8, layout, 4)
    images, labels = draw(task, 20, torch.Generator().manual_seed(3))
    values = codebook()["values"]
    for image, label in zip(images, labels, strict=True):
        spot = places(image, 8, layout)
        top, bottom = cells_of(image.unsqueeze(0), 8)
        assert torch.equal(top[0, spot["key"]], top[0, spot["query"]]) and spot["key"] != spot["query"]
        assert spot["value"] == spot["key"] + (1 if layout == "neighbour" else 0)
        assert torch.equal(bottom[0, spot["value"]], values[label])  # the label is the asked value's class
        assert len(spot["other_keys"]) == len(spot["other_values"]) == 3


def test_the_attention_table_reads_weights_of_the_asked_and_other_pairs(tmp_path):
    """Per variant and layer: weights in [0, 1], the uniform level 1/T, one row per layer; and the reading
    sentence from it."""
    import torch

    from campaign.recall_maps import attention_table, maps_figure, reading
    from rpevit.core.data import dataset_info, load_dataset
    from rpevit.core.model import build_model

    name = "recall8_neighbour_k2"
    dataset = load_dataset(name, val_size=8, train_size=8)
    torch.manual_seed(0)
    model = build_model("softmax+ape", image_size=32, patch_size=4, dim=16, depth=2, heads=2, mlp_dim=16).eval()
    task = dataset_info(name).recall
    rows = attention_table({"softmax+ape": model}, dataset, task, count=8)
    assert [r["layer"] for r in rows] == [1, 2]
    for row in rows:
        assert row["uniform"] == pytest.approx(1 / 65)
        assert all(0 <= row[k] <= 1 for k in row if "→" in k)
        assert {"its key → query", "another key → query"} <= set(row)  # the broadcast route is measured too
    said = reading([{"K": 2, **r} for r in rows])
    assert said.startswith("Largest excess") and "from its key's token on the query (uniform 0.015): K = 2: " in said
    maps_figure({"softmax+ape": model}, dataset, task).savefig(tmp_path / "maps.png")


def test_the_order_of_recall_pilots_names_pre_registered_presets_and_each_no_go_names_the_next():
    from rpevit.lab.params import preregistered

    assert all(preregistered(name) for name in recall_pilot.ORDER)
    for name, after in zip(recall_pilot.ORDER, recall_pilot.ORDER[1:]):
        assert f"`{after}` trains next" in recall_pilot.next_pilot(load_params(name))
    assert "ends here" in recall_pilot.next_pilot(load_params(recall_pilot.ORDER[-1]))


def test_a_pilot_reads_softmax_from_its_reference_with_the_same_run_keys(tmp_path, monkeypatch):
    """recall_pilot_favor8 trains only FAVOR+ (8 features) and compares it with recall_pilot_samecell's
    softmax: the reference's runs have this preset's keys, the report pairs them by seed."""
    from rpevit.lab.result import results
    from rpevit.lab.store import catalog

    params = load_params("recall_pilot_favor8")
    assert recall_pilot.compared(params) == ["softmax+ape", "favor+ape"]
    assert recall_pilot.run_of(params, "recall8_samecell_k8", "softmax+ape", 1).params.name == "recall_pilot_samecell"
    assert {run.variant for run in catalog.reference_runs(params)} == {"softmax+ape", "relu+ape"}  # keys checked

    def record(d, v, s, t):
        return {"dataset": d, "variant": v, "seed": s, "status": "finished", "top1": t / 100, "epochs": 40}

    own = [record(d, "favor+ape", s, 60.0) for d in params.datasets for s in (1, 2)]
    read = [record(d, v, s, 99.0) for d in params.datasets for v in ("softmax+ape", "relu+ape") for s in (1, 2)]
    monkeypatch.setattr(catalog, "study_records", lambda params, **kw: results(own))
    monkeypatch.setattr(catalog, "reference_records", lambda params, **kw: results(read))
    found = recall_pilot.summary("recall_pilot_favor8", reports_root=tmp_path)
    assert found["decision"].startswith("**GO at K = 8**") and "favor+ape is −39.00" in found["decision"]
    assert "6 of 6 runs finished" in found["intro"] and "read from `recall_pilot_samecell`" in found["intro"]
    assert {v for (_, v, _) in found["top1"]} == {"softmax+ape", "favor+ape"}  # the reference's relu is not read


def _recall_pilot_finished_at(monkeypatch, top1: dict, skip=()):
    """recall_pilot's every run finished at `top1[variant]` points, but the (dataset, variant) pairs in `skip`."""
    from rpevit.lab.result import results
    from rpevit.lab.store import catalog

    params = load_params("recall_pilot")
    rows = [
        {"dataset": d, "variant": v, "seed": s, "status": "finished", "top1": top1[v] / 100, "epochs": 40}
        for d in params.datasets
        for v in params.variants
        for s in params.seeds
        if (d, v) not in skip
    ]
    monkeypatch.setattr(catalog, "study_records", lambda params, **kw: results(rows))


def test_next_names_the_following_pilot_only_once_this_one_ended_no_go(monkeypatch):
    """`recall-pilot PRESET --next` (what a GPU sitting goes on with): the next pilot of the order after a
    finished NO-GO; nothing while a K is open or on GO."""

    params = load_params("recall_pilot")

    def finished_at(top1: dict, skip=()):
        _recall_pilot_finished_at(monkeypatch, top1, skip)

    finished_at({"softmax+ape": 50.0, "favor+ape": 40.0, "relu+ape": 45.0})
    assert recall_pilot.trains_next("recall_pilot") == "recall_pilot_samecell"
    finished_at({"softmax+ape": 50.0, "favor+ape": 40.0, "relu+ape": 45.0}, skip={(params.datasets[-1], "relu+ape")})
    assert recall_pilot.trains_next("recall_pilot") == ""
    finished_at({"softmax+ape": 99.0, "favor+ape": 40.0, "relu+ape": 98.0})
    assert recall_pilot.trains_next("recall_pilot") == ""


def test_a_later_pilot_of_an_order_starts_no_run_before_the_one_before_it_ended_no_go(monkeypatch):
    """The campaign's start gate (hooks.refusal) keeps the pre-registered order: recall_pilot_samecell is
    refused while recall_pilot is open or GO, and let through once it ended NO-GO; the gap pilots' order
    (all ended NO-GO) and presets outside any order are let through."""
    from campaign import budget, hooks

    monkeypatch.setattr(budget, "budget_spent", lambda *args, **kwargs: None)
    first = load_params("recall_pilot")

    def finished_at(top1: dict, skip=()):
        _recall_pilot_finished_at(monkeypatch, top1, skip)

    second = load_params("recall_pilot_samecell")
    finished_at({"softmax+ape": 50.0, "favor+ape": 40.0, "relu+ape": 45.0}, skip={(first.datasets[-1], "relu+ape")})
    assert hooks.refusal(second) == (
        "recall_pilot_samecell trains only once recall_pilot has ended NO-GO (the pre-registered order); "
        "recall_pilot is still open"
    )
    finished_at({"softmax+ape": 99.0, "favor+ape": 40.0, "relu+ape": 98.0})
    assert hooks.refusal(second).endswith("recall_pilot is GO")
    finished_at({"softmax+ape": 50.0, "favor+ape": 40.0, "relu+ape": 45.0})
    assert hooks.refusal(second) == "" and hooks.refusal(first) == ""
    assert hooks.out_of_order(load_params("canvas40_long")) == ""  # outside any order


def test_the_orders_answer_a_shell_without_torch():
    """device_tree.sh slim asks `python3 campaign/orders.py PRESET…` which pilot comes before each (its records
    travel for the start gate); the module imports nothing, so it runs isolated from the project's packages."""
    import subprocess
    import sys
    from pathlib import Path

    from campaign import orders

    script = Path(orders.__file__)
    found = subprocess.run(
        [sys.executable, "-I", str(script), "recall_pilot_samecell", "canvas40_long", "canvas56_dial8", "recall_pilot"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.split() == ["recall_pilot", "canvas56_dial16"]
    assert (
        orders.next_in_order("recall_pilot") == "recall_pilot_samecell"
        and orders.next_in_order("canvas56_dial8") is None
    )
