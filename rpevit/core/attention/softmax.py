"""Exact softmax attention (Vaswani et al. 2017): softmax(q kᵀ/√d + B) v.

Runs through torch's scaled_dot_product_attention (flash / memory-efficient kernels on CUDA);
a relative bias B (heads, T, T) enters as a float attn_mask. Inside a packed step (torch.func.vmap,
rpevit/lab/training/pack.py) on CUDA the same attention is computed by explicit matrix products instead: SDPA's
fused and math kernels fail under vmap in bf16 there (an LSE stride error; mismatched grad dtypes).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..options import NoOptions

# devices on which attention inside vmap avoids SDPA (its kernels fail there under vmap in bf16)
EXPLICIT_UNDER_VMAP = {"cuda"}


def _under_vmap(x: torch.Tensor) -> bool:
    return torch._C._functorch.is_batchedtensor(x)


class SoftmaxAttention(nn.Module):
    """softmax(q kᵀ/√d + B) v over (batch, heads, tokens, head_dim) tensors."""

    Options = NoOptions
    exact = True  # computes the attention it names exactly (no kernel approximation)
    mechanisms = ("absolute", "gate", "rotary", "bias")
    summary = "exact softmax(qkᵀ/√d + B)v through torch SDPA, O(N²)"

    def __init__(self, options: NoOptions, head_dim: int, heads: int):
        super().__init__()
        self.head_dim = head_dim
        self.rotation_site = "pre"  # softmax rotates q, k themselves

    def feature_dim(self) -> int:
        """Dimension a post-map rotation would act on (softmax rotates q, k themselves)."""
        return self.head_dim

    def forward(self, q, k, v, grid, bias=None, feature_rotation=None):
        """Attention output (B, h, T, d)."""
        if q.device.type in EXPLICIT_UNDER_VMAP and _under_vmap(q):
            return self.weights(q, k, grid, bias) @ v
        mask = None if bias is None else bias.dense(grid).to(q.dtype)  # (h, T, T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def weights(self, q, k, grid, bias=None, feature_rotation=None):
        """The dense attention matrix (B, h, T, T)."""
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if bias is not None:
            logits = logits + bias.dense(grid).to(logits.dtype)
        return torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).to(q.dtype)
