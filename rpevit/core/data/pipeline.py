"""The on-device batch pipeline: each split is one uint8 tensor; `batches` indexes it, augments
the batch with batched tensor ops (per-image random parameters drawn from one generator on the
split's device) and normalizes it, so an epoch is reproducible from the generator's state alone
and no DataLoader, PIL, per-image Python loop or per-batch host→device copy is involved."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from ..errors import UserError
from . import recall
from .canvas import place_randomly
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


def _random_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Flip each image horizontally with probability 0.5."""
    flips = torch.rand(images.shape[0], generator=generator, device=generator.device) < 0.5
    return torch.where(flips.to(images.device)[:, None, None, None], images.flip(-1), images)


def _random_crop(padding: int):
    """Per image: an H×W crop of the image zero-padded by `padding` pixels on each side."""

    def crop(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        count, channels, height, width = images.shape
        padded = F.pad(images, (padding,) * 4)
        offsets = torch.randint(0, 2 * padding + 1, (count, 2), generator=generator, device=generator.device)
        offsets = offsets.to(images.device)
        rows = (offsets[:, 0:1] + torch.arange(height, device=images.device))[:, None, :, None]
        columns = (offsets[:, 1:2] + torch.arange(width, device=images.device))[:, None, None, :]
        batch_index = torch.arange(count, device=images.device)[:, None, None, None]
        channel_index = torch.arange(channels, device=images.device)[None, :, None, None]
        return padded[batch_index, channel_index, rows, columns]

    return crop


ERASE_PROBABILITY = 0.25
ERASE_AREA = (0.02, 1 / 3)
ERASE_ASPECT = (0.3, 1 / 0.3)


def _random_erase(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random erasing (Zhong et al. 2020, Alg. 1): with probability 0.25 per image, a rectangle of
    2–33 % of the image, aspect ratio log-uniform in [0.3, 3.3], is filled with uniform noise."""
    count, _, height, width = images.shape

    def uniform(low, high):
        return low + (high - low) * torch.rand(count, generator=generator, device=generator.device)

    area = uniform(*ERASE_AREA) * height * width
    aspect = uniform(math.log(ERASE_ASPECT[0]), math.log(ERASE_ASPECT[1])).exp()
    box_h = (area * aspect).sqrt().round().clamp(1, height)
    box_w = (area / aspect).sqrt().round().clamp(1, width)
    top = (uniform(0, 1) * (height - box_h + 1)).floor()
    left = (uniform(0, 1) * (width - box_w + 1)).floor()
    active = uniform(0, 1) < ERASE_PROBABILITY
    noise = torch.rand(images.shape, generator=generator, device=generator.device)
    top, left, box_h, box_w, active = (t.to(images.device)[:, None, None] for t in (top, left, box_h, box_w, active))
    rows = torch.arange(height, device=images.device)[None, :, None]
    columns = torch.arange(width, device=images.device)[None, None, :]
    inside = (rows >= top) & (rows < top + box_h) & (columns >= left) & (columns < left + box_w) & active
    return torch.where(inside[:, None], noise.to(device=images.device, dtype=images.dtype), images)


# whole recipes with their own names (the datasets' defaults; `cifar` keeps its original draw order)
AUGMENTATIONS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    "none": _identity,
    "mnist": _random_rotation,
    "cifar": _random_crop_flip,
}
# steps a recipe can be composed of, joined by '+' and applied left to right (e.g. "crop2+flip+erase")
AUGMENTATION_STEPS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    "rotate": _random_rotation,
    "flip": _random_flip,
    "erase": _random_erase,
    **{f"crop{padding}": _random_crop(padding) for padding in range(1, 9)},
}


def recipe_steps(recipe: str) -> list[Callable[[torch.Tensor, torch.Generator], torch.Tensor]]:
    """The functions recipe `recipe` applies in order: a named recipe, or steps joined by '+'."""
    if recipe in AUGMENTATIONS:
        return [AUGMENTATIONS[recipe]]
    parts = recipe.split("+") if isinstance(recipe, str) else [repr(recipe)]
    unknown = [part for part in parts if part not in AUGMENTATION_STEPS]
    if unknown or len(set(parts)) != len(parts):
        what = f"'{unknown[0]}' in {recipe!r}" if unknown else f"{recipe!r} (a step listed twice)"
        raise UserError(
            f"unknown augmentation {what}. Allowed: auto, {', '.join(AUGMENTATIONS)}, or steps joined by '+', "
            "each at most once, from rotate, flip, erase, crop1…crop8 (cropN: N-pixel padded crop), "
            "e.g. flip+erase. Pick one of these for data.augment in the params file."
        )
    return [AUGMENTATION_STEPS[part] for part in parts]


def training_canvas(info: DatasetInfo) -> int | None:
    """The canvas side a dataset's training images are placed on each epoch (None: not a canvas task)."""
    return info.image_size if info.canvas_of is not None else None


def recipe_for(info: DatasetInfo, augment: str) -> str:
    """The recipe a run applies: the dataset's default for "auto", else `augment` itself."""
    return info.augment if augment == "auto" else augment


def _check_recipe(recipe: str) -> None:
    """Raise a UserError unless `recipe` names an augmentation."""
    recipe_steps(recipe)


def augment(images_uint8: torch.Tensor, recipe: str, generator: torch.Generator) -> torch.Tensor:
    """Scale uint8 images to float32 [0,1] and apply augmentation `recipe` (params drawn from `generator`)."""
    images = images_uint8.float().div_(255.0)
    for step in recipe_steps(recipe):
        images = step(images, generator)
    return images


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
    canvas: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (normalized float32 images, int64 labels) covering every sample once per call; with
    `canvas`, each augmented image is pasted at a random place on a blank canvas×canvas (canvas.py)."""
    num_batches(len(split), batch_size)
    _check_recipe(recipe)
    if generator is None:
        generator = torch.default_generator
    return _iterate_batches(split, info, batch_size, shuffle, generator, recipe, canvas)


def _iterate_batches(
    split: Split,
    info: DatasetInfo,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator,
    recipe: str,
    canvas: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The generator behind `batches`: permutation first, then each batch's augmentation (a recall task's
    training batches are drawn anew from the generator instead, recall.py)."""
    count = len(split)
    if shuffle and info.recall is not None:
        for start in range(0, count, batch_size):
            images, labels = recall.draw(info.recall, min(batch_size, count - start), generator)
            images = augment(images.to(split.images.device), recipe, generator)
            yield normalize(images, info), labels.to(split.labels.device)
        return
    order = None
    if shuffle:
        order = torch.randperm(count, generator=generator, device=generator.device).to(split.images.device)
    for start in range(0, count, batch_size):
        indices = slice(start, start + batch_size)
        if order is not None:
            indices = order[indices]
        images = augment(split.images[indices], recipe, generator)
        if canvas is not None:  # a canvas task's training batch: the objects at new random places
            images = place_randomly(images, canvas, generator)
        yield normalize(images, info), split.labels[indices]
