"""The CUDA acceptance tests (issue 19 §3), run by `python -m campaign gpu-acceptance` on a CUDA machine.

Skipped without a CUDA GPU, by design: their CPU stand-ins are tests/test_cuda_readiness.py. Each
checks what only a GPU can show: every variant trains in bf16, the fast attention paths and cuFFT
agree with the dense N×N reference in fp32, SDPA finds a fused kernel for softmax without bias,
torch.compile agrees with eager, and a resume on CUDA is exact with `train.deterministic`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rpevit.core.grid import Grid
from rpevit.core.model import build_model
from rpevit.core.variants import list_variants

from helpers import resumed_like_straight

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (run `python -m campaign gpu-acceptance` on one)"
)
CUDA = torch.device("cuda")
TINY = {"dim": 32, "depth": 2, "heads": 2, "mlp_dim": 32, "image_size": 16, "patch_size": 4, "channels": 1}


def _model(variant: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(variant, seed=seed, **{**TINY, "num_classes": 10, **overrides}).to(CUDA)


def test_every_variant_trains_a_few_bf16_steps():
    failures = {}
    for variant in list_variants():
        model = _model(variant, favor={"redraw_steps": 2}).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(3):
            images = torch.randn(8, 1, 16, 16, device=CUDA)
            labels = torch.randint(0, 10, (8,), device=CUDA)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(images)
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            model.count_training_step()
            losses.append(loss.detach())
        if logits.dtype != torch.bfloat16 or not torch.isfinite(torch.stack(losses)).all():
            failures[variant] = f"logits {logits.dtype}, losses {torch.stack(losses).tolist()}"
    assert failures == {}


def _paths_agree(variant: str, path: str) -> None:
    """The layer's output on a 12×12 grid through `path` equals the dense N×N path, fp32 on CUDA."""
    backend = variant.split("+")[0]
    images = torch.randn(2, 1, 48, 48, device=CUDA, generator=torch.Generator(CUDA).manual_seed(0))
    outputs = []
    for chosen in (path, "dense"):
        model = _model(variant, image_size=48, **{backend: {"bias_path": chosen}}).eval()
        with torch.no_grad():
            outputs.append(model(images))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant, path", [("favor+manhattan", "axis"), ("relu+axial_rpe", "axis")])
def test_separable_fast_path_equals_dense_in_fp32(variant, path):
    _paths_agree(variant, path)


@pytest.mark.parametrize("variant", ["favor+krpe", "relu+alibi2d", "favor+rope_mixed+irpe"])
def test_cufft_path_equals_dense_in_fp32(variant):
    _paths_agree(variant, "fft")


def test_sdpa_finds_a_fused_kernel_for_softmax_without_bias():
    """Only flash / memory-efficient kernels allowed: SDPA raises if neither takes the call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = _model("softmax+rope_mixed+ape").eval()
    images = torch.randn(4, 1, 16, 16, device=CUDA)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(images)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("variant", ["softmax+rope_mixed+krpe+ape", "favor+string_circulant+manhattan+gate_string"])
def test_compiled_equals_eager(variant):
    model = _model(variant).train()
    images = torch.randn(4, 1, 16, 16, device=CUDA)
    compiled = torch.compile(model)
    with torch.random.fork_rng(devices=[CUDA]):
        eager = model(images)
    torch.testing.assert_close(compiled(images), eager, rtol=1e-4, atol=1e-4)


def test_resume_on_cuda_is_exact_when_deterministic(tiny_params, tiny_dataset, tmp_path):
    params = dataclasses.replace(
        tiny_params, train=dataclasses.replace(tiny_params.train, device="cuda", deterministic=True)
    )
    straight, resumed = resumed_like_straight(params, tiny_dataset, "favor+rope_mixed", tmp_path)
    assert straight["device"].startswith("cuda") and straight["amp"] == resumed["amp"]
    for key in ("top1", "log_likelihood", "best_val_acc"):
        assert resumed[key] == straight[key], key


def test_grid_tensors_are_made_on_the_gpu():
    coords = Grid(5, 6, trained=(3, 3), interpolate=True).coords(device=CUDA)
    assert coords.device.type == "cuda"
