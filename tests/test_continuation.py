"""Going on from a shorter WSD budget (rpevit/lab/training/continuation.py): a run that starts from another
preset's stable checkpoint computes exactly what it computes from initialisation (fp32 on the CPU),
inherits the budgets branched before that point, and its CPU budget leaves the inherited epochs out."""

from __future__ import annotations

import dataclasses

import pytest

from campaign import budget, parking, stable_checkpoints
from rpevit.core.errors import UserError
from rpevit.lab import params_checks
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training import continuation
from rpevit.lab.training.train import train_run

HISTORY_KEYS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr")
RESULT_KEYS = ("top1", "top5", "test_correct", "best_epoch", "best_val_acc")


def _wsd(params, name: str, epochs: int, branches, continues=None):
    train = dataclasses.replace(params.train, schedule="wsd", decay_fraction=0.5, epochs=epochs, budgets=branches)
    return dataclasses.replace(params, name=name, train=train, continues=continues)


def _rows(history):
    return [{k: row[k] for k in HISTORY_KEYS} for row in history]


@pytest.fixture
def presets(tiny_params, tmp_path, monkeypatch):
    """A 4-epoch donor (stable phase to epoch 2, budget 2 branched after epoch 1) and an 8-epoch preset
    with budgets 2 and 4 that goes on from it; runs under tmp_path."""
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / "reports"))
    donor = _wsd(tiny_params, "tiny_donor", 4, (2,))
    monkeypatch.setattr(continuation, "load_params", lambda name: {"tiny_donor": donor}[name])
    return donor, _wsd(tiny_params, "tiny_long", 8, (2, 4), continues="tiny_donor")


def test_going_on_from_the_stable_checkpoint_is_the_longer_run_from_the_start(presets, tiny_dataset, tmp_path):
    donor, longer = presets
    train_run(Run(donor, "mnist5k", "relu+ape", 0), tiny_dataset)
    went_on = train_run(Run(longer, "mnist5k", "relu+ape", 0), tiny_dataset)
    scratch_params = dataclasses.replace(longer, name="tiny_scratch", continues=None)
    scratch = train_run(Run(scratch_params, "mnist5k", "relu+ape", 0), tiny_dataset)
    for key in (*RESULT_KEYS, "log_likelihood"):
        assert went_on[key] == scratch[key], key
    assert sorted(went_on["budgets"]) == sorted(scratch["budgets"]) == ["2", "4"]
    for b in ("2", "4"):
        assert {k: went_on["budgets"][b][k] for k in RESULT_KEYS} == {k: scratch["budgets"][b][k] for k in RESULT_KEYS}
        assert _rows(went_on["budgets"][b]["history"]) == _rows(scratch["budgets"][b]["history"])
    directory = Run(longer, "mnist5k", "relu+ape", 0).dir
    assert _rows(records.read_history(directory)) == _rows(
        records.read_history(Run(scratch_params, "mnist5k", "relu+ape", 0).dir)
    )
    donor_key = Run(donor, "mnist5k", "relu+ape", 0).key
    assert went_on["continued_from"] == {"preset": "tiny_donor", "key": donor_key, "epoch": 2, "budgets": ["2", "4"]}
    assert scratch["continued_from"] is None and went_on["key"] == scratch["key"]


def test_the_budget_leaves_out_what_the_donor_trained():
    history = [{"epoch": e, "seconds": 10.0} for e in range(1, 9)]
    branches = {"2": {"history": [{"epoch": 2, "seconds": 3.0}]}, "6": {"history": [{"epoch": 6, "seconds": 5.0}]}}
    inherited = {"preset": "d", "key": "k", "epoch": 4, "budgets": ["2"]}
    assert budget.run_seconds(history, branches) == 88.0
    assert budget.run_seconds(history, branches, inherited) == 88.0 - 40.0 - 3.0


def test_without_the_donors_stable_checkpoint_a_run_starts_from_initialisation(presets, tiny_dataset, capsys):
    _, longer = presets
    record = train_run(Run(longer, "mnist5k", "relu+ape", 0), tiny_dataset)
    assert record["continued_from"] is None and record["status"] == "finished"
    assert "no stable checkpoint of tiny_donor here" in capsys.readouterr().out


def test_a_donor_trained_otherwise_is_one_error_before_training(presets):
    donor, longer = presets
    other = dataclasses.replace(donor, train=dataclasses.replace(donor.train, lr=donor.train.lr * 2))
    with pytest.raises(UserError, match=r"continues \(tiny_donor\): .* only train.epochs and train.budgets may differ"):
        continuation.donor_run(Run(longer, "mnist5k", "relu+ape", 0), other)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(epochs=4), "train fewer epochs than this preset's 4"),
        (dict(budgets=(3, 2)), r"list the budgets \[3\]"),
        (dict(schedule="cosine", budgets=()), "both presets need train.schedule: wsd"),
    ],
)
def test_what_a_preset_may_go_on_from_is_checked_when_it_loads(presets, change, message):
    donor, longer = presets
    longer = dataclasses.replace(longer, train=dataclasses.replace(longer.train, **change))
    with pytest.raises(UserError, match=message):
        params_checks._check_continues(longer, lambda name: donor)


def test_a_fresh_checkout_goes_on_from_the_stable_checkpoint_the_repository_keeps(
    presets, tiny_dataset, tmp_path, monkeypatch
):
    """campaign/stable_checkpoints.py: `park` keeps a finished run's stable checkpoint in reports/<preset>/stable/,
    and in a checkout whose runs/ lacks it `restore` puts it back (only a readable file of that run), so the
    longer preset goes on from it exactly as where the donor trained."""
    donor, longer = presets
    donor = dataclasses.replace(donor, keep_records=True)
    monkeypatch.setattr(continuation, "load_params", lambda name: {"tiny_donor": donor}[name])
    run = Run(donor, "mnist5k", "relu+ape", 0).rooted()
    train_run(run, tiny_dataset)
    records.keep(run.dir, run.kept_dir)  # as the study does for a finished run of a keep_records preset
    kept = stable_checkpoints.kept_path(run)
    assert stable_checkpoints.keep(donor) == [
        "tiny_donor: 1 finished run(s)' stable checkpoint(s) kept in reports/tiny_donor/stable/ "
        "(a longer budget goes on from them); commit it"
    ]
    assert kept.read_bytes() == (run.dir / records.STABLE_CHECKPOINT).read_bytes()
    assert stable_checkpoints.keep(donor) == []  # nothing differs
    assert stable_checkpoints.status_line(donor) == [
        "stable checkpoints kept in reports/tiny_donor/stable/ (`park` keeps them): 1 of 1 finished runs"
    ]
    here = train_run(Run(longer, "mnist5k", "relu+ape", 0), tiny_dataset)

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "fresh_runs"))  # a fresh clone: the same reports/
    data = kept.read_bytes()
    kept.write_bytes(data[: len(data) // 2])  # damaged: not placed
    assert parking.restore(longer) == []
    kept.write_bytes(data)
    assert parking.restore(longer) == ["tiny_donor: 1 stable checkpoint(s) restored from reports/tiny_donor/stable/"]
    assert parking.restore(longer) == []  # runs/ has it now
    fresh = train_run(Run(longer, "mnist5k", "relu+ape", 0), tiny_dataset)
    assert fresh["continued_from"] == here["continued_from"] and fresh["continued_from"]["preset"] == "tiny_donor"
    for key in (*RESULT_KEYS, "log_likelihood"):
        assert fresh[key] == here[key], key
