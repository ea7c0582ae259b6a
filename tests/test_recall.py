"""The 2D associative-recall task (rpevit/core/data/recall.py): names, determinism per seed and epoch,
labels correct by construction (decoded independently from the pixels), a hand-checked example, and
that a softmax ViT solves an easy setting."""

from __future__ import annotations

import pytest
import torch

from rpevit.core.data import batches, load_dataset, recall, training_images
from rpevit.core.errors import UserError


def decode(images: torch.Tensor, task: recall.RecallTask) -> list[int]:
    """The label of each image read back from its pixels alone: the query cell (all-on bottom half), the
    other cell with the same top half (its key), and that key's value (same cell or the one to its right)."""
    glyphs = recall.codebook()["values"]
    top, bottom = recall.cells_of(images, task.grid)
    labels = []
    for n in range(images.shape[0]):
        query = [c for c in range(task.grid**2) if bool((bottom[n, c] == 255).all())]
        assert len(query) == 1
        keys = [c for c in range(task.grid**2) if c != query[0] and torch.equal(top[n, c], top[n, query[0]])]
        assert len(keys) == 1, "the asked key appears once besides the query"
        value_cell = keys[0] + (1 if task.layout == "neighbour" else 0)
        matches = [v for v in range(len(glyphs)) if torch.equal(glyphs[v], bottom[n, value_cell])]
        assert len(matches) == 1
        labels.append(matches[0])
    return labels


@pytest.mark.parametrize("name", ["recall8_neighbour_k8", "recall8_samecell_k8_d6", "recall5_neighbour_k10_d3"])
def test_labels_are_the_queried_keys_value_read_back_from_the_pixels(name):
    task = recall.parse(name)
    images, labels = recall.draw(task, 300, torch.Generator().manual_seed(3))
    assert images.shape == (300, 1, task.image_size, task.image_size) and images.dtype == torch.uint8
    assert decode(images, task) == labels.tolist()
    top, bottom = recall.cells_of(images, task.grid)
    used = (top > 0).any(-1) | (bottom > 0).any(-1)
    per_pair = 2 if task.layout == "neighbour" else 1
    assert (used.sum(-1) == per_pair * task.pairs + 1 + task.distractors).all()
    key_glyphs = recall.codebook()["keys"]
    has_key = (top[..., None, :] == key_glyphs).all(-1).any(-1) & ~(bottom == 255).all(-1)
    assert (has_key.sum(-1) == task.pairs).all(), "K distinct key cells besides the query"
    if task.layout == "neighbour":  # a key cell's bottom and its value cell's top stay empty
        key_cells = has_key.nonzero()
        assert (bottom[key_cells[:, 0], key_cells[:, 1]] == 0).all()
        assert (top[key_cells[:, 0], key_cells[:, 1] + 1] == 0).all()
        assert (key_cells[:, 1] % task.grid != task.grid - 1).all()
    assert set(labels.tolist()) == set(range(10)), "every class occurs"


def test_a_hand_checked_example():
    """A 2×2 grid: cell 0 holds key glyph 0 over value glyph 3 (same cell), cell 3 the query of key 0."""
    book = recall.codebook()
    top = torch.zeros(1, 4, 8, dtype=torch.uint8)
    bottom = torch.zeros(1, 4, 8, dtype=torch.uint8)
    top[0, 0], bottom[0, 0] = book["keys"][0], book["values"][3]
    top[0, 3], bottom[0, 3] = book["keys"][0], recall.QUERY_MARK
    image = recall.render(2, top, bottom)[0, 0]
    key, value = book["keys"][0].view(2, 4), book["values"][3].view(2, 4)
    expected = torch.zeros(8, 8, dtype=torch.uint8)
    expected[0:2, 0:4], expected[2:4, 0:4] = key, value  # the top-left cell
    expected[4:6, 4:8], expected[6:8, 4:8] = key, 255  # the bottom-right cell: the query
    assert torch.equal(image, expected)
    assert decode(recall.render(2, top, bottom), recall.RecallTask(2, "samecell", 1)) == [3]
    # the codebook: 70 distinct four-of-eight patterns, fixed (the same on every call)
    patterns = torch.cat(list(book.values()))
    assert patterns.shape == (70, 8) and len({tuple(p.tolist()) for p in patterns}) == 70
    assert ((patterns == 255).sum(-1) == 4).all() and torch.equal(patterns, torch.cat(list(recall.codebook().values())))


def test_training_batches_are_a_function_of_the_seed_and_epoch_and_fixed_splits_of_the_split_seed():
    dataset = load_dataset("recall8_neighbour_k4", train_size=300, val_size=50)
    assert (len(dataset.train), len(dataset.val), len(dataset.test)) == (300, 50, recall.DEFAULT_SIZES["test"])
    assert training_images("recall8_neighbour_k4") == recall.DEFAULT_SIZES["train"]
    assert training_images("recall8_neighbour_k4", train_size=300) == 300

    def epoch(generator):
        return list(batches(dataset.train, dataset.info, 128, shuffle=True, generator=generator))

    one = torch.Generator().manual_seed(1)
    first, second = epoch(one), epoch(one)
    again = epoch(torch.Generator().manual_seed(1))
    assert [len(y) for _, y in first] == [128, 128, 44]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0][0], second[0][0]), "each epoch draws new examples"
    assert not torch.equal(first[0][0], epoch(torch.Generator().manual_seed(2))[0][0]), "each seed its own"
    # validation and test: drawn once from the split seed, served in order
    other = load_dataset("recall8_neighbour_k4", train_size=300, val_size=50)
    assert torch.equal(dataset.test.images, other.test.images) and torch.equal(dataset.val.labels, other.val.labels)
    moved = load_dataset("recall8_neighbour_k4", train_size=300, val_size=50, split_seed=7)
    assert not torch.equal(dataset.test.images, moved.test.images)
    served = torch.cat([y for _, y in batches(dataset.val, dataset.info, 16, shuffle=False)])
    assert torch.equal(served, dataset.val.labels)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("recall8_neighbour_k41", "K must be 1..40"),
        ("recall4_samecell_k10_d8", "cells are needed"),
        ("recall8_neighbour_k25", "at most 24 pairs"),
        ("recall1_samecell_k1", "at least 2 cells"),
    ],
)
def test_settings_that_cannot_be_drawn_are_one_user_error(name, message):
    with pytest.raises(UserError, match=message):
        load_dataset(name)


def test_the_largest_guaranteed_neighbour_setting_always_places():
    task = recall.RecallTask(8, "neighbour", recall.always_placeable(8))
    images, labels = recall.draw(task, 2000, torch.Generator().manual_seed(0))
    assert decode(images[:50], task) == labels[:50].tolist()


def test_list_shows_the_recall_tasks(capsys):
    from rpevit.cli import main

    assert main(["list", "datasets"]) == 0
    assert "recall<G>_<neighbour|samecell>_k<K>[_d<D>]" in capsys.readouterr().out


@pytest.mark.slow
def test_a_softmax_vit_solves_an_easy_setting():
    """Two pairs in the same cell on a 3×3 grid: a small softmax ViT reaches ≥ 90 % in 20 short epochs
    (≈ 99 % measured)."""
    from rpevit.core.budgets import warmup_cosine
    from rpevit.core.data import num_batches
    from rpevit.core.loop import Step, adamw, predict, train_epoch
    from rpevit.core.model import build_model

    torch.manual_seed(0)
    dataset = load_dataset("recall3_samecell_k2", train_size=4000, val_size=500)
    model = build_model("softmax+ape", image_size=12, dim=32, depth=2, heads=2, mlp_dim=64)
    optimizer = adamw(model, lr=3e-3, weight_decay=0.0)
    epochs = EASY_EPOCHS
    steps = epochs * num_batches(len(dataset.train), 64)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(steps // 20, steps, 1.0, 0.01))
    generator = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        shuffled = batches(dataset.train, dataset.info, 64, shuffle=True, generator=generator)
        train_epoch(model, optimizer, scheduler, shuffled, Step(grad_clip=1.0))
    logits, labels = predict(model, dataset.val, dataset.info, 500)
    assert (logits.argmax(-1) == labels).float().mean() >= 0.9


EASY_EPOCHS = 20
