"""Device choice and mixed precision: CUDA when asked for (or 'auto' finds one); bf16 autocast
where the GPU supports it ('auto') or wherever it is asked for ('bf16')."""

from __future__ import annotations

import os
import platform
from contextlib import contextmanager

import torch

from .errors import UserError


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' → cuda if available else cpu; 'cuda' without a GPU is a user error."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device: 'cuda' was asked for but no CUDA GPU is visible; use 'auto' or 'cpu'.")
    return torch.device(name)


def uses_bf16(device: torch.device, amp: str) -> bool:
    """bf16 autocast or fp32: 'bf16' asks for it on any device (CPU included, for experiments);
    'auto' takes it on CUDA only where the GPU computes in bf16 (Ampere and later; not V100, T4);
    'off' never."""
    if amp == "bf16":
        return True
    return amp == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()


def precision(device: torch.device, amp: str) -> str:
    """What a training computes in, as its record's `amp` says it: 'bf16' or 'fp32'."""
    return "bf16" if uses_bf16(device, amp) else "fp32"


def planned_precision(device: str, amp: str) -> str | None:
    """The precision a training on `device` ('cpu', 'cuda', 'auto') will use, told without a GPU
    where it can be: None only for amp 'auto' on a CUDA device this machine cannot see (a Ray
    driver without a GPU), where the GPU's bf16 support decides."""
    if amp in ("off", "bf16"):
        return "fp32" if amp == "off" else "bf16"
    if device == "cuda" and not torch.cuda.is_available():
        return None
    return precision(resolve_device(device), amp)


def check_one_precision(preset: str, amp: str, planned: str | None, device: str, finished: list[dict]) -> None:
    """Refuse, before any training, a sitting that would train a study's runs in another precision
    than its finished runs: the study pairs runs by seed, so bf16 runs beside fp32 ones would confound
    every contrast (amp 'auto' is fp32 on a CPU and bf16 on most GPUs, under one run key)."""
    others = sorted({r["amp"] for r in finished if r.get("amp") and r["amp"] != planned})
    if planned is None or not others:
        return
    count = sum(r.get("amp") in others for r in finished)
    raise UserError(
        f"preset {preset}: {count} of its {len(finished)} finished runs trained in {' and '.join(others)}, but this "
        f"sitting would train in {planned} (train.amp: {amp} on device {device}). Its runs are compared by seed, so "
        f"they must share one precision: finish it where train.amp: {amp} means {others[0]}"
        + (" (--device cpu)" if others[0] == "fp32" and amp == "auto" else "")
        + ", or train the whole grid afresh from a copy of the preset under another name."
    )


def autocast(device: torch.device, amp: str):
    """bf16 autocast where `uses_bf16` says so, else a disabled autocast (fp32)."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=uses_bf16(device, amp))


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's (Linux: /proc/cpuinfo's model name; "cpu" when nothing says)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    except OSError:
        names = []
    return (names[0] if names else "") or platform.processor() or "cpu"


@contextmanager
def deterministic(enabled: bool = True):
    """Within the block, bitwise-repeatable kernels (`torch.use_deterministic_algorithms`: no atomic
    adds in index_add_ or SDPA's backward; an op without a deterministic kernel raises) and the
    fixed cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8, read when cuBLAS starts: set before
    the first CUDA matmul of the process). Without it, CUDA runs and resumes agree only to float
    rounding. The previous setting is restored after."""
    if not enabled:
        yield
        return
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


@contextmanager
def true_fp32(device: torch.device, computed_in: str):
    """Within the block, an fp32 training on CUDA computes in full fp32: TF32 off for matmuls and
    cuDNN convolutions (cuDNN's is on by default), so an fp32 study trains alike on CPU and GPU.
    The previous settings are restored after; nothing changes on the CPU or under bf16."""
    if device.type != "cuda" or computed_in != "fp32":
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous
