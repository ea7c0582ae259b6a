"""Run locks that cannot be read — empty (a kill between creating and writing one), garbled, not UTF-8,
naming no process — count as held for a short grace period, then as stale and taken over; never a
traceback, in `study` or `status`."""

from __future__ import annotations

import os
import socket
import time

import pytest

from rpevit.lab.store import records

from helpers import cli

PRESET = """\
name: locks
datasets: [mnist5k]
variants: [softmax+ape]
seeds: [0]
data: {train_size: 200}
model: {dim: 16, depth: 1, heads: 2, mlp_dim: 32}
train: {epochs: 1, batch_size: 100, lr: 0.003, warmup_epochs: 0.5, eval_batch_size: 250, timing_images: 4,
        device: cpu}
"""
CONTENTS = {
    "empty": b"",
    "not-utf8": b"\xff\xfe\x00\x81 \xc3",
    "garbled": b"12 34 56",
    "pid-only": b"4242",
    "pid-0": f"0 {socket.gethostname()}".encode(),
    "pid-negative": f"-1 {socket.gethostname()}".encode(),
}


def age(path, seconds: float) -> None:
    """Set the file's times `seconds` into the past."""
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS.keys())
def test_an_unreadable_lock_is_busy_while_young_then_taken_over(tmp_path, content):
    lock = tmp_path / records.LOCK
    lock.write_bytes(content)
    with pytest.raises(records.RunBusy) as busy:
        records.RunLock(tmp_path).__enter__()
    assert "unknown" in str(busy.value) and "\n" not in str(busy.value)
    assert records.RunLock(tmp_path).holder().startswith("unknown") and lock.read_bytes() == content
    age(lock, records.LOCK_GRACE_SECONDS + 1)
    assert records.RunLock(tmp_path).holder() is None  # stale now
    records.recovered.clear()
    with records.RunLock(tmp_path):
        assert lock.read_text() == f"{os.getpid()} {socket.gethostname()}"
    assert not lock.exists()
    # the damaged lock is kept beside the run and named, like any damaged file
    (aside,) = tmp_path.glob(f"{records.LOCK}.damaged-*")
    assert aside.read_bytes() == content
    assert len(records.recovered) == 1 and "a lock that names no process" in records.recovered[0]


def test_study_and_status_with_a_non_utf8_lock(tmp_path, roots, capsys):
    """A young lock of unreadable bytes: status shows the run in flight, the study skips it with one
    line; once older than the grace period the study takes it over and trains the run."""
    preset = tmp_path / "locks.yaml"
    preset.write_text(PRESET)
    lock = records.run_dir("locks", "mnist5k", "softmax+ape", 0, roots[0]) / records.LOCK
    lock.parent.mkdir(parents=True)
    lock.write_bytes(CONTENTS["not-utf8"])
    code, out, _ = cli(capsys, "status", preset)
    assert code == 0 and "in flight: softmax+ape on mnist5k, seed 0" in out
    code, out, _ = cli(capsys, "study", preset, "--no-progress")
    assert "skipped:" in out and "process unknown (lock not written yet" in out
    assert records.read_record(lock.parent) is None and lock.read_bytes() == CONTENTS["not-utf8"]
    age(lock, records.LOCK_GRACE_SECONDS + 1)
    code, out, _ = cli(capsys, "status", preset)
    assert code == 0 and "in flight:" not in out and "(0 in flight)" in out
    code, out, _ = cli(capsys, "study", preset, "--no-progress")
    assert code == 0 and records.read_record(lock.parent)["status"] == "finished" and not lock.exists()
