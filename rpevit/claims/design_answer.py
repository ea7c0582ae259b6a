"""The pre-registered answer of a designed study in words, for the head of its report and the README's
Findings: the scope (data, model, budget, seeds, converged or not), the Performer–softmax gap of each
backend with each positional method, whether the relative encoding closes it (the difference of
differences), what it costs (the side-by-side speed benchmark) and what the study cannot decide —
generated from the claims rows of the design's contrasts (`evaluation.evaluate_claims`), never typed."""

from __future__ import annotations

import math

from .. import design as design_rules
from .. import stats
from ..convergence import CONVERGED_SHARE, PLATEAU_FRACTION, PLATEAU_TOLERANCE
from ..variants import parse_variant
from .narration import effect_words, interval_reading
from .registry import ALPHA, CONTRADICTED, INCONCLUSIVE, NO_DATA, SUPPORTED, design_source


def _seeds_text(params, analysed: list[dict], dataset: str) -> str:
    """How many complete primary seeds were analysed, and why the primary grid stopped there."""
    current = [r for r in analysed if r.get("dataset") == dataset]
    progress = design_rules.primary_progress(params, current)
    rule = params.design.stopping
    seeds = ", ".join(str(s) for s in progress.usable[: progress.complete])
    done = f"{progress.complete} complete primary seed{'s' * (progress.complete != 1)} ({seeds})"
    if progress.complete < rule.min_seeds:
        return f"{done}, fewer than the stopping rule's first {rule.min_seeds}: the study is still training"
    target = f"every 95 % half-width ≤ {rule.half_width:g} points, or {rule.max_seeds} seeds"
    if progress.needed == progress.complete:
        reached = "reached" if progress.complete < rule.max_seeds else "ended at its maximum"
        return f"{done}; the stopping rule ({target}) {reached}"
    nxt = progress.usable[progress.complete] if progress.complete < len(progress.usable) else None
    verdict, why = (
        design_rules.decide(params, (dataset, params.design.primary[0], nxt), current)
        if nxt is not None
        else ("skip", "no seed left")
    )
    if verdict == "skip":
        return f"{done}; the stopping rule ({target}) wanted more, but {why}"
    return f"{done} so far; the stopping rule ({target}) wants more: the study is still training"


def _convergence_text(convergence: list[dict], epochs: int) -> tuple[str, bool]:
    """(a sentence on the runs' plateau, whether the study counts as converged)."""
    if not convergence:
        return "no finished run to judge convergence by", False
    met = sum(bool(r["plateau met"]) for r in convergence)
    converged = met >= CONVERGED_SHARE * len(convergence)
    state = "converged by its own rule" if converged else "**not converged** by its own rule"
    return (
        f"{state} ({met} of {len(convergence)} runs reach a plateau: best validation top-1 gaining "
        f"< {PLATEAU_TOLERANCE:g} points over the last {PLATEAU_FRACTION:.0%} of epochs), so every number below "
        f"holds at this {epochs}-epoch budget",
        converged,
    )


def _row_line(row: dict) -> str:
    """One contrast: its name, the effect in words with its interval and level, and its verdict."""
    level = f"{100 * row['confidence']:.0f} %" if math.isfinite(row.get("confidence", math.nan)) else ""
    seeds = f"{row['seeds']} seed{'s' * (row['seeds'] != 1)}"
    if row["verdict"] == NO_DATA:
        return f"- {row['claim']}: no data ({row.get('reason') or 'not run yet'})."
    words = effect_words(row)
    verdict = row["verdict"]
    why = interval_reading(row) if verdict == INCONCLUSIVE else ""
    return f"- {row['claim']}: {words} ({level} interval, {seeds}) — **{verdict}**" + (f": {why}." if why else ".")


def _cost_lines(params, speed: list[dict] | None) -> list[str]:
    """Per primary Performer variant: inference time and training time per image as multiples of the
    softmax variant with the same positional methods (ratio of geometric means over the benchmark's
    rounds, 95 % Welch interval on log times: stats.time_ratio)."""
    if not speed:
        return [
            f"- not measured: no side-by-side speed benchmark of `{params.name}` "
            f"(`python -m rpevit bench speed --params {params.name}`)."
        ]
    times: dict[str, dict[str, list[float]]] = {}
    for r in speed:
        name = parse_variant(r["variant"]).name
        times.setdefault(name, {"infer": [], "train": []})
        times[name]["infer"].append(r["ms_per_image_batched"])
        times[name]["train"].append(r["train_seconds_per_image"])
    lines = []
    for variant in (parse_variant(v) for v in params.design.primary):
        if variant.backend == "softmax":
            continue
        reference = parse_variant("+".join(("softmax", *variant.positions))).name
        if variant.name not in times or reference not in times:
            lines.append(f"- `{variant.name}`: not in the speed benchmark.")
            continue
        parts = []
        for key, what in (("infer", "inference"), ("train", "training")):
            ratio = stats.time_ratio(times[variant.name][key], times[reference][key])
            parts.append(f"{what} {ratio['ratio']:.2f}× [{ratio['low']:.2f}, {ratio['high']:.2f}]")
        lines.append(f"- `{variant.name}` vs `{reference}`: " + ", ".join(parts) + " the time per image.")
    rounds = min(len(t["infer"]) for t in times.values())
    lines.append(
        f"  (side-by-side speed benchmark, {rounds} interleaved rounds, ratio of geometric means with its 95 % "
        "interval; > 1: the Performer is slower. Measured on the benchmark's machine at this model's size — "
        "nothing here extrapolates to long sequences or GPUs.)"
    )
    return lines


def design_answer_text(
    params, rows: list[dict], analysed: list[dict], convergence: list[dict], speed: list[dict] | None = None
) -> str:
    """Markdown: the pre-registered answer of a designed preset, from its contrasts' claims rows (`rows`:
    evaluation.evaluate_claims over the complete primary seeds `analysed`), the runs' plateau
    (convergence.finished_convergence) and the side-by-side speed benchmark (speed.read_speed)."""
    if not params.design.active:
        return f"`{params.name}` has no pre-registered design."
    source = design_source(params)
    mine = [r for r in rows if r["source"] == source]
    model = params.model
    lines = []
    for dataset in params.datasets:
        contrasts = [r for r in mine if r["dataset"] == dataset]
        sizes = next((r.get("num_params") for r in analysed if r.get("dataset") == dataset), None)
        runs = [c for c in convergence if c["dataset"] == dataset]
        plateau, converged = _convergence_text(runs, params.train.epochs)
        lines += [
            f"**Scope.** `{dataset}` with the recipe of `params/{params.name}.yaml` (fixed before its first run): a "
            f"ViT of patch {model.patch_size}, dim {model.dim}, depth {model.depth}, {model.heads} heads"
            + (f" ({sizes:,} parameters)" if sizes else "")
            + f", {params.train.epochs} epochs; {_seeds_text(params, analysed, dataset)}. The study is {plateau}.",
            "",
            "**Is there a Performer–softmax gap?** Test top-1, Performer − softmax in points (positive: the "
            f"Performer ahead), paired by seed; *equal* within ±{params.design.margin_points:g} point when the 90 % "
            "interval lies inside the margin (two one-sided tests), one Holm correction over the whole claims table "
            f"at α = {ALPHA:g}:",
            *(_row_line(r) for r in contrasts if r["comparison"].c is None),
            "",
            "**Does the relative encoding close it?** The difference of differences "
            "(b+rope − softmax+rope) − (b+ape − softmax+ape): positive = the Performer gains on softmax with it:",
            *(_row_line(r) for r in contrasts if r["comparison"].c is not None),
            "",
            "**What it costs.** Time per image of each primary Performer variant as a multiple of softmax's with "
            "the same positional methods:",
            *_cost_lines(params, speed),
            "",
            "**What this study cannot decide.**",
        ]
        open_rows = [r for r in contrasts if r["verdict"] not in (SUPPORTED, CONTRADICTED)]
        if open_rows:
            lines.append(
                f"- {len(open_rows)} of its {len(contrasts)} pre-registered contrasts: "
                + "; ".join(f"{r['claim']} ({r['verdict']})" for r in open_rows)
                + " — at these seeds none is significant after the Holm correction, or it has no data (the reading "
                "beside each row above says where its interval lies)."
            )
        if not converged:
            check = params.design.plateau_check
            lines.append(
                "- whether the gaps hold at convergence: its runs are still improving"
                + (f" (its longer-budget check `{check}` measures whether the gaps move)." if check else ".")
            )
        lines.append(
            f"- anything beyond {', '.join(params.datasets)}, this model size and the benchmark's machine: one "
            "dataset of small images (few tokens), one small ViT, CPU timings."
        )
    return "\n".join(lines)
