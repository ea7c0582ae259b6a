"""Graph capture of the training step: for every backend × {ape, rope_mixed, krpe, string_circulant}
the compiled forward has no graph break (fullgraph) and compiles once (no recompile over steps, FAVOR+
redraws and stochastic-depth draws included), under bf16 autocast as a GPU trains. On a CUDA machine
(the GPU sitting runs this file first) it checks that machine's torch on the GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rpevit.core.model import build_model

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


def _packed_models(variant: str, count: int):
    models = []
    for seed in range(count):
        torch.manual_seed(seed)
        model = build_model(
            variant, seed=seed, dim=32, depth=2, heads=2, mlp_dim=64, image_size=16, drop_path=0.1,
            favor={"redraw_steps": 2},
        )  # fmt: skip
        models.append(model.to(DEVICE).train())
    return models


@pytest.mark.parametrize("variant", VARIANTS)
def test_captured_packed_step_has_no_graph_break_and_no_recompile(variant, monkeypatch):
    """The pack engine's vectorised step (vmap over functional_call of 3 runs) as one graph over
    steps with FAVOR+ redraws and each run's own stochastic-depth draws; one more graph for the
    epoch's shorter last batch, none after."""
    from types import SimpleNamespace

    from torch._dynamo.testing import CompileCounter

    from rpevit.core import capture
    from rpevit.lab.training import pack
    from rpevit.lab.training.train import _rng_state

    torch._dynamo.reset()
    counter = CompileCounter()
    monkeypatch.setattr(capture, "BACKEND", counter)
    models = _packed_models(variant, 3)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in models]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0) for o in optimizers]
    train_cfg = SimpleNamespace(amp="bf16", label_smoothing=0.1, grad_clip=1.0)
    step = pack.PackedStep(models, optimizers, schedulers, train_cfg, DEVICE, captured=True)
    members = [SimpleNamespace(state=SimpleNamespace(model=m), rng=_rng_state(DEVICE)) for m in models]
    for batch in (4, 4, 4, 4, 3, 4, 3):  # redraws every 2 steps; batch 3 = an epoch's last batch
        images = torch.randn(3, batch, 1, 16, 16, device=DEVICE)
        labels = torch.randint(0, 10, (3, batch), device=DEVICE)
        losses, _ = step.forward(images, labels, pack.draws_of(members, batch, DEVICE))
        assert torch.isfinite(losses).all()
        step.update(losses, [0, 1, 2])
    assert counter.frame_count == 2, f"{variant}: {counter.frame_count} compiled frames (2 batch sizes)"


@pytest.mark.parametrize("variant", ["favor+ape", "softmax+rope_mixed"])
def test_a_pack_trained_through_the_captured_step_gives_the_plain_packs_records(
    variant, tiny_params, tiny_dataset, tmp_path, monkeypatch
):
    """Capture changes how the step runs, not what it computes: dynamo's captured graph run by eager
    kernels (backend "eager"; on CUDA inductor's kernels differ in rounding) trains the same records,
    warm-up included (it draws from a forked random state and drops its gradients)."""
    import dataclasses

    from rpevit.core import capture
    from rpevit.lab.store.run import Run
    from rpevit.lab.training import pack

    model = dataclasses.replace(tiny_params.model, drop_path=0.2)
    params = dataclasses.replace(tiny_params, model=model)
    plain = [Run(params, "mnist5k", variant, seed, runs_root=tmp_path / "plain") for seed in (0, 1)]
    expected = pack.train_pack(plain, tiny_dataset)
    monkeypatch.setattr(capture, "BACKEND", "eager")
    monkeypatch.setattr(capture, "captures", lambda train_cfg, backend: True)
    torch._dynamo.reset()
    captured = [Run(params, "mnist5k", variant, seed, runs_root=tmp_path / "captured") for seed in (0, 1)]
    got = pack.train_pack(captured, tiny_dataset)
    for a, b in zip(got, expected, strict=True):
        assert a["compiled"] and not b["compiled"]
        for key in ("top1", "test_correct", "best_epoch", "best_val_acc"):
            assert a[key] == b[key], key
        assert a["log_likelihood"] == pytest.approx(b["log_likelihood"], rel=1e-6)


def test_captured_backends_only_where_asked():
    """`train.compile` captures every backend's step; `train.compile_backends` narrows it (on this CPU
    compiling pays for FAVOR+ and costs ReLU), and an unknown backend is one error before training."""
    from types import SimpleNamespace

    from rpevit.core import capture
    from rpevit.core.errors import UserError
    from rpevit.lab.params import TrainConfig

    assert not capture.captures(TrainConfig(), "favor")
    assert capture.captures(TrainConfig(compile=True), "relu")
    only = TrainConfig(compile=True, compile_backends=("favor",))
    assert capture.captures(only, "favor") and not capture.captures(only, "relu")
    assert not capture.captures(SimpleNamespace(compile=False, compile_backends=("favor",)), "favor")
    with pytest.raises(UserError, match="train.compile_backends: 'favour' is not valid"):
        TrainConfig(compile=True, compile_backends=("favour",)).check()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU sitting's compile check spends its minutes on the GPU")
def test_a_run_trained_through_inductor_on_the_cpu_gives_the_plain_runs_records(tiny_params, tiny_dataset, tmp_path):
    """The CPU path a study takes with `--capture-only favor`: inductor's fused kernels (no stand-in
    backend) compute the plain step's numbers up to float32 rounding, and a backend not listed is
    not captured."""
    import dataclasses

    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run
    from rpevit.lab.training.train import train_run

    torch._dynamo.reset()
    train = dataclasses.replace(tiny_params.train, amp="off", device="cpu", compile=True, compile_backends=("favor",))
    captured_params = dataclasses.replace(tiny_params, train=train)
    plain = train_run(Run(tiny_params, "mnist5k", "favor+ape", 0), tiny_dataset, tmp_path / "plain")
    captured = train_run(Run(captured_params, "mnist5k", "favor+ape", 0), tiny_dataset, tmp_path / "captured")
    assert captured["compiled"] and not plain["compiled"] and captured["compile_seconds"] > 0
    losses = [[row["train_loss"] for row in records.read_history(tmp_path / d)] for d in ("plain", "captured")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    assert abs(captured["top1"] - plain["top1"]) <= 0.01  # at most one of the 100 test images flips
    relu = train_run(Run(captured_params, "mnist5k", "relu+ape", 0), tiny_dataset, tmp_path / "relu")
    assert not relu["compiled"]
