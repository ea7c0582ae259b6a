"""The extension contract: a new backend and a new positional method, registered in a test and in
no other file, appear in `list`, build into models, pass the dense-reference and relative-property
checks, get run keys and a plot style."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from analysis import report
from rpevit.cli import main
from rpevit.core.attention import BACKENDS, Backend
from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.checks import dense_reference_error, relative_violation
from rpevit.core.config import model_config
from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.options import NoOptions
from rpevit.core.position import POSITIONS, PROTOCOLS, PositionMethod
from rpevit.core.position.relative import RelativeBias, offset_axes
from rpevit.core.variants import list_variants
from rpevit.lab.params import load_params
from rpevit.lab.store.run import Run


@dataclass(frozen=True)
class CosineOptions:
    scale: float = 4.0


class CosineAttention(nn.Module):
    """A toy exact backend: softmax over scaled cosine similarities (+ a relative bias)."""

    Options = CosineOptions
    exact = True
    mechanisms = ("absolute", "gate", "rotary", "bias")
    summary = "toy: softmax(s·cos(q, k) + B) v"

    def __init__(self, options, head_dim, heads):
        super().__init__()
        self.scale, self.rotation_site = options.scale, "pre"

    def feature_dim(self) -> int:
        return 0

    def weights(self, q, k, grid, bias=None, feature_rotation=None):
        logits = self.scale * nn.functional.normalize(q, dim=-1) @ nn.functional.normalize(k, dim=-1).transpose(-2, -1)
        if bias is not None:
            logits = logits + bias.dense(grid).to(logits.dtype)
        return logits.softmax(-1)

    def forward(self, q, k, v, grid, bias=None, feature_rotation=None):
        return self.weights(q, k, grid, bias) @ v


class RowDecay(RelativeBias):
    """A toy relative bias: b_h(Δ) = −|Δrow| / (h + 1)."""

    Options = NoOptions

    def __init__(self, options, dim, heads, *, side, cls):
        super().__init__(heads)

    def table(self, grid):
        rows, cols = offset_axes(grid)
        rates = 1.0 / torch.arange(1, self.heads + 1, dtype=torch.float64)
        return (-rates[:, None, None] * rows.abs()[None, :, None]).expand(-1, -1, len(cols)).float()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(BACKENDS, "cosine", CosineAttention)
    monkeypatch.setitem(POSITIONS, "row_decay", PositionMethod("bias", RowDecay, "toy row decay", relative=True))


def test_toy_backend_and_method_join_every_registry_derived_place(registered, capsys):
    assert isinstance(CosineAttention(CosineOptions(), 8, 2), Backend)
    assert isinstance(RowDecay(NoOptions(), 8, 2, side=7, cls=True), PROTOCOLS["bias"])
    assert "cosine+row_decay" in list_variants() and "softmax+row_decay" in list_variants()
    assert main(["list", "variants", "--backend", "cosine", "--position", "row_decay"]) == 0
    out = capsys.readouterr().out
    assert "cosine+row_decay" in out and "cosine+rope_mixed+row_decay" in out
    assert main(["list", "backends"]) == 0 and "cosine: exact — toy" in capsys.readouterr().out
    model = build_model("cosine+row_decay+ape", dim=32, depth=2, heads=4, mlp_dim=32, cosine={"scale": 6.0})
    assert model.blocks[0].attn.backend.scale == 6.0
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28))).all()
    style = report.variant_styles(["softmax+ape", "cosine+row_decay", "favor+row_decay"])
    assert style["cosine+row_decay"] != style["favor+row_decay"] != style["softmax+ape"]
    params = load_params("smoke")
    assert Run(params, "mnist5k", "cosine+row_decay", 0).key != Run(params, "mnist5k", "softmax+row_decay", 0).key


@pytest.mark.parametrize("backend", ["cosine", "softmax", "favor", "relu"])
def test_toy_components_pass_the_dense_reference_and_relative_property_checks(registered, backend):
    torch.manual_seed(0)
    config = model_config(dim=32, heads=4, image_size=28, patch_size=4)
    grid = Grid(5, 7, cls=True)
    layer = MultiHeadAttention.from_config(config, backend, bias="row_decay").double()
    assert dense_reference_error(layer, torch.randn(2, grid.num_tokens, 32, dtype=torch.float64), grid) < 1e-10
    same = torch.randn(1, 1, 32, dtype=torch.float64).expand(1, grid.num_tokens, 32)
    with torch.no_grad():
        assert relative_violation(layer.attention_matrix(same, grid)[0], grid) < 1e-9
    assert (
        math.isfinite(
            dense_reference_error(MultiHeadAttention.from_config(config, "cosine").double(), same.clone(), grid)
        )
        if backend == "cosine"
        else True
    )
