"""Training loop: learning on real data, exact resume, NaN guard, record contents."""

from __future__ import annotations

import json

import pytest
import torch

from rpevit.core.budgets import warmup_cosine
from rpevit.core.loop import param_groups
from rpevit.core.model import build_model
from rpevit.lab.store import records
from rpevit.lab.store.run import Run
from rpevit.lab.training.train import Diverged, train_run

from helpers import resumed_like_straight

RECORD_KEYS = {
    "top1",
    "top5",
    "precision",
    "recall",
    "f1",
    "log_likelihood",
    "aic",
    "bic",
    "num_params",
    "flops_per_image",
    "train_seconds_per_epoch",
    "ms_per_image_batched",
    "ms_single_image",
    "peak_memory_mb",
    "best_epoch",
    "best_val_acc",
}


def test_tiny_run_learns_and_writes_record(tiny_params, tiny_dataset, tmp_path):
    record = train_run(Run(tiny_params, "mnist5k", "softmax+ape", 0, epochs=4), tiny_dataset, tmp_path)
    history = records.read_history(tmp_path)
    assert [row["epoch"] for row in history] == [1, 2, 3, 4]
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.1
    assert RECORD_KEYS <= record.keys()
    assert json.loads((tmp_path / "record.json").read_text())["top1"] == record["top1"]
    assert record["top1"] > 0.15  # better than chance (0.10) on held-out real digits
    assert record["flops_per_image"] > 0 and record["num_params"] > 0
    assert record["bic"] > record["aic"]  # k ln n > 2k for n = 100 test images
    cpu = [row["cpu_seconds"] for row in history]  # what a one-thread CPU budget counts
    assert min(cpu) > 0 and record["train_cpu_seconds_per_epoch"] == pytest.approx(sum(cpu) / 4)


def test_a_run_begun_without_cpu_seconds_resumes_in_its_seven_columns(tiny_params, tiny_dataset, tmp_path):
    """A checkpoint written before the epochs' CPU seconds were recorded resumes with one history schema:
    the new epochs go without them (never filled in), and the record says it has no CPU seconds."""

    def stop_after_first(row):
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    run = Run(tiny_params, "mnist5k", "relu+ape", 0, epochs=2)
    with pytest.raises(KeyboardInterrupt):
        train_run(run, tiny_dataset, tmp_path, on_epoch_end=stop_after_first)
    path = tmp_path / records.CHECKPOINT
    old = records.load_checkpoint(path)
    old["history"] = [{k: v for k, v in row.items() if k != "cpu_seconds"} for row in old["history"]]
    records.save_checkpoint(path, old)
    records.write_csv(tmp_path / records.HISTORY, old["history"])
    record = train_run(run, tiny_dataset, tmp_path, resume=True)
    history = records.read_history(tmp_path, epochs=2)
    assert [tuple(row) for row in history] == [records.WALL_ONLY_HISTORY_COLUMNS] * 2
    assert record["train_cpu_seconds_per_epoch"] is None and record["train_seconds_per_epoch"] > 0


def test_a_run_resumed_across_code_revisions_and_machines_lists_each_of_them(
    tiny_params, tiny_dataset, tmp_path, monkeypatch
):
    """A run stopped under one revision (on one machine) and resumed under another (on another) names both, in
    order; a checkpoint written before checkpoints kept the lists resumes with "unrecorded" first; a straight
    run names one."""
    from rpevit.lab import revision
    from rpevit.lab.training import run_record, train

    def stop_after_first(row):
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    def on(code: str, machine: str):
        monkeypatch.setattr(revision, "code_revision", lambda: code)
        for module in (train, run_record):
            monkeypatch.setattr(module, "device_name", lambda device: machine)

    run = Run(tiny_params, "mnist5k", "relu+ape", 0, epochs=3)
    on("a" * 40, "AMD EPYC")
    with pytest.raises(KeyboardInterrupt):
        train_run(run, tiny_dataset, tmp_path / "two", on_epoch_end=stop_after_first)
    on("b" * 40, "Intel Xeon")
    record = train_run(run, tiny_dataset, tmp_path / "two", resume=True)
    assert record["code_revisions"] == ["a" * 40, "b" * 40] and record["code_revision"] == "b" * 40
    assert record["device_names"] == ["AMD EPYC", "Intel Xeon"] and record["device_name"] == "Intel Xeon"

    with pytest.raises(KeyboardInterrupt):
        train_run(run, tiny_dataset, tmp_path / "old", on_epoch_end=stop_after_first)
    path = tmp_path / "old" / records.CHECKPOINT
    older = {k: v for k, v in records.load_checkpoint(path).items() if k not in ("revisions", "devices")}
    records.save_checkpoint(path, older)
    record = train_run(run, tiny_dataset, tmp_path / "old", resume=True)
    assert record["code_revisions"] == [revision.UNRECORDED, "b" * 40]
    assert record["device_names"] == [revision.UNRECORDED, "Intel Xeon"]

    record = train_run(run, tiny_dataset, tmp_path / "straight")
    assert record["code_revisions"] == ["b" * 40] and record["device_names"] == ["Intel Xeon"]


def test_resume_gives_identical_results(tiny_params, tiny_dataset, tmp_path):
    straight, resumed = resumed_like_straight(tiny_params, tiny_dataset, "softmax+ape", tmp_path)
    for key in ("top1", "log_likelihood", "best_epoch", "best_val_acc", "f1"):
        assert resumed[key] == straight[key], key


def test_non_finite_loss_stops_with_message_and_keeps_checkpoint(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    import rpevit.lab.training.train as train_module

    live = {}

    def capture(*args, **kwargs):
        live["model"] = build_model(*args, **kwargs)
        return live["model"]

    def corrupt(row):  # after the epoch-1 checkpoint is on disk, poison the live weights
        with torch.no_grad():
            for tensor in live["model"].parameters():
                tensor.fill_(float("nan"))

    monkeypatch.setattr(train_module, "build_model", capture)
    with pytest.raises(
        Diverged,
        match=r"softmax\+ape on mnist5k \(seed 0\): non-finite loss at epoch 2, "
        r"step 1; the last good checkpoint \(epoch 1\) is kept",
    ):
        train_run(Run(tiny_params, "mnist5k", "softmax+ape", 0, epochs=3), tiny_dataset, tmp_path, on_epoch_end=corrupt)
    kept = records.load_checkpoint(tmp_path / "checkpoint.pt")
    assert kept["epoch"] == 1
    assert all(torch.isfinite(t).all() for t in kept["model"].values())
    diverged = records.read_record(tmp_path)
    assert diverged["status"] == "diverged" and "epoch 2, step 1" in diverged["message"]


def test_schedule_and_weight_decay_groups(tiny_params):
    factor = warmup_cosine(10, 110, 1e-3, 1e-5)
    assert factor(0) == pytest.approx(0.1) and factor(9) == pytest.approx(1.0)
    assert factor(60) == pytest.approx(0.01 + 0.99 * 0.5)
    assert factor(110) == pytest.approx(0.01)
    model = build_model("softmax+ape", dim=32, depth=1, heads=4)
    decay, no_decay = param_groups(model, 0.05)
    no_decay_ids = {id(p) for p in no_decay["params"]}
    assert id(model.absolute.patches) in no_decay_ids and id(model.cls_token) in no_decay_ids
    assert id(model.blocks[0].attn.qkv.weight) not in no_decay_ids


def _stopped_after_one_epoch(params, dataset, out_dir):
    def stop(row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(Run(params, dataset.info.name, "softmax+ape", 0, epochs=2), dataset, out_dir, on_epoch_end=stop)
    return out_dir / records.CHECKPOINT


def test_cross_device_resume_restores_or_refuses_one_clear_error(tiny_params, tiny_dataset, tmp_path, capsys):
    """Issue 19 defect 4: a CPU checkpoint resumed on CUDA (or back) crashed in generator.set_state
    (5,056 bytes of CPU state against 16 of CUDA); and `amp: auto` switched fp32 → bf16 mid-run."""
    from rpevit.core.errors import UserError

    path = _stopped_after_one_epoch(tiny_params, tiny_dataset, tmp_path / "run")
    state = torch.load(path, weights_only=False)
    assert state["device_type"] == "cpu" and state["precision"] == "fp32"
    state["generator"] = torch.zeros(16, dtype=torch.uint8)  # as a CUDA generator's state is
    state["device_type"] = "cuda"
    torch.save(state, path)
    record = train_run(Run(tiny_params, "mnist5k", "softmax+ape", 0, epochs=2), tiny_dataset, tmp_path / "run")
    assert record["status"] == "finished" and "reseeded" in capsys.readouterr().out

    path = _stopped_after_one_epoch(tiny_params, tiny_dataset, tmp_path / "bf16")
    state = torch.load(path, weights_only=False)
    state["precision"] = "bf16"  # as if trained under bf16 autocast on a GPU
    torch.save(state, path)
    with pytest.raises(UserError, match=r"trained in bf16.*would continue in fp32"):
        train_run(Run(tiny_params, "mnist5k", "softmax+ape", 0, epochs=2), tiny_dataset, tmp_path / "bf16")
    assert path.is_file()  # kept for a resume where it was trained


def test_compile_time_is_reported_apart_and_inference_is_timed_as_recorded(
    tiny_params, tiny_dataset, tmp_path, monkeypatch
):
    """Issue 19 defect 7: epoch 1's time included compilation, and inference was timed fp32/eager
    while the record said bf16/compiled. A stand-in compiler spends 2 s of a fake clock (metrics' timers
    read only it, wall and CPU alike, each reading 1 ms later) on each new input shape: no wall time,
    so no load dependence."""
    import dataclasses
    import types

    from rpevit.core import capture, metrics

    clock = [0.0]

    def perf_counter():
        clock[0] += 1e-3
        return clock[0]

    class SlowCompile(torch.nn.Module):
        def __init__(self, model, **options):
            super().__init__()
            self.model, self.shapes = model, set()

        def forward(self, x):
            if (x.shape, self.model.training) not in self.shapes:
                self.shapes.add((x.shape, self.model.training))
                clock[0] += 2.0
            return self.model(x)

    timed = {}

    def spy(model, images, **kwargs):
        timed.update(kwargs)
        return real_timing(model, images, **kwargs)

    real_timing = metrics.inference_timing
    monkeypatch.setattr(torch, "compile", SlowCompile)
    monkeypatch.setattr(capture, "captures", lambda train_cfg, backend: train_cfg.compile)
    monkeypatch.setattr(metrics, "inference_timing", spy)
    monkeypatch.setattr(metrics, "time", types.SimpleNamespace(perf_counter=perf_counter, process_time=perf_counter))
    params = dataclasses.replace(tiny_params, train=dataclasses.replace(tiny_params.train, compile=True, amp="bf16"))
    record = train_run(Run(params, "mnist5k", "softmax+ape", 0, epochs=2), tiny_dataset, tmp_path)
    history = records.read_history(tmp_path)
    assert record["compiled"] and record["amp"] == "bf16"
    assert record["compile_seconds"] >= 2.0  # every shape compiled ahead, on the fake clock
    assert [row["seconds"] < 1.0 for row in history] == [True, True]  # no epoch is charged a compilation
    assert [row["cpu_seconds"] < 1.0 for row in history] == [True, True]  # in wall or in CPU seconds
    assert timed["amp"] == "bf16" and timed["compile_model"] is True


def test_deterministic_on_request_and_restored_after(tiny_params, tiny_dataset, tmp_path, monkeypatch):
    """Issue 19 defect 10: a CUDA resume is bitwise only with deterministic kernels and cuBLAS's
    fixed workspace; `train.deterministic: true` asks for both (key-neutral), for the run only."""
    import dataclasses
    import os

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen = []
    params = dataclasses.replace(tiny_params, train=dataclasses.replace(tiny_params.train, deterministic=True))
    assert Run(params, "mnist5k", "softmax+ape", 0).key == Run(tiny_params, "mnist5k", "softmax+ape", 0).key
    record = train_run(
        Run(params, "mnist5k", "softmax+ape", 0, epochs=1),
        tiny_dataset,
        tmp_path,
        on_epoch_end=lambda row: seen.append(torch.are_deterministic_algorithms_enabled()),
    )
    assert record["status"] == "finished" and seen == [True]
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert not torch.are_deterministic_algorithms_enabled()
