"""The attention layer outside a ViT (issue: values instead of names): MultiHeadAttention(dim, heads,
backend=…, rotary=…, side=…) from explicit arguments computes what the layer a ViT builds from its
ModelConfig computes, for every backend with a rotary, a bias and a gate method."""

from __future__ import annotations

import pytest
import torch

from rpevit.core.attention import BACKENDS
from rpevit.core.attention.layer import LayerShape, MultiHeadAttention
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


def _positions():
    from rpevit.core.position import POSITIONS

    return POSITIONS


def test_explicit_options_are_each_methods_defaults_unless_set():
    config = model_config(dim=32, heads=4, image_size=6, patch_size=1)
    shape = LayerShape(32, 4, 6)
    for name in [*BACKENDS, *_positions()]:
        assert shape.options_for(name) == config.options_for(name)
    favor = config.options_for("favor")
    assert LayerShape(32, 4, 6, options={"favor": favor}).options_for("favor") is favor


def test_a_config_that_disagrees_with_the_width_is_one_error():
    from rpevit.core.errors import UserError

    with pytest.raises(UserError, match="differ from the config"):
        MultiHeadAttention(16, 4, config=model_config(dim=32, heads=4))
