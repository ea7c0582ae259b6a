"""`bench tokens`: what each backend and positional method costs as the token count grows.

The study's ViT on each preset's images — by default fmnist_converged (28×28, 49 patches + CLS = 50
tokens), canvas_gap_pilot (40×40, 101) and canvas56_gap_pilot (56×56, 197) — for every variant asked,
all (preset, variant) cells timed in one process over interleaved rounds (bench.interleaved_speeds),
so the ratios are side by side. Two ratios answer "at what cost": a Performer against softmax with
the same positional methods (where linear attention starts to pay: a ratio below 1), and a positional
method against APE on the same backend (what the RPE adds). Medians over rounds; ratios of medians.
"""

from __future__ import annotations

import dataclasses
import statistics

from ...core.variants import parse_variant

DEFAULT_PRESETS = "fmnist_converged,canvas_gap_pilot,canvas56_gap_pilot"
# the factorial's primary and secondary variants (issue: a task where position matters)
DEFAULT_VARIANTS = ",".join(
    f"{backend}+{method}"
    for method in ("ape", "rope_mixed", "krpe", "string_circulant")
    for backend in ("softmax", "favor", "relu")
)


def tokens_of(params, image_size: int | None = None) -> int:
    """Tokens the preset's model attends over: patches of its first dataset's images (or of images of
    `image_size` pixels), plus CLS."""
    from ..store.run import Run
    from .throughput import model_tokens

    config = Run(params, params.datasets[0], params.variants[0], 0).model_config
    return model_tokens(config if image_size is None else dataclasses.replace(config, image_size=image_size))


def _partner(variant: str, backend: str | None = None, positions: tuple[str, ...] | None = None) -> str:
    """The variant with another backend or other positional methods (canonical name)."""
    parsed = parse_variant(variant)
    return parse_variant("+".join([backend or parsed.backend, *(positions or parsed.positions)])).name


def token_table(rows: list[dict], measure: str) -> list[dict]:
    """Per variant: the median of `measure` (ms per image) at each token count (the rows' `tokens`), its
    ratio to softmax with the same positional methods, and to APE on the same backend."""
    per: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        value = row[measure] * (1000 if measure == "train_seconds_per_image" else 1)
        per.setdefault((parse_variant(row["variant"]).name, int(row["tokens"])), []).append(value)
    median = {key: statistics.median(values) for key, values in per.items()}
    counts = sorted({n for _, n in median})
    variants = list(dict.fromkeys(v for v, _ in median))
    table = []
    for variant in variants:
        row = {"variant": variant}
        for n in counts:
            row[f"ms at {n}"] = median.get((variant, n))
        softmax, ape = _partner(variant, backend="softmax"), _partner(variant, positions=("ape",))
        for label, partner in (("× softmax", softmax), ("× APE", ape)):
            for n in counts:
                mine, theirs = median.get((variant, n)), median.get((partner, n))
                row[f"{label} at {n}"] = mine / theirs if mine and theirs else None
        table.append(row)
    return table


def crossover_line(table: list[dict], counts: list[int], what: str) -> str:
    """One sentence per Performer backend with APE: its time as a multiple of softmax's at each length."""
    parts = []
    for row in table:
        parsed = parse_variant(row["variant"])
        if parsed.backend != "softmax" and parsed.positions == ("ape",):
            ratios = ", ".join(f"{row[f'× softmax at {n}']:.2f}× at {n}" for n in counts if row[f"× softmax at {n}"])
            parts.append(f"{parsed.backend} {ratios}")
    return f"{what}, Performer with APE as a multiple of softmax with APE (< 1: cheaper): " + "; ".join(parts) + "."


def run_tokens_bench(args) -> None:
    """`bench tokens`: time every (preset, variant) cell side by side and print the tables; with
    `--sides`, the first preset's model on random images of each patch-grid side instead."""
    import torch

    from ...core.device import device_name, resolve_device
    from ...core.metrics import machine_load
    from ..params import load_params
    from ..store.records import write_csv
    from ..tables import markdown_table
    from .throughput import interleaved_speeds

    device = resolve_device(args.device)
    presets = [load_params(name.strip()) for name in (args.params or DEFAULT_PRESETS).split(",")]
    variants = [v.strip() for v in (args.variant or DEFAULT_VARIANTS).split(",")]
    if args.sides:
        patch = presets[0].model.patch_size
        cells = [(presets[0], v, int(side) * patch) for side in args.sides.split(",") for v in variants]
        where = f"{presets[0].name}'s model on random images of " + ", ".join(
            f"{px}×{px} px ({tokens_of(presets[0], px)} tokens)" for _, _, px in cells[:: len(variants)]
        )
    else:
        cells = [(params, variant) for params in presets for variant in variants]
        where = ", ".join(f"{params.name} ({tokens_of(params)} tokens)" for params in presets)
    before = machine_load()
    rows = interleaved_speeds(cells, device, rounds=args.rounds, train_steps=args.steps or 3)
    after = machine_load()
    counts = sorted({int(r["tokens"]) for r in rows})
    print(
        f"device: {device} ({device_name(device)}), {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"the study's ViT on {where}; "
        f"{len(cells)} cells × {args.rounds} interleaved rounds ({args.steps or 3} training steps of each "
        f"preset's batch and 3 inference batches of 256 per cell and round); medians over rounds, ratios of "
        f"medians; 1-minute load average {before['load_average']:.2f} before, {after['load_average']:.2f} "
        f"after, on {before['cpu_count']} cores\n"
    )
    for measure, what in (("train_seconds_per_image", "Training"), ("ms_per_image_batched", "Inference")):
        table = token_table(rows, measure)
        print(f"## {what}: ms per image\n")
        print(crossover_line(table, counts, what) + "\n")
        print(markdown_table(table, list(table[0]), digits=2))
    if args.csv:
        from pathlib import Path

        write_csv(Path(args.csv), rows)
        print(f"per-round timings: {args.csv}")
