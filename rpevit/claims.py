"""The seeds' published claims, each tested on our run records, with an interval and a verdict.

A claim compares variant `a` with variant `b` on one dataset by one measure:
- "top1" — per-image test correctness, paired on the same seeds and the same test images
  (stats.paired_difference: paired bootstrap over seeds × images, exact McNemar with one seed),
  optionally at another input resolution without fine-tuning (evaluate step; mode extrapolate or
  interpolate); the effect is a − b in points of top-1;
- "ms_per_image_batched" — inference time per image, paired by seed: the effect is 100·(a/b − 1) in
  %, with a Student-t interval over seeds (scipy.stats.ttest_1samp for its p-value); timings taken
  on a busy machine are flagged.
Kinds (stats.verdict): greater, less, equal (equivalence within a margin, TOST), at_least
(non-inferiority within a margin). Margins are fixed here, before any result: ±1 point of top-1
and ±20 % of inference time. Holm's correction runs over the whole table (α = 0.05).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from . import stats
from .metrics import busy

MARGIN_POINTS = 1.0
MARGIN_TIME_PCT = 20.0
ALPHA = 0.05


@dataclass(frozen=True)
class Claim:
    """One published claim as a comparison of two variants."""

    source: str
    statement: str
    kind: str  # stats.CLAIM_KINDS
    a: str
    b: str
    measure: str = "top1"  # or "ms_per_image_batched"
    resolution: int | None = None  # test resolution (px) for a multi-resolution claim
    mode: str = "extrapolate"

    @property
    def margin(self) -> float | None:
        if self.kind not in ("equal", "at_least"):
            return None
        return MARGIN_POINTS if self.measure == "top1" else MARGIN_TIME_PCT


S000, S001, S002 = "seed 000, Table 3", "seed 001, Tables 1–2", "seed 002, §Goal"
S003 = "seeds 003/004 (RoPE-ViT §4.1; 2D ALiBi)"
CLAIMS = [
    Claim(S001, "plain FAVOR+ is below softmax", "less", "favor+ape", "softmax+ape"),
    Claim(S001, "adding RoPE to FAVOR+ narrows the gap to softmax", "greater", "favor+rope_mixed+ape", "favor+ape"),
    Claim(S001, "adding STRING to FAVOR+ narrows the gap to softmax", "greater", "favor+string_circulant+ape",
          "favor+ape"),
    Claim(S001, "adding a gate to FAVOR+ narrows the gap to softmax", "greater", "favor+gate_string+ape", "favor+ape"),
    Claim(S001, "plain Performer-ReLU matches softmax", "equal", "relu+ape", "softmax+ape"),
    Claim(S001, "ReLU + a positional method is at or above softmax", "at_least", "relu+rope_mixed+ape",
          "softmax+ape"),
    Claim(S001, "inference time is about equal across variants (49–65 tokens): FAVOR+", "equal", "favor+ape",
          "softmax+ape", measure="ms_per_image_batched"),
    Claim(S001, "inference time is about equal across variants (49–65 tokens): ReLU", "equal", "relu+ape",
          "softmax+ape", measure="ms_per_image_batched"),
    *(Claim(S002, f"{method} closes the {backend}–softmax gap", "equal", f"{backend}+{method}", f"softmax+{method}")
      for method in ("krpe", "string_circulant", "rope_mixed") for backend in ("favor", "relu")),
    Claim(S000, "APE beats RoPE-Axial on small images (ViT)", "greater", "softmax+ape", "softmax+rope_axial"),
    Claim(S000, "APE beats RoPE-Mixed on small images (ViT)", "greater", "softmax+ape", "softmax+rope_mixed"),
    Claim(S000, "APE beats RoPE-Axial on small images (Performer)", "greater", "favor+ape", "favor+rope_axial"),
    Claim(S000, "APE beats RoPE-Mixed on small images (Performer)", "greater", "favor+ape", "favor+rope_mixed"),
    Claim(S000, "RoPE + APE falls between them: below APE", "less", "softmax+rope_mixed+ape", "softmax+ape"),
    Claim(S000, "RoPE + APE falls between them: above RoPE", "greater", "softmax+rope_mixed+ape",
          "softmax+rope_mixed"),
    *(Claim(S003, f"at {size} px: RoPE-Mixed ≥ RoPE-Axial", "at_least", "softmax+rope_mixed", "softmax+rope_axial",
            resolution=size) for size in (36, 44)),
    *(Claim(S003, f"at {size} px: RoPE-Axial ≥ APE", "at_least", "softmax+rope_axial", "softmax+ape",
            resolution=size) for size in (36, 44)),
    *(Claim(S003, f"at {size} px: 2D ALiBi extrapolates best (vs RoPE-Mixed)", "greater", "softmax+alibi2d",
            "softmax+rope_mixed", resolution=size) for size in (36, 44)),
]


def correctness(record: dict, resolution: int | None = None, mode: str = "extrapolate") -> np.ndarray | None:
    """Per-image test correctness (bool) of a run, at its trained resolution or an evaluated one."""
    text = record.get("test_correct")
    if resolution is not None:
        rows = [r for r in record.get("resolution_eval", [])
                if r["resolution"] == resolution and r["mode"] == mode and "correct" in r]
        text = rows[0]["correct"] if rows else None
    return None if text is None else np.frombuffer(text.encode(), dtype=np.uint8) == ord("1")


def _by_seed(records: list[dict], dataset: str, variant: str) -> dict[int, dict]:
    return {r["seed"]: r for r in records
            if r["dataset"] == dataset and r["variant"] == variant and r.get("status") == "finished"}


def _accuracy_row(claim: Claim, a: dict, b: dict, seeds: list[int]) -> dict:
    matrices = [[correctness(runs[s], claim.resolution, claim.mode) for s in seeds] for runs in (a, b)]
    if any(m is None for ms in matrices for m in ms):
        return {"note": "no per-image results at this resolution"}
    correct_a, correct_b = (np.stack(ms) for ms in matrices)
    tested = stats.paired_difference(correct_a, correct_b)
    row = {"a": 100 * correct_a.mean(), "b": 100 * correct_b.mean(), "effect": tested["effect"],
           "p": tested["p_value"], "test": tested["test"], "low": tested["low"], "high": tested["high"]}
    if claim.margin is not None:  # equivalence / non-inferiority: the (1 − 2α) interval
        tost = stats.paired_equivalence(correct_a, correct_b, claim.margin, alpha=ALPHA)
        row.update(low=tost["low"], high=tost["high"], test=tested["test"] + f"; {100 * (1 - 2 * ALPHA):.0f}% interval")
    return row


def _time_row(claim: Claim, a: dict, b: dict, seeds: list[int]) -> dict:
    ta = np.array([a[s][claim.measure] for s in seeds])
    tb = np.array([b[s][claim.measure] for s in seeds])
    relative = 100 * (ta / tb - 1)
    confidence = 1 - 2 * ALPHA if claim.margin is not None else 1 - ALPHA
    interval = stats.t_interval(relative, confidence)
    p = float(scipy_stats.ttest_1samp(relative, 0.0).pvalue) if len(seeds) > 1 else math.nan
    flagged = [s for s in seeds if busy(a[s]) or busy(b[s])]
    return {"a": float(ta.mean()), "b": float(tb.mean()), "effect": float(relative.mean()), "p": p,
            "test": f"t over seeds; {100 * confidence:.0f}% interval", "low": interval["low"],
            "high": interval["high"],
            "note": f"timings of seeds {flagged} taken on a busy machine" if flagged else ""}


def evaluate_claims(records: list[dict], claims=CLAIMS, datasets=None) -> list[dict]:
    """The claims table: one row per (claim, dataset) with both variants' means, the effect and its
    interval, the raw and Holm-adjusted p-values and the verdict."""
    datasets = datasets or sorted({r["dataset"] for r in records})
    rows = []
    for claim in claims:
        for dataset in datasets:
            a, b = _by_seed(records, dataset, claim.a), _by_seed(records, dataset, claim.b)
            seeds = sorted(a.keys() & b.keys())
            row = {"source": claim.source, "claim": claim.statement, "dataset": dataset,
                   "comparison": f"{claim.a} vs {claim.b}" + (f" @ {claim.resolution}px {claim.mode}"
                                                              if claim.resolution else ""),
                   "kind": claim.kind, "margin": claim.margin, "seeds": len(seeds),
                   "unit": "points" if claim.measure == "top1" else "% time"}
            if seeds:
                row.update((_accuracy_row if claim.measure == "top1" else _time_row)(claim, a, b, seeds))
            else:
                row["note"] = "not run yet"
            rows.append(row)
    testable = [i for i, row in enumerate(rows) if not math.isnan(row.get("p", math.nan))]
    adjusted = stats.holm([rows[i]["p"] for i in testable])
    for i, p in zip(testable, adjusted):
        rows[i]["p_holm"] = p
    for row in rows:
        row.setdefault("p_holm", math.nan)
        row["verdict"] = stats.verdict(row["kind"], row.get("effect", math.nan), row.get("low", math.nan),
                                       row.get("high", math.nan), row["p_holm"], ALPHA, row["margin"]) \
            if "effect" in row else stats.INCONCLUSIVE + " (no data)"
    return rows
