"""What the longer-budget study's report (params/canvas40_long.yaml) adds to a gap pilot's: its one line —
runs finished, the go/no-go by the pre-registered rule so far, each Performer's gap at the longest budget
with its 95 % t-interval, FAVOR+ under fresh random features where measured (feature_draws) — which the
README quotes in its `long` block; its primary contrasts (primary_contrasts); each Performer's gap per
budget and seed drawn beside the pilot's it goes on from; each seed pair read image by image at the longest
budget (exact McNemar, descriptive); and that pilot's runs it trained again from the same seed and recipe,
side by side. `python -m campaign gap-pilot canvas40_long` writes it all."""

from __future__ import annotations

import math
import statistics

from analysis.claims.evaluation import correctness
from rpevit.core.stats import image_standard_error, mcnemar_exact
from rpevit.lab.params import load_params
from rpevit.lab.result import results
from rpevit.lab.schema import finished
from rpevit.lab.store.catalog import grid
from rpevit.lab.tables import markdown_table, signed

from . import feature_draws, gap_arithmetic, gap_pilot, primary_contrasts, readme_blocks

QUOTED = ("canvas40_long",)  # studies outside the pilot orders whose line the README quotes


def _gap(row: dict) -> str:
    """'favor −1.80 [−2.40, −1.20] (4 seeds)' or 'favor −0.07 (1 seed)'."""
    backend = primary_contrasts.backend_of(row)
    interval = "" if math.isnan(row["low"]) else f" [{signed(row['low'])}, {signed(row['high'])}]"
    return f"{backend} {signed(row['mean'])}{interval} ({row['seeds']} seed{'s' * (row['seeds'] != 1)})"


def one_line(summary: dict, folder=None) -> str:
    """The study's line from its report's summary (gap_pilot.pilot_summary): runs finished, the go/no-go by
    the pre-registered rule ("so far" while runs are left), each Performer's gap at the longest budget."""
    params, found = summary["params"], summary["found"]
    longest, planned = params.train.epochs, len(grid(params))
    done = len(finished(results(found["own"])))
    at_end = gap_pilot.at_longest(summary["raw_gaps"], longest)
    verdict = gap_pilot.rule_verdict(at_end, params.name) or "not decided"
    rows = primary_contrasts.summary_rows(summary)
    gaps = [_gap(r) for r in rows if r["kind"] == "gap" and r["seeds"]]
    waiting = [primary_contrasts.backend_of(r) for r in rows if r["kind"] == "gap" and not r["seeds"]]
    return (
        f"`{params.name}`, {done} of {planned} runs: "
        f"**{verdict}{'' if summary['complete'] else ' so far'}** — gap to softmax at {longest} epochs: "
        + "; ".join([*gaps, *([f"{', '.join(waiting)}: no finished pair yet"] if waiting else [])])
        + (f"; {pooled}" if (pooled := primary_contrasts.pooled_clause(rows)) else "")
        + (f"; {drawn}" if folder is not None and (drawn := feature_draws.short_clause(folder)) else "")
        + "."
    )


FIGURE = "pilot_gaps.png"
PILOT_OF = {"canvas40_long": "canvas_gap_pilot"}  # the pilot a longer study goes on from: drawn beside it


def _series(params, top1: dict) -> list[dict]:
    """The figure's lines of one study: per Performer with a finished pair, its per-seed gaps per budget."""
    budgets, seeds = gap_pilot.pilot_budgets(params), list(params.seeds)
    return [
        {"pilot": params.name, "backend": b, "gaps": gaps}
        for b in gap_pilot.performers(params)
        if any((gaps := {e: gap_arithmetic.seed_gaps(top1, seeds, e, b) for e in budgets}).values())
    ]


def pilot_top1(summary: dict, reports_root=None) -> tuple | None:
    """(params, test top-1 per (variant, seed, budget)) of the pilot the study goes on from (PILOT_OF), read
    from its kept records once per summary (kept in it under "pilot"); None for a study without one."""
    name = summary["params"].name
    if name not in PILOT_OF:
        return None
    if "pilot" not in summary:
        pilot = load_params(PILOT_OF[name])
        summary["pilot"] = pilot, gap_pilot.pilot_records(pilot, reports_root)["top1"]
    return summary["pilot"]


def gaps_figure(summary: dict, reports_root=None):
    """Each Performer's gap per budget and seed (dots) and their mean (a line), beside the pilot the study goes on
    from (pilot_top1); None before any pair has finished."""
    from analysis.plots import pilot_gaps_figure

    params = summary["params"]
    series = _series(params, summary["found"]["top1"])
    if not series:
        return None
    if pilot := pilot_top1(summary, reports_root):
        series += _series(*pilot)
    title = f"{params.name}: Performer − softmax per budget (negative: softmax ahead)"
    return pilot_gaps_figure(series, gap_pilot.GO_GAP, title)


def section(summary: dict, folder) -> list[str]:
    """After the budget-sensitivity tables of a study with pre-registered primary contrasts: those contrasts
    (primary_contrasts.section), each seed pair image by image and the gaps figure (reports/<study>/FIGURE);
    [] for any other study."""
    from analysis.plots import save_png

    lines = primary_contrasts.section(summary)
    lines += image_lines(summary) if lines else []
    figure = gaps_figure(summary, folder.parent) if lines else None
    if figure is None:
        return lines
    save_png(figure, folder / FIGURE)
    return lines + ["", f"![Each Performer's gap per budget: seeds as dots, their mean as a line]({FIGURE})"]


def image_pairs(summary: dict) -> list[dict]:
    """Per Performer and seed with both runs finished at the longest budget: the test images only the Performer
    got right and only softmax got right, the pair's gap, its exact McNemar p (stats.mcnemar_exact) and its
    standard error from the test images alone (stats.image_standard_error)."""
    params = summary["params"]
    done = {(r.variant, r.seed): r for r in finished(results(summary["found"].get("own", []))) if r.test_correct}
    rows = []
    for backend in gap_pilot.performers(params):
        for seed in summary["found"].get("whole_seeds", params.seeds):  # the stopping rule's seeds, once it ended
            if not {(f"{backend}+ape", seed), ("softmax+ape", seed)} <= done.keys():
                continue
            mine, theirs = correctness(done[(f"{backend}+ape", seed)]), correctness(done[("softmax+ape", seed)])
            test = mcnemar_exact(mine, theirs)
            rows.append(
                {
                    "pair": f"{backend} − softmax",
                    "seed": seed,
                    "gap": 100 * (test["a_only"] - test["b_only"]) / len(mine),
                    "only the Performer right": test["a_only"],
                    "only softmax right": test["b_only"],
                    "McNemar p": test["p_value"],
                    "image SE": image_standard_error(100.0 * (mine.astype(float) - theirs.astype(float))),
                }
            )
    return rows


def image_lines(summary: dict) -> list[str]:
    """The report's image-by-image reading of each seed pair at the longest budget (image_pairs); [] before any."""
    if not (rows := image_pairs(summary)):
        return []
    shown = [
        {
            **r,
            "gap": signed(r["gap"]),
            "McNemar p": f"{r['McNemar p']:.2g}",
            "image SE": f"{r['image SE']:.2f}",
        }
        for r in rows
    ]
    return [
        "",
        f"## Each seed pair image by image ({summary['params'].train.epochs} epochs; descriptive)",
        "",
        "The test images one run of a pair got right and the other got wrong; exact McNemar p (two-sided) and the "
        "gap's standard error from the test images alone. They say whether one pair's gap exceeds the test set's "
        "sampling noise, not whether a Performer is behind: that reads the seeds (the contrasts above), as an "
        "image-level test leaves out how far the gap moves from seed to seed.",
        "",
        markdown_table(shown, list(shown[0])).rstrip("\n"),
    ]


def retrained_lines(summary: dict, reports_root=None) -> list[str]:
    """`retrained` for a study that goes on from a pilot ([] for any other)."""
    if not (pilot := pilot_top1(summary, reports_root)):
        return []
    params, top1 = pilot
    return retrained(summary["found"]["top1"], top1, params)


def retrained(top1: dict, pilot_top1: dict, pilot_params) -> list[str]:
    """The runs this study trained again from the pilot's seed and recipe (a budget both have: the same stable
    phase and cool-down), side by side: how far retraining the same seed in another sitting moves a run."""
    pilot = pilot_params.name
    rows = [
        {"variant": v, "seed": seed, "epochs": e, pilot: pilot_top1[(v, seed, e)], "here": top1[(v, seed, e)]}
        for v, seed, e in sorted(top1.keys() & pilot_top1.keys())
    ]
    if not rows:
        return []
    moved = [r["here"] - r[pilot] for r in rows]
    shown = [
        {**r, pilot: f"{r[pilot]:.2f}", "here": f"{r['here']:.2f}", "here − pilot": signed(d)}
        for r, d in zip(rows, moved)
    ]
    return [
        "",
        "## The pilot's runs trained again (same seed and recipe, another sitting)",
        "",
        f"The seeds both train repeat `{pilot}`'s runs up to its {pilot_params.train.epochs} epochs (the same stable "
        "phase, the same cool-downs), "
        "trained again in other sittings, from other code revisions and possibly on another CPU (the pilot's "
        f"records do not name theirs). Over the {len(rows)} runs both have, this study's test top-1 minus the "
        f"pilot's is {signed(min(moved))} to {signed(max(moved))} points (median |difference| "
        f"{statistics.median(map(abs, moved)):.2f}): how far retraining the same seed moves one run, beside "
        "which a seed pair's gap is read.",
        "",
        markdown_table(shown, list(shown[0]), digits=2),
    ]


def report_lines(summary: dict, folder) -> list[str]:
    """The report's `**In one line**` (after its intro) for a study the README quotes; [] for any other."""
    return ["", readme_blocks.ONE_LINE + one_line(summary, folder)] if summary["params"].name in QUOTED else []


def sync_readme(readme, report) -> bool:
    """Put the study report's `**In one line**` into the long block of `readme` (the README's or
    docs/results.md's); True if it changed."""
    said = [line for line in report.read_text().splitlines() if line.startswith(readme_blocks.ONE_LINE)]
    return readme_blocks.fill(
        readme, "long", "".join(f"- {line.removeprefix(readme_blocks.ONE_LINE)}\n" for line in said)
    )
