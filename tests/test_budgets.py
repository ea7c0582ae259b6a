"""Warmup–stable–decay schedules and budget branches: a shorter budget's cool-down branched from a
run's stable phase is that budget trained alone, and taking it leaves the run unchanged."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rpevit.core import budgets
from rpevit.core.errors import UserError
from rpevit.lab.schedule import policy
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training.train import train_run

HISTORY_KEYS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr")


def _wsd(params, epochs: int, branches=()):
    train = dataclasses.replace(params.train, schedule="wsd", decay_fraction=0.5, epochs=epochs, budgets=branches)
    return dataclasses.replace(params, train=train)


def test_warmup_stable_decay_is_constant_then_linear_to_the_floor():
    factor = budgets.warmup_stable_decay(warmup_steps=4, total_steps=20, decay_steps=8, lr=1.0, min_lr=0.1)
    values = [factor(s) for s in range(20)]
    assert values[:4] == [0.25, 0.5, 0.75, 1.0] and values[4:12] == [1.0] * 8
    assert values[12:] == pytest.approx([1 - 0.9 * k / 8 for k in range(1, 9)])
    assert values[-1] == pytest.approx(0.1)


def test_branch_points_and_schedule_checks(tiny_params):
    assert [budgets.branch_epoch(b, 0.25) for b in (8, 16, 32)] == [6, 12, 24]
    ok = _wsd(tiny_params, 4, (2,)).train
    budgets.check_schedule(ok)
    cases = [
        (dict(budgets=(2,), schedule="cosine"), "needs train.schedule: wsd"),
        (dict(budgets=(4,)), "lists a budget twice or the run's own"),
        (dict(budgets=(2, 2)), "lists a budget twice"),
        (dict(budgets=(9,)), r"whole number of epochs in 1\.\.3"),
        (dict(budgets=(1,)), "inside the 0.5-epoch warmup"),
        (dict(decay_fraction=1.0), r"a number in \(0, 1\)"),
    ]
    for change, message in cases:
        with pytest.raises(UserError, match=message):
            budgets.check_schedule(dataclasses.replace(ok, **change))


def _same_training(a: list[dict], b: list[dict]) -> None:
    assert [{k: row[k] for k in HISTORY_KEYS} for row in a] == [{k: row[k] for k in HISTORY_KEYS} for row in b]


def test_a_branched_budget_is_that_budget_trained_alone(tiny_params, tiny_dataset, tmp_path, capsys):
    """fp32 on CPU: the 2-epoch cool-down branched from a 4-epoch run equals a 2-epoch run bit for bit,
    and the 4-epoch run with the branch equals it without."""
    branched = train_run(Run(_wsd(tiny_params, 4, (2,)), "mnist5k", "favor+ape", 0), tiny_dataset, tmp_path / "b")
    said = capsys.readouterr().out  # a cool-down says when it starts and each of its epochs, as a run does
    assert "budget 2 epochs: cool-down from epoch 1 to 2" in said
    assert "budget 2 cool-down epoch 2/2 val acc" in said
    alone = train_run(Run(_wsd(tiny_params, 2), "mnist5k", "favor+ape", 0), tiny_dataset, tmp_path / "short")
    plain = train_run(Run(_wsd(tiny_params, 4), "mnist5k", "favor+ape", 0), tiny_dataset, tmp_path / "long")
    branch = branched["budgets"]["2"]
    for key in ("top1", "top5", "test_correct", "best_epoch", "best_val_acc"):
        assert branch[key] == alone[key], key
    _same_training(records.read_history(tmp_path / "short")[1:], branch["history"])
    for key in ("top1", "test_correct", "best_epoch", "best_val_acc", "log_likelihood"):
        assert branched[key] == plain[key], key
    _same_training(records.read_history(tmp_path / "b"), records.read_history(tmp_path / "long"))
    assert plain["budgets"] == {} and branch["epochs"] == 2
    # the design's budget, read from the record alone, counts the cool-down's and the epochs' CPU seconds
    # as the pilot budget does from histories
    seconds = sum(float(r["cpu_seconds"]) for r in records.read_history(tmp_path / "b") + branch["history"])
    assert policy.training_hours([branched]) == pytest.approx(seconds / 3600)
    assert sum(float(r["cpu_seconds"]) for r in branch["history"]) > 0


def test_the_stable_checkpoint_is_where_every_longer_budget_passes(tiny_params, tiny_dataset, tmp_path):
    """A WSD run keeps its checkpoint at the end of its stable phase, once: the 4-epoch run's (decay 0.5:
    after epoch 2) holds exactly the training an 8-epoch run of the same seed does in its first 2 epochs,
    so a longer budget can go on from it; a cosine run keeps none."""
    import torch

    train_run(Run(_wsd(tiny_params, 4), "mnist5k", "relu+ape", 0), tiny_dataset, tmp_path / "four")
    train_run(Run(_wsd(tiny_params, 8), "mnist5k", "relu+ape", 0), tiny_dataset, tmp_path / "eight")
    stable = torch.load(tmp_path / "four" / records.STABLE_CHECKPOINT, map_location="cpu", weights_only=False)
    assert stable["epoch"] == budgets.stable_end(_wsd(tiny_params, 4).train) == 2
    # the same training; only the last row's lr differs: it is the next step's, the first of the 4-epoch
    # run's decay (a run going on from here rebuilds its schedule, as a cool-down does)
    eight_rows = records.read_history(tmp_path / "eight")[:2]
    _same_training([{**r, "lr": 0} for r in stable["history"]], [{**r, "lr": 0} for r in eight_rows])
    assert stable["history"][0]["lr"] == eight_rows[0]["lr"] > stable["history"][1]["lr"]
    eight = torch.load(tmp_path / "eight" / records.STABLE_CHECKPOINT, map_location="cpu", weights_only=False)
    assert eight["epoch"] == 4 and eight["key"] != stable["key"]
    train_run(Run(tiny_params, "mnist5k", "relu+ape", 0), tiny_dataset, tmp_path / "cosine")
    assert not (tmp_path / "cosine" / records.STABLE_CHECKPOINT).exists()


def test_a_kill_between_the_stable_copy_and_the_checkpoint_loses_neither(
    tiny_params, tiny_dataset, tmp_path, monkeypatch
):
    """Killed inside the stable phase's last checkpoint, between its two files: the resumed run ends
    with a stable copy equal, tensor for tensor, to an unkilled run's, and with its result (the copy is
    written first, so the kill leaves the epoch before and the epoch is trained again; written second,
    the resumed run, already past the stable phase, would never make it)."""

    class Killed(Exception):
        pass

    run = Run(_wsd(tiny_params, 4), "mnist5k", "relu+ape", 0)
    unkilled = train_run(run, tiny_dataset, tmp_path / "unkilled")
    atomic_write, writes = records._atomic_write, []

    def dies_at_the_second_write_of_epoch_2(path, write, keep_previous=None):
        if path.name in (records.CHECKPOINT, records.STABLE_CHECKPOINT):
            writes.append(path.name)
            if len(writes) == 3:  # epoch 1's checkpoint, then epoch 2's two files
                raise Killed
        atomic_write(path, write, keep_previous)

    monkeypatch.setattr(records, "_atomic_write", dies_at_the_second_write_of_epoch_2)
    with pytest.raises(Killed):
        train_run(run, tiny_dataset, tmp_path / "killed")
    monkeypatch.setattr(records, "_atomic_write", atomic_write)
    resumed = train_run(run, tiny_dataset, tmp_path / "killed")
    assert resumed["top1"] == unkilled["top1"]
    ours, theirs = (
        torch.load(tmp_path / d / records.STABLE_CHECKPOINT, map_location="cpu", weights_only=False)
        for d in ("killed", "unkilled")
    )
    assert ours["epoch"] == theirs["epoch"] == 2
    for name, tensor in theirs["model"].items():
        assert torch.equal(ours["model"][name], tensor), name


def test_a_kill_inside_a_cool_down_repeats_only_the_cool_down(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    params = _wsd(tiny_params, 4, (2,))
    straight = train_run(Run(params, "mnist5k", "softmax+ape", 0), tiny_dataset, tmp_path / "a")

    class Killed(Exception):
        pass

    real = budgets.run_due_branches

    def killed_inside(state, run, train_epoch, validate, test):
        def dying(*args):
            train_epoch(*args)
            raise Killed

        return real(state, run, dying, validate, test)

    monkeypatch.setattr(budgets, "run_due_branches", killed_inside)
    with pytest.raises(Killed):
        train_run(Run(params, "mnist5k", "softmax+ape", 0), tiny_dataset, tmp_path / "b")
    assert records.load_checkpoint(tmp_path / "b" / records.CHECKPOINT)["branches"] == {}
    monkeypatch.setattr(budgets, "run_due_branches", real)
    resumed = train_run(Run(params, "mnist5k", "softmax+ape", 0), tiny_dataset, tmp_path / "b")
    again, first = resumed["budgets"]["2"], straight["budgets"]["2"]
    _same_training(again.pop("history"), first.pop("history"))
    assert again == first
    for key in ("top1", "test_correct", "best_epoch", "best_val_acc"):
        assert resumed[key] == straight[key], key
