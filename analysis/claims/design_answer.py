"""The pre-registered answer of a designed study in words, for the head of its report and the README's
Findings: the scope (data, model, budget, seeds, converged or not), the Performer–softmax gap of each
backend with each positional method, whether the relative encoding closes it (the difference of
differences), what it costs (the side-by-side speed benchmark) and what the study cannot decide —
generated from the claims rows of the design's contrasts (`evaluation.evaluate_claims`), never typed."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import numpy as np

from rpevit.core import stats
from rpevit.core.metrics import busy
from rpevit.core.variants import parse_variant
from rpevit.lab.result import results
from rpevit.lab.schedule import policy
from rpevit.lab.schema import finished
from rpevit.lab.tables import signed

from ..convergence import PLATEAU_RULE, converged
from .evaluation import family_size
from .narration import ahead, interval_reading, verdict_text
from .registry import ALPHA, CONTRADICTED, INCONCLUSIVE, NO_DATA, SUPPORTED, TOP1, design_source


def _convergence_sentence(convergence: list[dict], epochs: int, checked: bool = False) -> str:
    """Convergence as budget sensitivity: the longer-budget check (when the design names one) decides
    whether the contrasts move with more training; the plateau rule, which a cosine cool-down fails by
    design, is only described."""
    where = (
        "Convergence is read as budget sensitivity: whether the contrasts change when the primary variants "
        "train longer (the longer-budget check below)"
        if checked
        else f"This design names no longer-budget check, so every number of this answer holds at this {epochs}-epoch "
        "budget only"
    )
    if not convergence:
        return where + ". No run has a training history to judge its plateau by."
    met = sum(bool(r["plateau met"]) for r in convergence)
    return (
        f"{where}. The plateau rule ({PLATEAU_RULE}) is described, not a criterion — under a cosine cool-down the "
        f"last epochs gain by design: {met} of {len(convergence)} runs meet it."
    )


def _row_line(row: dict) -> str:
    """One contrast: its name, its signed effect (the header's sign) with interval, level and seeds, and
    its verdict with who is ahead (an inconclusive one: where its interval lies)."""
    if row["verdict"] == NO_DATA:
        return f"- {row['claim']}: no data ({row.get('reason') or 'not run yet'})."
    seeds = f"{row['seeds']} seed{'s' * (row['seeds'] != 1)}"
    effect, low, high = row["effect"], row.get("low", math.nan), row.get("high", math.nan)
    value = f"{signed(effect)} points" + (f" [{signed(low)}, {signed(high)}]" if math.isfinite(low) else "")
    level = f"{100 * row['confidence']:.0f} % interval, " if math.isfinite(low) else ""
    verdict = row["verdict"]
    if verdict == INCONCLUSIVE:
        return f"- {row['claim']}: {value} ({level}{seeds}) — **{verdict}**: {interval_reading(row)}."
    if verdict in (SUPPORTED, CONTRADICTED):
        side = ahead(row["comparison"], effect >= 0, row["measure"])
        if (
            row.get("kind") == "equal" and verdict == SUPPORTED
        ):  # equal within the margin: the sign is only the estimate's
            side = f"equal within ±{row['margin']:g} point{'s' * (row['margin'] != 1)}; the estimate has {side}"
        return f"- {row['claim']}: {value} ({level}{seeds}) — **{verdict}** ({side})."
    return f"- {row['claim']}: {value} ({seeds}) — {verdict_text(row)}."


def _paired_ratio(a: dict[int, float], b: dict[int, float], confidence: float) -> dict | None:
    """Ratio a/b of per-round times paired by round: exp of the mean log ratio with its Student-t
    interval over the rounds (the rounds interleave the variants, so a round's load hits both)."""
    rounds = sorted(a.keys() & b.keys())
    if len(rounds) < 2:
        return None
    logs = [math.log(a[r] / b[r]) for r in rounds]
    interval = stats.t_interval(logs, confidence)
    return {key: float(np.exp(interval[key])) for key in ("mean", "low", "high")} | {"rounds": len(rounds)}


def _cost_lines(params, speed: list[dict] | None) -> list[str]:
    """Per primary Performer variant: inference and training time per image as multiples of the softmax
    variant with the same positional methods, paired by benchmark round; no interval from a busy machine."""
    if not speed:
        return [
            f"- not measured: no side-by-side speed benchmark of `{params.name}` "
            f"(`python -m rpevit bench speed --params {params.name}`)."
        ]
    times: dict[str, dict[str, dict[int, float]]] = {}
    for r in speed:
        per = times.setdefault(parse_variant(r["variant"]).name, {"infer": {}, "train": {}})
        per["infer"][int(r["round"])] = r["ms_per_image_batched"]
        per["train"][int(r["round"])] = r["train_seconds_per_image"]
    loaded = any(busy(r) for r in speed)
    lines = []
    for variant in (parse_variant(v) for v in params.design.primary):
        if variant.backend == "softmax":
            continue
        reference = parse_variant("+".join(("softmax", *variant.positions))).name
        if variant.name not in times or reference not in times:
            lines.append(f"- `{variant.name}` vs `{reference}`: not both in the speed benchmark.")
            continue
        parts = []
        for key, what in (("infer", "inference"), ("train", "training")):
            ratio = _paired_ratio(times[variant.name][key], times[reference][key], 1 - ALPHA)
            if ratio is None:
                parts.append(f"{what}: fewer than 2 rounds, no ratio")
            elif loaded:
                parts.append(f"{what} {ratio['mean']:.2f}×")
            else:
                parts.append(f"{what} {ratio['mean']:.2f}× [{ratio['low']:.2f}, {ratio['high']:.2f}]")
        lines.append(f"- `{variant.name}` vs `{reference}`: " + ", ".join(parts) + " the time per image.")
    rounds = max(len(per["infer"]) for per in times.values())
    if loaded:
        lines.append(
            f"  (side-by-side speed benchmark, {rounds} rounds, but some were timed on a busy machine: these ratios "
            "measure the machine's load as much as the variants, so they carry no interval; run `python -m rpevit "
            f"bench speed --params {params.name}` on a quiet machine.)"
        )
    else:
        lines.append(
            f"  (side-by-side speed benchmark, {rounds} interleaved rounds; ratio paired by round: geometric mean with "
            f"its {100 * (1 - ALPHA):.0f} % t-interval; > 1: the Performer is slower. Measured on the benchmark's "
            "machine at this model's size — nothing here extrapolates to long sequences or GPUs.)"
        )
    return lines


def _short(rows: list[dict]) -> str:
    """One sentence: the verdict counts of the contrasts, then their estimates (gaps as a range)."""
    counts = [
        f"{sum(r['verdict'] == v for r in rows)} {v}"
        for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
        if any(r["verdict"] == v for r in rows)
    ]
    others = sum(r["verdict"] not in (SUPPORTED, CONTRADICTED, INCONCLUSIVE) for r in rows)
    counts += [f"{others} without a verdict yet"] if others else []
    text = f"**In short.** Of its {len(rows)} pre-registered contrasts: {', '.join(counts)}."
    gaps = [r["effect"] for r in rows if r["comparison"].c is None and math.isfinite(r.get("effect", math.nan))]
    if gaps:
        low, high = signed(min(gaps)), signed(max(gaps))
        text += f" The gap estimates (Performer − softmax) lie between {low} and {high} points"
    changes = [r for r in rows if r["comparison"].c is not None and math.isfinite(r.get("effect", math.nan))]
    if changes:
        text += (
            ("; " if gaps else " ")
            + "the differences of differences (positive: the Performer gains on softmax with the relative encoding): "
            + ", ".join(f"{r['claim']}: {signed(r['effect'])}" for r in changes)
        )
    return text + ("." if gaps or changes else "") + " Estimates only: the verdicts below are what the data decide."


def _fraction_lines(contrasts: list[dict], confidence: float = 0.95) -> list[str]:
    """Per difference of differences (a − b) − (c − d) whose gap with APE (c − d) is a contrast of the
    design too: the fraction of that gap the relative encoding closes, DD / (d − c) per seed pair, with
    Fieller's interval over the seeds both rows share (stats.fieller_ratio: unbounded, and said so, when
    the gap itself is not distinguishable from zero). 1 closes it, 0 leaves it, < 0 widens it."""
    gaps = {(r["comparison"].a, r["comparison"].b): r for r in contrasts if not r["comparison"].differences}
    lines = []
    for row in contrasts:
        comparison = row["comparison"]
        plain = comparison.differences and comparison.weight == 1.0  # a weighted one tests a share, not the fraction
        gap = gaps.get((comparison.c, comparison.d)) if plain else None
        if gap is None or "per seed" not in row or "per seed" not in gap:
            continue
        seeds = sorted(row["per seed"].keys() & gap["per seed"].keys())
        if len(seeds) < 2:
            lines.append(f"- {row['claim']}: not estimable yet ({len(seeds)} seed with both contrasts).")
            continue
        closed = [row["per seed"][s] for s in seeds]
        found = stats.fieller_ratio(closed, [-gap["per seed"][s] for s in seeds], confidence)
        level = f"{100 * confidence:.0f} %"
        if found["bounded"]:
            lines.append(
                f"- {row['claim']}: {found['ratio']:.2f} of the gap [{found['low']:.2f}, {found['high']:.2f}] "
                f"({level} Fieller interval, {len(seeds)} seeds)."
            )
        else:
            lines.append(
                f"- {row['claim']}: not estimable — the gap it would close ({gap['claim']}: "
                f"{signed(statistics.fmean(gap['per seed'][s] for s in seeds))} points) is not "
                f"distinguishable from zero at these {len(seeds)} seeds, so Fieller's {level} set for the fraction "
                "is unbounded."
            )
    return lines


def _open_line(rows: list[dict]) -> str | None:
    """The contrasts the data leave open (inconclusive, undecided or without data), or None."""
    open_rows = [r for r in rows if r["verdict"] not in (SUPPORTED, CONTRADICTED)]
    if not open_rows:
        return None
    names = "; ".join(f"{r['claim']} ({r['verdict']})" for r in open_rows)
    why = []
    if any(r["verdict"] == INCONCLUSIVE for r in open_rows):
        why.append(
            "an inconclusive one is not significant after the Holm correction either way at these seeds (its "
            "reading above says where its interval lies)"
        )
    if any(r["verdict"] != INCONCLUSIVE for r in open_rows):
        why.append("one undecided or without data has no verdict yet")
    return f"- {len(open_rows)} of its {len(rows)} pre-registered contrasts: {names} — " + "; ".join(why) + "."


def _family_line(rows: list[dict]) -> str | None:
    """Why claims with few seeds stay open however clear their interval: per Holm family of the claims
    table (`rows`), the t statistic each seed count must exceed to pass its first step
    (stats.holm_first_step_t), or None when no inconclusive accuracy claim has two seeds or more."""
    parts = []
    for family in sorted({r["family"] for r in rows}):
        members = [r for r in rows if r["family"] == family]
        tests = 2 * family_size(members)[1]
        open_rows = [
            r for r in members if r["verdict"] == INCONCLUSIVE and r.get("measure") == TOP1 and r["seeds"] >= 2
        ]
        if not tests or not open_rows:
            continue
        per_seeds = sorted(Counter(r["seeds"] for r in open_rows).items())
        needs = ", ".join(
            f"{n} seeds: t > {stats.holm_first_step_t(tests, n, ALPHA):.1f} ({k} inconclusive)" for n, k in per_seeds
        )
        parts.append(f"{family} ({tests} one-sided p-values, first step p < {ALPHA / tests:.4f}): {needs}")
    if not parts:
        return None
    return (
        "- claims the seeds cannot decide at their family's size: Holm's first step asks p < α/m of the m one-sided "
        "p-values of a family (later steps relax only after a rejection), which a t-test over n seeds reaches only "
        "when the effect lies more standard errors beyond the bound it tests than — "
        + "; ".join(parts)
        + ". A claim with few seeds can therefore have its whole interval on one side of its bound (its reading "
        "says so) and still be inconclusive."
    )


def _dataset_lines(params, dataset: str, contrasts: list[dict], found: list, convergence: list[dict]) -> list[str]:
    """The answer's part for one dataset: its scope, the verdict counts, the gaps, whether the relative
    encoding closes them and what fraction of each gap it closes."""
    model = params.model
    equal = (
        f"*equal* within ±{params.design.margin_points:g} point is **supported** when both one-sided tests "
        f"(TOST) stay below α = {ALPHA:g} after Holm's correction within the pre-registered contrasts (one family), "
        "**contradicted** when the test beyond the margin does"
    )
    current = [r for r in results(found) if r.dataset == dataset]
    sizes = sorted({r.num_params for r in finished(current) if r.num_params})
    size = "" if not sizes else f" ({sizes[0]:,}" + (f"–{sizes[-1]:,}" if len(sizes) > 1 else "") + " parameters)"
    runs = [c for c in convergence if c.get("dataset") == dataset]
    lines = [
        f"**Scope.** `{dataset}` with the recipe of `params/{params.name}.yaml` (fixed before its first run): a "
        f"ViT of patch {model.patch_size}, dim {model.dim}, depth {model.depth}, {model.heads} heads{size}, "
        f"{params.train.epochs} epochs; {policy.seeds_text(params, current)}. "
        + _convergence_sentence(runs, params.train.epochs, bool(params.design.plateau_check)),
        "",
        _short(contrasts),
        "",
        "**Is there a Performer–softmax gap?** Test top-1, Performer − softmax in points (positive: the "
        f"Performer ahead), paired by seed; {equal}. Intervals unadjusted:",
        *(_row_line(r) for r in contrasts if r["comparison"].c is None),
        "",
        "**Does the relative encoding close it?** The difference of differences "
        "(b+rope − softmax+rope) − (b+ape − softmax+ape), positive = the Performer gains on softmax with it; "
        "**supported** when its one-sided test stays below α after the same Holm correction:",
        *(_row_line(r) for r in contrasts if r["comparison"].c is not None),
        "",
    ]
    fractions = _fraction_lines(contrasts)
    if fractions:
        lines += [
            "**What fraction of the gap does it close?** The difference of differences over the gap with APE "
            "it would close, (b+rope − softmax+rope − b+ape + softmax+ape) / (softmax+ape − b+ape), per seed "
            "pair: 1 closes the gap, 0 leaves it, below 0 widens it; an interval only where the gap is real:",
            *fractions,
            "",
        ]
    return lines


def design_answer_text(
    params,
    rows: list[dict],
    found: list[dict],
    convergence: list[dict],
    speed: list[dict] | None = None,
    check_text: str | None = None,
) -> str:
    """Markdown: the pre-registered answer of a designed preset, from its contrasts' claims rows (`rows`:
    evaluation.evaluate_claims over the complete primary seeds), its current records (`found`, diverged
    ones included: the stopping rule's count), the runs' plateau (convergence.finished_convergence), the
    side-by-side speed benchmark (costs.read_speed) and, for a design with a longer-budget check, its
    reading (`check_text`: convergence.budget_check's text), given after the contrasts."""
    if not params.design.active:
        return f"`{params.name}` has no pre-registered design."
    source = design_source(params)
    lines = []
    contrasts_of = {d: [r for r in rows if r["source"] == source and r["dataset"] == d] for d in params.datasets}
    for dataset, contrasts in contrasts_of.items():
        if len(params.datasets) > 1:
            lines += [f"#### {dataset}", ""]
        lines += _dataset_lines(params, dataset, contrasts, found, convergence)
    if check_text:
        lines += [check_text, ""]
    lines += [
        "**What it costs.** Time per image of each primary Performer variant as a multiple of softmax's with "
        "the same positional methods:",
        *_cost_lines(params, speed),
        "",
        "**What this study cannot decide.**",
    ]
    for dataset, contrasts in contrasts_of.items():
        line = _open_line(contrasts)
        if line:
            lines.append(line if len(params.datasets) == 1 else line.replace("- ", f"- {dataset}: ", 1))
    family = _family_line(rows)
    if family:
        lines.append(family)
    check = params.design.plateau_check
    if check:  # budget sensitivity: how far the check's few paired seeds can tell a change
        lines.append(
            f"- a change of the contrasts with longer training smaller than its longer-budget check `{check}` can "
            "detect at its paired seeds (its test above gives each change's interval)."
        )
    elif not converged(convergence):
        lines.append("- whether the gaps hold with longer training: no longer-budget check, and runs still improving.")
    count = len(params.datasets)
    lines.append(
        f"- anything beyond {count} dataset{'s' * (count != 1)} ({', '.join(params.datasets)}), this model size and "
        "the benchmark's machine: small images (few tokens), one small ViT, timings of that machine."
    )
    return "\n".join(lines)
