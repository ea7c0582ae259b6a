"""Multi-head self-attention = q/k/v projections + positional mechanisms + one backend.

The order is fixed for every backend: gate(q, k) → rotate(q, k) ("pre" site) → backend, and a
"post" rotation is handed to the backend, which applies it to the feature maps φ(q), φ(k)
(RoFormer's linear-attention form). A relative bias is handed to the backend too.
"""

from __future__ import annotations

from torch import nn

from ..errors import UserError
from ..position import build_position
from . import build_backend


class MultiHeadAttention(nn.Module):
    """Self-attention over (batch, tokens, dim) with pluggable backend and positions (given by name)."""

    def __init__(
        self, config, backend: str, rotary: str | None = None, bias: str | None = None, gate: str | None = None
    ):
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.dim // config.heads
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.proj = nn.Linear(config.dim, config.dim)
        self.backend = build_backend(backend, config, self.head_dim, self.heads)
        self.rotation_site = self.backend.rotation_site
        self.rotary = None
        if rotary is not None:
            rotary_dim = self.head_dim if self.rotation_site == "pre" else self.backend.feature_dim()
            if self.rotation_site == "post" and rotary_dim % 2:
                raise UserError(
                    f"a 'post' rotation rotates pairs of features, but backend {backend} has an "
                    f"odd number of features m={rotary_dim}; choose an even m or "
                    f"model.{backend}.rotation_site: pre."
                )
            self.rotary = build_position(rotary, config, rotary_dim, self.heads)
        self.bias = None if bias is None else build_position(bias, config, self.head_dim, self.heads)
        if self.bias is not None and hasattr(self.backend, "check_bias"):
            self.backend.check_bias(self.bias)
        self.gate = None if gate is None else build_position(gate, config, self.head_dim, self.heads)

    def _heads(self, x, grid):
        """Project and position q, k, v: each (B, h, T, d)."""
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.gate is not None:
            q, k = self.gate(q, k, grid)
        if self.rotary is not None and self.rotation_site == "pre":
            q, k = self.rotary.rotate_pair(q, k, grid)
        return q, k, v

    def _backend_kwargs(self):
        post = self.rotary if self.rotary is not None and self.rotation_site == "post" else None
        return {"bias": self.bias, "feature_rotation": post}

    def forward(self, x, grid):
        """Attention output (B, T, dim)."""
        q, k, v = self._heads(x, grid)
        out = self.backend(q, k, v, grid, **self._backend_kwargs())  # (B, h, T, d)
        return self.proj(out.transpose(1, 2).reshape(x.shape))

    def attention_matrix(self, x, grid):
        """The dense attention matrix the layer applies to v: (B, heads, T, T)."""
        q, k, _ = self._heads(x, grid)
        return self.backend.weights(q, k, grid, **self._backend_kwargs())
