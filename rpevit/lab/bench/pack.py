"""Benchmark of packed training: aggregate training images/s of K runs in one vectorised step
(pack.PackedStep) against one run's plain step (the sequential engine's), per variant, measured side
by side in one process: interleaved rounds, the median of each cell, the ratio to the single run.
With `--capture` every cell is also timed graph-captured (rpevit.core.capture: CUDA graphs on CUDA); on
CUDA each row also gives the best cell's MFU against the GPU's stated dense bf16 peak.

    python -m rpevit bench pack --params fmnist_converged --packs 1,2,4,8 --rounds 5 [--device cuda] [--capture]
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ...core import capture as capture_lib
from ...core.data import dataset_info
from ...core.device import autocast, resolve_device
from ...core.loop import adamw
from ...core.model import build_model
from ..params import load_params
from ..store.run import model_config_for
from ..tables import markdown_table
from ..training.pack import PackedStep, draws_of
from ..training.train import _rng_state

PRIMARY = "softmax+ape,favor+ape,relu+ape,softmax+rope_mixed,favor+rope_mixed,relu+rope_mixed"


def _models(params, variant: str, count: int, device):
    config = model_config_for(params, params.datasets[0])
    models, optimizers = [], []
    for seed in range(count):
        torch.manual_seed(seed)
        model = build_model(variant, config, seed=seed).to(device).train()
        models.append(model)
        optimizers.append(adamw(model, params.train.lr, params.train.weight_decay))
    return models, optimizers


def _synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _single(params, variant: str, device, batch, captured: bool = False):
    """Images/s of one run's plain training step (what core.loop.train_epoch does per step)."""
    (model,), (optimizer,) = _models(params, variant, 1, device)
    forward = capture_lib.capture(model, device) if captured else model
    images, labels = batch
    train_cfg = params.train

    def step():
        with autocast(device, train_cfg.amp):
            logits = forward(images[0])
        loss = F.cross_entropy(logits.float(), labels[0], label_smoothing=train_cfg.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train_cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        optimizer.step()
        model.count_training_step()

    return step, labels.shape[1]


def _packed(params, variant: str, count: int, device, batch, captured: bool = False):
    """Images/s of K runs in one packed step (their own stochastic-depth draws and optimizers)."""
    models, optimizers = _models(params, variant, count, device)
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0) for o in optimizers]
    packed = PackedStep(models, optimizers, schedulers, params.train, device, captured=captured)
    members = [SimpleNamespace(state=SimpleNamespace(model=m), rng=_rng_state(device)) for m in models]
    images, labels = batch[0][:count], batch[1][:count]
    live = list(range(count))

    def step():
        losses, _ = packed.forward(images, labels, draws_of(members, labels.shape[1], device))
        packed.update(losses, live)

    return step, count * labels.shape[1]


WARM_UP_STEPS = 3  # a captured step compiles, warms up, then records its CUDA graph


def _timed(step, images: int, steps: int, device) -> float:
    for _ in range(WARM_UP_STEPS):
        step()
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _synchronize(device)
    return images * steps / (time.perf_counter() - start)


def _training_flops(params, variant: str, device) -> float:
    """Training matmul FLOPs per image: 3 × the forward's (rpevit.core.metrics.matmul_flops)."""
    from ...core.metrics import matmul_flops

    (model,), _ = _models(params, variant, 1, device)
    info = dataset_info(params.datasets[0])
    return 3 * matmul_flops(model, torch.randn(2, info.channels, info.image_size, info.image_size, device=device))


def pack_rows(
    params, variants: list[str], packs: list[int], device, steps: int, rounds: int, captures=(False,), peak=None
) -> list[dict]:
    """Per variant, K and capture: median aggregate images/s over interleaved rounds, and its ratio to
    one run's plain (uncaptured) step; with `peak` (FLOP/s) the best cell's MFU."""
    info = dataset_info(params.datasets[0])
    batch_size, largest = params.train.batch_size, max(packs)
    shape = (largest, batch_size, info.channels, info.image_size, info.image_size)
    batch = (torch.randn(shape, device=device), torch.randint(0, info.num_classes, shape[:2], device=device))
    rows = []
    for variant in variants:
        cells = {}
        for captured in captures:
            tag = " captured" if captured else ""
            cells[f"single{tag}"] = _single(params, variant, device, batch, captured)
            cells.update({f"K={k}{tag}": _packed(params, variant, k, device, batch, captured) for k in packs})
        speeds = {name: [] for name in cells}
        for _ in range(rounds):
            for name, (step, images) in cells.items():
                speeds[name].append(_timed(step, images, steps, device))
        single = statistics.median(speeds["single"])
        row = {"variant": variant, "single run img/s": single}
        for name in list(cells)[1:]:
            median = statistics.median(speeds[name])
            row[f"{name} img/s"] = median
            row[f"{name} ×"] = median / single
        if peak:
            best = max(statistics.median(v) for v in speeds.values())
            row["best MFU %"] = 100 * best * _training_flops(params, variant, device) / peak
        rows.append(row)
    return rows


def run_pack_bench(args) -> None:
    """`python -m rpevit bench pack`: print the table (Markdown) with its conditions."""
    from ...core.metrics import machine_load

    params = load_params((args.params or "smoke").split(",")[0])
    device = resolve_device(args.device)
    variants = [v.strip() for v in (args.variants or PRIMARY).split(",")]
    packs = [int(k) for k in (args.packs or "1,2,4,8").split(",")]
    steps = args.steps or 4
    load = machine_load()
    print(
        f"device: {device}, {torch.get_num_threads()} threads, torch {torch.__version__}; preset {params.name}'s model "
        f"and batch ({params.train.batch_size}) on {params.datasets[0]}-shaped random images; {steps} steps × "
        f"{args.rounds} interleaved rounds per cell, median; ×: aggregate images/s over one run's plain step; "
        f"1-minute load {load['load_average']:.2f} at the start"
    )
    captures = (False, True) if args.capture else (False,)
    peak = None
    if device.type == "cuda":
        from ...core.metrics import bf16_peak

        peak = bf16_peak(torch.cuda.get_device_name(device))
        print(f"GPU {torch.cuda.get_device_name(device)}; dense bf16 peak {peak / 1e12 if peak else 'unknown'} TFLOP/s")
    rows = pack_rows(params, variants, packs, device, steps, args.rounds, captures, peak)
    print(markdown_table(rows, list(rows[0]), digits=2))
