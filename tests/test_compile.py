"""Graph capture of the training step: for every backend × {ape, rope_mixed, krpe, string_circulant}
the compiled forward has no graph break (fullgraph) and compiles once (no recompile over steps, FAVOR+
redraws and stochastic-depth draws included), under bf16 autocast as a GPU trains. On a CUDA machine
(the GPU sitting runs this file first) it checks that machine's torch on the GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rpevit.model import build_model

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
VARIANTS = [f"{b}+{m}" for b in ("softmax", "favor", "relu") for m in ("ape", "rope_mixed", "krpe", "string_circulant")]


@pytest.mark.parametrize("variant", VARIANTS)
def test_compiled_training_step_has_no_graph_break_and_no_recompile(variant):
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(
        variant, seed=0, dim=32, depth=2, heads=2, mlp_dim=64, image_size=16, drop_path=0.1, favor={"redraw_steps": 2}
    )
    model = model.to(DEVICE).train()
    counter = CompileCounter()
    forward = torch.compile(model, backend=counter, fullgraph=True)  # any graph break raises
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(4):
        images, labels = torch.randn(4, 1, 16, 16, device=DEVICE), torch.randint(0, 10, (4,), device=DEVICE)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            logits = forward(images)
        F.cross_entropy(logits.float(), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        model.count_training_step()
    assert counter.frame_count == 1, f"{variant}: {counter.frame_count} compiled frames (recompiles)"
