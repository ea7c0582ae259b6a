"""Kill-and-resume harness: SIGKILL a tiny study (keep_records, multi-resolution evaluation) at
random moments of its training, its evaluation and its keeping, run it again each time, and check
that every finished run — its record, history, kept copy and kept weights — equals an uninterrupted
run's.

    python scripts/kill_resume.py --kills 20 [--seed 1] [--workdir DIR]

Kills go in cycles of five sittings — two in training (less than half an epoch, as the uninterrupted
run timed it, after an epoch other than the last ends: inside the next epoch or its checkpoint, never
past training however fast the machine), one in evaluation (after it starts testing a resolution),
two in keeping (after it starts copying to reports/, or after a repair of the kept copy is named:
every other one within the first few milliseconds, the record's copy, the rest anywhere up to the
weights' save, as the uninterrupted run timed it, so that kills land between the record's copy and
the weights' save), each a random moment after the line that starts it — then a last sitting finishes
the run, which is compared (the kept folder's files, its record, history and weights — tensors and
mark — and the run directory's), and the next cycle starts afresh. Exit status 0 if every comparison
is identical (prints "identical"), 1 if not, 2 on a bad argument (a workdir that holds an earlier
harness run, too). Every process uses one CPU thread: bit-exact resume holds for the same thread count
(recorded in each record).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rpevit.lab.store.records import without_times

PRESET = """\
name: killtest
datasets: [mnist5k]
variants: [favor+rope_mixed]
keep_records: true
data: {train_size: 1000}
model: {dim: 16, depth: 1, heads: 2, mlp_dim: 32}
train: {epochs: 4, batch_size: 100, lr: 0.003, warmup_epochs: 0.5, eval_batch_size: 250, timing_images: 4,
        device: cpu}
evaluate: {resolutions: [20, 28, 36]}
"""
VARIANT = "favor+rope_mixed"
FIELDS = (
    "status",
    "top1",
    "top5",
    "log_likelihood",
    "best_epoch",
    "best_val_acc",
    "f1",
    "test_predictions",
    "key",
    "resolution_eval",
)
PHASES = ("train", "evaluate", "keep")
CYCLE = ("train", "train", "evaluate", "keep", "keep")
# the output lines that start a phase (training: an epoch's line, EPOCH_LINE) and the most seconds to
# wait after one before the kill (training's and the long keeping wait come from the uninterrupted run)
EPOCH_LINE = re.compile(r"\] epoch (\d+)/(\d+) ")
STARTS = {"evaluate": ("testing at",), "keep": ("keeping its record", "repaired: kept")}
WAITS = {"evaluate": 0.02, "keep": 0.005}
WEIGHTS_KEPT = "tested weights kept"  # the line after the kept weights are saved
# lines that show a process got past `phase` before the kill: that kill did not land in it
LATER = {"train": ("testing the best", *STARTS["evaluate"], *STARTS["keep"]), "evaluate": STARTS["keep"], "keep": ()}


def study(work: Path, preset: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "RPEVIT_RUNS": str(work / "runs"),
        "RPEVIT_REPORTS": str(work / "reports"),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "rpevit", "study", str(preset), "--no-progress"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_directory(work: Path) -> Path:
    """The tiny study's one run under `work`."""
    return work / "runs" / "killtest" / "mnist5k" / VARIANT / "seed0"


def kept_directory(work: Path) -> Path:
    """The kept folder of the tiny study's one run under `work`."""
    return work / "reports" / "killtest" / "records" / "mnist5k" / VARIANT / "seed0"


def kept_weights(kept: Path) -> dict:
    """The kept weights as comparable data: their tensors (dtype, shape, bytes), their mark less the time
    it finished, and whether that time is the kept record's; or why there are none."""
    import torch

    try:
        weights = torch.load(kept / "weights.pt", map_location="cpu", weights_only=True)
    except Exception as exc:  # missing or unreadable: a difference to report, not a traceback
        return {"unreadable": f"{type(exc).__name__}: {exc}"}
    record = json.loads((kept / "record.json").read_text())
    return {
        "mark": {k: weights.get(k) for k in ("key", "best_epoch", "top1")},
        "finished_at is the record's": weights.get("finished_at") == record.get("finished_at"),
        "state": {k: (str(t.dtype), tuple(t.shape), t.numpy().tobytes()) for k, t in weights["state"].items()},
    }


def history_rows(directory: Path) -> list[dict]:
    """The rows of a run directory's history.csv, by column name."""
    with open(directory / "history.csv", newline="") as f:
        return list(csv.DictReader(f))


def outcome(work: Path) -> tuple:
    """(result fields, history without its timings) of the run directory and of the kept copy, the files of
    both, and the kept weights."""
    run, kept = run_directory(work), kept_directory(work)

    def read(directory: Path):
        record = json.loads((directory / "record.json").read_text())
        return {k: record.get(k) for k in FIELDS}, [without_times(row) for row in history_rows(directory)]

    files = [sorted(p.name for p in directory.iterdir()) for directory in (run, kept)]
    return read(run), read(kept), files, kept_weights(kept)


def shortest_epoch(work: Path) -> float:
    """Wall seconds of the uninterrupted run's fastest epoch (its history's `seconds` column)."""
    return min(float(row["seconds"]) for row in history_rows(run_directory(work)))


def keeping_seconds(lines: list[tuple[float, str]]) -> float:
    """Seconds from the line that starts keeping to the line after the kept weights are saved, in a
    sitting's (time, line) output."""
    start = next(t for t, line in lines if STARTS["keep"][0] in line)
    return next(t for t, line in lines if WEIGHTS_KEPT in line) - start


def starts_phase(line: str, phase: str) -> bool:
    """Whether `line` starts `phase`; in training only an epoch before the last counts, so that a kill
    less than an epoch later still lands in training."""
    if phase != "train":
        return any(start in line for start in STARTS[phase])
    epoch = EPOCH_LINE.search(line)
    return epoch is not None and int(epoch.group(1)) < int(epoch.group(2))


def sitting(work: Path, preset: Path, phase: str, wait: float, rng: random.Random) -> tuple[bool, int, str]:
    """One study sitting, SIGKILLed up to `wait` seconds after the line that starts `phase`; (kill landed
    in `phase`, exit status, output)."""
    process, lines, killed_after = study(work, preset), [], None
    for line in process.stdout:
        lines.append(line)
        if killed_after is None and starts_phase(line, phase):
            time.sleep(rng.uniform(0, wait))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                killed_after = len(lines)
    landed = killed_after is not None and not any(
        marker in line for line in lines[killed_after:] for marker in LATER[phase]
    )
    return landed, process.wait(), "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    if args.workdir is not None and not args.workdir.is_dir():
        print(f"error: --workdir {args.workdir} is not a directory; create it, or leave --workdir out", file=sys.stderr)
        return 2
    if args.workdir is not None and any((args.workdir / name).exists() for name in ("reference", "killed")):
        print(f"error: --workdir {args.workdir} holds an earlier harness run; give an empty directory", file=sys.stderr)
        return 2
    if args.kills < 1:
        print(f"error: --kills {args.kills}: give at least one kill", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill-resume-"))
    preset = work / "killtest.yaml"
    preset.write_text(PRESET)
    started = time.perf_counter()
    reference, lines = study(work / "reference", preset), []
    for line in reference.stdout:
        lines.append((time.perf_counter(), line))
    if reference.wait() != 0:
        print("".join(line for _, line in lines))
        return 1
    duration = time.perf_counter() - started
    expected = outcome(work / "reference")
    waits = {**WAITS, "train": shortest_epoch(work / "reference") / 2}
    keeping = 1.2 * keeping_seconds(lines)  # up to a little past the weights' save
    rng = random.Random(args.seed)
    landed = {phase: 0 for phase in PHASES}
    compared, different, between, leftovers, keep_kills = 0, 0, 0, 0, 0
    killed = work / "killed"
    for trial in range(args.kills):
        phase = CYCLE[trial % len(CYCLE)]
        wait = waits[phase]
        if phase == "keep":
            wait, keep_kills = (keeping if keep_kills % 2 else wait), keep_kills + 1
        hit, code, output = sitting(killed, preset, phase, wait, rng)
        landed[phase] += hit
        if code not in (0, -signal.SIGKILL):
            print(output)
            return 1
        kept = kept_directory(killed)
        if phase == "keep" and code and (kept / "record.json").is_file() and not (kept / "weights.pt").is_file():
            between += 1  # killed after the record's copy, before the weights' save
        leftovers += phase == "keep" and code != 0 and any(kept.glob(".*.tmp"))
        if trial % len(CYCLE) == len(CYCLE) - 1 or trial == args.kills - 1:  # finish, compare, start afresh
            final = study(killed, preset)
            output = final.communicate()[0]
            if final.returncode != 0:
                print(output)
                return 1
            compared += 1
            found = outcome(killed)
            if found != expected:
                different += 1
                print(f"DIFFERENT after kill {trial + 1}:\n{output}")
            shutil.rmtree(killed)
    print(
        f"kills that landed: {sum(landed.values())} of {args.kills} "
        f"({', '.join(f'{n} in {phase}' for phase, n in landed.items())}; uninterrupted study "
        f"{duration:.1f} s incl. start-up); in keeping {between} between the record's copy and the weights' save, "
        f"{leftovers} leaving a temporary file in the kept folder; {compared} finished runs compared: "
        + (
            "records, histories, kept weights and kept copies identical"
            if not different
            else f"{different} DIFFERENT from the uninterrupted run"
        )
    )
    return 0 if not different else 1


if __name__ == "__main__":
    sys.exit(main())
