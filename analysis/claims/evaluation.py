"""Verdicts: each claim tested on run records, one row per (claim, dataset), one Holm family per source.

The contrast is computed per training seed — the seed is the unit of replication
(rpevit.core.stats.contrast_test): for top-1, a − b in points (or (a − b) − (c − d)), at the trained
resolution or at another one evaluated without fine-tuning, with the image-level standard error
(test-set sampling alone) beside the seed-level one. Time claims read the side-by-side speed
benchmark only (analysis.claims.speed). One symmetric rule decides every tested row: Holm's correction
over all one-sided p-values of its family (stats.family_verdicts) — the claims of one source: a
study's pre-registered contrasts decide its answer among themselves, each seed's replication claims
form their own family; one correction over the whole table is kept as a sensitivity reading
(`verdict_whole_table`). Rows outside the families carry a verdict that says why (UNDECIDED,
NO_DATA, NOT_TESTABLE) and the reason.
"""

from __future__ import annotations

import math

import numpy as np

from rpevit.core import stats
from rpevit.core.variants import parse_variant
from rpevit.lab.result import Result, results
from rpevit.lab.schema import finished

from .registry import (
    ALPHA,
    CLAIMS,
    NO_DATA,
    NOT_PLANNED,
    NOT_TESTABLE,
    TOP1,
    UNDECIDED,
    Claim,
)
from .speed import BUSY, time_contrast

NOT_RUN = "not run yet"
RULED_OUT = "not trained: the design's stopping rule or budget ruled its runs out"
NO_BENCHMARK = "no side-by-side speed benchmark of this preset (`python -m rpevit bench speed`)"
ONE_SEED = "one seed"


def correctness(record, resolution: int | None = None, mode: str = "extrapolate") -> np.ndarray | None:
    """Per-image test correctness (bool) of a run (a Result or record), at its trained resolution or an
    evaluated one."""
    result = Result.of(record)
    text = result.test_correct
    if resolution is not None:
        rows = [
            r
            for r in result.resolution_eval or []
            if r["resolution"] == resolution and r["mode"] == mode and "correct" in r
        ]
        text = rows[0]["correct"] if rows else None
    return None if text is None else np.frombuffer(text.encode(), dtype=np.uint8) == ord("1")


def _by_seed(found: list[Result], dataset: str, variant: str) -> dict[int, Result]:
    return {r.seed: r for r in finished(found) if r.dataset == dataset and r.variant == variant}


def _interval_text(tested: dict, units: str) -> str:
    return f"t over {units}; {100 * tested['confidence']:.0f}% interval"


def _accuracy_row(claim: Claim, runs: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    comparison = claim.comparison
    per_variant = {
        v: [correctness(runs[v][s], comparison.resolution, comparison.mode) for s in seeds] for v in comparison.terms
    }
    if any(c is None for cs in per_variant.values() for c in cs):
        return {"verdict": NO_DATA, "reason": f"no per-image results at {comparison.resolution} px"}
    contrast = sum(coefficient * 100.0 * np.stack(per_variant[v]) for v, coefficient in comparison.terms.items())
    tested = stats.contrast_test(contrast.mean(axis=1), claim.kind, claim.margin, ALPHA)
    row = {
        "mean a": 100 * np.stack(per_variant[comparison.a]).mean(),
        "mean b": 100 * np.stack(per_variant[comparison.b]).mean(),
        **tested,
        "se (images)": stats.image_standard_error(contrast),
        "test": _interval_text(tested, f"{len(seeds)} seeds"),
        "per seed": dict(zip(seeds, contrast.mean(axis=1).tolist(), strict=True)),  # the values tested, points
    }
    if len(seeds) < 2:
        row.update(verdict=UNDECIDED, reason=ONE_SEED)
    return row


def _time_row(claim: Claim, speed: list[dict] | None) -> dict:
    found = time_contrast(claim, speed) if speed else None
    if found is None:
        return {"verdict": NO_DATA, "reason": NO_BENCHMARK if not speed else "variants not in the speed benchmark"}
    tested = stats.contrast_test(found.values, claim.kind, claim.margin, ALPHA)
    row = {
        "mean a": found.mean_a,
        "mean b": found.mean_b,
        **tested,
        "rounds": len(found.values),
        "test": _interval_text(tested, f"{len(found.values)} benchmark rounds"),
    }
    if found.busy:  # a timing taken beside other work measures the load: no verdict, no p-values from it
        row.update(verdict=UNDECIDED, reason=BUSY, p_support=math.nan, p_contradict=math.nan)
    return row


def _planned_seeds(planned) -> dict[tuple[str, str], set[int]]:
    """(dataset, canonical variant) → the seeds of `planned` ((dataset, variant, seed) triples)."""
    seeds: dict[tuple[str, str], set[int]] = {}
    for dataset, variant, seed in planned:
        seeds.setdefault((dataset, parse_variant(variant).name), set()).add(seed)
    return seeds


def _pending(row: dict, seeds: dict[tuple[str, str], set[int]]) -> bool:
    """Whether an accuracy row without p-values yet (not run, or one seed) will be tested: the planned
    runs give it ≥ 2 seeds common to its variants."""
    if row.get("measure") != TOP1 or row.get("reason") not in (NOT_RUN, ONE_SEED):
        return False
    common = [seeds.get((row["dataset"], parse_variant(v).name), set()) for v in row["comparison"].variants]
    return len(set.intersection(*common)) >= 2


def evaluate_claims(
    records: list[dict], claims=CLAIMS, datasets=None, speed: list[dict] | None = None, planned=None
) -> list[dict]:
    """The claims table: one row per (claim, dataset) with its Comparison, the means of a and b, the
    effect with its interval and seed- and image-level standard errors, both one-sided p-values raw and
    Holm-adjusted within the row's family (its source: a design's pre-registered contrasts are one
    family, each seed's claims another), the verdict, `verdict_whole_table` (the sensitivity reading
    of one Holm correction over every tested row) and, for rows without a verdict, the reason. Time claims
    read `speed` (the per-round rows of `python -m rpevit bench speed`, costs.read_speed).

    `planned` ((dataset, variant, seed) triples the preset has finished or will still train:
    wanted.planned_runs) fixes the Holm family before every run has finished: a row the remaining runs will test
    (not run yet, or one seed so far, of ≥ 2 planned seeds) joins the family with both p-values at 1 —
    it rejects nothing and takes its share of α — so an interim table is corrected for the same m as the
    finished study's. Without `planned`, the family is the rows tested now."""
    records = results(records)
    datasets = datasets or sorted({r.dataset for r in records})
    seeds_of = None if planned is None else _planned_seeds(planned)
    rows = []
    for claim in claims:
        for dataset in datasets:
            runs = {v: _by_seed(records, dataset, v) for v in claim.comparison.terms}
            seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
            row = {
                "source": claim.source,
                "claim": claim.statement,
                "dataset": dataset,
                "comparison": claim.comparison,
                "kind": claim.kind,
                "margin": claim.margin,
                "measure": claim.measure,
                "seeds": len(seeds),
            }
            if claim.untestable:
                row.update(verdict=NOT_TESTABLE, reason=claim.untestable)
            elif claim.measure != TOP1:
                row.update(_time_row(claim, speed), seeds=0)
            elif seeds:
                row.update(_accuracy_row(claim, runs, seeds))
            else:
                row.update(verdict=NO_DATA, reason=NOT_RUN)
            rows.append(row)
    for row in rows:
        row["pending"] = seeds_of is not None and _pending(row, seeds_of)
    tested = [row for row in rows if "verdict" not in row or row["pending"]]
    families: dict[str, list[dict]] = {}
    for row in tested:
        families.setdefault(row["source"].tag, []).append(row)
    for tag, family in families.items():
        for row, decided in zip(family, stats.family_verdicts(_tests(family), ALPHA), strict=True):
            row.update(family=tag, family_size=len(family))
            if not row["pending"]:
                row.update(decided, reason="")
    # sensitivity reading: the verdict one Holm correction over the whole table would give
    for row, decided in zip(tested, stats.family_verdicts(_tests(tested), ALPHA), strict=True):
        if not row["pending"]:
            row["verdict_whole_table"] = decided["verdict"]
    for row in rows:
        row.setdefault("p_support_holm", math.nan)
        row.setdefault("p_contradict_holm", math.nan)
        row.setdefault("family", row["source"].tag)
    return rows


def _tests(rows: list[dict]) -> list[dict]:
    """The p-values a family's Holm correction takes: a pending row's at 1 (it rejects nothing)."""
    return [{"p_support": 1.0, "p_contradict": 1.0} if row["pending"] else row for row in rows]


def mark_unplanned(rows: list[dict], variants, planned=None) -> list[dict]:
    """The claims rows, where a row has no data because the preset does not train its variants
    (`variants`: the preset's), or — given `planned` (wanted.planned_runs) — because its design has ruled
    their runs out (stopping rule or budget), saying so."""
    preset = {parse_variant(v).name for v in variants}
    seeds_of = None if planned is None else _planned_seeds(planned)

    def reason(row: dict) -> str:
        names = {parse_variant(v).name for v in row["comparison"].variants}
        if not names <= preset:
            return NOT_PLANNED
        if seeds_of is not None and any(not seeds_of.get((row["dataset"], v)) for v in names):
            return RULED_OUT
        return NOT_RUN

    return [
        {**row, "reason": reason(row)} if row["verdict"] == NO_DATA and row["reason"] == NOT_RUN else row
        for row in rows
    ]


def family_size(rows: list[dict]) -> tuple[int, int]:
    """(rows tested now, rows of the Holm families) of (part of) a claims table from evaluate_claims: the
    families also hold the rows the preset's remaining runs will test (`pending`, from `planned`)."""
    tested = sum(1 for row in rows if not math.isnan(row["p_support_holm"]))
    return tested, tested + sum(1 for row in rows if row["pending"])


def missing_runs(records: list[dict], expected) -> list[dict]:
    """Per (dataset, variant) of the grid `expected` ((dataset, variant, seed) triples, e.g.
    catalog.grid(params)): the seeds without a finished run, as a tuple."""
    done = {r.place for r in finished(results(records))}
    missing: dict[tuple[str, str], list[int]] = {}
    for dataset, variant, seed in expected:
        if (dataset, variant, seed) not in done:
            missing.setdefault((dataset, variant), []).append(seed)
    return [{"dataset": d, "variant": v, "seeds": tuple(seeds)} for (d, v), seeds in missing.items()]
