"""Shared fixtures: a tiny real-data dataset (a slice of the embedded MNIST images) and presets."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rpevit.core.data import Dataset, Split, load_dataset
from rpevit.lab.params import load_params


@pytest.fixture(autouse=True)
def fresh_grid_cache():
    """Each test computes its own grid-derived tensors (offsets, sin-cos tables, angles): a value cached by
    an earlier test — or by the process a test runner forked from — would hide what this test's code computes."""
    from rpevit.core.grid import _CACHE

    _CACHE.clear()


def _slice(split: Split, n: int) -> Split:
    return Split(split.images[:n], split.labels[:n])


@pytest.fixture(scope="session")
def tiny_dataset() -> Dataset:
    """256 train / 100 val / 100 test real MNIST images (mnist5k), shuffled once."""
    data = load_dataset("mnist5k")
    order = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(0))
    train = Split(data.train.images[order], data.train.labels[order])
    return Dataset(data.info, _slice(train, 256), _slice(data.val, 100), _slice(data.test, 100), data.source)


@pytest.fixture
def tiny_params():
    """The smoke preset shrunk to a 2-layer, 32-dim model and 2 epochs of batch 32 (keeping no records)."""
    params = load_params("smoke")
    return dataclasses.replace(
        params,
        name="tiny",
        keep_records=False,
        model=dataclasses.replace(params.model, dim=32, depth=2, heads=2, mlp_dim=64),
        train=dataclasses.replace(
            params.train, epochs=2, batch_size=32, lr=3e-3, warmup_epochs=0.5, eval_batch_size=50, timing_images=8
        ),
    )


@pytest.fixture
def grid_params(tiny_params):
    """The tiny preset as a 2 variants × 2 seeds grid of 1 epoch."""
    return dataclasses.replace(
        tiny_params,
        variants=("softmax+none", "softmax+ape"),
        seeds=(0, 1),
        train=dataclasses.replace(tiny_params.train, epochs=1),
    )


def stand_in_design(monkeypatch, fake) -> None:
    """Put `fake` (ordered_runs, decide) in place of a design's order (rpevit.lab.design.ordered_runs, which
    the grid reads) and its decisions (rpevit.lab.schedule.policy.decide, which the one scheduler of every
    engine and wanted.wanted ask); read at each call, so a test may change fake.decide as it goes."""
    from rpevit.lab import design
    from rpevit.lab.schedule import policy

    monkeypatch.setattr(design, "ordered_runs", lambda params: fake.ordered_runs(params))
    monkeypatch.setattr(policy, "decide", lambda *args, **kwargs: fake.decide(*args, **kwargs))


@pytest.fixture
def design_wanting_nothing(monkeypatch):
    """A stand-in design whose one run the stopping rule does not want (stand_in_design)."""
    import types

    fake = types.SimpleNamespace(
        ordered_runs=lambda params: [("mnist5k", "softmax+ape", 0)],
        decide=lambda run, finished, busy, secondary_held="": (
            "skip",
            "the stopping rule needs 0 primary seeds",
        ),
    )
    stand_in_design(monkeypatch, fake)
    return fake


@pytest.fixture
def counted(monkeypatch, tiny_dataset):
    """Serve the tiny dataset to the runner and count (and optionally crash) training runs:
    (calls, state), state["crash_on"] = k raises KeyboardInterrupt in the k-th run."""
    from rpevit.lab.schedule import cell
    from rpevit.lab.training import runs
    from rpevit.lab.training.train import train_run

    calls = []
    state = {"crash_on": None}

    def fake_train(run, dataset, out_dir=None, **kwargs):
        calls.append((run.variant, run.seed))
        if len(calls) == state["crash_on"]:
            raise KeyboardInterrupt  # the machine died mid-grid
        return train_run(run, dataset, out_dir, **kwargs)

    monkeypatch.setattr(runs, "dataset_for", lambda *a, **k: tiny_dataset)
    monkeypatch.setattr(cell, "train_run", fake_train)
    return calls, state


# Modules that train models end to end, start subprocesses, Ray, torchrun or notebooks, or sweep every
# variant: `make check` leaves them out (`-m "not slow"`), `make test` (CI) runs everything.
SLOW_MODULES = {
    "test_robustness",
    "test_damage",
    "test_cluster",
    "test_distributed",
    "test_notebooks",
    "test_study",
    "test_train",
    "test_evaluate",
    "test_cuda_readiness",
    "test_attention_maps",
    "test_lab",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: trains, spawns processes or sweeps every variant (not in make check)")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """Runs and reports in tmp_path for the in-process CLI and study runner."""

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    return tmp_path / "runs", tmp_path / "reports"


def tiny_preset_yaml(name: str, epochs: int, train_size: int, keep_records: bool = False) -> str:
    """A one-run preset (softmax+ape on mnist5k, a 1-layer 16-dim ViT) as YAML, for tests that train it
    in subprocesses (GPU sittings, parked runs)."""
    return (
        f"name: {name}\n"
        + ("keep_records: true\n" if keep_records else "")
        + "datasets: [mnist5k]\nvariants: [softmax+ape]\nseeds: [1]\n"
        + f"data: {{train_size: {train_size}}}\n"
        + "model: {patch_size: 7, dim: 16, depth: 1, heads: 2, mlp_dim: 32}\n"
        + f"train: {{epochs: {epochs}, batch_size: 50, lr: 0.003, warmup_epochs: 1, eval_batch_size: 250, "
        + "timing_images: 8}\n"
    )
