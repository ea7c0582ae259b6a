"""Vision Transformer (Dosovitskiy et al. 2021) assembled from a variant name.

Convolutional patch embedding → [CLS] + absolute positions → pre-norm blocks whose attention
is one backend with the variant's rotary / bias / gate mechanisms → norm → CLS or mean pool →
linear head. Any image size divisible by the patch size works: the grid is rebuilt per call.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .attention.layer import MultiHeadAttention
from .config import ModelConfig, model_config, validate_model
from .errors import UserError
from .grid import Grid
from .position import build_position
from .variants import Variant, parse_variant


class MLP(nn.Sequential):
    """Two-layer GELU feed-forward block."""

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__(
            nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim), nn.Dropout(dropout)
        )


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016, §3): in training, each sample's residual branch is
    dropped with probability `rate` and kept ones are scaled by 1/(1 − rate); identity in eval."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def draw(self, batch: int, ndim: int, device) -> torch.Tensor:
        """This layer's uniform draw for a batch, from torch's global generator."""
        return torch.rand(batch, *(1,) * (ndim - 1), device=device)

    def forward(self, branch, draw: torch.Tensor | None = None):
        """`draw`: the uniform draw made beforehand (packed runs draw each run's own outside vmap)."""
        if not self.training or self.rate == 0.0:
            return branch
        if draw is None:
            draw = self.draw(branch.shape[0], branch.ndim, branch.device)
        keep = draw >= self.rate
        return branch * keep.to(branch.dtype) / (1.0 - self.rate)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)), each branch under
    stochastic depth at `drop_path`."""

    def __init__(self, config: ModelConfig, attention: MultiHeadAttention, drop_path: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = attention
        self.drop = nn.Dropout(config.dropout)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = MLP(config.dim, config.mlp_dim, config.dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x, grid, draws=(None, None)):
        x = x + self.drop_path(self.drop(self.attn(self.norm1(x), grid)), draws[0])
        return x + self.drop_path(self.mlp(self.norm2(x)), draws[1])


class ViT(nn.Module):
    """ViT classifier for one variant; `forward(images)` returns logits (B, classes)."""

    def __init__(self, variant: Variant, config: ModelConfig, seed: int = 0):
        super().__init__()
        validate_model(config)
        if config.image_size % config.patch_size:
            raise UserError(f"image size {config.image_size} is not divisible by patch_size {config.patch_size}.")
        self.variant, self.config = variant, config
        self.side = config.image_size // config.patch_size
        self.patch_embed = nn.Conv2d(config.channels, config.dim, config.patch_size, config.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dim)) if config.pool == "cls" else None
        if self.cls_token is not None:
            self.cls_token.no_weight_decay = True
        absolute = variant.method("absolute")
        self.absolute = None if absolute is None else build_position(absolute, config, config.dim, config.heads)
        methods = {m: variant.method(m) for m in ("rotary", "bias", "gate")}
        rates = [config.drop_path * i / max(1, config.depth - 1) for i in range(config.depth)]
        self.blocks = nn.ModuleList(
            Block(config, MultiHeadAttention.from_config(config, variant.backend, **methods), rate) for rate in rates
        )
        for layer, block in enumerate(self.blocks):  # random features are redrawn from (seed, layer, count)
            if hasattr(block.attn.backend, "place"):
                block.attn.backend.place(seed, layer)
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.num_classes)
        # initialise the backbone only: positional modules and backends keep their own inits
        for block in self.blocks:
            for part in (block.norm1, block.norm2, block.mlp, block.attn.qkv, block.attn.proj):
                part.apply(_init_weights)
        self.head.apply(_init_weights)

    def grid_for(self, images, interpolate: bool = False) -> Grid:
        """The token grid for a batch of images (any size divisible by the patch size)."""
        height, width = images.shape[-2:]
        p = self.config.patch_size
        if height % p or width % p:
            raise UserError(f"image size {height}×{width} is not divisible by patch_size {p}.")
        return Grid(
            height // p,
            width // p,
            cls=self.cls_token is not None,
            trained=(self.side, self.side),
            interpolate=interpolate,
        )

    def tokens(self, images, grid):
        """Embedded tokens entering the first block: (B, T, D)."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, D), row-major patches
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        return x if self.absolute is None else self.absolute(x, grid)

    def drop_path_draws(self, batch: int, device) -> torch.Tensor | None:
        """The uniform draws one training forward of a `batch` makes for stochastic depth, in its order
        (two per block with a rate > 0), from torch's global generator: (draws, batch, 1, 1); None without."""
        draws = [b.drop_path.draw(batch, 3, device) for b in self.blocks if b.drop_path.rate > 0 for _ in range(2)]
        return torch.stack(draws) if draws else None

    def forward(self, images, interpolate: bool = False, drop_draws: torch.Tensor | None = None):
        """Class logits (B, num_classes); `drop_draws` (from drop_path_draws) replaces the draws of
        stochastic depth, which are otherwise made block by block."""
        grid = self.grid_for(images, interpolate)
        x = self.tokens(images, grid)
        drawn = iter(() if drop_draws is None else drop_draws)
        for block in self.blocks:
            draws = (next(drawn), next(drawn)) if drop_draws is not None and block.drop_path.rate > 0 else (None, None)
            x = block(x, grid, draws)
        x = self.norm(x)
        pooled = x[:, 0] if self.cls_token is not None else x.mean(dim=1)
        return self.head(pooled)

    def count_training_step(self) -> None:
        """Call after each optimizer step, outside any compiled region: FAVOR+ counts steps to redraw ω."""
        for block in self.blocks:
            if hasattr(block.attn.backend, "count_training_step"):
                block.attn.backend.count_training_step()

    @torch.no_grad()
    def attention_maps(self, images, interpolate: bool = False) -> list[torch.Tensor]:
        """Per layer, the dense attention matrix (B, heads, T, T) of each block."""
        grid = self.grid_for(images, interpolate)
        x, maps = self.tokens(images, grid), []
        for block in self.blocks:
            maps.append(block.attn.attention_matrix(block.norm1(x), grid))
            x = block(x, grid)
        return maps


def _init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def build_model(variant: str, config: ModelConfig | None = None, *, seed: int = 0, **overrides) -> ViT:
    """Build the ViT for a variant name, e.g. build_model('favor+ape', dim=64, favor={'num_features': 32}).

    `config` (a ModelConfig) is the base; keyword overrides are validated like preset keys
    (a backend's or method's options as a nested mapping under its name). `seed` is the run's
    seed, from which FAVOR+ redraws its random features (the init itself follows torch's global
    RNG, seeded by the caller).
    """
    if config is not None and not overrides:
        return ViT(parse_variant(variant), config, seed)
    base = dataclasses.asdict(config) if config is not None else {}
    return ViT(parse_variant(variant), model_config(**{**base, **overrides}), seed)
