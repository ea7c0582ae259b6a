"""A study's time limit (`study --time-limit 2h30m`): start no run that is not expected to finish in
the time left, so a sitting of fixed length (a batch job's wall time, a lent machine) ends between
runs rather than inside one whose epochs since the last checkpoint would be lost.

A run's expected time is its epochs left (all, or those after the checkpoint it resumes from) plus
one for testing and keeping, times the median seconds per training epoch of the preset's finished
runs of that variant and dataset at this process's torch threads (else at any threads); a variant
with no finished run yet takes the slowest variant's median (a cautious guess). With no finished run
at all there is nothing to go on, and the run starts.
"""

from __future__ import annotations

import re
import statistics
import time

import torch

from . import records
from .errors import UserError
from .progress import minutes
from .run import Run

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}


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

    def expected_seconds(self, run: Run, finished: list[dict]) -> float | None:
        return expected_seconds(run, finished)

    def refusal(self, run: Run, finished: list[dict]) -> str:
        """Why the run must not start in the time left ('' when it may)."""
        expected, left = self.expected_seconds(run, finished), self.left()
        if left > 0 and (expected is None or expected <= left):
            return ""
        guess = "" if expected is None else f"expected to take {minutes(expected)}, "
        return f"{guess}{minutes(max(left, 0))} left of the time limit; a later sitting trains it"


def expected_seconds(run: Run, finished: list[dict]) -> float | None:
    """The run's expected wall time here (module docstring) at the pace of the `finished` records, or
    None with no finished run to go on."""
    pace = seconds_per_epoch(finished, run.dataset, run.variant)
    if pace is None:
        return None
    return (run.train_config.epochs - epochs_done(run) + 1) * pace


def seconds_per_epoch(finished: list[dict], dataset: str, variant: str) -> float | None:
    """Median seconds per training epoch of the finished runs of `variant` on `dataset` at this
    process's torch threads (else any threads); for a variant with none, the slowest variant's
    median on that dataset; None when the dataset has no finished run."""
    done = [r for r in finished if r.get("dataset") == dataset and r.get("train_seconds_per_epoch")]
    same_threads = [r for r in done if r.get("threads") == torch.get_num_threads()]
    done = same_threads or done
    by_variant: dict[str, list[float]] = {}
    for r in done:
        by_variant.setdefault(r["variant"], []).append(float(r["train_seconds_per_epoch"]))
    medians = {v: statistics.median(times) for v, times in by_variant.items()}
    if variant in medians:
        return medians[variant]
    return max(medians.values(), default=None)


def epochs_done(run: Run) -> int:
    """Epochs of the run already in its checkpoint here (made with its settings), else 0. Read-only:
    a damaged checkpoint counts as none and is left for the run's own repair."""
    for name in (records.CHECKPOINT, records.PREVIOUS_CHECKPOINT):
        path = run.dir / name
        if not path.is_file():
            continue
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # damaged: the run's settle step moves it aside and names it
            continue
        if isinstance(checkpoint, dict) and run.matches(checkpoint):
            return int(checkpoint.get("epoch", 0))
    return 0
