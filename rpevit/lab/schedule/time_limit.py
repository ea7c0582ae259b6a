"""A study's time limit (`study --time-limit 2h30m`): start no run that is not expected to finish in
the time left, so a sitting of fixed length (a batch job's wall time, a lent machine) ends between
runs rather than inside one whose epochs since the last checkpoint would be lost.

A run's expected time (expected_seconds) is its epochs left — all, or those after the checkpoint it
resumes from — with 5 % for validating each epoch and three epochs more for testing, multi-resolution
evaluation and keeping, at its pace: the median seconds per training epoch of the finished runs of its
variant on its dataset (catalog.pace_records: the preset's own and, for a longer-budget check, its
study's), those at this process's torch threads where there are any. A variant with no finished run
yet takes the finished variants' paces scaled by its cost relative to theirs in the preset's side-by-side
speed benchmark (costs.train_costs; the median over the finished variants) or, without a benchmark
of it, the slowest variant's pace (cautious once the slow variants have run); a dataset with no
finished run gives nothing to go on, and the run starts.
"""

from __future__ import annotations

import re
import statistics
import time

import torch

from ...core.errors import UserError
from ..progress import minutes
from ..result import results
from ..schema import finished as finished_runs
from ..store import records
from ..store.run import Run

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}
VALIDATION_SHARE = 0.05  # an epoch's validation, as a share of its training time (not in the recorded pace)
CLOSING_EPOCHS = 3  # testing, multi-resolution evaluation and keeping, in epochs of training time


def parse_duration(text: str) -> float:
    """Seconds of a duration written as hours, minutes and seconds — `2h30m`, `90m`, `1.5h`, `45s`."""
    spaced = str(text).strip().lower().replace(" ", "")
    parts = _PART.findall(spaced)
    if not spaced or "".join(n + u for n, u in parts) != spaced or len({u for _, u in parts}) < len(parts):
        raise UserError(
            f"--time-limit: {text!r} is not a duration; write hours, minutes and seconds like 2h30m, 90m, 1.5h or 45s."
        )
    seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds <= 0:
        raise UserError(f"--time-limit: {text!r} is no time at all; give a positive duration such as 2h30m.")
    return seconds


class TimeLimit:
    """The time a study process may still start runs in: `seconds` from its creation (`clock`:
    time.monotonic, replaceable in tests)."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self.clock, self.end = clock, clock() + seconds

    def left(self) -> float:
        return self.end - self.clock()

    def refusal(self, run: Run, pace_records: list[dict], train: bool = True, costs: dict | None = None) -> str:
        """Why the run must not start in the time left ('' when it may): after the limit nothing
        starts; before it, a run to `train` starts when its expected time fits (or is unknown)."""
        left = self.left()
        if left <= 0:
            return "the time limit has passed; a later sitting does it"
        expected = expected_seconds(run, pace_records, costs) if train else None
        if expected is None or expected <= left:
            return ""
        return (
            f"expected to take {minutes(expected)}, {minutes(left)} left of the time limit; a later sitting trains it"
        )


def expected_seconds(run: Run, pace_records: list[dict], costs: dict | None = None) -> float | None:
    """The run's expected wall time here at the pace of `pace_records` (module docstring; `costs`:
    costs.train_costs), or None when its dataset has no finished run to go on."""
    pace = seconds_per_epoch(pace_records, run.dataset, run.variant, costs)
    if pace is None:
        return None
    epochs_left = run.train_config.epochs - epochs_done(run)
    return (epochs_left * (1 + VALIDATION_SHARE) + CLOSING_EPOCHS) * pace


def expected_total(runs, pace_records: list[dict], costs: dict | None = None) -> tuple[float, int]:
    """(seconds the `runs` are expected to take one after another — expected_seconds summed — and how
    many of them have no pace to go on and are not counted)."""
    seconds, unknown = 0.0, 0
    for run in runs:
        expected = expected_seconds(run, pace_records, costs)
        if expected is None:
            unknown += 1
        else:
            seconds += expected
    return seconds, unknown


def seconds_per_epoch(finished: list[dict], dataset: str, variant: str, costs: dict | None = None) -> float | None:
    """Median seconds per training epoch of the finished runs of `variant` on `dataset`, those at this
    process's torch threads where it has any; for a variant with none, the median over the finished
    variants v of pace(v) · costs[variant] / costs[v] when `costs` (seconds per image, side by side:
    costs.train_costs) has it and some of them, else the slowest variant's; None when the dataset has
    no finished run."""
    times: dict[str, dict[bool, list[float]]] = {}
    for r in finished_runs(results(finished)):  # a pace row without a status counts as finished
        if r.dataset == dataset and r.train_seconds_per_epoch:
            here = r.threads == torch.get_num_threads()
            times.setdefault(r.variant, {True: [], False: []})[here].append(float(r.train_seconds_per_epoch))
    medians = {v: statistics.median(t[True] or t[False]) for v, t in times.items()}
    if variant in medians:
        return medians[variant]
    costs = costs or {}
    scaled = [pace * costs[variant] / costs[v] for v, pace in medians.items() if v in costs and variant in costs]
    return statistics.median(scaled) if scaled else max(medians.values(), default=None)


def epochs_done(run: Run) -> int:
    """Epochs the run resumes after: those of the checkpoint training would read (checkpoint.pt, else
    checkpoint.prev.pt when that one is unreadable) if it was made with the run's settings, else 0.
    Read-only: a damaged checkpoint is left for the run's own repair."""
    for name in (records.CHECKPOINT, records.PREVIOUS_CHECKPOINT):
        path = run.dir / name
        if not path.is_file():
            continue
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # damaged: the run's settle step moves it aside and names it
            continue
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("epoch"), int):
            continue  # not a checkpoint: set aside like a damaged one
        return checkpoint["epoch"] if run.matches(checkpoint) else 0  # other settings: training starts afresh
    return 0
