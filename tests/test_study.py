"""Study runner: grid expansion, skip-finished, resume after a crash mid-grid, summary tables."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from conftest import stand_in_design

from rpevit.core.errors import UserError
from rpevit.lab.schedule import cell, study
from rpevit.lab.schedule.time_limit import TimeLimit
from rpevit.lab.store import catalog, records
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs
from rpevit.lab.training import train as train_module
from rpevit.lab.training.train import Diverged


def test_study_resumes_only_missing_runs(grid_params, counted, tmp_path):
    calls, state = counted
    runs, reports = tmp_path / "runs", tmp_path / "reports"
    state["crash_on"] = 3
    with pytest.raises(KeyboardInterrupt):
        study.run_study(grid_params, runs_root=runs, reports_root=reports)
    assert len(records.load_records("tiny", runs)) == 2
    study.run_study(grid_params, runs_root=runs, reports_root=reports, time_limit=TimeLimit(0))  # starts nothing
    assert (
        "2 of the grid's 4 runs have a record; the others are not trained yet"
        in (reports / "tiny" / "summary.md").read_text()
    )
    calls.clear()
    state["crash_on"] = None
    results = study.run_study(grid_params, runs_root=runs, reports_root=reports)
    assert calls == [("softmax+ape", 0), ("softmax+ape", 1)]  # only what was missing
    assert len(results) == 4
    calls.clear()
    study.run_study(grid_params, runs_root=runs, reports_root=reports)
    assert calls == []  # idempotent
    summary = (reports / "tiny" / "summary.md").read_text()
    assert summary.count("| mnist5k |") == 4 and "have a record" not in summary  # the whole grid
    for column in study.SUMMARY_COLUMNS:
        assert column in summary
    csv_rows = (reports / "tiny" / "summary.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 5


def test_a_sitting_in_another_precision_is_refused_before_it_trains(grid_params, counted, monkeypatch, tmp_path):
    """amp 'auto' is fp32 on a CPU and bf16 on most GPUs under one run key: a study whose finished runs
    trained in fp32 does not train its others in bf16 (its seed-paired contrasts would mix precisions)."""
    calls, state = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    state["crash_on"] = 2
    with pytest.raises(KeyboardInterrupt):
        study.run_study(grid_params, **roots)  # 1 run finished (in fp32, on this CPU), 3 to train
    calls.clear()
    state["crash_on"] = None
    monkeypatch.setattr(study, "planned_precision", lambda device, amp: "bf16")  # as --device cuda would
    with pytest.raises(UserError, match="1 of its 1 finished runs trained in fp32, but this sitting would train in bf"):
        study.run_study(grid_params, **roots)
    assert calls == []
    monkeypatch.setattr(study, "planned_precision", lambda device, amp: "fp32")
    study.run_study(grid_params, **roots)
    assert len(calls) == 3


def test_train_of_one_grid_run_is_refused_in_another_precision(grid_params, counted, monkeypatch, tmp_path):
    """`train` of a run the study would keep follows the study's precision rule; a run outside the grid
    or at other epochs (kept apart by its key) is free."""
    _, state = counted
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    state["crash_on"] = 2
    with pytest.raises(KeyboardInterrupt):
        study.run_study(grid_params, **roots)  # 1 run finished in fp32
    monkeypatch.setattr(study, "planned_precision", lambda device, amp: "bf16")
    with pytest.raises(UserError, match="1 of its 1 finished runs trained in fp32, but this sitting would train in bf"):
        study.check_run_precision(grid_params, Run(grid_params, "mnist5k", "softmax+ape", 1, **roots))
    study.check_run_precision(grid_params, Run(grid_params, "mnist5k", "softmax+ape", 7, **roots))  # not in the grid
    study.check_run_precision(grid_params, Run(grid_params, "mnist5k", "softmax+ape", 1, epochs=3, **roots))
    monkeypatch.setattr(study, "planned_precision", lambda device, amp: "fp32")
    study.check_run_precision(grid_params, Run(grid_params, "mnist5k", "softmax+ape", 1, **roots))


def test_changed_settings_rerun(grid_params, counted, tmp_path):
    calls, _ = counted
    one = dataclasses.replace(grid_params, variants=("softmax+ape",), seeds=(0,))
    study.run_study(one, runs_root=tmp_path, reports_root=tmp_path)
    longer = dataclasses.replace(one, train=dataclasses.replace(one.train, epochs=2))
    study.run_study(longer, runs_root=tmp_path, reports_root=tmp_path)
    assert calls == [("softmax+ape", 0), ("softmax+ape", 0)]
    assert records.load_records("tiny", tmp_path)[0]["epochs"] == 2


def test_diverged_run_is_recorded_not_retried(grid_params, monkeypatch, tiny_dataset, tmp_path):
    def diverge(params, dataset, variant, seed, *args):
        raise Diverged(f"{variant}: non-finite loss at epoch 1, step 3")

    one = dataclasses.replace(grid_params, variants=("softmax+ape",), seeds=(0,))
    monkeypatch.setattr(runs, "dataset_for", lambda *a, **k: tiny_dataset)
    monkeypatch.setattr(train_module, "_train", diverge)
    results = study.run_study(one, runs_root=tmp_path, reports_root=tmp_path)
    assert results[0]["status"] == "diverged" and "epoch 1, step 3" in results[0]["message"]
    assert catalog.has_record(Run(one, "mnist5k", "softmax+ape", 0, runs_root=tmp_path))
    assert "| diverged |" in (tmp_path / "tiny" / "summary.md").read_text()


def test_kept_records_let_a_fresh_clone_skip_training(grid_params, counted, tmp_path):
    """A preset with keep_records copies record + history into reports/<preset>/records/; with the
    runs directory gone (a fresh clone), the study reuses them and retrains nothing."""
    calls, _ = counted
    kept = dataclasses.replace(grid_params, keep_records=True, seeds=(0,))
    first = study.run_study(kept, runs_root=tmp_path / "runs", reports_root=tmp_path / "reports")
    copies = sorted((tmp_path / "reports" / "tiny" / "records").rglob("record.json"))
    assert len(copies) == 2 and not list((tmp_path / "reports").rglob("checkpoint*.pt"))
    calls.clear()
    again = study.run_study(kept, runs_root=tmp_path / "elsewhere", reports_root=tmp_path / "reports")
    assert calls == [] and again == first
    # the histories come from the kept copies too; the checkpoints do not travel
    variant = again[0]["variant"]
    history = catalog.run_history(
        Run(kept, "mnist5k", variant, 0, runs_root=tmp_path / "elsewhere", reports_root=tmp_path / "reports")
    )
    assert len(history) == kept.train.epochs and history[-1]["epoch"] == kept.train.epochs
    assert not runs.weights_here(kept, again[0], tmp_path / "elsewhere")
    assert runs.weights_here(kept, again[0], tmp_path / "runs")


def test_kept_weights_let_a_fresh_clone_inspect_trained_models(grid_params, counted, tmp_path, monkeypatch):
    """The study (and keep-weights, for runs trained before) keeps one run's tested weights per variant
    (its first seed) beside the kept records; with runs/ gone they load into the same model, and
    weights of another result are never used."""
    kept = dataclasses.replace(grid_params, keep_records=True)
    trained, reports = tmp_path / "runs", tmp_path / "reports"
    monkeypatch.setenv("RPEVIT_REPORTS", str(reports))
    monkeypatch.setenv("RPEVIT_RUNS", str(trained))
    found = study.run_study(kept, runs_root=trained, reports_root=reports)
    paths = sorted((reports / "tiny" / "records").rglob(records.KEPT_WEIGHTS))
    assert [p.parent.name for p in paths] == ["seed0"] * 2  # kept as each variant's first run finished
    automatic = runs.kept_weights(Run(kept, "mnist5k", "softmax+ape", 0))
    tested, _ = runs.trained_model(Run(kept, "mnist5k", "softmax+ape", 0), "cpu")
    assert all(torch.equal(automatic[name], tensor) for name, tensor in tested.state_dict().items())
    assert all("already kept" in line for line in runs.keep_weights(kept, found))
    first, other = (
        Run(kept, "mnist5k", "softmax+none", seed, runs_root=trained, reports_root=reports) for seed in (0, 1)
    )
    for name in (records.KEPT_WEIGHTS, records.RECORD):  # a kept record lost: the study's repair restores it
        (first.kept_dir / name).unlink()
    study.run_study(kept, runs_root=trained, reports_root=reports)
    assert runs.kept_weights(first) is not None  # and its weights follow
    for path in paths:  # a study trained before weights were kept automatically
        path.unlink()
    assert runs.keep_first_weights(other) == ""  # not the preset's first seed
    records.save_kept_weights(other.kept_dir, records.read_record(other.kept_dir), {})
    assert runs.keep_first_weights(first) == ""  # its variant has weights kept already
    (other.kept_dir / records.KEPT_WEIGHTS).unlink()
    assert "its tested weights kept in" in runs.keep_first_weights(first)
    (first.kept_dir / records.KEPT_WEIGHTS).unlink()
    lines = runs.keep_weights(kept, found)
    assert len(lines) == 2 and all("seed 0: kept" in line for line in lines)
    assert sorted(p.parent.name for p in (reports / "tiny" / "records").rglob(records.KEPT_WEIGHTS)) == ["seed0"] * 2
    run = Run(kept, "mnist5k", "softmax+ape", 0)
    here, _ = runs.trained_model(run, "cpu")

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "elsewhere"))  # a fresh clone: kept records only
    again = catalog.study_records(kept)
    shown = runs.inspectable(kept, list(reversed(again)))
    assert [(r["variant"], r["seed"]) for r in shown] == [(v, 0) for v in kept.variants]  # preset order, lowest seed
    assert runs.weightless_note(kept, again) == ""
    model, record = runs.inspected_model(run, "cpu")
    assert record["key"] == run.key
    for name, tensor in here.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    with pytest.raises(UserError, match="keep-weights tiny"):
        runs.inspected_model(Run(kept, "mnist5k", "softmax+ape", 1), "cpu")

    path = run.kept_dir / records.KEPT_WEIGHTS
    stale = torch.load(path, weights_only=True)
    torch.save({**stale, "best_epoch": stale["best_epoch"] + 1}, path)  # weights of another result
    assert runs.kept_weights(run) is None and not runs.inspectable_here(kept, record)
    assert "softmax+ape · mnist5k" in runs.weightless_note(kept, again)
    assert any(
        line.startswith("softmax+ape | mnist5k: no finished run has its weights here (no checkpoint in")
        for line in runs.keep_weights(kept, again)
    )
    with pytest.raises(UserError, match="keep_records: false"):
        runs.keep_weights(grid_params, found)

    (first.kept_dir / records.KEPT_WEIGHTS).unlink()
    for checkpoint in first.dir.glob("checkpoint*.pt"):  # its tested weights gone from this machine
        checkpoint.unlink()
    assert "keep-weights tiny" in runs.keep_first_weights(first) and runs.kept_weights(first) is None


def test_retime_times_only_busy_runs_again_and_keeps_them(grid_params, counted, tmp_path):
    """A run timed on a busy machine is timed again (its weights, its images) and its kept copy updated;
    runs timed when quiet, and runs without weights here, keep their timings."""
    kept = dataclasses.replace(grid_params, keep_records=True, seeds=(0,))
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    quiet, loaded = study.run_study(kept, **roots)
    for record in (quiet, loaded):  # what each was timed under, made explicit
        load = 99.0 if record is loaded else 0.0
        directory = records.run_dir(kept.name, "mnist5k", record["variant"], 0, roots["runs_root"])
        records.write_json(directory / records.RECORD, {**record, "load_average": load, "ms_per_image_batched": 1e6})
    (retimed,) = study.retime_study(kept, **roots)
    assert retimed["variant"] == loaded["variant"] and 0 < retimed["ms_per_image_batched"] < 1e6
    kept_copy = records.read_record(
        Run(kept, "mnist5k", loaded["variant"], 0, reports_root=roots["reports_root"]).kept_dir
    )
    assert kept_copy["ms_per_image_batched"] == retimed["ms_per_image_batched"]
    assert study.retime_study(kept, runs_root=tmp_path / "elsewhere", reports_root=roots["reports_root"]) == []


def test_a_batch_larger_than_the_training_set_is_said(tiny_params, tiny_dataset, capsys):
    big = dataclasses.replace(tiny_params, train=dataclasses.replace(tiny_params.train, batch_size=1000))
    assert cell._loaded(lambda: tiny_dataset, big) is tiny_dataset
    out = capsys.readouterr().out
    assert "train.batch_size 1000 exceeds the 256 training images" in out and "one step" in out
    cell._loaded(lambda: tiny_dataset, tiny_params)
    assert capsys.readouterr().out == ""


def test_a_design_that_does_not_want_a_run_yet_leaves_it_unstarted(
    grid_params, counted, tmp_path, capsys, design_wanting_nothing
):
    calls, _ = counted
    designed = dataclasses.replace(
        grid_params, design=types.SimpleNamespace(active=True, plateau_check=None, primary=())
    )
    assert study.run_study(designed, runs_root=tmp_path, reports_root=tmp_path) == [] and calls == []
    assert (
        "not started: softmax+ape on mnist5k, seed 0 (the stopping rule needs 0 primary seeds)"
        in capsys.readouterr().out
    )


def test_a_study_waits_while_another_process_trains_what_decides_its_next_run(
    grid_params, counted, tmp_path, capsys, monkeypatch
):
    calls, _ = counted
    wait = ("wait", "favor+ape seed 2 is in flight; the stopping rule decides after it")
    answers = iter([wait, wait, ("train", "")])
    asked = []

    def decide(run, finished, busy, secondary_held=""):
        asked.append(busy)
        return next(answers)

    fake = types.SimpleNamespace(ordered_runs=lambda params: [("mnist5k", "softmax+ape", 0)], decide=decide)
    stand_in_design(monkeypatch, fake)
    monkeypatch.setattr(study, "POLL_SECONDS", 0)
    monkeypatch.setattr(study, "wanted_left", lambda params, todo, *reads: (len(todo), None))  # the ETA: not tested
    designed = dataclasses.replace(
        grid_params, design=types.SimpleNamespace(active=True, plateau_check=None, primary=())
    )
    study.run_study(designed, runs_root=tmp_path, reports_root=tmp_path)
    assert calls == [("softmax+ape", 0)] and len(asked) == 3 and asked[0] == set()
    out = capsys.readouterr().out
    assert out.count("waiting: softmax+ape on mnist5k, seed 0 (favor+ape seed 2 is in flight") == 1


def test_summary_is_written_only_when_asked(grid_params, counted, tmp_path):
    """Notebook 10 without a report directory (nbval, `make test`) trains and shows but leaves the
    committed reports/<preset>/summary.* untouched: run_study(summary=False) writes no summary."""
    one = dataclasses.replace(grid_params, seeds=(0,))
    results = study.run_study(one, runs_root=tmp_path / "runs", reports_root=tmp_path / "reports", summary=False)
    assert len(results) == 2 and not (tmp_path / "reports").exists()
    study.run_study(one, runs_root=tmp_path / "runs", reports_root=tmp_path / "reports")
    assert (tmp_path / "reports" / "tiny" / "summary.md").read_text().count("| mnist5k |") == 2
