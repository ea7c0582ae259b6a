"""Rotary frequency analysis (rpevit.core.rotary_analysis): eigen-frequencies from rotation matrices,
the rotation identities, least-squares reconstructions and learned-frequency summaries."""

from __future__ import annotations

import math

import pytest
import torch

from rpevit.core import rotary_analysis as ra
from rpevit.core.grid import Grid
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs


@pytest.fixture
def config(tiny_params):
    return runs.model_config_for(tiny_params, "mnist5k")


def test_wrap_and_set_distance():
    wrapped = ra.wrap(torch.tensor([0.5, math.pi + 0.5, -math.pi - 0.5, 4 * math.pi]))
    assert torch.allclose(wrapped, torch.tensor([0.5, -math.pi + 0.5, math.pi - 0.5, 0.0]), atol=1e-6)
    a = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    assert ra.set_distance(a, a) == 0.0
    assert ra.set_distance(a, torch.tensor([[0.0, 0.0]])) == pytest.approx(1.0)
    assert ra.set_distance(
        torch.tensor([[math.pi - 0.1, 0.0]]), torch.tensor([[-math.pi + 0.1, 0.0]])
    ) == pytest.approx(0.2, abs=1e-6)  # the same frequency, mod 2π


def test_effective_frequencies_match_the_parameters_of_every_rotary_method(config):
    modules = ra.build_rotary(ra.rotary_methods(), config, 8, 2, seed=0)
    frequencies = {m: ra.effective_frequencies(module) for m, module in modules.items()}
    for f in frequencies.values():
        assert f.shape[-1] == 2 and f.shape[1] == 8 and f.dtype == torch.float64
    for row in ra.frequency_crosscheck(modules, frequencies):
        assert float(row["max distance to parameter frequencies"]) < 1e-6, row
    axial = ra.parameter_frequencies(modules["rope_axial"])
    assert axial is not None and (axial[..., 0] * axial[..., 1] == 0).all()  # axis-aligned


def test_rotation_identities_hold_for_every_rotary_method(config):
    coords = Grid(3, 4).coords(dtype=torch.float64)
    for method, module in ra.build_rotary(ra.rotary_methods(), config, 8, 2).items():
        for p in module.parameters():  # away from the init
            p.data.add_(0.3 * torch.randn_like(p))
        errors = ra.rotation_identity_errors(module, coords, heads=2)
        assert set(errors) == {"orthogonality", "relative", "fast path"}
        assert max(errors.values()) < 1e-10, (method, errors)
        assert all(p.dtype == torch.float32 for p in module.parameters())  # the module is left as it was


def test_reconstruction_is_exact_for_a_matching_frequency():
    problem = ra.Reconstruction(7, "offsets", stripe_period=8.0, bump_width=1.5)
    assert problem.points.shape == (13 * 13, 2) and set(problem.targets) == {
        "diagonal stripes",
        "radial bump",
        "axial stripes",
    }
    step = 2 * math.pi / 8
    fits, residual = problem.fit(torch.tensor([[step, 0.0]], dtype=torch.float64))
    assert residual[2] < 1e-10 and residual[0] > 0.5  # axial stripes exact, diagonal ones not
    _, residual = problem.fit(torch.tensor([[step / math.sqrt(2), step / math.sqrt(2)]], dtype=torch.float64))
    assert residual[0] < 1e-10 and residual[2] > 0.5
    per_target = problem.residuals(torch.tensor([[[step, 0.0]], [[0.0, step]]], dtype=torch.float64))  # two heads
    per_head, best = per_target["axial stripes"]
    assert per_head[0] < 1e-10 < per_head[1] and best.shape == (13, 13)
    rows = problem.rows({"toy": torch.tensor([[[step, 0.0]]], dtype=torch.float64)})
    assert [r["target"] for r in rows] == list(problem.targets) and rows[0]["features per head"] == 3
    patches = ra.Reconstruction(4, "patches")
    assert patches.points.shape == (16, 2) and patches.axis.mean().item() == pytest.approx(0.0)
    assert patches.extent == (-2.0, 2.0, 2.0, -2.0)
    with pytest.raises(ValueError, match=r"domain must be one of \('offsets', 'patches'\), got 'pixels'"):
        ra.Reconstruction(4, "pixels")


def test_learned_layers_and_rows(tiny_params):
    model = runs.untrained_model(Run(tiny_params, "mnist5k", "softmax+rope_mixed", 0))
    initial = runs.untrained_model(Run(tiny_params, "mnist5k", "softmax+rope_mixed", 0))
    layers = ra.learned_layers(model, initial)
    assert [layer["layer"] for layer in layers] == list(range(tiny_params.model.depth))
    assert all(layer["change"] == 0.0 and layer["site"] == "pre" for layer in layers)
    with torch.no_grad():
        model.blocks[0].attn.rotary.freqs.mul_(1.1)
    layers = ra.learned_layers(model, initial)
    assert layers[0]["change"] == pytest.approx(0.1, rel=1e-5) and layers[1]["change"] == 0.0
    assert not torch.allclose(layers[0]["trained"], layers[0]["init"])
    record = {"variant": "softmax+rope_mixed", "dataset": "mnist5k", "seed": 0}
    rows = ra.learned_rows(record, layers, ra.Reconstruction(7))
    assert rows[0]["parameter change"] == "10.00%" and "→" in rows[0]["radial bump: init → trained"]
    axial = runs.untrained_model(Run(tiny_params, "mnist5k", "softmax+rope_axial", 0))
    assert ra.learned_layers(axial, axial) == []  # fixed frequencies: nothing learned
    ape = runs.untrained_model(Run(tiny_params, "mnist5k", "softmax+ape", 0))
    assert ra.learned_layers(ape, ape) == []
