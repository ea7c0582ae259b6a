"""Speed claims, from benchmarks measured side by side, never from per-run training timings.

- seed 001's time claims (inference ms/image about equal) read the per-round table of
  `python -m rpevit bench speed --params <preset> --csv reports/bench/cpu_speed_<preset>.csv`
  (rpevit.lab.bench.throughput.variant_speeds): per round 100·(a/b − 1), a Student-t over rounds (evaluation);
- seed 000 §5.3.3 ("Performers are faster than softmax only from ~256 tokens", a patch sweep on
  32×32 images) reads a timing sweep (rpevit.lab.bench.throughput.patch_sweep, its `inference_batch_seconds`):
  per size the Performer's time as a multiple of softmax's (a ratio of geometric means, > 1: slower)
  with a Welch interval (stats.time_ratio), Holm over the sweep.
A benchmark taken on a busy machine (rpevit.core.metrics.busy) gives no verdict: "undecided: busy machine".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rpevit.core import stats
from rpevit.core.metrics import busy

from .registry import ALPHA, CONTRADICTED, INCONCLUSIVE, S000_SPEED, SUPPORTED, UNDECIDED, Claim

BUSY = "busy machine"
CROSSOVER_TOKENS = 256
TIME_X = "time × softmax"  # a Performer's time per batch as a multiple of softmax's (> 1: slower), the one time unit


@dataclass(frozen=True)
class TimeContrast:
    """A time claim's per-round contrast 100·(a/b − 1) from the speed benchmark, with the mean times."""

    values: np.ndarray
    mean_a: float
    mean_b: float
    busy: bool  # some round was timed on a busy machine


def time_contrast(claim: Claim, speed: list[dict]) -> TimeContrast | None:
    """The claim's contrast from the speed benchmark's rounds; None if it lacks either variant."""
    comparison = claim.comparison
    times: dict[str, dict[int, float]] = {}
    for row in speed:
        times.setdefault(row["variant"], {})[int(row["round"])] = float(row[claim.measure])
    if comparison.a not in times or comparison.b not in times:
        return None
    rounds = sorted(times[comparison.a].keys() & times[comparison.b].keys())
    ta = np.array([times[comparison.a][r] for r in rounds])
    tb = np.array([times[comparison.b][r] for r in rounds])
    return TimeContrast(100 * (ta / tb - 1), float(ta.mean()), float(tb.mean()), any(busy(r) for r in speed))


def time_ratios(sweep: list[dict], baseline: str = "softmax", confidence: float = 1 - ALPHA) -> list[dict]:
    """Per Performer backend and token count: its inference time per batch as a multiple of `baseline`'s
    ("time ×" = Performer / softmax, > 1: slower; stats.time_ratio on the timed batches), with the
    interval, the Holm-adjusted p over the sweep and the reading: faster, slower or undecided."""
    times = {(r["backend"], r["tokens"]): r["inference_batch_seconds"] for r in sweep}
    rows = []
    for (backend, tokens), performer in times.items():
        if backend == baseline or (baseline, tokens) not in times:
            continue
        ratio = stats.time_ratio(performer, times[(baseline, tokens)], confidence)
        rows.append(
            {
                "backend": backend,
                "tokens": tokens,
                TIME_X: ratio["ratio"],
                "low": ratio["low"],
                "high": ratio["high"],
                "p": ratio["p"],
                "timed batches": min(ratio["n_a"], ratio["n_b"]),
            }
        )
    for row, adjusted in zip(rows, stats.holm([r["p"] for r in rows])):
        significant = adjusted < ALPHA
        row["p (Holm)"] = adjusted
        row["reading"] = "faster" if significant and row[TIME_X] < 1 else "slower" if significant else "undecided"
    return rows


def _crossover_verdict(below: list[dict], above: list[dict], tokens: int) -> tuple[str, str]:
    early = [r["tokens"] for r in below if r["reading"] == "faster"]
    late = [r["tokens"] for r in above if r["reading"] == "slower"]
    if not below or not above:
        return INCONCLUSIVE, f"no measured size {'below' if not below else 'from'} {tokens}"
    if early:
        return CONTRADICTED, f"faster already at {', '.join(map(str, early))} tokens"
    if late:
        return CONTRADICTED, f"still slower at {', '.join(map(str, late))} tokens"
    if all(r["reading"] == "faster" for r in above):
        return SUPPORTED, ""
    return INCONCLUSIVE, f"not significantly faster at every size from {tokens} tokens"


def crossover_rows(speedup_rows: list[dict], tokens: int = CROSSOVER_TOKENS, busy_machine: bool = False) -> list[dict]:
    """Seed 000's claim per Performer backend: supported when the Performer is faster at every measured
    size ≥ `tokens` and at none below; contradicted when it is already faster below `tokens` or still
    slower at or above it; inconclusive otherwise. `measured from` is the smallest size from which it is
    faster at every larger size. A sweep timed on a busy machine is undecided (its timings measure the
    load as much as the backends)."""
    rows = []
    for backend in dict.fromkeys(r["backend"] for r in speedup_rows):
        mine = sorted((r for r in speedup_rows if r["backend"] == backend), key=lambda r: r["tokens"])
        below = [r for r in mine if r["tokens"] < tokens]
        verdict, reason = _crossover_verdict(below, mine[len(below) :], tokens)
        if busy_machine:
            verdict, reason = UNDECIDED, BUSY
        measured = None
        for r in reversed(mine):
            if r["reading"] != "faster":
                break
            measured = r["tokens"]
        at = [r[TIME_X] for r in mine if r["tokens"] == tokens]
        rows.append(
            {
                "source": S000_SPEED,
                "backend": backend,
                "claim": f"Performers faster than softmax only from ~{tokens} tokens ({backend})",
                "tokens": (mine[0]["tokens"], mine[-1]["tokens"]),
                "measured from (tokens)": measured,
                "effect": at[0] if at else float("nan"),
                "verdict": verdict,
                "reason": reason,
            }
        )
    return rows
