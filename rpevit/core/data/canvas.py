"""Objects on a larger canvas: a task where position matters.

Each 28×28 image is pasted whole onto a blank (zero) S×S canvas at a random position, so the
class no longer sits at a fixed place and a ViT must find it among S²/p² patches (S = 40: 100
tokens at patch 4; S = 56: 196). Training positions are drawn anew every epoch from the run's
data generator (seeded by the run's seed, saved in every checkpoint), so they are a function of
(seed, epoch) alone; validation and test positions are drawn once from the split seed, the same
for every run. The pixels of the object are kept exactly and the label is unchanged.
"""

from __future__ import annotations

import torch

# offsets of the generators that place the fixed splits (split seed + this), apart from the split's own
FIXED_SPLIT_OFFSET = {"val": 7_001, "test": 7_002}


def random_offsets(count: int, room: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of `count` top-left corners, each uniform in 0..room, drawn from `generator`
    (rows first, then columns)."""
    rows = torch.randint(0, room + 1, (count,), generator=generator, device=generator.device)
    columns = torch.randint(0, room + 1, (count,), generator=generator, device=generator.device)
    return rows, columns


def paste(images: torch.Tensor, canvas: int, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """(N, C, canvas, canvas) zeros of `images`' dtype with image n pasted whole at (rows[n], columns[n])."""
    count, channels, height, width = images.shape
    if height > canvas or width > canvas:
        raise ValueError(f"a {height}×{width} image does not fit a {canvas}×{canvas} canvas")
    device = images.device
    out = torch.zeros(count, channels, canvas, canvas, dtype=images.dtype, device=device)
    row_index = (rows.to(device)[:, None] + torch.arange(height, device=device))[:, :, None]  # (N, H, 1)
    column_index = (columns.to(device)[:, None] + torch.arange(width, device=device))[:, None, :]  # (N, 1, W)
    batch_index = torch.arange(count, device=device)[:, None, None]
    out[batch_index, :, row_index, column_index] = images.permute(0, 2, 3, 1)  # indexed shape (N, H, W, C)
    return out


def place_randomly(images: torch.Tensor, canvas: int, generator: torch.Generator) -> torch.Tensor:
    """`images` pasted at positions drawn from `generator` (a training batch: new places every epoch)."""
    rows, columns = random_offsets(images.shape[0], canvas - images.shape[-1], generator)
    return paste(images, canvas, rows, columns)


def place_fixed(images: torch.Tensor, canvas: int, split_seed: int, split: str) -> torch.Tensor:
    """A validation or test split on its canvas: positions fixed by the split seed (the same for every run)."""
    generator = torch.Generator().manual_seed(split_seed + FIXED_SPLIT_OFFSET[split])
    rows, columns = random_offsets(images.shape[0], canvas - images.shape[-1], generator)
    return paste(images, canvas, rows, columns)


def centred(images: torch.Tensor, canvas: int) -> torch.Tensor:
    """`images` in the middle of the canvas (shape examples for compiling and tracing, never training)."""
    if images.shape[-1] == canvas:
        return images
    middle = torch.full((images.shape[0],), (canvas - images.shape[-1]) // 2)
    return paste(images, canvas, middle, middle)
