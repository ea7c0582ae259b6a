"""Multi-head self-attention = q/k/v projections + positional mechanisms + one backend.

The order is fixed for every backend: gate(q, k) → rotate(q, k) ("pre" site) → backend, and a
"post" rotation is handed to the backend, which applies it to the feature maps φ(q), φ(k)
(RoFormer's linear-attention form). A relative bias is handed to the backend too.
"""

from __future__ import annotations

from torch import nn

from ..errors import UserError
from ..position import POSITIONS
from . import BACKENDS


class MultiHeadAttention(nn.Module):
    """Self-attention over (batch, tokens, dim) with pluggable backend and positions (given by name):
    `MultiHeadAttention(64, 4, backend="favor", rotary="rope_mixed", side=8)` works on its own, on the
    tokens of a side×side patch grid with a leading CLS (`cls`); `options` maps a backend's or method's
    name to its Options (each one's defaults unless set). `from_config` builds it from a ViT's ModelConfig."""

    def __init__(
        self,
        dim: int,
        heads: int,
        backend: str = "softmax",
        rotary: str | None = None,
        bias: str | None = None,
        gate: str | None = None,
        *,
        side: int = 8,
        cls: bool = True,
        options: dict | None = None,
    ):
        super().__init__()
        chosen = dict(options or {})

        def options_for(name: str):
            return chosen.get(name) or (BACKENDS.get(name) or POSITIONS[name].build).Options()

        def position(name: str, width: int):
            return POSITIONS[name].build(options_for(name), width, heads, side=side, cls=cls)

        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.backend = BACKENDS[backend](options_for(backend), self.head_dim, heads)
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
            self.rotary = position(rotary, rotary_dim)
        self.bias = None if bias is None else position(bias, self.head_dim)
        if self.bias is not None and hasattr(self.backend, "check_bias"):
            self.backend.check_bias(self.bias)
        self.gate = None if gate is None else position(gate, self.head_dim)

    @classmethod
    def from_config(cls, config, backend: str, rotary=None, bias=None, gate=None) -> MultiHeadAttention:
        """The layer a ViT of this ModelConfig builds (its width, heads, grid, CLS and method options)."""
        side, has_cls = config.image_size // config.patch_size, config.pool == "cls"
        return cls(
            config.dim, config.heads, backend, rotary, bias, gate, side=side, cls=has_cls, options=config.options
        )

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
