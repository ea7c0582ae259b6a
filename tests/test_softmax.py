"""The exact softmax backend (rpevit.core.attention.softmax): SDPA against its own dense weights, bf16 numerics,
and the explicit path it takes under vmap on devices whose fused kernels reject batched tensors."""

import math

import pytest
import torch

from rpevit.core.attention import softmax as softmax_module
from rpevit.core.attention.softmax import SoftmaxAttention
from rpevit.core.grid import Grid
from rpevit.core.position.relative import KernelizedRPE, KrpeOptions

GRID = Grid(3, 4, cls=True)
HEADS, HEAD_DIM = 2, 8


def backend():
    return SoftmaxAttention(SoftmaxAttention.Options(), HEAD_DIM, HEADS)


def bias():
    torch.manual_seed(0)
    module = KernelizedRPE(KrpeOptions(), HEAD_DIM, HEADS, side=4, cls=True)  # a 12-pixel image of 3-pixel patches
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    return module


def qkv(dtype, batch=2, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, GRID.num_tokens, HEAD_DIM, generator=generator).to(dtype) for _ in range(3)]


def test_weights_are_the_softmax_of_scaled_logits_plus_bias_in_float64():
    q, k, v = qkv(torch.float64)
    module = bias().double()
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM) + module.dense(GRID), dim=-1)
    weights = backend().weights(q, k, GRID, module)
    torch.testing.assert_close(weights, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(backend()(q, k, v, GRID, module), expected @ v, rtol=1e-10, atol=1e-12)
    assert backend().feature_dim() == HEAD_DIM


@pytest.mark.parametrize("with_bias", [False, True])
@torch.no_grad()
def test_bf16_weights_are_a_float32_softmax_rounded_once(with_bias):
    """bf16 q, k with a float32 bias: the bias is cast to the logits' dtype, the softmax runs in float32 and
    only its result is rounded to bf16; the SDPA output stays within bf16 rounding of it."""
    q, k, v = qkv(torch.bfloat16)
    module = bias() if with_bias else None
    logits = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
    if module is not None:
        logits = logits + module.dense(GRID).to(torch.bfloat16)
    expected = torch.softmax(logits.float(), dim=-1).to(torch.bfloat16)
    weights = backend().weights(q, k, GRID, module)
    out = backend()(q, k, v, GRID, module)
    assert weights.dtype == torch.bfloat16 and torch.equal(weights, expected)
    assert out.dtype == torch.bfloat16
    assert float((out.float() - (expected.float() @ v.float())).abs().max()) <= 2**-6


def test_explicit_path_under_vmap_equals_sdpa(monkeypatch):
    """On devices listed in EXPLICIT_UNDER_VMAP a vmapped call goes through `weights` @ v (tested here by
    listing the CPU): the same numbers as the plain SDPA call, with and without a bias."""
    q, k, v = qkv(torch.float64, batch=3)
    module = bias().double()
    plain = backend()(q, k, v, GRID, module)
    monkeypatch.setattr(softmax_module, "EXPLICIT_UNDER_VMAP", {"cpu"})
    calls = []
    original = SoftmaxAttention.weights
    monkeypatch.setattr(SoftmaxAttention, "weights", lambda self, *a, **kw: calls.append(1) or original(self, *a, **kw))
    mapped = torch.vmap(lambda q1, k1, v1: backend()(q1[None], k1[None], v1[None], GRID, module)[0])(q, k, v)
    assert calls, "the explicit path was not taken under vmap"
    torch.testing.assert_close(mapped, plain, rtol=1e-10, atol=1e-12)
    calls.clear()
    backend()(q, k, v, GRID, module)  # not under vmap: SDPA
    assert not calls
