"""Kill-and-resume harness: SIGKILL a tiny training run at random moments, resume it each time,
and check the final record and history equal an uninterrupted run's.

    python scripts/kill_resume.py --kills 10 [--seed 1] [--workdir DIR]

Exit status 0 if identical (prints "identical"), 1 if not. Every process uses one CPU thread:
bit-exact resume holds for the same thread count (it is recorded in each run record).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRESET = """\
name: killtest
datasets: [mnist5k]
variants: [favor+rope_mixed]
data: {train_size: 1000}
model: {dim: 16, depth: 1, heads: 2, mlp_dim: 32}
train: {epochs: 4, batch_size: 100, lr: 0.003, warmup_epochs: 0.5, eval_batch_size: 250, timing_images: 4,
        device: cpu}
"""
FIELDS = ("status", "top1", "top5", "log_likelihood", "best_epoch", "best_val_acc", "f1", "test_predictions", "key")


def train(runs: Path, preset: Path) -> subprocess.Popen:
    env = {**os.environ, "RPEVIT_RUNS": str(runs), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "rpevit",
        "train",
        "--params",
        str(preset),
        "--variant",
        "favor+rope_mixed",
        "--resume",
        "--no-progress",
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def outcome(runs: Path) -> tuple[dict, list]:
    directory = runs / "killtest" / "mnist5k" / "favor+rope_mixed" / "seed0"
    record = json.loads((directory / "record.json").read_text())
    history = (directory / "history.csv").read_text().splitlines()
    rows = [
        ",".join(cell for i, cell in enumerate(line.split(",")) if i != len(line.split(",")) - 1) for line in history
    ]  # drop the last column (seconds)
    return {k: record[k] for k in FIELDS}, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    if args.workdir is not None and not args.workdir.is_dir():
        print(f"error: --workdir {args.workdir} is not a directory; create it, or leave --workdir out", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill-resume-"))
    preset = work / "killtest.yaml"
    preset.write_text(PRESET)
    started = time.perf_counter()
    reference = train(work / "reference", preset)
    if reference.wait() != 0:
        print(reference.stderr.read())
        return 1
    duration = time.perf_counter() - started
    rng = random.Random(args.seed)
    landed = 0
    for _ in range(args.kills):
        process = train(work / "killed", preset)
        time.sleep(rng.uniform(0.3, 1.0) * duration)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            landed += 1
        process.wait()
    final = train(work / "killed", preset)
    if final.wait() != 0:
        print(final.stderr.read())
        return 1
    same = outcome(work / "reference") == outcome(work / "killed")
    print(
        f"kills that landed: {landed} of {args.kills} (uninterrupted run {duration:.1f} s incl. start-up); "
        + ("final record and history identical" if same else "DIFFERENT from the uninterrupted run")
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
