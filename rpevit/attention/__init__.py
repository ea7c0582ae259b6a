"""Attention backends: each computes attention over (B, heads, T, d) q, k, v and exposes the
dense matrix it implies (`weights`). Adding a backend = one entry here."""
from __future__ import annotations

from .linear import FavorAttention, ReluAttention
from .softmax import SoftmaxAttention

BACKENDS = {
    "softmax": SoftmaxAttention,
    "favor": FavorAttention,
    "relu": ReluAttention,
}
