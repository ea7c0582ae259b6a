"""Multi-head self-attention = q/k/v projections + positional mechanisms + one backend.

The order is fixed for every backend: gate(q, k) → rotate(q, k) ("pre" site) → backend, and a
"post" rotation is handed to the backend, which applies it to the feature maps φ(q), φ(k)
(RoFormer's linear-attention form). A relative bias is handed to the backend too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from ..errors import UserError
from ..position import POSITIONS, build_position
from . import BACKENDS, build_backend


@dataclass(frozen=True)
class LayerShape:
    """What a layer's backend and positional methods read of the model, given explicitly: width, heads, the
    patch grid's side (image_size / patch_size), a leading CLS token (pool "cls") and per-method options
    (each method's defaults unless set) — the ViT passes its whole ModelConfig, which has the same fields."""

    dim: int
    heads: int
    image_size: int
    patch_size: int = 1
    pool: str = "cls"
    options: dict = field(default_factory=dict)

    def options_for(self, name: str):
        """The options of backend or positional method `name` (its defaults unless set)."""
        found = self.options.get(name)
        return found if found is not None else (BACKENDS.get(name) or POSITIONS[name].build).Options()


class MultiHeadAttention(nn.Module):
    """Self-attention over (batch, tokens, dim) with pluggable backend and positions (given by name):
    `MultiHeadAttention(64, 4, backend="favor", rotary="rope_mixed", side=8)` works on its own, on the
    tokens of an 8×8 grid with a leading CLS (`cls`); `from_config` builds it from a ViT's ModelConfig."""

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
        config=None,
    ):
        super().__init__()
        if config is None:
            config = LayerShape(dim, heads, side, 1, "cls" if cls else "mean", dict(options or {}))
        elif (config.dim, config.heads) != (dim, heads):
            raise UserError(f"dim {dim} and heads {heads} differ from the config's ({config.dim}, {config.heads}).")
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

    @classmethod
    def from_config(cls, config, backend: str, rotary=None, bias=None, gate=None) -> MultiHeadAttention:
        """The layer a ViT of this ModelConfig builds (its width, heads, grid, CLS and method options)."""
        return cls(config.dim, config.heads, backend, rotary, bias, gate, config=config)

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
