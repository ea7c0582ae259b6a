"""Presets load, validate and fail with one clear message."""
from __future__ import annotations

import dataclasses

import pytest

from rpevit.errors import UserError
from rpevit.params import fingerprint, list_presets, load_params


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
    with pytest.raises(UserError, match=r"unknown dataset 'mnits'; choose from mnist5k, mnist"):
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


def test_fingerprint_tracks_results_not_paths():
    params = load_params("smoke")
    base = fingerprint(params.data, params.model, params.train)
    moved = dataclasses.replace(params.data, root="/elsewhere")
    assert fingerprint(moved, params.model, params.train) == base
    longer = dataclasses.replace(params.train, epochs=99)
    assert fingerprint(params.data, params.model, longer) != base
