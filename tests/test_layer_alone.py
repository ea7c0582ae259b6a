"""The attention layer outside a ViT (issue: values instead of names): MultiHeadAttention(dim, heads,
backend=…, rotary=…, side=…) from explicit arguments computes what the layer a ViT builds from its
ModelConfig computes, for every backend with a rotary, a bias and a gate method."""

from __future__ import annotations

import pytest
import torch

from rpevit.core.attention import BACKENDS
from rpevit.core.attention.layer import MultiHeadAttention
from rpevit.core.config import model_config
from rpevit.core.grid import Grid


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("methods", [{"rotary": "rope_mixed"}, {"bias": "krpe"}, {"gate": "gate_string"}, {}])
def test_the_layer_from_explicit_arguments_is_the_vits_layer(backend, methods):
    torch.manual_seed(0)
    alone = MultiHeadAttention(32, 4, backend, side=6, **methods).double()
    torch.manual_seed(0)
    config = model_config(dim=32, heads=4, image_size=6, patch_size=1)
    inside = MultiHeadAttention.from_config(config, backend, **methods).double()
    inside.load_state_dict(alone.state_dict())
    x = torch.randn(2, 37, 32, dtype=torch.float64)
    grid = Grid(6, 6)
    torch.testing.assert_close(alone(x, grid), inside(x, grid), rtol=0, atol=0)


def test_explicit_options_are_each_methods_defaults_unless_set():
    """`options` maps a name to its Options; a backend or method not listed gets its defaults — the ViT's
    layer of a config that sets nothing."""
    from rpevit.core.attention.linear import FavorOptions

    plain = MultiHeadAttention(32, 4, "favor", "rope_mixed", side=6)
    config = model_config(dim=32, heads=4, image_size=6, patch_size=1)
    assert (
        plain.backend.num_features == MultiHeadAttention.from_config(config, "favor").backend.num_features == 20
    )  # d = 8
    post = FavorOptions(num_features=12, rotation_site="post")
    few = MultiHeadAttention(32, 4, "favor", "rope_mixed", side=6, options={"favor": post})
    assert few.backend.num_features == 12 and few.rotary.dim == 12  # the post-map rotation acts on the features
