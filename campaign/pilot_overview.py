"""The gap pilots of the pre-registered order side by side (params/canvas_gap_pilot.yaml, then each NO-GO's
next pilot): per pilot its task, how far it is, its go/no-go and each Performer's gap at the longest
budget with a 95 % t-interval over seeds. While no pilot opens a gap this is the project's answer on
tasks where position matters; the README quotes it. `python -m campaign gap-pilot --overview` writes
reports/gap_pilots.md from the kept records.
"""

from __future__ import annotations

import math
from pathlib import Path

from rpevit.core.data import dataset_info
from rpevit.core.errors import UserError
from rpevit.core.stats import t_half_width
from rpevit.lab.store import records
from rpevit.lab.tables import markdown_table, signed

from . import feature_draws, gap_arithmetic, gap_pilot, long_study, pilot_answer, readme_blocks
from .orders import GAP_ORDER

FIRST_PILOT = GAP_ORDER[0]
OVERVIEW = "gap_pilots.md"
FIGURE = "gap_pilots.png"
TREND = "Across the pilots"  # how the overview's paragraph of seed-pair counts starts (the README leaves it out)
LONGER = "**Trained longer**"  # how its paragraph quoting each longer study starts (the README quotes those itself)


def pilot_order() -> list[str]:
    """The gap pilots in their pre-registered order (orders.GAP_ORDER)."""
    return list(GAP_ORDER)


def standing_pilot(reports_root=None) -> str | None:
    """The pilot the order stands at (the one to train now): the first whose final verdict is not NO-GO;
    None after a GO (the factorial is pre-registered next) or when every pilot ended NO-GO."""
    for preset in pilot_order():
        verdict = gap_pilot.final_verdict(preset, reports_root)
        if verdict != "NO-GO":
            return None if verdict == "GO" else preset
    return None


def _bounds(row: dict) -> tuple[float, float] | None:
    """A gap row's 95 % t-interval over seeds (mean ± t·SD/√n); None with fewer than two seeds."""
    if row["seeds"] < 2:
        return None
    half = t_half_width(row["SD"], row["seeds"])
    return row["mean gap"] - half, row["mean gap"] + half


def gap_interval(row: dict) -> str:
    """A gap row's mean with its 95 % t-interval over seeds (mean ± t·SD/√n), its seeds and a reading:
    'softmax ahead' or 'Performer ahead' when the interval excludes 0, else 'inconclusive'."""
    n, mean = row["seeds"], row["mean gap"]
    if n == 0:
        return "—"
    if n == 1:
        return f"{signed(mean)} (1 seed, no interval)"
    low, high = _bounds(row)
    reading = "softmax ahead" if high < 0 else "Performer ahead" if low > 0 else "inconclusive"
    return f"{signed(mean)} [{signed(low)}, {signed(high)}] ({n} seeds, {reading})"


def favor_features(params) -> int:
    """FAVOR+'s random-feature count in a preset (its default for the head size where the preset sets none)."""
    from rpevit.core.attention.features import default_favor_features

    features = params.model.options_for("favor").num_features
    return features or default_favor_features(params.model.dim // params.model.heads)


def _task(params) -> str:
    """The pilot's task in words: canvas, tokens, FAVOR+'s feature count."""
    from rpevit.core.data import dataset_info

    size, patch = dataset_info(params.datasets[0]).image_size, params.model.patch_size
    return f"{size}×{size}, {(size // patch) ** 2 + 1} tokens, FAVOR+ m = {favor_features(params)}"


def overview_row(preset: str, reports_root=None, before: str | None = None) -> tuple[dict, str, dict]:
    """One pilot's line: task, runs finished, go/no-go and the gap of each Performer at its longest budget
    (`before`: the pilot whose finished NO-GO it waits for, if that has not come); its final verdict
    (gap_pilot.final_verdict); and what the answer reads of it (`readings`) — all from one read of its records."""
    from rpevit.lab.params import load_params
    from rpevit.lab.result import results
    from rpevit.lab.schema import finished
    from rpevit.lab.store.catalog import grid

    params = load_params(preset)
    found = gap_pilot.pilot_records(params, reports_root)
    done, planned = len(finished(results(found["own"]))), len(grid(params))
    longest = params.train.epochs
    at_end = {r["backend"]: r for r in gap_pilot.pilot_gap_rows(params, found) if r["epochs"] == longest}
    decided = [r for r in at_end.values() if r["seeds"] > 0]
    if not decided:
        verdict = f"waits for `{before}`'s NO-GO" if before and not done else "no pair finished yet"
    else:
        ended, waiting = found["budget"]  # gap_pilot.budget_reading
        verdict = gap_pilot.rule_verdict(decided, preset) + _standing(done == planned, ended, waiting)
    flying = len(found["started"])  # started, unfinished: here or parked by another checkout
    runs = f"{done} of {planned}" + (f", {flying} in flight" if flying else "")
    row = {"pilot": f"`{preset}`", "task": _task(params), "runs": runs, "go/no-go": verdict}
    for backend in gap_arithmetic.PERFORMERS:
        row[f"{backend} − softmax at {longest} epochs"] = (
            gap_interval(at_end[backend]) if backend in at_end else "not in this pilot"
        )
    return row, gap_pilot.verdict_of(params, found, reports_root), readings(params, found["top1"], decided)


def readings(params, top1: dict, decided: list[dict]) -> dict:
    """What the overview's sentences read of one pilot: `gaps`, each Performer's gap at the longest budget as
    (mean, interval's lower bound or None with one seed, backend); per Performer the per-seed gaps at the
    shortest budget (`early`) and their change between the two longest (`moved`); every run's gain in top-1
    between those two (`gains`); the three `budgets` (shortest, second longest, longest); and per Performer
    the per-seed gaps at every budget (`by_budget`, for the figure)."""
    budgets = gap_pilot.pilot_budgets(params)
    shortest, short, longest = budgets[0], budgets[-2] if len(budgets) > 1 else budgets[0], budgets[-1]
    backends = [r["backend"] for r in decided]
    seeds, variants = list(params.seeds), ["softmax+ape", *(f"{b}+ape" for b in backends)]
    return {
        "gaps": [(r["mean gap"], (_bounds(r) or (None,))[0], r["backend"]) for r in decided],
        "early": {b: gap_arithmetic.seed_gaps(top1, seeds, shortest, b) for b in backends},
        "moved": {b: gap_arithmetic.gap_changes(top1, seeds, short, longest, b) for b in backends},
        "gains": gap_arithmetic.budget_gains(top1, variants, seeds, short, longest),
        "budgets": (shortest, short, longest),
        "by_budget": {b: {e: gap_arithmetic.seed_gaps(top1, seeds, e, b) for e in budgets} for b in backends},
        "top1": top1,
    }


def _standing(complete: bool, ended: str, waiting: int) -> str:
    """Why a pilot's go/no-go is final or still interim, after it (gap_pilot.budget_reading's ended, waiting)."""
    if complete:
        return ""
    if ended:
        return f" (budget spent at {ended})"
    if waiting:
        return f" (interim: budget spent, {waiting} started run(s) finish first)"
    return " (interim)"


def write_overview(reports_root=None) -> list[str]:
    """reports/gap_pilots.md (every pilot of the order, a line each) and its figure gap_pilots.png (every
    Performer's gap per budget, plots.pilot_gaps_figure); returns the lines."""
    from analysis.plots import pilot_gaps_figure, save_png

    folder = reports_root or records.reports_root()
    rows, standing, trend, series = overview_rows(reports_root)
    lines = overview_lines(reports_root, (rows, standing, trend, series))
    records.write_text(folder / OVERVIEW, "\n".join(lines) + "\n")
    if series:
        save_png(pilot_gaps_figure(series, gap_pilot.GO_GAP), folder / FIGURE)
    return lines


def overview_rows(reports_root=None) -> tuple[list[dict], str, str, list[dict]]:
    """Every pilot of the order, a row each (overview_row, its gaps' intervals pooled over the pilots' cells:
    pilot_answer); where the order stands, in a sentence; what the records say beyond the go/no-go (softmax's
    lead per seed pair and its growth, the tasks, equal training time; '' before any pilot has two budgets);
    and each Performer's per-seed gaps per budget and pilot, the figure's series ({"pilot", "backend", "gaps"})."""
    rows, waiting, standing, gaps, reads, series, params_of = [], None, "", [], [], [], []
    for preset in pilot_order():
        row, verdict, read = overview_row(preset, reports_root, before=waiting)
        rows.append(row)
        gaps += [(*gap, preset) for gap in read["gaps"]]
        reads.append(read)
        params_of.append(preset)
        series += [{"pilot": preset, "backend": b, "gaps": by} for b, by in read["by_budget"].items()]
        if waiting is None and verdict != "NO-GO":
            waiting = preset  # the order stops here until this pilot ends NO-GO
            standing = (
                f"**GO on `{preset}`**: a Performer is behind softmax by at least {gap_pilot.GO_GAP} points there; "
                "by the pre-registered order the factorial is pre-registered on its task next."
                if verdict == "GO"
                else f"**The order stands at `{preset}`** (runs finished: {rows[-1]['runs']}): not yet answered; "
                "no pilot has opened a gap so far, and the pilots after it train only if it ends NO-GO."
            )
    pooled = pilot_answer.pooled_sd([by[read["budgets"][-1]] for read in reads for by in read["by_budget"].values()])
    if pooled:
        gaps = [
            (mean, low if len(by[read["budgets"][-1]]) > 1 else None, backend, preset)
            for preset, read in zip(params_of, reads, strict=True)
            for backend, by in read["by_budget"].items()
            if by[read["budgets"][-1]]
            for mean, low, _ in [pilot_answer.pooled_interval(by[read["budgets"][-1]], pooled)]
        ]
    for row, read in zip(rows, reads, strict=True):
        for backend, by in read["by_budget"].items():
            row[f"{backend} − softmax at {read['budgets'][-1]} epochs"] = pilot_answer.interval_text(
                by[read["budgets"][-1]], pooled
            )
    trend = training_trend(reads)
    if trend:
        trend = "\n\n".join(
            p
            for p in (
                trend,
                lead_line(params_of, reads),
                tasks_line(params_of, reads, reports_root),
                draws_line(params_of, reports_root),
            )
            if p
        )
    return rows, standing or no_gap_anywhere(gaps, pooled), trend, series


def lead_line(presets: list[str], reads: list[dict]) -> str:
    """Per pilot in which softmax led in every seed pair at the longest budget: the gaps' range and, if the lead
    grew from the second longest budget in every pair, the change with a pooled interval."""
    changes = pilot_answer.pooled_sd([c for read in reads for c in read["moved"].values()])
    parts = []
    for preset, read in zip(presets, reads, strict=True):
        shortest, short, longest = read["budgets"] or (None, None, None)
        at_end = {b: by[longest] for b, by in read["by_budget"].items() if by.get(longest)}
        values = [g for found in at_end.values() for g in found]
        if not values or max(values) >= 0:
            continue
        pairs = ", ".join(f"{b} {len(found)} of {len(found)}" for b, found in at_end.items())
        line = (
            f"On `{preset}` softmax led in every seed pair at {longest} epochs ({pairs}; "
            f"{signed(max(values))} to {signed(min(values))} points)"
        )
        moved = read["moved"]
        if moved and all(v < 0 for found in moved.values() for v in found):
            grown = "; ".join(f"{b} {pilot_answer.interval_text(found, changes)}" for b, found in moved.items())
            line += f", and its lead grew from {short} to {longest} epochs in every pair ({grown})"
        parts.append(line + ".")
    if not parts:
        return ""
    return " ".join(parts) + f" Intervals: {pilot_answer.pooling_note(changes)} for the changes."


def tasks_line(presets: list[str], reads: list[dict], reports_root=None) -> str:
    """What the pilots' tasks are (each canvas once), FAVOR+'s setting, and each Performer's accuracy at
    softmax's training time where the side-by-side costs cover the pilot's model (pilot_answer)."""
    from rpevit.lab.params import load_params

    tasks, timed, sources = {}, [], set()
    root = reports_root or records.reports_root()
    for preset, read in zip(presets, reads, strict=True):
        params = load_params(preset)
        canvas, favor = pilot_answer.canvas_task(params)
        tasks.setdefault(canvas, []).append(favor)
        source = pilot_answer.cost_source(root, params)
        costs = pilot_answer.training_costs(root, params, source)
        for backend in read["by_budget"]:
            if found := pilot_answer.equal_time(params, read["top1"], costs, backend):
                timed.append(pilot_answer.equal_time_text(backend, found, preset))
                sources.add(source.as_posix())
    favors = sorted({f for found in tasks.values() for f in found})
    line = f"Tasks: {'; '.join(tasks)}; FAVOR+ with {' or '.join(favors)} in every pilot."
    if timed:
        line += (
            " " + pilot_answer.EQUAL_TIME.format(source=" and reports/".join(sorted(sources))) + "; ".join(timed) + "."
        )
    return line


def _count(values: dict[str, list[float]], sign: int) -> str:
    """'favor 7 of 8, relu 2 of 3': per backend, how many of its per-seed values have `sign`."""
    return ", ".join(
        f"{backend} {sum(v * sign > 0 for v in found)} of {len(found)}" for backend, found in values.items() if found
    )


def draws_line(presets: list[str], reports_root=None) -> str:
    """The pilots' FAVOR+ models under fresh draws of ω where measured (feature_draws.pilots_sentence, with the
    pilots' chance level where they share one); reports/gap_pilots.md keeps it, the README leaves it out."""
    from rpevit.lab.params import load_params

    chances = {100 / dataset_info(load_params(p).datasets[0]).num_classes for p in presets}
    chance = chances.pop() if len(chances) == 1 else None
    return feature_draws.pilots_sentence(presets, reports_root or records.reports_root(), chance)


def training_trend(reads: list[dict]) -> str:
    """How the gaps moved with training across every pilot (their `readings`, in order): per Performer, the seed pairs
    it was ahead in at the shortest budget, those whose gap moved toward softmax between the two longest, and
    the range of every run's gain between those — what a go/no-go at the longest budget cannot see."""
    early, moved, gains, budgets = {}, {}, [], set()
    for read in reads:
        for backend, values in read["early"].items():
            early.setdefault(backend, []).extend(values)
        for backend, values in read["moved"].items():
            moved.setdefault(backend, []).extend(values)
        gains += read["gains"]
        budgets.add(read["budgets"])
    if not gains or not any(moved.values()):
        return ""
    shortest, short, longest = (
        budgets.pop() if len(budgets) == 1 else ("the shortest", "the second longest", "the longest")
    )
    return (
        f"{TREND}, seed pairs in which the Performer was ahead of softmax at {shortest} epochs: "
        f"{_count(early, +1)}; in which its gap moved toward softmax from {short} to {longest} epochs: "
        f"{_count(moved, -1)}. Every run still gained {signed(min(gains))} to {signed(max(gains))} points of top-1 "
        f"from {short} to {longest} epochs: no pilot trained to the end of its gains, so whether a longer budget "
        "opens a gap is untested."
    )


def no_gap_anywhere(gaps: list[tuple], pooled: dict | None = None) -> str:
    """The answer once every pilot ended NO-GO, from each Performer's gap at a pilot's longest budget
    ((mean, lower bound or None, backend, pilot) each; lower bounds from the pooled SD where given): the
    largest mean deficit, and whether every interval excludes a gap of GO_GAP — said as measured, at these
    budgets only."""
    go = gap_pilot.GO_GAP
    deepest = min(gaps, default=None)
    if deepest is None or deepest[0] >= 0:
        furthest = "no Performer was behind softmax on average at a pilot's longest budget"
    else:
        gap, _, backend, preset = deepest
        furthest = f"the furthest behind on average was {signed(gap)} points ({backend} on `{preset}`)"
    bounds = [(low, backend, preset) for _, low, backend, preset in gaps if low is not None]
    excluded = ""
    if bounds:
        low, backend, preset = min(bounds)
        how = (
            f"seed SD {pooled['sd']:.2f} pooled over {pooled['cells']} cells, df {pooled['df']}"
            + (f", Bartlett p {pooled['bartlett_p']:.2f}" if not math.isnan(pooled["bartlett_p"]) else "")
            if pooled
            else "t over each cell's seeds"
        )
        excluded = (
            f" Every 95 % interval ({how}) excludes a gap of {go} points (the lowest bound is {signed(low)}, "
            f"{backend} on `{preset}`)."
            if low > -go
            else f" With so few seeds a gap of {go} points is not excluded (the lowest interval bound reaches "
            f"{signed(low)}, {backend} on `{preset}`)."
        )
    return (
        f"**No Performer was ≥ {go} points behind softmax at a pilot's longest budget (32 epochs)**: every pilot of "
        f"the pre-registered order ended NO-GO, and {furthest}.{excluded} That is no gap of the size the rule asks "
        "at these budgets, not no gap: where softmax leads, and how its lead moved with training, follows the table."
    )


OVERVIEW_NOTE = (
    "Test top-1 of each Performer with APE minus softmax with APE, in points (negative: softmax ahead), at "
    "each pilot's longest budget; mean over seeds with a 95 % t-interval (the seed is the unit). Runs: "
    "finished of planned, and those in flight (started, here or parked; their curves so far are in the "
    "pilot's report). The "
    f"pre-registered rule: GO when a Performer's mean gap is ≤ −{gap_pilot.GO_GAP} points (interim until "
    "every run has finished); a NO-GO hands on to the next pilot."
)


def overview_lines(reports_root=None, overview: tuple | None = None) -> list[str]:
    """The lines of reports/gap_pilots.md, from the pilots' records (or their `overview_rows`, if read)."""
    rows, standing, trend, series = overview or overview_rows(reports_root)
    return [
        "# The gap pilots, in their pre-registered order",
        "",
        OVERVIEW_NOTE + " Each pilot's own report (`python -m campaign gap-pilot <pilot>`, or notebook "
        "35_gap_pilots) has every budget and run.",
        "",
        standing,
        "",
        *markdown_table(rows, list(rows[0])).rstrip("\n").split("\n"),
        *(["", trend] if trend else []),
        *(
            ["", f"![Every Performer's gap per budget, every pilot: seeds as dots, their mean as a line]({FIGURE})"]
            if series
            else []
        ),
        *longer_lines(reports_root),
    ]


def longer_lines(reports_root=None) -> list[str]:
    """The overview's last paragraph: each longer study that went on from the pilots (long_study.QUOTED), in its
    report's `**In one line**`, where its report exists."""
    root = reports_root or records.reports_root()
    reports = {name: root / name / "README.md" for name in long_study.QUOTED if (root / name / "README.md").is_file()}
    said = [
        line.removeprefix(readme_blocks.ONE_LINE)
        for report in reports.values()
        for line in report.read_text().splitlines()
        if line.startswith(readme_blocks.ONE_LINE)
    ]
    if not said:
        return []
    links = ", ".join(f"[{name}]({name}/README.md)" for name in reports)
    return ["", f"{LONGER} after these pilots, each pre-registered in its own preset ({links}): " + " ".join(said)]


def readme_block(lines: list[str]) -> list[str]:
    """What the README quotes of the overview's lines: where the order stands, the table, then the paragraphs
    after it but the pilots' seed-pair counts (TREND), their models under fresh random features (draws_line) and
    the longer studies (LONGER: the README's long block quotes them), which reports/gap_pilots.md keeps, and
    the figure (its link is relative to reports/, so the README links it itself)."""
    lines = "\n".join(lines).split("\n")  # one paragraph per line, as the file holds them
    standing = next(line for line in lines if line.startswith("**"))
    table = [line for line in lines if line.startswith("|")]
    left_out = ("![", TREND, feature_draws.PILOTS_LEAD, LONGER)
    after = [line for line in lines[lines.index(table[-1]) + 1 :] if not line.startswith(left_out)]
    after = [line for i, line in enumerate(after) if line or (i + 1 < len(after) and after[i + 1])]
    return [standing, "", *table, *after]


def sync_readme(readme, lines: list[str]) -> bool:
    """Put the overview's table into `readme`'s pilots block (<!-- pilots: … --> … <!-- /pilots -->, the
    project's README); True if it changed."""
    return readme_blocks.fill(readme, "pilots", "\n".join(readme_block(lines)) + "\n")


def check_is_pilot(preset: str) -> None:
    """One UserError, before anything is read or written, unless `preset` is one of the gap pilots (a
    pilot's report replaces reports/<preset>/README.md: on another study it would overwrite its report)."""
    name = Path(str(preset)).stem
    if name not in gap_pilot.GAP_PILOTS:
        raise UserError(
            f"gap-pilot reports a gap pilot, and {preset!r} is not one (its report would replace "
            f"reports/{name}/README.md). The pilots: {', '.join(gap_pilot.GAP_PILOTS)}. A study's own report: "
            f"python -m rpevit notebooks {name} --no-train."
        )


def add_parser(sub) -> None:
    """The `gap-pilot` sub-command's arguments."""
    gap = sub.add_parser("gap-pilot", help="a gap pilot's report: go/no-go, gaps per budget, seeds needed")
    gap.add_argument("params", nargs="?", default=FIRST_PILOT, help="the pilot's preset")
    gap.add_argument("--next", action="store_true", help="print only the pilot its finished NO-GO hands on to")
    gap.add_argument("--overview", action="store_true", help=f"every pilot of the order: reports/{OVERVIEW}")
    gap.add_argument(
        "--standing", action="store_true", help="print only the pilot the order stands at (nothing once it ends)"
    )


def command(args) -> int:
    """`python -m campaign gap-pilot …`: the pilot's report (reports/<preset>/README.md), with --overview
    every pilot's line (reports/gap_pilots.md, and the README's table of it), with --next only the next
    pilot's name (or nothing), with --standing only the pilot to train now (or nothing)."""
    from rpevit.lab.params import PROJECT_ROOT

    if not (args.overview or args.standing):
        check_is_pilot(args.params)
    if args.next:
        print(gap_pilot.next_pilot(args.params) or "")
    elif args.standing:
        print(standing_pilot() or "")
    elif args.overview:
        lines = write_overview()
        print("\n".join(lines))
        if records.reports_root() == PROJECT_ROOT / "reports":  # the project's reports: its README quotes them
            changed = sync_readme(PROJECT_ROOT / "README.md", lines)
            print(f"README.md's pilots table {'updated' if changed else 'already matches'}")
    else:
        print("\n".join(gap_pilot.write_report(args.params)))
        name = Path(str(args.params)).stem
        if name in long_study.QUOTED and records.reports_root() == PROJECT_ROOT / "reports":
            for quoting in ("README.md", "docs/results.md"):  # both say the study's verdict in its report's words
                changed = long_study.sync_readme(PROJECT_ROOT / quoting, records.reports_root() / name / "README.md")
                print(f"{quoting}'s line of {name} {'updated' if changed else 'already matches'}")
    return 0
