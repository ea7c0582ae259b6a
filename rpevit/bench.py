"""Benchmarks, reported as numbers and ratios measured side by side in one run (never as tests).

bench train: training images/s (forward + backward + AdamW step) of each preset model.
bench data:  augmented, normalized images/s of the data pipeline, and its ratio to training.
"""
from __future__ import annotations

import dataclasses
import time

import torch
import torch.nn.functional as F

from . import data as data_lib
from .model import build_model
from .params import load_params
from .train import autocast, resolve_device


def train_throughput(params, variant: str, device, steps: int, compile_model: bool = False) -> float:
    """Training images/s of a preset's model on random inputs of its first dataset's shape."""
    info = data_lib.DATASETS[params.datasets[0]]
    cfg = dataclasses.replace(params.model, image_size=info.image_size, channels=info.channels,
                              num_classes=info.num_classes)
    torch.manual_seed(0)
    model = build_model(variant, cfg).to(device)
    forward = torch.compile(model) if compile_model else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = params.train.batch_size
    x = torch.randn(batch, info.channels, info.image_size, info.image_size, device=device)
    y = torch.randint(0, info.num_classes, (batch,), device=device)

    def step():
        with autocast(device, params.train.amp):
            loss = F.cross_entropy(forward(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(3 if not compile_model else 10):
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * batch / (time.perf_counter() - start)


def data_throughput(params, device, steps: int) -> float:
    """Augmented + normalized training images/s of a preset's first dataset."""
    dataset = data_lib.load_dataset(params.datasets[0], root=params.data.root, device=device,
                                    split_seed=params.data.split_seed, val_size=params.data.val_size)
    info = dataset.info
    recipe = info.augment if params.data.augment == "auto" else params.data.augment
    generator = torch.Generator().manual_seed(0)
    count, start = 0, None
    while count < steps * params.train.batch_size + params.train.batch_size:
        for x, _ in data_lib.batches(dataset.train, info, params.train.batch_size, shuffle=True,
                                     generator=generator, recipe=recipe):
            if start is None:  # the first batch is warm-up
                _sync(device)
                start = time.perf_counter()
                continue
            count += len(x)
            if count >= steps * params.train.batch_size:
                break
    _sync(device)
    return count / (time.perf_counter() - start)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_bench(what: str, args) -> None:
    """Print the requested benchmark as a Markdown table."""
    device = resolve_device(args.device)
    presets = [p.strip() for p in args.params.split(",")]
    print(f"device: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}, "
          f"{torch.get_num_threads()} threads), torch {torch.__version__}")
    print("| preset | variant | batch | train images/s | data images/s | data / train |")
    print("|---|---|---|---|---|---|")
    for name in presets:
        params = load_params(name)
        variant = params.variants[-1]
        compile_model = bool(getattr(args, "compile", False)) and device.type == "cuda"
        train_rate = train_throughput(params, variant, device, args.steps, compile_model)
        data_rate = data_throughput(params, device, args.steps) if what == "data" else float("nan")
        print(f"| {name} | {variant}{' (compiled)' if compile_model else ''} | {params.train.batch_size} | "
              f"{train_rate:,.0f} | {data_rate:,.0f} | {data_rate / train_rate:.1f}× |", flush=True)
