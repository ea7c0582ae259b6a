"""A study's time limit: durations parsed or refused with one message, expected run times from the
preset's finished runs, and a study that starts no run it does not expect to finish in time."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from conftest import stand_in_design

from rpevit.cli import main
from rpevit.core.errors import UserError
from rpevit.lab.schedule import study, time_limit
from rpevit.lab.schedule.time_limit import TimeLimit, epochs_done, parse_duration, seconds_per_epoch
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training.train import train_run


@pytest.mark.parametrize(
    "text, seconds", [("2h30m", 9000), ("90m", 5400), ("1.5h", 5400), ("45s", 45), ("1h 5m 10s", 3910), ("2H", 7200)]
)
def test_durations_are_read_as_hours_minutes_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "2h30", "m", "1h1h", "two hours", "-5m", "0m", "1d"])
def test_a_bad_duration_is_one_clear_message(text):
    with pytest.raises(UserError, match=r"--time-limit: .*(2h30m)"):
        parse_duration(text)


def _record(variant, seconds, threads=None, dataset="mnist5k"):
    return {"dataset": dataset, "variant": variant, "train_seconds_per_epoch": seconds, "threads": threads}


def test_pace_is_the_median_of_the_variant_else_the_slowest_variant():
    here = torch.get_num_threads()
    finished = [
        _record("softmax+ape", 10.0, here),
        _record("softmax+ape", 30.0, here),
        _record("softmax+ape", 12.0, here),
        _record("favor+ape", 50.0, here),
        _record("favor+ape", 500.0, here + 1),  # other threads: not this process's pace
        _record("relu+ape", 7.0, here + 1),  # only at other threads: then those count
        _record("softmax+ape", 99.0, here, dataset="cifar10"),
    ]
    assert seconds_per_epoch(finished, "mnist5k", "softmax+ape") == 12.0
    assert seconds_per_epoch(finished, "mnist5k", "favor+ape") == 50.0
    assert seconds_per_epoch(finished, "mnist5k", "relu+ape") == 7.0
    assert (
        seconds_per_epoch([*finished, {**_record("relu+ape", 1.0, here), "status": "diverged"}], "mnist5k", "relu+ape")
        == 7.0
    )
    assert seconds_per_epoch(finished, "mnist5k", "relu+rope_mixed") == 50.0  # untried: the slowest
    assert seconds_per_epoch(finished, "fashion_mnist", "softmax+ape") is None
    # untried, with a side-by-side benchmark (seconds per image): each benchmarked finished variant's
    # pace scaled by relu+rope_mixed's cost relative to it — 12 · 3/2 = 18 and 50 · 3/5 = 30 — median 24
    costs = {"softmax+ape": 2e-3, "favor+ape": 5e-3, "relu+rope_mixed": 3e-3}
    assert seconds_per_epoch(finished, "mnist5k", "relu+rope_mixed", costs) == pytest.approx(24.0)
    assert seconds_per_epoch(finished, "mnist5k", "softmax+ape", costs) == 12.0  # a finished variant: its own pace
    assert seconds_per_epoch(finished, "mnist5k", "relu+krpe", costs) == 50.0  # not benchmarked: the slowest


def test_train_costs_read_the_presets_speed_benchmark_or_that_of_the_study_it_checks(tmp_path, monkeypatch):
    from rpevit.lab import params as params_lib
    from rpevit.lab.store import costs
    from rpevit.lab.store.records import write_csv

    study, check = types.SimpleNamespace(name="study"), types.SimpleNamespace(name="check")
    assert costs.train_costs(study, tmp_path) == {}  # no benchmark kept
    rounds = [
        {"round": r, "variant": v, "train_seconds_per_image": t * (1 + r), "ms_per_image_batched": 1.0}
        for r in range(3)
        for v, t in (("softmax+ape", 1e-3), ("favor+ape", 2e-3))
    ]
    write_csv(tmp_path / "bench" / "cpu_speed_study.csv", rounds)
    assert costs.train_costs(study, tmp_path) == pytest.approx({"softmax+ape": 2e-3, "favor+ape": 4e-3})  # medians
    monkeypatch.setattr(params_lib, "checked_by", lambda name: ["study"] if name == "check" else [])
    monkeypatch.setattr(costs, "load_params", lambda name: study)
    assert costs.train_costs(check, tmp_path) == pytest.approx({"softmax+ape": 2e-3, "favor+ape": 4e-3})


def test_epochs_done_come_from_a_matching_checkpoint_only(tiny_params, tiny_dataset, tmp_path):
    run = Run(tiny_params, "mnist5k", "softmax+ape", 0, runs_root=tmp_path)
    assert epochs_done(run) == 0

    def stop_after_first(row):
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(run, tiny_dataset, run.dir, on_epoch_end=stop_after_first)
    assert epochs_done(run) == 1
    other = Run(dataclasses.replace(tiny_params, train=dataclasses.replace(tiny_params.train, lr=1e-3)), *run.place)
    assert epochs_done(dataclasses.replace(other, runs_root=tmp_path)) == 0  # other settings: starts afresh
    good = (run.dir / records.CHECKPOINT).read_bytes()
    (run.dir / records.PREVIOUS_CHECKPOINT).write_bytes(good)
    (run.dir / records.CHECKPOINT).write_bytes(b"garbled")
    assert epochs_done(run) == 1  # training resumes from the previous checkpoint then
    torch.save({"key": run.key}, run.dir / records.CHECKPOINT)  # readable, but no checkpoint: set aside too
    assert epochs_done(run) == 1
    (run.dir / records.PREVIOUS_CHECKPOINT).unlink()
    (run.dir / records.CHECKPOINT).write_bytes(b"garbled")
    assert epochs_done(run) == 0 and (run.dir / records.CHECKPOINT).is_file()  # read-only: left for repair
    (run.dir / records.PREVIOUS_CHECKPOINT).write_bytes(good)
    torch.save({"key": "other settings", "epoch": 1}, run.dir / records.CHECKPOINT)
    assert epochs_done(run) == 0  # training sets both aside and starts afresh, so nothing is done


def test_refusal_names_the_expected_time_and_the_time_left(tiny_params, tmp_path):
    now = [0.0]
    limit = TimeLimit(600, clock=lambda: now[0])
    run = Run(tiny_params, "mnist5k", "softmax+ape", 0, runs_root=tmp_path)  # 2 epochs, none done
    finished = [_record("softmax+ape", 100.0, torch.get_num_threads())]
    assert limit.refusal(run, finished) == ""  # (2 · 1.05 + 3) · 100 s = 510 s of 600
    now[0] = 400.0
    assert limit.refusal(run, finished) == (
        "expected to take 8.5 min, 3.3 min left of the time limit; a later sitting trains it"
    )
    assert limit.refusal(run, []) == ""  # nothing to go on: it starts
    assert limit.refusal(run, finished, train=False) == ""  # only evaluation or repair left: it starts
    now[0] = 700.0
    assert limit.refusal(run, [], train=False) == "the time limit has passed; a later sitting does it"


def _limit(seconds_left):
    return TimeLimit(seconds_left, clock=lambda: 0.0)


def test_a_study_starts_only_the_runs_that_fit_in_its_time_limit(grid_params, counted, tmp_path, capsys):
    calls, _ = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    study.run_study(dataclasses.replace(grid_params, seeds=(0,)), **roots)  # paces to go on
    assert calls == [("softmax+none", 0), ("softmax+ape", 0)]
    calls.clear()
    study.run_study(grid_params, time_limit=_limit(1e-6), **roots)
    out = capsys.readouterr().out
    assert calls == [] and out.count("left of the time limit; a later sitting trains it") == 2
    assert "not started: softmax+ape on mnist5k, seed 1 (expected to take" in out
    study.run_study(grid_params, time_limit=_limit(3600), **roots)
    assert calls == [("softmax+none", 1), ("softmax+ape", 1)]


def test_a_run_in_flight_elsewhere_is_left_to_its_process_not_judged_by_the_time_limit(
    grid_params, counted, tmp_path, capsys
):
    calls, _ = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    study.run_study(dataclasses.replace(grid_params, seeds=(0,)), **roots)  # paces to go on
    flying = Run(grid_params, "mnist5k", "softmax+ape", 1, **roots)
    flying.dir.mkdir(parents=True)
    (flying.dir / records.LOCK).write_text("12345 another-host")
    capsys.readouterr()
    study.run_study(grid_params, time_limit=_limit(1e-6), **roots)
    out = capsys.readouterr().out
    assert calls == [("softmax+none", 0), ("softmax+ape", 0)]
    assert "not started: softmax+none on mnist5k, seed 1 (expected to take" in out
    assert "softmax+ape on mnist5k, seed 1 (expected" not in out
    assert "12345 on another-host" in out


def test_a_designed_study_trains_a_later_run_that_fits_and_stops_waiting_when_time_is_up(
    grid_params, counted, tmp_path, capsys, monkeypatch
):
    calls, _ = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    study.run_study(dataclasses.replace(grid_params, seeds=(0,)), **roots)
    calls.clear()
    order = [("mnist5k", "softmax+none", 1), ("mnist5k", "softmax+ape", 1)]
    fake = types.SimpleNamespace(
        ordered_runs=lambda params: order, decide=lambda run, finished, busy, secondary_held="": ("train", "")
    )
    stand_in_design(monkeypatch, fake)
    monkeypatch.setattr(study, "wanted_left", lambda params, todo, *reads: (len(todo), None))
    both = ("softmax+none", "softmax+ape")
    designed = dataclasses.replace(
        grid_params, design=types.SimpleNamespace(active=True, plateau_check=None, primary=both)
    )
    paces = {"softmax+none": 1e6, "softmax+ape": 1e-9}  # the first in design order cannot fit, the second can
    monkeypatch.setattr(time_limit, "expected_seconds", lambda run, pace, costs=None: paces[run.variant])
    study.run_study(designed, time_limit=_limit(60), **roots)
    out = capsys.readouterr().out
    assert calls == [("softmax+ape", 1)]
    assert "not started: softmax+none on mnist5k, seed 1 (expected to take 16666.7 min" in out

    fake.decide = lambda run, finished, busy, secondary_held="": ("wait", "another process decides it")
    monkeypatch.setattr(study, "POLL_SECONDS", 0)
    ticks = iter(range(0, 10_000, 20))  # each look at the clock: 20 s later
    study.run_study(designed, time_limit=TimeLimit(60, clock=lambda: next(ticks)), **roots)
    out = capsys.readouterr().out
    assert calls == [("softmax+ape", 1)]  # nothing more trained
    assert "not started: softmax+none on mnist5k, seed 1 (another process decides it; the time limit ended)" in out


@pytest.mark.parametrize(
    "primary, why",
    [
        (("softmax+none",), "the primary grid comes first, and its next run does not fit in the time left"),
        ((), "the secondary variants train in the order listed, and an earlier one's next run does not fit"),
    ],
    ids=["after-a-primary-run", "after-an-earlier-secondary-variant"],
)
def test_no_secondary_run_overtakes_an_earlier_run_that_does_not_fit(
    grid_params, counted, tmp_path, capsys, monkeypatch, primary, why
):
    """Whether the first run that does not fit is primary or an earlier-listed secondary variant, no
    secondary run trains in the time it could not use: the secondary budget gives way from the last-listed
    variant, and the primary grid comes first."""
    calls, _ = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    order = [("mnist5k", "softmax+none", 0), ("mnist5k", "softmax+ape", 0)]  # design order
    fake = types.SimpleNamespace(
        ordered_runs=lambda params: order, decide=lambda run, finished, busy, secondary_held="": ("train", "")
    )
    stand_in_design(monkeypatch, fake)
    design = types.SimpleNamespace(active=True, plateau_check=None, primary=primary)
    paces = {"softmax+none": 1e6, "softmax+ape": 1e-9}  # the first cannot fit, the second could
    monkeypatch.setattr(time_limit, "expected_seconds", lambda run, pace, costs=None: paces[run.variant])
    study.run_study(dataclasses.replace(grid_params, design=design), time_limit=_limit(60), **roots)
    assert calls == []
    assert f"not started: softmax+ape on mnist5k, seed 0 ({why}" in capsys.readouterr().out


def test_the_cli_refuses_a_bad_time_limit_before_any_training(capsys):
    assert main(["study", "smoke", "--time-limit", "soon"]) == 2
    err = capsys.readouterr().err
    assert "--time-limit: 'soon' is not a duration" in err and "Traceback" not in err
    assert main(["study", "smoke", "--time-limit", "soon", "--engine", "ray"]) == 2  # on Ray too (it works there)
    assert "--time-limit: 'soon' is not a duration" in capsys.readouterr().err
