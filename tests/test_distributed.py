"""Data-parallel training under torchrun: `torchrun --nproc-per-node 2` with gloo on CPU trains one
run to the parameters of one process with the same global batch, resumes exactly after a hard kill,
and refuses a runs directory the ranks do not share with one message.

The preset is tiny (dim 16, one layer, 351 training images in batches of 50: the last global batch
holds one image, so rank 1 trains on an empty shard there) and FAVOR+ redraws ω every 3 steps, so
the seeded redraw is exercised; every epoch each rank checks that all ranks hold bit-identical
parameters and buffers (ω included), so a rank drawing another ω fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rpevit.lab.params import load_params
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training import runs
from rpevit.lab.training.train import train_run

from helpers import without_times

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
VARIANT = "favor+rope_mixed"
PRESET = """\
name: tiny_ddp
description: torchrun test (tests/test_distributed.py)
datasets: [mnist5k]
variants: [favor+rope_mixed]
seeds: [0]
data: {train_size: 351}
model: {patch_size: 7, dim: 16, depth: 1, heads: 2, mlp_dim: 32, pool: cls, favor: {redraw_steps: 3}}
train: {epochs: 2, batch_size: 50, lr: 0.003, warmup_epochs: 0.5, device: cpu, eval_batch_size: 250,
        timing_images: 4}
"""
# runs the CLI like `-m rpevit`, with two test hooks: SIGKILL (no cleanup at all) right after the
# checkpoint of epoch $KILL_AFTER_EPOCH is on disk, and another runs directory for rank 1
WRAPPER = """\
import os, signal, sys
if os.environ.get("RANK") == "1" and os.environ.get("RANK1_RUNS"):
    os.environ["RPEVIT_RUNS"] = os.environ["RANK1_RUNS"]
from rpevit import cli
from rpevit.lab.training import train
kill_after = int(os.environ.get("KILL_AFTER_EPOCH", "0"))
if kill_after:
    run = train.train_run
    def killed(*args, **kwargs):
        def on_epoch_end(row):
            if row["epoch"] == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
        return run(*args, on_epoch_end=on_epoch_end, **kwargs)
    train.train_run = killed
sys.exit(cli.main(sys.argv[1:]))
"""

pytestmark = pytest.mark.skipif(
    not TORCHRUN.is_file() or not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torchrun and the gloo backend",
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    (base / "tiny_ddp.yaml").write_text(PRESET)
    (base / "wrapper.py").write_text(WRAPPER)
    return base


def torchrun(base: Path, runs_root: Path, *extra, script=None, env=None) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node 2 --standalone -m rpevit train --params tiny_ddp.yaml …`, 1 thread each."""
    target = [str(script)] if script else ["-m", "rpevit"]
    command = [
        str(TORCHRUN),
        "--nproc-per-node",
        "2",
        "--standalone",
        *target,
        "train",
        "--params",
        str(base / "tiny_ddp.yaml"),
        "--variant",
        VARIANT,
        "--no-progress",
        *extra,
    ]
    environment = {**os.environ, "RPEVIT_RUNS": str(runs_root), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)


def run_dir(runs_root: Path) -> Path:
    return records.run_dir("tiny_ddp", "mnist5k", VARIANT, 0, runs_root)


@pytest.fixture(scope="module")
def straight(setup):
    """An uninterrupted two-process run: its run directory."""
    result = torchrun(setup, setup / "straight")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "data-parallel over 2 processes" in result.stdout
    return run_dir(setup / "straight")


def checkpoint(directory: Path) -> dict:
    return torch.load(directory / records.CHECKPOINT, map_location="cpu", weights_only=False)


def test_two_processes_train_the_one_process_parameters(setup, straight, tmp_path):
    params = load_params(str(setup / "tiny_ddp.yaml"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = train_run(Run(params, "mnist5k", VARIANT, 0), runs.dataset_for(params), tmp_path)
    finally:
        torch.set_num_threads(threads)
    ddp_state, single_state = checkpoint(straight)["model"], checkpoint(tmp_path)["model"]
    assert ddp_state.keys() == single_state.keys()
    start = runs.untrained_model(Run(params, "mnist5k", VARIANT, 0)).state_dict()
    moved = max((single_state[k] - start[k]).abs().max().item() for k in start if start[k].is_floating_point())
    assert moved > 1e-3  # the comparison below is about trained weights, not the init
    for name, value in single_state.items():
        assert torch.allclose(ddp_state[name].double(), value.double(), rtol=0, atol=1e-5), name
    # ω was redrawn (16 steps, every 3) by every rank exactly as one process draws it
    omega = "blocks.0.attn.backend.omega"
    assert not torch.equal(single_state[omega], start[omega]) and torch.equal(ddp_state[omega], single_state[omega])
    for ddp_row, one_row in zip(records.read_history(straight), records.read_history(tmp_path), strict=True):
        for column in ("train_loss", "train_acc", "val_loss", "val_acc", "lr"):
            assert ddp_row[column] == pytest.approx(one_row[column], rel=1e-5, abs=1e-6), column
    # a budget counts every rank's CPU seconds: two ranks that each run every step of a tiny model spend
    # about twice the one process's (one rank's alone would be about as much as the one process)
    cpu = [sum(row["cpu_seconds"] for row in records.read_history(d)) for d in (straight, tmp_path)]
    print(f"CPU seconds, two ranks summed / one process: {cpu[0] / cpu[1]:.2f}")
    assert cpu[0] > 1.3 * cpu[1], cpu
    record = records.read_record(straight)
    assert record["status"] == "finished" and record["key"] == single["key"]
    assert abs(record["top1"] - single["top1"]) <= 0.004  # at most 2 of 500 test images on a near tie


def test_kill_and_resume_under_torchrun_is_exact(setup, straight):
    root = setup / "killed"
    killed = torchrun(setup, root, script=setup / "wrapper.py", env={"KILL_AFTER_EPOCH": "1"})
    assert killed.returncode != 0, killed.stdout + killed.stderr
    directory = run_dir(root)
    assert checkpoint(directory)["epoch"] == 1 and not (directory / records.RECORD).exists()
    assert len(checkpoint(directory)["rng_ranks"]) == 2
    resumed = torchrun(setup, root, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming after epoch 1" in resumed.stdout
    again, straight_state = checkpoint(directory), checkpoint(straight)
    for name, value in straight_state["model"].items():
        assert torch.equal(again["model"][name], value), name
    strip = [without_times(row) for row in records.read_history(straight)]
    assert [without_times(row) for row in records.read_history(directory)] == strip
    a, b = records.read_record(directory), records.read_record(straight)
    assert (a["top1"], a["test_predictions"], a["best_epoch"]) == (b["top1"], b["test_predictions"], b["best_epoch"])


def test_a_runs_directory_not_shared_by_every_rank_fails_with_one_message(setup):
    result = torchrun(
        setup, setup / "rank0_runs", script=setup / "wrapper.py", env={"RANK1_RUNS": str(setup / "rank1_runs")}
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert output.count("error: the runs directory") == 1, output
    assert "rank 1 on" in output and "does not show the check file" in output and "shared filesystem" in output
    assert not (setup / "rank0_runs" / "tiny_ddp").exists()  # nothing trained


def test_a_rank_leaves_with_its_code_and_its_output_flushed():
    """`distributed.leave` ends a torchrun rank without interpreter finalisation (where gloo's worker
    threads, still releasing finished work, would abort the process): buffered output still arrives."""
    script = (
        "import sys; from rpevit.lab.training import distributed; print('kept', end=''); "
        "sys.stderr.write('also'); distributed.leave(3)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (3, "kept", "also")
