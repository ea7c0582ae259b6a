"""Benchmarks, reported as numbers and ratios measured side by side in one run (never as tests).

bench train:     training images/s (forward + backward + AdamW step) of each preset model.
bench data:      augmented, normalized images/s of the data pipeline, and its ratio to training.
bench attention: forward+backward time and memory of one attention layer vs tokens N, for every
                 backend bare and with each rotary method; T(4N)/T(N) and rotary overhead
                 (rpevit.lab.bench.attention, with bench bias).
bench levers:    training-throughput levers of one preset's model side by side: batch size ×
                 bf16 autocast × torch.compile, interleaved repeats, ratios to the fp32 eager baseline.
bench speed:     every variant of a preset side by side: training images/s and inference ms/image
                 over interleaved rounds (median and range), ratios to the first variant; the
                 per-round table is what the time claims read (analysis.claims).
bench patches:   seed 000's patch-size sweep: a whole ViT on 32×32 images with patch 8/4/2/1
                 (16…1024 tokens), training and inference seconds per epoch, softmax vs Performers.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ...core import data as data_lib
from ...core.device import autocast, device_name, resolve_device
from ...core.metrics import synchronize, timed
from ...core.model import build_model
from ..params import load_params
from ..store.run import Run
from ..tables import markdown_table
from ..training import runs


def train_throughput(params, variant: str, device, steps: int, compile_model: bool = False) -> float:
    """Training images/s of a preset's model on random inputs of its first dataset's shape."""
    info = data_lib.dataset_info(params.datasets[0])
    model = runs.untrained_model(Run(params, info.name, variant, 0), device=device).train()
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
        model.count_training_step()  # FAVOR+ redraws, as in training

    return steps * batch / sum(timed(step, device, steps, warmup=10 if compile_model else 3))


def _train_step(model, forward, optimizer, x, y, amp: bool):
    """One training step (forward, backward, AdamW) of `forward` (the model or its compiled form)."""

    def step():
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(forward(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.count_training_step()  # FAVOR+ redraws, as in training

    return step


def training_levers(
    params,
    variants,
    device,
    batches=(128, 256),
    repeats: int = 5,
    steps: int = 8,
    compile_model: bool = True,
    amps=(False, True),
) -> list[dict]:
    """Training images/s of each variant at each (batch, amp, compile) setting, side by side.

    Every setting gets its own model and optimizer, warmed up (compiled where asked) before any
    timing; then `repeats` rounds time `steps` steps of every setting in turn, so drifts in machine
    load touch all settings alike. Rows: median and min/max images/s over the rounds, and the ratio
    of medians to the same variant's fp32 eager run at the preset's batch size (`amps`: which of fp32
    (False) and bf16 autocast (True) to time; fp32 always, as every ratio's base).
    """
    info = data_lib.dataset_info(params.datasets[0])
    compiles = (False, True) if compile_model else (False,)
    settings = [(b, amp, comp) for b in batches for amp in amps for comp in compiles]
    cells = {}
    for variant in variants:
        for batch, amp, comp in settings:
            model = runs.untrained_model(Run(params, info.name, variant, 0), device=device).train()
            forward = torch.compile(model) if comp else model
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.randn(batch, info.channels, info.image_size, info.image_size, device=device)
            y = torch.randint(0, info.num_classes, (batch,), device=device)
            step = _train_step(model, forward, optimizer, x, y, amp)
            timed(step, device, 1, warmup=3)
            cells[variant, batch, amp, comp] = (step, [])
    for _ in range(repeats):
        for (_, batch, _, _), (step, rates) in cells.items():
            rates.append(steps * batch / sum(timed(step, device, steps)))
    base_batch = params.train.batch_size if params.train.batch_size in batches else batches[0]
    rows = []
    for (variant, batch, amp, comp), (_, rates) in cells.items():
        median = statistics.median(rates)
        rows.append(
            {
                "variant": variant,
                "batch": batch,
                "amp": "bf16" if amp else "fp32",
                "compiled": comp,
                "images/s": median,
                "min": min(rates),
                "max": max(rates),
                "ratio": median / statistics.median(cells[variant, base_batch, False, False][1]),
            }
        )
    return rows


def variant_speeds(
    params, variants, device, rounds: int = 5, train_steps: int = 3, infer_batches: int = 3, infer_batch: int = 256
) -> list[dict]:
    """Per (round, variant): training seconds per image (forward, backward, AdamW at the preset's batch
    size) and inference milliseconds per image (batches of `infer_batch`), with the machine's load
    (interleaved_speeds over one preset's variants)."""
    cells = [(params, variant) for variant in variants]
    return interleaved_speeds(cells, device, rounds, train_steps, infer_batches, infer_batch)


def model_tokens(config) -> int:
    """Tokens a model configuration attends over: its image's patches, plus CLS."""
    return (config.image_size // config.patch_size) ** 2 + (config.pool == "cls")


def interleaved_speeds(
    cells, device, rounds: int = 5, train_steps: int = 3, infer_batches: int = 3, infer_batch: int = 256
) -> list[dict]:
    """Per (round, cell) for cells of (preset, variant) or (preset, variant, image side in pixels):
    training seconds per image and inference milliseconds per image, with the machine's load, the
    preset's name and the tokens attended over (patches + CLS). A cell with an image side times the
    preset's model on random images of that size instead of its dataset's.

    All models are built and warmed up first; then each round times every cell in turn, the order
    rotating by one each round, so drifts in load and order effects touch every cell alike."""
    from ...core.metrics import machine_load

    timers = []
    for params, variant, *side in cells:
        info = data_lib.dataset_info(params.datasets[0])
        run = Run(params, info.name, variant, 0)
        config = dataclasses.replace(run.model_config, image_size=side[0]) if side else run.model_config
        shape = (info.channels, config.image_size, config.image_size)
        model = runs.untrained_model(run, device=device, config=config)
        tokens = model_tokens(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(params.train.batch_size, *shape, device=device)
        y = torch.randint(0, info.num_classes, (params.train.batch_size,), device=device)
        train = _train_step(model, model, optimizer, x, y, amp=False)
        images = torch.randn(infer_batch, *shape, device=device)

        def infer(model=model, images=images):
            with torch.inference_mode():
                model(images)

        model.train()
        timed(train, device, 1, warmup=2)
        model.eval()
        timed(infer, device, 1, warmup=2)
        timers.append((params, variant, tokens, model, train, infer))
    rows = []
    for index in range(rounds):
        shift = index % len(timers)
        for params, variant, tokens, model, train, infer in timers[shift:] + timers[:shift]:
            model.train()
            train_seconds = sum(timed(train, device, train_steps))
            model.eval()
            infer_seconds = sum(timed(infer, device, infer_batches))
            rows.append(
                {
                    "round": index,
                    "variant": variant,
                    "preset": params.name,
                    "tokens": tokens,
                    "train_seconds_per_image": train_seconds / (train_steps * params.train.batch_size),
                    "ms_per_image_batched": 1000 * infer_seconds / (infer_batches * infer_batch),
                    **machine_load(),
                }
            )
    return rows


def speed_table(rounds: list[dict]) -> list[dict]:
    """Median and range over rounds per variant, and ratios of medians to the first variant's."""
    variants = list(dict.fromkeys(r["variant"] for r in rounds))
    summary = []
    for variant in variants:
        mine = [r for r in rounds if r["variant"] == variant]
        train = [1 / r["train_seconds_per_image"] for r in mine]
        infer = [r["ms_per_image_batched"] for r in mine]
        summary.append(
            {
                "variant": variant,
                "train images/s": statistics.median(train),
                "train min": min(train),
                "train max": max(train),
                "inference ms/image": statistics.median(infer),
                "inference min": min(infer),
                "inference max": max(infer),
                "rounds": len(mine),
            }
        )
    first = summary[0]
    for row in summary:
        row[f"train × {first['variant']}"] = row["train images/s"] / first["train images/s"]
        row[f"inference time × {first['variant']}"] = row["inference ms/image"] / first["inference ms/image"]
    return summary


def data_throughput(params, device, steps: int) -> float:
    """Augmented + normalized training images/s of a preset's first dataset."""
    dataset = runs.dataset_for(params, device=device)
    info = dataset.info
    recipe = data_lib.recipe_for(info, params.data.augment)
    generator = torch.Generator(device=device).manual_seed(0)  # where the data is: no copy, no sync per batch
    count, start = 0, None
    while count < steps * params.train.batch_size + params.train.batch_size:
        for x, _ in data_lib.batches(
            dataset.train, info, params.train.batch_size, shuffle=True, generator=generator, recipe=recipe
        ):
            if start is None:  # the first batch is warm-up
                synchronize(device)
                start = time.perf_counter()
                continue
            count += len(x)
            if count >= steps * params.train.batch_size:
                break
    synchronize(device)
    return count / (time.perf_counter() - start)


def patch_sweep(
    patch_sizes=(8, 4, 2, 1),
    backends=None,
    positions: str = "ape",
    dim: int = 64,
    depth: int = 4,
    heads: int = 4,
    batch: int = 32,
    steps: int = 3,
    epoch_images: int = 50_000,
    device="cpu",
    train: bool = True,
) -> list[dict]:
    """Seconds per epoch of training and inference for each patch size and backend (seed 000 §5.3.3).

    Each cell is measured over `steps` timed batches of random 32×32×3 images after one warm-up
    batch, and scaled to an epoch of `epoch_images` images (CIFAR-100's 50,000 by default);
    `inference_batch_seconds` keeps every timed inference batch (for intervals, analysis.claims).
    `train=False` times inference only.
    """
    from ...core.attention import computing_backends

    device = torch.device(device)
    rows = []
    for patch in patch_sizes:
        for backend in backends or computing_backends():
            torch.manual_seed(0)
            model = build_model(
                f"{backend}+{positions}",
                dim=dim,
                depth=depth,
                heads=heads,
                mlp_dim=2 * dim,
                patch_size=patch,
                image_size=32,
                channels=3,
                num_classes=100,
            ).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.randn(batch, 3, 32, 32, device=device)
            y = torch.randint(0, 100, (batch,), device=device)

            def train_step(model=model, optimizer=optimizer, x=x, y=y):
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                model.count_training_step()

            def infer_step(model=model, x=x):
                with torch.inference_mode():
                    model(x)

            timings = {}
            for label, step in (("train", train_step), ("inference", infer_step))[0 if train else 1 :]:
                model.train(label == "train")
                timings[label] = timed(step, device, steps, warmup=1)
            per_epoch = {
                f"{label}_seconds_per_epoch": sum(times) / (steps * batch) * epoch_images
                for label, times in timings.items()
            }
            rows.append(
                {
                    "patch_size": patch,
                    "tokens": (32 // patch) ** 2,
                    "backend": backend,
                    **per_epoch,
                    "inference_batch_seconds": timings["inference"],
                }
            )
    return rows


def run_bench(what: str, args) -> None:
    """Print the requested benchmark as a Markdown table."""
    if what in ("attention", "bias"):
        from .attention import run_attention_bench, run_bias_bench

        args.steps = args.steps or (5 if what == "attention" else 3)
        return (run_attention_bench if what == "attention" else run_bias_bench)(args)
    benches = {"levers": _levers_bench, "speed": _speed_bench, "patches": _patches_bench}
    return benches.get(what, functools.partial(_throughput_bench, what))(args)


def _levers_bench(args) -> None:
    """`bench levers`: training images/s per batch size, precision and compilation (training_levers)."""
    device = resolve_device(args.device)
    params = load_params((args.params or "smoke").split(",")[0])
    variants = [v.strip() for v in (args.variant or "softmax+ape,favor+ape,relu+ape").split(",")]
    batches = tuple(int(b) for b in args.batches.split(","))
    base = params.train.batch_size if params.train.batch_size in batches else batches[0]
    print(
        f"device: {device} ({device_name(device)}), {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"preset {params.name}'s model; {args.steps or 8} steps × 5 interleaved rounds per cell; ratio = median "
        f"images/s over the same variant's fp32 eager run at batch {base}"
    )
    amps = (False,) if args.amp == "off" else (False, True)
    rows = training_levers(
        params, variants, device, batches, steps=args.steps or 8, compile_model=not args.no_compile, amps=amps
    )
    print(markdown_table(rows, list(rows[0]), digits=2))


def _speed_bench(args) -> None:
    """`bench speed`: the side-by-side speed of a preset's variants (variant_speeds), per-round CSV."""

    from ...core.metrics import machine_load
    from ..store.records import write_csv

    device = resolve_device(args.device)
    params = load_params((args.params or "smoke").split(",")[0])
    variants = [v.strip() for v in args.variant.split(",")] if args.variant else list(params.variants)
    before = machine_load()
    rounds = variant_speeds(params, variants, device, rounds=args.rounds, train_steps=args.steps or 3)
    after = machine_load()
    print(
        f"device: {device} ({device_name(device)}), {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"preset {params.name}'s "
        f"model, {len(variants)} variants × {args.rounds} interleaved rounds ({args.steps or 3} training steps of "
        f"batch {params.train.batch_size} and 3 inference batches of 256 per variant and round); 1-minute load "
        f"average {before['load_average']:.2f} before, {after['load_average']:.2f} after, on "
        f"{before['cpu_count']} cores\n"
    )
    summary = speed_table(rounds)
    print(markdown_table(summary, list(summary[0]), digits=3))
    if args.csv:
        write_csv(Path(args.csv), rounds)
        print(f"\nper-round timings: {args.csv}")


def _patches_bench(args) -> None:
    """`bench patches`: seed 000's patch-size sweep (patch_sweep)."""
    device = resolve_device(args.device)
    print(
        f"device: {device}, torch {torch.__version__}; seed 000 patch sweep on 32×32 images, "
        f"{args.steps or 3} timed batches of 32 per cell, scaled to a 50,000-image epoch"
    )
    print("| patch | tokens | backend | train s/epoch | inference s/epoch |\n|---|---|---|---|---|")
    for row in patch_sweep(steps=args.steps or 3, device=device):
        print(
            f"| {row['patch_size']} | {row['tokens']} | {row['backend']} | "
            f"{row['train_seconds_per_epoch']:.1f} | {row['inference_seconds_per_epoch']:.1f} |",
            flush=True,
        )


def _throughput_bench(what: str, args) -> None:
    """`bench train` / `bench data`: training (and data-pipeline) images/s of each preset's model."""
    args.steps = args.steps or 20
    device = resolve_device(args.device)
    presets = [p.strip() for p in (args.params or "smoke").split(",")]
    print(f"device: {device} ({device_name(device)}, {torch.get_num_threads()} threads), torch {torch.__version__}")
    print("| preset | variant | batch | train images/s | data images/s | data / train |")
    print("|---|---|---|---|---|---|")
    for name in presets:
        params = load_params(name)
        variant = getattr(args, "variant", None) or params.variants[0]
        compile_model = bool(getattr(args, "compile", False)) and device.type == "cuda"
        train_rate = train_throughput(params, variant, device, args.steps, compile_model)
        data_rate = data_throughput(params, device, args.steps) if what == "data" else float("nan")
        print(
            f"| {name} | {variant}{' (compiled)' if compile_model else ''} | {params.train.batch_size} | "
            f"{train_rate:,.0f} | {data_rate:,.0f} | {data_rate / train_rate:.1f}× |",
            flush=True,
        )
