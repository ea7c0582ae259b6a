"""Packed training: a run's record does not depend on the pack it trained in (fp32, CPU), and a kill
inside a pack resumes to the uninterrupted pack's records."""

from __future__ import annotations

import dataclasses

import pytest

from rpevit.core.errors import UserError
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training import pack
from rpevit.lab.training.train import train_run

ACCURACY = ("top1", "top5", "precision", "recall", "f1", "best_epoch", "best_val_acc", "test_correct")
LOSS_KEYS = ("train_loss", "val_loss")


def _params(tiny_params, **train):
    model = dataclasses.replace(tiny_params.model, drop_path=0.2)  # stochastic depth draws in every step
    return dataclasses.replace(tiny_params, model=model, train=dataclasses.replace(tiny_params.train, **train))


def _same(a: dict, b: dict, dir_a, dir_b, tolerance: float = 1e-5) -> None:
    """Accuracies and validation curves equal; losses and the per-image test log-likelihood within
    `tolerance`: fp32 kernels batched over a pack and run alone may add in another order, and training
    carries that rounding on, growing each epoch (on one AMD EPYC: 0, 3e-6, 1e-5, 6e-5 in epochs 1-4)."""
    for key in ACCURACY:
        assert a[key] == b[key], key
    assert a["budgets"].keys() == b["budgets"].keys()
    for budget, branch in a["budgets"].items():
        other = b["budgets"][budget]
        assert {k: branch[k] for k in ("top1", "best_epoch", "test_correct")} == {
            k: other[k] for k in ("top1", "best_epoch", "test_correct")
        }
        assert [r["val_acc"] for r in branch["history"]] == [r["val_acc"] for r in other["history"]]
    assert a["log_likelihood"] / a["n_test"] == pytest.approx(b["log_likelihood"] / b["n_test"], abs=tolerance)
    rows_a, rows_b = records.read_history(dir_a), records.read_history(dir_b)
    assert [r["val_acc"] for r in rows_a] == [r["val_acc"] for r in rows_b]
    assert [r["train_acc"] for r in rows_a] == [r["train_acc"] for r in rows_b]
    for key in LOSS_KEYS:
        assert [r[key] for r in rows_a] == pytest.approx([r[key] for r in rows_b], abs=tolerance)


@pytest.mark.parametrize("variant", ["favor+ape", "softmax+rope_mixed", "relu+krpe"])
def test_a_run_alone_and_in_a_pack_of_four_give_the_same_record(variant, tiny_params, tiny_dataset, tmp_path):
    params = _params(tiny_params)
    packed = [Run(params, "mnist5k", variant, seed, runs_root=tmp_path / "pack") for seed in range(4)]
    together = pack.train_pack(packed, tiny_dataset)
    alone = train_run(Run(params, "mnist5k", variant, 2), tiny_dataset, tmp_path / "alone")
    _same(together[2], alone, packed[2].dir, tmp_path / "alone")
    assert len({r["log_likelihood"] for r in together}) == 4  # four different runs, not one four times
    again = pack.train_pack(packed, tiny_dataset)  # finished: returned as they are
    assert [r["finished_at"] for r in again] == [r["finished_at"] for r in together]


def test_a_pack_with_budget_branches_matches_the_runs_alone(tiny_params, tiny_dataset, tmp_path):
    params = _params(tiny_params, epochs=4, schedule="wsd", decay_fraction=0.5, budgets=(2,))
    packed = [Run(params, "mnist5k", "relu+ape", seed, runs_root=tmp_path / "pack") for seed in (0, 1)]
    together = pack.train_pack(packed, tiny_dataset)
    alone = train_run(Run(params, "mnist5k", "relu+ape", 1), tiny_dataset, tmp_path / "alone")
    _same(together[1], alone, packed[1].dir, tmp_path / "alone", tolerance=3e-4)  # 4 epochs: rounding grows


def test_a_member_of_a_pack_counts_its_share_of_the_cpu_seconds(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    """A pack of N charges each member 1/N of its CPU seconds (their sum is what the process spent, which
    a CPU budget counts) and all of its wall seconds (each member waited them). A fake clock: every
    timer read of CPU time advances it 6 s, of wall time 1 s."""
    import types

    from rpevit.core import metrics

    clocks = {"wall": 0.0, "cpu": 0.0}

    def reading(name, step):
        def read():
            clocks[name] += step
            return clocks[name]

        return read

    monkeypatch.setattr(
        metrics, "time", types.SimpleNamespace(perf_counter=reading("wall", 1.0), process_time=reading("cpu", 6.0))
    )
    params = _params(tiny_params, epochs=2)
    for size in (1, 3):
        runs = [Run(params, "mnist5k", "relu+ape", seed, runs_root=tmp_path / str(size)) for seed in range(size)]
        pack.train_pack(runs, tiny_dataset)
        rows = [row for run in runs for row in records.read_history(run.dir)]
        assert [(row["seconds"], row["cpu_seconds"]) for row in rows] == [(1.0, 6.0 / size)] * 2 * size


def test_a_kill_inside_a_pack_resumes_to_the_uninterrupted_records(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    params = _params(tiny_params, epochs=3)
    straight = pack.train_pack(
        [Run(params, "mnist5k", "favor+ape", s, runs_root=tmp_path / "a") for s in (0, 1)], tiny_dataset
    )
    cut = [Run(params, "mnist5k", "favor+ape", s, runs_root=tmp_path / "b") for s in (0, 1)]
    real, calls = pack._packed_epoch, []

    def killed_in_epoch_two(members, dataset, device, epoch, step_fn):
        calls.append(epoch)
        if epoch == 1:
            raise KeyboardInterrupt  # a kill in the middle of the pack's second epoch
        return real(members, dataset, device, epoch, step_fn)

    monkeypatch.setattr(pack, "_packed_epoch", killed_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        pack.train_pack(cut, tiny_dataset)
    assert [records.load_checkpoint(r.dir / records.CHECKPOINT)["epoch"] for r in cut] == [1, 1]
    monkeypatch.setattr(pack, "_packed_epoch", real)
    resumed = pack.train_pack(cut, tiny_dataset)
    for a, b, run_a, run_b in zip(
        straight,
        resumed,
        [Run(params, "mnist5k", "favor+ape", s, runs_root=tmp_path / "a") for s in (0, 1)],
        cut,
        strict=True,
    ):
        _same(a, b, run_a.dir, run_b.dir)


def test_only_runs_of_one_variant_pack_together(tiny_params):
    runs = [Run(tiny_params, "mnist5k", "favor+ape", 0), Run(tiny_params, "mnist5k", "relu+ape", 0)]
    with pytest.raises(UserError, match="one preset, dataset and variant"):
        pack.check_packable(runs)
    dropout = dataclasses.replace(tiny_params, model=dataclasses.replace(tiny_params.model, dropout=0.1))
    with pytest.raises(UserError, match="dropout"):
        pack.check_packable([Run(dropout, "mnist5k", "favor+ape", 0)])


def test_study_engine_pack_trains_the_grid_to_the_sequential_records(grid_params, tiny_dataset, tmp_path):
    from rpevit.lab.schedule.study import packs, run_study

    def load(params, name):
        return tiny_dataset

    sequential = run_study(grid_params, runs_root=tmp_path / "s", reports_root=tmp_path / "rs", dataset_loader=load)
    packed = run_study(
        grid_params, runs_root=tmp_path / "p", reports_root=tmp_path / "rp", dataset_loader=load, pack_size=0
    )
    assert [r["variant"] for r in packed] == [r["variant"] for r in sequential]
    for a, b in zip(sequential, packed, strict=True):
        for key in ACCURACY:
            assert a[key] == b[key], (a["variant"], a["seed"], key)
    todo = [(type("R", (), {"dataset": "d", "variant": v})(), None) for v in ("a", "b", "a", "b", "a")]
    assert [[r.variant for r, _ in g] for g in packs(todo, 2)] == [["a", "a"], ["a"], ["b", "b"]]


def test_softmax_inside_vmap_without_sdpa_equals_sdpa(monkeypatch):
    """The explicit attention a packed step uses on CUDA (SDPA fails under vmap in bf16 there), forced
    on the CPU: the same outputs and gradients as SDPA under vmap, in float64."""
    import torch
    from torch.func import functional_call, vmap

    from rpevit.core.attention import softmax
    from rpevit.core.model import build_model

    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(build_model("softmax+krpe", seed=seed, dim=16, depth=1, heads=2, mlp_dim=32).double())
    params = {n: torch.stack([dict(m.named_parameters())[n] for m in models]) for n, _ in models[0].named_parameters()}
    buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in models]) for n, _ in models[0].named_buffers()}
    x = torch.randn(2, 3, 1, 28, 28, dtype=torch.float64)

    def outputs():
        out = vmap(lambda p, b, im: functional_call(models[0], (p, b), (im,)))(params, buffers, x)
        grads = torch.autograd.grad(out.square().sum(), list(params.values()))
        return out, grads

    fused, fused_grads = outputs()
    monkeypatch.setattr(softmax, "EXPLICIT_UNDER_VMAP", {"cuda", "cpu"})
    explicit, explicit_grads = outputs()
    torch.testing.assert_close(explicit, fused, rtol=1e-10, atol=1e-12)
    for a, b in zip(explicit_grads, fused_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pack-size", "0"], "--pack-size 0 is not valid: a positive integer, with --engine pack or ray."),
        (["--engine", "sequential", "--pack-size", "2"], "--pack-size 2 is not valid"),
        (["--engine", "ray", "--pack-size", "-1"], "--pack-size -1 is not valid: a positive integer."),
    ],
)
def test_a_bad_pack_size_is_one_error_line_before_any_training(argv, message, capsys, tmp_path, monkeypatch):
    from rpevit.cli import main

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    assert main(["study", "smoke", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
