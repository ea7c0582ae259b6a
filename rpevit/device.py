"""Device choice and mixed precision: CUDA when asked for (or 'auto' finds one), bf16 autocast on CUDA."""

from __future__ import annotations

import platform

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
    """bf16 autocast runs on CUDA for amp 'auto' or 'bf16'; everything else is fp32."""
    return device.type == "cuda" and amp in ("auto", "bf16")


def autocast(device: torch.device, amp: str):
    """bf16 autocast on CUDA ('auto' or 'bf16'); fp32 elsewhere."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=uses_bf16(device, amp))


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
