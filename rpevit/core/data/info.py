"""Static facts about each dataset and the in-memory form of a loaded one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .recall import RecallTask


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
    official_train: int | None = None  # the official training split's size (None: not a standard split)
    class_names: tuple[str, ...] = ()  # label i's name; () where only the numbers are known
    canvas_of: str | None = None  # the dataset whose images sit at random places on this one's canvas (canvas.py)
    recall: RecallTask | None = None  # a procedural associative-recall task (recall.py): no files

    def class_name(self, label: int) -> str:
        """The name of class `label` (its number where the dataset has no names)."""
        return self.class_names[label] if label < len(self.class_names) else str(label)


_MNIST_MEAN, _MNIST_STD = (0.1307,), (0.3081,)
_DIGITS = tuple(str(d) for d in range(10))
# the label order of the datasets' own files (Fashion-MNIST's README; CIFAR's batches.meta / meta)
_FASHION = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
_CIFAR10 = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_CIFAR100 = tuple(
    """apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly camel can castle
    caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup dinosaur dolphin elephant
    flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree
    motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree plain plate
    poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper snail snake spider
    squirrel streetcar sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle
    wardrobe whale willow_tree wolf woman worm""".split()
)

DATASETS: dict[str, DatasetInfo] = {
    "mnist5k": DatasetInfo("mnist5k", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist", class_names=_DIGITS),
    "mnist": DatasetInfo("mnist", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist", 60000, _DIGITS),
    "fashion_mnist": DatasetInfo("fashion_mnist", 1, 28, 10, (0.2860,), (0.3530,), "mnist", 60000, _FASHION),
    "cifar10": DatasetInfo(
        "cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "cifar", 50000, _CIFAR10
    ),
    "cifar100": DatasetInfo(
        "cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "cifar", 50000, _CIFAR100
    ),
}


def _on_canvas(base: DatasetInfo, canvas: int) -> DatasetInfo:
    """`base`'s images at random places on a canvas×canvas blank (same classes, normalization, augmentation)."""
    return dataclasses.replace(base, name=f"{base.name}_canvas{canvas}", image_size=canvas, canvas_of=base.name)


# the tasks where position matters: 40×40 (100 tokens at patch 4) and 56×56 (196)
DATASETS.update(
    {
        info.name: info
        for base in ("mnist5k", "fashion_mnist")
        for info in (_on_canvas(DATASETS[base], s) for s in (40, 56))
    }
)


def recall_info(task: RecallTask) -> DatasetInfo:
    """The DatasetInfo of a recall task (recall.py): one channel, 10 value classes, no augmentation."""
    names = tuple(f"value {v}" for v in range(10))
    return DatasetInfo(task.name, 1, task.image_size, 10, (0.1,), (0.3,), "none", class_names=names, recall=task)


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
