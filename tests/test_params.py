"""Presets load, validate and fail with one clear message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rpevit.core.errors import UserError
from rpevit.lab.params import list_presets, load_params
from rpevit.lab.store.run import Run


def write(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["smoke", "seed001_mnist", "seed001_cifar10", "fashion_mnist"])
def test_shipped_presets_load(name):
    params = load_params(name)
    assert params.name == name and params.datasets and params.variants


def test_seed001_protocol_model():
    for name in ("seed001_mnist", "seed001_cifar10", "fashion_mnist"):
        m = load_params(name).model
        assert (m.patch_size, m.dim, m.depth, m.heads, m.mlp_dim, m.pool) == (4, 256, 6, 8, 512, "cls")
    assert load_params("seed001_mnist").train.epochs == 20
    assert load_params("seed001_cifar10").train.epochs == 100


def test_smoke_is_the_documented_cpu_model():
    m = load_params("smoke").model
    assert (m.dim, m.depth, m.heads, m.patch_size) == (64, 4, 4, 4)
    assert load_params("smoke").datasets == ("mnist5k",)


def test_unknown_key_names_key_and_choices(tmp_path):
    path = write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax+ape]\ntrain: {epoch: 3}\n")
    with pytest.raises(UserError, match=r"unknown key train\.epoch; allowed keys: epochs, batch_size"):
        load_params(path)


def test_wrong_type(tmp_path):
    path = write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax+ape]\nmodel: {dim: sixty}\n")
    with pytest.raises(UserError, match=r"model\.dim: 'sixty' is not valid; expected an integer"):
        load_params(path)


def test_literal_choices_listed(tmp_path):
    path = write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax+ape]\nmodel: {pool: max}\n")
    with pytest.raises(UserError, match=r"model\.pool: 'max' is not valid; expected one of 'cls', 'mean'"):
        load_params(path)


def test_unknown_variant_and_dataset(tmp_path):
    with pytest.raises(UserError, match=r"unknown attention backend 'softmx'.*choose from softmax"):
        load_params(write(tmp_path, "datasets: [mnist5k]\nvariants: [softmx+ape]\n"))
    with pytest.raises(UserError, match=r"unknown positional method 'apee'.*choose from none, ape"):
        load_params(write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax+apee]\n"))
    with pytest.raises(
        UserError, match=r"datasets: Unknown dataset 'mnits'. Allowed: mnist5k, mnist, .*or a recall task"
    ):
        load_params(write(tmp_path, "datasets: [mnits]\nvariants: [softmax+ape]\n"))


def test_dataset_keys_rejected_and_bad_yaml(tmp_path):
    with pytest.raises(UserError, match="model.image_size is set by the dataset"):
        load_params(write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax]\nmodel: {image_size: 32}\n"))
    with pytest.raises(UserError, match="not valid YAML"):
        load_params(write(tmp_path, "datasets: [mnist5k\n"))
    with pytest.raises(UserError, match="dim=30 must be divisible by model.heads=4"):
        load_params(write(tmp_path, "datasets: [mnist5k]\nvariants: [softmax]\nmodel: {dim: 30, heads: 4}\n"))


def test_missing_preset_lists_available():
    with pytest.raises(UserError, match="available presets: .*smoke"):
        load_params("no_such_preset")
    assert "smoke" in list_presets()


def test_run_key_tracks_results_not_paths():
    params = load_params("smoke")
    base = Run(params, "mnist5k", "softmax+ape", 0).key
    moved = dataclasses.replace(params, data=dataclasses.replace(params.data, root="/elsewhere"))
    assert Run(moved, "mnist5k", "softmax+ape", 0).key == base
    measured = dataclasses.replace(params, train=dataclasses.replace(params.train, timing_images=8, device="cpu"))
    assert Run(measured, "mnist5k", "softmax+ape", 0).key == base
    assert Run(params, "mnist5k", "softmax+ape", 0, epochs=99).key != base
    assert Run(params, "mnist5k", "softmax+ape", 1).key != base
    # a setting added later (stochastic depth) leaves the key alone at its default, changes it when set
    unset = dataclasses.replace(params, model=dataclasses.replace(params.model, drop_path=0.0))
    assert Run(unset, "mnist5k", "softmax+ape", 0).key == base
    dropping = dataclasses.replace(params, model=dataclasses.replace(params.model, drop_path=0.1))
    assert Run(dropping, "mnist5k", "softmax+ape", 0).key != base


def test_every_kept_record_still_matches_its_preset():
    """Kept records are what fresh clones build reports from: a settings change must not orphan them."""
    import json

    kept = sorted(Path(__file__).resolve().parent.parent.glob("reports/*/records/*/*/seed*/record.json"))
    assert kept, "the repository keeps run records under reports/<preset>/records/"
    for path in kept:
        record = json.loads(path.read_text())
        preset_file = next(Path(__file__).resolve().parent.parent.glob(f"params/**/{record['preset']}.yaml"))
        params = load_params(preset_file)
        epochs = record["epochs"] if record["epochs"] != params.train.epochs else None
        assert Run(params, record["dataset"], record["variant"], record["seed"], epochs).key == record["key"], path


def test_nested_options_in_presets(tmp_path):
    params = load_params(
        write(
            tmp_path,
            "datasets: [mnist5k]\nvariants: [favor+rope_axial]\n"
            "model: {favor: {num_features: 32, redraw_steps: 5}, rope_axial: {theta: 50}}\n",
        )
    )
    assert params.model.options_for("favor").num_features == 32
    assert params.model.options_for("favor").redraw_steps == 5
    assert params.model.options_for("rope_axial").theta == 50.0
    assert params.model.options_for("relu").feature_map == "identity"  # not set: defaults


@pytest.mark.parametrize(
    "model, message",
    [
        (
            "{favor: {num_feature: 3}}",
            r"unknown key model\.favor\.num_feature; allowed keys: num_features, redraw_steps",
        ),
        ("{favor: {num_features: 7}}", r"model\.favor\.num_features must be a positive even integer"),
        ("{rope_axial: {theta: 0.5}}", r"model\.rope_axial\.theta must be a number > 1"),
        ("{ape: {size: 3}}", r"model\.ape has no options"),
        ("{favr: {}}", r"unknown key model\.favr; allowed keys: patch_size.*favor, relu"),
        ("{favor_features: 32}", r"model\.favor_features is now an option of its method: .*favor: \{num_features"),
        ("{relu: {feature_map: random, num_features: 0}}", r"model\.relu\.num_features must be a positive integer"),
    ],
)
def test_bad_nested_options_name_method_and_allowed_keys(tmp_path, model, message):
    with pytest.raises(UserError, match=message):
        load_params(write(tmp_path, f"datasets: [mnist5k]\nvariants: [softmax+ape]\nmodel: {model}\n"))


def test_option_added_to_one_method_leaves_other_variants_keys_unchanged(monkeypatch):
    from rpevit.core.position import POSITIONS
    from rpevit.core.position.rotary import ThetaOptions

    params = load_params("smoke")
    variants = ["softmax+ape", "favor+krpe", "relu+rope_mixed", "favor+rope_axial", "relu+string_circulant"]
    before = {v: Run(params, "mnist5k", v, 0).key for v in variants}

    @dataclasses.dataclass(frozen=True)
    class ExtendedOptions(ThetaOptions):
        scale: float = 1.0  # a new option with a default, for RoPE-Axial only

    monkeypatch.setattr(POSITIONS["rope_axial"].build, "Options", ExtendedOptions)
    after = {v: Run(params, "mnist5k", v, 0).key for v in variants}
    assert {v: after[v] for v in variants if "rope_axial" not in v} == {
        v: before[v] for v in variants if "rope_axial" not in v
    }
    assert after["favor+rope_axial"] != before["favor+rope_axial"]


def test_options_of_other_methods_do_not_enter_a_key(tmp_path):
    base = load_params("smoke")
    tuned = load_params(
        write(
            tmp_path,
            "datasets: [mnist5k]\nvariants: [softmax+ape]\nname: smoke\n"
            "model: {dim: 64, depth: 4, heads: 4, mlp_dim: 128, rope_axial: {theta: 50},"
            " favor: {num_features: 16}}\n"
            "train: {epochs: 8, batch_size: 64, lr: 0.001, warmup_epochs: 1,"
            " weight_decay: 0.05, device: cpu}\n",
        )
    )
    assert Run(tuned, "mnist5k", "softmax+ape", 0).key == Run(base, "mnist5k", "softmax+ape", 0).key
    assert Run(tuned, "mnist5k", "favor+ape", 0).key != Run(base, "mnist5k", "favor+ape", 0).key
    assert Run(tuned, "mnist5k", "relu+ape", 0).key == Run(base, "mnist5k", "relu+ape", 0).key


# keys of these runs as rpevit computed them before `Run` (runs.run_key): the key scheme must not change
PINNED_KEYS = {
    ("smoke", "mnist5k", "softmax+ape", 0, None): "softmax+ape|mnist5k|0|v2-c8b6823ce2a5",
    ("smoke", "mnist5k", "favor+krpe", 1, 1): "favor+krpe|mnist5k|1|v2-1ce3196a1470",
    ("fashion_mnist", "fashion_mnist", "relu+krpe", 0, None): "relu+krpe|fashion_mnist|0|v2-79fe27e16e3e",
    ("seed001_mnist", "mnist", "favor+rope_axial+ape", 0, None): "favor+rope_axial+ape|mnist|0|v2-77d0e41e974b",
}


@pytest.mark.parametrize("case", list(PINNED_KEYS), ids=lambda c: "/".join(map(str, c)))
def test_run_keys_are_pinned(case):
    preset, dataset, variant, seed, epochs = case
    params = load_params(preset)
    run = Run(params, dataset, variant, seed, epochs)
    assert run.key == PINNED_KEYS[case] and run.matches({"key": PINNED_KEYS[case]})
    other = dataclasses.replace(params, train=dataclasses.replace(params.train, lr=params.train.lr / 2))
    assert not Run(other, dataset, variant, seed, epochs).matches({"key": PINNED_KEYS[case]})


def test_evaluate_variants_choose_which_runs_are_evaluated(tmp_path):
    text = "datasets: [mnist5k]\nvariants: [softmax+ape, favor+ape]\nevaluate: {resolutions: [20, 36], variants: %s}\n"
    params = load_params(write(tmp_path, text % "[softmax+ape]"))
    assert params.evaluate.covers("softmax+ape") and not params.evaluate.covers("favor+ape")
    assert load_params(write(tmp_path, text % "[]")).evaluate.covers("favor+ape")  # none listed: all
    with pytest.raises(UserError, match=r"evaluate.variants: relu\+ape not in this preset's variants"):
        load_params(write(tmp_path, text % "[relu+ape]"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("evaluate: {resolutions: [20, 100000]}", r"evaluate\.resolutions: \[100000\] exceed 8× the 28×28 images"),
        ("evaluate: {resolutions: [228]}", r"list image sizes up to 224"),
        ("data: {train_size: 10000000}", r"data\.train_size: 10000000 exceeds the 4000 training images of mnist5k"),
        ("data: {train_size: 4001}", r"exceeds the 4000 training images"),
        ("seeds: [0, -1]", r"seeds: -1 is not valid; seeds must be integers ≥ 0"),
        ("variants: softmax+ape", r"variants: 'softmax\+ape' is a single string; it must be a list, e\.g\. \["),
        ("datasets: mnist5k", r"datasets: 'mnist5k' is a single string; it must be a list"),
    ],
    ids=[
        "resolution-huge",
        "resolution-over-8x",
        "train-size-huge",
        "train-size-one-over",
        "seed-negative",
        "variants-string",
        "datasets-string",
    ],
)
def test_input_gaps_are_refused_with_one_message(tmp_path, text, message):
    base = {"datasets": "datasets: [mnist5k]", "variants": "variants: [softmax+ape]"}
    key = text.split(":")[0]
    lines = [line for name, line in base.items() if name != key] + [text]
    with pytest.raises(UserError, match=message) as refused:
        load_params(write(tmp_path, "\n".join(lines) + "\n"))
    assert "\n" not in str(refused.value)


def test_the_bounds_themselves_are_accepted(tmp_path):
    text = "datasets: [mnist5k]\nvariants: [softmax+ape]\nseeds: [0]\ndata: {train_size: 4000}\n"
    params = load_params(write(tmp_path, text + "evaluate: {resolutions: [4, 224]}\n"))
    assert params.data.train_size == 4000 and params.evaluate.resolutions == (4, 224)
    fashion = "datasets: [fashion_mnist]\nvariants: [softmax+ape]\ndata: {val_size: 10000, train_size: %d}\n"
    assert load_params(write(tmp_path, fashion % 50000)).data.train_size == 50000
    with pytest.raises(UserError, match=r"exceeds the 50000 training images of fashion_mnist"):
        load_params(write(tmp_path, fashion % 50001))
