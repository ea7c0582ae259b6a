"""`python -m rpevit status`: finished runs, runs in flight with their epochs, what a study still wants
and the hours that takes at the pace of its finished runs; a designed study's seeds and budgets."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from rpevit.cli import main
from rpevit.lab import design
from rpevit.lab.params import checked_by, load_params
from rpevit.lab.revision import code_revision, short_revision
from rpevit.lab.schedule import policy
from rpevit.lab.schedule.status import remaining_hours, status_lines
from rpevit.lab.schedule.study import run_study
from rpevit.lab.schedule.wanted import primary_settled, secondary_held
from rpevit.lab.store import records
from rpevit.lab.store.catalog import grid, pace_records, study_records
from rpevit.lab.store.run import Run
from rpevit.lab.training.train import train_run


@pytest.fixture
def half_done(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    """A 2 × 2 grid (2 epochs) with seed 0 finished and softmax+ape seed 1 stopped after epoch 1 and
    locked by a live process elsewhere."""
    from rpevit.lab.training import runs

    params = dataclasses.replace(tiny_params, variants=("softmax+none", "softmax+ape"), seeds=(0, 1))
    roots = {"runs_root": tmp_path / "runs", "reports_root": tmp_path / "reports"}
    monkeypatch.setattr(runs, "dataset_for", lambda *a, **k: tiny_dataset)
    run_study(dataclasses.replace(params, seeds=(0,)), **roots)
    flying = Run(params, "mnist5k", "softmax+ape", 1, **roots)

    def stop_after_first(row):
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(flying, tiny_dataset, flying.dir, on_epoch_end=stop_after_first)
    (flying.dir / records.LOCK).write_text("12345 another-host")
    return params, roots


def test_status_names_runs_in_flight_and_the_hours_left(half_done):
    params, roots = half_done
    lines = status_lines(params, **roots)
    assert lines[0] == "tiny: 2 of 4 runs finished"
    assert lines[1] == "in flight: softmax+ape on mnist5k, seed 1, 1 of 2 epochs done"
    assert lines[2].startswith("left: 2 runs (1 in flight); ≈ ") and len(lines) == 4
    assert lines[3] == f"code revision: every finished record comes from the current one ({current_revision()})"
    finished = study_records(params, **roots)
    pace = {
        v: statistics.median(r["train_seconds_per_epoch"] for r in finished if r["variant"] == v)
        for v in params.variants
    }
    left = [Run(params, "mnist5k", v, 1, runs_root=roots["runs_root"]) for v in ("softmax+none", "softmax+ape")]
    hours, unknown = remaining_hours(left, finished)
    assert unknown == 0
    # 2 epochs to train and 1 (its checkpoint holds one), each with 5 % validation, and 3 closing epochs each
    assert hours == pytest.approx(((2 * 1.05 + 3) * pace["softmax+none"] + (1 * 1.05 + 3) * pace["softmax+ape"]) / 3600)


def current_revision() -> str:
    return short_revision(code_revision())


def test_status_counts_finished_records_of_other_code_revisions(half_done):
    """Every record names the code revision that made it; status counts those of other revisions, and
    records without one as of unknown revision."""
    params, roots = half_done
    finished = study_records(params, **roots)
    assert {r["code_revision"] for r in finished} == {code_revision()} and code_revision()
    first, second = (Run.of(params, r, **roots).dir for r in finished)
    records.write_json(first / records.RECORD, {**records.read_record(first), "code_revision": "0" * 40})
    line = status_lines(params, **roots)[-1]
    assert line == (
        f"code revision: 1 of 2 finished records come from other code revisions than the current one "
        f"({current_revision()})"
    )
    older = {k: v for k, v in records.read_record(second).items() if k != "code_revision"}
    records.write_json(second / records.RECORD, older)  # a record made before records named their revision
    assert status_lines(params, **roots)[-1].endswith(
        "2 of 2 finished records come from other code revisions than "
        f"the current one ({current_revision()}), 1 of them of unknown revision"
    )


def test_status_without_a_finished_run_says_it_has_no_pace(tiny_params, tmp_path):
    lines = status_lines(tiny_params, runs_root=tmp_path, reports_root=tmp_path)
    assert lines == [
        f"tiny: 0 of {len(grid(tiny_params))} runs finished",
        f"left: {len(grid(tiny_params))} runs (0 in flight); no finished run on their dataset yet to take a pace from",
    ]


def test_a_designed_study_shows_its_seeds_budgets_and_check(tmp_path):
    params = load_params("fmnist_converged")
    kept = study_records(params, runs_root=tmp_path)  # the kept records only: nothing in flight here
    lines = status_lines(params, runs_root=tmp_path)
    progress = policy.primary_progress(params, kept)
    assert f"fashion_mnist: {progress.complete} complete primary seeds, the stopping rule needs {progress.needed}" in (
        "\n".join(lines)
    )
    assert ("; settled: no more primary runs" in "\n".join(lines)) == primary_settled(params, kept)
    assert any(line.startswith("fashion_mnist budget: primary ") for line in lines)
    assert any(line.startswith("  fmnist_plateau_check: ") for line in lines)
    assert not any(line.startswith("in flight:") for line in lines)
    held = [line for line in lines if line.startswith("held: ")]
    assert bool(held) == bool(secondary_held(params, runs_root=tmp_path))  # held while the check wants runs
    if held:
        assert held[0].startswith(
            f"held: {len(design.ordered_runs(params)) - len(params.seeds) * len(params.design.primary)} "
        )


def test_a_fixed_seed_design_shows_no_stopping_rule(tmp_path):
    check = load_params("fmnist_plateau_check")
    assert check.design.stopping.fixed and not load_params("fmnist_converged").design.stopping.fixed
    seeds = next(line for line in status_lines(check, runs_root=tmp_path) if line.startswith("fashion_mnist: "))
    assert f"of the design's fixed {len(check.seeds)} (no stopping rule)" in seeds
    assert "stopping rule needs" not in seeds and "half-widths" not in seeds
    kept = study_records(check, runs_root=tmp_path)
    if primary_settled(check, kept):  # why it stands, after "settled"
        fixed = f"the design's fixed {len(check.seeds)} seeds are complete"
        assert seeds.endswith(f"; settled: no more primary runs — {fixed}")


def test_a_check_takes_its_pace_from_its_study_too(tmp_path):
    check, study = load_params("fmnist_plateau_check"), load_params("fmnist_converged")
    assert checked_by("fmnist_plateau_check") == ["fmnist_converged"] and checked_by("fmnist_converged") == []
    own = [r for r in study_records(check, runs_root=tmp_path) if r["status"] == "finished"]
    theirs = [r for r in study_records(study, runs_root=tmp_path) if r["status"] == "finished"]
    assert len(pace_records(check, runs_root=tmp_path)) == len(own) + len(theirs)


def test_the_status_command_prints_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path))
    assert main(["status", "smoke_grid"]) == 0
    assert capsys.readouterr().out.startswith("smoke_grid: ")
    assert main(["status", "no_such_preset"]) == 2
    assert "error: no preset file 'no_such_preset'" in capsys.readouterr().err


def test_a_wsd_preset_counts_the_stable_checkpoints_a_longer_budget_can_go_on_from(tiny_params, tmp_path):
    assert not any("stable checkpoints" in line for line in status_lines(tiny_params, runs_root=tmp_path))
    train = dataclasses.replace(tiny_params.train, schedule="wsd", epochs=4, decay_fraction=0.5)
    params = dataclasses.replace(tiny_params, train=train)
    run = Run(params, *grid(params)[0], runs_root=tmp_path)
    run.dir.mkdir(parents=True)
    (run.dir / records.STABLE_CHECKPOINT).write_bytes(b"")
    line = next(line for line in status_lines(params, runs_root=tmp_path) if "stable checkpoints" in line)
    assert line.endswith(f": 1 of {len(grid(params))} runs")
