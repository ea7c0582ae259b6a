"""Precision policy shared by positional maps, feature maps and kernel sums: they run in at least
float32 with autocast disabled (fp16/bf16 overflow and rounding in exp, Σφ(k) and rotation angles
is the classic NaN / drift source); float64 inputs stay float64 so tests can check to 1e-10."""

from __future__ import annotations

import torch


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """max(float32, the inputs' dtypes): float64 if any input is float64, else float32."""
    result = torch.float32
    for dtype in dtypes:
        result = torch.promote_types(result, dtype)
    return result


def autocast_off(device: torch.device):
    """A context that disables autocast on `device` (CPU's context for devices without autocast)."""
    device_type = device.type if torch.amp.is_autocast_available(device.type) else "cpu"
    return torch.autocast(device_type=device_type, enabled=False)


def compute_dtype_of(*tensors) -> torch.dtype:
    """The compute dtype for these tensors: max(float32, their dtypes), None entries ignored."""
    return compute_dtype(*(t.dtype for t in tensors if t is not None))
