"""Attention inspection (analysis.inspection, attention_measures, layer_probes, map_figures and the
FAVOR+ / FFT checks of rpevit.core.checks): maps and distances of models, single-layer matrices for the
relative-property check, offset maps, FAVOR+ estimator error, the dense reference of the FFT path,
runs to inspect and the explorer's figure."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from analysis import attention_measures, inspection, map_figures
from rpevit.core import checks, layer_probes
from rpevit.core.attention import computing_backends  # noqa: E402
from rpevit.core.checks import relative_violation  # noqa: E402
from rpevit.core.grid import Grid  # noqa: E402
from rpevit.core.position import POSITIONS  # noqa: E402
from rpevit.lab.result import Result
from rpevit.lab.training import runs  # noqa: E402

GRID = Grid(3, 4, cls=True)


def _uniform(grid, batch=2, heads=3):
    t = grid.num_tokens
    return torch.full((batch, heads, t, t), 1.0 / t)


def test_query_maps_cls_row_and_mean_received():
    weights = torch.rand(2, 3, GRID.num_tokens, GRID.num_tokens)
    (cls_map,) = attention_measures.query_maps([weights], GRID)
    assert cls_map.shape == (2, 3, 3, 4) and torch.equal(cls_map.flatten(2), weights[:, :, 0, 1:])
    grid = Grid(3, 4, cls=False)
    weights = torch.rand(2, 3, 12, 12)
    (received,) = attention_measures.query_maps([weights], grid)
    assert torch.allclose(received.flatten(2), weights.mean(dim=2))


def test_mean_attention_distance_uniform_and_local():
    uniform = attention_measures.mean_attention_distance(_uniform(GRID), GRID)
    assert uniform.shape == (2, 3)
    assert torch.allclose(
        uniform, torch.full((2, 3), attention_measures.uniform_attention_distance(GRID), dtype=uniform.dtype)
    )
    local = torch.zeros(1, 1, GRID.num_tokens, GRID.num_tokens)
    local[0, 0, 0, 0] = 1.0
    local[0, 0, 1:, 1:] = torch.eye(GRID.num_patches)  # each patch attends to itself: distance 0
    assert attention_measures.mean_attention_distance(local, GRID).item() == pytest.approx(0.0)
    signed = _uniform(GRID) * torch.where(torch.rand(GRID.num_tokens) > 0.5, 1.0, -1.0)
    per_head, is_signed = attention_measures.attention_distance([signed, _uniform(GRID)], GRID)
    assert per_head.shape == (2, 3) and is_signed  # |A|: the same distances as uniform
    assert torch.allclose(
        per_head, torch.full((2, 3), attention_measures.uniform_attention_distance(GRID), dtype=per_head.dtype)
    )


def test_rotation_sites_and_config(tiny_params):
    assert layer_probes.rotation_sites("softmax") == ("pre",)
    assert set(layer_probes.rotation_sites("favor")) == {"pre", "post"}
    config = layer_probes.with_rotation_site(tiny_params.model, "favor", "post")
    assert config.options_for("favor").rotation_site == "post"
    assert layer_probes.with_rotation_site(tiny_params.model, "softmax", "post") is tiny_params.model


def test_layer_attention_relative_property(tiny_params):
    config = runs.model_config_for(tiny_params, "mnist5k")
    grid = Grid(3, 5, cls=True)
    for backend, method, site, relative in (
        ("softmax", "rope_mixed", "pre", True),
        ("softmax", "krpe", "pre", True),
        ("relu", "rope_axial", "post", True),
        ("softmax", "ape", "pre", False),
        ("favor", None, "auto", True),
    ):
        weights = layer_probes.layer_attention(config, grid, backend, method, site)
        assert weights.shape == (config.heads, grid.num_tokens, grid.num_tokens) and weights.dtype == torch.float64
        violation = relative_violation(weights, grid)
        assert (violation < 1e-9) if relative else (violation > 1e-3), (backend, method, violation)
    again = layer_probes.layer_attention(config, grid, "softmax", "rope_mixed", "pre")
    assert torch.equal(again, layer_probes.layer_attention(config, grid, "softmax", "rope_mixed", "pre"))


def test_cases_cover_the_registries():
    cases = layer_probes.relative_property_cases()
    assert {m for b, m, _ in cases if b == "softmax"} == set(POSITIONS) | {None}
    for backend in computing_backends():  # a backend that computes as another (favor_redraw) is its cases
        if backend != "softmax":
            assert (backend, None, "auto") in cases
            assert {m for b, m, s in cases if b == backend and s == "post"} == set(layer_probes.methods_of("rotary"))
    assert all(site == "pre" and b != "softmax" for b, _, site in layer_probes.premap_cases())
    assert layer_probes.case_label("relu", "rope_axial", "post") == "relu+rope_axial (post-map)"
    assert layer_probes.case_label("favor", "rope_axial", "pre") == "favor+rope_axial (pre-map)"
    assert layer_probes.case_label("softmax", None, "pre") == "softmax+none"


def test_offset_maps_relative_vs_absolute(tiny_params):
    config = runs.model_config_for(tiny_params, "mnist5k")
    grid = Grid(3, 4, cls=True)
    mean, spread, signed = layer_probes.offset_maps(
        layer_probes.layer_attention(config, grid, "softmax", "rope_axial"), grid
    )
    assert mean.shape == spread.shape == (5, 7) and not signed
    assert np.nanmax(spread) < -9 and mean[2, 3] == pytest.approx(0.0)  # Δ = 0: log 1
    _, spread_ape, _ = layer_probes.offset_maps(layer_probes.layer_attention(config, grid, "softmax", "ape"), grid)
    assert np.nanmax(spread_ape) > -3


def test_perturb_parameters_is_reproducible():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    before = a.weight.detach().clone()
    layer_probes.perturb_parameters(a, 0.5, seed=3)
    layer_probes.perturb_parameters(b, 0.5, seed=3)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, before)


def test_favor_estimator_error_falls_like_inverse_sqrt_m():
    rows = checks.favor_estimator_error(8, [1, 4, 16], pairs=400, draws=4, qk_scale=0.5, seed=0)
    assert [(r["features"], r["m"]) for r in rows] == [(k, m) for m in (8, 32, 128) for k in ("orthogonal", "iid")]
    for kind in ("orthogonal", "iid"):
        assert -0.75 < checks.loglog_slope(rows, kind) < -0.3
    assert all(abs(r["mean signed error (bias)"]) < 5 * r["bias standard error"] + 1e-3 for r in rows)


def test_fft_path_matches_both_dense_references():
    rows = checks.fft_vs_dense(Grid(3, 4, cls=True), heads=2, head_dim=4, num_features=6, seed=1)
    assert len(rows) == 4
    for row in rows:
        tol = 1e-10 if row["dtype"] == "float64" else 1e-5
        assert row["vs dense"] < tol and row["vs independent"] < tol, row


def test_inspection_targets_untrained_then_finished(tiny_params):
    untrained = inspection.inspection_targets(tiny_params, [], seed=2)
    assert [t["variant"] for t in untrained] == [v for v in tiny_params.variants]
    assert all(t["record"] is None and t["seed"] == 2 and "untrained" in t["label"] for t in untrained)
    record = {
        "variant": "favor+rope_mixed",
        "dataset": "mnist5k",
        "seed": 0,
        "status": "finished",
        "top1": 0.5,
        "epochs": 3,
    }
    found = [record, {**record, "status": "diverged"}, {**record, "seed": 1}]
    (target,) = inspection.inspection_targets(tiny_params, found, has_weights=lambda r: True)  # one seed per variant
    assert target["record"] == Result.of(record) and "test top-1 50.0%, 3 ep" in target["label"]
    every = inspection.inspection_targets(tiny_params, found, has_weights=lambda r: True, every_seed=True)
    assert [t["seed"] for t in every] == [0, 1] and len({t["label"] for t in every}) == 2  # the explorer's seed choice
    # a kept record without its checkpoint on this machine: the untrained models, and a note naming the variant
    assert all(t["record"] is None for t in inspection.inspection_targets(tiny_params, found))
    note = runs.weightless_note(tiny_params, found)
    assert note.startswith("1 variant(s)") and "(favor+rope_mixed · mnist5k)" in note
    assert "keep-weights" in note and "--variant favor+rope_mixed --dataset mnist5k --seed 0" in note
    assert runs.weightless_note(tiny_params, found, has_weights=lambda r: r["seed"] == 1) == ""  # one seed suffices
    assert runs.weightless_note(tiny_params, found, has_weights=lambda r: True) == ""


def test_map_source_and_query_figure(tiny_params):
    params = dataclasses.replace(tiny_params, variants=("softmax+ape", "relu+rope_axial"))
    source = inspection.MapSource(params, [], seed=0)
    assert not source.trained and len(source.targets) == 2
    label = next(iter(source.targets))
    images, raw, labels = source.images(label, 3, 2)
    assert images.shape == (2, 1, 28, 28) and raw.min() >= 0 and raw.max() <= 1 and labels.shape == (2,)
    maps, grid, predictions = source.maps(label, images)
    assert len(maps) == params.model.depth and maps[0].shape == (2, params.model.heads, 50, 50)
    assert grid.cls and predictions.shape == (2,)
    view = source.image_maps(label, 3)
    assert view["picture"].shape == (28, 28, 3) and view["picture"].dtype == np.uint8
    assert source.image_maps(label, 3) is view  # cached
    assert torch.allclose(torch.from_numpy(view["maps"][0]), maps[0][0])
    fig = map_figures.query_figure(view, layer=1, head=0, query=9, title="t", image_index=3)
    assert [t.type for t in fig.data] == ["image", "heatmap", "scatter"]
    assert "patch 8 (row 1, col 1)" in fig.layout.annotations[1].text
    assert map_figures.describe_query(grid, 0) == "CLS"
    # class names, not integers; untrained weights say so in the figure and above the controls
    assert view["truth_name"] == str(view["truth"]) and f"true {view['truth_name']}," in fig.layout.annotations[0].text
    assert not view["trained"] and "UNTRAINED" in fig.layout.title.text
    assert "UNTRAINED" in source.banner(label)
    # the fixed scale centred on uniform attention 1/N, named on the colour bar
    heatmap = fig.data[1]
    assert (heatmap.zmin, heatmap.zmax) == (-map_figures.UNIFORM_OCTAVES, map_figures.UNIFORM_OCTAVES)
    assert "0.02 = 1/50 (uniform)" in heatmap.colorbar.ticktext
    signed = map_figures.query_figure(source.image_maps(list(source.targets)[1], 0), 0, 0, 0)
    assert signed.data[1].zmid == 0  # relu + post-map rotation: signed weights
    assert signed.data[1].zmax >= 2 / 50 and "1/50 (uniform)" in signed.data[1].colorbar.ticktext


def test_a_near_uniform_map_is_not_stretched_over_its_own_range():
    """Issue 22: the colour bar auto-scaled 0.0198–0.0206 around 1/50, so an untrained, nearly
    uniform map showed strong patterns. On the fixed scale it stays at the uniform level's colour."""
    grid = Grid(7, 7, cls=True)
    tokens = grid.num_tokens
    weights = np.full((1, tokens, tokens), 1 / tokens) * (1 + 0.02 * np.random.default_rng(0).standard_normal(tokens))
    view = {"maps": [weights], "grid": grid, "picture": np.zeros((28, 28, 3), np.uint8), "truth": 1, "prediction": 2}
    heatmap = map_figures.query_figure(view, 0, 0, 0).data[1]
    assert np.abs(np.asarray(heatmap.z)).max() < 0.1  # |log2(w·N)|: within 7 % of uniform
    assert (heatmap.zmin, heatmap.zmax) == (-4, 4)
    peaked = np.zeros_like(weights)
    peaked[0, :, 5] = 1.0
    assert np.asarray(map_figures.query_figure({**view, "maps": [peaked]}, 0, 0, 0).data[1].z).max() >= 4


def test_datasets_name_their_classes():
    from rpevit.core.data import DATASETS

    assert DATASETS["fashion_mnist"].class_name(0) == "T-shirt/top"
    assert DATASETS["fashion_mnist"].class_name(9) == "Ankle boot"
    assert DATASETS["cifar10"].class_name(3) == "cat" and DATASETS["mnist5k"].class_name(7) == "7"
    for info in DATASETS.values():
        assert len(info.class_names) == info.num_classes


def test_show_map_colour_bar_on_signed_maps():
    fig, (a, b) = plt.subplots(1, 2)
    map_figures.show_map(a, np.array([[0.1, 0.2], [0.3, 0.4]]))
    map_figures.show_map(b, np.array([[-0.1, 0.2], [0.3, 0.4]]), image=np.zeros((8, 8)))
    assert len(fig.axes) == 3  # one colour bar, for the signed map
    plt.close(fig)
    assert map_figures.as_picture(torch.zeros(1, 4, 5)).shape == (4, 5) and map_figures.as_picture(
        torch.zeros(3, 4, 5)
    ).shape == (
        4,
        5,
        3,
    )


def test_attention_grid_shares_one_colour_scale_per_row_with_a_colour_bar():
    rng = np.random.default_rng(0)
    per_layer = {0: rng.random((2, 3, 4, 4)), 3: 5 * rng.random((2, 3, 4, 4))}  # layer 3's weights 5× larger
    pictures = [np.zeros((16, 16)), np.zeros((16, 16))]
    captions = [map_figures.caption(0, "Bag", "Bag"), map_figures.caption(1, "Coat", "Shirt")]
    assert captions == ["test #0: Bag", "test #1: Coat\npredicted Shirt ✗"]
    fig = map_figures.attention_grid(pictures, captions, per_layer, heads=3, title="t")
    images = [a for a in fig.axes if a.images and a.get_title().startswith("head")]
    for row, (image, layer) in enumerate([(0, 0), (0, 3), (1, 0), (1, 3)]):
        heads = images[3 * row : 3 * row + 3]
        limits = {h.images[0].get_clim() for h in heads}
        assert limits == {(0.0, float(per_layer[layer][image].max()))}  # one scale for the row's heads
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) == 4  # one per row
    plt.close(fig)


def test_side_by_side_puts_both_variants_on_one_scale():
    maps = {"softmax+ape": np.full((2, 4, 4), 0.1), "favor+ape": np.full((2, 4, 4), 0.4)}
    fig = map_figures.side_by_side([np.zeros((16, 16))] * 2, ["a", "b"], maps, layer=3, title="t")
    panels = [a for a in fig.axes if a.images and a.images[-1].get_cmap().name == "inferno"]
    assert len(panels) == 2 * 2 * 2  # images × variants × (over the image, alone)
    limits = {a.images[-1].get_clim() for a in panels}
    assert limits == {(0.0, 0.4)}  # every map panel on the shared scale, set by the larger variant
    assert sum(a.get_label() == "<colorbar>" for a in fig.axes) == 1
    plt.close(fig)


def test_the_explorer_scale_says_where_it_saturates():
    ticks = map_figures.uniform_scale(50)["colorbar"]["ticktext"]
    assert ticks[0].startswith("≤ ") and ticks[-1].startswith("≥ 0.32") and "saturated" in ticks[-1]
    assert "1/50 (uniform)" in ticks[len(ticks) // 2]


def test_map_source_names_a_dataset_whose_files_are_missing(tiny_params, monkeypatch, capsys):
    """Without the dataset's files the explorer says which dataset is missing and how to get it
    (notebook 90 then does not advise training what is already trained)."""
    from rpevit.core.errors import UserError
    from rpevit.lab.training import runs

    def missing(params, name, device="cpu"):
        raise UserError(f"{name}: no files found; apt-get install dataset-fashion-mnist")

    monkeypatch.setattr(runs, "dataset_for", missing)
    source = inspection.MapSource(tiny_params, [], seed=0)
    assert source.missing == ["mnist5k"] and source.targets == {} and not source.trained
    assert "apt-get install dataset-fashion-mnist" in capsys.readouterr().out
