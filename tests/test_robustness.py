"""Nothing lost, nothing wasted: damaged files are recovered, every setting is checked before any
training, finished results are never silently overwritten, and one run is trained by one process."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rpevit.cli import main
from rpevit.core.errors import UserError
from rpevit.lab import paths, schema
from rpevit.lab.params import load_params
from rpevit.lab.schedule import study
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs
from rpevit.lab.training.train import train_run

from helpers import cli, require_module

ROOT = Path(__file__).resolve().parent.parent
TINY_PRESET = """\
name: tiny
datasets: [mnist5k]
variants: [softmax+ape, relu+rope_mixed]
seeds: [0]
data: {train_size: 1000}
model: {dim: 16, depth: 1, heads: 2, mlp_dim: 32}
train: {epochs: 2, batch_size: 100, lr: 0.003, warmup_epochs: 0.5, eval_batch_size: 250, timing_images: 4,
        device: cpu}
"""


@pytest.fixture
def preset(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_PRESET)
    return path


def run_dir(roots, variant="softmax+ape", seed=0):
    return records.run_dir("tiny", "mnist5k", variant, seed, roots[0])


def results(record):
    return schema.result_view(record)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs of the tiny preset (the records every recovery must reproduce)."""
    out = tmp_path_factory.mktemp("reference")
    (out / "tiny.yaml").write_text(TINY_PRESET)
    params = load_params(out / "tiny.yaml")
    return {r["variant"]: r for r in study.run_study(params, runs_root=out / "runs", reports_root=out / "rep")}


# ------------------------------------------------------------------ damaged files


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_damaged_checkpoint_of_interrupted_run_resumes_from_the_previous_one(preset, roots, reference, damage):
    params = load_params(preset)
    dataset = runs.dataset_for(params)
    directory = run_dir(roots)
    with pytest.raises(KeyboardInterrupt):  # killed after epoch 2's checkpoint, before the record
        train_run(Run(params, "mnist5k", "softmax+ape", 0), dataset, directory, on_epoch_end=_stop_at(2))
    checkpoint = directory / records.CHECKPOINT
    blob = checkpoint.read_bytes()
    checkpoint.write_bytes(b"" if damage == "empty" else blob[: len(blob) // 2])
    finished = study.run_study(params, runs_root=roots[0], reports_root=roots[1])
    assert results(finished[0]) == results(reference["softmax+ape"])  # epoch 2 redone from epoch 1's state
    assert len(finished) == 2  # the rest of the grid went on
    assert list(directory.glob("checkpoint.pt.damaged-*"))  # kept, not deleted
    summary = (roots[1] / "tiny" / "summary.md").read_text()
    assert "Notes from the last study run" in summary and "recovered:" in summary and "checkpoint.pt" in summary


def _stop_at(epoch):
    def stop(row):
        if row["epoch"] == epoch:
            raise KeyboardInterrupt

    return stop


@pytest.mark.parametrize(
    "content",
    [b'{"variant": "softmax+ape", "sta', b"[1, 2]", b"\xff\xfe\x00garbage", b""],
    ids=["truncated", "not-an-object", "not-utf8", "empty"],
)
def test_damaged_record_is_moved_aside_and_the_run_finished_again(preset, roots, reference, content):
    params = load_params(preset)
    study.run_study(params, runs_root=roots[0], reports_root=roots[1])
    directory = run_dir(roots)
    (directory / records.RECORD).write_bytes(content)
    again = study.run_study(params, runs_root=roots[0], reports_root=roots[1])
    assert [r["variant"] for r in again] == ["softmax+ape", "relu+rope_mixed"]
    assert results(again[0]) == results(reference["softmax+ape"])
    assert list(directory.glob("record.json.damaged-*"))


def test_damaged_checkpoint_of_finished_run_makes_evaluate_explain_and_study_repair(preset, roots, reference, capsys):
    params = load_params(preset)
    study.run_study(params, runs_root=roots[0], reports_root=roots[1])
    directory = run_dir(roots)
    (directory / records.CHECKPOINT).write_bytes(b"PK\x03\x04 truncated")
    (directory / records.PREVIOUS_CHECKPOINT).unlink()  # no earlier good state either
    code, out, err = cli(capsys, "evaluate", "--params", preset, "--variant", "softmax+ape", "--resolutions", "28")
    assert code == 2 and "lost the weights it was tested with" in err and "| resolution" not in out
    assert list(directory.glob("record.json.unverified-*")) and list(directory.glob("checkpoint.pt.damaged-*"))
    again = study.run_study(params, runs_root=roots[0], reports_root=roots[1])  # retrained from scratch
    assert results(again[0]) == results(reference["softmax+ape"])
    code, out, _ = cli(capsys, "evaluate", "--params", preset, "--variant", "softmax+ape", "--resolutions", "28")
    assert code == 0 and f"stored in its record: {directory / records.RECORD} (resolution_eval)" in out  # what it wrote


def test_history_is_completed_from_the_checkpoint(preset, roots, reference):
    params = load_params(preset)
    dataset = runs.dataset_for(params)
    directory = run_dir(roots)
    with pytest.raises(KeyboardInterrupt):
        train_run(Run(params, "mnist5k", "softmax+ape", 0), dataset, directory, on_epoch_end=_stop_at(2))
    history = (directory / records.HISTORY).read_text().splitlines()
    (directory / records.HISTORY).write_text("\n".join(history[:2]) + "\n")  # killed before epoch 2's row
    (directory / ".checkpoint.pt.abc123.tmp").write_bytes(b"half-written")
    record = train_run(Run(params, "mnist5k", "softmax+ape", 0), dataset, directory)
    assert [row["epoch"] for row in records.read_history(directory)] == [1.0, 2.0]
    assert not list(directory.glob(".*.tmp"))  # leftovers of interrupted writes are cleaned
    assert results(record) == results(reference["softmax+ape"])
    assert record["threads"] == torch.get_num_threads()  # exact resume holds for the same thread count


# ------------------------------------------------------------------ checked before training


@pytest.mark.parametrize(
    "section, values, message",
    [
        ("train", {"lr": 0}, r"train\.lr: 0\.0 is not valid; it must be a finite number > 0"),
        ("train", {"lr": float("nan")}, r"train\.lr: nan is not valid"),
        ("train", {"min_lr": -0.001}, r"train\.min_lr: -0\.001 is not valid; it must be a number in \[0"),
        ("train", {"grad_clip": -1}, r"train\.grad_clip: -1\.0 is not valid; it must be a finite number > 0, or null"),
        ("train", {"warmup_epochs": -1}, r"train\.warmup_epochs: -1\.0 is not valid"),
        (
            "train",
            {"label_smoothing": 1.0},
            r"train\.label_smoothing: 1\.0 is not valid; it must be a number in \[0, 1\)",
        ),
        ("train", {"timing_images": 0}, r"train\.timing_images: 0 is not valid; it must be a positive integer"),
        ("train", {"eval_batch_size": 0}, r"train\.eval_batch_size: 0 is not valid"),
        (
            "evaluate",
            {"resolutions": [20, 30]},
            r"evaluate\.resolutions: \[30\] are not positive multiples of "
            r"model\.patch_size = 4",
        ),
        ("model", {"favor": {"num_features": 0}}, r"model\.favor\.num_features must be a positive even integer"),
        ("model", {"patch_size": 5}, r"model\.patch_size: 5 does not divide the 28×28 images of mnist5k"),
        ("data", {"val_size": 0}, r"data\.val_size: 0 is not valid"),
    ],
)
def test_bad_settings_stop_before_any_training(tmp_path, roots, capsys, section, values, message):
    preset = yaml.safe_load(TINY_PRESET)
    preset.setdefault(section, {}).update(values)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(preset))
    code, out, err = cli(capsys, "study", path)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert re.search(message, err), err
    assert not roots[0].exists() or not any(roots[0].rglob("checkpoint.pt"))


def test_unwritable_runs_directory_stops_before_training(preset, tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    monkeypatch.setenv("RPEVIT_RUNS", str(blocked / "runs"))
    code, _, err = cli(capsys, "study", preset)
    assert code == 2 and "cannot be written" in err and "RPEVIT_RUNS" in err


# ------------------------------------------------------------------ never silently overwritten


def test_results_of_other_settings_are_kept(preset, roots, capsys):
    params = load_params(preset)
    first = study.run_study(params, runs_root=roots[0], reports_root=roots[1])[0]
    # train --epochs 1 on a finished study run writes its own run directory
    code, _, _ = cli(capsys, "train", "--params", preset, "--variant", "softmax+ape", "--epochs", "1")
    assert code == 0
    assert records.read_record(run_dir(roots)) == first
    assert records.read_record(run_dir(roots).with_name("seed0-e1"))["epochs"] == 1
    # train --resume on the finished run changes nothing
    code, out, _ = cli(capsys, "train", "--params", preset, "--variant", "softmax+ape", "--resume")
    assert code == 0 and "already finished" in out and records.read_record(run_dir(roots)) == first
    # an edited preset retrains, and keeps the earlier results in superseded/
    edited = dataclasses.replace(params, train=dataclasses.replace(params.train, lr=0.002))
    study.run_study(edited, runs_root=roots[0], reports_root=roots[1])
    kept = list((run_dir(roots) / records.SUPERSEDED).glob(f"*/{records.RECORD}"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == first
    assert records.read_record(run_dir(roots))["config"]["train"]["lr"] == 0.002


def test_a_run_held_by_a_live_process_is_skipped_and_a_stale_lock_taken_over(preset, roots):
    params = load_params(preset)
    directory = run_dir(roots)
    directory.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (directory / records.LOCK).write_text(f"{holder.pid} {os.uname().nodename}")
        done = study.run_study(params, runs_root=roots[0], reports_root=roots[1])
        assert [r["variant"] for r in done] == ["relu+rope_mixed"]  # skipped, the rest went on
    finally:
        holder.kill()
        holder.wait()
    done = study.run_study(params, runs_root=roots[0], reports_root=roots[1])  # holder is dead: stale lock
    assert [r["variant"] for r in done] == ["softmax+ape", "relu+rope_mixed"]
    assert not (directory / records.LOCK).exists()


def test_lock_is_exclusive_within_a_process_pair(tmp_path):
    with records.RunLock(tmp_path):
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                (
                    "import sys; from rpevit.lab.store import records\n"
                    "try:\n    records.RunLock(sys.argv[1]).__enter__()\nexcept records.RunBusy as e:\n"
                    "    print('busy', e); sys.exit(3)\n"
                ),
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
        )
        assert child.returncode == 3 and "busy" in child.stdout
    assert not (tmp_path / records.LOCK).exists()


# ------------------------------------------------------------------ smaller


def test_broken_pipe_is_quiet():
    shell = f"{sys.executable} -m rpevit list | head -1"
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {shell}"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr.lower() and result.stdout.strip() == "backends:"


def test_argparse_mistakes_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--params", "smoke"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--variant" in err


def test_kill_and_resume_harness(tmp_path):
    """SIGKILL a tiny study in training (twice), in evaluation and in keeping: the finished record,
    history and kept copy equal an uninterrupted run's (scripts/kill_resume.py; --kills 20 by hand)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kill_resume.py"), "--kills", "4", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kept copies identical" in result.stdout and "kills that landed: 0" not in result.stdout
    assert re.search(r"[1-9]\d* in train, [1-9]\d* in evaluate", result.stdout), result.stdout


def test_preflight_catches_model_errors_without_touching_the_rng():
    params = load_params("smoke")
    bad = dataclasses.replace(
        params, variants=("favor+rope_axial",), model=dataclasses.replace(params.model, dim=36, heads=4)
    )  # head dim 9: odd
    state = torch.get_rng_state()
    with pytest.raises(UserError, match="rope_axial needs a rotated dimension divisible by 4"):
        runs.preflight(bad)
    assert torch.equal(torch.get_rng_state(), state)


# ------------------------------------------------------------------ bad input: one line, nothing written


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"model": {"heads": 0}}, r"model\.heads must be a positive integer, got 0"),
        ({"model": {"dim": 10**12}}, r"does not fit this machine: about .* parameters .* GB of cpu memory"),
        ({"train": {"batch_size": 10**9}}, r"per training batch of 1000000000 images .* one batch of the whole set"),
        ({"variants": ["softmax+ape", "softmax+ape"]}, r"variants: 'softmax\+ape' and 'softmax\+ape' are the same"),
        (
            {"variants": ["relu+rope_mixed+ape", "relu+ape+rope_mixed"]},
            r"are the same entry \(both are relu\+rope_mixed\+ape\)",
        ),
        ({"seeds": [0, 1, 0]}, r"seeds: 0 and 0 are the same entry"),
        ({"name": "../../escape"}, r"preset name '\.\./\.\./escape' is not a plain name"),
        ({"name": ".hidden"}, r"preset name '\.hidden' is not a plain name"),
        ({"evaluate": {"resolutions": [100000]}}, r"evaluate\.resolutions: \[100000\] exceed 8× the 28×28 images"),
        ({"data": {"train_size": 10000000}}, r"data\.train_size: 10000000 exceeds the 4000 training images"),
        ({"seeds": [-1]}, r"seeds: -1 is not valid; seeds must be integers ≥ 0"),
        ({"variants": "softmax+ape"}, r"variants: 'softmax\+ape' is a single string; it must be a list"),
    ],
    ids=[
        "heads-0",
        "dim-huge",
        "batch-huge",
        "variant-twice",
        "variant-two-orders",
        "seed-twice",
        "escape",
        "dot",
        "resolution-huge",
        "train-size-huge",
        "seed-negative",
        "variants-string",
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, roots, capsys, edit, message):
    preset = yaml.safe_load(TINY_PRESET)
    for key, value in edit.items():
        preset[key] = {**preset.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(preset))
    code, out, err = cli(capsys, "study", path)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not roots[0].exists() and not roots[1].exists()  # nothing trained, nothing written
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path.parent.parent / "escape").exists()


def test_a_binary_file_as_preset_is_one_line(tmp_path, roots, capsys):
    path = tmp_path / "image.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    code, _, err = cli(capsys, "study", path)
    assert code == 2 and err.count("\n") == 1 and "not a text file" in err
    assert not roots[0].exists()


def test_ray_engine_with_no_cpus_per_run_is_refused(preset, roots, capsys):
    require_module("ray", "Ray is not installed (pip install -e '.[cluster]')")
    code, _, err = cli(capsys, "study", preset, "--engine", "ray", "--cpus-per-run", "0")
    assert code == 2 and err.count("\n") == 1 and "--cpus-per-run must be a positive integer, not 0" in err
    assert not roots[0].exists()


def test_paths_stay_inside_their_roots(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    assert paths.inside(tmp_path / "root", "smoke", "mnist5k") == tmp_path / "root" / "smoke" / "mnist5k"
    for bad in ("..", "../escape", "a/b", "", ".x", "a b"):
        with pytest.raises(UserError, match="is not a plain name"):
            records.run_dir(bad, "mnist5k", "softmax+ape", 0, tmp_path / "root")
    with pytest.raises(UserError, match="leaves its root"):
        paths.inside(tmp_path / "root", "link", "outside")


def test_kill_harness_refuses_a_missing_workdir(tmp_path):
    missing = tmp_path / "no" / "such"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kill_resume.py"), "--workdir", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert not missing.exists() and "Traceback" not in result.stderr


def test_kill_harness_refuses_a_used_workdir(tmp_path):
    """A workdir's earlier reference run would be reused (and time nothing): refused with one line."""
    (tmp_path / "reference").mkdir()
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kill_resume.py"), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "holds an earlier harness run" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reference"]


def test_the_run_lock_is_re_entrant_within_a_process(tmp_path, monkeypatch):
    """The grid cell holds the lock across training, evaluation and keeping; train_run takes it again
    inside (spelled differently): the lock file stays until the outer holder lets go."""
    monkeypatch.chdir(tmp_path)
    with records.RunLock(tmp_path / "run"):
        with records.RunLock("run"):
            assert (tmp_path / "run" / records.LOCK).is_file()
        assert (tmp_path / "run" / records.LOCK).is_file()
    assert not (tmp_path / "run" / records.LOCK).exists()
