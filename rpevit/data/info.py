"""Static facts about each dataset and the in-memory form of a loaded one."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about one dataset: shape, classes, normalization constants, augmentation and the
    size of its official training set (None where unknown)."""

    name: str
    channels: int
    image_size: int
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: str
    official_train: int | None = None


_MNIST_MEAN, _MNIST_STD = (0.1307,), (0.3081,)

DATASETS: dict[str, DatasetInfo] = {
    "mnist5k": DatasetInfo("mnist5k", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist"),
    "mnist": DatasetInfo("mnist", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist", 60000),
    "fashion_mnist": DatasetInfo("fashion_mnist", 1, 28, 10, (0.2860,), (0.3530,), "mnist", 60000),
    "cifar10": DatasetInfo("cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "cifar", 50000),
    "cifar100": DatasetInfo("cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "cifar", 50000),
}


@dataclass
class Split:
    """One split as whole-split tensors: images (N, C, H, W) uint8 and labels (N,) int64."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        """Number of samples in the split."""
        return self.images.shape[0]


@dataclass
class Dataset:
    """A loaded dataset: train/val/test splits on one device and where the files came from."""

    info: DatasetInfo
    train: Split
    val: Split
    test: Split
    source: str
