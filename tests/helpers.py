"""Helpers shared by the test modules (imported as `from helpers import ...`: pytest puts tests/ on
sys.path because tests/ has no __init__.py)."""

from __future__ import annotations

import importlib
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rpevit.core.checks import offset_ratios
from rpevit.core.grid import Grid
from rpevit.lab.store.records import without_times


def trained_like(module: torch.nn.Module, seed: int | None, scale: float, mode: str = "add") -> torch.nn.Module:
    """Give every parameter of `module` seeded Gaussian noise so tests never see the (special) init.

    mode "add": param += scale·N(0, 1); mode "replace": param = scale·N(0, 1). The noise is drawn
    parameter by parameter, in `module.parameters()` order and in each parameter's dtype, from a
    generator seeded with `seed`, or from torch's global generator when `seed` is None. Returns
    `module`.
    """
    if mode not in ("add", "replace"):
        raise ValueError(f"mode must be 'add' or 'replace', not {mode!r}")
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            noise = scale * torch.randn(param.shape, generator=generator, dtype=param.dtype)
            if mode == "add":
                param.add_(noise)
            else:
                param.copy_(noise)
    return module


def log_ratio_spread(weights: torch.Tensor, grid: Grid) -> float:
    """The §5 test in log form: the largest spread over queries i of log(A[i, i+Δ] / A[i, i]), any Δ.

    Same groups as rpevit.core.checks.relative_violation (built on its `offset_ratios`), but each spread is
    measured in log space, so every offset is held to the same relative precision. The shared check
    divides every spread by the largest ratio over all offsets; when the ratios span ~1e6 (e.g.
    rope_mixed, or the affine IRPEGate control), a tiny value of it still allows a relative error
    ~1e6 times larger in the smallest ratios, so the log-form bounds these tests asserted before
    cannot be expressed with it. Strictly positive weights only (softmax); `weights` may carry
    leading batch/head dimensions: the worst matrix is returned.
    """
    if not (weights > 0).all():
        raise ValueError("log_ratio_spread needs strictly positive weights")
    worst = 0.0
    for matrix in weights.detach().reshape(-1, *weights.shape[-2:]):
        for ratios in offset_ratios(matrix, grid).values():
            logs = ratios.log()
            worst = max(worst, float(logs.max() - logs.min()))
    return worst


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op produces (memory-bound tests)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def resumed_like_straight(params, dataset, variant: str, tmp_path, epochs: int = 3) -> tuple[dict, dict]:
    """(record, record) of `variant` trained straight for `epochs` and trained again with an
    interrupt after epoch 1 and a resume; asserts their histories (but their wall and CPU seconds) are equal."""
    import pytest

    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run
    from rpevit.lab.training.train import train_run

    straight = train_run(Run(params, dataset.info.name, variant, 0, epochs=epochs), dataset, tmp_path / "a")

    def stop_after_first(row):
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(
            Run(params, dataset.info.name, variant, 0, epochs=epochs),
            dataset,
            tmp_path / "b",
            on_epoch_end=stop_after_first,
        )
    assert not (tmp_path / "b" / records.RECORD).exists()
    assert records.load_checkpoint(tmp_path / "b" / records.CHECKPOINT)["epoch"] == 1
    resumed = train_run(Run(params, dataset.info.name, variant, 0, epochs=epochs), dataset, tmp_path / "b", resume=True)
    histories = [[without_times(row) for row in records.read_history(tmp_path / run)] for run in "ab"]
    assert histories[0] == histories[1]
    return straight, resumed


def skip_unless_ci(message: str) -> None:
    """Skip the test for `message` (something it needs is missing) — or, in CI (`CI` set), fail it:
    .ci/run installs what these tests need, so there a missing piece is an error, never a silent skip."""
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set: .ci/run provides it, so the test fails instead of skipping)", pytrace=False)
    pytest.skip(message)


def require_module(name: str, reason: str):
    """pytest.importorskip(name) that fails instead of skipping in CI (skip_unless_ci)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        skip_unless_ci(reason)


def cli(capsys, *argv):
    """(exit code, stdout, stderr) of `python -m rpevit *argv` run in-process; never a traceback."""
    from rpevit.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "UnicodeDecodeError" not in out + err
    return code, out, err


def canvas40_record(variant: str, seed: int, top1: float, **fields) -> dict:
    """A finished canvas40_long record at 64 epochs (test top-1 as a fraction), with any further fields."""
    return {
        "variant": variant,
        "seed": seed,
        "dataset": "fashion_mnist_canvas40",
        "status": "finished",
        "epochs": 64,
        "top1": top1,
        **fields,
    }
