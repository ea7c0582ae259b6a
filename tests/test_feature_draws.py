"""FAVOR+ under fresh random features (campaign/feature_draws.py): the measurement puts the model's own ω back,
its own-ω accuracy is the plain prediction's, the fresh draws are fixed and differ from the model's, and the
command refuses a preset without FAVOR+ before measuring anything."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_preset_yaml

from campaign import feature_draws
from campaign.cli import main
from rpevit.core.loop import predict
from rpevit.core.model import build_model
from rpevit.lab.store.run import Run


def _model(tiny_params, variant="favor+ape"):
    torch.manual_seed(0)
    return build_model(variant, Run(tiny_params, "mnist5k", variant, 0).model_config, seed=0).eval()


def test_own_features_give_the_plain_prediction_and_are_put_back(tiny_params, tiny_dataset):
    model = _model(tiny_params)
    layers = feature_draws.favor_layers(model)
    assert len(layers) == 2  # one per block of the tiny model
    before = [layer.omega.clone() for layer in layers]
    logits, labels = predict(model, tiny_dataset.test, tiny_dataset.info, 50)
    found = feature_draws.top1_under_draws(model, tiny_dataset.test, tiny_dataset.info, 50, draws=3)
    assert found["as trained"] == pytest.approx(100 * (logits.argmax(1) == labels).double().mean().item())
    assert len(found["fresh"]) == 3 and all(0 <= f <= 100 for f in found["fresh"])
    assert all(torch.equal(layer.omega, b) for layer, b in zip(layers, before, strict=True))


def test_fresh_draws_are_fixed_orthogonal_and_not_the_models_own(tiny_params):
    layers = feature_draws.favor_layers(_model(tiny_params))
    own = [layer.omega.clone() for layer in layers]
    feature_draws.draw_fresh(layers, 0)
    first = [layer.omega.clone() for layer in layers]
    feature_draws.draw_fresh(layers, 1)
    feature_draws.draw_fresh(layers, 0)
    assert all(torch.equal(layer.omega, f) for layer, f in zip(layers, first, strict=True))  # draw k is draw k
    assert not any(torch.equal(f, o) for f, o in zip(first, own, strict=True))
    assert not torch.equal(first[0], first[1])  # each layer its own draw
    assert all(f.shape == o.shape and f.dtype == o.dtype for f, o in zip(first, own, strict=True))


def test_a_softmax_model_is_measured_in_its_favor_twin_with_its_own_weights(tiny_params):
    """softmax's weights in the FAVOR+ model of the same methods: every weight but the random features is
    softmax's; a preset without that FAVOR+ variant has no twin."""
    softmax = _model(tiny_params, "softmax+ape")
    assert feature_draws.favor_layers(softmax) == []
    run = Run(tiny_params, "mnist5k", "softmax+ape", 0)
    twin = feature_draws.favor_twin(tiny_params, run, softmax)
    assert feature_draws.favor_layers(twin)
    theirs = twin.state_dict()
    assert all(torch.equal(theirs[k], v) for k, v in softmax.state_dict().items())
    params = dataclasses.replace(tiny_params, variants=("softmax+ape", "relu+ape"))
    assert feature_draws.favor_twin(params, run, softmax) is None
    # a feature dial's twin is its own FAVOR+ (its m), not the one of the preset that trained softmax
    favor = dataclasses.replace(tiny_params.model.options_for("favor"), num_features=4)
    dial = dataclasses.replace(
        tiny_params, model=dataclasses.replace(tiny_params.model, options={**tiny_params.model.options, "favor": favor})
    )
    assert {layer.num_features for layer in feature_draws.favor_layers(twin)} != {4}
    assert {
        layer.num_features for layer in feature_draws.favor_layers(feature_draws.favor_twin(dial, run, softmax))
    } == {4}
    assert feature_draws.favor_twin(tiny_params, Run(tiny_params, "mnist5k", "relu+ape", 0), softmax) is None


def test_the_row_reads_the_spread_of_the_fresh_draws():
    found = {"as trained": 91.08, "fresh": [25.0, 19.0]}
    row = feature_draws.row("favor+ape", 1, {"epochs": 64, "top1": 0.9108}, found)
    assert row["fresh ω: mean"] == 22.0 and row["min"] == 19.0 and row["fresh − as trained"] == pytest.approx(-69.08)
    shown = feature_draws._shown(row)
    assert shown["fresh − as trained"] == "−69.08" and shown["as trained"] == "91.08"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["feature-draws", "smoke", "--draws", "1"], "at least 2 fresh draws"),
        (["feature-draws", "nope"], "nope"),
        (["feature-draws", "SOFTMAX_ONLY"], "trains no FAVOR+ variant"),
    ],
)
def test_bad_input_is_one_error_line_before_anything_is_measured(args, message, capsys, tmp_path):
    softmax_only = tmp_path / "softmax_only.yaml"
    softmax_only.write_text(tiny_preset_yaml("softmax_only", 1, 100))
    assert main([str(softmax_only) if a == "SOFTMAX_ONLY" else a for a in args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0] and not captured.out


def test_the_report_section_is_read_from_the_measured_table(tmp_path):
    from rpevit.lab.params import load_params

    assert feature_draws.report_lines(tmp_path / "canvas40_long") == []  # not measured there
    found = {"as trained": 91.08, "fresh": [25.37, 12.03, 18.2]}
    row = feature_draws.row("favor+ape", 1, {"epochs": 64, "top1": 0.9108}, found)
    lines = feature_draws.write(load_params("canvas40_long"), [row], reports_root=tmp_path)
    folder = tmp_path / "canvas40_long"
    assert (folder / "feature_draws.md").read_text() == "\n".join(lines) and lines[-1].endswith("|\n")
    text = "\n".join(feature_draws.report_lines(folder))
    assert "favor+ape seed 1 (64 epochs): 91.08 % as trained, 18.53 % on average over 3 fresh draws" in text
    assert "(12.03 to 25.37)" in text and "feature-draws canvas40_long" in text


def test_the_one_line_clause_names_each_run_as_trained_and_under_fresh_draws(tmp_path):
    from rpevit.lab.params import load_params

    folder = tmp_path / "canvas40_long"
    assert feature_draws.short_clause(folder) == ""
    rows = [
        feature_draws.row(
            "softmax+ape → FAVOR+", 1, {"epochs": 64, "top1": 0.9115}, {"as trained": 91.15, "fresh": [72.0, 71.0]}
        ),
        feature_draws.row("favor+ape", 1, {"epochs": 64, "top1": 0.9108}, {"as trained": 91.08, "fresh": [18.0, 19.0]}),
    ]
    feature_draws.write(load_params("canvas40_long"), rows, reports_root=tmp_path)
    assert feature_draws.short_clause(folder) == (
        "under fresh FAVOR+ features (seed 1): softmax+ape → FAVOR+ 91.2 → 71.5 %, favor+ape 91.1 → 18.5 %"
    )


def test_the_command_measures_only_the_runs_its_table_lacks_unless_asked_again(roots, monkeypatch, capsys):
    from rpevit.lab.params import load_params

    _, reports = roots
    old = feature_draws.row("favor+ape", 1, {"epochs": 64, "top1": 0.91}, {"as trained": 91.0, "fresh": [18.0, 19.0]})
    feature_draws.write(load_params("canvas40_long"), [old], reports_root=reports)
    asked = []

    def measure(params, draws, done=frozenset()):
        asked.append(set(done))
        found = {"as trained": 84.0, "fresh": [70.0, 72.0]}
        return [feature_draws.row("favor_redraw+ape", 1, {"epochs": 64, "top1": 0.84}, found)]

    monkeypatch.setattr(feature_draws, "measure", measure)
    assert main(["feature-draws", "canvas40_long", "--draws", "2"]) == 0
    rows = feature_draws.measured(reports / "canvas40_long")
    assert asked == [{("favor+ape", 1)}] and [r["variant"] for r in rows] == ["favor+ape", "favor_redraw+ape"]
    assert rows[0] == {k: (float(v) if isinstance(v, float) else v) for k, v in old.items()}  # kept as measured
    assert main(["feature-draws", "canvas40_long", "--draws", "2", "--again"]) == 0
    assert asked[-1] == set() and [r["variant"] for r in feature_draws.measured(reports / "canvas40_long")] == [
        "favor_redraw+ape"
    ]
    assert main(["feature-draws", "canvas40_long", "--draws", "3"]) == 0  # other draws: the table's rows do not count
    assert asked[-1] == set()


def test_the_pilots_sentence_gives_every_measured_pilot_and_the_highest_mean_kept(tmp_path):
    from rpevit.lab.params import load_params

    assert feature_draws.pilots_sentence(["canvas_gap_pilot"], tmp_path, 10.0) == ""  # nothing measured
    pilot = [
        feature_draws.row("favor+ape", 1, {"epochs": 32, "top1": 0.89}, {"as trained": 89.0, "fresh": [15.0, 17.0]}),
        feature_draws.row(
            "softmax+ape → FAVOR+", 1, {"epochs": 32, "top1": 0.895}, {"as trained": 89.5, "fresh": [70.0, 72.0]}
        ),
    ]
    feature_draws.write(load_params("canvas_gap_pilot"), pilot, reports_root=tmp_path)
    found = {"as trained": 88.0, "fresh": [12.0, 13.0]}
    dial = [feature_draws.row("favor+ape", 1, {"epochs": 32, "top1": 0.88}, found)]
    feature_draws.write(load_params("canvas56_dial8"), dial, reports_root=tmp_path)
    presets = ["canvas_gap_pilot", "canvas56_gap_pilot", "canvas56_dial8"]  # the 56×56 pilot not measured
    assert feature_draws.pilots_sentence(presets, tmp_path, 10.0) == (
        "FAVOR+ under fresh draws of ω (2 per run, measured after the fact; reports/<pilot>/feature_draws.md): "
        "every FAVOR+ run measured averaged 16.0 % or less under them (chance 10 %), as trained → fresh: 89.0 → 16.0 % "
        "(`canvas_gap_pilot`, seed 1); 88.0 → 12.5 % (`canvas56_dial8`, seed 1). Softmax's weights with FAVOR+ "
        "attention: 89.5 → 71.0 % (`canvas_gap_pilot`, seed 1)."
    )
    assert "chance" not in feature_draws.pilots_sentence(presets, tmp_path, None)


def test_the_readme_quotes_the_overview_without_its_feature_draws_paragraph():
    from campaign import pilot_overview

    drawn = f"{feature_draws.PILOTS_LEAD} (8 per run, measured after the fact; …): every FAVOR+ run measured averaged"
    lines = ["# title", "", "**standing**", "", "| a |", "|---|", "| 1 |", "", "Tasks: …", "", drawn, ""]
    assert pilot_overview.readme_block(lines) == ["**standing**", "", "| a |", "|---|", "| 1 |", "", "Tasks: …"]
