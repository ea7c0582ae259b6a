"""The report of a pre-registered gap pilot (params/canvas_gap_pilot.yaml): is a Performer behind
softmax on this task, by how much, how does it move with the training budget, and how many seeds
would the factorial need — by the rules fixed in the preset before its first run.

Per run the record holds test top-1 at its own budget (train.epochs) and at the shorter budgets
branched from it (`budgets`, rpevit/core/budgets.py). Gap = Performer − softmax (same seed, same APE) in
points: negative means softmax ahead. `python -m campaign gap-pilot <preset>` writes
reports/<preset>/README.md and pilot_gaps.{csv,md} from the kept records.
"""

from __future__ import annotations

import math

from rpevit.core.attention import linear_backends
from rpevit.core.stats import t_half_width
from rpevit.lab.params import load_params
from rpevit.lab.result import results
from rpevit.lab.revision import provenance_line
from rpevit.lab.schema import finished
from rpevit.lab.store import catalog, records
from rpevit.lab.tables import markdown_table, signed

from . import feature_draws
from .budget import runs_in_flight
from .budget_forecast import budget_sentences
from .gap_arithmetic import (
    budget_change_rows,
    budget_top1,
    gap_change_rows,
    gap_rows,
    percent,
    seeds_needed,
    trend_line,
)
from .orders import next_in_order
from .parking import history_so_far
from .pilot_answer import equal_time_line

GO_GAP = 1.5  # a Performer behind softmax by at least this many points at the longest budget: go on
DD_SD_FLOOR = 0.83  # points: the smallest SD of a difference of differences the seed count is planned on
# the pre-registered order of pilots (params/canvas_gap_pilot.yaml): what follows a NO-GO of each
NEXT_AFTER_NO_GO = {
    "canvas_gap_pilot": "the 56×56 canvas (params/canvas56_gap_pilot.yaml), then the FAVOR+ feature dial",
    "canvas56_gap_pilot": "the FAVOR+ feature-count dial on the 56×56 canvas: 16 features "
    "(params/canvas56_dial16.yaml), then 8",
    "canvas56_dial16": "FAVOR+ with 8 features on the 56×56 canvas (params/canvas56_dial8.yaml)",
}
TITLES = {"canvas40_long": "the longer-budget study on the 40×40 canvas"}  # a report's title beside "the gap pilot"
# what a NO-GO of a study outside that order leads to
AFTER_NO_GO_OUTSIDE = {"canvas40_long": "none: no Performer 1.5 behind at up to 64 epochs, the canvas answer"}
# every preset whose report `gap-pilot` writes: the order's pilots and the longer budget on the 40×40 canvas
GAP_PILOTS = ("canvas_gap_pilot", "canvas56_gap_pilot", "canvas56_dial16", "canvas56_dial8", "canvas40_long")
# a stricter GO where a preset says so: the upper end of the gap's 95 % interval must also be below this
GO_UPPER = {"canvas40_long": -0.5}
# presets whose stopping rule reads, once the budget ends them, only the seeds whose runs all finished
WHOLE_SEEDS = {"canvas40_long"}
# preset → (shorter, longest) budget in epochs of its pre-registered primary contrasts (primary_contrasts.py)
PRIMARY = {"canvas40_long": (32, 64)}


def _dialled(variant: str, model) -> str:
    """A FAVOR+ variant's name with its feature count where the preset sets one (the feature dial)."""
    if variant.startswith("favor+") and "favor" in model.options:
        return f"{variant} ({model.options_for('favor').num_features} features)"
    return variant


def decision(
    rows: list[dict], longest: int, complete: bool, preset: str = "canvas_gap_pilot", budget_ended: str = ""
) -> str:
    """The go/no-go line of the preset's rule, with the numbers it read (and, on NO-GO, the next pilot
    of the pre-registered order after this `preset`); `budget_ended` ("5 of 6") when the spent budget
    ended the pilot before every run finished: then the line is final, not interim."""
    at_end = at_longest(rows, longest)
    if not at_end:
        return f"**Go/no-go: not decided yet** — no Performer–softmax pair has finished {longest} epochs."
    worst = min(at_end, key=lambda r: r["mean gap"])
    gaps = "; ".join(
        f"{r['backend']} {signed(r['mean gap'])} ({r['seeds']} seed{'s' * (r['seeds'] != 1)})" for r in at_end
    )
    status = (
        ""
        if complete
        else f" (its budget is spent with {budget_ended} runs finished: no new run starts; the rule reads the "
        "finished pairs)"
        if budget_ended
        else " (interim: not every run has finished; the rule reads the finished pairs)"
    )
    rule = f"≥ {GO_GAP}" + (
        f" with the upper end of its 95 % interval below {signed(GO_UPPER[preset], 1)}" if preset in GO_UPPER else ""
    )
    if is_go(at_end, preset):
        return (
            f"**GO{status}**: {worst['backend']} is behind softmax by {-worst['mean gap']:.2f} points at {longest} "
            f"epochs ({rule} needed). Mean gaps with APE: {gaps}."
        )
    return (
        f"**NO-GO{status}**: no Performer is behind softmax by {rule} points at {longest} epochs. Mean gaps "
        f"with APE: {gaps}. {'Next' if complete or budget_ended else 'If it ends NO-GO, next'} by the "
        "pre-registered order: "
        + NEXT_AFTER_NO_GO.get(
            preset, AFTER_NO_GO_OUTSIDE.get(preset, "none left: no pilot opened a gap, and that is the answer")
        )
        + "."
    )


def at_longest(rows: list[dict], longest: int) -> list[dict]:
    """The gap rows at the longest budget with at least one finished pair."""
    return [r for r in rows if r["epochs"] == longest and r["seeds"] > 0]


def is_go(at_end: list[dict], preset: str = "") -> bool:
    """The pre-registered rule: a Performer's mean gap at the longest budget is ≤ −GO_GAP (and, for a preset in
    GO_UPPER, the upper end of its 95 % t-interval over seeds is below that bound: two seeds at least)."""
    upper = GO_UPPER.get(preset)

    def behind(row: dict) -> bool:
        if row["mean gap"] > -GO_GAP:
            return False
        return upper is None or (row["seeds"] > 1 and row["mean gap"] + t_half_width(row["SD"], row["seeds"]) < upper)

    return any(behind(r) for r in at_end)


def rule_verdict(at_end: list[dict], preset: str = "") -> str:
    """'GO' or 'NO-GO' by the preset's rule (is_go) on the gap rows at the longest budget; '' without any."""
    return "" if not at_end else "GO" if is_go(at_end, preset) else "NO-GO"


def next_pilot(preset: str, reports_root=None) -> str | None:
    """The pilot to train next by the pre-registered order (orders.next_in_order) once `preset` has ended
    NO-GO (final_verdict); None while it is open, on GO, or at the end of the order."""
    return next_in_order(preset) if final_verdict(preset, reports_root) == "NO-GO" else None


def final_verdict(preset: str, reports_root=None) -> str:
    """'GO' or 'NO-GO' once every run of the pilot has finished (or its spent budget ended it), by the
    pre-registered rule; '' while it is open or no pair has finished."""

    params = load_params(preset)
    return verdict_of(params, pilot_records(params, reports_root), reports_root)


def verdict_of(params, found: dict, reports_root=None) -> str:
    """final_verdict of a pilot whose records (pilot_records) are already read."""
    running = len(finished(results(found["own"]))) < len(catalog.grid(params))
    if running and not budget_ended(params, found, reports_root):
        return ""
    return rule_verdict(at_longest(pilot_gap_rows(params, found), params.train.epochs), params.name)


def budget_ended(params, found: dict, reports_root=None) -> str:
    """'k of N' when the epoch time of the pilot's finished runs alone has reached its stated budget before
    every run finished (no new run starts, budget.py) and no started run is still in flight, else '' (the
    reading pilot_records stored in `found["budget"]`)."""
    return found["budget"][0]


def budget_reading(params, found: dict, reports_root=None) -> tuple[str, int]:
    """(budget_ended, the started runs it waits for): ('k of N', 0) when the spent budget ended the pilot,
    ('', n) when it is spent but n started runs are still in flight (study finishes them: here, or parked
    by another checkout), ('', 0) otherwise. The time is read from finished runs only, so every machine
    with the kept records reads the same."""

    from . import budget as pilot_budget

    done, planned = len(finished(results(found["own"]))), len(catalog.grid(params))
    budget = pilot_budget.stated_budget(params.name)
    if done == planned or budget is None:
        return "", 0
    hours, _ = pilot_budget.training_hours(params, reports_root=reports_root, finished_only=True)
    if hours < budget:
        return "", 0
    started = found["started"]  # pilot_records read them: here or parked by another checkout
    return ("", len(started)) if started else (f"{done} of {planned}", 0)


def whole_seeds_sentence(found: dict) -> str:
    """Where the stopping rule left seeds out (_whole_seeds_only), which ones the analyses read and which not."""
    if "whole_seeds" not in found:
        return ""
    whole = found["whole_seeds"]
    left = sorted({seed for _, seed, _ in found["listed"]} - set(whole))
    read = f"seed{'s' * (len(whole) != 1)} {', '.join(map(str, whole))}" if whole else "no seed"
    out = (
        f"; the finished runs of seed{'s' * (len(left) != 1)} {', '.join(map(str, left))} are listed, not analysed"
        if left
        else ""
    )
    rule = " As pre-registered, with the budget spent the analyses read only the seeds whose runs all finished"
    return f"{rule}: {read}{out}."


def pilot_budgets(params) -> list[int]:
    """The pilot's budgets in epochs, shortest first: its cool-downs' and its longest run's."""
    return sorted({*params.train.budgets, params.train.epochs})


def pilot_gap_rows(params, found: dict) -> list[dict]:
    """The gap per Performer of the pilot and budget, from pilot_records' top-1."""
    return gap_rows(found["top1"], pilot_budgets(params), list(params.seeds), performers(params))


def performers(params) -> list[str]:
    """The pilot's own Performer backends (those it trains with APE)."""
    return [b for b in linear_backends() if f"{b}+ape" in params.variants]


def factorial_seeds(rows: list[dict], longest: int) -> str:
    """The factorial's seed count by the preset's rule (G/4 half-width, SD of a difference of differences)."""
    at_end = [r for r in rows if r["epochs"] == longest and r["seeds"] > 1]
    if not at_end:
        return "Seeds the factorial needs: not computable yet (it needs two seeds of a Performer–softmax pair)."
    gap = max(abs(r["mean gap"]) for r in at_end)
    sd = max(DD_SD_FLOOR, math.sqrt(2) * max(r["SD"] for r in at_end))
    n = seeds_needed(gap, sd)
    return (
        f"Seeds the factorial needs: G = {gap:.2f} points (the larger |mean gap| at {longest} epochs), SD of a "
        f"difference of differences {sd:.2f} (√2 × the larger per-seed SD of a gap, at least {DD_SD_FLOOR}) → "
        + (
            f"**{n} seeds** for a 95 % half-width ≤ G/4 = {gap / 4:.2f} points."
            if n
            else "more than 200 seeds: a gap this small cannot be split into fractions closed."
        )
    )


def pilot_records(params, reports_root=None) -> dict:
    """What a pilot's report reads: its own records, the reference's softmax+ape records a dial compares
    with (`read`, from `source`), the test top-1 per (variant, seed, budget) of the runs that did not
    collapse, and the names of those that did (one policy for every report: apart, never read at their
    early best epoch); the runs `started` and unfinished (here or parked) and their curves so far (`in_flight`);
    what the spent budget says (`budget`: budget_reading);
    for a preset in WHOLE_SEEDS that its budget ended, `top1` of its whole seeds only (_whole_seeds_only)."""
    from analysis.convergence import split_collapsed

    own = catalog.study_records(params, reports_root=reports_root)  # read through the module: tests stand in
    reference = load_params(params.reference) if params.reference else None
    read = ["softmax+ape"] if reference else []  # the runs a dial compares with, from its reference
    borrowed = [r for r in catalog.reference_records(params, reports_root=reports_root) if r.variant in read]
    own_kept, own_fell = split_collapsed(params, own, reports_root)
    borrowed_kept, borrowed_fell = split_collapsed(reference, borrowed, reports_root) if reference else ([], [])
    fell = {(r.variant, r.seed) for r in [*borrowed_fell, *own_fell]}
    histories = [
        (r.variant, r.seed, catalog.run_history(r.run))
        for r in finished(results([*borrowed, *own]))
        if r.run is not None
    ]
    started = runs_in_flight(params, reports_root=reports_root)
    found = {
        "own": own,
        "borrowed": borrowed,
        "histories": [(v, s, rows) for v, s, rows in histories if rows],
        "started": started,
        "in_flight": [(run.variant, run.seed, rows) for run in started if (rows := history_so_far(run))],
        "collapsed": fell,
        "read": read,
        "source": reference.name if reference else None,
        "top1": budget_top1([*borrowed_kept, *own_kept]),
        "fell": [f"{r.variant} seed {r.seed}" for r in [*borrowed_fell, *own_fell]],
    }
    found["budget"] = budget_reading(params, found, reports_root)  # read once: every sentence asks it
    return _whole_seeds_only(params, found, reports_root) if params.name in WHOLE_SEEDS else found


def _whole_seeds_only(params, found: dict, reports_root=None) -> dict:
    """`found` as its stopping rule reads it once the spent budget has ended the study (budget_ended): `top1`
    (what every analysis reads) only of the seeds whose runs all finished, named in `whole_seeds`; every
    finished run's top-1 stays in `listed` for the table of runs. Unchanged while the study is open."""
    if not budget_ended(params, found, reports_root):
        return found
    done = {(r.variant, r.seed) for r in finished(results(found["own"]))}
    whole = [s for s in params.seeds if all((v, s) in done for _, v, _ in catalog.grid(params))]
    top1 = {key: value for key, value in found["top1"].items() if key[1] in whole}
    return {**found, "top1": top1, "listed": found["top1"], "whole_seeds": whole}


def pilot_summary(preset: str, reports_root=None) -> dict:
    """Everything a pilot's report shows, computed from its records (write_report writes it, notebook
    35_gap_pilots shows it): the sentences (`intro`, `decision`, `trend`, `collapsed`, `factorial`,
    `equal_time`: accuracy at softmax's training time, pilot_answer), the tables (`runs`: top-1 per run and
    budget, `gaps`: the gap per budget, `change` and `gap_change`: budget sensitivity) and what they were
    read from (`params`, `found`: pilot_records)."""
    params = load_params(preset)
    found = pilot_records(params, reports_root)
    top1, read, fell = found["top1"], found["read"], found["fell"]
    longest = params.train.epochs
    budgets = pilot_budgets(params)
    seeds = list(params.seeds)
    variants = list(dict.fromkeys([*read, *(v for _, v, _ in catalog.grid(params))]))
    backends = performers(params)
    rows = pilot_gap_rows(params, found)
    finished_count, planned = len(finished(results(found["own"]))), len(catalog.grid(params))
    short = budgets[-2] if len(budgets) > 1 else longest
    borrowed_line = (
        f" The {', '.join(read)} runs it compares with are read from `{found['source']}`'s kept records "
        f"({len(found['borrowed'])} finished; the same run keys this preset would train)."
        if read
        else ""
    )
    ended = budget_ended(params, found, reports_root)
    return {
        "params": params,
        "found": found,
        "intro": f"{params.description}. Pre-registered in `params/{params.name}.yaml` before its first run: the "
        "task, the variants, seeds, recipe, budgets, the go/no-go rule and the seed rule. "
        f"{finished_count} of {planned} runs finished.{borrowed_line} "
        + budget_sentences(params, preset, finished_count == planned or bool(ended), reports_root=reports_root)
        + whole_seeds_sentence(found),
        "decision": decision(rows, longest, finished_count == planned, params.name, ended),
        "complete": finished_count == planned or bool(ended),  # no run left to train: every run, or the budget
        "trend": trend_line(top1, variants, seeds, short, longest, backends, tested=params.name in PRIMARY),
        "collapsed": (
            f"Collapsed (validation top-1 fell toward chance; reported apart, not in any gap): {', '.join(fell)}."
            if fell
            else ""
        ),
        "factorial": factorial_seeds(rows, longest),
        "equal_time": equal_time_line(params, top1, backends, reports_root or records.reports_root()),
        "runs": [
            {
                "variant": f"{v} (from {found['source']})" if v in read else _dialled(v, params.model),
                "seed": sd,
                **{f"top-1 at {b}": percent(found.get("listed", top1).get((v, sd, b))) for b in budgets},
            }
            for v in variants
            for sd in seeds
        ],
        "raw_gaps": rows,
        "gaps": [  # signed like every effect in the reports: −0.25, +0.42
            {**r, "mean gap": "—" if math.isnan(r["mean gap"]) else signed(r["mean gap"])} for r in rows
        ],
        "change": budget_change_rows(top1, variants, seeds, short, longest),
        "gap_change": gap_change_rows(top1, seeds, short, longest, backends),
    }


def write_report(preset: str, reports_root=None) -> list[str]:
    """reports/<preset>/README.md and pilot_gaps.{csv,md}; returns the README's lines."""
    from . import long_study  # it reads this module's gaps

    summary = pilot_summary(preset, reports_root)
    params, found = summary["params"], summary["found"]
    folder = (reports_root or records.reports_root()) / params.name
    records.write_csv(folder / "pilot_gaps.csv", summary["raw_gaps"])
    gaps, change, gap_change = summary["gaps"], summary["change"], summary["gap_change"]
    lines = [
        f"# {params.name}: {TITLES.get(params.name, 'the gap pilot')}",
        "",
        summary["intro"],
        *long_study.report_lines(summary, folder),
        "",
        summary["decision"],
        *(["", summary["trend"]] if summary["trend"] else []),
        *(["", summary["collapsed"]] if summary["collapsed"] else []),
        "",
        summary["factorial"],
        *(["", summary["equal_time"]] if summary["equal_time"] else []),
        "",
        provenance_line(finished(results(found["own"]))),
        "",
        "## Test top-1 per run and budget (%; best-validation weights of each budget)",
        "",
        markdown_table(summary["runs"], list(summary["runs"][0]), digits=2),
        "## Gap per budget (test top-1, Performer − softmax, points; negative: softmax ahead)",
        "",
        markdown_table(gaps, list(gaps[0]), digits=2),
        "## Budget sensitivity (per variant, paired by seed)",
        "",
        markdown_table(change, list(change[0]), digits=2),
        markdown_table(gap_change, list(gap_change[0]), digits=2),
        *(long_study.section(summary, folder) or [SENSITIVITY_NOTE]),
        *feature_draws.report_lines(folder),
        *long_study.retrained_lines(summary, folder.parent),
    ]
    if found["histories"]:
        lines += ["", *_curves(found, params, folder)]
    if executed := sorted(folder.glob("[0-9][0-9]_*.ipynb")):  # `python -m rpevit notebooks <pilot>` ran
        links = ", ".join(f"[{p.stem}]({p.name})" for p in executed)
        lines += ["", f"Executed notebooks in this folder (`python -m rpevit notebooks {params.name}`): {links}."]
    records.write_text(folder / "pilot_gaps.md", markdown_table(gaps, list(gaps[0]), digits=2))
    records.write_text(folder / "README.md", "\n".join(lines) + "\n")
    return lines


SENSITIVITY_NOTE = (
    "Convergence is read as budget sensitivity (no plateau rule): with two seeds these changes are "
    "descriptive; they say whether the gap opens or closes with more training."
)


def _curves(found: dict, params, folder) -> list[str]:
    """The finished runs' training curves (the 32-epoch runs; the cool-down branches are not drawn),
    mean over seeds with their range, collapsed runs apart, runs in flight dotted: pilot_curves.png and its
    README lines."""
    from analysis.plots import save_png

    save_png(curves_figure(found, params), folder / "pilot_curves.png")
    longest = params.train.epochs
    flying = [f"{variant} seed {seed} ({len(rows)} of {longest} epochs)" for variant, seed, rows in found["in_flight"]]
    lines = [
        "## Training curves (the longest budget's runs; warmup, stable, then the decay of its last quarter)",
        "",
        "![Training loss, validation loss and validation top-1 per epoch](pilot_curves.png)",
    ]
    if flying:
        lines += ["", f"Dotted, still training: {', '.join(flying)}: their epochs so far, read by no gap."]
    return lines


def curves_figure(found: dict, params):
    """The finished runs' training curves (pilot_records' histories; collapsed runs in a panel apart) and the
    epochs so far of its runs in flight (dotted, per seed)."""
    from analysis import plots

    title = f"{params.name}: the longest budget's runs"
    return plots.training_curves(found["histories"], title, collapsed=found["collapsed"], in_flight=found["in_flight"])
