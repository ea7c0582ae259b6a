"""The canvas tasks: objects pasted whole at random places on a larger blank canvas — training
positions a function of (seed, epoch), validation and test positions fixed by the split seed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rpevit.core import data
from rpevit.core.data import DATASETS, canvas, load_dataset
from rpevit.core.data.info import Dataset, Split


def _where(canvas_image: torch.Tensor, image: torch.Tensor) -> list[tuple[int, int]]:
    """Every (row, column) at which `image` sits pixel for pixel inside `canvas_image`, all else zero."""
    size, side = canvas_image.shape[-1], image.shape[-1]
    found = []
    for r in range(size - side + 1):
        for c in range(size - side + 1):
            rest = canvas_image.clone()
            rest[..., r : r + side, c : c + side] = 0
            if torch.equal(canvas_image[..., r : r + side, c : c + side], image) and not rest.any():
                found.append((r, c))
    return found


def test_canvas_datasets_are_registered_with_their_token_counts():
    for base in ("mnist5k", "fashion_mnist"):
        for side, tokens in ((40, 100), (56, 196)):
            info = DATASETS[f"{base}_canvas{side}"]
            assert info.canvas_of == base and info.image_size == side and (side // 4) ** 2 == tokens
            assert dataclasses.replace(info, name=base, image_size=28, canvas_of=None) == DATASETS[base]


def test_paste_keeps_every_pixel_and_puts_it_where_asked():
    images = torch.randint(1, 256, (3, 1, 28, 28), dtype=torch.uint8)
    rows, columns = torch.tensor([0, 12, 5]), torch.tensor([12, 0, 7])
    placed = canvas.paste(images, 40, rows, columns)
    assert placed.shape == (3, 1, 40, 40) and placed.dtype == torch.uint8
    for n in range(3):
        assert _where(placed[n], images[n]) == [(int(rows[n]), int(columns[n]))]
    with pytest.raises(ValueError, match="does not fit"):
        canvas.paste(images, 20, rows, columns)


def test_validation_and_test_places_are_fixed_by_the_split_seed_and_keep_labels():
    first, again = load_dataset("mnist5k_canvas40"), load_dataset("mnist5k_canvas40")
    base = load_dataset("mnist5k")
    other_seed = load_dataset("mnist5k_canvas40", split_seed=7)
    for split in ("val", "test"):
        placed, plain = getattr(first, split), getattr(base, split)
        assert torch.equal(placed.images, getattr(again, split).images)  # identical across runs
        assert torch.equal(placed.labels, plain.labels)
        assert placed.images.shape[-2:] == (40, 40)
        spots = [_where(placed.images[n], plain.images[n]) for n in range(20)]
        assert all(len(s) >= 1 for s in spots)  # every object whole, nothing else on the canvas
        assert len({s[0] for s in spots}) > 10  # at many places, not one
    assert not torch.equal(first.test.images, other_seed.test.images)
    assert torch.equal(first.train.images, base.train.images)  # training objects stay 28×28


def _epoch_places(dataset: Dataset, seed: int, epochs: int) -> list[list[tuple[int, int]]]:
    """Where each training object of the first batch sits, per epoch, for a run of `seed`."""
    generator = torch.Generator().manual_seed(seed)
    places = []
    for _ in range(epochs):
        canvas = data.training_canvas(dataset.info)
        batches = list(data.batches(dataset.train, dataset.info, 4, shuffle=False, generator=generator, canvas=canvas))
        raw = dataset.train.images[:4].float() / 255
        first = batches[0][0]
        blank = data.normalize(torch.zeros(1, 1, 1, 1), dataset.info)
        places.append([_where((first[n] - blank[0]).abs() > 1e-6, (raw[n] > 0))[0] for n in range(4)])
    return places


def test_training_places_are_drawn_anew_each_epoch_and_repeat_per_seed():
    full = load_dataset("mnist5k_canvas40")
    small = Dataset(full.info, Split(full.train.images[:8], full.train.labels[:8]), full.val, full.test, full.source)
    run_a, run_a_again, run_b = (_epoch_places(small, s, 3) for s in (1, 1, 2))
    assert run_a == run_a_again  # a function of (seed, epoch)
    assert run_a[0] != run_a[1] != run_a[2]  # new places every epoch
    assert run_a != run_b
    labels = [
        y for _, y in data.batches(small.train, small.info, 4, shuffle=False, generator=torch.Generator(), canvas=40)
    ]
    assert torch.equal(torch.cat(labels), small.train.labels)
    # evaluation batches (a resized test split, e.g. 20 px for a 28-px model) are never placed on a canvas
    plain = load_dataset("mnist5k")
    assert data.training_canvas(plain.info) is None and data.training_canvas(small.info) == 40
    x, _ = next(iter(data.batches(plain.test, plain.info, 4, shuffle=False)))
    assert x.shape[-1] == 28


def test_example_images_are_at_the_canvas_size():
    dataset = load_dataset("mnist5k_canvas56")
    x = data.example_images(dataset.train, dataset.info, 2)
    assert x.shape == (2, 1, 56, 56) and x.dtype == torch.float32
    assert data.training_images("mnist5k_canvas56") == data.training_images("mnist5k")


@pytest.mark.parametrize("features", [8, 16])
def test_the_favor_feature_count_dial_is_a_preset_option_in_the_run_key(features, tiny_params):
    """FAVOR+ with fewer random features (a controlled approximation gap): model.favor.num_features."""
    from rpevit.core.config import model_config
    from rpevit.core.model import build_model
    from rpevit.lab.store.run import Run

    dialled = dataclasses.replace(
        tiny_params,
        model=model_config(**{**dataclasses.asdict(tiny_params.model), "favor": {"num_features": features}}),
    )
    model = build_model("favor+ape", dialled.model)
    assert model.blocks[0].attn.backend.omega.shape[0] == features
    assert Run(dialled, "mnist5k", "favor+ape", 1).key != Run(tiny_params, "mnist5k", "favor+ape", 1).key
    assert Run(dialled, "mnist5k", "softmax+ape", 1).key == Run(tiny_params, "mnist5k", "softmax+ape", 1).key
