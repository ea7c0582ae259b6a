"""Device choice and mixed precision: CUDA when asked for (or 'auto' finds one); bf16 autocast
where the GPU supports it ('auto') or wherever it is asked for ('bf16')."""

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
    """bf16 autocast or fp32: 'bf16' asks for it on any device (CPU included, for experiments);
    'auto' takes it on CUDA only where the GPU computes in bf16 (Ampere and later; not V100, T4);
    'off' never."""
    if amp == "bf16":
        return True
    return amp == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()


def autocast(device: torch.device, amp: str):
    """bf16 autocast where `uses_bf16` says so, else a disabled autocast (fp32)."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=uses_bf16(device, amp))


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
