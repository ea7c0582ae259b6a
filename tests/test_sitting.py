"""The GPU sitting on the CPU: a minutes limit that cuts a run, packed results carried back and
unpacked, and the next sitting resuming them to the records of an uncut sitting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_preset_yaml

ROOT = Path(__file__).resolve().parents[1]
PRESET = tiny_preset_yaml("sitting_tiny", epochs=200, train_size=2000, keep_records=True)


def _campaign(args, roots: Path, check=True, runs: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "RPEVIT_RUNS": str(runs or roots / "runs"),
        "RPEVIT_REPORTS": str(roots / "reports"),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run([sys.executable, "-m", "campaign", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def _tops(roots: Path) -> dict[str, float]:
    kept = roots / "reports" / "sitting_tiny" / "records"
    return {p.parent.parent.name: json.loads(p.read_text())["top1"] for p in kept.rglob("record.json")}


def test_gpu_sitting_refuses_without_cuda_and_bad_minutes(tmp_path):
    refused = _campaign(["gpu-sitting", "smoke", "--out", str(tmp_path)], tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("error: no CUDA device is visible")
    refused = _campaign(["gpu-sitting", "smoke", "--out", str(tmp_path), "--minutes", "12"], tmp_path, check=False)
    assert refused.returncode == 2 and "--minutes 12 is not valid" in refused.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_cut_sitting_resumes_on_the_next_machine_to_the_uncut_records(tmp_path, monkeypatch):
    preset = tmp_path / "sitting_tiny.yaml"
    preset.write_text(PRESET)
    sit = ["gpu-sitting", str(preset), "--device", "cpu", "--processes", "1"]
    straight = tmp_path / "straight"
    _campaign([*sit, "--minutes", "3", "--out", str(tmp_path / "out0")], straight)
    assert set(_tops(straight)) == {"softmax+ape"}

    first, second = tmp_path / "machine1", tmp_path / "machine2"
    cut = _campaign([*sit, "--minutes", "0.25", "--out", str(tmp_path / "out1")], first)
    assert "stopped at the deadline: 1" in cut.stdout and "partial" in cut.stdout, cut.stdout
    assert _tops(first) == {}
    unpacked = _campaign(["gpu-sitting", "--unpack", str(tmp_path / "out1")], second)
    assert "1 runs advanced or added" in unpacked.stdout
    assert any((second / "runs").rglob("checkpoint.pt"))  # the cut run travels with its checkpoint
    # the next sitting trains from what `--stage` carries out, and comes back through --unpack
    from campaign import sitting

    monkeypatch.setenv("RPEVIT_RUNS", str(second / "runs"))
    assert sitting.stage([str(preset)], tmp_path / "staged")[0].endswith("1 unfinished run(s) staged (2 files)")
    monkeypatch.delenv("RPEVIT_RUNS")
    _campaign([*sit, "--minutes", "3", "--out", str(tmp_path / "out2")], second, runs=tmp_path / "staged" / "runs")
    assert "resuming after epoch" in (tmp_path / "out2" / "runner0.log").read_text()  # from the staged checkpoint
    _campaign(["gpu-sitting", "--unpack", str(tmp_path / "out2")], second)
    assert _tops(second) == _tops(straight)
    assert any((second / "runs").rglob("record.json"))  # the run came back finished
    again = _campaign(["gpu-sitting", "--unpack", str(tmp_path / "out1")], second)
    assert "0 kept files added, 0 runs advanced or added" in again.stdout  # nothing finished is overwritten


def test_a_second_preset_packs_beside_the_first_and_both_unpack(tmp_path, monkeypatch):
    """The sitting's chain (the next pilot in the minutes left) packs into the same $OUT: its parts are
    numbered on, so neither preset's files overwrite the other's, and one unpack brings both back."""
    from campaign import sitting
    from rpevit.lab.store import records

    def rooted(machine):
        monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / machine / "runs"))
        monkeypatch.setenv("RPEVIT_REPORTS", str(tmp_path / machine / "reports"))

    rooted("gpu")
    for preset in ("first", "second"):
        records.write_json(records.runs_root() / preset / "mnist5k" / "softmax+ape" / "seed1" / records.RECORD, {})
    out = tmp_path / "out"
    out.mkdir()
    names = [p.name for preset in ("first", "second") for p in sitting.pack(preset, out)]
    assert names == ["sitting-1.tar", "sitting-2.tar"]
    rooted("here")
    assert sitting.unpack(out)[-1].startswith("unpacked 2 part(s): 0 kept files added, 2 runs advanced or added")
    assert {p.parts[-5] for p in records.runs_root().rglob(records.RECORD)} == {"first", "second"}


def test_device_tree_slims_the_index_for_travel_and_restores_it_exactly(tmp_path):
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    kept = ("reports/p/records/r/record.json", "reports/q/records/r/record.json", "reports/ref/records/r/record.json")
    for name in ("src.py", "reports/other/big.png", "reports/p/summary.md", *kept):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "q.yaml").write_text("name: q\nreference: ref  # the dial's softmax runs\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    exclude_before = (tmp_path / ".git/info/exclude").read_text()
    script = str(ROOT / "campaign" / "scripts" / "device_tree.sh")
    subprocess.run(["bash", script, "slim", "q", "p"], cwd=tmp_path, check=True, capture_output=True)
    assert git("ls-files").split() == ["params/q.yaml", *kept, "src.py"]  # q's reference travels with it
    assert git("status", "--porcelain", "--untracked-files=all").split() == [
        "D",
        "reports/other/big.png",
        "D",
        "reports/p/summary.md",
    ]
    refused = subprocess.run(["bash", script, "slim", "p"], cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode == 2 and "already slim" in refused.stderr
    subprocess.run(["bash", script, "restore"], cwd=tmp_path, check=True, capture_output=True)
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert (tmp_path / ".git/info/exclude").read_text() == exclude_before


def test_a_captured_sitting_passes_capture_to_its_runners(tmp_path, monkeypatch):
    """gpu-sitting --capture starts study runners with --capture (graph-captured packed steps)."""
    from campaign import sitting
    from rpevit.lab.params import load_params

    started = []

    class Runner:
        def __init__(self, command, **kwargs):
            started.append(command)
            self.returncode = 0

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(sitting.subprocess, "Popen", Runner)
    monkeypatch.setattr(sitting.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(sitting, "pack", lambda preset, out: [])
    monkeypatch.setattr(sitting, "progress_lines", lambda preset: [])
    code = sitting.sit(load_params("smoke"), "smoke", 1.0, tmp_path, "cpu", 2, None, ["--capture"])
    assert code == 0 and len(started) == 2
    assert all("--capture" in command for command in started)
    assert all(command[command.index("study") + 1] == "smoke" for command in started)


def test_stage_carries_only_what_unfinished_runs_need(tmp_path, monkeypatch):
    """`gpu-sitting --stage`: each unfinished run's newest checkpoint, history and stable checkpoint; nothing
    of an ended run (its kept record tells the device) or a set-aside one; a continued preset's stable
    checkpoints; a folder it did not make is refused, its own is replaced."""
    import dataclasses

    from campaign import sitting
    from rpevit.core.errors import UserError
    from rpevit.lab.params import load_params
    from rpevit.lab.store import records

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    smoke = load_params("smoke")
    base = records.runs_root() / "smoke" / "mnist5k" / "softmax+ape"
    every = (records.CHECKPOINT, records.PREVIOUS_CHECKPOINT, records.STABLE_CHECKPOINT, records.HISTORY)
    for seed, names in {
        "seed1": (*every, records.RECORD),  # ended
        "seed2": every,  # in flight
        "seed3": (records.PREVIOUS_CHECKPOINT, records.HISTORY),  # killed while replacing its checkpoint
        f"{records.SUPERSEDED}/seed4": every,  # set aside
    }.items():
        for name in names:
            (base / seed).mkdir(parents=True, exist_ok=True)
            (base / seed / name).write_text(json.dumps({"status": "finished"}) if name == records.RECORD else name)
    donor = records.runs_root() / "donor" / "mnist5k" / "softmax+ape" / "seed1"
    donor.mkdir(parents=True)
    for name in every:
        (donor / name).write_text(name)
    folder = tmp_path / "staged"
    lines = sitting.stage(["smoke"], folder)
    staged = sorted(
        p.relative_to(folder / "runs" / "smoke" / "mnist5k" / "softmax+ape").as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != sitting.STAGED_MARK
    )
    assert staged == [
        "seed2/checkpoint.pt",
        "seed2/checkpoint.stable.pt",
        "seed2/history.csv",
        "seed3/checkpoint.pt",  # its newest good state, under the name a resume reads first
        "seed3/history.csv",
    ]
    assert lines[0] == "smoke: 2 unfinished run(s) staged (5 files)"
    assert (
        folder / "runs" / "smoke" / "mnist5k" / "softmax+ape" / "seed2" / "checkpoint.pt"
    ).read_text() == "checkpoint.pt"
    monkeypatch.setattr(sitting, "load_params", lambda preset: dataclasses.replace(smoke, continues="donor"))
    sitting.stage(["smoke"], folder)  # replaces its own folder
    assert (folder / "runs" / "donor" / "mnist5k" / "softmax+ape" / "seed1" / records.STABLE_CHECKPOINT).is_file()
    assert not (folder / "runs" / "donor" / "mnist5k" / "softmax+ape" / "seed1" / records.CHECKPOINT).exists()
    other = tmp_path / "mine"
    (other / "runs").mkdir(parents=True)
    with pytest.raises(UserError, match="was not made by --stage"):
        sitting.stage(["smoke"], other)
    assert (other / "runs").is_dir()
