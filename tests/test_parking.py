"""Parked runs (campaign/parking.py): an unfinished run kept in reports/<preset>/parked/ goes on in another
checkout, never backwards, never over a run that ended or that another live process trains."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_preset_yaml

from campaign import parking
from rpevit.lab.store import records

ROOT = Path(__file__).resolve().parents[1]
VARIANT = ("smoke", "mnist5k", "softmax+ape")


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """This checkout's runs/ and reports/ (another checkout: `move_to`)."""

    def move_to(machine: str) -> None:
        monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / machine / "runs"))
        monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / machine / "reports"))

    move_to("here")
    return move_to


def _run(seed: int) -> Path:
    return records.runs_root().joinpath(*VARIANT, f"seed{seed}")


def _checkpoint(directory: Path, epoch: int, name: str = records.CHECKPOINT, stable: bool = False) -> None:
    history = [{c: float(e) if c == "epoch" else 0.5 for c in records.HISTORY_COLUMNS} for e in range(1, epoch + 1)]
    buffer = io.BytesIO()
    torch.save({"epoch": epoch, "history": history}, buffer)
    records.write_bytes(directory / name, buffer.getvalue())
    if stable:
        records.write_bytes(directory / records.STABLE_CHECKPOINT, buffer.getvalue())


def _epoch(directory: Path) -> int:
    return records.load_checkpoint(directory / records.CHECKPOINT)["epoch"]


def _parked() -> list[str]:
    root = records.reports_root() / "smoke" / parking.PARKED
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_park_keeps_only_unfinished_runs_newest_state(checkout):
    _checkpoint(_run(1), 7, stable=True)  # in flight
    _checkpoint(_run(2), 3, name=records.PREVIOUS_CHECKPOINT)  # killed while replacing its checkpoint
    _checkpoint(_run(3), 9)
    records.write_json(_run(3) / records.RECORD, {"status": "finished"})  # ended here
    _checkpoint(_run(4), 9)
    records.write_json(records.reports_root().joinpath("smoke", "records", *VARIANT[1:], "seed4", "record.json"), {})
    _checkpoint(records.runs_root().joinpath(*VARIANT, records.SUPERSEDED, "seed5"), 4)  # set aside
    (line,) = parking.park(["smoke"])
    assert _parked() == [
        "mnist5k/softmax+ape/seed1/checkpoint.pt",
        "mnist5k/softmax+ape/seed1/checkpoint.stable.pt",
        "mnist5k/softmax+ape/seed2/checkpoint.pt",
    ]
    assert (
        line.startswith("smoke: 2 unfinished run(s) parked")
        and "seed1 at epoch 7" in line
        and "seed2 at epoch 3" in line
    )


def test_a_fresh_checkout_restores_parked_runs_whole_and_only_forward(checkout):
    _checkpoint(_run(1), 7, stable=True)
    _checkpoint(_run(2), 5)
    parking.park(["smoke"])
    tracked = records.reports_root()
    checkout("fresh")  # a new clone: the tracked reports/ travel, runs/ does not
    shutil.copytree(tracked, records.reports_root())
    _checkpoint(_run(2), 6)  # this checkout already went further with seed 2
    assert parking.pending("smoke") == ["mnist5k/softmax+ape/seed1 at epoch 7"]  # what `status` says
    assert parking.restore("smoke") == ["smoke: 1 parked run(s) restored from reports/smoke/parked"]
    assert _epoch(_run(1)) == 7 and (_run(1) / records.STABLE_CHECKPOINT).is_file()
    history = records.read_history(_run(1))  # the budget reads it: written from the checkpoint's own history
    assert [row["epoch"] for row in history] == [1, 2, 3, 4, 5, 6, 7]
    assert _epoch(_run(2)) == 6  # never backwards
    assert parking.restore("smoke") == []  # nothing moves twice


def test_a_run_in_flight_shows_its_epochs_so_far_from_here_or_from_its_parked_copy(checkout):
    """The interim curves of a pilot (gap_pilot.curves_figure) read a run still training: its history here,
    or in a fresh checkout the one its parked checkpoint holds, whichever is further on."""
    from rpevit.lab.params import load_params
    from rpevit.lab.store.run import Run

    def epochs_so_far():
        run = Run(load_params("smoke"), *VARIANT[1:], 1).rooted()
        assert run.dir == _run(1)
        return [row["epoch"] for row in parking.history_so_far(run)]

    assert epochs_so_far() == []  # not started anywhere
    _checkpoint(_run(1), 5)
    parking.park(["smoke"])
    tracked = records.reports_root()
    checkout("fresh")
    shutil.copytree(tracked, records.reports_root())
    assert epochs_so_far() == [1, 2, 3, 4, 5]  # from the parked checkpoint: runs/ is empty here
    _checkpoint(_run(1), 6)
    history = [{c: float(e) if c == "epoch" else 0.5 for c in records.HISTORY_COLUMNS} for e in range(1, 7)]
    records.write_csv(_run(1) / records.HISTORY, history)
    assert epochs_so_far() == [1, 2, 3, 4, 5, 6]  # this checkout went further
    (_run(1) / records.HISTORY).write_bytes(b"garbled")
    assert epochs_so_far() == [1, 2, 3, 4, 5]  # a damaged history here is not read,
    assert (_run(1) / records.HISTORY).read_bytes() == b"garbled"  # nor moved: the run's resume judges it


def test_park_after_a_fresh_clone_loses_no_parked_run(checkout):
    """Parking in a checkout that never restored (its runs/ empty) must not drop what was parked."""
    _checkpoint(_run(1), 7)
    parking.park(["smoke"])
    shutil.rmtree(records.runs_root())
    (line,) = parking.park(["smoke"])
    assert "seed1 at epoch 7" in line and _parked() == ["mnist5k/softmax+ape/seed1/checkpoint.pt"]


def test_a_gpu_sitting_staged_in_a_fresh_clone_carries_the_parked_runs(checkout, tmp_path):
    from campaign import sitting

    _checkpoint(_run(1), 7)
    parking.park(["smoke"])
    shutil.rmtree(records.runs_root())  # a fresh clone: nothing in runs/ until something restores
    lines = sitting.stage(["smoke"], tmp_path / "staged")
    assert lines[0] == "smoke: 1 parked run(s) restored from reports/smoke/parked"
    staged = tmp_path.joinpath("staged", "runs", *VARIANT, "seed1", records.CHECKPOINT)
    assert records.load_checkpoint(staged)["epoch"] == 7


def test_status_reads_parked_runs_without_moving_a_damaged_checkpoint(checkout):
    _checkpoint(_run(1), 7)
    parking.park(["smoke"])
    records.write_text(_run(1) / records.CHECKPOINT, "not a checkpoint")
    assert parking.pending("smoke") == ["mnist5k/softmax+ape/seed1 at epoch 7"]
    assert (_run(1) / records.CHECKPOINT).read_text() == "not a checkpoint"  # the run's own resume judges it


def test_restore_leaves_ended_and_busy_runs_alone(checkout):
    _checkpoint(_run(1), 7)
    _checkpoint(_run(2), 7)
    parking.park(["smoke"])
    shutil.rmtree(records.runs_root())
    records.write_json(records.reports_root().joinpath("smoke", "records", *VARIANT[1:], "seed1", "record.json"), {})
    _run(2).mkdir(parents=True)
    (_run(2) / records.LOCK).write_text(f"{os.getppid()} {socket.gethostname()}")  # a live trainer
    assert parking.restore("smoke") == [
        "smoke: 0 parked run(s) restored from reports/smoke/parked (1 left alone: another process trains them)"
    ]
    assert not (_run(1) / records.CHECKPOINT).exists() and not (_run(2) / records.CHECKPOINT).exists()


def test_unpack_advances_a_run_whole_and_brings_an_ended_one(checkout, tmp_path):
    from campaign import sitting

    checkout("gpu")
    _checkpoint(_run(1), 9)
    records.write_text(_run(1) / records.HISTORY, "epoch,seconds\n")  # packed as found; rewritten on arrival
    _checkpoint(_run(2), 12)
    records.write_json(_run(2) / records.RECORD, {"status": "finished"})
    out = tmp_path / "out"
    out.mkdir()
    sitting.pack("smoke", out)
    checkout("here")
    _checkpoint(_run(1), 4)
    records.write_text(_run(1) / records.HISTORY, "stale\n")
    (line,) = sitting.unpack(out)
    assert line == "unpacked 1 part(s): 0 kept files added, 2 runs advanced or added, 0 runs kept as they were"
    assert _epoch(_run(1)) == 9 and len(records.read_history(_run(1))) == 9
    assert json.loads((_run(2) / records.RECORD).read_text())["status"] == "finished"


PRESET = tiny_preset_yaml("parking_tiny", epochs=6, train_size=1000)

# `python -m rpevit …` that SIGKILLs itself right after writing epoch 2's checkpoint and history: the kill
# lands at the same point on a loaded machine as on an idle one (a poll-then-kill raced the run to its end).
KILLED_AFTER_EPOCH_2 = """
import os, runpy, signal, sys
from rpevit.lab.training import train
write = train._write_checkpoint
def write_then_die(state, *args, **kwargs):
    write(state, *args, **kwargs)
    if state.epoch >= 2:
        os.kill(os.getpid(), signal.SIGKILL)
train._write_checkpoint = write_then_die
sys.argv[0] = "rpevit"
runpy.run_module("rpevit", run_name="__main__")
"""


@pytest.mark.slow
def test_a_run_killed_mid_study_and_parked_finishes_in_a_fresh_checkout_as_if_uncut(tmp_path):
    preset = tmp_path / "parking_tiny.yaml"
    preset.write_text(PRESET)

    def rpevit(machine: str, *args: str, killed: bool = False):
        env = {
            **os.environ,
            "RPEVIT_RUNS": str(tmp_path / machine / "runs"),
            "RPEVIT_REPORTS": str(tmp_path / machine / "reports"),
            "OMP_NUM_THREADS": "1",
        }
        launch = ["-c", KILLED_AFTER_EPOCH_2] if killed else ["-m", "campaign"]
        done = subprocess.run([sys.executable, *launch, *args], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == (-signal.SIGKILL if killed else 0), done.stdout + done.stderr
        return done.stdout

    def top1(machine: str) -> float:
        (record,) = (tmp_path / machine / "runs").rglob(records.RECORD)
        return json.loads(record.read_text())["top1"]

    rpevit("straight", "study", str(preset), "--no-progress")
    rpevit("first", "study", str(preset), "--no-progress", killed=True)  # the sitting ends after epoch 2: the
    # process and, below, this checkout's runs/ are gone
    assert "1 unfinished run(s) parked" in rpevit("first", "park", str(preset))
    (tmp_path / "second").mkdir()
    os.rename(tmp_path / "first" / "reports", tmp_path / "second" / "reports")  # what a commit carries
    resumed = rpevit("second", "study", str(preset), "--no-progress")
    assert "1 parked run(s) restored" in resumed and "resuming after epoch" in resumed
    assert top1("second") == top1("straight")
