"""`python -m campaign gpu-acceptance`: the GPU acceptance run, for whoever has a CUDA GPU.

One line per check, `ok`, `FAIL` or `skip`, then the path of the benchmark report:

- device: the GPU, its memory, CUDA and torch versions, whether it computes in bf16;
- cuda tests: tests/test_gpu.py (every variant trains in bf16; fast paths and cuFFT against the
  dense N×N path in fp32; SDPA finds a fused kernel; compile == eager; an exact resume);
- sync-free steps: SYNC_STEPS training steps of every variant under
  `torch.cuda.set_sync_debug_mode("error")`; each host sync is named by its line in rpevit (want none);
- torchrun nccl: a 2-process data-parallel training over NCCL (needs 2 GPUs);
- ray study: a tiny study with `--engine ray --gpus-per-run 0.5` (two runs share the GPU);
- bench: training images/s in bf16 with MFU against the GPU's stated dense bf16 peak, and
  `bench attention`, written to reports/bench/gpu_<device>.md.

Without a CUDA device it exits at once with status 2 and the one line "error: no CUDA device …".
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from rpevit.core.errors import UserError
from rpevit.core.metrics import bf16_peak

SYNC_STEPS = 20
DOCTOR_PRESET = """\
name: gpu_doctor
description: the tiny study of `python -m campaign gpu-acceptance`
datasets: [mnist5k]
variants: [softmax+rope_mixed, favor+krpe]
seeds: [0]
model: {patch_size: 7, dim: 32, depth: 2, heads: 2, mlp_dim: 64, pool: cls, favor: {redraw_steps: 5}}
train: {epochs: 1, batch_size: 64, device: cuda, amp: bf16, timing_images: 64}
"""
BENCH_VARIANTS = ("softmax+ape", "favor+ape", "relu+ape", "favor+rope_mixed+krpe")


def require_cuda() -> torch.device:
    """The CUDA device, or one UserError naming what this torch build sees."""
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + ("" if torch.version.cuda else " (a CPU-only build)")
        raise UserError(
            f"no CUDA device: {build} sees no GPU; `gpu-acceptance` runs only on a CUDA machine (a GPU "
            "machine with a CPU build: bash scripts/install_torch.sh .venv/bin/python 2.13.0 0.28.0)."
        )
    return torch.device("cuda", torch.cuda.current_device())


def _line(status: str, check: str, detail: str) -> bool:
    print(f"{status:<5} {check}: {detail}", flush=True)
    return status != "FAIL"


def _run(command: list[str], env: dict | None = None, timeout: int = 3600) -> tuple[int, str]:
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout, check=False
    )
    return result.returncode, result.stdout + result.stderr


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def check_cuda_tests(root: Path) -> bool:
    tests = root / "tests" / "test_gpu.py"
    if not tests.is_file():
        return _line("skip", "cuda tests", f"{tests} is not here (run from a clone of the repository)")
    code, output = _run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", str(tests)])
    summary = _tail(output)
    ok = _line("ok" if code == 0 and "skipped" not in summary else "FAIL", "cuda tests", summary)
    for line in output.splitlines():  # pytest's short summary: one line per failed, erroring or skipped test
        if line.startswith(("FAILED", "ERROR", "SKIPPED")):
            print(f"      {line[:300]}", flush=True)
    return ok


def _sync_site(error: BaseException) -> str:
    """Where a host sync happened: the innermost rpevit frame of its traceback (file:line function)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}rpevit{os.sep}" in f.filename]
    if not frames:
        return "outside rpevit"
    frame = frames[-1]
    return f"{Path(frame.filename).parent.name}/{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def _first_sync(variant: str, device: torch.device) -> str | None:
    """The site of the first host sync in SYNC_STEPS bf16 training steps of a tiny model of `variant`,
    or None. `set_sync_debug_mode("error")` makes every synchronizing CUDA call raise, so the
    traceback names the line (one untimed step first: caches are built once; FAVOR+ redraws, outside
    the step, are allowed)."""
    from rpevit.core.model import build_model

    torch.manual_seed(0)
    size = {"dim": 32, "depth": 2, "heads": 2, "mlp_dim": 32, "image_size": 16, "patch_size": 4, "channels": 1}
    model = build_model(variant, num_classes=10, favor={"redraw_steps": 7}, **size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.randn(SYNC_STEPS + 1, 8, 1, 16, 16, device=device)
    labels = torch.randint(0, 10, (SYNC_STEPS + 1, 8), device=device)

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[i]).float(), labels[i])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    step(0)
    model.count_training_step()
    for i in range(1, SYNC_STEPS + 1):
        torch.cuda.set_sync_debug_mode("error")
        try:
            step(i)
        except RuntimeError as error:
            if "synchroniz" not in str(error):
                raise
            return _sync_site(error)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        model.count_training_step()
    return None


def check_sync_free(device: torch.device) -> bool:
    """Every variant's training step without a host sync; the sites found, most frequent first."""
    from rpevit.core.variants import list_variants

    variants = list_variants()
    sites: dict[str, list[str]] = {}
    with warnings.catch_warnings():
        # torch notes once that the sync debug mode is a prototype: said in the README, not per run
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype")
        for variant in variants:
            site = _first_sync(variant, device)
            if site:
                sites.setdefault(site, []).append(variant)
    count = sum(len(v) for v in sites.values())
    ok = _line(
        "FAIL" if sites else "ok",
        "sync-free steps",
        f"{len(variants)} variants × {SYNC_STEPS} bf16 steps, {count} with a host sync",
    )
    for site, names in sorted(sites.items(), key=lambda item: -len(item[1])):
        print(f"      {site}: {len(names)} variants, e.g. {', '.join(names[:3])}", flush=True)
    return ok


def _preset(directory: Path) -> Path:
    path = directory / "gpu_doctor.yaml"
    path.write_text(DOCTOR_PRESET)
    return path


def check_torchrun(directory: Path) -> bool:
    if torch.cuda.device_count() < 2:
        return _line(
            "skip", "torchrun nccl", f"needs 2 GPUs (NCCL takes one per rank), {torch.cuda.device_count()} visible"
        )
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "rpevit", "train"]
    command += ["--params", str(_preset(directory)), "--variant", "favor+krpe", "--no-progress"]
    code, output = _run(command, env={"RPEVIT_RUNS": str(directory / "torchrun_runs")})
    ok = code == 0 and "data-parallel over 2 processes" in output
    return _line("ok" if ok else "FAIL", "torchrun nccl", _tail(output))


def check_ray(directory: Path) -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return _line("FAIL", "ray study", "Ray is not installed: pip install -e '.[cluster]'")
    command = [sys.executable, "-m", "rpevit", "study", str(_preset(directory)), "--engine", "ray"]
    command += ["--gpus-per-run", "0.5", "--no-progress"]
    env = {"RPEVIT_RUNS": str(directory / "ray_runs"), "RPEVIT_REPORTS": str(directory / "ray_reports")}
    code, output = _run(command, env=env)
    return _line("ok" if code == 0 else "FAIL", "ray study", _tail(output))


def training_throughput(variant: str, device: torch.device, steps: int = 30) -> tuple[float, float]:
    """(training images/s in bf16, training FLOPs per image ≈ 3 × forward matmul FLOPs) of the
    smoke preset's model on random 28×28 images at batch 256."""
    from rpevit.core import metrics
    from rpevit.lab.bench.throughput import train_throughput
    from rpevit.lab.params import load_params

    params = load_params("smoke")
    params = dataclasses.replace(
        params, train=dataclasses.replace(params.train, batch_size=256, amp="bf16", device="cuda")
    )
    rate = train_throughput(params, variant, device, steps)
    from rpevit.lab.store.run import Run
    from rpevit.lab.training.runs import untrained_model

    model = untrained_model(Run(params, params.datasets[0], variant, 0), device=device)
    flops = 3 * metrics.matmul_flops(model, torch.randn(2, 1, 28, 28, device=device))
    return rate, flops


def write_bench(device: torch.device, root: Path) -> tuple[bool, Path]:
    name = torch.cuda.get_device_name(device)
    peak = bf16_peak(name)
    rows = []
    for variant in BENCH_VARIANTS:
        rate, flops = training_throughput(variant, device)
        mfu = f"{100 * rate * flops / peak:.2f}%" if peak else "n/a"
        rows.append(f"| {variant} | {rate:,.0f} | {flops / 1e6:,.1f} | {rate * flops / 1e12:.2f} | {mfu} |")
    code, attention = _run([sys.executable, "-m", "rpevit", "bench", "attention", "--device", "cuda"])
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    path = root / "reports" / "bench" / f"gpu_{slug}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    peak_text = f"{peak / 1e12:g} TFLOP/s dense bf16 (stated)" if peak else "unknown (add it to BF16_PEAK_TFLOPS)"
    path.write_text(
        f"# GPU benchmark: {name}\n\n"
        f"`python -m campaign gpu-acceptance`, {time.strftime('%Y-%m-%d %H:%M %Z')}, torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}. Peak: {peak_text}.\n\n"
        "## Training throughput, bf16 autocast, smoke-preset model, batch 256, eager\n\n"
        "MFU = images/s × training FLOPs per image (3 × forward matmul FLOPs) / peak.\n\n"
        "| variant | images/s | MFLOP/image | TFLOP/s | MFU |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n## bench attention\n\n```\n"
        + attention.strip()
        + "\n```\n"
    )
    return code == 0, path


def run_gpu_doctor(root: Path) -> int:
    """Every check in turn (one line each); 0 when none failed, 1 otherwise."""
    device = require_cuda()
    properties = torch.cuda.get_device_properties(device)
    ok = _line(
        "ok",
        "device",
        f"{properties.name}, {properties.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, "
        f"torch {torch.__version__}, bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no (amp auto = fp32)'}",
    )
    with tempfile.TemporaryDirectory(prefix="rpevit-doctor-") as scratch:
        directory = Path(scratch)
        ok &= check_cuda_tests(root)
        ok &= check_sync_free(device)
        ok &= check_torchrun(directory)
        ok &= check_ray(directory)
        bench_ok, path = write_bench(device, root)
        ok &= _line("ok" if bench_ok else "FAIL", "bench", f"written to {path.relative_to(root)}")
    return 0 if ok else 1


def add_parser(sub) -> None:
    """The `gpu-acceptance` sub-command (no arguments)."""
    sub.add_parser("gpu-acceptance", help="on a CUDA machine: CUDA tests, sync check, torchrun, Ray, GPU benchmarks")


def command(args) -> int:
    """`python -m campaign gpu-acceptance`: the GPU acceptance run (module docstring)."""
    from rpevit.lab.params import PROJECT_ROOT

    return run_gpu_doctor(PROJECT_ROOT)
