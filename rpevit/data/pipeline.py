"""The on-device batch pipeline: each split is one uint8 tensor; `batches` indexes it, augments
the batch with batched tensor ops (per-image random parameters drawn from one generator on the
split's device) and normalizes it, so an epoch is reproducible from the generator's state alone
and no DataLoader, PIL, per-image Python loop or per-batch host→device copy is involved."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..errors import UserError
from .info import DatasetInfo, Split

MAX_ROTATION_DEGREES = 10.0
CROP_PADDING = 4


def _identity(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """No augmentation; draws nothing from the generator."""
    return images


def _random_rotation(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Rotate each (square) image by its own angle, uniform in ±10°, bilinear, zero fill."""
    count = images.shape[0]
    degrees = (torch.rand(count, generator=generator, device=generator.device) * 2 - 1) * MAX_ROTATION_DEGREES
    radians = torch.deg2rad(degrees).to(device=images.device, dtype=images.dtype)
    cos, sin, zero = radians.cos(), radians.sin(), torch.zeros_like(radians)
    theta = torch.stack([cos, -sin, zero, sin, cos, zero], dim=1).reshape(count, 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _random_crop_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per image: crop H×W from the 4-pixel zero-padded image, then flip horizontally w.p. 0.5."""
    count, channels, height, width = images.shape
    padded = F.pad(images, (CROP_PADDING,) * 4)
    offsets = torch.randint(0, 2 * CROP_PADDING + 1, (count, 2), generator=generator, device=generator.device)
    flips = torch.rand(count, generator=generator, device=generator.device) < 0.5
    offsets, flips = offsets.to(images.device), flips.to(images.device)
    rows = offsets[:, 0:1] + torch.arange(height, device=images.device)
    columns = torch.arange(width, device=images.device).expand(count, width)
    columns = offsets[:, 1:2] + torch.where(flips[:, None], columns.flip(1), columns)
    batch_index = torch.arange(count, device=images.device)[:, None, None, None]
    channel_index = torch.arange(channels, device=images.device)[None, :, None, None]
    return padded[batch_index, channel_index, rows[:, None, :, None], columns[:, None, None, :]]


AUGMENTATIONS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    "none": _identity,
    "mnist": _random_rotation,
    "cifar": _random_crop_flip,
}


def _check_recipe(recipe: str) -> None:
    """Raise a UserError unless `recipe` names an augmentation."""
    if recipe not in AUGMENTATIONS:
        raise UserError(
            f"Unknown augmentation '{recipe}'. Allowed: {', '.join(AUGMENTATIONS)}. "
            "Pick one of these in the params file."
        )


def augment(images_uint8: torch.Tensor, recipe: str, generator: torch.Generator) -> torch.Tensor:
    """Scale uint8 images to float32 [0,1] and apply augmentation `recipe` (CPU-drawn params)."""
    _check_recipe(recipe)
    return AUGMENTATIONS[recipe](images_uint8.float().div_(255.0), generator)


@functools.lru_cache(maxsize=32)
def _constants(mean: tuple, std: tuple, device: torch.device, dtype: torch.dtype):
    """Per-channel mean and std as (1, C, 1, 1) tensors on `device`, built once per device and dtype."""
    shape = (1, len(mean), 1, 1)
    return (
        torch.tensor(mean, dtype=dtype, device=device).reshape(shape),
        torch.tensor(std, dtype=dtype, device=device).reshape(shape),
    )


def normalize(images01: torch.Tensor, info: DatasetInfo) -> torch.Tensor:
    """Subtract the per-channel mean and divide by the per-channel std of `info`."""
    mean, std = _constants(info.mean, info.std, images01.device, images01.dtype)
    return (images01 - mean) / std


def num_batches(n: int, batch_size: int) -> int:
    """How many batches `batches` yields for n samples (the last partial batch counts)."""
    if batch_size < 1:
        raise UserError(f"batch_size must be a positive integer, got {batch_size}.")
    return -(-n // batch_size)


def batches(
    split: Split,
    info: DatasetInfo,
    batch_size: int,
    *,
    shuffle: bool,
    generator: torch.Generator | None = None,
    recipe: str = "none",
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (normalized float32 images, int64 labels) covering every sample once per call."""
    num_batches(len(split), batch_size)
    _check_recipe(recipe)
    if generator is None:
        generator = torch.default_generator
    return _iterate_batches(split, info, batch_size, shuffle, generator, recipe)


def _iterate_batches(
    split: Split,
    info: DatasetInfo,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator,
    recipe: str,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The generator behind `batches`: permutation first, then each batch's augmentation."""
    count = len(split)
    order = None
    if shuffle:
        order = torch.randperm(count, generator=generator, device=generator.device).to(split.images.device)
    for start in range(0, count, batch_size):
        indices = slice(start, start + batch_size)
        if order is not None:
            indices = order[indices]
        images = augment(split.images[indices], recipe, generator)
        yield normalize(images, info), split.labels[indices]
