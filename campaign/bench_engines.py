"""bench-engines: wall time of a preset's whole grid with the sequential runner (`study`) and with
Ray workers (`study --engine ray`, rpevit.lab.schedule.cluster), both from scratch in one process, as a ratio.

    python -m campaign bench-engines --params smoke --workers 2 --cpus-per-run 1

It runs whole studies (rpevit's `bench` times models and layers). The caller gives the data loader
(`dataset_loader`, default the run's real dataset), as `study` and `cluster` take it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

from rpevit.lab.params import Params, load_params
from rpevit.lab.schedule import study
from rpevit.lab.schedule.cluster import import_ray, result_fields, run_study_ray


def compare_engines(params: Params, *, workers: int = 2, cpus_per_run: int = 1, root=None, dataset_loader=None) -> dict:
    """Wall time of the preset's whole grid with the sequential runner and with Ray (`workers`
    tasks of `cpus_per_run` threads at once on a local cluster started here, or as many as an
    already initialised Ray's CPUs hold), both from scratch in fresh runs
    directories under `root` (default: a temporary directory), measured one after the other in
    this process. Prints a Markdown table and returns the numbers."""
    import torch

    ray = import_ray()
    root = Path(root or tempfile.mkdtemp(prefix="rpevit-compare-"))
    threads = torch.get_num_threads()
    start = time.perf_counter()
    sequential = study.run_study(
        params,
        runs_root=root / "sequential" / "runs",
        reports_root=root / "sequential" / "reports",
        dataset_loader=dataset_loader,
    )
    sequential_s = time.perf_counter() - start
    start = time.perf_counter()
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address="local", num_cpus=workers * cpus_per_run, include_dashboard=False)
    else:  # reuse the caller's cluster: as many workers as its CPUs hold runs
        workers = int(ray.cluster_resources().get("CPU", 0)) // cpus_per_run
    init_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        on_ray = run_study_ray(
            params,
            cpus_per_run=cpus_per_run,
            runs_root=root / "ray" / "runs",
            reports_root=root / "ray" / "reports",
            progress=False,
            dataset_loader=dataset_loader,
        )
        ray_s = time.perf_counter() - start
    finally:
        if started_ray:
            ray.shutdown()
    same = sum(result_fields(a) == result_fields(b) for a, b in zip(sequential, on_ray))
    result = {
        "runs": len(sequential),
        "sequential_seconds": sequential_s,
        "sequential_threads": threads,
        "ray_seconds": ray_s,
        "ray_start_seconds": init_s,
        "workers": workers,
        "cpus_per_run": cpus_per_run,
        "ratio": sequential_s / ray_s,
        "ratio_with_start": sequential_s / (ray_s + init_s),
        "identical_results": same,
        "cores": os.cpu_count(),
        "root": str(root),
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{params.name}: {len(sequential)} runs on {os.cpu_count()} cores (1-min load {load:.2f}), "
        f"torch {torch.__version__}, ray {ray.__version__}\n\n"
        "| engine | processes × threads | wall s |\n|---|---|---|\n"
        f"| sequential (`study`) | 1 × {threads} | {sequential_s:.1f} |\n"
        f"| ray (`study --engine ray`) | {workers} × {cpus_per_run} | {ray_s:.1f} "
        f"(+ {init_s:.1f} cluster start) |\n\n"
        f"sequential / ray: {result['ratio']:.2f}× ({result['ratio_with_start']:.2f}× counting the cluster start); "
        f"identical result fields in {same} of {len(sequential)} runs"
        + (
            ""
            if threads == cpus_per_run
            else f" (the runners used {threads} vs {cpus_per_run} torch threads; float sums may round differently)"
        ),
        flush=True,
    )
    return result


def engines_params(args) -> Params:
    """The first preset of --params, with --variants (comma-separated) and --epochs applied."""
    params = load_params((args.params or "smoke").split(",")[0])
    if args.variants:
        params = dataclasses.replace(params, variants=tuple(v.strip() for v in args.variants.split(",")))
    if args.epochs:
        params = dataclasses.replace(params, train=dataclasses.replace(params.train, epochs=args.epochs))
    return params


def run_engines_bench(args, dataset_loader=None) -> dict:
    """`bench engines`: compare_engines on the preset of `args` (see engines_params)."""
    return compare_engines(
        engines_params(args),
        workers=args.workers,
        cpus_per_run=args.cpus_per_run,
        root=args.root,
        dataset_loader=dataset_loader,
    )


def add_parser(sub) -> None:
    """The `bench-engines` sub-command's arguments."""
    bench = sub.add_parser("bench-engines", help="a preset's whole grid: sequential runner vs Ray workers")
    bench.add_argument("--params", default="smoke", help="the preset (default smoke)")
    bench.add_argument(
        "--workers", type=int, default=2, help="Ray tasks at once (a local cluster of workers × cpus-per-run)"
    )
    bench.add_argument("--cpus-per-run", type=int, default=1, help="CPUs (torch threads) per Ray task")
    bench.add_argument("--variants", help="comma-separated variants (default: the preset's)")
    bench.add_argument("--epochs", type=int, help="override train.epochs (a quicker check)")
    bench.add_argument("--root", help="directory for both runs trees (default: a new temporary directory)")


def command(args) -> int:
    """`python -m campaign bench-engines`: run_engines_bench."""
    run_engines_bench(args)
    return 0
